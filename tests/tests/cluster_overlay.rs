//! The VXLAN overlay (issue 22): "nodes" on two segments joined by a router (the outside
//! host), each running the node agent in its default `--mode auto`. Node 1 and node 3 start
//! on the first segment (on-link: a direct route), node 2 on the second (behind the router:
//! the overlay). Pods reach each other in both families without NAT, full-size DF packets at
//! the conflist's MTU pass, a node that changes segment moves between the overlay and a
//! direct route, a deleted node's entries go, and `--uninstall` leaves nothing of ours.
//! Issue 27: a node's own connection to a remote pod under strict reverse-path filtering,
//! two nodes that disagree about on-link, a `--mode` change rolled out node by node, and
//! a `flannel.1` on the agent's VNI and port.
#[path = "cluster_support/mod.rs"]
mod cluster_support;

#[path = "../../agent/tests/support/apiserver.rs"]
#[allow(dead_code)] // the installer's tests use the rest
mod apiserver;

use std::net::IpAddr;

use cluster_support::*;

const VXLAN: &str = "cni-rs.vxlan";

/// The network address of a pod range: the overlay route's next hop.
fn network(cidr: &str) -> &str {
    cidr.split('/').next().unwrap()
}

/// What node `i` should hold for the nodes in `present`, `overlay(i, j)` saying whether node
/// `i` reaches node `j` through the overlay: for a direct peer, routes via the peer's
/// addresses; for an overlay peer, routes via the range's network address and an FDB entry
/// to the peer's address of the underlay's family (`v6`: IPv6).
fn wanted_by(
    c: &Cluster,
    i: usize,
    present: &[usize],
    v6: bool,
    overlay: &dyn Fn(usize, usize) -> bool,
) -> (Vec<String>, Vec<String>) {
    let (mut routes, mut fdb) = (Vec::new(), Vec::new());
    for &j in present.iter().filter(|j| **j != i) {
        let n = &c.nodes[j];
        if !overlay(i, j) {
            routes.push(format!("{} via {}", n.pod4, n.ip4));
            routes.push(format!("{} via {}", n.pod6, n.ip6));
        } else {
            routes.push(format!("{} via {}", n.pod4, network(&n.pod4)));
            routes.push(format!("{} via {}", n.pod6, network(&n.pod6)));
            fdb.push(if v6 {
                n.ip6.to_string()
            } else {
                n.ip4.to_string()
            });
        }
    }
    routes.sort();
    fdb.sort();
    (routes, fdb)
}

/// Whether `ip` lies inside `cidr` (`a.b.c.d/n` or IPv6).
fn in_range(ip: IpAddr, cidr: &str) -> bool {
    let (net, len) = cidr.split_once('/').unwrap();
    let (len, net): (u32, IpAddr) = (len.parse().unwrap(), net.parse().unwrap());
    let bits = |a: IpAddr| match a {
        IpAddr::V4(a) => (32, u128::from(u32::from(a))),
        IpAddr::V6(a) => (128, u128::from(a)),
    };
    let ((w, a), (wn, n)) = (bits(ip), bits(net));
    let shift = w - len;
    w == wn && (shift >= 128 || a >> shift == n >> shift)
}

/// The remote addresses of the FDB entries on our device (none without the device).
fn fdb_dsts(node: &Node) -> Vec<String> {
    let out = node.ns.run_in({
        let mut cmd = std::process::Command::new("bridge");
        cmd.args(["fdb", "show", "dev", VXLAN]);
        cmd
    });
    let mut dsts: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|t| *t == "dst")?;
            w.next().map(str::to_string)
        })
        .collect();
    dsts.sort();
    dsts
}

fn has_vxlan(node: &Node) -> bool {
    node.ns
        .run_in({
            let mut cmd = std::process::Command::new("ip");
            cmd.args(["link", "show", VXLAN]);
            cmd
        })
        .status
        .success()
}

/// Waits until every node in `present` is ready and holds what [`wanted_by`] says (a peer on the other segment through
/// the overlay) (`v6`: the
/// underlay is IPv6).
fn converged_on(c: &Cluster, agents: &[Agent], present: &[usize], v6: bool) {
    converged_by(c, agents, present, v6, &|i, j| {
        c.nodes[i].segment != c.nodes[j].segment
    })
}

