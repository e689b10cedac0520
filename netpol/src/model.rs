//! The Kubernetes objects as the API sends them (JSON, camelCase), decoded to the few
//! fields policy enforcement reads. Unknown fields are ignored; `null` reads as absent.
//! Nothing here is checked: `validate` decides what can be enforced.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// `null` and a missing field both decode to the type's default (the API omits empty
/// fields, but a hand-written object or an older server may send `null`).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A JSON object of strings as its pairs in key order: a selector's map of one label was a
/// 544-byte tree node, and the 10,000 policies of the first list held ~50 MB of them.
fn string_pairs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    let map: BTreeMap<String, String> = nullable(d)?;
    Ok(map.into_iter().collect())
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    #[serde(deserialize_with = "nullable")]
    pub namespace: String,
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub resource_version: String,
    /// RFC 3339 in UTC at second precision (`2024-05-01T10:00:00Z`), so text order is time
    /// order. Decides which of two pods claiming one address keeps it (`cluster::owns`).
    #[serde(deserialize_with = "nullable")]
    pub creation_timestamp: String,
    #[serde(deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// In key order, each key once.
    #[serde(deserialize_with = "string_pairs")]
    pub match_labels: Vec<(String, String)>,
    #[serde(deserialize_with = "nullable")]
    pub match_expressions: Vec<Requirement>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Requirement {
    #[serde(deserialize_with = "nullable")]
    pub key: String,
    /// Kept as text: an operator we do not know is refused by `validate`, by name.
    #[serde(deserialize_with = "nullable")]
    pub operator: String,
    #[serde(deserialize_with = "nullable")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkPolicy {
    pub metadata: ObjectMeta,
    pub spec: PolicySpec,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicySpec {
    pub pod_selector: LabelSelector,
    /// `None` when omitted: then Ingress, plus Egress when `egress` has rules.
    pub policy_types: Option<Vec<String>>,
    #[serde(deserialize_with = "nullable")]
    pub ingress: Vec<IngressRule>,
    #[serde(deserialize_with = "nullable")]
    pub egress: Vec<EgressRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressRule {
    #[serde(deserialize_with = "nullable")]
    pub from: Vec<Peer>,
    #[serde(deserialize_with = "nullable")]
    pub ports: Vec<PolicyPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EgressRule {
    #[serde(deserialize_with = "nullable")]
    pub to: Vec<Peer>,
    #[serde(deserialize_with = "nullable")]
    pub ports: Vec<PolicyPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Peer {
    pub pod_selector: Option<LabelSelector>,
    pub namespace_selector: Option<LabelSelector>,
    pub ip_block: Option<IpBlock>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IpBlock {
    #[serde(deserialize_with = "nullable")]
    pub cidr: String,
    #[serde(deserialize_with = "nullable")]
    pub except: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyPort {
    /// `None` means TCP (the API's default).
    pub protocol: Option<String>,
    pub port: Option<IntOrString>,
    pub end_port: Option<i64>,
}

/// The API's `intstr.IntOrString`: a port number or a container port's name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i64),
    Str(String),
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: PodSpec,
    pub status: PodStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    #[serde(deserialize_with = "nullable")]
    pub node_name: String,
    #[serde(deserialize_with = "nullable")]
    pub host_network: bool,
    #[serde(deserialize_with = "nullable")]
    pub containers: Vec<Container>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub ports: Vec<ContainerPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerPort {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub container_port: i64,
    /// `None` means TCP.
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStatus {
    #[serde(deserialize_with = "nullable")]
    pub phase: String,
    /// The older single address, read when `podIPs` is empty.
    #[serde(rename = "podIP", deserialize_with = "nullable")]
    pub pod_ip: String,
    #[serde(rename = "podIPs", deserialize_with = "nullable")]
    pub pod_ips: Vec<PodIp>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodIp {
    #[serde(deserialize_with = "nullable")]
    pub ip: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Namespace {
    pub metadata: ObjectMeta,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_labels_are_pairs_in_key_order_and_null_is_none() {
        let sel: LabelSelector =
            serde_json::from_str(r#"{ "matchLabels": { "b": "2", "a": "1" } }"#).unwrap();
        let pairs = [("a", "1"), ("b", "2")].map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(sel.match_labels, pairs);
        let sel: LabelSelector = serde_json::from_str(r#"{ "matchLabels": null }"#).unwrap();
        assert!(sel.match_labels.is_empty());
    }
}
