//! Reconcile on the fake kernel: only the difference is applied, one operation per
//! changed route, none for unchanged ones.

use super::*;
use hostnet::node::fake::FakeNodeNet;
use hostnet::node::{FamilyPolicy, NodeNet, Op, Refusal};

fn route(dst: &str, gw: &str) -> PodRoute {
    PodRoute {
        dst: dst.parse().unwrap(),
        gateway: gw.parse().unwrap(),
    }
}

fn set(routes: &[PodRoute]) -> BTreeSet<PodRoute> {
    routes.iter().cloned().collect()
}

fn policy() -> NodePolicy {
    NodePolicy {
        v4: Some(FamilyPolicy {
            pod_cidrs: vec!["10.244.0.0/24".parse().unwrap()],
            no_masquerade: vec!["10.244.0.0/16".parse().unwrap()],
        }),
        v6: None,
        pods_on: "cni0".into(),
    }
}

fn fake() -> FakeNodeNet {
    FakeNodeNet::new(vec!["192.168.0.0/24".parse().unwrap()], vec![])
}

/// The fake's change log since the last call.
fn ops(net: &FakeNodeNet) -> Vec<String> {
    net.with(|s| std::mem::take(&mut s.log))
}

#[test]
fn first_reconcile_adds_everything_and_a_second_changes_nothing() {
    let net = fake();
    let mut fwd = Applied::default();
    let want = set(&[
        route("10.244.1.0/24", "192.168.0.2"),
        route("10.244.2.0/24", "192.168.0.3"),
    ]);
    let out = reconcile(&net, &want, &Overlay::default(), &policy(), &mut fwd);
    assert_eq!((out.added, out.routes, out.firewall_applied), (2, 2, true));
    assert!(out.errors.is_empty() && out.routes_ok());
    assert_eq!(
        ops(&net),
        [
            "add 10.244.1.0/24 via 192.168.0.2",
            "add 10.244.2.0/24 via 192.168.0.3",
            "firewall"
        ]
    );
    assert_eq!(net.with(|s| s.forwarding), (true, false));
    let out = reconcile(&net, &want, &Overlay::default(), &policy(), &mut fwd);
    assert_eq!(
        (out.added, out.replaced, out.deleted, out.firewall_applied),
        (0, 0, 0, false)
    );
    assert!(ops(&net).is_empty(), "an unchanged state costs no change");
}

#[test]
fn node_added_deleted_changed_cidr_and_changed_ip_cost_one_operation_each() {
    let net = fake();
    let mut fwd = Applied::default();
    let mut want = set(&[
        route("10.244.1.0/24", "192.168.0.2"),
        route("10.244.2.0/24", "192.168.0.3"),
    ]);
    reconcile(&net, &want, &Overlay::default(), &policy(), &mut fwd);
    ops(&net);

    want.insert(route("10.244.3.0/24", "192.168.0.4"));
    reconcile(&net, &want, &Overlay::default(), &policy(), &mut fwd);
    assert_eq!(ops(&net), ["add 10.244.3.0/24 via 192.168.0.4"]);

    want.remove(&route("10.244.2.0/24", "192.168.0.3"));
    reconcile(&net, &want, &Overlay::default(), &policy(), &mut fwd);
    assert_eq!(ops(&net), ["del 10.244.2.0/24 via 192.168.0.3"]);

    // A changed InternalIP: the route is replaced in one message.
    want.remove(&route("10.244.3.0/24", "192.168.0.4"));
    want.insert(route("10.244.3.0/24", "192.168.0.14"));
    reconcile(&net, &want, &Overlay::default(), &policy(), &mut fwd);
    assert_eq!(ops(&net), ["replace 10.244.3.0/24 via 192.168.0.14"]);

    // A changed podCIDR: the old destination goes, the new one comes.
    want.remove(&route("10.244.1.0/24", "192.168.0.2"));
    want.insert(route("10.244.9.0/24", "192.168.0.2"));
    reconcile(&net, &want, &Overlay::default(), &policy(), &mut fwd);
    assert_eq!(
        ops(&net),
        [
            "del 10.244.1.0/24 via 192.168.0.2",
            "add 10.244.9.0/24 via 192.168.0.2"
        ]
    );
    assert_eq!(net.with(|s| s.ours.clone()), want);
}