/// [`converged_on`] for [`wanted_by`].
fn converged_by(
    c: &Cluster,
    agents: &[Agent],
    present: &[usize],
    v6: bool,
    overlay: &dyn Fn(usize, usize) -> bool,
) {
    for &i in present {
        let node = &c.nodes[i];
        let want = wanted_by(c, i, present, v6, overlay);
        wait_for(
            &format!("{} ready with its routes and overlay peers", node.name),
            || readyz(node) == Some(200) && (node.routes("0xcb"), fdb_dsts(node)) == want,
            || {
                format!(
                    "want {want:?}\nhave {:?} {:?}\nagent log:\n{}",
                    node.routes("0xcb"),
                    fdb_dsts(node),
                    agents[i].log()
                )
            },
        );
    }
}

fn converged(c: &Cluster, agents: &[Agent], present: &[usize]) {
    converged_on(c, agents, present, false)
}

/// --uninstall leaves no device, no route of ours, no table of ours on `node`.
fn uninstalled(node: &Node, agent: &mut Agent) {
    agent.uninstall(node);
    assert!(!has_vxlan(node), "{}: {VXLAN} left behind", node.name);
    assert_eq!(node.routes("0xcb"), Vec::<String>::new(), "{}", node.name);
    let tables = node.ns.exec_in(&["nft", "list", "tables"]);
    assert!(
        !tables.contains("cni-rs"),
        "our table left behind: {tables}"
    );
}

/// `ping` from `pod` to `dst` with `size` bytes of payload and DF set (IPv6 never
/// fragments on the way): whether a reply came.
fn ping_df(pod: &Pod, dst: IpAddr, size: u32) -> bool {
    let size = size.to_string();
    pod.ns
        .run_in({
            let mut cmd = std::process::Command::new("ping");
            cmd.args(["-c", "3", "-i", "0.2", "-W", "1", "-M", "do", "-s", &size])
                .arg(dst.to_string());
            cmd
        })
        .status
        .success()
}

#[test]
#[ignore = "needs root"]
fn overlay_to_peers_behind_a_router_follows_the_node_list_and_leaves_with_uninstall() {
    if !testkit::privileged(
        "overlay_to_peers_behind_a_router_follows_the_node_list_and_leaves_with_uninstall",
    ) {
        return;
    }
    let mut c = Cluster::segments("clo", &[0, 1, 0]);
    let (api, access) = api_in(&c.ext, &c.nodes);
    let mut agents: Vec<Agent> = c
        .nodes
        .iter()
        .map(|n| Agent::start(n, &access, &[]))
        .collect();
    converged(&c, &agents, &[0, 1, 2]);

    // Every node has an overlay peer: the conflist's MTU is the underlay's 1500 minus the
    // IPv4 overhead, and the pods get it.
    let pods: Vec<Pod> = c
        .nodes
        .iter()
        .zip(&agents)
        .map(|(n, a)| {
            let conf = a.bridge_conf();
            assert_eq!(conf["mtu"], 1450, "{}: the overlay's MTU", n.name);
            n.add_pod(&format!("clo-p{}", n.index), &with_data_dir(conf, n))
        })
        .collect();
    // Across the overlay (1-2, 3-2) and the direct route (1-3), both ways.
    for (a, b) in [(0, 1), (2, 1), (0, 2)] {
        no_nat(&pods[a], &pods[b]);
        no_nat(&pods[b], &pods[a]);
    }
    // A full-size packet with DF set passes the overlay: 1450 bytes with its headers.
    assert!(ping_df(&pods[0], pods[1].ip4.into(), 1450 - 28), "IPv4");
    assert!(ping_df(&pods[0], pods[1].ip6.into(), 1450 - 48), "IPv6");

    // Node 3 moves behind the router: the overlay to node 1, a direct route to node 2.
    c.nodes[2].move_to(&c.lan, 1);
    let n3 = &c.nodes[2];
    api.put_node(
        &n3.name,
        &[&n3.pod4, &n3.pod6],
        &[&n3.ip4.to_string(), &n3.ip6.to_string()],
    );
    // Its agent's watch died with its old address (as on a re-addressed host): a restart,
    // which also finds what the agent left in the kernel and reconciles it.
    agents[2].restart(&c.nodes[2]);
    converged(&c, &agents, &[0, 1, 2]);
    no_nat(&pods[0], &pods[2]);
    no_nat(&pods[2], &pods[1]);
    assert!(ping_df(&pods[2], pods[0].ip4.into(), 1450 - 28));

    // Node 2 deleted: its overlay entries go from node 1; node 3 reaches only node 1 now,
    // through the overlay.
    api.delete_node("node-2");
    agents[1].stop();
    converged(&c, &agents, &[0, 2]);
    assert!(has_vxlan(&c.nodes[0]) && has_vxlan(&c.nodes[2]));

    // --uninstall: no device, no routes of ours, no table of ours.
    for (node, agent) in c.nodes.iter().zip(agents.iter_mut()) {
        uninstalled(node, agent);
    }
}

