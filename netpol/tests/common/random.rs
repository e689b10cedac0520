//! Random clusters from a fixed-seed PRNG (splitmix64, no dependency): namespaces x, y, z
//! with pods a, b, c, random labels, nodes, hostNetwork and single-stack pods, named
//! ports, and 1-4 random policies from the v1 feature list (a few refused).

use serde_json::{Value, json};

use super::*;

/// splitmix64: small, deterministic, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const KEYS: [&str; 4] = ["pod", "app", "team", "kubernetes.io/metadata.name"];
const VALUES: [&str; 6] = ["a", "b", "web", "db", "red", "x"];

fn selector(r: &mut Rng) -> Value {
    match r.below(5) {
        0 => json!({}),
        1 => json!({"matchLabels": {"pod": r.pick(&["a", "b", "c"])}}),
        2 => json!({"matchLabels": {r.pick(&KEYS): r.pick(&VALUES)}}),
        _ => {
            let op = if r.chance(40) {
                "Gt"
            } else {
                r.pick(&["In", "NotIn", "Exists", "DoesNotExist"])
            };
            let values: Vec<&str> = match op {
                "Exists" | "DoesNotExist" => vec![],
                _ => (0..1 + r.below(2)).map(|_| r.pick(&VALUES)).collect(),
            };
            let mut s = json!({"matchExpressions": [{"key": r.pick(&KEYS), "operator": op, "values": values}]});
            if r.chance(3) {
                s["matchLabels"] = json!({"ns": r.pick(&["x", "y", "z"])});
            }
            s
        }
    }
}

fn ip_block(r: &mut Rng) -> Value {
    let (cidr, excepts): (&str, &[&str]) = r.pick(&[
        (
            "10.1.0.0/16",
            &["10.1.2.0/24", "10.1.1.2/32", "10.1.3.0/30"][..],
        ),
        ("10.1.2.0/24", &["10.1.2.2/32", "10.1.2.0/31"][..]),
        ("10.1.1.1/32", &[][..]),
        (
            "0.0.0.0/0",
            &["10.0.0.0/8", "192.0.2.0/24", "10.1.1.0/24"][..],
        ),
        ("fd00:1::/48", &["fd00:1:0:2::/64", "fd00:1:0:1::1/128"][..]),
        ("::/0", &["fd00::/16", "2001:db8::/32"][..]),
        ("10.0.0.0/24", &["10.0.0.2/32"][..]),
    ]);
    let except: Vec<&str> = excepts.iter().copied().filter(|_| r.chance(2)).collect();
    json!({"ipBlock": {"cidr": cidr, "except": except}})
}

fn peer(r: &mut Rng) -> Value {
    match r.below(4) {
        0 => json!({"podSelector": selector(r)}),
        1 => json!({"namespaceSelector": selector(r)}),
        2 => json!({"podSelector": selector(r), "namespaceSelector": selector(r)}),
        _ => ip_block(r),
    }
}

fn port(r: &mut Rng) -> Value {
    r.pick(&[
        json!({"port": 80}),
        json!({"port": 80, "endPort": 81}),
        json!({"protocol": "UDP", "port": 53}),
        json!({"port": "http"}),
        json!({"protocol": "UDP", "port": "dns"}),
        json!({"protocol": "SCTP"}),
        json!({"protocol": "UDP"}),
        json!({"protocol": "SCTP", "port": "sctp"}),
    ])
}

fn rules(r: &mut Rng, peers_key: &str) -> Vec<Value> {
    (0..r.below(3))
        .map(|_| {
            let mut rule = json!({});
            if !r.chance(3) {
                rule[peers_key] = Value::Array((0..1 + r.below(2)).map(|_| peer(r)).collect());
            }
            if !r.chance(3) {
                rule["ports"] = Value::Array((0..1 + r.below(2)).map(|_| port(r)).collect());
            }
            rule
        })
        .collect()
}