#[test]
fn a_restart_with_stale_routes_removes_what_changed_while_the_agent_was_down() {
    let net = fake();
    net.with(|s| {
        s.ours = set(&[
            route("10.244.1.0/24", "192.168.0.2"),  // still wanted
            route("10.244.2.0/24", "192.168.0.3"),  // node deleted while down
            route("10.244.3.0/24", "192.168.0.40"), // its IP changed while down
        ]);
        s.firewall = Some(policy());
    });
    let want = set(&[
        route("10.244.1.0/24", "192.168.0.2"),
        route("10.244.3.0/24", "192.168.0.4"),
    ]);
    let out = reconcile(
        &net,
        &want,
        &Overlay::default(),
        &policy(),
        &mut Applied::default(),
    );
    assert_eq!(
        ops(&net),
        [
            "del 10.244.2.0/24 via 192.168.0.3",
            "replace 10.244.3.0/24 via 192.168.0.4"
        ]
    );
    assert_eq!(out.routes, 2);
    assert!(
        !out.firewall_applied,
        "a matching firewall is not rewritten"
    );
}

#[test]
fn a_foreign_route_is_left_alone_and_only_warned_about() {
    let net = fake();
    net.with(|s| {
        s.foreign.insert("10.244.1.0/24".parse().unwrap());
        s.foreign.insert("10.0.0.0/8".parse().unwrap());
    });
    let want = set(&[
        route("10.244.1.0/24", "192.168.0.2"),
        route("10.244.2.0/24", "192.168.0.3"),
    ]);
    let out = reconcile(
        &net,
        &want,
        &Overlay::default(),
        &policy(),
        &mut Applied::default(),
    );
    assert_eq!(out.foreign, ["10.244.1.0/24".parse::<IpNetwork>().unwrap()]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert!(out.warnings[0].contains("not ours"), "{:?}", out.warnings);
    assert!(
        !out.routes_ok(),
        "not ready while a wanted route is held by someone else"
    );
    assert_eq!(net.with(|s| s.foreign.len()), 2);
    assert_eq!(out.added, 1);
}

#[test]
fn one_failed_route_does_not_stop_the_others() {
    let net = fake();
    net.with(|s| {
        s.ours = set(&[route("10.244.5.0/24", "192.168.0.5")]);
        s.fail.insert("del_route");
    });
    let want = set(&[route("10.244.1.0/24", "192.168.0.2")]);
    let out = reconcile(
        &net,
        &want,
        &Overlay::default(),
        &policy(),
        &mut Applied::default(),
    );
    assert_eq!(out.added, 1);
    assert_eq!(out.errors.len(), 1);
    let e = &out.errors[0];
    assert_eq!(e.part, Part::Routes, "{e}");
    assert_eq!(
        e.error.op,
        Op::DeleteRoute(route("10.244.5.0/24", "192.168.0.5"))
    );
    // The log line names the operation and the route once.
    assert_eq!(
        e.to_string(),
        "delete route 10.244.5.0/24 via 192.168.0.5: injected failure"
    );
    assert!(out.firewall_ok && !out.routes_ok());

    // Adds failing: the firewall and forwarding still go on.
    let net = fake();
    net.with(|s| s.fail.insert("add_route"));
    let mut fwd = Applied::default();
    let out = reconcile(&net, &want, &Overlay::default(), &policy(), &mut fwd);
    assert_eq!(out.errors.len(), 1);
    assert!(out.firewall_applied && fwd.forwarding.v4);
}

#[test]
fn a_failing_firewall_or_forwarding_is_reported_and_retried() {
    let net = fake();
    net.with(|s| {
        s.fail.insert("apply_firewall");
        s.fail.insert("enable_forwarding");
    });
    let mut fwd = Applied::default();
    let out = reconcile(
        &net,
        &BTreeSet::new(),
        &Overlay::default(),
        &policy(),
        &mut fwd,
    );
    let parts: Vec<Part> = out.errors.iter().map(|e| e.part).collect();
    assert_eq!(
        parts,
        [Part::Firewall, Part::Forwarding],
        "{:?}",
        out.errors
    );
    assert!(!out.firewall_ok && !fwd.forwarding.v4 && out.routes_ok());
    net.with(|s| s.fail.clear());
    let out = reconcile(
        &net,
        &BTreeSet::new(),
        &Overlay::default(),
        &policy(),
        &mut fwd,
    );
    assert!(out.errors.is_empty() && out.firewall_applied && fwd.forwarding.v4);
}

#[test]
fn a_firewall_changed_by_someone_else_is_put_back() {
    let net = fake();
    let mut fwd = Applied::default();
    let none = Overlay::default();
    reconcile(&net, &BTreeSet::new(), &none, &policy(), &mut fwd);
    net.with(|s| s.firewall = None);
    // Until the periodic re-check, the agent trusts what it applied.
    let out = reconcile(&net, &BTreeSet::new(), &none, &policy(), &mut fwd);
    assert!(!out.firewall_applied && out.firewall_ok);
    fwd.forget();
    let out = reconcile(&net, &BTreeSet::new(), &none, &policy(), &mut fwd);
    assert!(out.firewall_applied);
}

/// `policy()` with one more no-masquerade range (another Node's).
fn grown() -> NodePolicy {
    let mut p = policy();
    let f = p.v4.as_mut().unwrap();
    f.no_masquerade.push("10.250.0.0/24".parse().unwrap());
    p
}

#[test]
fn a_trusted_pass_changes_only_the_firewall_elements_and_falls_back_when_refused() {
    let net = fake();
    let mut applied = Applied::default();
    let none = Overlay::default();
    reconcile(&net, &BTreeSet::new(), &none, &policy(), &mut applied);
    ops(&net);
    // A Node came: its range added to the set, the table neither read nor made anew.
    net.with(|s| {
        s.fail.forbid("firewall_matches");
        s.fail.forbid("apply_firewall");
    });
    let out = reconcile(&net, &BTreeSet::new(), &none, &grown(), &mut applied);
    assert!(out.firewall_applied && out.firewall_ok && out.errors.is_empty());
    assert_eq!(ops(&net), vec!["firewall elements"]);
    assert_eq!(net.with(|s| s.firewall.clone()), Some(grown()));
    // Someone removed the table: the update is refused, the pass compares and makes it.
    net.with(|s| {
        s.fail.clear();
        s.firewall = None;
    });
    let out = reconcile(&net, &BTreeSet::new(), &none, &policy(), &mut applied);
    assert!(out.firewall_applied && out.firewall_ok && out.errors.is_empty());
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert_eq!(ops(&net), vec!["firewall"]);
    assert!(net.firewall_matches(&policy()).unwrap());
}

#[test]
fn between_re_checks_an_event_reads_nothing_from_the_kernel_and_a_failure_forgets() {
    let net = fake();
    let mut applied = Applied::default();
    let mut want = set(&[route("10.244.1.0/24", "192.168.0.2")]);
    let mut over = overlay(&[peer("172.16.0.4", &["10.244.4.0/24"])]);
    reconcile(&net, &want, &over, &policy(), &mut applied);
    ops(&net);
    // Reads would fail now (tripwires, never met): an event is served from what the
    // last pass left.
    net.with(|s| {
        for read in ["our_routes", "firewall_matches", "overlay_peers"] {
            s.fail.forbid(read);
        }
    });
    want.insert(route("10.244.2.0/24", "192.168.0.3"));
    over.peers.insert(peer("172.16.0.5", &["10.244.5.0/24"]));
    let out = reconcile(&net, &want, &over, &policy(), &mut applied);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(
        ops(&net),
        [
            "add 10.244.2.0/24 via 192.168.0.3",
            "overlay 172.16.0.5 10.244.5.0/24"
        ]
    );
    assert_eq!((out.routes, out.overlay_peers), (2, 2));
    // Someone else deletes our route: seen at the re-check, put back.
    net.with(|s| {
        s.fail.clear();
        s.ours.remove(&route("10.244.1.0/24", "192.168.0.2"));
    });
    applied.forget();
    reconcile(&net, &want, &over, &policy(), &mut applied);
    assert_eq!(ops(&net), ["add 10.244.1.0/24 via 192.168.0.2"]);
    // A failed operation: the next pass reads the kernel again.
    net.with(|s| s.fail.insert("add_route"));
    want.insert(route("10.244.3.0/24", "192.168.0.4"));
    let out = reconcile(&net, &want, &over, &policy(), &mut applied);
    assert_eq!(out.errors.len(), 1);
    net.with(|s| {
        s.fail.remove("add_route");
        s.fail.insert("our_routes");
    });
    let out = reconcile(&net, &want, &over, &policy(), &mut applied);
    let e = &out.errors[0];
    assert!(
        e.part == Part::Routes && e.error.op == Op::ListRoutes,
        "{e}"
    );
}

// The overlay (issue 22).

fn peer(ip: &str, cidrs: &[&str]) -> OverlayPeer {
    OverlayPeer::new(
        ip.parse().unwrap(),
        cidrs.iter().map(|c| c.parse().unwrap()).collect(),
    )
}

fn spec(vni: u32) -> VxlanSpec {
    VxlanSpec {
        vni,
        port: 8472,
        local: "192.168.0.1".parse().unwrap(),
        underlay_mtu: 1500,
        addr4: None,
        addr6: None,
    }
}

fn overlay(peers: &[OverlayPeer]) -> Overlay {
    Overlay {
        spec: Some(spec(1)),
        peers: peers.iter().cloned().collect(),
    }
}

#[test]
fn overlay_peers_get_the_device_once_and_an_unchanged_overlay_costs_nothing() {
    let net = fake();
    let mut fwd = Applied::default();
    let routes = set(&[route("10.244.1.0/24", "192.168.0.2")]);
    let want = overlay(&[
        peer("172.16.0.4", &["10.244.4.0/24", "fd00:244:4::/64"]),
        peer("172.16.0.5", &["10.244.5.0/24"]),
    ]);
    let out = reconcile(&net, &routes, &want, &policy(), &mut fwd);
    assert!(out.errors.is_empty() && out.routes_ok(), "{:?}", out.errors);
    assert_eq!((out.routes, out.overlay_peers), (1, 2));
    assert_eq!(
        ops(&net),
        [
            "vxlan vni 1 local 192.168.0.1",
            "add 10.244.1.0/24 via 192.168.0.2",
            "overlay 172.16.0.4 10.244.4.0/24,fd00:244:4::/64",
            "overlay 172.16.0.5 10.244.5.0/24",
            "firewall"
        ]
    );
    let out = reconcile(&net, &routes, &want, &policy(), &mut fwd);
    assert!(ops(&net).is_empty(), "{:?}", out.changes);
    assert_eq!(out.overlay_peers, 2);
}

#[test]
fn a_range_moving_between_direct_route_and_overlay_is_freed_by_the_old_kind_first() {
    let net = fake();
    let mut fwd = Applied::default();
    let direct = set(&[route("10.244.3.0/24", "192.168.0.3")]);
    reconcile(&net, &direct, &Overlay::default(), &policy(), &mut fwd);
    ops(&net);
    // The peer moved behind a router: the direct route goes before the overlay claims it.
    let moved = overlay(&[peer("172.16.0.3", &["10.244.3.0/24"])]);
    let out = reconcile(&net, &BTreeSet::new(), &moved, &policy(), &mut fwd);
    assert!(out.errors.is_empty() && out.routes_ok(), "{:?}", out);
    assert_eq!(
        ops(&net),
        [
            "del 10.244.3.0/24 via 192.168.0.3",
            "vxlan vni 1 local 192.168.0.1",
            "overlay 172.16.0.3 10.244.3.0/24"
        ]
    );
    // Back on-link: the overlay (and the device nobody needs) goes, then the route.
    let out = reconcile(&net, &direct, &Overlay::default(), &policy(), &mut fwd);
    assert!(out.errors.is_empty() && out.routes_ok(), "{:?}", out);
    assert_eq!(
        ops(&net),
        ["remove vxlan", "add 10.244.3.0/24 via 192.168.0.3"]
    );
    assert_eq!((out.routes, out.overlay_peers), (1, 0));
}

#[test]
fn a_changed_peer_is_deleted_then_added_and_a_deleted_one_removed() {
    let net = fake();
    let mut fwd = Applied::default();
    let a = peer("172.16.0.4", &["10.244.4.0/24"]);
    let b = peer("172.16.0.5", &["10.244.5.0/24"]);
    reconcile(
        &net,
        &BTreeSet::new(),
        &overlay(&[a.clone(), b]),
        &policy(),
        &mut fwd,
    );
    ops(&net);
    // b's node changed address and a's got a second range: each old one goes first
    // (the new one may share its ranges).
    let b2 = peer("172.16.0.50", &["10.244.5.0/24"]);
    let a2 = peer("172.16.0.4", &["10.244.4.0/24", "fd00:244:4::/64"]);
    let out = reconcile(
        &net,
        &BTreeSet::new(),
        &overlay(&[a2.clone(), b2.clone()]),
        &policy(),
        &mut fwd,
    );
    assert_eq!(
        ops(&net),
        [
            "del overlay 172.16.0.4",
            "del overlay 172.16.0.5",
            "overlay 172.16.0.4 10.244.4.0/24,fd00:244:4::/64",
            "overlay 172.16.0.50 10.244.5.0/24"
        ]
    );
    assert_eq!(out.overlay_peers, 2);
    // A node deleted: its peer goes, the device stays for the other.
    reconcile(
        &net,
        &BTreeSet::new(),
        &overlay(std::slice::from_ref(&a2)),
        &policy(),
        &mut fwd,
    );
    assert_eq!(ops(&net), ["del overlay 172.16.0.50"]);
    assert_eq!(net.overlay_peers().unwrap(), [a2]);
}

#[test]
fn a_changed_device_is_made_anew_and_its_peers_put_back() {
    let net = fake();
    let mut fwd = Applied::default();
    let a = peer("172.16.0.4", &["10.244.4.0/24"]);
    reconcile(
        &net,
        &BTreeSet::new(),
        &overlay(std::slice::from_ref(&a)),
        &policy(),
        &mut fwd,
    );
    ops(&net);
    let mut want = overlay(std::slice::from_ref(&a));
    want.spec = Some(spec(7));
    let out = reconcile(&net, &BTreeSet::new(), &want, &policy(), &mut fwd);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(
        ops(&net),
        [
            "vxlan vni 7 local 192.168.0.1",
            "overlay 172.16.0.4 10.244.4.0/24"
        ]
    );
}

#[test]
fn overlay_failures_are_reported_per_item_and_the_rest_still_applied() {
    let net = fake();
    net.with(|s| s.fail.insert("add_overlay_peer"));
    let mut fwd = Applied::default();
    let routes = set(&[route("10.244.1.0/24", "192.168.0.2")]);
    let want = overlay(&[
        peer("172.16.0.4", &["10.244.4.0/24"]),
        peer("172.16.0.5", &["10.244.5.0/24"]),
    ]);
    let out = reconcile(&net, &routes, &want, &policy(), &mut fwd);
    assert_eq!(out.errors.len(), 2, "{:?}", out.errors);
    let e = &out.errors[0];
    assert_eq!(e.part, Part::Overlay, "{e}");
    assert_eq!(
        e.error.op,
        Op::AddOverlayPeer(peer("172.16.0.4", &["10.244.4.0/24"]))
    );
    assert!(!out.routes_ok() && out.firewall_ok && out.added == 1);

    // No device: no peer is tried, the routes and firewall still go on.
    let net = fake();
    net.with(|s| s.fail.insert("ensure_vxlan"));
    let out = reconcile(&net, &routes, &want, &policy(), &mut Applied::default());
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    let e = &out.errors[0];
    assert!(
        e.part == Part::Overlay && e.error.op == Op::EnsureVxlan,
        "{e}"
    );
    assert!(!out.routes_ok() && out.firewall_applied && out.added == 1);
}

#[test]
fn a_foreign_route_holding_a_peers_range_is_left_alone() {
    let net = fake();
    net.with(|s| s.foreign.insert("10.244.4.0/24".parse().unwrap()));
    let want = overlay(&[peer("172.16.0.4", &["10.244.4.0/24"])]);
    let out = reconcile(
        &net,
        &BTreeSet::new(),
        &want,
        &policy(),
        &mut Applied::default(),
    );
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.foreign, ["10.244.4.0/24".parse::<IpNetwork>().unwrap()]);
    assert!(out.warnings[0].contains("not an overlay route of ours"));
    assert!(!out.routes_ok());
}

