//! The nftables backend maps only traffic to the node (containernetworking/plugins #1209,
//! fixed by #1210): a pod's connection to an address beyond the node on a mapped port
//! reaches that address, not the mapped pod. A table of the earlier layout (as we wrote
//! it, as Go v1.9 wrote it) is repaired by the next ADD, and CHECK fails on it.

#[path = "portmap_support/mod.rs"]
mod support;

use serde_json::{Value, json};
use support::*;
use testkit::privileged;

/// The client netns's address: "outside" the node, reached by forwarding.
const OUTSIDE4: &str = "192.168.249.2";
const OUTSIDE6: &str = "fd00:c::2";

fn nft_backend() -> Value {
    json!({"backend": "nftables"})
}

/// Applies `script` (`nft -f`) in the node's netns.
fn nft(node: &Node, script: &str) {
    let file = node.env.data.path().join("old-layout.nft");
    std::fs::write(&file, script).unwrap();
    node.host().exec_in(&["nft", "-f", file.to_str().unwrap()]);
}

/// The IPv4 table of the layout before #1210 holding container `id`'s mappings of
/// `host_port` (any local address) and `host_port + 1` (on [`NODE4`]) to `to`:80, in Go
/// v1.9's rule form or in the one our earlier versions wrote.
fn old_layout(id: &str, to: &str, host_port: u16, go_form: bool) -> String {
    let t = "ip cni_hostport";
    let dnat = |port: u16| match go_form {
        true => format!("tcp dport {port} dnat to {to}:80"),
        false => format!("ip protocol tcp th dport {port} dnat ip addr . port to {to} . 80"),
    };
    let ip_port = host_port + 1;
    format!(
        "add table {t} {{ comment \"CNI portmap plugin\" ; }}
add chain {t} hostports
add chain {t} hostip_hostports
add chain {t} prerouting {{ type nat hook prerouting priority -100 ; }}
add rule {t} prerouting jump hostip_hostports
add rule {t} prerouting jump hostports
add chain {t} output {{ type nat hook output priority -100 ; }}
add rule {t} output jump hostip_hostports
add rule {t} output fib daddr type local jump hostports
add chain {t} masquerading {{ type nat hook postrouting priority 100 ; }}
add rule {t} hostports {} comment \"{id}\"
add rule {t} hostip_hostports ip daddr {NODE4} {} comment \"{id}\"
add rule {t} masquerading ip saddr {to} ip daddr {to} masquerade comment \"{id}\"
add rule {t} masquerading ip saddr 127.0.0.1 ip daddr {to} masquerade comment \"{id}\"
",
        dnat(host_port),
        dnat(ip_port)
    )
}

/// Whether a connection from `from` to `addr` reached the server outside the node.
fn reaches_outside(from: &support::Pod, addr: &str) -> bool {
    let got = tcp_get(&from.ns, addr);
    got.as_deref().is_some_and(|g| g.starts_with("outside "))
}

fn both_backends_leave_forwarded_traffic_alone(backend: Value, tag: &str) {
    let node = Node::new(tag);
    let client = node.client();
    let mapped = node.attach(&format!("{tag}-mapped"));
    let other = node.attach(&format!("{tag}-other"));
    let _pod = TcpServer::start(&mapped.ns, 80, "pod");
    let _outside = TcpServer::start(&client, 53, "outside");
    let _outside_ip = TcpServer::start(&client, 80, "outside");
    // hostPort 53 on every local address; hostPort 80 on a hostIP that is not the node's.
    let mappings = [tcp(53, 80), on(tcp(80, 80), OUTSIDE4)];
    node.map_with(&ours(), &mapped, &mappings, backend.clone());

    for addr in [
        format!("{OUTSIDE4}:53"),
        format!("[{OUTSIDE6}]:53"),
        format!("{OUTSIDE4}:80"),
    ] {
        assert!(
            reaches_outside(&other, &addr),
            "a pod's connection to {addr} beyond the node reaches it, not the mapped pod"
        );
    }
    // The mapping itself works, from outside and from a pod.
    let got = tcp_get(&client, &format!("{NODE4}:53"));
    assert!(got.is_some_and(|g| g.starts_with("pod ")));
    let got = tcp_get(&other.ns, &format!("{NODE4}:53"));
    assert!(got.is_some_and(|g| g.starts_with("pod ")));

    node.unmap(&ours(), &mapped, &mappings);
    node.detach(&mapped);
    node.detach(&other);
}

#[test]
#[ignore = "needs root"]
fn nftables_maps_only_traffic_to_the_node() {
    if !privileged("nftables_maps_only_traffic_to_the_node") {
        return;
    }
    both_backends_leave_forwarded_traffic_alone(nft_backend(), "pmfwd");
}

