//! The node agent end to end, in-process and root-free: the real API client, watch and
//! reconcile loop against the stub API server, the kernel being hostnet's FakeNodeNet.
//! Proves: routes follow Node adds, deletes and changes with one operation per changed
//! route; a restart removes what changed while the agent was down and leaves foreign
//! routes alone; an expired watch (410), a dropped connection, garbage and a huge event
//! all end in a re-list and a correct state; --uninstall removes our routes and table and
//! nothing else (the VXLAN device too); leases of an earlier boot are freed at start, a live
//! one survives; a peer behind a router gets the overlay, whose MTU the conflist keeps (the
//! fake kernel's MTU, not this machine's); what the kernel tells the watch someone else
//! changed is read again and repaired at once, only that part.

mod support;

use std::collections::BTreeSet;
use std::fs::{File, FileTimes};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use cni_rs_agent::config::Args;
use cni_rs_agent::control::{agent, run};
use cni_rs_agent::kube::watcher::Shared;
use cni_rs_agent::serve::Metrics;
use hostnet::node::fake::FakeNodeNet;
use hostnet::node::{Drift, NodeNet, OverlayPeer, PodRoute, PolicyNet, VxlanSpec};
use support::{Node, StopOnDrop, args_with, eventually};

fn route(dst: &str, gw: &str) -> PodRoute {
    PodRoute {
        dst: dst.parse().unwrap(),
        gateway: gw.parse().unwrap(),
    }
}

fn routes(list: &[(&str, &str)]) -> BTreeSet<PodRoute> {
    list.iter().map(|(d, g)| route(d, g)).collect()
}

/// This node (node-1, InternalIP 172.18.0.2 in the stub) on 172.18.0.0/24 and fd00:18::/64.
fn fake() -> FakeNodeNet {
    FakeNodeNet::new(
        vec![
            "172.18.0.0/24".parse().unwrap(),
            "fd00:18::/64".parse().unwrap(),
        ],
        vec!["172.18.0.2".parse().unwrap(), "fd00:18::2".parse().unwrap()],
    )
}

fn args(node: &Node) -> Args {
    args_with(node, &["--mtu=1400"])
}

/// Runs the agent for `node` on `net` while `test` runs.
fn with_agent(node: &Node, net: &FakeNodeNet, test: impl FnOnce(&Metrics)) {
    with_agent_args(&args(node), net, test)
}

fn with_agent_args(args: &Args, net: &FakeNodeNet, test: impl FnOnce(&Metrics)) {
    let installer = cni_rs_agent::files::Installer::new(args).unwrap();
    let client = run::client(args).unwrap();
    let shared = Arc::new(Shared::default());
    let metrics = Arc::new(Metrics::default());
    std::thread::scope(|s| {
        let agent = {
            let (shared, metrics) = (shared.clone(), metrics.clone());
            let installer = &installer;
            s.spawn(move || {
                agent::run(
                    args,
                    installer,
                    client,
                    Some(net as &dyn NodeNet),
                    None,
                    shared,
                    metrics,
                )
            })
        };
        let stop = StopOnDrop(shared.clone());
        test(&metrics);
        drop(stop);
        agent.join().unwrap().unwrap();
    });
}

fn ours(net: &FakeNodeNet) -> BTreeSet<PodRoute> {
    net.with(|s| s.ours.clone())
}

/// The fake's change log since the last call.
fn ops(net: &FakeNodeNet) -> Vec<String> {
    net.with(|s| std::mem::take(&mut s.log))
}

/// Waits for the changes `want` (in any order), then checks that nothing more came,
/// across a periodic re-check.
fn expect_ops(net: &FakeNodeNet, metrics: &Metrics, want: &[&str]) {
    let mut seen = Vec::new();
    eventually(&format!("{want:?}"), || {
        seen.extend(ops(net));
        seen.len() >= want.len()
    });
    let passes = metrics.reconciles.load(Ordering::Relaxed);
    eventually("a later reconcile", || {
        metrics.reconciles.load(Ordering::Relaxed) > passes
    });
    seen.extend(ops(net));
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    seen.sort();
    assert_eq!(seen, want);
}

