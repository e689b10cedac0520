//! The desired state from Node lists, good and bad (issue 20, item 8).

use super::*;

const ME: &str = "me";

fn node(name: &str, cidrs: &[&str], ips: &[&str]) -> NodeInfo {
    NodeInfo::new(
        name.into(),
        "spec.podCIDRs",
        cidrs.iter().map(|s| s.to_string()).collect(),
        ips.iter().map(|s| s.to_string()).collect(),
    )
}

fn me() -> NodeInfo {
    node(
        ME,
        &["10.244.0.0/24", "fd00:244::/64"],
        &["192.168.0.1", "fd00:1::1"],
    )
}

/// This node: 192.168.0.1/24 and fd00:1::1/64 on its uplink, cni0 with its pod ranges.
fn run_with(nodes: &[NodeInfo], opts: &Options) -> Desired {
    let addrs: Vec<IpAddr> = ["192.168.0.1", "fd00:1::1", "10.244.0.1", "fd00:244::1"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let connected: Vec<IpNetwork> = [
        "192.168.0.0/24",
        "fd00:1::/64",
        "10.244.0.0/24",
        "fd00:244::/64",
    ]
    .iter()
    .map(|a| a.parse().unwrap())
    .collect();
    let mut on_link = |ip: IpAddr| connected.iter().any(|n| n.contains(ip));
    desired(
        ME,
        nodes,
        Local {
            addrs: &addrs,
            on_link: &mut on_link,
        },
        opts,
    )
}

fn run(nodes: &[NodeInfo]) -> Desired {
    run_with(nodes, &Options::default())
}

fn with_mode(mode: Mode, nodes: &[NodeInfo]) -> Desired {
    run_with(
        nodes,
        &Options {
            mode,
            ..Options::default()
        },
    )
}

fn host_gw(nodes: &[NodeInfo]) -> Desired {
    with_mode(Mode::HostGw, nodes)
}

fn route(dst: &str, gw: &str) -> PodRoute {
    PodRoute {
        dst: dst.parse().unwrap(),
        gateway: gw.parse().unwrap(),
    }
}

fn nets(list: &[&str]) -> Vec<IpNetwork> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn good_peer() -> NodeInfo {
    node(
        "peer",
        &["10.244.1.0/24", "fd00:244:1::/64"],
        &["192.168.0.2", "fd00:1::2"],
    )
}

#[test]
fn a_route_per_other_node_per_family_and_the_policy() {
    let d = run(&[
        me(),
        good_peer(),
        node("v6only", &["fd00:244:2::/64"], &["fd00:1::3"]),
    ]);
    assert_eq!(d.own_cidrs, nets(&["10.244.0.0/24", "fd00:244::/64"]));
    assert_eq!(d.own_error, None);
    assert_eq!(
        d.routes.into_iter().collect::<Vec<_>>(),
        [
            route("10.244.1.0/24", "192.168.0.2"),
            route("fd00:244:1::/64", "fd00:1::2"),
            route("fd00:244:2::/64", "fd00:1::3"),
        ]
    );
    let v4 = d.policy.v4.unwrap();
    assert_eq!(v4.pod_cidrs, nets(&["10.244.0.0/24"]));
    assert_eq!(v4.no_masquerade, nets(&["10.244.0.0/24", "10.244.1.0/24"]));
    let v6 = d.policy.v6.unwrap();
    assert_eq!(
        v6.no_masquerade,
        nets(&["fd00:244::/64", "fd00:244:1::/64", "fd00:244:2::/64"])
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn no_masquerade_flags_and_cluster_cidr_join_the_set() {
    let opts = Options {
        cluster_cidrs: nets(&["10.244.0.0/16"]),
        no_masquerade: nets(&["10.96.0.0/12", "fd00:96::/108"]),
        ..Options::default()
    };
    let d = run_with(&[me(), good_peer()], &opts);
    assert_eq!(
        d.policy.v4.unwrap().no_masquerade,
        nets(&[
            "10.96.0.0/12",
            "10.244.0.0/16",
            "10.244.0.0/24",
            "10.244.1.0/24"
        ])
    );
    assert!(
        d.policy
            .v6
            .unwrap()
            .no_masquerade
            .contains(&"fd00:96::/108".parse().unwrap())
    );
}

#[test]
fn a_node_without_a_range_yet_is_quietly_left_out() {
    let d = run(&[me(), node("new", &[], &["192.168.0.9"])]);
    assert!(d.routes.is_empty() && d.warnings.is_empty());
}

#[test]
fn this_node_missing_or_without_ranges() {
    let d = run(&[good_peer()]);
    assert!(
        d.own_error
            .unwrap()
            .contains("not in the API server's node list")
    );
    // The peers are still routed; no policy without ranges of our own.
    assert_eq!(d.routes.len(), 2);
    assert_eq!(d.policy, NodePolicy::default());
    let d = run(&[node(ME, &["10.244.0.0/0"], &[]), good_peer()]);
    assert!(d.own_error.unwrap().contains("default route"));
}

/// Each bad-data case: the bad node gets no route and a warning naming it and the field;
/// the good peer is still served.
fn refused(bad: NodeInfo, want: &[&str]) {
    let name = bad.name.clone();
    let d = run(&[me(), good_peer(), bad]);
    assert!(
        d.routes.contains(&route("10.244.1.0/24", "192.168.0.2")),
        "{name}: the good peer lost its route: {:?}",
        d.routes
    );
    assert_eq!(d.routes.len(), 2, "{name}: {:?}", d.routes);
    let w = d
        .warnings
        .iter()
        .find(|w| w.starts_with(&format!("node {name}:")))
        .unwrap_or_else(|| panic!("{name}: no warning in {:?}", d.warnings));
    for part in want {
        assert!(w.contains(part), "{name}: {part:?} not in {w:?}");
    }
    // Its ranges are not trusted as pod ranges either.
    let v4 = d.policy.v4.unwrap();
    assert_eq!(
        v4.no_masquerade,
        nets(&["10.244.0.0/24", "10.244.1.0/24"]),
        "{name}"
    );
}

#[test]
fn an_unparsable_pod_cidr() {
    refused(
        node("bad", &["10.244.9.0"], &["192.168.0.9"]),
        &["spec.podCIDRs", "not a CIDR"],
    );
    refused(
        node("bad", &["bogus/24"], &["192.168.0.9"]),
        &["spec.podCIDRs", "bogus"],
    );
    refused(
        node("bad", &["10.244.9.5/24"], &["192.168.0.9"]),
        &["host bits"],
    );
}

#[test]
fn a_default_route_pod_cidr_never_becomes_a_route() {
    refused(
        node("bad", &["0.0.0.0/0"], &["192.168.0.9"]),
        &["0.0.0.0/0", "default route"],
    );
    refused(
        node("bad", &["::/0"], &["fd00:1::9"]),
        &["::/0", "default route"],
    );
}

#[test]
fn overlapping_ours() {
    refused(
        node("bad", &["10.244.0.0/16"], &["192.168.0.9"]),
        &["overlaps this node's pod range"],
    );
    refused(
        node("bad", &["10.244.0.128/25"], &["192.168.0.9"]),
        &["overlaps this node's"],
    );
    // A range holding this node's and a good peer's: only the bad one is refused.
    refused(
        node("bad", &["10.0.0.0/8"], &["192.168.0.9"]),
        &["10.0.0.0/8 overlaps this node's"],
    );
}

#[test]
fn of_two_nodes_claiming_one_range_the_older_keeps_it() {
    let old = |n: NodeInfo| n.created_at("2026-01-01T00:00:00Z".into());
    let young = |n: NodeInfo| n.created_at("2026-11-30T12:00:00Z".into());
    let d = run(&[
        me(),
        young(node("a", &["10.244.5.0/24"], &["192.168.0.5"])),
        old(node("b", &["10.244.5.0/24"], &["192.168.0.6"])),
        // Nested in b's: refused too, and does not hide c's own overlap with b.
        young(node("c", &["10.244.5.128/25"], &["192.168.0.7"])),
        good_peer(),
    ]);
    assert!(d.routes.contains(&route("10.244.5.0/24", "192.168.0.6")));
    assert_eq!(d.routes.len(), 3, "{:?}", d.routes);
    for (name, net) in [("a", "10.244.5.0/24"), ("c", "10.244.5.128/25")] {
        assert!(
            d.warnings.iter().any(|w| w.starts_with(&format!(
                "node {name}: spec.podCIDRs {net} overlaps node b's 10.244.5.0/24, which keeps it"
            ))),
            "{name}: {:?}",
            d.warnings
        );
    }
    assert!(!d.warnings.iter().any(|w| w.starts_with("node b:")));
    // Created at the same time: the first by name keeps it.
    let d = run(&[
        me(),
        node("y", &["10.244.6.0/24"], &["192.168.0.8"]),
        node("x", &["10.244.6.0/23"], &["192.168.0.9"]),
    ]);
    assert_eq!(
        d.routes.into_iter().collect::<Vec<_>>(),
        [route("10.244.6.0/23", "192.168.0.9")]
    );
}

#[test]
fn an_internal_ip_inside_a_peers_range_refuses_the_ip_not_the_range() {
    // Ranges are assigned by the controller; addresses are reported by each kubelet.
    refused(
        node("bad", &["10.244.7.0/24"], &["10.244.1.9"]),
        &["10.244.1.9 is a pod address"],
    );
    refused(
        node("bad", &["10.244.7.0/24"], &["10.244.7.9"]),
        &["contains a node address"],
    );
}

#[test]
fn containing_a_node_address() {
    // The peer's InternalIP lies inside.
    refused(
        node("bad", &["192.168.0.0/30"], &["192.168.0.9"]),
        &["contains a node address"],
    );
    // One of this node's addresses (also its own networks: 192.168.0.0/24 is connected).
    refused(
        node("bad", &["192.168.0.0/16"], &["192.168.0.9"]),
        &["contains a node address"],
    );
}

#[test]
fn inside_a_network_connected_to_this_node() {
    refused(
        node("bad", &["192.168.0.128/26"], &["192.168.0.9"]),
        &["connected to this node"],
    );
}

#[test]
fn outside_the_cluster_cidr() {
    let opts = Options {
        cluster_cidrs: nets(&["10.244.0.0/16"]),
        no_masquerade: vec![],
        ..Options::default()
    };
    let d = run_with(
        &[
            me(),
            good_peer(),
            node("bad", &["10.99.0.0/24"], &["192.168.0.9"]),
        ],
        &opts,
    );
    assert_eq!(d.routes.len(), 2);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.starts_with("node bad: spec.podCIDRs 10.99.0.0/24 is outside"))
    );
    // No IPv6 cluster CIDR given: IPv6 ranges are not checked.
    assert!(d.routes.contains(&route("fd00:244:1::/64", "fd00:1::2")));
}

#[test]
fn an_internal_ip_that_is_ours_or_a_pod_address() {
    refused(
        node("bad", &["10.244.7.0/24"], &["192.168.0.1"]),
        &["InternalIP 192.168.0.1", "address of this node"],
    );
    refused(
        node("bad", &["10.244.7.0/24"], &["10.244.1.7"]),
        &["InternalIP 10.244.1.7", "pod address"],
    );
    refused(
        node("bad", &["10.244.7.0/24"], &["not-an-ip"]),
        &["status.addresses", "not an IP"],
    );
}

#[test]
fn no_internal_ip_of_a_family_skips_that_family_only() {
    let d = host_gw(&[
        me(),
        node(
            "v4ip",
            &["10.244.3.0/24", "fd00:244:3::/64"],
            &["192.168.0.3"],
        ),
    ]);
    assert_eq!(
        d.routes.into_iter().collect::<Vec<_>>(),
        [route("10.244.3.0/24", "192.168.0.3")]
    );
    assert_eq!(d.warnings.len(), 1);
    assert!(
        d.warnings[0].contains("node v4ip: no IPv6 InternalIP"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn a_peer_not_on_link_gets_no_route_and_one_warning_with_host_gw() {
    let d = host_gw(&[me(), node("far", &["10.244.4.0/24"], &["172.16.0.4"])]);
    assert!(d.routes.is_empty() && d.overlay.is_empty() && d.underlay.is_none());
    assert_eq!(d.warnings.len(), 1);
    assert!(d.warnings[0].contains("node far: InternalIP 172.16.0.4 is not directly reachable"));
    // Its range is still a pod range: never masqueraded.
    assert!(
        d.policy
            .v4
            .unwrap()
            .no_masquerade
            .contains(&"10.244.4.0/24".parse().unwrap())
    );
}

#[test]
fn thousands_of_nodes() {
    let mut nodes = vec![me()];
    for i in 1..5000u32 {
        let (a, b) = (i / 256, i % 256);
        nodes.push(node(
            &format!("n{i}"),
            &[
                &format!("10.{}.{b}.0/24", 100 + a),
                &format!("fd01:{i:x}::/64"),
            ],
            &[&format!("192.168.{a}.{b}"), &format!("fd00:1::{i:x}")],
        ));
    }
    let addrs: Vec<IpAddr> = vec!["192.168.255.254".parse().unwrap()];
    let mut on_link = |ip: IpAddr| {
        ip.to_string().starts_with("192.168.") || ip.to_string().starts_with("fd00:1::")
    };
    let d = desired(
        ME,
        &nodes,
        Local {
            addrs: &addrs,
            on_link: &mut on_link,
        },
        &Options::default(),
    );
    assert!(
        d.warnings.is_empty(),
        "{:?}",
        &d.warnings[..3.min(d.warnings.len())]
    );
    assert_eq!(d.routes.len(), 2 * 4999);
}

// The overlay (issue 22): which peers get it, at which address.

fn peer(ip: &str, cidrs: &[&str]) -> OverlayPeer {
    OverlayPeer::new(ip.parse().unwrap(), nets(cidrs))
}

/// A peer on another segment, dual-stack.
fn far() -> NodeInfo {
    node(
        "far",
        &["10.244.4.0/24", "fd00:244:4::/64"],
        &["172.16.0.4", "fd00:2::4"],
    )
}

#[test]
fn auto_routes_on_link_peers_directly_and_the_others_through_the_overlay() {
    let d = run(&[me(), good_peer(), far()]);
    assert_eq!(
        d.routes.into_iter().collect::<Vec<_>>(),
        [
            route("10.244.1.0/24", "192.168.0.2"),
            route("fd00:244:1::/64", "fd00:1::2")
        ]
    );
    // Both pod families over the IPv4 underlay: this node's first InternalIP's family.
    assert_eq!(
        d.overlay.into_iter().collect::<Vec<_>>(),
        [peer("172.16.0.4", &["10.244.4.0/24", "fd00:244:4::/64"])]
    );
    assert_eq!(d.underlay, Some("192.168.0.1".parse().unwrap()));
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn the_underlay_family_is_this_nodes_first_internal_ip() {
    let me6 = node(
        ME,
        &["10.244.0.0/24", "fd00:244::/64"],
        &["fd00:1::1", "192.168.0.1"],
    );
    let d = run(&[me6, far()]);
    assert_eq!(
        d.overlay.into_iter().collect::<Vec<_>>(),
        [peer("fd00:2::4", &["10.244.4.0/24", "fd00:244:4::/64"])]
    );
    assert_eq!(d.underlay, Some("fd00:1::1".parse().unwrap()));
}

#[test]
fn vxlan_sends_every_peer_through_the_overlay_and_wants_the_device_before_any() {
    let d = with_mode(Mode::Vxlan, &[me(), good_peer(), far()]);
    assert!(d.routes.is_empty());
    assert_eq!(
        d.overlay.into_iter().collect::<Vec<_>>(),
        [
            peer("172.16.0.4", &["10.244.4.0/24", "fd00:244:4::/64"]),
            peer("192.168.0.2", &["10.244.1.0/24", "fd00:244:1::/64"]),
        ]
    );
    let alone = with_mode(Mode::Vxlan, &[me()]);
    assert!(alone.overlay.is_empty());
    assert_eq!(
        alone.underlay,
        Some("192.168.0.1".parse().unwrap()),
        "the MTU fits the overlay before the first peer"
    );
}

/// Issue 27 item 3: on-link is each side's own view, so this node's receive side is up in
/// auto mode with every peer on-link, and with no peer at all; host-gw has none.
#[test]
fn auto_wants_the_device_whatever_the_peers_host_gw_never() {
    let this = Some("192.168.0.1".parse().unwrap());
    let all_on_link = run(&[me(), good_peer()]);
    assert!(all_on_link.overlay.is_empty());
    assert_eq!(
        all_on_link.underlay, this,
        "a peer may see this node off-link"
    );
    assert_eq!(run(&[me()]).underlay, this, "alone");
    assert_eq!(with_mode(Mode::HostGw, &[me(), far()]).underlay, None);
}

#[test]
fn a_family_without_an_on_link_address_rides_the_overlay_of_the_same_peer() {
    // Its IPv4 address is on-link, it has no IPv6 one: the IPv6 range goes through the
    // overlay to its IPv4 address.
    let d = run(&[
        me(),
        node(
            "v4ip",
            &["10.244.3.0/24", "fd00:244:3::/64"],
            &["192.168.0.3"],
        ),
    ]);
    assert_eq!(
        d.routes.into_iter().collect::<Vec<_>>(),
        [route("10.244.3.0/24", "192.168.0.3")]
    );
    assert_eq!(
        d.overlay.into_iter().collect::<Vec<_>>(),
        [peer("192.168.0.3", &["fd00:244:3::/64"])]
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn a_peer_without_an_address_of_the_underlay_family_gets_no_route_and_a_warning() {
    let d = run(&[me(), node("far6", &["fd00:244:5::/64"], &["fd00:2::5"])]);
    assert!(d.routes.is_empty() && d.overlay.is_empty());
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(
        d.warnings[0].contains("node far6: no IPv4 InternalIP")
            && d.warnings[0].contains("overlay"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn no_overlay_when_this_nodes_internal_ip_is_not_its_own() {
    for ips in [&["203.0.113.1"][..], &[], &["nonsense"]] {
        let d = run(&[node(ME, &["10.244.0.0/24"], ips), far()]);
        assert!(d.overlay.is_empty() && d.underlay.is_none(), "{ips:?}");
        assert!(
            d.warnings[0].starts_with("node me: ") && d.warnings[0].contains("no overlay"),
            "{ips:?}: {:?}",
            d.warnings
        );
        assert!(
            d.warnings[1].contains("node far: InternalIP 172.16.0.4 is not directly reachable"),
            "{:?}",
            d.warnings
        );
    }
}

#[test]
fn a_flood_of_nodes_claiming_one_range_leaves_it_with_the_oldest() {
    let mut nodes = vec![me(), good_peer()];
    nodes.extend((0..5000u32).map(|i| {
        let ip = format!("192.168.{}.{}", 100 + i / 250, 1 + i % 250);
        node(&format!("claim-{i:05}"), &["10.250.0.0/16"], &[&ip]).created_at(format!(
            "2026-11-30T12:{:02}:{:02}Z",
            i / 60 % 60,
            i % 60
        ))
    }));
    let d = run(&nodes);
    assert!(d.routes.contains(&route("10.244.1.0/24", "192.168.0.2")));
    // claim-00000 is the oldest (12:00:00, first by name among equals); off-link, so
    // through the overlay.
    assert_eq!(
        d.overlay.into_iter().collect::<Vec<_>>(),
        [peer("192.168.100.1", &["10.250.0.0/16"])]
    );
    let refused = d
        .warnings
        .iter()
        .filter(|w| w.contains("which keeps it"))
        .count();
    assert_eq!(refused, 4999);
}

/// Providers that list every interface address (issue 27, item 8): only the address a route
/// or the overlay uses, the first InternalIP of each family, is judged.
#[test]
fn a_shared_address_listed_beside_the_used_one_refuses_nothing() {
    // A VIP that is also this node's address, and one inside a peer's pod range, listed
    // after each node's own address: every node is still served.
    let vip = "192.168.0.1"; // this node holds it now
    let shared = |name: &str, cidrs: &[&str], ips: &[&str]| {
        let mut all = ips.to_vec();
        all.extend([vip, "10.244.1.9", "fd00:1::1", "fd00:244:1::9"]);
        node(name, cidrs, &all)
    };
    let nodes = [
        me(),
        shared(
            "peer",
            &["10.244.1.0/24", "fd00:244:1::/64"],
            &["192.168.0.2", "fd00:1::2"],
        ),
        shared(
            "peer3",
            &["10.244.3.0/24", "fd00:244:3::/64"],
            &["192.168.0.3", "fd00:1::3"],
        ),
    ];
    for mode in [Mode::HostGw, Mode::Auto] {
        let d = with_mode(mode, &nodes);
        assert!(d.warnings.is_empty(), "{mode:?}: {:?}", d.warnings);
        assert_eq!(
            d.routes.into_iter().collect::<Vec<_>>(),
            [
                route("10.244.1.0/24", "192.168.0.2"),
                route("10.244.3.0/24", "192.168.0.3"),
                route("fd00:244:1::/64", "fd00:1::2"),
                route("fd00:244:3::/64", "fd00:1::3"),
            ],
            "{mode:?}"
        );
    }
    // The overlay uses the first InternalIP of the underlay's family only.
    let d = with_mode(Mode::Vxlan, &nodes);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let ends: Vec<IpAddr> = d.overlay.iter().map(|p| p.node_ip).collect();
    assert_eq!(ends, [ip4("192.168.0.2"), ip4("192.168.0.3")]);

    // The used address is still judged: the VIP first is this node's, a pod address first
    // is a pod's.
    refused(
        node("bad", &["10.244.7.0/24"], &[vip, "192.168.0.7"]),
        &["InternalIP 192.168.0.1", "address of this node"],
    );
    refused(
        node("bad", &["10.244.7.0/24"], &["10.244.1.9", "192.168.0.7"]),
        &["InternalIP 10.244.1.9", "pod address"],
    );
    // Several of one family where only a later one is bad: served by the first.
    let d = run(&[
        me(),
        good_peer(),
        node("two", &["10.244.7.0/24"], &["192.168.0.7", vip]),
    ]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.routes.contains(&route("10.244.7.0/24", "192.168.0.7")));
}

fn ip4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn keeping(nodes: &[NodeInfo], last: &mut Option<NodeInfo>) -> Desired {
    let addrs: Vec<IpAddr> = ["192.168.0.1", "fd00:1::1", "10.244.0.1", "fd00:244::1"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let connected = nets(&[
        "192.168.0.0/24",
        "fd00:1::/64",
        "10.244.0.0/24",
        "fd00:244::/64",
    ]);
    let mut on_link = |ip: IpAddr| connected.iter().any(|n| n.contains(ip));
    let opts = Options {
        mode: Mode::Auto,
        ..Options::default()
    };
    desired_keeping(
        ME,
        nodes,
        Local {
            addrs: &addrs,
            on_link: &mut on_link,
        },
        &opts,
        last,
    )
}

/// Issue 27, item 9: this node's own Node briefly missing, refused or without ranges keeps
/// the last good state (policy, underlay, what peers are refused for); a valid one with
/// other data applies.
#[test]
fn a_glitch_of_this_nodes_own_node_keeps_its_last_good_state() {
    let far = node("far", &["10.244.5.0/24"], &["192.168.50.5"]);
    // A peer claiming part of our range: refused while our range is known.
    let grabber = node("grabber", &["10.244.0.128/25"], &["192.168.0.8"]);
    let others = [good_peer(), far, grabber];
    let with = |own: Option<NodeInfo>| -> Vec<NodeInfo> {
        own.into_iter().chain(others.iter().cloned()).collect()
    };
    let mut last = None;
    let good = keeping(&with(Some(me())), &mut last);
    assert_eq!(good.own_error, None);
    assert_eq!(last.as_ref().map(|n| n.name.as_str()), Some(ME));
    assert!(good.policy.v4.is_some() && good.policy.v6.is_some());
    assert_eq!(good.underlay, Some("192.168.0.1".parse().unwrap()));
    assert_eq!(good.overlay.len(), 1, "{:?}", good.overlay);

    let mut unparsable = me();
    unparsable.ranges = Err("spec.podCIDRs \"bogus\" is not a CIDR".into());
    let mut unassigned = me();
    unassigned.ranges = Ok(vec![]);
    for (glitch, list) in [
        ("deleted, or absent from a re-list", with(None)),
        ("refused", with(Some(unparsable))),
        ("re-created without ranges yet", with(Some(unassigned))),
    ] {
        let d = keeping(&list, &mut last);
        assert_eq!(d.own_error, None, "{glitch}");
        assert_eq!(d.own_cidrs, good.own_cidrs, "{glitch}");
        assert_eq!(d.policy, good.policy, "{glitch}");
        assert_eq!(d.underlay, good.underlay, "{glitch}");
        assert_eq!(d.overlay, good.overlay, "{glitch}");
        assert_eq!(d.routes, good.routes, "{glitch}");
        assert!(
            d.warnings[0].contains("keeping its last good state")
                && d.warnings[0].contains("10.244.0.0/24"),
            "{glitch}: {:?}",
            d.warnings
        );
        assert!(
            d.warnings.iter().any(|w| w.starts_with("node grabber:")),
            "{glitch}: {:?}",
            d.warnings
        );
        assert_eq!(last.as_ref().map(|n| n.name.as_str()), Some(ME));
    }

    // A real change: this node's Node, valid, with another range and address.
    let moved = node(ME, &["10.244.10.0/24"], &["192.168.0.1", "fd00:1::1"]);
    let d = keeping(&with(Some(moved)), &mut last);
    assert_eq!(d.own_cidrs, nets(&["10.244.10.0/24"]));
    assert_eq!(d.policy.v4.unwrap().pod_cidrs, nets(&["10.244.10.0/24"]));
    assert_eq!(d.policy.v6, None);
    assert!(
        !d.warnings.iter().any(|w| w.contains("keeping")),
        "{:?}",
        d.warnings
    );
    let d = keeping(&with(None), &mut last);
    assert_eq!(
        d.own_cidrs,
        nets(&["10.244.10.0/24"]),
        "the new state is kept"
    );

    // Nothing valid seen yet (the agent started during the glitch): nothing to keep.
    let d = keeping(&with(None), &mut None);
    assert!(
        d.own_error
            .unwrap()
            .contains("not in the API server's node list")
    );
    assert_eq!(d.policy, NodePolicy::default());
}
