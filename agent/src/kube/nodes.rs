//! What the agent keeps of a Node: its name, its pod ranges and its InternalIPs, parsed
//! when it arrives (checked against the other Nodes and this node later, in `desired`).
//! Everything else in the object is skipped while it is decoded, so a cache of thousands
//! of Nodes stays a few hundred bytes per Node whatever the objects carry.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::Deserialize;

use crate::kube::podcidr;

/// Fields kept per Node are cut at these sizes (a longer value cannot be valid anyway and
/// is reported by `desired` as what it is: too many, or not an address).
const MAX_VALUES: usize = 4;
const MAX_VALUE_LEN: usize = 64;

/// One Node as the agent sees it, parsed once, when it arrives: every reconcile reads
/// every Node, and must not parse 5,000 of them again for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// `metadata.creationTimestamp` (RFC 3339, UTC, so it orders as text): of two nodes
    /// claiming one range, the older keeps it.
    pub created: String,
    /// Which field the pod ranges came from (for warnings).
    pub pod_cidrs_field: &'static str,
    /// The pod ranges, checked on their own (`podcidr::parse_ranges`), or why not.
    pub ranges: Result<Vec<IpNetwork>, String>,
    /// `status.addresses` of type InternalIP in API order, or why one is not an address.
    pub ips: Result<Vec<IpAddr>, String>,
}

impl NodeInfo {
    pub fn created_at(mut self, created: String) -> NodeInfo {
        self.created = created;
        self
    }

