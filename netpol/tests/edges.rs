//! The node, hostNetwork pods, finished pods and refused policies.

mod common;

use common::*;
use netpol::model::NetworkPolicy;
use netpol::validate::{Policy, Problem};
use serde_json::json;

fn deny_all_in(ns: &str) -> World {
    World::upstream().policy(
        ns,
        "deny",
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
    )
}

#[test]
fn a_pod_and_its_own_node_always_talk() {
    let net = deny_all_in("x").build();
    // x/a runs on node-1, x/b on node-2.
    assert!(net.reach("node-1", "x/a", TCP, 80), "kubelet's probe");
    assert!(net.reach("x/a", "node-1", TCP, 10250));
    assert!(
        !net.reach("node-2", "x/a", TCP, 80),
        "another node is no exception"
    );
    assert!(!net.reach("x/a", "node-2", TCP, 80));
    assert!(net.reach("node-2", "x/b", TCP, 80));
}

#[test]
fn host_network_pods_are_the_node() {
    let mut w = deny_all_in("y");
    // y/c on node-2 becomes hostNetwork: it has the node's addresses.
    let ips = node_ips(1);
    w.pods[5]["spec"]["hostNetwork"] = json!(true);
    w.pods[5]["status"]["podIPs"] = json!([{"ip": ips[0].to_string()}, {"ip": ips[1].to_string()}]);
    let net = w.build();
    // Not policed by the deny-all of its namespace...
    assert!(net.reach("y/c", "x/a", TCP, 80));
    assert!(net.reach("x/a", "y/c", TCP, 80));
    // ...and it is its node to its node's pods, an outsider to the others.
    assert!(net.reach("y/c", "y/a", TCP, 80), "y/a runs on node-2");
    let dispatched = |p: &netpol::program::Program| {
        p.sets
            .values()
            .flat_map(|s| &s.elems)
            .any(|e| matches!(e, netpol::program::Elem::Jump(ip, _) if ips.contains(ip)))
    };
    assert!(
        !net.programs.iter().any(dispatched),
        "its addresses are no pod's to police"
    );
    assert!(!net.reach("y/c", "y/b", TCP, 80), "y/b runs on node-1");
    // A selector never picks it: z/a admits pods labelled c from every namespace.
    let from = json!([{"namespaceSelector": {}, "podSelector": {"matchLabels": {"pod": "c"}}}]);
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"from": from}]});
    let net = w.policy("z", "from-c", spec).build();
    assert!(net.reach("x/c", "z/a", TCP, 80));
    assert!(!net.reach("y/c", "z/a", TCP, 80));
}

#[test]
fn finished_pods_are_no_peers() {
    let mut w = World::upstream();
    w.pods[1]["status"]["phase"] = json!("Succeeded"); // x/b
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]});
    let net = w.policy("x", "p", spec).build();
    let c = &net.cluster;
    assert!(
        c.pod("x", "b").unwrap().ips.is_empty(),
        "its address may be another pod's now"
    );
    assert!(net.programs.iter().all(|p| p.sets.values().all(|s| {
        s.elems
            .iter()
            .all(|e| !format!("{e:?}").contains("10.1.1.2"))
    })));
}

#[test]
fn a_refused_policy_isolates_its_pods_and_is_reported() {
    let spec = json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"from": [
        {"podSelector": {"matchExpressions": [{"key": "pod", "operator": "Gt", "values": ["1"]}]}}]}]});
    let net = World::upstream().policy("x", "bad", spec).build();
    expect_isolated(&net, "x/a");
    let e = &net.cluster.refused[0];
    assert_eq!(e.policy, "x/bad");
    assert_eq!(e.field, "spec.ingress[0].from[0].podSelector");
    assert!(e.to_string().contains("unknown operator \"Gt\""), "{e}");
    assert!(
        net.programs
            .iter()
            .all(|p| p.refused == net.cluster.refused)
    );
}

#[test]
fn a_refused_pod_selector_isolates_the_namespace() {
    let spec = json!({"podSelector": {"matchExpressions": [{"key": "pod", "operator": "In"}]}, "ingress": [{}]});
    let net = World::upstream().policy("x", "bad", spec).build();
    for p in ["x/a", "x/b", "x/c"] {
        expect_isolated(&net, p);
    }
    assert!(net.reach("y/a", "y/b", TCP, 80));
}

fn expect_isolated(net: &Net, pod: &str) {
    for other in all_pods().iter().filter(|o| *o != pod) {
        assert!(!net.reach(other, pod, TCP, 80), "{other} -> {pod}");
        assert!(!net.reach(pod, other, UDP, 53), "{pod} -> {other}");
    }
    assert!(!net.reach(pod, "outside", TCP, 443));
}

fn refusal(spec: serde_json::Value) -> (String, Problem) {
    let np: NetworkPolicy =
        serde_json::from_value(json!({"metadata": {"namespace": "n", "name": "p"}, "spec": spec}))
            .unwrap();
    let r = Policy::from_object(&np).expect_err("refused");
    (r.error.field, r.error.problem)
}

