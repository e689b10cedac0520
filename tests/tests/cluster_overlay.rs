//! The VXLAN overlay (issue 22): "nodes" on two segments joined by a router (the outside
//! host), each running the node agent in its default `--mode auto`. Node 1 and node 3 start
//! on the first segment (on-link: a direct route), node 2 on the second (behind the router:
//! the overlay). Pods reach each other in both families without NAT, full-size DF packets at
//! the conflist's MTU pass, a node that changes segment moves between the overlay and a
//! direct route, a deleted node's entries go, and `--uninstall` leaves nothing of ours.
#[path = "cluster_support/mod.rs"]
mod cluster_support;

#[path = "../../installer/tests/support/apiserver.rs"]
#[allow(dead_code)] // the installer's tests use the rest
mod apiserver;

use std::net::IpAddr;

use cluster_support::*;

const VXLAN: &str = "cni-rs.vxlan";

/// The network address of a pod range: the overlay route's next hop.
fn network(cidr: &str) -> &str {
    cidr.split('/').next().unwrap()
}

/// What node `i` should hold for the nodes in `present`: for a peer on its segment, direct
/// routes via the peer's addresses; for one on the other, overlay routes via the range's
/// network address and an FDB entry to the peer's address of the underlay's family.
fn wanted(c: &Cluster, i: usize, present: &[usize], v6: bool) -> (Vec<String>, Vec<String>) {
    let me = &c.nodes[i];
    let (mut routes, mut fdb) = (Vec::new(), Vec::new());
    for &j in present.iter().filter(|j| **j != i) {
        let n = &c.nodes[j];
        if n.segment == me.segment {
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

/// Waits until every node in `present` is ready and holds what [`wanted`] says (`v6`: the
/// underlay is IPv6).
fn converged_on(c: &Cluster, agents: &[Agent], present: &[usize], v6: bool) {
    for &i in present {
        let node = &c.nodes[i];
        let want = wanted(c, i, present, v6);
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
