//! Random clusters (a fixed-seed PRNG, so every run checks the same ones): namespaces x, y,
//! z with pods a, b, c, random labels, nodes, hostNetwork and single-stack pods, named
//! ports, and random policies from the v1 feature list (a few of them refused). On every
//! one: every endpoint pair x family x protocol/port, the oracle against the compiled
//! programs of both nodes (`common::Net::try_reach` asserts they agree); and the diff of
//! programs: it turns one into the other, and a remote pod's event is set elements only.

mod common;

use common::*;
use netpol::addr::Family;
use netpol::diff::{apply, diff};
use netpol::oracle::Endpoint;
use netpol::program::Program;
use serde_json::{Value, json};

/// splitmix64: small, deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
    fn chance(&mut self, one_in: usize) -> bool {
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

fn world(r: &mut Rng) -> World {
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
        let mut spec = json!({"podSelector": selector(r)});
        match r.below(4) {
            0 => {}
            1 => spec["policyTypes"] = json!(["Ingress"]),
            2 => spec["policyTypes"] = json!(["Egress"]),
            _ => spec["policyTypes"] = json!(["Ingress", "Egress"]),
        }
        spec["ingress"] = Value::Array(rules(r, "from"));
        spec["egress"] = Value::Array(rules(r, "to"));
        w = w.policy(r.pick(&NAMESPACES), &format!("p{i}"), spec);
    }
    w
}

const PROBES: [(u8, u16); 10] = [
    (TCP, 80),
    (TCP, 81),
    (TCP, 82),
    (UDP, 53),
    (UDP, 80),
    (UDP, 0),
    (UDP, 65535),
    (SCTP, 80),
    (SCTP, 81),
    (ICMP, 0),
];

fn endpoints(net: &Net) -> Vec<Endpoint<'_>> {
    let mut out: Vec<Endpoint> = net.cluster.pods.iter().map(Endpoint::Pod).collect();
    for ip in [OUTSIDE4, OUTSIDE6] {
        out.push(Endpoint::Outside(ip.parse().unwrap()));
    }
    out.extend((0..NODES.len()).flat_map(node_ips).map(Endpoint::Outside));
    out
}

#[test]
fn compiled_programs_agree_with_the_oracle_on_random_clusters() {
    let mut r = Rng(0x6e65_7470_6f6c);
    let (mut allowed, mut denied, mut refused) = (0usize, 0usize, 0usize);
    for _ in 0..150 {
        let net = world(&mut r).build();
        refused += net.cluster.refused.len();
        let eps = endpoints(&net);
        for s in &eps {
            for d in &eps {
                for f in Family::BOTH {
                    for (proto, port) in PROBES {
                        match net.try_reach(*s, *d, f, proto, port) {
                            Some(true) => allowed += 1,
                            Some(false) => denied += 1,
                            None => {}
                        }
                    }
                }
            }
        }
    }
    // The generator must exercise both outcomes and refusals, or the agreement says little.
    let total = allowed + denied;
    assert!(
        denied * 10 > total && allowed * 10 > total,
        "allowed {allowed}, denied {denied}"
    );
    assert!(refused > 0, "no refused policy generated");
}

fn tables(p: &Program) -> (&impl PartialEq, &impl PartialEq) {
    (&p.sets, &p.chains)
}

#[test]
fn a_diff_turns_one_program_into_the_other() {
    let mut r = Rng(7);
    let mut prev = Program::default();
    for _ in 0..100 {
        let net = world(&mut r).build();
        for p in &net.programs {
            assert!(diff(p, p).is_empty());
            let mut got = prev.clone();
            apply(&mut got, &diff(&prev, p));
            assert!(tables(&got) == tables(p), "apply(diff) differs");
            prev = p.clone();
        }
    }
}

#[test]
fn compiling_is_a_function_of_the_objects_not_their_order() {
    let mut r = Rng(11);
    for _ in 0..50 {
        let w = world(&mut r);
        let mut shuffled = w.clone();
        shuffled.pods.reverse();
        shuffled.policies.reverse();
        shuffled.namespaces.reverse();
        assert!(w.build().programs == shuffled.build().programs);
    }
}

#[test]
fn a_remote_pod_event_changes_set_elements_only() {
    let mut r = Rng(13);
    let mut element_changes = 0;
    for _ in 0..100 {
        let w = world(&mut r);
        // A new pod on node-2 (remote for node-1's program), then relabelled, then gone.
        let mut added = w.clone();
        let labels = json!({"pod": r.pick(&["a", "b", "c"]), "app": r.pick(&["web", "db"])});
        let ports = json!([{"name": "http", "containerPort": 80}, {"name": "dns", "protocol": "UDP", "containerPort": 53}]);
        let mut pj = pod_json(r.below(3), 0, 1, labels, ports);
        pj["metadata"]["name"] = json!("new");
        pj["status"]["podIPs"] = json!([{"ip": "10.1.9.9"}, {"ip": "fd00:1:0:9::9"}]);
        added.pods.push(pj.clone());
        let mut relabelled = added.clone();
        relabelled.pods.last_mut().unwrap()["metadata"]["labels"]["app"] = json!("other");
        let states = [w.build(), added.build(), relabelled.build(), w.build()];
        for pair in states.windows(2) {
            let ch = diff(&pair[0].programs[0], &pair[1].programs[0]);
            assert!(ch.add_sets.is_empty() && ch.del_sets.is_empty(), "{ch:?}");
            assert!(
                ch.add_chains.is_empty() && ch.del_chains.is_empty() && ch.write_rules.is_empty(),
                "{ch:?}"
            );
            element_changes += ch.add_elems.len() + ch.del_elems.len();
        }
    }
    assert!(
        element_changes > 0,
        "no event touched a set: the test checks nothing"
    );
}