#[test]
#[ignore = "needs root"]
fn an_ipv6_underlay_carries_both_pod_families() {
    if !testkit::privileged("an_ipv6_underlay_carries_both_pod_families") {
        return;
    }
    let c = Cluster::segments("clo6", &[0, 1]);
    let (api, access) = api_in(&c.ext, &c.nodes);
    // IPv6 listed first: the cluster's primary family, the underlay's.
    let (n1, n2) = (&c.nodes[0], &c.nodes[1]);
    api.set(|b| b.internal_ips = vec![n1.ip6.to_string(), n1.ip4.to_string()]);
    api.put_node(
        &n2.name,
        &[&n2.pod4, &n2.pod6],
        &[&n2.ip6.to_string(), &n2.ip4.to_string()],
    );
    let mut agents: Vec<Agent> = c
        .nodes
        .iter()
        .map(|n| Agent::start(n, &access, &[]))
        .collect();
    converged_on(&c, &agents, &[0, 1], true);
    let pods: Vec<Pod> = c
        .nodes
        .iter()
        .zip(&agents)
        .map(|(n, a)| {
            let conf = a.bridge_conf();
            assert_eq!(
                conf["mtu"], 1430,
                "{}: 1500 minus the IPv6 overhead",
                n.name
            );
            n.add_pod(&format!("clo6-p{}", n.index), &with_data_dir(conf, n))
        })
        .collect();
    no_nat(&pods[0], &pods[1]);
    no_nat(&pods[1], &pods[0]);
    assert!(ping_df(&pods[0], pods[1].ip4.into(), 1430 - 28), "IPv4");
    assert!(ping_df(&pods[1], pods[0].ip6.into(), 1430 - 48), "IPv6");
    for (node, agent) in c.nodes.iter().zip(agents.iter_mut()) {
        uninstalled(node, agent);
    }
}

/// Strict reverse-path filtering on `node`, as RHEL has it: `rp_filter=1` for IPv4 and, for
/// IPv6 (which has no such sysctl), firewalld's rule: a packet whose source is not routed
/// back out of the interface it came in on is dropped.
fn strict_rpf(node: &Node) {
    for key in ["all", "default"] {
        node.ns
            .exec_in(&["sysctl", "-qw", &format!("net.ipv4.conf.{key}.rp_filter=1")]);
    }
    let nft = |args: &[&str]| node.ns.exec_in(&[&["nft"][..], args].concat());
    nft(&["add", "table", "ip6", "rpf"]);
    nft(&[
        "add",
        "chain",
        "ip6",
        "rpf",
        "pre",
        "{ type filter hook prerouting priority raw; }",
    ]);
    nft(&[
        "add",
        "rule",
        "ip6",
        "rpf",
        "pre",
        "icmpv6",
        "type",
        "{ nd-router-advert, \
         nd-neighbor-solicit }",
        "accept",
    ]);
    nft(&[
        "add", "rule", "ip6", "rpf", "pre", "fib", "saddr", ".", "iif", "oif", "missing", "drop",
    ]);
}

/// Loose reverse-path filtering (`rp_filter=2`, systemd's default): a source routed back
/// through any interface passes.
fn loose_rpf(node: &Node) {
    for key in ["all", "default"] {
        node.ns
            .exec_in(&["sysctl", "-qw", &format!("net.ipv4.conf.{key}.rp_filter=2")]);
    }
}