#[test]
fn what_cannot_be_enforced_exactly_is_refused_by_field() {
    let port = |p: serde_json::Value| json!({"podSelector": {}, "ingress": [{"ports": [p]}]});
    let peer = |p: serde_json::Value| json!({"podSelector": {}, "egress": [{"to": [{}, p]}]});
    let cases = [
        (
            port(json!({"protocol": "ICMP"})),
            "spec.ingress[0].ports[0].protocol",
        ),
        (
            port(json!({"protocol": "tcp"})),
            "spec.ingress[0].ports[0].protocol",
        ),
        (port(json!({"port": 0})), "spec.ingress[0].ports[0].port"),
        (
            port(json!({"port": 65536})),
            "spec.ingress[0].ports[0].port",
        ),
        (
            port(json!({"port": "Not_A_Name"})),
            "spec.ingress[0].ports[0].port",
        ),
        (
            port(json!({"port": "http", "endPort": 90})),
            "spec.ingress[0].ports[0].endPort",
        ),
        (
            port(json!({"endPort": 90})),
            "spec.ingress[0].ports[0].endPort",
        ),
        (
            port(json!({"port": 90, "endPort": 80})),
            "spec.ingress[0].ports[0].endPort",
        ),
        (
            peer(json!({"ipBlock": {"cidr": "10.0.0.0"}})),
            "spec.egress[0].to[0]",
        ),
        (
            json!({"podSelector": {}, "policyTypes": ["Sideways"]}),
            "spec.policyTypes[0]",
        ),
    ];
    for (spec, field) in cases {
        assert_eq!(refusal(spec.clone()).0, field, "{spec}");
    }
    // The empty peer `{}` is refused before the one after it.
    let bad_cidr =
        json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0"}}]}]});
    assert_eq!(
        refusal(bad_cidr),
        (
            "spec.egress[0].to[0].ipBlock.cidr".into(),
            Problem::Cidr("10.0.0.0".into())
        )
    );
    for except in ["10.1.0.0/16", "10.0.0.0/8", "fd00::/120", "10.2.0.0/24"] {
        let spec = peer_only(
            json!({"ipBlock": {"cidr": "10.1.0.0/16", "except": ["10.1.1.0/24", except]}}),
        );
        let (field, problem) = refusal(spec);
        assert_eq!(field, "spec.egress[0].to[0].ipBlock.except[1]", "{except}");
        assert!(
            matches!(problem, Problem::ExceptOutside { .. }),
            "{except}: {problem}"
        );
    }
    let spec = peer_only(json!({"ipBlock": {"cidr": "10.1.0.0/16"}, "podSelector": {}}));
    assert_eq!(refusal(spec).1, Problem::BlockWithSelector);
}

fn peer_only(p: serde_json::Value) -> serde_json::Value {
    json!({"podSelector": {}, "egress": [{"to": [p]}]})
}

#[test]
fn host_bits_in_a_cidr_are_cleared_as_the_api_reads_them() {
    let spec = peer_only(json!({"ipBlock": {"cidr": "10.1.2.99/24"}}));
    let np: NetworkPolicy =
        serde_json::from_value(json!({"metadata": {"namespace": "n", "name": "p"}, "spec": spec}))
            .unwrap();
    let p = Policy::from_object(&np).unwrap();
    let peers = p.egress.unwrap()[0].peers.clone().unwrap();
    assert_eq!(
        format!("{:?}", peers[0]),
        "Block { cidr: V4(Ipv4Network { addr: 10.1.2.0, prefix: 24 }), except: [] }"
    );
}

#[test]
fn objects_decode_as_the_api_sends_them() {
    let pod: netpol::model::Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "x", "name": "a", "labels": null, "uid": "u"},
        "spec": {"nodeName": "n", "containers": [{"name": "c", "ports": [
            {"name": "web", "containerPort": 8080}, {"containerPort": 9}]}]},
        "status": {"phase": "Running", "podIP": "10.9.0.1"}
    }))
    .unwrap();
    let p = netpol::cluster::Pod::from_object(&pod);
    assert_eq!(
        p.ips,
        vec!["10.9.0.1".parse::<std::net::IpAddr>().unwrap()],
        "podIP when podIPs is absent"
    );
    assert_eq!(
        p.named_port("web", netpol::validate::Protocol::Tcp),
        Some(8080)
    );
    assert!(p.labels.is_empty() && !p.host_network);
    let np: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"namespace": "x", "name": "p", "resourceVersion": "42"},
        "spec": {"podSelector": {}, "ingress": [{"from": null, "ports": [{"port": "web"}]}], "egress": null}
    }))
    .unwrap();
    assert_eq!(np.metadata.resource_version, "42");
    let p = Policy::from_object(&np).unwrap();
    assert!(
        p.egress.is_none(),
        "no egress rules and no policyTypes: ingress only"
    );
    assert!(
        p.ingress.unwrap()[0].peers.is_none(),
        "from: null is every peer"
    );
}

#[test]
fn an_address_two_local_pods_claim_has_one_dispatch_element() {
    // x/a and x/twin (both node-1, both isolated, by different policies) report one
    // address: the dispatch map would hold two elements with one key; the newer keeps it.
    let mut w = World::upstream()
        .policy("x", "a", json!({"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"ports": [{"port": 80}]}]}))
        .policy("x", "twin", json!({"podSelector": {"matchLabels": {"pod": "twin"}}, "ingress": [{"ports": [{"port": 81}]}]}));
    let mut twin = w.pods[0].clone();
    twin["metadata"]["name"] = json!("twin");
    twin["metadata"]["labels"] = json!({"pod": "twin"});
    twin["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:01Z");
    w.pods[0]["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
    w.pods.push(twin);
    let net = w.build();
    let ip: std::net::IpAddr = "10.1.1.1".parse().unwrap();
    let jumps: Vec<_> = net.programs[0]
        .sets
        .values()
        .flat_map(|s| &s.elems)
        .filter(|e| matches!(e, netpol::program::Elem::Jump(i, _) if *i == ip))
        .collect();
    assert_eq!(jumps.len(), 1, "{jumps:?}");
    assert!(net.reach4("y/a", "x/twin", TCP, 81), "x/twin's policy");
    assert!(!net.reach4("y/a", "x/twin", TCP, 80));
}
