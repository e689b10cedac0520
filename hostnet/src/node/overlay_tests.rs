//! Privileged tests of the overlay: "nodes" on two segments joined by a router, pods behind
//! them, every namespace made by the test.
//!
//! ```text
//! podA1 -- A1 --+                          +-- B1 -- podB1
//!              brA (router R) ---- R ------+
//!         A2 --+   192.168.10.0/24      192.168.20.0/24
//! ```
//! A1 reaches A2 directly (a direct route of ours) and B1 only through the overlay.

use super::tests::{Ns, ip, net, source_of};
use super::{NodeNet, OverlayPeer, PodRoute, Refusal, VXLAN_DEVICE, VxlanSpec, vtep_mac};
use testkit::privileged;

struct Segments {
    router: Ns,
    a1: Ns,
    a2: Ns,
    b1: Ns,
    pod_a1: Ns,
    pod_b1: Ns,
}

/// A "pod" behind `node`: 10.244.N.2/24 and fd44:N::2/64, the node holding .1 and ::1.
fn attach_pod(node: &Ns, pod: &Ns, n: u8) {
    node.link(
        "pod0",
        &[&format!("10.244.{n}.1/24"), &format!("fd44:{n}::1/64")],
        pod,
        "eth0",
        &[&format!("10.244.{n}.2/24"), &format!("fd44:{n}::2/64")],
    );
    pod.default_via(&format!("10.244.{n}.1"));
    pod.default_via(&format!("fd44:{n}::1"));
}

impl Segments {
    fn new() -> Segments {
        let s = Segments {
            router: Ns::new(),
            a1: Ns::new(),
            a2: Ns::new(),
            b1: Ns::new(),
            pod_a1: Ns::new(),
            pod_b1: Ns::new(),
        };
        s.router.sh("ip", &["link", "add", "brA", "type", "bridge"]);
        s.router
            .sh("ip", &["addr", "add", "192.168.10.1/24", "dev", "brA"]);
        s.router
            .sh("ip", &["addr", "add", "fd10::1/64", "dev", "brA", "nodad"]);
        s.router.sh("ip", &["link", "set", "brA", "up"]);
        for (node, port, addr, addr6) in [
            (&s.a1, "a1", "192.168.10.11/24", "fd10::11/64"),
            (&s.a2, "a2", "192.168.10.12/24", "fd10::12/64"),
        ] {
            s.router.link(port, &[], node, "eth0", &[addr, addr6]);
            s.router.sh("ip", &["link", "set", port, "master", "brA"]);
            node.default_via("192.168.10.1");
            node.default_via("fd10::1");
        }
        s.router.link(
            "b1",
            &["192.168.20.1/24", "fd20::1/64"],
            &s.b1,
            "eth0",
            &["192.168.20.21/24", "fd20::21/64"],
        );
        s.b1.default_via("192.168.20.1");
        s.b1.default_via("fd20::1");
        for ns in [&s.router, &s.a1, &s.a2, &s.b1] {
            ns.node().enable_forwarding(true, true).unwrap();
        }
        attach_pod(&s.a1, &s.pod_a1, 1);
        attach_pod(&s.b1, &s.pod_b1, 3);
        s
    }
}

fn spec(local: &str) -> VxlanSpec {
    VxlanSpec {
        vni: 4242,
        port: 8472,
        local: ip(local),
        underlay_mtu: 1500,
        addr4: None,
        addr6: None,
    }
}

fn peer(node_ip: &str, cidrs: &[&str]) -> OverlayPeer {
    OverlayPeer::new(ip(node_ip), cidrs.iter().map(|c| net(c)).collect())
}

fn ping(from: &Ns, to: &str, size: u32) -> bool {
    let size = size.to_string();
    from.run("ping", &["-c", "1", "-W", "2", "-M", "do", "-s", &size, to])
        .is_some()
}

