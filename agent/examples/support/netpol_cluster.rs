//! The cluster of the NetworkPolicy scale benchmark, as API objects: shared by
//! `stub-apiserver` (which serves it, `STUB_NETPOL=PODS,NAMESPACES,POLICIES_PER_NS`) and
//! `bench-netpol` (which must know where each pod lives to pick its events). The shape is
//! netpol/examples/scale.rs's: pods labelled `app` (20 values) and `tier` (3), spread over
//! the nodes by a hash; namespaces in 7 teams; per namespace `POLICIES_PER_NS` policies,
//! each selecting one even `app` value, with pod, namespace-selector, ipBlock and named
//! port rules. Pods are dual-stack (10.128.0.0/9 and fd10::/64 by index).

use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Other nodes: this node is node 0, the stub's `node-bench-1..=nodes` the rest.
    pub nodes: u32,
    pub pods: u32,
    pub namespaces: u32,
    pub policies_per_ns: u32,
}

impl Scale {
    /// `PODS,NAMESPACES,POLICIES_PER_NS` (the stub's `STUB_NETPOL`), with the node count.
    pub fn parse(nodes: u32, spec: &str) -> Option<Scale> {
        let v: Vec<u32> = spec
            .split(',')
            .map(|s| s.trim().parse().ok())
            .collect::<Option<_>>()?;
        let [pods, namespaces, policies_per_ns] = v.as_slice() else {
            return None;
        };
        Some(Scale {
            nodes,
            pods: *pods,
            namespaces: (*namespaces).max(1),
            policies_per_ns: *policies_per_ns,
        })
    }

    pub fn env(&self) -> String {
        format!("{},{},{}", self.pods, self.namespaces, self.policies_per_ns)
    }

    /// The node pod `i` runs on: 0 is this node.
    pub fn node_of(&self, i: u32) -> u32 {
        (i.wrapping_mul(2_654_435_761) >> 8) % (self.nodes + 1)
    }

    pub fn namespace_of(&self, i: u32) -> u32 {
        i % self.namespaces
    }

    /// Every object: namespaces, policies, then pods (`me`: this node's name).
    pub fn namespaces_json(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.namespaces).map(|n| namespace(n, n % 7))
    }

    pub fn policies_json(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.namespaces)
            .flat_map(move |n| (0..self.policies_per_ns).map(move |k| policy(n, k, 80)))
    }

    pub fn pods_json<'a>(&'a self, me: &'a str) -> impl Iterator<Item = Value> + 'a {
        (0..self.pods).map(move |i| self.pod(me, i, app_of(i), tier_of(i)))
    }

    /// Pod `i` with these labels (its namespace, node and addresses from `i`).
    pub fn pod(&self, me: &str, i: u32, app: u32, tier: u32) -> Value {
        let node = match self.node_of(i) {
            0 => me.to_string(),
            j => format!("node-bench-{j}"),
        };
        let (v4, v6) = pod_ips(i);
        json!({
            "metadata": {
                "name": format!("pod{i}"),
                "namespace": format!("ns{}", self.namespace_of(i)),
                "labels": { "app": format!("app{app}"), "tier": format!("t{tier}") },
                "creationTimestamp": "2026-12-01T00:00:00Z",
            },
            "spec": {
                "nodeName": node,
                "containers": [{
                    "name": "main",
                    "ports": [{ "name": "http", "containerPort": 8080, "protocol": "TCP" }],
                }],
            },
            "status": {
                "phase": "Running",
                "podIP": v4,
                "podIPs": [{ "ip": v4 }, { "ip": v6 }],
            },
        })
    }
}

pub fn app_of(i: u32) -> u32 {
    i % 20
}

pub fn tier_of(i: u32) -> u32 {
    i % 3
}

/// Pod `i`'s IPv4 and IPv6 addresses.
pub fn pod_ips(i: u32) -> (String, String) {
    let v4 = std::net::Ipv4Addr::from(0x0a80_0000 + (i & 0x007f_ffff));
    (
        v4.to_string(),
        format!("fd10::{:x}:{:x}", i >> 16, i & 0xffff),
    )
}

pub fn namespace(n: u32, team: u32) -> Value {
    json!({ "metadata": { "name": format!("ns{n}"), "labels": { "team": format!("team{team}") } } })
}

/// Policy `p{k}` of namespace `n`: selects `app{2k}` (so pods of odd `app` are selected
/// by none), ingress from tier t1 of its namespace on `port` and the named port, and from
/// every pod of the namespaces of one team; egress to its namespace and to 443 outside.
pub fn policy(n: u32, k: u32, port: u16) -> Value {
    json!({
        "metadata": { "namespace": format!("ns{n}"), "name": format!("p{k}") },
        "spec": {
            "podSelector": { "matchLabels": { "app": format!("app{}", (k * 2) % 20) } },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                { "from": [{ "podSelector": { "matchLabels": { "tier": "t1" } } }],
                  "ports": [{ "port": port }, { "port": "http" }] },
                { "from": [{ "namespaceSelector": { "matchLabels": { "team": format!("team{}", n % 7) } } }] },
            ],
            "egress": [
                { "to": [{ "podSelector": {} }] },
                { "to": [{ "ipBlock": { "cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"] } }],
                  "ports": [{ "port": 443 }] },
            ],
        }
    })
}
