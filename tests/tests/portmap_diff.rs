//! Differential tests against the Go reference portmap (/usr/lib/cni/portmap, v1.1.1,
//! iptables), both chained after our bridge: the same rules byte for byte for the same
//! mappings, and attachments mapped by one are unmapped cleanly by the other.

#[path = "portmap_support/mod.rs"]
mod support;

use serde_json::{Value, json};
use std::path::Path;
use support::*;
use testkit::privileged;

/// The rules after `bin`'s ADD, and the bridge's `route_localnet`.
fn rules_after_add(bin: &Path, mappings: &[Value], extra: Value) -> (Vec<String>, String) {
    let node = Node::new("pmdiff");
    // For externalSetMarkChain: a chain kube-proxy would keep.
    for tool in ["iptables", "ip6tables"] {
        node.host()
            .exec_in(&[tool, "-w", "-t", "nat", "-N", "KUBE-MARK-MASQ"]);
    }
    let pod = node.attach("pm1");
    node.map_with(bin, &pod, mappings, extra);
    let rules = node.portmap_rules();
    let localnet = node.host().exec_in(&[
        "sysctl",
        "-n",
        &format!("net.ipv4.conf.{BRIDGE}.route_localnet"),
    ]);
    node.unmap(bin, &pod, mappings);
    assert_eq!(
        node.attachment_rules(),
        Vec::<String>::new(),
        "DEL left rules"
    );
    node.detach(&pod);
    (rules, localnet.trim().to_string())
}

#[test]
#[ignore = "needs root"]
fn same_rules_as_go() {
    if !privileged("same_rules_as_go") {
        return;
    }
    let twenty: Vec<Value> = (0..20).map(|i| tcp(31000 + i, 8000 + i)).collect();
    let cases: Vec<(Vec<Value>, Value)> = vec![
        (
            vec![
                tcp(30080, 80),
                on(udp(30053, 53), GATEWAY4),
                on(tcp(30443, 443), GATEWAY6),
                udp(30080, 80),
                on(tcp(30081, 81), "0.0.0.0"),
            ],
            json!({}),
        ),
        (twenty, json!({})),
        (vec![tcp(30080, 80)], json!({"snat": false})),
        (
            vec![tcp(30080, 80), udp(30053, 53)],
            json!({"markMasqBit": 5}),
        ),
        (
            vec![tcp(30080, 80)],
            json!({"externalSetMarkChain": "KUBE-MARK-MASQ",
                   "conditionsV4": ["-s", "192.0.2.0/24"], "conditionsV6": ["-s", "fd00:1::/64"]}),
        ),
    ];
    for (mappings, extra) in cases {
        let (r_ours, l_ours) = rules_after_add(&ours(), &mappings, extra.clone());
        let (r_go, l_go) = rules_after_add(&go(), &mappings, extra.clone());
        assert_eq!(r_ours, r_go, "rules for {mappings:?} {extra}");
        assert_eq!(l_ours, l_go, "route_localnet for {extra}");
        assert!(r_ours.iter().any(|r| r.contains("CNI-DN-")), "{r_ours:?}");
    }
}

#[test]
#[ignore = "needs root"]
fn each_side_unmaps_the_others() {
    if !privileged("each_side_unmaps_the_others") {
        return;
    }
    let mappings = [
        tcp(30080, 80),
        on(udp(30053, 53), GATEWAY4),
        on(tcp(30443, 443), GATEWAY6),
    ];
    for (adder, deleter) in [(ours(), go()), (go(), ours())] {
        let node = Node::new("pmswitch");
        let pod = node.attach("pm-switch");
        let other = node.attach("pm-other");
        node.map(&adder, &pod, &mappings);
        node.map(&adder, &other, &[tcp(30090, 90)]);
        let both = node.portmap_rules();
        node.unmap(&deleter, &pod, &mappings);
        let other_chain = (both.iter())
            .find(|r| r.contains("--dport 30090 -j DNAT"))
            .and_then(|r| r.split_whitespace().nth(1))
            .unwrap()
            .to_string();
        let others: Vec<String> = (both.iter())
            .filter(|r| r.contains(&other_chain))
            .cloned()
            .collect();
        assert_eq!(
            node.attachment_rules(),
            others,
            "only the other pod's rules are left"
        );
        node.unmap(&deleter, &other, &[tcp(30090, 90)]);
        assert_eq!(node.attachment_rules(), Vec::<String>::new());
        node.detach(&pod);
        node.detach(&other);
    }
}