/// Our entries on `node`'s device as `ip` and `bridge` print them.
fn shown(node: &Ns) -> String {
    let mut out = String::new();
    for args in [
        &["route", "show", "proto", "0xcb", "dev", VXLAN_DEVICE][..],
        &["-6", "route", "show", "proto", "0xcb", "dev", VXLAN_DEVICE],
        &[
            "-4",
            "neigh",
            "show",
            "dev",
            VXLAN_DEVICE,
            "nud",
            "permanent",
        ],
        &[
            "-6",
            "neigh",
            "show",
            "dev",
            VXLAN_DEVICE,
            "nud",
            "permanent",
        ],
    ] {
        out.push_str(&node.run("ip", args).unwrap_or_default());
    }
    let fdb = node
        .run("bridge", &["fdb", "show", "dev", VXLAN_DEVICE])
        .unwrap_or_default();
    out.extend(
        fdb.lines()
            .filter(|l| l.contains(" dst "))
            .map(|l| format!("{l}\n")),
    );
    out
}

/// Pod A1 to pod B1 in both families: the receiver sees the sender's pod address, a
/// full-size packet with DF passes and one byte more does not fit the device's `mtu`.
fn pods_cross(s: &Segments, mtu: u32) {
    for (listen, to, from) in [
        ("10.244.3.2:5400", "10.244.3.2:5400", "10.244.1.2"),
        ("[fd44:3::2]:5400", "[fd44:3::2]:5400", "fd44:1::2"),
    ] {
        let sock = s.pod_b1.udp_listener(listen);
        s.pod_a1.send_udp(to);
        assert_eq!(source_of(&sock), ip(from), "to {to}");
    }
    // Full-size packets with DF pass; one byte more does not fit the device.
    assert!(ping(&s.pod_a1, "10.244.3.2", mtu - 28));
    assert!(ping(&s.pod_a1, "fd44:3::2", mtu - 48));
    assert!(
        !ping(&s.pod_a1, "10.244.3.2", mtu - 27),
        "larger than the overlay MTU"
    );
}