/// Issue 27 item 2: a connection from a node itself (kubelet, a hostNetwork API server to a
/// webhook pod) to a pod across the overlay, with strict reverse-path filtering on every
/// node: it leaves with the node's overlay address, inside its pod range, so the answer
/// comes back through the overlay too. Node 1 has no pod (no bridge yet), like a control
/// plane node.
#[test]
#[ignore = "needs root"]
fn a_node_reaches_pods_across_the_overlay_under_strict_reverse_path_filtering() {
    if !testkit::privileged(
        "a_node_reaches_pods_across_the_overlay_under_strict_reverse_path_filtering",
    ) {
        return;
    }
    let c = Cluster::segments("clr", &[0, 1]);
    for n in &c.nodes {
        strict_rpf(n);
    }
    let (_api, access) = api_in(&c.ext, &c.nodes);
    let agents: Vec<Agent> = c
        .nodes
        .iter()
        .map(|n| Agent::start(n, &access, &[]))
        .collect();
    converged(&c, &agents, &[0, 1]);
    let (n1, n2) = (&c.nodes[0], &c.nodes[1]);
    let pod = n2.add_pod("clr-p2", &with_data_dir(agents[1].bridge_conf(), n2));
    for (dst, range) in [
        (IpAddr::from(pod.ip4), &n1.pod4),
        (IpAddr::from(pod.ip6), &n1.pod6),
    ] {
        let src = tcp_source(&n1.ns, &pod.ns, std::net::SocketAddr::new(dst, 0), 0)
            .unwrap_or_else(|| panic!("node-1 cannot connect to the pod at {dst}"));
        assert!(
            in_range(src, range),
            "{dst}: the pod saw {src}, outside node-1's pod range {range}"
        );
    }
    // Pod to pod still, under the same filtering.
    let pod1 = n1.add_pod("clr-p1", &with_data_dir(agents[0].bridge_conf(), n1));
    no_nat(&pod1, &pod);
    no_nat(&pod, &pod1);
}

