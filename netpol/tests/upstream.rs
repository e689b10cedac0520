//! Cases mirroring the upstream e2e suite (kubernetes test/e2e/network/netpol,
//! network_policy.go): each states its truth table over every pod pair; `common` checks
//! the oracle and every node's compiled program against it.

mod common;

use common::*;
use serde_json::json;

fn ns(s: &str) -> &str {
    s.split('/').next().unwrap()
}

/// The table for one protocol and port equals the pairs `allow` names.
fn expect(net: &Net, proto: u8, port: u16, allow: impl Fn(&str, &str) -> bool) {
    assert_eq!(
        net.pod_table(proto, port),
        pairs(allow),
        "proto {proto} port {port}"
    );
}

#[test]
fn default_deny_ingress() {
    let net = World::upstream()
        .policy(
            "x",
            "deny",
            json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
        )
        .build();
    expect(&net, TCP, 80, |_, d| ns(d) != "x");
    assert!(net.reach("x/a", "x/a", TCP, 80), "a pod reaches itself");
}

#[test]
fn default_deny_all_both_directions() {
    let spec = json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]});
    let net = World::upstream().policy("x", "deny", spec).build();
    for (proto, port) in [(TCP, 80), (UDP, 81), (SCTP, 80), (ICMP, 0)] {
        expect(&net, proto, port, |s, d| ns(s) != "x" && ns(d) != "x");
    }
}

#[test]
fn policy_types_default_to_egress_only_when_egress_rules_exist() {
    // No policyTypes and only egress rules: Ingress and Egress both.
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "egress": [{}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, TCP, 80, |_, d| d != "x/a");
    // An empty policyTypes is defaulted the same way.
    let spec =
        json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": [], "egress": [{}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, TCP, 80, |_, d| d != "x/a");
    // Without egress rules: ingress only, whatever else the spec holds.
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, TCP, 80, |_, _| true);
}

fn ingress_to_xa(from: serde_json::Value) -> Net {
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"from": from}]});
    World::upstream().policy("x", "allow", spec).build()
}

#[test]
fn allow_by_pod_selector_in_own_namespace() {
    let net = ingress_to_xa(json!([{"podSelector": {"matchLabels": {"pod": "b"}}}]));
    expect(&net, TCP, 80, |s, d| d != "x/a" || s == "x/b");
}

#[test]
fn allow_by_namespace_selector() {
    let net = ingress_to_xa(json!([{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]));
    expect(&net, TCP, 80, |s, d| d != "x/a" || ns(s) == "y");
}

#[test]
fn allow_by_automatic_namespace_name_label() {
    let sel = json!({"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["y"]}]});
    let net = ingress_to_xa(json!([{"namespaceSelector": sel}]));
    expect(&net, TCP, 80, |s, d| d != "x/a" || ns(s) == "y");
}

#[test]
fn match_expressions_on_pods() {
    let sel = json!({"matchExpressions": [{"key": "pod", "operator": "In", "values": ["b"]}]});
    let net = ingress_to_xa(json!([{"podSelector": sel}]));
    expect(&net, TCP, 80, |s, d| d != "x/a" || s == "x/b");
}

#[test]
fn pod_selector_or_namespace_selector() {
    let net = ingress_to_xa(json!([
        {"podSelector": {"matchLabels": {"pod": "b"}}},
        {"namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "NotIn", "values": ["x"]}]}}
    ]));
    expect(&net, TCP, 80, |s, d| {
        d != "x/a" || s == "x/b" || ns(s) != "x"
    });
}

#[test]
fn pod_selector_and_namespace_selector_in_one_peer() {
    let net = ingress_to_xa(json!([{
        "podSelector": {"matchExpressions": [{"key": "pod", "operator": "In", "values": ["b", "c"]}]},
        "namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "NotIn", "values": ["x"]}]}
    }]));
    let from = |s: &str| ns(s) != "x" && !s.ends_with("/a");
    expect(&net, TCP, 80, |s, d| d != "x/a" || from(s));
}

#[test]
fn exists_and_does_not_exist() {
    let mut w = World::upstream();
    w.pods[1]["metadata"]["labels"]["extra"] = json!("1"); // x/b
    let net = {
        let from = json!([{"namespaceSelector": {}, "podSelector": {"matchExpressions": [
            {"key": "extra", "operator": "Exists"}]}}]);
        let spec = json!({"podSelector": {"matchExpressions": [
            {"key": "extra", "operator": "DoesNotExist"}]}, "ingress": [{"from": from}]});
        w.policy("x", "p", spec).build()
    };
    expect(&net, TCP, 80, |s, d| {
        ns(d) != "x" || d == "x/b" || s == "x/b"
    });
}

#[test]
fn numeric_ports_and_end_port() {
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [
        {"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}], "ports": [{"port": 81}]},
        {"ports": [{"port": 8000, "endPort": 8080, "protocol": "UDP"}]}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, TCP, 81, |s, d| d != "x/a" || ns(s) == "y");
    expect(&net, TCP, 80, |_, d| d != "x/a");
    for (port, open) in [
        (7999, false),
        (8000, true),
        (8042, true),
        (8080, true),
        (8081, false),
    ] {
        expect(&net, UDP, port, |_, d| open || d != "x/a");
        expect(&net, TCP, port, |_, d| d != "x/a");
    }
}

#[test]
fn named_port_on_ingress() {
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [
        {"ports": [{"port": "serve-81-tcp"}]}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, TCP, 81, |_, _| true);
    expect(&net, TCP, 80, |_, d| d != "x/a");
    expect(&net, UDP, 81, |_, d| d != "x/a");
}

#[test]
fn named_port_resolves_per_pod() {
    // x/a and x/b name different numbers "web"; one policy selecting both.
    let mut w = World::upstream();
    w.pods[0]["spec"]["containers"][0]["ports"] = json!([{"name": "web", "containerPort": 80}]);
    w.pods[1]["spec"]["containers"][0]["ports"] = json!([{"name": "web", "containerPort": 81}]);
    let spec = json!({"podSelector": {}, "ingress": [{"ports": [{"port": "web"}]}]});
    let net = w.policy("x", "p", spec).build();
    expect(&net, TCP, 80, |_, d| ns(d) != "x" || d == "x/a");
    expect(&net, TCP, 81, |_, d| ns(d) != "x" || d == "x/b");
}

#[test]
fn named_port_on_egress_resolves_on_the_destination() {
    let mut w = World::upstream();
    w.pods[4]["spec"]["containers"][0]["ports"] =
        json!([{"name": "dns", "containerPort": 53, "protocol": "UDP"}]);
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"],
        "egress": [{"ports": [{"port": "dns", "protocol": "UDP"}]}]});
    let net = w.policy("x", "p", spec).build();
    expect(&net, UDP, 53, |s, d| s != "x/a" || d == "y/b");
    assert!(
        !net.reach("x/a", "outside", UDP, 53),
        "no pod, no named port"
    );
}

#[test]
fn stacked_policies_are_a_union() {
    let p = |port| json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"ports": [{"port": port}]}]});
    let net = World::upstream()
        .policy("x", "p80", p(80))
        .policy("x", "p81", p(81))
        .build();
    expect(&net, TCP, 80, |_, _| true);
    expect(&net, TCP, 81, |_, _| true);
    expect(&net, TCP, 82, |_, d| d != "x/a");
    let all = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{}]});
    let net = World::upstream()
        .policy("x", "p80", p(80))
        .policy("x", "all", all)
        .build();
    expect(&net, UDP, 82, |_, _| true);
}

