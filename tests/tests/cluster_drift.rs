//! Drift repaired by the kernel's own notifications (issue 27 item 6): a "node" in a
//! network namespace runs the agent with a re-check interval of an hour, so only a
//! notification can repair anything here. Someone else deletes a route of ours (as
//! NetworkManager or systemd-networkd do with "foreign" routes), our `inet cni-rs` table (a
//! firewall reload), the iptables-nft FORWARD accepts (`iptables -F`) and our VXLAN device,
//! or bounces the uplink (which drops IPv4 routes without a notification of their own):
//! each is back within a second, and the agent is quiet after (its own repairs start no
//! loop).
#[path = "cluster_support/mod.rs"]
mod cluster_support;

#[path = "../../agent/tests/support/apiserver.rs"]
#[allow(dead_code)] // the installer's tests use the rest
mod apiserver;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_support::*;

const VXLAN: &str = "cni-rs.vxlan";
/// How soon each repair must be in place (a bounded wait for it).
const WITHIN: Duration = Duration::from_secs(1);

/// Polls `check` every 10 ms for [`WITHIN`]; panics with `detail` if it never holds.
/// Returns how long it took.
fn back_within(
    what: &str,
    mut check: impl FnMut() -> bool,
    detail: impl Fn() -> String,
) -> Duration {
    let start = Instant::now();
    while !check() {
        if start.elapsed() > WITHIN {
            panic!("{what} not back within {WITHIN:?}\n{}", detail());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = start.elapsed();
    eprintln!("{what}: back after {took:?}");
    took
}

fn succeeds(node: &Node, argv: &[&str]) -> bool {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]);
    node.ns.run_in(cmd).status.success()
}

/// Our table with its masquerade chain, and our accept in iptables-nft's FORWARD.
fn firewall_in_place(node: &Node) -> bool {
    let forward = node.ns.exec_in(&["iptables", "-S", "FORWARD"]);
    succeeds(
        node,
        &["nft", "list", "chain", "inet", "cni-rs", "postrouting"],
    ) && forward.contains("cni-rs: pod traffic")
}

/// The NetworkPolicy table with its two base chains.
fn policy_table_in_place(node: &Node) -> bool {
    ["egress", "ingress"].iter().all(|chain| {
        succeeds(
            node,
            &["nft", "list", "chain", "inet", "cni-rs-netpol", chain],
        )
    })
}

fn device_up(node: &Node) -> bool {
    let mut cmd = Command::new("ip");
    cmd.args(["-o", "link", "show", VXLAN]);
    let out = node.ns.run_in(cmd);
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains(",UP")
}

/// `cni_rs_reconciles_total` from the agent's /metrics inside the node.
fn reconciles(node: &Node) -> Option<u64> {
    let mut conn = node
        .ns
        .run(|| std::net::TcpStream::connect("127.0.0.1:9277"))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    answer
        .lines()
        .find_map(|l| l.strip_prefix("cni_rs_reconciles_total "))?
        .parse()
        .ok()
}

/// Waits until the agent made no pass for half a second: a loop of repairs never is.
fn quiet(node: &Node, agent: &Agent) {
    let mut last = (reconciles(node), Instant::now());
    wait_for(
        "the agent quiet (no pass for 500 ms)",
        || {
            let now = reconciles(node);
            if now != last.0 {
                last = (now, Instant::now());
            }
            last.1.elapsed() >= Duration::from_millis(500)
        },
        || {
            format!(
                "passes: {:?}\nagent log:\n{}",
                reconciles(node),
                agent.log()
            )
        },
    );
}

