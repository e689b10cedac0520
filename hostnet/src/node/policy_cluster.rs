//! The cluster the NetworkPolicy tests program (fake and kernel): four dual-stack pods on
//! node `n1` in namespaces prod (team a) and dev (team b), one remote pod on `n2`, an
//! address outside the cluster, and policies covering deny-all, pod and namespace
//! selectors, an ipBlock with an except, port ranges and a named port.

use std::collections::BTreeMap;
use std::net::IpAddr;

use netpol::addr::Family;
use netpol::cluster::Cluster;
use netpol::model::{Namespace, NetworkPolicy, Pod};
use netpol::oracle::{self, Endpoint};
use serde_json::{Value, json};

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const NODE: &str = "n1";
/// The node's own addresses: its bridge (the pods' gateway) and its uplink.
pub const NODE_IPS: [&str; 4] = ["10.50.0.1", "fd50::1", "192.168.77.1", "fd77::1"];
pub const OUTSIDE: [&str; 2] = ["192.168.77.2", "fd77::2"];
/// (namespace, name, labels) of the local pods; pod i has 10.50.0.1i and fd50::1i.
pub const PODS: [(&str, &str, &str); 4] = [
    ("prod", "p1", "web"),
    ("prod", "p2", "db"),
    ("dev", "p3", "client"),
    ("dev", "p4", "web"),
];
/// What the probes try: (protocol, port).
pub const PROBES: [(u8, u16); 7] = [
    (TCP, 8080),
    (TCP, 5432),
    (TCP, 8050),
    (TCP, 9000),
    (TCP, 7000),
    (UDP, 5500),
    (UDP, 7000),
];

pub fn pod_ip(i: usize, f: Family) -> IpAddr {
    match f {
        Family::V4 => format!("10.50.0.1{}", i + 1),
        Family::V6 => format!("fd50::1{}", i + 1),
    }
    .parse()
    .unwrap()
}

pub fn outside(f: Family) -> IpAddr {
    OUTSIDE[f as usize].parse().unwrap()
}

fn pod_json(ns: &str, name: &str, app: &str, node: &str, ips: [IpAddr; 2]) -> Value {
    json!({
        "metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "ports": [
            {"name": "http", "containerPort": 8080},
            {"name": "dns", "containerPort": 5500, "protocol": "UDP"}
        ]}]},
        "status": {"phase": "Running", "podIPs": [{"ip": ips[0].to_string()}, {"ip": ips[1].to_string()}]}
    })
}

fn policies(with_db: bool) -> Vec<Value> {
    let mut out = vec![
        json!({"metadata": {"namespace": "prod", "name": "deny-all"},
               "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
        json!({"metadata": {"namespace": "prod", "name": "web-from-clients"},
               "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}},
                                               "podSelector": {"matchLabels": {"app": "client"}}}],
                                     "ports": [{"port": "http"}, {"protocol": "UDP", "port": 5000, "endPort": 5999}]}]}}),
        json!({"metadata": {"namespace": "dev", "name": "client-egress"},
               "spec": {"podSelector": {"matchLabels": {"app": "client"}}, "policyTypes": ["Egress"],
                        "egress": [
                            {"to": [{"namespaceSelector": {}}], "ports": [
                                {"port": 8000, "endPort": 8100}, {"protocol": "UDP", "port": 5500}, {"port": 5432}]},
                            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.50.0.0/24"]}},
                                    {"ipBlock": {"cidr": "::/0", "except": ["fd50::/64"]}}],
                             "ports": [{"port": 9000}]}]}}),
    ];
    if with_db {
        out.push(json!({"metadata": {"namespace": "prod", "name": "db-from-web"},
               "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                        "ingress": [
                            {"from": [{"podSelector": {"matchLabels": {"app": "web"}}},
                                      {"namespaceSelector": {"matchLabels": {"team": "b"}}}],
                             "ports": [{"port": 5432}]},
                            {"from": [{"ipBlock": {"cidr": "192.168.77.0/24", "except": ["192.168.77.2/32"]}},
                                      {"ipBlock": {"cidr": "fd77::/64"}}],
                             "ports": [{"port": 9000}, {"port": 7000}]}]}}));
        // With db-from-web, two policies with numeric ports select db: its selection
        // chain dispatches through a port map (5432 to both, 8000-8100 to this one).
        out.push(
            json!({"metadata": {"namespace": "prod", "name": "db-from-dev"},
               "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                        "ingress": [
                            {"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}],
                             "ports": [{"port": 8000, "endPort": 8100}, {"port": 5432}]}]}}),
        );
    }
    out
}

/// The cluster: `extra` local pods beyond the first three are running (the fourth is
/// the pod-event case), the db policy present or not (the policy-change case).
pub fn cluster(pods: usize, with_db: bool) -> Cluster {
    let namespaces: Vec<Namespace> = [("prod", "a"), ("dev", "b")]
        .iter()
        .map(|(n, t)| {
            serde_json::from_value(json!({"metadata": {"name": n, "labels": {"team": t}}})).unwrap()
        })
        .collect();
    let mut objs: Vec<Value> = PODS[..pods]
        .iter()
        .enumerate()
        .map(|(i, (ns, name, app))| {
            let ips = [pod_ip(i, Family::V4), pod_ip(i, Family::V6)];
            pod_json(ns, name, app, NODE, ips)
        })
        .collect();
    let remote = ["10.60.0.5".parse().unwrap(), "fd60::5".parse().unwrap()];
    objs.push(pod_json("dev", "remote", "client", "n2", remote));
    let pods: Vec<Pod> = objs
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let pols: Vec<NetworkPolicy> = policies(with_db)
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let node_ips = NODE_IPS.iter().map(|s| s.parse().unwrap()).collect();
    let nodes = BTreeMap::from([(NODE.to_string(), node_ips), ("n2".to_string(), vec![])]);
    Cluster::new(&namespaces, &pods, &pols, nodes)
}

/// An end of a probe: local pod `i`, or the outside address (`None`).
pub fn endpoint(c: &Cluster, at: Option<usize>) -> Endpoint<'_> {
    match at {
        Some(i) => Endpoint::Pod(c.pod(PODS[i].0, PODS[i].1).unwrap()),
        None => Endpoint::Outside(outside(Family::V4)),
    }
}

/// The oracle's answer for a probe between two ends in `f` (the outside's address of
/// that family).
pub fn expected(
    c: &Cluster,
    src: Option<usize>,
    dst: Option<usize>,
    f: Family,
    probe: (u8, u16),
) -> bool {
    let end = |at: Option<usize>| match at {
        None => Endpoint::Outside(outside(f)),
        some => endpoint(c, some),
    };
    oracle::allowed(c, end(src), end(dst), f, probe.0, probe.1).unwrap()
}