#[test]
fn routes_follow_the_nodes_with_one_operation_per_changed_route() {
    let node = Node::new(&["10.244.0.0/24"]);
    node.api.put_node(
        "node-2",
        &["10.244.2.0/24", "fd00:244:2::/64"],
        &["172.18.0.3", "fd00:18::3"],
    );
    node.api
        .put_node("node-3", &["10.244.3.0/24"], &["172.18.0.4"]);
    let net = fake();
    with_agent(&node, &net, |metrics| {
        eventually("ready", || metrics.ready());
        assert_eq!(
            ours(&net),
            routes(&[
                ("10.244.2.0/24", "172.18.0.3"),
                ("fd00:244:2::/64", "fd00:18::3"),
                ("10.244.3.0/24", "172.18.0.4"),
            ])
        );
        let policy = net.with(|s| s.firewall.clone()).unwrap();
        let v4 = policy.v4.unwrap();
        assert_eq!(v4.pod_cidrs, ["10.244.0.0/24".parse().unwrap()]);
        assert_eq!(v4.no_masquerade.len(), 3);
        assert!(policy.v6.is_none(), "this node has no IPv6 range");
        assert_eq!(net.with(|s| s.forwarding), (true, false));
        assert_eq!(node.conflist()["plugins"][0]["ipMasq"], false);
        assert_eq!(metrics.routes.load(Ordering::Relaxed), 3);
        ops(&net);

        // Added: one route; the firewall's set of pod ranges grows, by its elements alone.
        node.api
            .put_node("node-4", &["10.244.4.0/24"], &["172.18.0.5"]);
        expect_ops(
            &net,
            metrics,
            &["add 10.244.4.0/24 via 172.18.0.5", "firewall elements"],
        );
        // Deleted: one route.
        node.api.delete_node("node-3");
        expect_ops(
            &net,
            metrics,
            &["del 10.244.3.0/24 via 172.18.0.4", "firewall elements"],
        );
        // A changed InternalIP: one replace, the firewall untouched.
        node.api.put_node(
            "node-2",
            &["10.244.2.0/24", "fd00:244:2::/64"],
            &["172.18.0.13", "fd00:18::3"],
        );
        expect_ops(&net, metrics, &["replace 10.244.2.0/24 via 172.18.0.13"]);
        // A changed podCIDR moves the route.
        node.api
            .put_node("node-4", &["10.244.14.0/24"], &["172.18.0.5"]);
        expect_ops(
            &net,
            metrics,
            &[
                "del 10.244.4.0/24 via 172.18.0.5",
                "add 10.244.14.0/24 via 172.18.0.5",
                "firewall elements",
            ],
        );
        // An unchanged Node (a status heartbeat) costs nothing.
        node.api
            .put_node("node-4", &["10.244.14.0/24"], &["172.18.0.5"]);
        expect_ops(&net, metrics, &[]);
        // A hostile Node changes nothing: a default route, another node's address.
        node.api.put_node("evil", &["0.0.0.0/0"], &["172.18.0.66"]);
        node.api
            .put_node("evil2", &["10.244.20.0/24"], &["172.18.0.2"]);
        expect_ops(&net, metrics, &[]);
        assert!(metrics.ready());
    });
}

#[test]
fn a_route_deleted_by_someone_else_comes_back_at_the_re_check_also_under_steady_events() {
    let node = Node::new(&["10.244.0.0/24"]);
    node.api
        .put_node("node-2", &["10.244.2.0/24"], &["172.18.0.3"]);
    let net = fake();
    with_agent(&node, &net, |metrics| {
        eventually("ready", || metrics.ready());
        net.with(|s| s.ours.remove(&route("10.244.2.0/24", "172.18.0.3")));
        // Events keep coming faster than --interval (1 s): between re-checks the agent
        // trusts what it applied, but the re-check still comes.
        let mut i = 0;
        eventually("the deleted route back", || {
            i += 1;
            node.api.put_node(
                "node-9",
                &[&format!("10.244.{}.0/24", 100 + i % 2)],
                &["172.18.0.9"],
            );
            std::thread::sleep(Duration::from_millis(100));
            ours(&net).contains(&route("10.244.2.0/24", "172.18.0.3"))
        });
    });
}

