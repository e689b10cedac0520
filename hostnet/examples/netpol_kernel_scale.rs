//! The kernel side of NetworkPolicy at the scale (netpol/examples/scale.rs's
//! cluster: 150,000 pods, 10,000 policies; node0's program holds ~100k set elements):
//! the first program as one batch, a remote pod's start as one batch of set elements,
//! and the read-back. Runs in a throwaway network namespace; needs root.
//! `cargo run --release -p hostnet --example netpol_kernel_scale`. A measurement, not a test.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use hostnet::node::{HostNodeNet, PolicyNet};
use netpol::cluster::{Cluster, Pod};
use netpol::compile::compile;
use netpol::model::NetworkPolicy;
use netpol::update::pod_event;
use nix::sched::{CloneFlags, unshare};
use serde_json::json;

const PODS: u32 = 150_000;
const NODES: u32 = 1_400;
const NAMESPACES: u32 = 1_000;
const POLICIES_PER_NS: u32 = 10;

fn pod(i: u32) -> Pod {
    let labels = [
        ("app", format!("app{}", i % 20)),
        ("tier", format!("t{}", i % 3)),
    ];
    Pod {
        namespace: format!("ns{}", i % NAMESPACES).into(),
        name: format!("pod{i}"),
        labels: std::sync::Arc::new(
            labels
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        ),
        node: format!("node{}", i % NODES).into(),
        host_network: false,
        ips: vec![IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))],
        named_ports: vec![("http".into(), netpol::validate::Protocol::Tcp, 8080)].into(),
        created: "".into(),
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
    let prog = compile(&cluster, "node0");
    let elems: usize = prog.sets.values().map(|s| s.elems.len()).sum();
    println!(
        "node0: {} chains, {} sets, {elems} elements",
        prog.chains.len(),
        prog.sets.len()
    );

    // A thread of its own in a new network namespace: nothing of the machine's changes.
    std::thread::spawn(move || {
        unshare(CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET): run as root");
        let k = HostNodeNet::current().unwrap();
        let t = Instant::now();
        k.replace_policy(&prog).unwrap();
        println!("first program, one batch: {:?}", t.elapsed());
        let t = Instant::now();
        let matches = k.policy_matches(&prog).unwrap();
        println!(
            "read back and compared: {:?} (matches: {matches})",
            t.elapsed()
        );

        let new = pod(PODS + 1);
        let mut after = cluster.clone();
        after.pods.push(new.clone());
        let mut patched = prog.clone();
        let ch = pod_event(&after, "node0", &mut patched, None, Some(&new)).unwrap();
        let t = Instant::now();
        k.apply_policy(&ch).unwrap();
        println!(
            "remote pod start, one batch: {:?} ({} elements added)",
            t.elapsed(),
            ch.add_elems.len()
        );
        let ch = pod_event(&cluster, "node0", &mut patched, Some(&new), None).unwrap();
        let t = Instant::now();
        k.apply_policy(&ch).unwrap();
        println!(
            "remote pod end, one batch: {:?} ({} elements removed)",
            t.elapsed(),
            ch.del_elems.len()
        );
        let t = Instant::now();
        k.replace_policy(&prog).unwrap();
        println!(
            "the whole program again over the old one: {:?}",
            t.elapsed()
        );
        assert!(k.policy_matches(&prog).unwrap());
    })
    .join()
    .unwrap();
}
