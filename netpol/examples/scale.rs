//! Timings at the scale (150,000 pods on 1,400 nodes, 10,000 policies in 1,000
//! namespaces): one node's full compile, a remote pod's event in place, and the diff.
//! `cargo run --release -p netpol --example scale`. A measurement, not a test.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use netpol::cluster::{Cluster, Pod};
use netpol::compile::compile;
use netpol::diff::diff;
use netpol::model::NetworkPolicy;
use netpol::update::pod_event;
use serde_json::json;

const PODS: u32 = 150_000;
const NODES: u32 = 1_400;
const NAMESPACES: u32 = 1_000;
const POLICIES_PER_NS: u32 = 10;

fn pod(i: u32) -> Pod {
    let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
    let labels = [
        ("app", format!("app{}", i % 20)),
        ("tier", format!("t{}", i % 3)),
    ];
    Pod {
        namespace: format!("ns{}", i % NAMESPACES),
        name: format!("pod{i}"),
        labels: labels
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        node: format!("node{}", i % NODES),
        host_network: false,
        ips: vec![ip],
        named_ports: vec![("http".into(), netpol::validate::Protocol::Tcp, 8080)],
        created: String::new(),
    }
}

fn policy(ns: u32, k: u32) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"namespace": format!("ns{ns}"), "name": format!("p{k}")},
        "spec": {
            "podSelector": {"matchLabels": {"app": format!("app{}", k * 2)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"tier": "t1"}}}], "ports": [{"port": 80}, {"port": "http"}]},
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

fn main() {
    let t = Instant::now();
    let namespaces: Vec<netpol::model::Namespace> = (0..NAMESPACES)
        .map(|n| {
            let meta = json!({"metadata": {"name": format!("ns{n}"), "labels": {"team": format!("team{}", n % 7)}}});
            serde_json::from_value(meta).unwrap()
        })
        .collect();
    let policies: Vec<NetworkPolicy> = (0..NAMESPACES)
        .flat_map(|n| (0..POLICIES_PER_NS).map(move |k| policy(n, k)))
        .collect();
    let mut cluster = Cluster::new(&namespaces, &[], &policies, BTreeMap::new());
    cluster.pods = (0..PODS).map(pod).collect();
    println!("cluster built: {:?}", t.elapsed());

    let t = Instant::now();
    let prog = compile(&cluster, "node0");
    let elems: usize = prog.sets.values().map(|s| s.elems.len()).sum();
    println!(
        "full compile of node0: {:?} ({} chains, {} sets, {} elements)",
        t.elapsed(),
        prog.chains.len(),
        prog.sets.len(),
        elems
    );

    // A remote pod starts (node 1), in a namespace whose policies select node0's pods.
    let new = pod(PODS + 1);
    let mut after = cluster.clone();
    after.pods.push(new.clone());
    let mut patched = prog.clone();
    let t = Instant::now();
    let ch = pod_event(&after, "node0", &mut patched, None, Some(&new)).unwrap();
    let event = t.elapsed();
    println!(
        "remote pod start in place: {event:?} ({} elements added)",
        ch.add_elems.len()
    );
    let t = Instant::now();
    let ch = diff(&prog, &patched);
    println!(
        "the same by a diff of the programs: {:?} ({} elements added)",
        t.elapsed(),
        ch.add_elems.len()
    );
    // And it ends.
    let mut back = patched.clone();
    let t = Instant::now();
    pod_event(&cluster, "node0", &mut back, Some(&new), None).unwrap();
    println!(
        "remote pod end in place: {:?}; back to the start: {}",
        t.elapsed(),
        back == prog
    );
}
