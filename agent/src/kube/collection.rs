//! The kinds the agent lists and watches cluster-wide (Nodes for routes; Pods, Namespaces
//! and NetworkPolicies for NetworkPolicy), and one watch event of any of them. Each kind
//! says where it lives and what of its objects is kept; the list, the watch and their
//! fleet rules (`watcher`) are written once for all.

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::kube::nodes::{NodeInfo, RawNode};

/// A cluster-wide collection of the API.
pub trait Collection {
    /// What an item decodes to (only the fields kept).
    type Raw: DeserializeOwned;
    /// What the agent keeps of it.
    type Object;
    /// The collection's path ("/api/v1/nodes").
    const PATH: &'static str;
    /// Its name in messages ("node").
    const NAME: &'static str;
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
model_collection!(
    NetworkPolicies,
    netpol::model::NetworkPolicy,
    "/apis/networking.k8s.io/v1/networkpolicies",
    "networkpolicy"
);

/// One page of a list.
#[derive(Deserialize)]
#[serde(bound = "R: DeserializeOwned")]
pub(crate) struct ListPage<R> {
    #[serde(default)]
    pub metadata: ListMeta,
    #[serde(default = "Vec::new")]
    pub items: Vec<R>,
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