#[test]
#[ignore = "needs root"]
fn iptables_maps_only_traffic_to_the_node() {
    if !privileged("iptables_maps_only_traffic_to_the_node") {
        return;
    }
    both_backends_leave_forwarded_traffic_alone(json!({"backend": "iptables"}), "pmfwdi");
}

fn old_layout_is_repaired_by_the_next_add(go_form: bool, tag: &str) {
    let node = Node::new(tag);
    let client = node.client();
    let old = node.attach(&format!("{tag}-old"));
    let new = node.attach(&format!("{tag}-new"));
    let other = node.attach(&format!("{tag}-other"));
    let _old = TcpServer::start(&old.ns, 80, "pod");
    let _new = TcpServer::start(&new.ns, 80, "pod");
    let _outside = TcpServer::start(&client, 30090, "outside");
    // `old` was mapped by an earlier version: 30090 everywhere, 30091 on NODE4.
    nft(&node, &old_layout(&old.id, &old.ip(false), 30090, go_form));
    assert!(
        !reaches_outside(&other, &format!("{OUTSIDE4}:30090")),
        "the old layout maps forwarded traffic (what this test is about)"
    );

    node.map_with(&ours(), &new, &[tcp(30092, 80)], nft_backend());
    assert!(
        reaches_outside(&other, &format!("{OUTSIDE4}:30090")),
        "after the ADD, forwarded traffic is left alone"
    );
    // The old attachment's mappings, in both old chains, still work for the node.
    for port in [30090, 30091, 30092] {
        let got = tcp_get(&client, &format!("{NODE4}:{port}"));
        assert!(got.is_some_and(|g| g.starts_with("pod ")), "port {port}");
    }
    // The old attachment's DEL finds its rules in the old chains.
    node.unmap(&ours(), &old, &[tcp(30090, 80), on(tcp(30091, 80), NODE4)]);
    assert!(!node.env.nft_ruleset().contains(&format!("\"{}\"", old.id)));
    assert_eq!(tcp_get(&client, &format!("{NODE4}:30091")), None);

    node.unmap(&ours(), &new, &[tcp(30092, 80)]);
    for pod in [&old, &new, &other] {
        node.detach(pod);
    }
}

#[test]
#[ignore = "needs root"]
fn an_old_layout_of_ours_is_repaired_by_the_next_add() {
    if !privileged("an_old_layout_of_ours_is_repaired_by_the_next_add") {
        return;
    }
    old_layout_is_repaired_by_the_next_add(false, "pmold");
}

#[test]
#[ignore = "needs root"]
fn a_go_v1_9_layout_is_repaired_by_the_next_add() {
    if !privileged("a_go_v1_9_layout_is_repaired_by_the_next_add") {
        return;
    }
    old_layout_is_repaired_by_the_next_add(true, "pmoldgo");
}

#[test]
#[ignore = "needs root"]
fn check_fails_on_the_old_layout() {
    if !privileged("check_fails_on_the_old_layout") {
        return;
    }
    let node = Node::with_subnets("pmoldck", vec![SUBNET4]);
    let pod = node.attach("pmoldck-pod");
    let check = |mappings: &[Value]| {
        let conf = node.portmap_conf(mappings, Some(&pod.result), nft_backend());
        node.portmap(&ours(), "CHECK", &pod, &conf)
    };
    let mappings = [tcp(30090, 80), on(tcp(30091, 80), NODE4)];
    // The attachment as Go v1.9 made it: every rule there, in the old places.
    nft(&node, &old_layout(&pod.id, &pod.ip(false), 30090, true));
    let missing = |mappings: &[Value]| {
        let (code, msg) = error_of(&check(mappings));
        assert_eq!(code, 999, "{msg}");
        assert!(msg.contains("missing port mapping rules"), "{msg}");
    };
    missing(&mappings);
    // Without a hostIP mapping every rule is in the chain it would be in now: the hooks
    // alone make CHECK fail.
    missing(&[tcp(30090, 80)]);

    node.map_with(&ours(), &pod, &mappings, nft_backend());
    check(&mappings).assert_success();
    // A hook rewritten to the old jumps (an earlier version's ADD of another pod).
    nft(
        &node,
        "flush chain ip cni_hostport prerouting
add rule ip cni_hostport prerouting jump hostip_hostports
add rule ip cni_hostport prerouting jump hostports
",
    );
    missing(&mappings);
    node.map_with(&ours(), &pod, &mappings, nft_backend());
    check(&mappings).assert_success();

    node.unmap(&ours(), &pod, &mappings);
    node.detach(&pod);
}