#[test]
#[ignore = "needs root"]
fn a_route_the_table_or_the_device_deleted_by_someone_else_is_back_within_a_second() {
    if !testkit::privileged(
        "a_route_the_table_or_the_device_deleted_by_someone_else_is_back_within_a_second",
    ) {
        return;
    }
    // Node 1 reaches node 2 directly and node 3 (behind the router) through the overlay.
    let c = Cluster::segments("cld", &[0, 0, 1]);
    let (_api, access) = api_in(&c.ext, &c.nodes);
    let node = &c.nodes[0];
    // Its IPv6 addresses survive the uplink's bounce below (as with NetworkManager).
    node.ns
        .exec_in(&["sysctl", "-qw", "net.ipv6.conf.eth0.keep_addr_on_down=1"]);
    // iptables' FORWARD chain exists (as on a node with Docker): our accepts go there.
    node.ns.exec_in(&["iptables", "-P", "FORWARD", "DROP"]);
    // An hour: the periodic re-check cannot be what repairs anything below.
    // No pods here: a small stand-in for the binaries (each pass compares what it installed
    // with them, 200 MB for the debug builds of the plugins).
    let agent = Agent::start_with_sources(node, &access, &["--interval", "3600"], |src| {
        std::fs::write(src.join("bridge"), b"#!/bin/sh\n").unwrap();
    });
    let want_routes = 4; // node 2's ranges direct, node 3's through the device
    wait_for(
        "node-1 ready with its routes, table and device",
        || {
            readyz(node) == Some(200)
                && node.routes("0xcb").len() == want_routes
                && firewall_in_place(node)
                && policy_table_in_place(node)
                && device_up(node)
        },
        || {
            format!(
                "routes {:?}\nagent log:\n{}",
                node.routes("0xcb"),
                agent.log()
            )
        },
    );
    let routes = node.routes("0xcb");
    quiet(node, &agent);
    let detail = || {
        format!(
            "routes {:?} (want {routes:?})\nagent log:\n{}",
            node.routes("0xcb"),
            agent.log()
        )
    };

    // A direct route of ours deleted.
    let n2 = &c.nodes[1];
    node.ns
        .exec_in(&["ip", "route", "del", &n2.pod4, "proto", "0xcb"]);
    back_within("the route", || node.routes("0xcb") == routes, detail);
    // An overlay route deleted (the device and its entries stay).
    let n3 = &c.nodes[2];
    node.ns
        .exec_in(&["ip", "-6", "route", "del", &n3.pod6, "proto", "0xcb"]);
    back_within(
        "the overlay route",
        || node.routes("0xcb") == routes,
        detail,
    );
    // Our table deleted.
    node.ns
        .exec_in(&["nft", "delete", "table", "inet", "cni-rs"]);
    back_within("the table", || firewall_in_place(node), detail);
    // The NetworkPolicy table deleted (its loop is told by the same notifications).
    node.ns
        .exec_in(&["nft", "delete", "table", "inet", "cni-rs-netpol"]);
    back_within(
        "the NetworkPolicy table",
        || policy_table_in_place(node),
        || agent.log(),
    );
    // FORWARD flushed (a firewall reload): our accepts with it.
    node.ns.exec_in(&["iptables", "-F", "FORWARD"]);
    back_within("the FORWARD accepts", || firewall_in_place(node), detail);
    // The device deleted, with its entries and routes.
    node.ns.exec_in(&["ip", "link", "del", VXLAN]);
    back_within(
        "the device and its routes",
        || device_up(node) && node.routes("0xcb") == routes,
        detail,
    );
    // The uplink set down and up again (the kernel drops its IPv4 routes, ours too, and
    // tells no route deletion): back once it is up.
    node.ns.exec_in(&["ip", "link", "set", "eth0", "down"]);
    node.ns.exec_in(&["ip", "link", "set", "eth0", "up"]);
    back_within(
        "the routes after the uplink's bounce",
        || node.routes("0xcb") == routes,
        detail,
    );
    quiet(node, &agent);
    assert!(firewall_in_place(node) && policy_table_in_place(node) && device_up(node));
    assert_eq!(node.routes("0xcb"), routes);
    let log = agent.log();
    assert!(log.contains(&format!("route add {}", n2.pod4)), "{log}");
}