/// Issue 27 item 3: the device is the receive side, kept when no peer of ours needs it.
#[test]
fn the_device_stays_without_peers_while_wanted_and_goes_only_when_not() {
    let net = fake();
    let mut fwd = Applied::default();
    let a = peer("172.16.0.4", &["10.244.4.0/24"]);
    reconcile(&net, &BTreeSet::new(), &overlay(&[a]), &policy(), &mut fwd);
    ops(&net);
    // The peer turned on-link: its entries go, the device stays.
    let out = reconcile(&net, &BTreeSet::new(), &overlay(&[]), &policy(), &mut fwd);
    assert!(out.errors.is_empty() && out.routes_ok(), "{:?}", out.errors);
    assert_eq!(ops(&net), ["del overlay 172.16.0.4"]);
    fwd.forget();
    reconcile(&net, &BTreeSet::new(), &overlay(&[]), &policy(), &mut fwd);
    assert!(ops(&net).is_empty());
    assert_eq!(net.with(|s| s.vxlan), Some(spec(1)));
    // A fresh node with no peer makes it too.
    let net = fake();
    let mut fresh = Applied::default();
    reconcile(&net, &BTreeSet::new(), &overlay(&[]), &policy(), &mut fresh);
    assert_eq!(net.with(|s| s.vxlan), Some(spec(1)));
}