pub fn world(r: &mut Rng) -> World {
    let mut w = World {
        namespaces: vec![],
        pods: vec![],
        policies: vec![],
    };
    for (n, ns) in NAMESPACES.iter().enumerate() {
        let mut labels = json!({"ns": ns});
        if r.chance(2) {
            labels["team"] = json!(r.pick(&["red", "blue"]));
        }
        w.namespaces
            .push(json!({"metadata": {"name": ns, "labels": labels}}));
        for (p, pod) in PODS.iter().enumerate() {
            let mut labels = json!({"pod": pod});
            if !r.chance(3) {
                labels["app"] = json!(r.pick(&["web", "db"]));
            }
            let mut ports = vec![];
            for (name, proto, nums) in [
                ("http", "TCP", [80, 81]),
                ("dns", "UDP", [53, 80]),
                ("sctp", "SCTP", [80, 81]),
            ] {
                if !r.chance(3) {
                    ports.push(
                        json!({"name": name, "protocol": proto, "containerPort": r.pick(&nums)}),
                    );
                }
            }
            let node = r.below(2);
            let mut pj = pod_json(n, p, node, labels, Value::Array(ports));
            if r.chance(12) {
                pj["spec"]["hostNetwork"] = json!(true);
                let ips: Vec<Value> = node_ips(node)
                    .iter()
                    .map(|i| json!({"ip": i.to_string()}))
                    .collect();
                pj["status"]["podIPs"] = Value::Array(ips);
            } else if r.chance(12) {
                pj["status"]["podIPs"].as_array_mut().unwrap().truncate(1);
            }
            w.pods.push(pj);
        }
    }
    for i in 0..1 + r.below(4) {
        let spec = policy_spec(r);
        w = w.policy(r.pick(&NAMESPACES), &format!("p{i}"), spec);
    }
    // Often several policies with numeric ports only in one namespace: selection chains
    // whose port map (overlapping ranges cut into segments) decides which policies run.
    if r.chance(2) {
        let ns = r.pick(&NAMESPACES);
        for i in 0..2 + r.below(3) {
            w = w.policy(ns, &format!("ports{i}"), ported_spec(r));
        }
    }
    w
}

/// A policy whose rules all have numeric ports (some overlapping, some protocol-wide).
fn ported_spec(r: &mut Rng) -> Value {
    let mut spec = json!({"podSelector": selector(r)});
    for key in ["ingress", "egress"] {
        let peers_key = if key == "ingress" { "from" } else { "to" };
        let rules: Vec<Value> = (0..1 + r.below(2))
            .map(|_| {
                let ports: Vec<Value> = (0..1 + r.below(2))
                    .map(|_| {
                        r.pick(&[
                            json!({"port": 80}),
                            json!({"port": 80, "endPort": 82}),
                            json!({"port": 81}),
                            json!({"port": 81, "endPort": 1000}),
                            json!({"protocol": "UDP"}),
                            json!({"protocol": "UDP", "port": 53}),
                            json!({"protocol": "SCTP", "port": 80}),
                        ])
                    })
                    .collect();
                let mut rule = json!({ "ports": ports });
                if !r.chance(3) {
                    rule[peers_key] = Value::Array(vec![peer(r)]);
                }
                rule
            })
            .collect();
        spec[key] = Value::Array(rules);
    }
    spec["policyTypes"] = json!(["Ingress", "Egress"]);
    spec
}

/// A random policy's spec (a few of them refused).
pub fn policy_spec(r: &mut Rng) -> Value {
    let mut spec = json!({"podSelector": selector(r)});
    match r.below(4) {
        0 => {}
        1 => spec["policyTypes"] = json!(["Ingress"]),
        2 => spec["policyTypes"] = json!(["Egress"]),
        _ => spec["policyTypes"] = json!(["Ingress", "Egress"]),
    }
    spec["ingress"] = Value::Array(rules(r, "from"));
    spec["egress"] = Value::Array(rules(r, "to"));
    spec
}
