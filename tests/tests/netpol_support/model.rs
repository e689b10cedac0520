//! The upstream suite's model (test/e2e/network/netpol): namespaces x, y, z labelled
//! `ns: <name>`, pods a, b, c in each labelled `pod: <name>`, each serving TCP, UDP and
//! SCTP on 80 and 81 with named container ports `serve-<port>-<proto>`. The objects are
//! kept here as the API's JSON: the same values go to the stub API server and, parsed by
//! netpol, to the truth table.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{Value, json};

pub const NAMESPACES: [&str; 3] = ["x", "y", "z"];
pub const PORTS: [u16; 2] = [80, 81];
pub const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// Each pod's node (0-based): every node runs three, x/a and x/b share node-1 (a pair
/// in one namespace through the bridge), x/a and z/a too (across namespaces), and every
/// namespace has pods on two or three nodes (pairs across nodes).
pub const PLACEMENT: [(&str, usize); 9] = [
    ("x/a", 0),
    ("x/b", 0),
    ("x/c", 1),
    ("y/a", 1),
    ("y/b", 2),
    ("y/c", 2),
    ("z/a", 0),
    ("z/b", 1),
    ("z/c", 2),
];

/// `ns/name` keys in the model's order.
pub fn pod_keys() -> Vec<String> {
    PLACEMENT.iter().map(|(k, _)| k.to_string()).collect()
}

/// `(namespace, name)` of a `ns/name` key.
pub fn split(key: &str) -> (&str, &str) {
    key.split_once('/').expect("a pod key is ns/name")
}

pub fn default_namespace_labels(ns: &str) -> Value {
    json!({ "ns": ns })
}

pub fn default_pod_labels(name: &str) -> Value {
    json!({ "pod": name })
}

pub fn namespace_object(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": name, "labels": labels },
    })
}

/// A running pod as the API shows it; one container per port and protocol, as upstream.
pub fn pod_object(key: &str, labels: Value, node: &str, ips: [IpAddr; 2]) -> Value {
    let (ns, name) = split(key);
    let containers: Vec<Value> = PORTS
        .iter()
        .flat_map(|port| {
            PROTOCOLS.iter().map(move |proto| {
                let lower = proto.to_lowercase();
                json!({
                    "name": format!("cont-{port}-{lower}"),
                    "image": "netpol-server",
                    "ports": [{
                        "name": format!("serve-{port}-{lower}"),
                        "containerPort": port,
                        "protocol": proto,
                    }],
                })
            })
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": { "nodeName": node, "containers": containers },
        "status": {
            "phase": "Running",
            "podIP": ips[0].to_string(),
            "podIPs": [{ "ip": ips[0].to_string() }, { "ip": ips[1].to_string() }],
        },
    })
}

pub fn policy_object(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": { "name": name, "namespace": ns },
        "spec": spec,
    })
}

/// The objects of the cluster as last sent to the API server.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    /// By name.
    pub namespaces: BTreeMap<String, Value>,
    /// By `ns/name`.
    pub pods: BTreeMap<String, Value>,
    /// By `ns/name`.
    pub policies: BTreeMap<String, Value>,
    /// Node name -> its own addresses (lan and bridge gateway, both families).
    pub nodes: BTreeMap<String, Vec<IpAddr>>,
}

impl Objects {
    /// The view netpol's oracle reads, from the same JSON.
    pub fn cluster(&self) -> netpol::cluster::Cluster {
        use netpol::model::{Namespace, NetworkPolicy, Pod};
        const OWN: &str = "the model's own objects parse";
        let namespaces: Vec<Namespace> = (self.namespaces.values())
            .map(|v| serde_json::from_value(v.clone()).expect(OWN))
            .collect();
        let pods: Vec<Pod> = (self.pods.values())
            .map(|v| serde_json::from_value(v.clone()).expect(OWN))
            .collect();
        let policies: Vec<NetworkPolicy> = (self.policies.values())
            .map(|v| serde_json::from_value(v.clone()).expect(OWN))
            .collect();
        let c = netpol::cluster::Cluster::new(&namespaces, &pods, &policies, self.nodes.clone());
        assert!(
            c.refused.is_empty(),
            "a case's policy is refused by netpol (the case is wrong): {:?}",
            c.refused
        );
        c
    }
}