/// Issue 27 item 4: another VXLAN device on our VNI and port (flannel.1 after a migration)
/// blocks the overlay with one finding that names it and says what to do; the direct
/// routes and the firewall still go on.
#[test]
fn a_vxlan_device_on_our_vni_and_port_blocks_the_overlay_and_says_what_to_do() {
    let net = fake();
    net.with(|s| s.other_vxlan.push(("flannel.1".into(), 1, 8472, false)));
    let routes = set(&[route("10.244.1.0/24", "192.168.0.2")]);
    let want = overlay(&[peer("172.16.0.4", &["10.244.4.0/24"])]);
    let mut fwd = Applied::default();
    let out = reconcile(&net, &routes, &want, &policy(), &mut fwd);
    let blocked = out.overlay_blocked.as_ref().expect("blocked");
    assert!(
        matches!(blocked.0.refusal(), Some(Refusal::VniInUse { device, .. }) if device == "flannel.1"),
        "{out:?}"
    );
    let why = blocked.to_string();
    assert!(
        why.contains("flannel.1") && why.contains("--vxlan-vni") && why.contains("delete it"),
        "{why}"
    );
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert!(!out.routes_ok() && out.firewall_ok && out.added == 1);
    assert_eq!(net.with(|s| s.vxlan), None);
    // Another VNI: no clash.
    let mut other = want.clone();
    other.spec = Some(spec(7));
    let out = reconcile(&net, &routes, &other, &policy(), &mut fwd);
    assert!(out.overlay_blocked.is_none() && out.routes_ok(), "{out:?}");
}

