//! A small cluster as in the upstream e2e netpol suite: namespaces x, y, z with pods a, b,
//! c each (dual-stack), on two nodes; objects written as the API's JSON. `reach` asks both
//! the oracle and the compiled programs of every node (interpreted) and fails on any
//! disagreement, so every expectation a test states holds for both.

#![allow(dead_code)]

pub mod random;

use std::collections::BTreeMap;
use std::net::IpAddr;

use netpol::addr::Family;
use netpol::cluster::Cluster;
use netpol::compile::compile;
use netpol::eval::Packet;
use netpol::model::{Namespace, NetworkPolicy, Pod};
use netpol::oracle::{self, Endpoint};
use netpol::program::Program;
use serde_json::{Value, json};

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const SCTP: u8 = 132;
pub const ICMP: u8 = 1;
pub const NAMESPACES: [&str; 3] = ["x", "y", "z"];
pub const PODS: [&str; 3] = ["a", "b", "c"];
pub const NODES: [&str; 2] = ["node-1", "node-2"];
pub const OUTSIDE4: &str = "192.0.2.7";
pub const OUTSIDE6: &str = "2001:db8::7";

pub fn node_ips(n: usize) -> Vec<IpAddr> {
    vec![
        format!("10.0.0.{}", n + 1).parse().unwrap(),
        format!("fd00::{}", n + 1).parse().unwrap(),
    ]
}

/// The objects of one cluster, editable before `build`.
#[derive(Clone)]
pub struct World {
    pub namespaces: Vec<Value>,
    pub pods: Vec<Value>,
    pub policies: Vec<Value>,
}

pub fn pod_json(ns: usize, pod: usize, node: usize, labels: Value, ports: Value) -> Value {
    json!({
        "metadata": {"namespace": NAMESPACES[ns], "name": PODS[pod], "labels": labels},
        "spec": {"nodeName": NODES[node], "containers": [{"name": "c", "ports": ports}]},
        "status": {"phase": "Running", "podIPs": [
            {"ip": format!("10.1.{}.{}", ns + 1, pod + 1)},
            {"ip": format!("fd00:1:0:{}::{}", ns + 1, pod + 1)}
        ]}
    })
}

impl World {
    /// Upstream's default: pod label `pod: <name>`, namespace label `ns: <name>`, every
    /// pod serving TCP 80/81 and UDP/SCTP 80/81 named `serve-80-tcp` and so on.
    pub fn upstream() -> World {
        let mut w = World {
            namespaces: vec![],
            pods: vec![],
            policies: vec![],
        };
        for (n, ns) in NAMESPACES.iter().enumerate() {
            w.namespaces
                .push(json!({"metadata": {"name": ns, "labels": {"ns": ns}}}));
            for (p, pod) in PODS.iter().enumerate() {
                let mut ports = vec![];
                for port in [80, 81] {
                    for proto in ["TCP", "UDP", "SCTP"] {
                        let name = format!("serve-{port}-{}", proto.to_lowercase());
                        ports.push(json!({"name": name, "containerPort": port, "protocol": proto}));
                    }
                }
                w.pods.push(pod_json(
                    n,
                    p,
                    (n + p) % 2,
                    json!({"pod": pod}),
                    Value::Array(ports),
                ));
            }
        }
        w
    }

    pub fn policy(mut self, ns: &str, name: &str, spec: Value) -> World {
        self.policies
            .push(json!({"metadata": {"namespace": ns, "name": name}, "spec": spec}));
        self
    }

    pub fn build(&self) -> Net {
        let de = |v: &Value| v.clone();
        let namespaces: Vec<Namespace> = self
            .namespaces
            .iter()
            .map(|v| serde_json::from_value(de(v)).unwrap())
            .collect();
        let pods: Vec<Pod> = self
            .pods
            .iter()
            .map(|v| serde_json::from_value(de(v)).unwrap())
            .collect();
        let policies: Vec<NetworkPolicy> = self
            .policies
            .iter()
            .map(|v| serde_json::from_value(de(v)).unwrap())
            .collect();
        let nodes: BTreeMap<String, Vec<IpAddr>> = NODES
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), node_ips(i)))
            .collect();
        let cluster = Cluster::new(&namespaces, &pods, &policies, nodes);
        let programs = NODES.iter().map(|n| compile(&cluster, n)).collect();
        Net { cluster, programs }
    }
}

