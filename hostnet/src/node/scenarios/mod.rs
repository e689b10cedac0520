//! The seam's behaviour written once: each scenario runs on `FakeNodeNet` (a plain unit
//! test) and, as root, on `HostNodeNet` in a namespace of its own (`on_kernel::*`), and
//! asserts the same observable results: what the [`NodeNet`] methods return, their errors'
//! errno, what the list methods show. A fake that drifts from the kernel fails here.
//!
//! What a scenario arranges beside the seam (links, someone else's routes, someone
//! deleting our entries) goes through [`Arrange`], done by each side (`sides.rs`) as the
//! kernel would.

mod sides;

use std::net::IpAddr;

use super::tests::{ip, net};
use super::{
    FamilyPolicy, NodeNet, NodeNetError, NodePolicy, OverlayPeer, PodRoute, PolicyNet, VxlanSpec,
    libc_errno,
};
use sides::{OnFake, OnKernel};

/// What a scenario arranges on the node beside the seam.
trait Arrange {
    fn net(&self) -> &dyn NodeNet;
    /// A link `name`, up, holding `addrs` (`a.b.c.d/len`) and their connected routes.
    fn link(&self, name: &str, addrs: &[&str]);
    /// Someone else's route `dst via gw metric metric`.
    fn foreign_route(&self, dst: &str, gw: &str, metric: u32);
    /// Someone deletes our VXLAN device.
    fn delete_vxlan_device(&self);
    /// Someone else's VXLAN device `name` (VNI, UDP port) over the lan's IPv4 address.
    fn foreign_vxlan(&self, name: &str, vni: u32, port: u16);
    /// Someone deletes the FDB entry of the peer `node_ip` (its routes stay).
    fn drop_fdb(&self, node_ip: IpAddr);
    /// Someone deletes our overlay route to `cidr` (the FDB entry stays).
    fn drop_overlay_route(&self, cidr: &str);
    /// Someone deletes `cidr` from our firewall's set of pod ranges.
    fn drop_firewall_pod_range(&self, cidr: &str);
    /// Someone deletes our firewall table.
    fn drop_firewall_table(&self);
    /// Whether nf_tables can be used here (the firewall scenario's gate).
    fn nft_usable(&self, test: &str) -> bool;
    fn policy(&self) -> &dyn PolicyNet;
    /// A UDP datagram the node sends from `from` to `to` (`addr:port`): a conntrack entry.
    fn udp_flow(&self, from: &str, to: &str);
}

/// A result as the scenarios compare it: success, or the error's errno.
fn errno<T>(r: Result<T, NodeNetError>) -> Result<T, Option<i32>> {
    r.map_err(|e| e.errno())
}

const EEXIST: Result<(), Option<i32>> = Err(Some(libc_errno::EEXIST));
const ESRCH: Result<(), Option<i32>> = Err(Some(libc_errno::ESRCH));
const ENOENT: Result<(), Option<i32>> = Err(Some(libc_errno::ENOENT));
const ENODEV: Result<(), Option<i32>> = Err(Some(libc_errno::ENODEV));
const ENETUNREACH: Result<(), Option<i32>> = Err(Some(nix::libc::ENETUNREACH));
const EHOSTUNREACH: Result<(), Option<i32>> = Err(Some(nix::libc::EHOSTUNREACH));