#[test]
#[ignore = "needs root"]
fn pods_on_two_segments_reach_each_other_through_the_overlay() {
    if !privileged("pods_on_two_segments_reach_each_other_through_the_overlay") {
        return;
    }
    let s = Segments::new();
    let (a1, b1) = (s.a1.node(), s.b1.node());
    assert!(
        !a1.on_link(ip("192.168.20.21")).unwrap(),
        "B1 is behind the router"
    );
    // Without the overlay a direct route to B1's pods cannot even be made.
    let direct = PodRoute {
        dst: net("10.244.3.0/24"),
        gateway: ip("192.168.20.21"),
    };
    assert!(a1.add_route(&direct).is_err());
    // A2 is on-link: a direct route of ours lives next to the overlay.
    let to_a2 = PodRoute {
        dst: net("10.244.2.0/24"),
        gateway: ip("192.168.10.12"),
    };
    a1.add_route(&to_a2).unwrap();

    a1.ensure_vxlan(&spec("192.168.10.11")).unwrap();
    b1.ensure_vxlan(&spec("192.168.20.21")).unwrap();
    let index = s.a1.nl.link_by_name(VXLAN_DEVICE).unwrap().unwrap();
    assert_eq!(index.mtu, 1450);
    assert_eq!(index.mac, Some(vtep_mac(ip("192.168.10.11"))));
    a1.ensure_vxlan(&spec("192.168.10.11")).unwrap();
    let again = s.a1.nl.link_by_name(VXLAN_DEVICE).unwrap().unwrap();
    assert_eq!(again.index, index.index, "an unchanged device is kept");
    let details = s.a1.sh("ip", &["-d", "link", "show", VXLAN_DEVICE]);
    for want in [
        "vxlan id 4242",
        "local 192.168.10.11",
        "dstport 8472",
        "nolearning",
    ] {
        assert!(details.contains(want), "{want:?} in {details}");
    }

    let to_b1 = peer("192.168.20.21", &["10.244.3.0/24", "fd44:3::/64"]);
    let to_a1 = peer("192.168.10.11", &["10.244.1.0/24", "fd44:1::/64"]);
    a1.add_overlay_peer(&to_b1).unwrap();
    a1.add_overlay_peer(&to_b1).unwrap();
    b1.add_overlay_peer(&to_a1).unwrap();
    assert_eq!(a1.overlay_peers().unwrap(), vec![to_b1.clone()]);
    assert_eq!(
        a1.our_routes().unwrap(),
        vec![to_a2.clone()],
        "overlay routes are apart"
    );
    let entries = shown(&s.a1);
    let mac = vtep_mac(ip("192.168.20.21"))
        .map(|b| format!("{b:02x}"))
        .join(":");
    for want in [
        "10.244.3.0/24 via 10.244.3.0 onlink",
        "fd44:3::/64 via fd44:3:: metric 1024 onlink",
        "10.244.3.0 lladdr MAC PERMANENT",
        "fd44:3:: lladdr MAC PERMANENT",
        "MAC dst 192.168.20.21 self permanent",
    ] {
        let want = want.replace("MAC", &mac);
        assert!(entries.contains(&want), "{want:?} in\n{entries}");
    }

    pods_cross(&s, 1450);

    // Removing the peer removes its entries, and only its; a second removal is a no-op.
    a1.del_overlay_peer(&to_b1).unwrap();
    a1.del_overlay_peer(&to_b1).unwrap();
    assert_eq!(a1.overlay_peers().unwrap(), vec![]);
    assert_eq!(shown(&s.a1), "");
    assert!(!ping(&s.pod_a1, "10.244.3.2", 56));
    assert_eq!(a1.our_routes().unwrap(), vec![to_a2.clone()]);

    // Someone deletes the FDB entry: the routes left are listed under the unspecified
    // node address of their family (never wanted), so a diff deletes them.
    a1.add_overlay_peer(&to_b1).unwrap();
    let fdb = [
        "fdb",
        "del",
        &mac,
        "dev",
        VXLAN_DEVICE,
        "self",
        "dst",
        "192.168.20.21",
    ];
    s.a1.sh("bridge", &fdb);
    let strays = a1.overlay_peers().unwrap();
    assert_eq!(
        strays,
        vec![
            peer("0.0.0.0", &["10.244.3.0/24"]),
            peer("::", &["fd44:3::/64"])
        ]
    );
    for p in &strays {
        a1.del_overlay_peer(p).unwrap();
    }
    assert_eq!(shown(&s.a1), "");

    // A changed VNI makes the device anew (its entries go with it).
    a1.add_overlay_peer(&to_b1).unwrap();
    a1.ensure_vxlan(&VxlanSpec {
        vni: 7,
        ..spec("192.168.10.11")
    })
    .unwrap();
    let details = s.a1.sh("ip", &["-d", "link", "show", VXLAN_DEVICE]);
    assert!(details.contains("vxlan id 7 "), "{details}");
    assert_eq!(a1.overlay_peers().unwrap(), vec![]);

    a1.add_overlay_peer(&to_b1).unwrap();
    a1.remove_vxlan().unwrap();
    a1.remove_vxlan().unwrap();
    assert!(s.a1.nl.link_by_name(VXLAN_DEVICE).unwrap().is_none());
    assert!(a1.overlay_peers().unwrap().is_empty());
    let left = s.a1.sh("ip", &["route", "show", "proto", "0xcb"]);
    // Through its nexthop (`nhid N via ...`).
    let left = left.trim();
    assert!(
        left.starts_with("10.244.2.0/24 nhid ")
            && left.ends_with(" via 192.168.10.12 dev eth0")
            && left.lines().count() == 1,
        "only the direct route: {left}"
    );
    drop(s.a2);
}

#[test]
#[ignore = "needs root"]
fn a_foreign_link_of_our_name_is_left_alone() {
    if !privileged("a_foreign_link_of_our_name_is_left_alone") {
        return;
    }
    let (node, other) = (Ns::new(), Ns::new());
    node.link(VXLAN_DEVICE, &["192.168.10.11/24"], &other, "eth0", &[]);
    let k = node.node();
    let e = k.ensure_vxlan(&spec("192.168.10.11")).unwrap_err();
    assert!(e.is_exists(), "{e}");
    k.remove_vxlan().unwrap_err();
    assert!(k.overlay_peers().unwrap().is_empty());
    let link = node.nl.link_by_name(VXLAN_DEVICE).unwrap().unwrap();
    assert_eq!(link.kind.as_deref(), Some("veth"));
}