    /// From the raw values: `pod_cidrs` of `spec.podCIDRs`, or `[spec.podCIDR]` when only
    /// that is set (a cluster from before dual-stack), and the InternalIPs.
    pub fn new(
        name: String,
        pod_cidrs_field: &'static str,
        pod_cidrs: Vec<String>,
        internal_ips: Vec<String>,
    ) -> NodeInfo {
        let ranges = podcidr::parse_ranges(pod_cidrs_field, &pod_cidrs);
        let ips = internal_ips
            .iter()
            .map(|raw| {
                raw.parse::<IpAddr>().map_err(|_| {
                    format!("status.addresses InternalIP {raw:?} is not an IP address")
                })
            })
            .collect();
        NodeInfo {
            name,
            created: String::new(),
            pod_cidrs_field,
            ranges,
            ips,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Meta {
    pub name: String,
    #[serde(rename = "resourceVersion")]
    pub resource_version: String,
    #[serde(rename = "creationTimestamp")]
    pub created: String,
}

/// `spec`: the pod ranges. `null` is as good as missing (Go's decoding), for both fields.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Spec {
    #[serde(rename = "podCIDR")]
    pod_cidr: Option<String>,
    #[serde(rename = "podCIDRs")]
    pod_cidrs: Option<Vec<String>>,
}

impl Spec {
    /// The field the pod ranges come from and its values, by the API server's own rule
    /// (its conversion of a v1 NodeSpec): `podCIDRs` when the list has any entry, else
    /// `podCIDR` (a cluster from before dual-stack); missing, `null`, `""` and `[]` are
    /// all "no range yet".
    fn pod_cidrs(self) -> (&'static str, Vec<String>) {
        match self.pod_cidrs.filter(|c| !c.is_empty()) {
            Some(cidrs) => ("spec.podCIDRs", cidrs),
            None => ("spec.podCIDR", self.pod_cidr.into_iter().collect()),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Address {
    #[serde(rename = "type")]
    kind: String,
    address: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Status {
    addresses: Vec<Address>,
}

/// A Node object as decoded: only the fields above. The one model of a Node, for the
/// list, the watch and `--once` (`from_node_json`).
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct RawNode {
    pub(crate) metadata: Meta,
    spec: Spec,
    status: Status,
}

impl RawNode {
    pub fn info(self) -> NodeInfo {
        let (field, cidrs) = self.spec.pod_cidrs();
        let created = bounded(std::iter::once(self.metadata.created)).concat();
        NodeInfo::new(
            self.metadata.name,
            field,
            bounded(cidrs.into_iter().filter(|c| !c.is_empty())),
            bounded(
                self.status
                    .addresses
                    .into_iter()
                    .filter(|a| a.kind == "InternalIP")
                    .map(|a| a.address),
            ),
        )
        .created_at(created)
    }
}

fn bounded(values: impl Iterator<Item = String>) -> Vec<String> {
    values
        .take(MAX_VALUES)
        .map(|mut v| {
            if v.len() > MAX_VALUE_LEN {
                v = format!("{}...", v.chars().take(MAX_VALUE_LEN).collect::<String>());
            }
            v
        })
        .collect()
}

/// The node's pod ranges in API order: empty while the node has none yet, else one or
/// (dual-stack) two networks of different families. The Node is read as the watch reads
/// it ([`RawNode`]).
pub fn from_node_json(body: &[u8]) -> Result<Vec<IpNetwork>, String> {
    let node: RawNode = serde_json::from_slice(body)
        .map_err(|e| format!("the API server's Node object does not parse: {e}"))?;
    node.info().ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::collection::{Nodes, WatchEvent, decode_event};

    #[test]
    fn keeps_name_ranges_and_internal_ips_only() {
        let line = br#"{"type":"ADDED","object":{"kind":"Node","metadata":{"name":"n1",
            "resourceVersion":"7","creationTimestamp":"2026-11-30T12:00:00Z","labels":{"a":"b"}},"spec":{"podCIDR":"10.0.1.0/24",
            "podCIDRs":["10.0.1.0/24","fd00:1::/64"]},"status":{"addresses":[
            {"type":"Hostname","address":"n1"},{"type":"InternalIP","address":"192.168.0.2"},
            {"type":"ExternalIP","address":"203.0.113.9"},{"type":"InternalIP","address":"fd0::2"}],
            "images":[{"names":["x"],"sizeBytes":1}]}}}"#;
        let WatchEvent::Applied(info, rv) = decode_event::<Nodes>(line).unwrap() else {
            panic!("not applied")
        };
        assert_eq!(rv, "7");
        assert_eq!(
            info,
            NodeInfo::new(
                "n1".into(),
                "spec.podCIDRs",
                vec!["10.0.1.0/24".into(), "fd00:1::/64".into()],
                vec!["192.168.0.2".into(), "fd0::2".into()],
            )
            .created_at("2026-11-30T12:00:00Z".into())
        );
        let ranges: Vec<IpNetwork> = vec![
            "10.0.1.0/24".parse().unwrap(),
            "fd00:1::/64".parse().unwrap(),
        ];
        assert_eq!(info.ranges, Ok(ranges));
        let ips: Vec<IpAddr> = vec!["192.168.0.2".parse().unwrap(), "fd0::2".parse().unwrap()];
        assert_eq!(info.ips, Ok(ips));
    }

    #[test]
    fn legacy_pod_cidr_and_no_range() {
        let n: RawNode = serde_json::from_str(r#"{"spec":{"podCIDR":"10.0.2.0/24"}}"#).unwrap();
        let info = n.info();
        assert_eq!(info.ranges, Ok(vec!["10.0.2.0/24".parse().unwrap()]));
        assert_eq!(info.pod_cidrs_field, "spec.podCIDR");
        let n: RawNode = serde_json::from_str(r#"{"spec":{}}"#).unwrap();
        assert_eq!(n.info().ranges, Ok(vec![]));
    }

    /// The watch and `--once` read a Node's ranges by one rule, the API server's:
    /// `podCIDRs` when it has an entry, else `podCIDR`; `null` is as good as missing.
    #[test]
    fn one_pod_cidr_rule_for_the_watch_and_once() {
        for (spec, field, want) in [
            (
                r#"{"podCIDR":"10.0.1.0/24","podCIDRs":["10.0.1.0/24","fd00:1::/64"]}"#,
                "spec.podCIDRs",
                &["10.0.1.0/24", "fd00:1::/64"][..],
            ),
            (
                r#"{"podCIDR":"10.0.2.0/24"}"#,
                "spec.podCIDR",
                &["10.0.2.0/24"],
            ),
            (
                r#"{"podCIDR":"10.0.2.0/24","podCIDRs":[]}"#,
                "spec.podCIDR",
                &["10.0.2.0/24"],
            ),
            (
                r#"{"podCIDR":"10.0.2.0/24","podCIDRs":null}"#,
                "spec.podCIDR",
                &["10.0.2.0/24"],
            ),
            // A list with an entry wins, even an empty one (the API server never stores that).
            (
                r#"{"podCIDR":"10.0.2.0/24","podCIDRs":[""]}"#,
                "spec.podCIDRs",
                &[],
            ),
            (r#"{"podCIDR":null,"podCIDRs":null}"#, "spec.podCIDR", &[]),
            (r#"{"podCIDR":""}"#, "spec.podCIDR", &[]),
        ] {
            let node = format!(r#"{{"metadata":{{"name":"n"}},"spec":{spec}}}"#);
            let line = format!(r#"{{"type":"ADDED","object":{node}}}"#);
            let Ok(WatchEvent::Applied(info, _)) = decode_event::<Nodes>(line.as_bytes()) else {
                panic!("{spec}: not applied")
            };
            let want: Vec<IpNetwork> = want.iter().map(|c| c.parse().unwrap()).collect();
            assert_eq!(
                (info.pod_cidrs_field, &info.ranges),
                (field, &Ok(want.clone())),
                "{spec}"
            );
            assert_eq!(from_node_json(node.as_bytes()), Ok(want), "{spec}");
        }
    }

    #[test]
    fn huge_fields_are_cut() {
        let many: Vec<String> = (0..1000).map(|i| format!("10.{i}.0.0/16")).collect();
        let long = "1".repeat(10_000);
        let body = serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {"podCIDRs": many},
            "status": {"addresses": [{"type": "InternalIP", "address": long}]}
        });
        let info = serde_json::from_value::<RawNode>(body).unwrap().info();
        let ranges = info.ranges.unwrap_err();
        assert!(
            ranges.contains("more than two ranges") && ranges.len() < 200,
            "{ranges}"
        );
        let ips = info.ips.unwrap_err();
        assert!(
            ips.contains("not an IP address") && ips.len() < 200,
            "{ips}"
        );
    }

    #[test]
    fn bookmark_error_and_garbage() {
        assert_eq!(
            decode_event::<Nodes>(br#"{"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"99"}}}"#),
            Ok(WatchEvent::Bookmark("99".into()))
        );
        assert_eq!(
            decode_event::<Nodes>(br#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}}"#),
            Ok(WatchEvent::Error {
                code: 410,
                message: "too old resource version".into()
            })
        );
        for bad in [
            &b"{"[..],
            b"[]",
            br#"{"type":"WHAT","object":{}}"#,
            br#"{"type":"ADDED","object":[]}"#,
        ] {
            assert!(
                decode_event::<Nodes>(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}

#[cfg(test)]
mod from_json_tests {
    use super::from_node_json;

    fn parse(spec: &str) -> Result<Vec<String>, String> {
        let body = format!(r#"{{"kind":"Node","apiVersion":"v1","spec":{spec}}}"#);
        from_node_json(body.as_bytes()).map(|n| n.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn pod_cidrs_win_over_pod_cidr() {
        assert_eq!(
            parse(r#"{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24","fd00:1::/64"]}"#),
            Ok(vec!["10.244.1.0/24".into(), "fd00:1::/64".into()])
        );
        assert_eq!(
            parse(r#"{"podCIDR":"10.244.2.0/24"}"#),
            Ok(vec!["10.244.2.0/24".into()])
        );
        assert_eq!(
            parse(r#"{"podCIDRs":["fd00:2::/64"]}"#),
            Ok(vec!["fd00:2::/64".into()])
        );
    }

    #[test]
    fn no_range_yet_is_empty_not_an_error() {
        assert_eq!(parse("{}"), Ok(vec![]));
        assert_eq!(parse(r#"{"podCIDR":"","podCIDRs":[]}"#), Ok(vec![]));
        assert_eq!(from_node_json(br#"{"kind":"Node"}"#), Ok(vec![]));
    }

    #[test]
    fn malformed_ranges_name_the_field() {
        for (spec, want) in [
            (
                r#"{"podCIDR":"10.244.1.0"}"#,
                "spec.podCIDR \"10.244.1.0\" is not a CIDR",
            ),
            (
                r#"{"podCIDRs":["10.244.1.0/33"]}"#,
                "spec.podCIDRs \"10.244.1.0/33\" is not a CIDR",
            ),
            (r#"{"podCIDRs":["10.244.1.5/24"]}"#, "host bits set"),
            (r#"{"podCIDRs":["10.244.1.0/31"]}"#, "too small"),
            (
                r#"{"podCIDRs":["10.1.0.0/24","10.2.0.0/24"]}"#,
                "same family",
            ),
            (
                r#"{"podCIDRs":["10.1.0.0/24","fd00::/64","10.2.0.0/24"]}"#,
                "more than two",
            ),
            (r#"{"podCIDRs":"10.1.0.0/24"}"#, "does not parse"),
            // Go's ParseCIDR: no netmask, no sign (ipnetwork alone takes both)
            (
                r#"{"podCIDRs":["10.1.0.0/255.255.255.0"]}"#,
                "is not a CIDR",
            ),
            (r#"{"podCIDRs":["10.1.0.0/+24"]}"#, "is not a CIDR"),
        ] {
            let err = parse(spec).unwrap_err();
            assert!(err.contains(want), "{spec}: {err}");
        }
    }
}