#[test]
fn a_restart_removes_what_changed_while_down_and_leaves_foreign_routes_alone() {
    let node = Node::new(&["10.244.0.0/24"]);
    node.api
        .put_node("node-2", &["10.244.2.0/24"], &["172.18.0.3"]);
    node.api
        .put_node("node-7", &["10.244.7.0/24"], &["172.18.0.8"]);
    let net = fake();
    net.with(|s| {
        s.ours = routes(&[
            ("10.244.2.0/24", "172.18.0.3"),  // still right
            ("10.244.9.0/24", "172.18.0.10"), // its node was deleted while the agent was down
        ]);
        s.foreign.insert("10.244.7.0/24".parse().unwrap());
        s.foreign.insert("192.0.2.0/24".parse().unwrap());
    });
    with_agent(&node, &net, |metrics| {
        eventually("the stale route gone", || {
            ours(&net) == routes(&[("10.244.2.0/24", "172.18.0.3")])
        });
        eventually("a reconcile", || {
            metrics.reconciles.load(Ordering::Relaxed) > 0
        });
        assert_eq!(net.with(|s| s.foreign.len()), 2, "foreign routes untouched");
        // A wanted route held by someone else: not ready, and not fatal.
        assert!(!metrics.routes_ok.load(Ordering::Relaxed));
        assert!(metrics.conflist.load(Ordering::Relaxed));
        assert!(metrics.firewall_ok.load(Ordering::Relaxed));
        // Someone removes it: ours goes in at the next re-check.
        net.with(|s| s.foreign.remove(&"10.244.7.0/24".parse().unwrap()));
        eventually("ready", || metrics.ready());
        assert!(ours(&net).contains(&route("10.244.7.0/24", "172.18.0.8")));
    });
}

#[test]
fn an_expired_watch_relists_and_sees_what_no_event_told() {
    let node = Node::new(&["10.244.0.0/24"]);
    node.api
        .put_node("node-2", &["10.244.2.0/24"], &["172.18.0.3"]);
    node.api
        .put_node("node-3", &["10.244.3.0/24"], &["172.18.0.4"]);
    let net = fake();
    with_agent(&node, &net, |metrics| {
        eventually("two routes", || ours(&net).len() == 2);
        let lists = node.api.lists();
        node.api.delete_node_quietly("node-3");
        node.api.expire_watches();
        eventually("the re-list's result", || {
            ours(&net) == routes(&[("10.244.2.0/24", "172.18.0.3")])
        });
        assert!(node.api.lists() > lists);
        eventually("ready again", || metrics.ready());
    });
}

#[test]
fn a_dropped_connection_reconnects() {
    let node = Node::new(&["10.244.0.0/24"]);
    let net = fake();
    with_agent(&node, &net, |metrics| {
        eventually("ready", || metrics.ready());
        let watches = node.api.watches();
        node.api.drop_watches();
        eventually("a new watch", || node.api.watches() > watches);
        node.api
            .put_node("node-5", &["10.244.5.0/24"], &["172.18.0.6"]);
        eventually("the new node's route", || {
            ours(&net) == routes(&[("10.244.5.0/24", "172.18.0.6")])
        });
    });
}

#[test]
fn garbage_and_huge_events_end_in_a_relist_not_a_bigger_buffer() {
    let node = Node::new(&["10.244.0.0/24"]);
    let net = fake();
    with_agent(&node, &net, |metrics| {
        eventually("ready", || metrics.ready());
        let lists = node.api.lists();
        node.api.send_raw("{not json".into());
        eventually("a re-list after garbage", || node.api.lists() > lists);
        let lists = node.api.lists();
        // One event of 8 MiB (a Node with a huge annotation), twice the cap.
        let huge = format!(
            r#"{{"type":"ADDED","object":{{"metadata":{{"name":"big","annotations":{{"a":"{}"}}}}}}}}"#,
            "x".repeat(8 << 20)
        );
        node.api.send_raw(huge);
        eventually("a re-list after the huge event", || {
            node.api.lists() > lists
        });
        assert!(metrics.api_errors.load(Ordering::Relaxed) >= 2);
        node.api
            .put_node("node-6", &["10.244.6.0/24"], &["172.18.0.7"]);
        eventually("served again", || ours(&net).len() == 1);
        assert!(
            !ours(&net)
                .iter()
                .any(|r| r.dst.to_string().starts_with("0."))
        );
    });
}

fn set_mtime(path: &std::path::Path, t: SystemTime) {
    let f = File::options().write(true).open(path).unwrap();
    f.set_times(FileTimes::new().set_modified(t)).unwrap();
}