#[test]
#[ignore = "needs root"]
fn an_ipv6_underlay_carries_both_families() {
    if !privileged("an_ipv6_underlay_carries_both_families") {
        return;
    }
    let s = Segments::new();
    let (a1, b1) = (s.a1.node(), s.b1.node());
    a1.ensure_vxlan(&spec("fd10::11")).unwrap();
    b1.ensure_vxlan(&spec("fd20::21")).unwrap();
    let link = s.a1.nl.link_by_name(VXLAN_DEVICE).unwrap().unwrap();
    assert_eq!(link.mtu, 1430);
    let to_b1 = peer("fd20::21", &["10.244.3.0/24", "fd44:3::/64"]);
    a1.add_overlay_peer(&to_b1).unwrap();
    b1.add_overlay_peer(&peer("fd10::11", &["10.244.1.0/24", "fd44:1::/64"]))
        .unwrap();
    assert_eq!(a1.overlay_peers().unwrap(), vec![to_b1]);
    pods_cross(&s, 1430);
    a1.remove_vxlan().unwrap();
    assert_eq!(s.a1.sh("ip", &["-6", "route", "show", "proto", "0xcb"]), "");
}

#[test]
#[ignore = "needs root"]
fn the_device_holds_the_node_s_overlay_addresses_and_only_those() {
    if !privileged("the_device_holds_the_node_s_overlay_addresses_and_only_those") {
        return;
    }
    let (node, other) = (Ns::new(), Ns::new());
    node.link("eth0", &["192.168.10.11/24"], &other, "eth0", &[]);
    let k = node.node();
    let globals = || {
        let out = node.sh(
            "ip",
            &["-o", "addr", "show", "dev", VXLAN_DEVICE, "scope", "global"],
        );
        let mut v: Vec<String> = out
            .lines()
            .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
            .collect();
        v.sort();
        v
    };
    let with = |a4: &str, a6: &str| VxlanSpec {
        addr4: Some(a4.parse().unwrap()),
        addr6: Some(a6.parse().unwrap()),
        ..spec("192.168.10.11")
    };
    k.ensure_vxlan(&with("10.244.1.0", "fd44:1::")).unwrap();
    assert_eq!(globals(), ["10.244.1.0/32", "fd44:1::/128"]);
    // A new pod range: the addresses change in place, the peers stay.
    let to_b1 = peer("192.168.20.21", &["10.244.3.0/24"]);
    k.add_overlay_peer(&to_b1).unwrap();
    node.sh("ip", &["addr", "add", "10.9.9.9/32", "dev", VXLAN_DEVICE]);
    k.ensure_vxlan(&with("10.244.7.0", "fd44:7::")).unwrap();
    assert_eq!(globals(), ["10.244.7.0/32", "fd44:7::/128"]);
    assert_eq!(k.overlay_peers().unwrap(), vec![to_b1]);
    k.ensure_vxlan(&spec("192.168.10.11")).unwrap();
    assert_eq!(globals(), Vec::<String>::new());
}

#[test]
#[ignore = "needs root"]
fn a_vxlan_device_of_someone_else_on_our_vni_and_port_is_named() {
    if !privileged("a_vxlan_device_of_someone_else_on_our_vni_and_port_is_named") {
        return;
    }
    let (node, other) = (Ns::new(), Ns::new());
    node.link("eth0", &["192.168.10.11/24"], &other, "eth0", &[]);
    let (vni, port) = (spec("192.168.10.11").vni.to_string(), "8472");
    node.sh(
        "ip",
        &[
            "link",
            "add",
            "flannel.1",
            "type",
            "vxlan",
            "id",
            &vni,
            "dstport",
            port,
            "local",
            "192.168.10.11",
            "nolearning",
        ],
    );
    let k = node.node();
    let e = k.ensure_vxlan(&spec("192.168.10.11")).unwrap_err();
    assert!(e.is_in_use(), "{e}");
    assert!(
        matches!(e.refusal(), Some(Refusal::VniInUse { device, .. }) if device == "flannel.1"),
        "{e}"
    );
    assert!(node.nl.link_by_name(VXLAN_DEVICE).unwrap().is_none());
    // Another VNI on the same port is no clash (the kernel demultiplexes by VNI).
    k.ensure_vxlan(&VxlanSpec {
        vni: 4243,
        ..spec("192.168.10.11")
    })
    .unwrap();
    assert!(node.nl.link_by_name("flannel.1").unwrap().is_some());
}