/// Issue 27 item 3: on-link is each side's own view. Node 2 reaches node 1 through a router
/// (a host route, as on a multi-homed node), node 1 reaches node 2 directly: node 2 sends
/// through the overlay, and node 1, which needs no overlay peer itself, must receive it.
#[test]
#[ignore = "needs root"]
fn two_nodes_that_disagree_about_on_link_stay_connected() {
    if !testkit::privileged("two_nodes_that_disagree_about_on_link_stay_connected") {
        return;
    }
    let c = Cluster::segments("cld", &[0, 0]);
    c.ext.exec_in(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    c.ext
        .exec_in(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    let (n1, n2) = (&c.nodes[0], &c.nodes[1]);
    for n in &c.nodes {
        loose_rpf(n);
    }
    // Node 2's view: node 1 behind the outside host (no redirect changes its mind).
    n2.ns
        .exec_in(&["sysctl", "-qw", "net.ipv4.conf.all.accept_redirects=0"]);
    n2.ns
        .exec_in(&["sysctl", "-qw", "net.ipv6.conf.all.accept_redirects=0"]);
    n2.ns.exec_in(&[
        "ip",
        "route",
        "add",
        &format!("{}/32", n1.ip4),
        "via",
        &EXT4.to_string(),
    ]);
    n2.ns.exec_in(&[
        "ip",
        "-6",
        "route",
        "add",
        &format!("{}/128", n1.ip6),
        "via",
        &EXT6.to_string(),
    ]);
    let (_api, access) = api_in(&c.ext, &c.nodes);
    let agents: Vec<Agent> = c
        .nodes
        .iter()
        .map(|n| Agent::start(n, &access, &[]))
        .collect();
    converged_by(&c, &agents, &[0, 1], false, &|i, _| i == 1);
    assert!(has_vxlan(n1), "node 1's receive side");
    let pods: Vec<Pod> = c
        .nodes
        .iter()
        .zip(&agents)
        .map(|(n, a)| {
            n.add_pod(
                &format!("cld-p{}", n.index),
                &with_data_dir(a.bridge_conf(), n),
            )
        })
        .collect();
    no_nat(&pods[1], &pods[0]);
    no_nat(&pods[0], &pods[1]);
}

/// Issue 27 item 3: `--mode auto` to `vxlan` and back, rolled out one node at a time on one
/// segment: a vxlan node sends through the overlay to auto nodes that route it directly,
/// and every pair stays connected at every step.
#[test]
#[ignore = "needs root"]
fn a_mode_change_rolled_out_node_by_node_keeps_every_pair_connected() {
    if !testkit::privileged("a_mode_change_rolled_out_node_by_node_keeps_every_pair_connected") {
        return;
    }
    let c = Cluster::segments("clm", &[0, 0, 0]);
    for n in &c.nodes {
        loose_rpf(n);
    }
    let (_api, access) = api_in(&c.ext, &c.nodes);
    let mut agents: Vec<Agent> = c
        .nodes
        .iter()
        .map(|n| Agent::start(n, &access, &[]))
        .collect();
    let all = [0, 1, 2];
    converged(&c, &agents, &all);
    let pods: Vec<Pod> = c
        .nodes
        .iter()
        .zip(&agents)
        .map(|(n, a)| {
            n.add_pod(
                &format!("clm-p{}", n.index),
                &with_data_dir(a.bridge_conf(), n),
            )
        })
        .collect();
    let mut vxlan = [false; 3];
    let steps = [
        (0, true),
        (1, true),
        (2, true),
        (0, false),
        (1, false),
        (2, false),
    ];
    for (i, to_vxlan) in steps {
        let node = &c.nodes[i];
        // The health port is the node's: the old agent stops before the new one starts.
        agents[i].stop();
        let mode = if to_vxlan { "vxlan" } else { "auto" };
        agents[i] = Agent::start(node, &access, &["--mode", mode]);
        vxlan[i] = to_vxlan;
        converged_by(&c, &agents, &all, false, &|a, _| vxlan[a]);
        for a in all {
            for b in all.iter().filter(|b| **b != a) {
                no_nat(&pods[a], &pods[*b]);
            }
        }
    }
}

/// Issue 27 item 4: a node migrated from flannel still holds `flannel.1` on the VNI and port
/// the agent was given (flannel's): the agent is not ready and says once which device is in
/// the way and what to do; deleting it makes the node ready.
#[test]
#[ignore = "needs root"]
fn a_flannel_device_on_our_vni_and_port_fails_readiness_with_one_line_naming_it() {
    if !testkit::privileged(
        "a_flannel_device_on_our_vni_and_port_fails_readiness_with_one_line_naming_it",
    ) {
        return;
    }
    let c = Cluster::segments("clf", &[0, 1]);
    let n1 = &c.nodes[0];
    n1.ns.exec_in(&[
        "ip",
        "link",
        "add",
        "flannel.1",
        "type",
        "vxlan",
        "id",
        "1",
        "dstport",
        "8472",
        "local",
        &n1.ip4.to_string(),
        "nolearning",
    ]);
    n1.ns.exec_in(&["ip", "link", "set", "flannel.1", "up"]);
    let (_api, access) = api_in(&c.ext, &c.nodes);
    let flannels = ["--vxlan-vni", "1", "--vxlan-port", "8472"];
    let agents: Vec<Agent> = c
        .nodes
        .iter()
        .map(|n| Agent::start(n, &access, &flannels))
        .collect();
    let lines = || -> Vec<String> {
        agents[0]
            .log()
            .lines()
            .filter(|l| l.contains("flannel.1"))
            .map(str::to_string)
            .collect()
    };
    wait_for(
        "node-1 naming flannel.1",
        || !lines().is_empty(),
        || agents[0].log(),
    );
    // Some passes later: still not ready, still the one line.
    let passes = metric(n1, "reconciles_total").unwrap();
    wait_for(
        "three more passes",
        || metric(n1, "reconciles_total").is_some_and(|n| n >= passes + 3),
        || agents[0].log(),
    );
    assert_ne!(readyz(n1), Some(200));
    let lines = lines();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    for what in [
        "error",
        "VNI 1",
        "8472",
        "delete it",
        "--vxlan-vni",
        "--vxlan-port",
    ] {
        assert!(lines[0].contains(what), "{what:?} missing: {}", lines[0]);
    }
    n1.ns.exec_in(&["ip", "link", "delete", "flannel.1"]);
    converged(&c, &agents, &[0, 1]);
}