#[test]
fn leases_of_an_earlier_boot_are_freed_at_start_and_a_live_one_survives() {
    let node = Node::new(&["10.244.0.0/24"]);
    let store = node.dir.join("leases/cni-rs");
    std::fs::create_dir_all(&store).unwrap();
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let btime: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
        .unwrap();
    let boot = SystemTime::UNIX_EPOCH + Duration::from_secs(btime);
    // A simulated reboot: the store was cleaned last in another boot (its boot_id
    // recorded), leases written before this boot, one pod started since.
    // The marker's name and format are a contract with the stores already on nodes.
    const MARKER: &str = "boot_id.cni-install";
    const MARKER_HEAD: &str =
        "# cni-install: leases of boots before this one were freed; not a lease #";
    std::fs::write(
        store.join(MARKER),
        format!("{MARKER_HEAD}\nan-earlier-boot\n"),
    )
    .unwrap();
    for (name, t) in [
        ("10.244.0.5", boot - Duration::from_secs(86400)),
        ("10.244.0.6", boot - Duration::from_secs(60)),
        ("10.244.0.7", SystemTime::now()),
        ("last_reserved_ip.0", boot - Duration::from_secs(60)),
    ] {
        std::fs::write(store.join(name), "ctr\r\neth0").unwrap();
        set_mtime(&store.join(name), t);
    }
    let net = fake();
    with_agent(&node, &net, |metrics| {
        eventually("ready", || metrics.ready());
        let mut left: Vec<String> = std::fs::read_dir(&store)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["10.244.0.7", MARKER, "last_reserved_ip.0", "lock"]);
        let marker = std::fs::read_to_string(store.join(MARKER)).unwrap();
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        assert_eq!(marker, format!("{MARKER_HEAD}\n{}\n", boot_id.trim()));
    });
}

#[test]
fn uninstall_removes_our_files_routes_and_table_and_nothing_else() {
    let node = Node::new(&["10.244.3.0/24"]);
    node.once_ok();
    std::fs::write(node.dir.join("bin/macvlan"), "other vendor").unwrap();
    std::fs::write(node.dir.join("net.d/99-other.conflist"), "{}").unwrap();
    // Someone put their own loopback over ours since: it is theirs now.
    std::fs::write(node.dir.join("bin/loopback"), "their loopback").unwrap();
    let net = fake();
    net.with(|s| {
        s.ours = routes(&[
            ("10.244.2.0/24", "172.18.0.3"),
            ("fd00:2::/64", "fd00:18::3"),
        ]);
        s.foreign.insert("10.244.9.0/24".parse().unwrap());
        s.firewall = Some(Default::default());
    });
    net.ensure_vxlan(&VxlanSpec {
        vni: 1,
        port: 8472,
        local: "172.18.0.2".parse().unwrap(),
        underlay_mtu: 1500,
        addr4: None,
        addr6: None,
    })
    .unwrap();
    net.add_overlay_peer(&OverlayPeer::new(
        "10.99.0.9".parse().unwrap(),
        vec!["10.244.8.0/24".parse().unwrap()],
    ))
    .unwrap();
    net.replace_policy(&netpol::compile::base_program())
        .unwrap();
    let args = args(&node);
    run::uninstall(&args, Ok(&net), Some(&net)).unwrap();
    assert!(net.with(|s| s.netpol.is_none()), "the policy table stayed");
    assert!(net.with(|s| s.vxlan.is_none() && s.overlay.is_empty()));
    assert_eq!(node.names("bin"), ["loopback", "macvlan"]);
    assert_eq!(node.names("net.d"), ["99-other.conflist"]);
    assert!(ours(&net).is_empty());
    assert!(net.with(|s| s.firewall.is_none()));
    assert_eq!(net.with(|s| s.foreign.len()), 1);
    // A second uninstall finds nothing to do and succeeds.
    run::uninstall(&args, Ok(&net), Some(&net)).unwrap();
    // The kernel unreachable: the files still go, the error is reported.
    node.once_ok();
    let err = run::uninstall(
        &args,
        Err(hostnet::node::NodeNetError::new(
            hostnet::node::Op::Open,
            std::io::Error::other("no netlink"),
        )),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("no netlink"), "{err}");
    assert_eq!(node.names("net.d"), ["99-other.conflist"]);
}

