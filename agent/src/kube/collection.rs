//! The kinds the agent lists and watches cluster-wide (Nodes for routes; Pods, Namespaces
//! and NetworkPolicies for NetworkPolicy), and one watch event of any of them. Each kind
//! says where it lives and what of its objects is kept; the list, the watch and their
//! fleet rules (`watcher`) are written once for all.

use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{DeserializeOwned, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::kube::nodes::{NodeInfo, RawNode};

/// A cluster-wide collection of the API.
pub trait Collection {
    /// What an item decodes to (only the fields kept).
    type Raw: DeserializeOwned;
    /// What the agent keeps of it (made on the list's parser threads, `parse`).
    type Object: Send;
    /// The collection's path ("/api/v1/nodes").
    const PATH: &'static str;
    /// Its name in messages ("node").
    const NAME: &'static str;
    /// A list page is decoded as it streams in; past this many bytes it is refused. The
    /// watch cache answers a list in one page whatever the `limit`.
    const MAX_PAGE: u64 = 256 << 20;
    /// One list page, request to last byte (a dead connection is caught sooner by TCP
    /// keepalive).
    const LIST_TIMEOUT: Duration = Duration::from_secs(15);
    fn name(raw: &Self::Raw) -> &str;
    fn resource_version(raw: &Self::Raw) -> &str;
    fn keep(raw: Self::Raw) -> Self::Object;
}

pub struct Nodes;

impl Collection for Nodes {
    type Raw = RawNode;
    type Object = NodeInfo;
    const PATH: &'static str = "/api/v1/nodes";
    const NAME: &'static str = "node";
    fn name(raw: &RawNode) -> &str {
        &raw.metadata.name
    }
    fn resource_version(raw: &RawNode) -> &str {
        &raw.metadata.resource_version
    }
    fn keep(raw: RawNode) -> NodeInfo {
        raw.info()
    }
}

/// The kinds NetworkPolicy is computed from, kept as `netpol::model` decodes them.
macro_rules! model_collection {
    ($kind:ident, $model:ty, $path:literal, $name:literal) => {
        pub struct $kind;

        impl Collection for $kind {
            type Raw = $model;
            type Object = $model;
            const PATH: &'static str = $path;
            const NAME: &'static str = $name;
            fn name(raw: &$model) -> &str {
                &raw.metadata.name
            }
            fn resource_version(raw: &$model) -> &str {
                &raw.metadata.resource_version
            }
            fn keep(raw: $model) -> $model {
                raw
            }
        }
    };
}

/// Pods, kept as NetworkPolicy reads them (addresses, labels, node, named ports): the
/// rest of a Pod object (a few KiB) is dropped as it arrives.
pub struct Pods;

impl Collection for Pods {
    type Raw = netpol::model::Pod;
    type Object = netpol::cluster::Pod;
    const PATH: &'static str = "/api/v1/pods";
    const NAME: &'static str = "pod";
    /// 150,000 Pods of a few KiB each are one page of about a GB from the watch cache
    /// (735 MB measured with 4.9 KB Pods), read in a minute or more.
    const MAX_PAGE: u64 = 16 << 30;
    const LIST_TIMEOUT: Duration = Duration::from_secs(600);
    fn name(raw: &netpol::model::Pod) -> &str {
        &raw.metadata.name
    }
    fn resource_version(raw: &netpol::model::Pod) -> &str {
        &raw.metadata.resource_version
    }
    fn keep(raw: netpol::model::Pod) -> netpol::cluster::Pod {
        netpol::cluster::Pod::from_object(&raw)
    }
}

model_collection!(
    Namespaces,
    netpol::model::Namespace,
    "/api/v1/namespaces",
    "namespace"
);
/// NetworkPolicies, kept checked (`netpol::validate`) as each arrives: the first list's
/// 10,000 decoded policies were ~30 MB beside their checked forms until the engine had
/// loaded them.
pub struct NetworkPolicies;

impl Collection for NetworkPolicies {
    type Raw = netpol::model::NetworkPolicy;
    type Object = netpol::validate::Checked;
    const PATH: &'static str = "/apis/networking.k8s.io/v1/networkpolicies";
    const NAME: &'static str = "networkpolicy";
    fn name(raw: &netpol::model::NetworkPolicy) -> &str {
        &raw.metadata.name
    }
    fn resource_version(raw: &netpol::model::NetworkPolicy) -> &str {
        &raw.metadata.resource_version
    }
    fn keep(raw: netpol::model::NetworkPolicy) -> netpol::validate::Checked {
        netpol::validate::Policy::from_object(&raw)
    }
}

/// One page of a list; `null` items are none.
#[derive(Deserialize)]
#[serde(bound = "")]
pub(crate) struct ListPage<C: Collection> {
    #[serde(default)]
    pub metadata: ListMeta,
    #[serde(default = "Option::default")]
    pub items: Option<Kept<C>>,
}

/// A list's items as kept, each converted as soon as it is decoded (a list of 150,000
/// Pods never exists as decoded Pod objects at once). An object without a name is not
/// one (and could not be told apart from another): skipped.
pub(crate) struct Kept<C: Collection>(pub Vec<C::Object>);

impl<C: Collection> Kept<C> {
    pub fn take(&mut self, raw: C::Raw) {
        self.0.extend(Kept::<C>::one(raw));
    }

    /// What is kept of one item; None: not an object.
    pub fn one(raw: C::Raw) -> Option<C::Object> {
        (!C::name(&raw).is_empty()).then(|| C::keep(raw))
    }
}

impl<'de, C: Collection> Deserialize<'de> for Kept<C> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Kept<C>, D::Error> {
        struct Items<C>(PhantomData<C>);
        impl<'de, C: Collection> Visitor<'de> for Items<C> {
            type Value = Kept<C>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a list of {}s", C::NAME)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kept<C>, A::Error> {
                let mut out = Kept(Vec::with_capacity(seq.size_hint().unwrap_or(0)));
                while let Some(raw) = seq.next_element::<C::Raw>()? {
                    out.take(raw);
                }
                Ok(out)
            }
        }
        d.deserialize_seq(Items(PhantomData))
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct ListMeta {
    #[serde(rename = "resourceVersion")]
    pub resource_version: String,
    #[serde(rename = "continue")]
    pub continue_token: String,
}

/// One line of a watch stream.
#[derive(Debug, PartialEq)]
pub enum WatchEvent<T = NodeInfo> {
    /// ADDED or MODIFIED: the object as it now is.
    Applied(T, String),
    Deleted(T, String),
    /// Only a newer resourceVersion to resume from.
    Bookmark(String),
    /// ERROR: a Status (410: the resourceVersion is too old, re-list).
    Error {
        code: u16,
        message: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Meta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MetaOnly {
    metadata: Meta,
}

/// The `object` of an ERROR watch event: a Status.
#[derive(Deserialize, Default)]
#[serde(default)]
struct StatusObject {
    code: u16,
    message: String,
}

/// Decodes one watch event of `C`; unknown types and broken objects are errors. Two passes
/// over the line (the type, then the object as what the type says), so no generic JSON
/// tree of the object is ever built.
pub fn decode_event<C: Collection>(line: &[u8]) -> Result<WatchEvent<C::Object>, String> {
    #[derive(Deserialize)]
    struct Kind {
        #[serde(rename = "type")]
        kind: String,
        #[serde(rename = "object")]
        _object: serde::de::IgnoredAny,
    }
    #[derive(Deserialize)]
    struct Object<T> {
        object: T,
    }
    let kind = serde_json::from_slice::<Kind>(line)
        .map_err(|e| format!("watch event: {e}"))?
        .kind;
    let named = || {
        let raw = serde_json::from_slice::<Object<C::Raw>>(line)
            .map(|o| o.object)
            .map_err(|e| format!("watch event {kind}: {e}"))?;
        if C::name(&raw).is_empty() {
            return Err(format!(
                "watch event {kind}: a {} without metadata.name",
                C::NAME
            ));
        }
        let rv = C::resource_version(&raw).to_string();
        Ok((C::keep(raw), rv))
    };
    match kind.as_str() {
        "ADDED" | "MODIFIED" => named().map(|(o, rv)| WatchEvent::Applied(o, rv)),
        "DELETED" => named().map(|(o, rv)| WatchEvent::Deleted(o, rv)),
        "BOOKMARK" => serde_json::from_slice::<Object<MetaOnly>>(line)
            .map(|o| WatchEvent::Bookmark(o.object.metadata.resource_version))
            .map_err(|e| format!("watch event {kind}: {e}")),
        "ERROR" => {
            let s = serde_json::from_slice::<Object<StatusObject>>(line)
                .map_err(|e| format!("watch ERROR event: {e}"))?
                .object;
            Ok(WatchEvent::Error {
                code: s.code,
                message: s.message,
            })
        }
        other => Err(format!("watch event of unknown type {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_keeps_named_items_only_and_null_items_are_none() {
        let page: ListPage<Pods> = serde_json::from_str(
            r#"{"metadata":{"resourceVersion":"7","continue":"t"},"items":[
                {"metadata":{"name":"a","namespace":"x"},"status":{"podIPs":[{"ip":"10.1.1.1"}]}},
                {"metadata":{"namespace":"x"}}]}"#,
        )
        .unwrap();
        let items = page.items.unwrap().0;
        assert_eq!(items.len(), 1);
        assert_eq!((items[0].name.as_str(), items[0].ips.len()), ("a", 1));
        assert_eq!(page.metadata.resource_version, "7");
        assert_eq!(page.metadata.continue_token, "t");
        let empty: ListPage<Nodes> = serde_json::from_str(r#"{"items":null}"#).unwrap();
        assert!(empty.items.is_none());
    }
}