fn route(dst: &str, gw: &str) -> PodRoute {
    PodRoute {
        dst: net(dst),
        gateway: ip(gw),
    }
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

fn our_routes(net: &dyn NodeNet) -> Vec<PodRoute> {
    sorted(net.our_routes().unwrap())
}

/// The node on a lan: 192.168.50.1/24 and fd50::1/64.
fn on_a_lan(a: &dyn Arrange) {
    a.link("lan0", &["192.168.50.1/24", "fd50::1/64"]);
}

/// Routes to one destination: ours is refused where any route already goes (whatever its
/// metric), a second of ours too; replace changes ours in place, beside someone else's at
/// another metric; delete takes only ours.
fn routes_to_one_destination(a: &dyn Arrange) {
    on_a_lan(a);
    let k = a.net();
    // Someone else's routes, at metric 100 (ours get the kernel's default).
    a.foreign_route("10.2.0.0/24", "192.168.50.3", 100);
    a.foreign_route("fd02::/64", "fd50::3", 100);
    for (dst, gw, theirs) in [
        ("10.2.0.0/24", "192.168.50.2", "192.168.50.3"),
        ("fd02::/64", "fd50::2", "fd50::3"),
    ] {
        assert_eq!(errno(k.add_route(&route(dst, gw))), EEXIST, "{dst}");
        assert_eq!(errno(k.del_route(&route(dst, gw))), ESRCH, "{dst}");
        // Their gateway but our protocol: not theirs to delete.
        assert_eq!(errno(k.del_route(&route(dst, theirs))), ESRCH, "{dst}");
    }
    assert_eq!(our_routes(k), vec![]);

    // Ours, then a second to the same destination (same or other gateway): refused.
    for (dst, gw, other) in [
        ("10.1.0.0/24", "192.168.50.2", "192.168.50.4"),
        ("fd01::/64", "fd50::2", "fd50::4"),
    ] {
        assert_eq!(errno(k.add_route(&route(dst, gw))), Ok(()), "{dst}");
        assert_eq!(errno(k.add_route(&route(dst, gw))), EEXIST, "{dst}");
        assert_eq!(errno(k.add_route(&route(dst, other))), EEXIST, "{dst}");
    }
    // Two of one batch to one destination: the first is added, the second refused.
    let batch = [
        route("10.3.0.0/24", "192.168.50.2"),
        route("10.3.0.0/24", "192.168.50.4"),
    ];
    let got: Vec<_> = k.add_routes(&batch).into_iter().map(errno).collect();
    assert_eq!(got, vec![Ok(()), EEXIST]);
    // A connected prefix holds its destination too.
    assert_eq!(
        errno(k.add_route(&route("192.168.50.0/24", "192.168.50.2"))),
        EEXIST
    );
    assert_eq!(
        our_routes(k),
        vec![
            route("10.1.0.0/24", "192.168.50.2"),
            route("10.3.0.0/24", "192.168.50.2"),
            route("fd01::/64", "fd50::2"),
        ]
    );

    // Someone adds theirs beside ours at another metric; our replace changes only ours.
    a.foreign_route("10.1.0.0/24", "192.168.50.3", 100);
    a.foreign_route("fd01::/64", "fd50::3", 100);
    k.replace_route(&route("10.1.0.0/24", "192.168.50.5"))
        .unwrap();
    k.replace_route(&route("fd01::/64", "fd50::5")).unwrap();
    assert_eq!(
        errno(k.del_route(&route("10.1.0.0/24", "192.168.50.2"))),
        ESRCH,
        "the old gateway is gone"
    );
    assert_eq!(
        our_routes(k),
        vec![
            route("10.1.0.0/24", "192.168.50.5"),
            route("10.3.0.0/24", "192.168.50.2"),
            route("fd01::/64", "fd50::5"),
        ]
    );
    // Replace where only theirs goes (another metric): ours is made beside theirs.
    k.replace_route(&route("10.2.0.0/24", "192.168.50.2"))
        .unwrap();
    assert!(our_routes(k).contains(&route("10.2.0.0/24", "192.168.50.2")));
    for r in our_routes(k) {
        k.del_route(&r).unwrap();
        assert_eq!(errno(k.del_route(&r)), ESRCH, "{r:?}");
    }
    assert_eq!(our_routes(k), vec![]);
    // Theirs stayed through all of it.
    for dst in ["10.1.0.0/24", "10.2.0.0/24", "fd01::/64", "fd02::/64"] {
        let gw = if dst.contains(':') {
            "fd50::2"
        } else {
            "192.168.50.2"
        };
        assert_eq!(errno(k.add_route(&route(dst, gw))), EEXIST, "{dst}");
    }
}

/// A route needs its gateway on-link: a gateway reached through another gateway, or not
/// at all, is refused.
fn a_gateway_off_the_link(a: &dyn Arrange) {
    let k = a.net();
    assert_eq!(
        errno(k.add_route(&route("10.1.0.0/24", "192.168.50.2"))),
        ENETUNREACH,
        "no route to the gateway"
    );
    let v6 = errno(k.add_route(&route("fd01::/64", "fd50::2")));
    assert_eq!(v6, EHOSTUNREACH, "no route to the gateway");
    on_a_lan(a);
    a.foreign_route("0.0.0.0/0", "192.168.50.254", 0);
    a.foreign_route("::/0", "fd50::fe", 1024);
    assert_eq!(
        errno(k.add_route(&route("10.1.0.0/24", "10.9.9.9"))),
        ENETUNREACH,
        "a gateway behind the default route"
    );
    let v6 = errno(k.add_route(&route("fd01::/64", "2001:db8::9")));
    assert_eq!(v6, EHOSTUNREACH, "a gateway behind the default route");
    assert_eq!(
        errno(k.replace_route(&route("10.1.0.0/24", "10.9.9.9"))),
        ENETUNREACH
    );
    assert_eq!(our_routes(k), vec![]);
    k.add_route(&route("10.1.0.0/24", "192.168.50.2")).unwrap();
    k.add_route(&route("fd01::/64", "fd50::2")).unwrap();
}

/// Whether an address is on-link: the most specific route to it has no gateway.
fn on_link_answers(a: &dyn Arrange) {
    let k = a.net();
    assert!(!k.on_link(ip("192.168.50.2")).unwrap(), "no route at all");
    on_a_lan(a);
    a.foreign_route("0.0.0.0/0", "192.168.50.254", 0);
    a.foreign_route("::/0", "fd50::fe", 1024);
    // Someone else's more specific route inside the lan, through a router.
    a.foreign_route("192.168.50.128/25", "192.168.50.3", 0);
    k.add_route(&route("10.1.0.0/24", "192.168.50.2")).unwrap();
    let asked = [
        "192.168.50.2",
        "192.168.50.1",
        "fd50::2",
        "192.168.50.200",
        "10.1.0.5",
        "10.9.9.9",
        "2001:db8::1",
    ];
    let addrs: Vec<IpAddr> = asked.iter().map(|a| ip(a)).collect();
    let one_by_one: Vec<bool> = addrs.iter().map(|a| k.on_link(*a).unwrap()).collect();
    assert_eq!(
        one_by_one,
        [true, true, true, false, false, false, false],
        "{asked:?}"
    );
    let many: Vec<bool> = k
        .on_link_many(&addrs)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(many, one_by_one);
}

fn spec(addr4: Option<&str>, addr6: Option<&str>) -> VxlanSpec {
    VxlanSpec {
        vni: 7,
        port: 8472,
        local: ip("192.168.50.1"),
        underlay_mtu: 1500,
        addr4: addr4.map(|a| a.parse().unwrap()),
        addr6: addr6.map(|a| a.parse().unwrap()),
    }
}

/// One address on two links, and the overlay device's own addresses beside the pod
/// bridge's: every one is listed, as often as a link holds it.
fn duplicate_addresses(a: &dyn Arrange) {
    on_a_lan(a);
    // The bridge of this node's pod range, and a second link with the lan's address.
    a.link("cni0", &["10.244.1.1/24", "fd10:1::1/64"]);
    a.link("lan1", &["192.168.50.1/24"]);
    let k = a.net();
    let count = |addr: &str| {
        let local = k.local_addrs().unwrap();
        local.iter().filter(|a| **a == ip(addr)).count()
    };
    assert_eq!(count("192.168.50.1"), 2);
    assert!(k.on_link(ip("192.168.50.9")).unwrap());
    // The device's addresses: the pod range's network address, which in IPv6 is also
    // the bridge's subnet-router anycast address (not listed as an address).
    k.ensure_vxlan(&spec(Some("10.244.1.0"), Some("fd10:1::")))
        .unwrap();
    k.ensure_vxlan(&spec(Some("10.244.1.0"), Some("fd10:1::")))
        .unwrap();
    assert_eq!((count("10.244.1.0"), count("fd10:1::")), (1, 1));
    assert!(k.on_link(ip("10.244.1.0")).unwrap(), "a local address");
    // A changed address replaces the old one.
    k.ensure_vxlan(&spec(Some("10.244.2.0"), Some("fd10:1::")))
        .unwrap();
    assert_eq!((count("10.244.1.0"), count("10.244.2.0")), (0, 1));
    // The same address as another link's: allowed, listed twice.
    a.link("dup0", &["10.244.2.0/32"]);
    assert_eq!(count("10.244.2.0"), 2);
    k.remove_vxlan().unwrap();
    assert_eq!((count("10.244.2.0"), count("fd10:1::")), (1, 0));
    assert_eq!(count("10.244.1.1"), 1);
}

/// Another VXLAN device on our VNI and port (flannel's) keeps ours from being made:
/// EADDRINUSE; on another port it does not. Ours, once made, is kept.
fn a_vxlan_device_of_someone_else(a: &dyn Arrange) {
    on_a_lan(a);
    let k = a.net();
    a.foreign_vxlan("flannel.1", 7, 8472);
    assert_eq!(
        errno(k.ensure_vxlan(&spec(None, None))),
        Err(Some(libc_errno::EADDRINUSE))
    );
    assert_eq!(
        errno(k.add_overlay_peer(&peer("192.168.60.2", &[]))),
        ENODEV
    );
    let elsewhere = VxlanSpec {
        port: 4789,
        ..spec(None, None)
    };
    k.ensure_vxlan(&elsewhere).unwrap();
    k.ensure_vxlan(&elsewhere).unwrap();
    k.remove_vxlan().unwrap();
}

fn peer(node_ip: &str, cidrs: &[&str]) -> OverlayPeer {
    OverlayPeer::new(ip(node_ip), cidrs.iter().map(|c| net(c)).collect())
}

/// Without our device: peers need it (ENODEV), listing and removing find nothing. A
/// device someone deletes takes its peers with it.
fn a_missing_device(a: &dyn Arrange) {
    on_a_lan(a);
    let k = a.net();
    let p = peer("192.168.60.2", &["10.244.3.0/24", "fd10:3::/64"]);
    assert_eq!(errno(k.add_overlay_peer(&p)), ENODEV);
    assert_eq!(k.overlay_peers().unwrap(), vec![]);
    k.del_overlay_peer(&p).unwrap();
    k.remove_vxlan().unwrap();
    k.ensure_vxlan(&spec(None, None)).unwrap();
    k.add_overlay_peer(&p).unwrap();
    assert_eq!(k.overlay_peers().unwrap(), vec![p.clone()]);
    a.delete_vxlan_device();
    assert_eq!(k.overlay_peers().unwrap(), vec![]);
    assert_eq!(errno(k.add_overlay_peer(&p)), ENODEV);
    k.del_overlay_peer(&p).unwrap();
    k.remove_vxlan().unwrap();
    // Its ranges are free again for a direct route.
    k.add_route(&route("10.244.3.0/24", "192.168.50.2"))
        .unwrap();
}

/// A peer's FDB entry, neighbour entries and routes: set up idempotently, listed back,
/// refused where another route holds a range, and rebuilt from what is left when
/// someone deletes part of them.
fn overlay_entries(a: &dyn Arrange) {
    on_a_lan(a);
    let k = a.net();
    k.ensure_vxlan(&spec(Some("10.244.1.0"), Some("fd10:1::")))
        .unwrap();
    let pa = peer("192.168.60.2", &["10.244.3.0/24", "fd10:3::/64"]);
    let pb = peer("192.168.60.3", &["10.244.4.0/24"]);
    for p in [&pa, &pa, &pb] {
        k.add_overlay_peer(p).unwrap();
    }
    assert_eq!(k.overlay_peers().unwrap(), vec![pa.clone(), pb.clone()]);
    assert_eq!(our_routes(k), vec![], "overlay routes are not direct ones");
    // A range a direct route of ours or someone else's holds: refused, nothing changed.
    k.add_route(&route("10.244.5.0/24", "192.168.50.2"))
        .unwrap();
    a.foreign_route("10.244.6.0/24", "192.168.50.3", 100);
    for held in ["10.244.5.0/24", "10.244.6.0/24"] {
        let pc = peer("192.168.60.4", &["10.244.7.0/24", held]);
        assert_eq!(errno(k.add_overlay_peer(&pc)), EEXIST, "{held}");
    }
    assert_eq!(
        errno(k.add_route(&route("10.244.3.0/24", "192.168.50.2"))),
        EEXIST,
        "an overlay route holds it"
    );
    assert_eq!(k.overlay_peers().unwrap(), vec![pa.clone(), pb.clone()]);

    // A second peer with another's range takes it over (its entries replace the first's).
    let pd = peer("192.168.60.5", &["10.244.4.0/24"]);
    k.add_overlay_peer(&pd).unwrap();
    let pb_left = peer("192.168.60.3", &[]);
    assert_eq!(
        k.overlay_peers().unwrap(),
        vec![pa.clone(), pb_left.clone(), pd.clone()]
    );
    k.del_overlay_peer(&pd).unwrap();
    k.add_overlay_peer(&pb).unwrap();
    assert_eq!(k.overlay_peers().unwrap(), vec![pa.clone(), pb.clone()]);

    // A peer's changed ranges: delete the old, add the new.
    let pb2 = peer("192.168.60.3", &["10.244.4.0/24", "10.244.8.0/24"]);
    k.del_overlay_peer(&pb).unwrap();
    k.del_overlay_peer(&pb).unwrap();
    k.add_overlay_peer(&pb2).unwrap();
    assert_eq!(k.overlay_peers().unwrap(), vec![pa.clone(), pb2.clone()]);

    // Someone deletes a route: the peer is listed with what it has; re-adding restores.
    a.drop_overlay_route("10.244.8.0/24");
    let half = peer("192.168.60.3", &["10.244.4.0/24"]);
    assert_eq!(k.overlay_peers().unwrap(), vec![pa.clone(), half]);
    k.add_overlay_peer(&pb2).unwrap();
    assert_eq!(k.overlay_peers().unwrap(), vec![pa.clone(), pb2.clone()]);
    // Adding with fewer ranges removes none: only a delete does.
    k.add_overlay_peer(&pb).unwrap();
    assert_eq!(k.overlay_peers().unwrap(), vec![pa.clone(), pb2.clone()]);

    // Someone deletes a peer's FDB entry: its routes lead nowhere and are listed under the
    // unspecified address of their family, which deleting clears.
    a.drop_fdb(pa.node_ip);
    let strays = vec![
        peer("0.0.0.0", &["10.244.3.0/24"]),
        peer("::", &["fd10:3::/64"]),
    ];
    let mut want = strays.clone();
    want.push(pb2.clone());
    assert_eq!(sorted(k.overlay_peers().unwrap()), sorted(want));
    for s in &strays {
        k.del_overlay_peer(s).unwrap();
    }
    assert_eq!(k.overlay_peers().unwrap(), vec![pb2.clone()]);

    // A new device (another VNI) drops every peer.
    k.ensure_vxlan(&VxlanSpec {
        vni: 8,
        ..spec(Some("10.244.1.0"), Some("fd10:1::"))
    })
    .unwrap();
    assert_eq!(k.overlay_peers().unwrap(), vec![]);
}

/// The device's addresses change in place and keep its peers, except that the kernel
/// drops a family's routes through a device that loses its last address of that family.
fn overlay_addresses_and_routes(a: &dyn Arrange) {
    on_a_lan(a);
    let k = a.net();
    let both = peer("192.168.60.2", &["10.244.3.0/24", "fd10:3::/64"]);
    k.ensure_vxlan(&spec(Some("10.244.1.0"), Some("fd10:1::")))
        .unwrap();
    k.add_overlay_peer(&both).unwrap();
    k.ensure_vxlan(&spec(Some("10.244.2.0"), Some("fd10:2::")))
        .unwrap();
    assert_eq!(k.overlay_peers().unwrap(), vec![both.clone()], "moved");
    k.ensure_vxlan(&spec(None, Some("fd10:2::"))).unwrap();
    let v6_only = peer("192.168.60.2", &["fd10:3::/64"]);
    assert_eq!(k.overlay_peers().unwrap(), vec![v6_only], "v4 gone");
    k.add_overlay_peer(&both).unwrap();
    // IPv6 keeps its routes: the device keeps its link-local address.
    k.ensure_vxlan(&spec(None, None)).unwrap();
    assert_eq!(k.overlay_peers().unwrap(), vec![both.clone()], "v6 kept");
}

fn family(pods: &[&str], nomasq: &[&str]) -> FamilyPolicy {
    FamilyPolicy {
        pod_cidrs: pods.iter().map(|c| net(c)).collect(),
        no_masquerade: nomasq.iter().map(|c| net(c)).collect(),
    }
}

fn policy() -> NodePolicy {
    NodePolicy {
        v4: Some(family(
            &["10.244.1.0/24"],
            &["10.244.0.0/16", "10.96.0.0/12"],
        )),
        v6: Some(family(&["fd10:1::/64"], &["fd10::/48"])),
        pods_on: "cni0".into(),
    }
}

/// Our firewall table absent, present, the same policy written otherwise, drifted, and
/// removed.
fn firewall_table(a: &dyn Arrange) {
    if !a.nft_usable("firewall_table") {
        return;
    }
    let k = a.net();
    let none = NodePolicy::default();
    assert!(!k.firewall_matches(&policy()).unwrap());
    assert!(
        k.firewall_matches(&none).unwrap(),
        "nothing wanted, nothing there"
    );
    k.remove_firewall().unwrap();
    k.apply_firewall(&policy()).unwrap();
    assert!(k.firewall_matches(&policy()).unwrap());
    assert!(!k.firewall_matches(&none).unwrap());
    // The same ranges in another order, duplicated or covered by another: the same sets.
    let same = NodePolicy {
        v4: Some(family(
            &["10.244.1.0/24", "10.244.1.0/24"],
            &["10.96.0.0/12", "10.244.0.0/16", "10.244.3.0/24"],
        )),
        ..policy()
    };
    assert!(k.firewall_matches(&same).unwrap());
    let other = NodePolicy {
        v4: Some(family(
            &["10.244.1.0/24", "10.244.9.0/24"],
            &["10.244.0.0/16"],
        )),
        ..policy()
    };
    assert!(!k.firewall_matches(&other).unwrap());
    let v4_only = NodePolicy {
        v6: None,
        ..policy()
    };
    assert!(!k.firewall_matches(&v4_only).unwrap());

    // Drift: a pod range deleted from our set, then our table deleted.
    a.drop_firewall_pod_range("10.244.1.0/24");
    assert!(!k.firewall_matches(&policy()).unwrap());
    k.apply_firewall(&policy()).unwrap();
    assert!(k.firewall_matches(&policy()).unwrap());
    a.drop_firewall_table();
    assert!(!k.firewall_matches(&policy()).unwrap());
    assert!(k.firewall_matches(&none).unwrap());
    k.apply_firewall(&policy()).unwrap();

    // A pod range of everything would forward and masquerade all: refused, nothing changed.
    let everything = NodePolicy {
        v4: Some(family(&["0.0.0.0/0"], &[])),
        v6: None,
        pods_on: "cni0".into(),
    };
    assert!(k.apply_firewall(&everything).is_err());
    assert!(k.firewall_matches(&policy()).unwrap());

    // An empty policy removes the table, as remove does.
    k.apply_firewall(&none).unwrap();
    assert!(k.firewall_matches(&none).unwrap());
    k.apply_firewall(&v4_only).unwrap();
    assert!(k.firewall_matches(&v4_only).unwrap());
    k.remove_firewall().unwrap();
    k.remove_firewall().unwrap();
    assert!(k.firewall_matches(&none).unwrap());
    assert!(!k.firewall_matches(&v4_only).unwrap());
}

/// `policy()` with these no-masquerade ranges.
fn nomasq(v4: &[&str], v6: &[&str]) -> NodePolicy {
    let mut p = policy();
    for (f, list) in [(&mut p.v4, v4), (&mut p.v6, v6)] {
        f.as_mut().unwrap().no_masquerade = list.iter().map(|c| net(c)).collect();
    }
    p
}

/// The no-masquerade ranges changed element by element: a range added, grown into its
/// neighbour, split in two, from zero and back, removed; each time the table matches the
/// new policy exactly. The same change again (from what the table no longer holds), or
/// with the table gone, fails whole (ENOENT); anything else changed is a full apply.
fn firewall_elements(a: &dyn Arrange) {
    if !a.nft_usable("firewall_elements") {
        return;
    }
    let k = a.net();
    let split: Vec<String> = (0..=255)
        .filter(|i| *i != 5)
        .map(|i| format!("10.244.{i}.0/24"))
        .collect();
    let split: Vec<&str> = split.iter().map(String::as_str).collect();
    let steps = [
        nomasq(&["10.244.0.0/16", "10.96.0.0/12"], &["fd10::/48"]),
        nomasq(
            &["10.244.0.0/16", "10.96.0.0/12", "192.168.7.0/24"],
            &["fd10::/48", "fd20::/64"],
        ),
        nomasq(
            &[
                "10.244.0.0/16",
                "10.96.0.0/12",
                "192.168.7.0/24",
                "192.168.6.0/24",
            ],
            &["fd10::/48", "fd20::/64", "fd20:0:0:1::/64"],
        ),
        nomasq(&[&split[..], &["10.96.0.0/12"]].concat(), &["fd10::/48"]),
        nomasq(&["0.0.0.0/8", "10.96.0.0/12"], &["::/8", "fd10::/48"]),
        nomasq(&["10.96.0.0/12"], &["fd10::/48"]),
        nomasq(&[], &[]),
        nomasq(&["10.96.0.0/13", "10.104.0.0/13"], &["fd10::/48"]),
    ];
    k.apply_firewall(&steps[0]).unwrap();
    for pair in steps.windows(2) {
        let (from, to) = (&pair[0], &pair[1]);
        k.update_firewall(from, to).unwrap();
        assert!(k.firewall_matches(to).unwrap(), "{to:?}");
        assert!(!k.firewall_matches(from).unwrap(), "{from:?}");
    }
    let to = &steps[7];
    // Written otherwise, the same ranges: nothing to change.
    let same = nomasq(&["10.96.0.0/12"], &["fd10::/48", "fd10::/64"]);
    k.update_firewall(to, &same).unwrap();
    assert!(k.firewall_matches(to).unwrap());
    // Again from what is no longer there: refused whole, the table as it was.
    let back = nomasq(&["10.244.0.0/16"], &[]);
    assert_eq!(errno(k.update_firewall(&steps[1], &back)), ENOENT);
    assert!(k.firewall_matches(to).unwrap());
    // Not only elements: made anew.
    let other = NodePolicy {
        pods_on: "br0".into(),
        ..steps[0].clone()
    };
    k.update_firewall(to, &other).unwrap();
    assert!(k.firewall_matches(&other).unwrap());
    a.drop_firewall_table();
    let more = NodePolicy {
        pods_on: "br0".into(),
        ..steps[1].clone()
    };
    assert_eq!(errno(k.update_firewall(&other, &more)), ENOENT);
    assert!(k.firewall_matches(&NodePolicy::default()).unwrap());
    k.remove_firewall().unwrap();
}

/// Conntrack entries listed with both tuples and deleted one by one: an entry gone (or
/// named with another id) is no error and deletes nothing; the others stay.
fn conntrack_entries(a: &dyn Arrange) {
    use netpol::conntrack::{CtEntry, L4};
    on_a_lan(a);
    let p = a.policy();
    // A table with `ct state` rules: the kernel tracks connections in this namespace.
    p.replace_policy(&netpol::compile::base_program()).unwrap();
    a.udp_flow("192.168.50.1:5000", "192.168.50.9:53");
    a.udp_flow("[fd50::1]:5001", "[fd50::9]:53");
    let ours = |p: &dyn PolicyNet| -> Vec<CtEntry> {
        let mut v: Vec<CtEntry> = p
            .conntrack()
            .unwrap()
            .into_iter()
            .filter(|e| {
                matches!(
                    e.orig.l4,
                    L4::Ports {
                        src: 5000 | 5001,
                        ..
                    }
                )
            })
            .collect();
        v.sort_by_key(|e| e.orig);
        v
    };
    let listed = ours(p);
    let tuples: Vec<_> = listed
        .iter()
        .map(|e| (e.orig.src, e.orig.dst, e.orig.proto, e.orig.l4, e.reply.src))
        .collect();
    let ports = |src, dst| L4::Ports { src, dst };
    assert_eq!(
        tuples,
        [
            (
                ip("192.168.50.1"),
                ip("192.168.50.9"),
                17,
                ports(5000, 53),
                ip("192.168.50.9")
            ),
            (
                ip("fd50::1"),
                ip("fd50::9"),
                17,
                ports(5001, 53),
                ip("fd50::9")
            ),
        ]
    );
    assert!(listed.iter().all(|e| e.id.is_some() && e.zone == 0));
    let (v4, v6) = (listed[0], listed[1]);
    let other_id = CtEntry {
        id: v4.id.map(|i| i.wrapping_add(1)),
        ..v4
    };
    assert_eq!(p.forget_connections(&[other_id]).unwrap(), 0);
    assert_eq!(p.forget_connections(&[v4]).unwrap(), 1);
    assert_eq!(ours(p), [v6]);
    assert_eq!(p.forget_connections(&[v4, v6]).unwrap(), 1, "one was gone");
    assert_eq!(ours(p), []);
    assert_eq!(p.forget_connections(&[]).unwrap(), 0);
    p.remove_policy().unwrap();
}

/// Each scenario as two tests: `on_fake::NAME` and, as root, `on_kernel::NAME`.
macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod on_fake {
            $(
                #[test]
                fn $name() {
                    super::$name(&super::OnFake::new());
                }
            )*
        }
        mod on_kernel {
            $(
                #[test]
                #[ignore = "needs root"]
                fn $name() {
                    if !testkit::privileged(concat!("on_kernel::", stringify!($name))) {
                        return;
                    }
                    super::$name(&super::OnKernel::new());
                }
            )*
        }
    };
}

scenarios!(
    routes_to_one_destination,
    a_gateway_off_the_link,
    on_link_answers,
    duplicate_addresses,
    a_missing_device,
    a_vxlan_device_of_someone_else,
    overlay_entries,
    overlay_addresses_and_routes,
    firewall_table,
    firewall_elements,
    conntrack_entries,
);