pub struct Net {
    pub cluster: Cluster,
    pub programs: Vec<Program>,
}

/// An endpoint by name: `x/a` a pod, `node-1` a node, `outside` an outside address.
pub fn endpoint<'a>(c: &'a Cluster, name: &str, family: Family) -> Endpoint<'a> {
    if let Some((ns, pod)) = name.split_once('/') {
        return Endpoint::Pod(c.pod(ns, pod).unwrap_or_else(|| panic!("no pod {name}")));
    }
    let ip = match name {
        "outside" if family == Family::V4 => OUTSIDE4.parse().unwrap(),
        "outside" => OUTSIDE6.parse().unwrap(),
        _ => {
            let n = NODES
                .iter()
                .position(|n| *n == name)
                .unwrap_or_else(|| panic!("no {name}"));
            node_ips(n)
                .into_iter()
                .find(|i| Family::of(*i) == family)
                .unwrap()
        }
    };
    Endpoint::Outside(ip)
}

impl Net {
    /// Whether a new connection passes, by the oracle and by every node's program (which
    /// must agree); `None` when an end has no address of the family.
    pub fn try_reach(
        &self,
        src: Endpoint,
        dst: Endpoint,
        f: Family,
        proto: u8,
        port: u16,
    ) -> Option<bool> {
        let want = oracle::allowed(&self.cluster, src, dst, f, proto, port)?;
        let pkt = Packet {
            src: src.ip(f)?,
            dst: dst.ip(f)?,
            proto,
            port,
        };
        let mut got = true;
        for p in &self.programs {
            got &= p
                .passes(&pkt)
                .expect("the program refers only to what it holds");
        }
        assert_eq!(
            got, want,
            "program vs oracle for {pkt:?} ({src:?} -> {dst:?})"
        );
        Some(want)
    }

    /// `reach` for both families, which must agree (every policy in these tests is
    /// family-neutral unless it says otherwise).
    pub fn reach(&self, src: &str, dst: &str, proto: u8, port: u16) -> bool {
        let at = |f| {
            let (s, d) = (
                endpoint(&self.cluster, src, f),
                endpoint(&self.cluster, dst, f),
            );
            self.try_reach(s, d, f, proto, port).unwrap()
        };
        let (v4, v6) = (at(Family::V4), at(Family::V6));
        assert_eq!(
            v4, v6,
            "{src} -> {dst} {proto}/{port}: IPv4 and IPv6 differ"
        );
        v4
    }

    pub fn reach4(&self, src: &str, dst: &str, proto: u8, port: u16) -> bool {
        let (s, d) = (
            endpoint(&self.cluster, src, Family::V4),
            endpoint(&self.cluster, dst, Family::V4),
        );
        self.try_reach(s, d, Family::V4, proto, port).unwrap()
    }

    /// Every pod pair's reachability as a set of `src->dst` strings that pass.
    pub fn pod_table(&self, proto: u8, port: u16) -> Vec<String> {
        let mut out = vec![];
        for s in all_pods() {
            for d in all_pods() {
                if s != d && self.reach(&s, &d, proto, port) {
                    out.push(format!("{s}->{d}"));
                }
            }
        }
        out
    }
}

pub fn all_pods() -> Vec<String> {
    NAMESPACES
        .iter()
        .flat_map(|n| PODS.iter().map(move |p| format!("{n}/{p}")))
        .collect()
}

/// The pairs (excluding self) whose both ends satisfy `f`.
pub fn pairs(f: impl Fn(&str, &str) -> bool) -> Vec<String> {
    let mut out = vec![];
    for s in all_pods() {
        for d in all_pods() {
            if s != d && f(&s, &d) {
                out.push(format!("{s}->{d}"));
            }
        }
    }
    out
}