/// The compare of only the changed routes (`reconcile_changed`) against the compare of all,
/// each on its own fake, over a long random sequence: wanted routes coming, going and
/// changing gateway, foreign routes in the way and gone again, re-checks.
#[test]
fn comparing_only_the_changed_routes_does_what_comparing_all_does() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut below = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let pick = |d: u64, g: u64| route(&format!("10.244.{d}.0/24"), &format!("192.168.0.{g}"));
    let (all, only) = (fake(), fake());
    let (mut all_applied, mut only_applied) = (Applied::default(), Applied::default());
    let mut want: BTreeSet<PodRoute> = BTreeSet::new();
    let mut hinted = 0;
    for step in 0..3000 {
        let before = want.clone();
        match below(20) {
            0..=13 => {
                let d = below(12);
                want.retain(|r| r.dst != pick(d, 2).dst);
                if below(3) > 0 {
                    want.insert(pick(d, 2 + below(3)));
                }
            }
            14 => {
                let dst: IpNetwork = pick(below(12), 2).dst;
                // One foreign route at a time: in the way, then gone again.
                for net in [&all, &only] {
                    net.with(|s| {
                        if s.foreign.is_empty() {
                            s.foreign.insert(dst);
                        } else {
                            s.foreign.clear();
                        }
                    });
                }
            }
            15 => {
                all_applied.forget();
                only_applied.forget();
            }
            _ => {}
        }
        // What moved, and a route that did not (naming more is harmless).
        let mut named: Vec<PodRoute> = want.symmetric_difference(&before).cloned().collect();
        named.push(pick(below(12), 2 + below(3)));
        let a = reconcile(
            &all,
            &want,
            &Overlay::default(),
            &policy(),
            &mut all_applied,
        );
        let o = reconcile_changed(
            &only,
            &want,
            Some(&named),
            &Overlay::default(),
            &policy(),
            &mut only_applied,
        );
        hinted += usize::from(only_applied.routes_as_wanted);
        let summary = |o: &Outcome| (o.added, o.replaced, o.deleted, o.foreign.clone(), o.routes);
        assert_eq!(summary(&o), summary(&a), "step {step}");
        assert_eq!(ops(&only), ops(&all), "step {step}");
        assert_eq!(only.with(|s| s.ours.clone()), all.with(|s| s.ours.clone()));
    }
    assert!(
        hinted > 1000,
        "only {hinted} passes compared the changed routes alone"
    );
}
