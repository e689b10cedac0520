//! Timings at the scale (150,000 pods in 1,000 namespaces on 5,000 nodes, 10,000
//! policies): the engine's first full programming of one node, then single events (a
//! local and a remote pod, a namespace's labels, a policy), each as the `Changes` for the
//! kernel; the peak RSS; with `compile` as argument also the plain from-scratch compile.
//! `cargo run --release -p netpol --example scale [compile]`. A measurement, not a test.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use netpol::cluster::{Cluster, Pod, shared_labels, shared_ports, shared_str};
use netpol::compile::compile;
use netpol::diff::Changes;
use netpol::engine::Engine;
use netpol::model::{Namespace, NetworkPolicy};
use netpol::validate::Policy;
use serde_json::json;

const PODS: u32 = 150_000;
const NODES: u32 = 5_000;
const NAMESPACES: u32 = 1_000;
const POLICIES_PER_NS: u32 = 10;
const NODE: &str = "node0";

/// Pods spread over nodes by a hash (so one node's pods are in many namespaces).
fn node_of(i: u32) -> u32 {
    (i.wrapping_mul(2_654_435_761) >> 8) % NODES
}

fn pod(i: u32) -> Pod {
    let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
    let labels = [
        ("app", format!("app{}", i % 20)),
        ("tier", format!("t{}", i % 3)),
    ];
    // Shared as the agent's decoding shares them (`cluster::shared_*`).
    Pod {
        namespace: shared_str(&format!("ns{}", i % NAMESPACES)),
        name: format!("pod{i}"),
        labels: shared_labels(
            &labels
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        ),
        node: shared_str(&format!("node{}", node_of(i))),
        host_network: false,
        ips: vec![ip],
        named_ports: shared_ports(&[("http".into(), netpol::validate::Protocol::Tcp, 8080)]),
        created: shared_str(""),
    }
}

fn policy(ns: u32, k: u32, port: u16) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"namespace": format!("ns{ns}"), "name": format!("p{k}")},
        "spec": {
            "podSelector": {"matchLabels": {"app": format!("app{}", k * 2)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"tier": "t1"}}}], "ports": [{"port": port}, {"port": "http"}]},
                {"from": [{"namespaceSelector": {"matchLabels": {"team": format!("team{}", ns % 7)}}}]},
            ],
            "egress": [
                {"to": [{"podSelector": {}}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}], "ports": [{"port": 443}]},
            ],
        }
    }))
    .unwrap()
}

fn namespace(n: u32, team: u32) -> Namespace {
    let meta =
        json!({"metadata": {"name": format!("ns{n}"), "labels": {"team": format!("team{team}")}}});
    serde_json::from_value(meta).unwrap()
}

fn status(field: &str) -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = s.lines().find(|l| l.starts_with(field));
    line.map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn timed(what: &str, f: impl FnOnce() -> Changes) {
    let t = Instant::now();
    let ch = f();
    let took = t.elapsed();
    println!(
        "{what}: {took:?} (+{} -{} elements, {} chains written, +{} -{} sets)",
        ch.add_elems.len(),
        ch.del_elems.len(),
        ch.write_rules.len(),
        ch.add_sets.len(),
        ch.del_sets.len()
    );
}

fn main() {
    let namespaces: Vec<Namespace> = (0..NAMESPACES).map(|n| namespace(n, n % 7)).collect();
    let policies: Vec<NetworkPolicy> = (0..NAMESPACES)
        .flat_map(|n| (0..POLICIES_PER_NS).map(move |k| policy(n, k, 80)))
        .collect();
    let local: Vec<u32> = (0..PODS).filter(|&i| node_of(i) == 0).collect();
    println!(
        "{PODS} pods on {NODES} nodes, {} of them on {NODE}",
        local.len()
    );

    let mut e = Engine::new(NODE, &[]);
    let t = Instant::now();
    e.load(
        &namespaces,
        (0..PODS).map(pod),
        policies.iter().map(Policy::from_object),
    );
    let prog = e.program();
    let elems: usize = prog.sets.values().map(|s| s.elems.len()).sum();
    println!(
        "first full programming of {NODE}: {:?} ({} chains, {} sets, {} elements); VmRSS {}",
        t.elapsed(),
        prog.chains.len(),
        prog.sets.len(),
        elems,
        status("VmRSS")
    );

    // A pod of this node relabelled: it leaves its policy, joins another.
    let mut p = pod(local[0]);
    let app = p.labels["app"].clone();
    std::sync::Arc::make_mut(&mut p.labels).insert("app".into(), "app4".into());
    timed(&format!("local pod relabelled {app} -> app4"), || {
        e.set_pod(p)
    });
    let new_local = (PODS..).find(|&i| node_of(i) == 0).unwrap();
    timed("local pod start", || e.set_pod(pod(new_local)));
    let (ns, name) = (
        format!("ns{}", new_local % NAMESPACES),
        format!("pod{new_local}"),
    );
    timed("local pod end", || e.remove_pod(&ns, &name));

    // The worst local start: the node's first pod selected by a policy whose team peers'
    // set is not here yet (the first such fresh pod; the others are started and ended
    // again untimed).
    for i in (PODS + 1..PODS + 200_000).filter(|&i| node_of(i) == 0 && i % 2 == 0) {
        let (ns, name) = (format!("ns{}", i % NAMESPACES), format!("pod{i}"));
        let t = Instant::now();
        let ch = e.set_pod(pod(i));
        let took = t.elapsed();
        if ch.add_elems.len() > 1_000 {
            println!(
                "local pod start bringing a peer set: {took:?} (+{} elements, {} chains written, +{} sets)",
                ch.add_elems.len(),
                ch.write_rules.len(),
                ch.add_sets.len()
            );
            timed("its end", || e.remove_pod(&ns, &name));
            break;
        }
        e.remove_pod(&ns, &name);
    }

    // A remote pod in a local pod's namespace, tier t1 (a peer of its policy).
    let local_ns = local[1] % NAMESPACES;
    let remote = (PODS..)
        .find(|&i| node_of(i) != 0 && i % NAMESPACES == local_ns && i % 3 == 1)
        .unwrap();
    timed("remote pod start", || e.set_pod(pod(remote)));
    let mut p = pod(remote);
    std::sync::Arc::make_mut(&mut p.labels).insert("tier".into(), "t2".into());
    timed("remote pod relabelled", || e.set_pod(p));
    let (ns, name) = (format!("ns{}", remote % NAMESPACES), format!("pod{remote}"));
    timed("remote pod end", || e.remove_pod(&ns, &name));

    // A namespace moves teams: its pods leave and join namespaceSelector peer sets.
    timed("namespace label change (150 pods)", || {
        e.set_namespace(&namespace(local_ns + 1, 3))
    });

    // The policy selecting local[1]: a port changed, then deleted, then back.
    let k = (local[1] % 20) / 2;
    timed("policy change (a port)", || {
        e.set_policy(&policy(local_ns, k, 81))
    });
    timed("policy delete", || {
        e.remove_policy(&format!("ns{local_ns}"), &format!("p{k}"))
    });
    timed("policy add", || e.set_policy(&policy(local_ns, k, 80)));
    println!("peak RSS (VmHWM): {}", status("VmHWM"));

    if std::env::args().any(|a| a == "compile") {
        let mut cluster = Cluster::new(&namespaces, &[], &policies, BTreeMap::new());
        cluster.pods = (0..PODS).map(pod).collect();
        let t = Instant::now();
        let prog = compile(&cluster, NODE);
        println!(
            "plain compile of {NODE}: {:?} ({} sets)",
            t.elapsed(),
            prog.sets.len()
        );
    }
}