#[test]
fn protocol_only_rules() {
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"ports": [{"protocol": "UDP"}]}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, UDP, 80, |_, _| true);
    expect(&net, UDP, 12345, |_, _| true);
    expect(&net, TCP, 80, |_, d| d != "x/a");
    expect(&net, SCTP, 80, |_, d| d != "x/a");
    expect(&net, ICMP, 0, |_, d| d != "x/a");
}

#[test]
fn sctp_is_not_tcp() {
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"ports": [{"port": 80, "protocol": "SCTP"}]}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, SCTP, 80, |_, _| true);
    expect(&net, TCP, 80, |_, d| d != "x/a");
}

#[test]
fn egress_to_pod_and_namespace_selector() {
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"], "egress": [{"to": [{
        "podSelector": {"matchLabels": {"pod": "b"}}, "namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, TCP, 80, |s, d| s != "x/a" || d == "y/b");
    assert!(!net.reach("x/a", "outside", TCP, 80));
}

#[test]
fn client_side_egress_deny_wins_over_server_allow() {
    let deny = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"]});
    let allow = json!({"podSelector": {}, "ingress": [{}]});
    let net = World::upstream()
        .policy("x", "deny", deny)
        .policy("y", "allow", allow)
        .build();
    expect(&net, TCP, 80, |s, _| s != "x/a");
}

#[test]
fn ip_block_with_except_both_families() {
    let to = json!([
        {"ipBlock": {"cidr": "10.1.2.0/24", "except": ["10.1.2.2/32"]}},
        {"ipBlock": {"cidr": "fd00:1:0:2::/64", "except": ["fd00:1:0:2::2/128"]}},
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}},
    ]);
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"], "egress": [{"to": to}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, TCP, 80, |s, d| {
        s != "x/a" || (ns(d) == "y" && d != "y/b")
    });
    assert!(net.reach4("x/a", "outside", TCP, 80));
    let v6 = netpol::addr::Family::V6;
    let (s, d) = (
        endpoint(&net.cluster, "x/a", v6),
        endpoint(&net.cluster, "outside", v6),
    );
    assert_eq!(
        net.try_reach(s, d, v6, TCP, 80),
        Some(false),
        "0.0.0.0/0 is IPv4 only"
    );
}

#[test]
fn an_address_in_one_except_and_another_cidr_is_allowed() {
    let p = |block| json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": block}]}]});
    let net = World::upstream()
        .policy(
            "x",
            "except",
            p(json!({"cidr": "10.1.2.0/24", "except": ["10.1.2.2/32"]})),
        )
        .policy("x", "exact", p(json!({"cidr": "10.1.2.2/32"})))
        .build();
    assert!(net.reach4("x/a", "y/b", TCP, 80));
    assert!(net.reach4("x/a", "y/a", TCP, 80));
    assert!(!net.reach4("x/a", "z/a", TCP, 80));
}

#[test]
fn ingress_and_egress_together() {
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}],
        "egress": [{"to": [{"podSelector": {"matchLabels": {"pod": "c"}}}]}]});
    let net = World::upstream().policy("x", "p", spec).build();
    expect(&net, TCP, 80, |s, d| {
        (d != "x/a" || s == "x/b") && (s != "x/a" || d == "x/c")
    });
}