#[test]
fn a_peer_behind_a_router_gets_the_overlay_and_the_pods_keep_its_mtu_after() {
    let node = Node::new(&["10.244.0.0/24"]);
    node.api
        .put_node("near", &["10.244.2.0/24"], &["172.18.0.3"]);
    let net = fake();
    // Jumbo frames on this node: the pods get the host's MTU, then the overlay's below it.
    net.with(|s| s.mtu = Some(9000));
    let args = args_with(&node, &[]);
    with_agent_args(&args, &net, |metrics| {
        eventually("ready", || metrics.ready());
        // The receive side before any peer needs it (from this node's InternalIP, with
        // its overlay address, on the default VNI and port), the pods' MTU left alone.
        let spec = net
            .with(|s| s.vxlan)
            .expect("the device, with no overlay peer");
        assert_eq!((spec.vni, spec.port), (203, 4789));
        assert_eq!(
            spec.local,
            "172.18.0.2".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(spec.addr4, Some("10.244.0.0".parse().unwrap()));
        assert_eq!(spec.addr6, None);
        assert_eq!(node.conflist()["plugins"][0]["mtu"], 9000);
        ops(&net);

        // A peer on another network: the peer, and the conflist's MTU that of the device.
        node.api.put_node("far", &["10.244.9.0/24"], &["10.99.0.9"]);
        expect_ops(
            &net,
            metrics,
            &["overlay 10.99.0.9 10.244.9.0/24", "firewall elements"],
        );
        let spec = net.with(|s| s.vxlan).unwrap();
        assert_eq!(spec.port, 4789);
        assert_eq!((spec.underlay_mtu, spec.mtu()), (9000, 8950));
        eventually("the overlay's MTU in the conflist", || {
            node.conflist()["plugins"][0]["mtu"] == spec.mtu()
        });
        assert_eq!(metrics.overlay_peers.load(Ordering::Relaxed), 1);

        // It goes: its entries, not the device; the pods' MTU stays (no flapping).
        node.api.delete_node("far");
        expect_ops(
            &net,
            metrics,
            &["del overlay 10.99.0.9", "firewall elements"],
        );
        assert!(net.with(|s| s.vxlan.is_some()));
        assert_eq!(node.conflist()["plugins"][0]["mtu"], spec.mtu());
        assert_eq!(metrics.overlay_peers.load(Ordering::Relaxed), 0);
    });
}

#[test]
fn what_the_kernel_says_someone_else_changed_is_read_again_and_repaired_at_once() {
    let node = Node::new(&["10.244.0.0/24"]);
    node.api
        .put_node("near", &["10.244.2.0/24"], &["172.18.0.3"]);
    node.api.put_node("far", &["10.244.9.0/24"], &["10.99.0.9"]);
    let net = fake();
    // An hour: the periodic re-check cannot be what repairs anything here.
    let args = args_with(&node, &["--mtu=1400", "--interval=3600"]);
    with_agent_args(&args, &net, |metrics| {
        eventually("ready", || metrics.ready());
        let near = route("10.244.2.0/24", "172.18.0.3");
        assert!(ours(&net).contains(&near));
        assert!(net.with(|s| s.vxlan.is_some() && s.overlay.len() == 1));
        ops(&net);
        let passes = || metrics.reconciles.load(Ordering::Relaxed);
        let drift = |d: Drift| assert!(net.drift(d), "the agent watches the kernel");
        let mut seen = Vec::new();
        let mut repaired = |want: &[&str]| {
            eventually(&format!("{want:?}"), || {
                seen.extend(ops(&net));
                seen.len() >= want.len()
            });
            assert_eq!(std::mem::take(&mut seen), want);
        };

        // Our route deleted by someone else: added again, and only it (the firewall and
        // the overlay are trusted still).
        net.with(|s| s.ours.remove(&near));
        drift(Drift {
            routes: true,
            ..Drift::default()
        });
        repaired(&["add 10.244.2.0/24 via 172.18.0.3"]);

        // Our table flushed: applied again.
        net.with(|s| s.firewall = None);
        drift(Drift {
            firewall: true,
            ..Drift::default()
        });
        repaired(&["firewall"]);

        // Our device deleted, with its entries: made again, its peer too.
        net.with(|s| {
            s.vxlan = None;
            s.overlay.clear();
        });
        drift(Drift {
            overlay: true,
            ..Drift::default()
        });
        repaired(&[
            "vxlan vni 203 local 172.18.0.2",
            "overlay 10.99.0.9 10.244.9.0/24",
        ]);

        // Notifications lost: everything is read again; what is in place stays.
        let before = passes();
        drift(Drift::ALL);
        eventually("a pass after the overrun", || passes() > before);
        net.with(|s| s.ours.remove(&near));
        drift(Drift::ALL);
        repaired(&["add 10.244.2.0/24 via 172.18.0.3"]);
    });
}
