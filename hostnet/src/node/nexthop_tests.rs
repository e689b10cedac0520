//! Our routes through nexthop objects of ours, on the real kernel.

use super::tests::{net, node_on_a_lan_with_foreign_routes, route, watched};
use super::{NodeNet, ROUTE_PROTO};
use crate::netlink::{IpFamily, Netlink};
use testkit::privileged;

/// Our nexthops: (id, gateway).
fn our_nexthops(nl: &Netlink) -> Vec<(u32, std::net::IpAddr)> {
    let mut hops: Vec<_> = nl
        .nexthops()
        .unwrap()
        .into_iter()
        .filter(|nh| nh.protocol == ROUTE_PROTO)
        .map(|nh| (nh.id, nh.gateway))
        .collect();
    hops.sort();
    hops
}

/// Every route of ours: (dst, nexthop id).
fn our_kernel_routes(nl: &Netlink) -> Vec<(ipnetwork::IpNetwork, Option<u32>)> {
    [IpFamily::V4, IpFamily::V6]
        .into_iter()
        .flat_map(|f| nl.routes_of_protocol(f, ROUTE_PROTO).unwrap())
        .map(|r| (r.dst, r.nh_id))
        .collect()
}

#[test]
#[ignore = "needs root"]
fn routes_go_through_one_nexthop_per_gateway_and_leave_none() {
    if !privileged("routes_go_through_one_nexthop_per_gateway_and_leave_none") {
        return;
    }
    let (node, _peer) = node_on_a_lan_with_foreign_routes();
    // The gateway without compat mode: only our nexthop dump can tell it.
    node.sh("sysctl", &["-qw", "net.ipv4.nexthop_compat_mode=0"]);
    let k = node.node();
    let mut routes = vec![
        route("10.1.0.0/24", "192.168.50.2"),
        route("10.3.0.0/24", "192.168.50.2"),
        route("10.4.0.0/24", "192.168.50.4"),
        route("fd01::/64", "fd50::2"),
    ];
    for r in k.add_routes(&routes) {
        r.unwrap();
    }
    let hops = our_nexthops(&node.nl);
    let gateways: Vec<_> = hops.iter().map(|h| h.1).collect();
    assert_eq!(gateways.len(), 3, "one per gateway: {hops:?}");
    let kernel = our_kernel_routes(&node.nl);
    assert_eq!(kernel.len(), 4, "{kernel:?}");
    assert!(kernel.iter().all(|r| r.1.is_some()), "{kernel:?}");
    let mut ours = k.our_routes().unwrap();
    ours.sort();
    routes.sort();
    assert_eq!(ours, routes);
    // A fresh agent (a restart) sees the same.
    let mut again = node.node().our_routes().unwrap();
    again.sort();
    assert_eq!(again, routes);

    // The last route of a gateway takes its nexthop along; others stay.
    k.del_route(&route("10.4.0.0/24", "192.168.50.4")).unwrap();
    assert_eq!(our_nexthops(&node.nl).len(), 2);
    k.del_route(&route("10.1.0.0/24", "192.168.50.2")).unwrap();
    assert_eq!(our_nexthops(&node.nl).len(), 2);
    // A replace moves to the new gateway's nexthop; the old one goes at the next read.
    k.replace_route(&route("10.3.0.0/24", "192.168.50.5"))
        .unwrap();
    k.our_routes().unwrap();
    let hops = our_nexthops(&node.nl);
    assert!(
        hops.iter()
            .all(|h| h.1 != "192.168.50.2".parse::<std::net::IpAddr>().unwrap()),
        "{hops:?}"
    );
    for r in k.our_routes().unwrap() {
        k.del_route(&r).unwrap();
    }
    assert!(our_kernel_routes(&node.nl).is_empty());
    assert!(our_nexthops(&node.nl).is_empty());
    // Someone else's route stays.
    let v4 = node.nl.routes(IpFamily::V4).unwrap();
    assert!(v4.iter().any(|r| r.dst == net("10.2.0.0/24")), "{v4:?}");
}

#[test]
#[ignore = "needs root"]
fn a_plain_route_of_an_earlier_version_is_taken_over() {
    if !privileged("a_plain_route_of_an_earlier_version_is_taken_over") {
        return;
    }
    let (node, _peer) = node_on_a_lan_with_foreign_routes();
    for (dst, gw) in [
        ("10.1.0.0/24", "192.168.50.2"),
        ("10.3.0.0/24", "192.168.50.2"),
    ] {
        node.sh("ip", &["route", "add", dst, "via", gw, "proto", "0xcb"]);
    }
    node.sh(
        "ip",
        &[
            "-6",
            "route",
            "add",
            "fd01::/64",
            "via",
            "fd50::2",
            "proto",
            "0xcb",
        ],
    );
    let k = node.node();
    let mut ours = k.our_routes().unwrap();
    ours.sort();
    assert_eq!(
        ours,
        vec![
            route("10.1.0.0/24", "192.168.50.2"),
            route("10.3.0.0/24", "192.168.50.2"),
            route("fd01::/64", "fd50::2"),
        ]
    );
    // A new route of the same gateway goes through a nexthop; the plain ones still
    // delete and replace.
    k.add_route(&route("10.5.0.0/24", "192.168.50.2")).unwrap();
    assert_eq!(our_nexthops(&node.nl).len(), 1);
    k.del_route(&route("10.1.0.0/24", "192.168.50.2")).unwrap();
    k.replace_route(&route("fd01::/64", "fd50::4")).unwrap();
    let mut ours = k.our_routes().unwrap();
    ours.sort();
    assert_eq!(
        ours,
        vec![
            route("10.3.0.0/24", "192.168.50.2"),
            route("10.5.0.0/24", "192.168.50.2"),
            route("fd01::/64", "fd50::4"),
        ]
    );
    // Uninstall's way: every route of ours deleted, nothing of ours left.
    for r in ours {
        k.del_route(&r).unwrap();
    }
    assert!(our_kernel_routes(&node.nl).is_empty());
    assert!(our_nexthops(&node.nl).is_empty());
}

#[test]
#[ignore = "needs root"]
fn a_nexthop_of_ours_deleted_by_someone_else_is_told_as_route_drift() {
    let test = "a_nexthop_of_ours_deleted_by_someone_else_is_told_as_route_drift";
    if !privileged(test) {
        return;
    }
    let (node, _peer) = node_on_a_lan_with_foreign_routes();
    let k = node.node();
    let (_watch, rx) = watched(&k);
    k.add_route(&route("10.1.0.0/24", "192.168.50.2")).unwrap();
    let hops = our_nexthops(&node.nl);
    assert_eq!(hops.len(), 1, "{hops:?}");
    // The kernel deletes the route with its nexthop, and tells of the nexthop only.
    node.sh("ip", &["nexthop", "del", "id", &hops[0].0.to_string()]);
    let told = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("a notification");
    assert!(told.routes, "{told:?}");
    assert!(k.our_routes().unwrap().is_empty());
    // The next add makes a new one.
    k.add_route(&route("10.1.0.0/24", "192.168.50.2")).unwrap();
    assert_eq!(our_nexthops(&node.nl).len(), 1);
}
