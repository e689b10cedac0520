//! A cluster: "nodes" in network namespaces on one lan, each running the node agent
//! (`cni-rs-agent`) against a stub API server, with pods attached by our bridge plugin from
//! the conflist the agent wrote. Pods reach pods on every node without NAT; traffic leaving
//! the cluster is masqueraded; the routes follow the Node list.
#[path = "cluster_support/mod.rs"]
mod cluster_support;

#[path = "../../agent/tests/support/apiserver.rs"]
#[allow(dead_code)] // the installer's tests use the rest
mod apiserver;

use std::net::IpAddr;

use cluster_support::*;

const CLUSTER_CIDRS: &str = "10.244.0.0/16,fd00:10:244::/48";

/// The routes node `i` should hold: every other node's ranges via its addresses.
fn routes_to_others(c: &Cluster, i: usize) -> Vec<String> {
    let mut want: Vec<String> = c
        .nodes
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .flat_map(|(_, n)| {
            [
                format!("{} via {}", n.pod4, n.ip4),
                format!("{} via {}", n.pod6, n.ip6),
            ]
        })
        .collect();
    want.sort();
    want
}

fn start_agents(c: &Cluster, api: &ApiAccess) -> Vec<Agent> {
    let agents: Vec<Agent> = c
        .nodes
        .iter()
        .map(|n| Agent::start(n, api, &["--cluster-cidr", CLUSTER_CIDRS]))
        .collect();
    for (i, (node, agent)) in c.nodes.iter().zip(&agents).enumerate() {
        wait_for(
            &format!("{} ready with its routes", node.name),
            || readyz(node) == Some(200) && node.routes("0xcb") == routes_to_others(c, i),
            || {
                format!(
                    "routes {:?}\nagent log:\n{}",
                    node.routes("0xcb"),
                    agent.log()
                )
            },
        );
    }
    agents
}

#[test]
#[ignore = "needs root"]
fn pods_on_every_node_reach_each_other_without_nat_and_leave_masqueraded() {
    if !testkit::privileged("pods_on_every_node_reach_each_other_without_nat_and_leave_masqueraded")
    {
        return;
    }
    let c = Cluster::new("clt", 3);
    // Node 3's firewall drops what it forwards unless told otherwise (as Docker leaves it).
    c.nodes[2]
        .ns
        .exec_in(&["iptables", "-P", "FORWARD", "DROP"]);
    c.nodes[2]
        .ns
        .exec_in(&["ip6tables", "-P", "FORWARD", "DROP"]);
    let (_api, access) = api_for(&c);
    let agents = start_agents(&c, &access);

    let pods: Vec<Pod> = c
        .nodes
        .iter()
        .zip(&agents)
        .map(|(n, a)| {
            let conf = a.bridge_conf();
            assert_eq!(
                conf["ipMasq"], false,
                "the agent masquerades, not the bridge"
            );
            n.add_pod(&format!("p{}", &n.name[5..]), &with_data_dir(conf, n))
        })
        .collect();

    for from in &pods {
        for to in &pods {
            if from.id == to.id {
                continue;
            }
            no_nat(from, to);
        }
    }
    for (node, pod) in c.nodes.iter().zip(&pods) {
        assert_eq!(
            source_seen(&pod.ns, &c.ext, EXT4.into()),
            IpAddr::from(node.ip4),
            "leaving the cluster, {} is masqueraded to its node's address",
            pod.id
        );
        assert_eq!(
            source_seen(&pod.ns, &c.ext, EXT6.into()),
            IpAddr::from(node.ip6)
        );
    }
    // The outside cannot use node 3 as a router into its pods' neighbours' ranges: the
    // DROP policy still holds for traffic that is not pod traffic.
    c.ext.exec_in(&[
        "ip",
        "route",
        "add",
        &c.nodes[0].pod4,
        "via",
        &c.nodes[2].ip4.to_string(),
    ]);
    assert_eq!(
        udp_source(&c.ext, &pods[0].ns, pods[0].ip4.into()),
        None,
        "node 3 forwards only pod traffic of its own"
    );

    // hostPort through the conflist's portmap, with the agent's masquerade: from outside to
    // the node's address, from the node to 127.0.0.1, and hairpin from the pod itself.
    let (n1, p1, portmap) = (&c.nodes[0], &pods[0], agents[0].plugin_conf(1));
    assert_eq!(portmap["type"], "portmap");
    let mapping =
        serde_json::json!([{"hostPort": 30080, "containerPort": 8080, "protocol": "tcp"}]);
    n1.portmap("ADD", p1, &portmap, mapping.clone());
    let node_port = std::net::SocketAddr::new(n1.ip4.into(), 30080);
    assert_eq!(
        tcp_source(&c.ext, &p1.ns, node_port, 8080),
        Some(IpAddr::from(EXT4)),
        "the outside reaches the hostPort and the pod sees the client's address"
    );
    let localhost = std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), 30080);
    assert!(
        tcp_source(&n1.ns, &p1.ns, localhost, 8080).is_some(),
        "127.0.0.1:hostPort on the node"
    );
    assert!(
        tcp_source(&p1.ns, &p1.ns, node_port, 8080).is_some(),
        "hairpin to its own hostPort"
    );
    n1.portmap("DEL", p1, &portmap, mapping);
    assert_eq!(
        tcp_source(&c.ext, &p1.ns, node_port, 8080),
        None,
        "DEL closes the hostPort"
    );

    for ((node, agent), pod) in c.nodes.iter().zip(&agents).zip(&pods) {
        node.del_pod(pod, &with_data_dir(agent.bridge_conf(), node));
    }
}

#[test]
#[ignore = "needs root"]
fn routes_follow_the_node_list_also_across_a_restart_and_leave_with_uninstall() {
    if !testkit::privileged(
        "routes_follow_the_node_list_also_across_a_restart_and_leave_with_uninstall",
    ) {
        return;
    }
    let c = Cluster::new("clr", 2);
    let (api, access) = api_for(&c);
    let mut agents = start_agents(&c, &access);
    let n1 = &c.nodes[0];
    // Someone else's routes: never touched.
    n1.ns.exec_in(&[
        "ip",
        "route",
        "add",
        "10.99.0.0/24",
        "via",
        "198.51.100.99",
        "proto",
        "static",
    ]);
    let foreign = || n1.ns.exec_in(&["ip", "route", "show", "10.99.0.0/24"]);
    let routes_are = |want: &[&str], agent: &Agent| {
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        wait_for(
            &format!("routes {want:?}"),
            || n1.routes("0xcb") == want,
            || {
                format!(
                    "routes {:?}\nagent log:\n{}",
                    n1.routes("0xcb"),
                    agent.log()
                )
            },
        );
    };

    // A node joins (no namespace needed: its address is on the lan), changes, leaves.
    api.put_node("node-9", &["10.244.9.0/24"], &["198.51.100.19"]);
    routes_are(
        &[
            "10.244.2.0/24 via 198.51.100.12",
            "fd00:10:244:2::/64 via fd00:100::12",
            "10.244.9.0/24 via 198.51.100.19",
        ],
        &agents[0],
    );
    api.put_node("node-9", &["10.244.19.0/24"], &["198.51.100.29"]);
    routes_are(
        &[
            "10.244.2.0/24 via 198.51.100.12",
            "fd00:10:244:2::/64 via fd00:100::12",
            "10.244.19.0/24 via 198.51.100.29",
        ],
        &agents[0],
    );
    // Bad data is refused, the rest still served: a podCIDR that is a default route, one
    // outside the cluster, one overlapping node-1's own, and an InternalIP that is node-1's.
    api.put_node("bad-default", &["0.0.0.0/0"], &["198.51.100.31"]);
    api.put_node("bad-outside", &["10.77.0.0/24"], &["198.51.100.32"]);
    api.put_node("bad-overlap", &["10.244.1.128/25"], &["198.51.100.33"]);
    api.put_node("bad-own-ip", &["10.244.40.0/24"], &[&n1.ip4.to_string()]);
    // A watch that expires (410) and a dropped connection: the agent re-lists and goes on.
    api.expire_watches();
    api.drop_watches();
    api.delete_node("node-9");
    routes_are(
        &[
            "10.244.2.0/24 via 198.51.100.12",
            "fd00:10:244:2::/64 via fd00:100::12",
        ],
        &agents[0],
    );
    let log = agents[0].log();
    for bad in ["bad-default", "bad-outside", "bad-overlap", "bad-own-ip"] {
        assert!(log.contains(bad), "no warning names {bad}:\n{log}");
    }

    // A node deleted while the agent is down: its route goes at the next start.
    api.put_node("node-8", &["10.244.8.0/24"], &["198.51.100.18"]);
    routes_are(
        &[
            "10.244.2.0/24 via 198.51.100.12",
            "fd00:10:244:2::/64 via fd00:100::12",
            "10.244.8.0/24 via 198.51.100.18",
        ],
        &agents[0],
    );
    agents[0].stop();
    api.delete_node("node-8");
    agents[0].restart(n1);
    routes_are(
        &[
            "10.244.2.0/24 via 198.51.100.12",
            "fd00:10:244:2::/64 via fd00:100::12",
        ],
        &agents[0],
    );
    assert!(
        foreign().contains("10.99.0.0/24 via 198.51.100.99"),
        "foreign route gone"
    );

    // --uninstall: none of our routes, no table of ours, no conflist; the rest stays.
    agents[0].uninstall(n1);
    assert_eq!(n1.routes("0xcb"), Vec::<String>::new());
    let tables = n1.ns.exec_in(&["nft", "list", "tables"]);
    assert!(
        !tables.contains("cni-rs"),
        "our table left behind: {tables}"
    );
    assert!(!agents[0].dir.join("net.d/10-cni-rs.conflist").exists());
    assert!(
        foreign().contains("10.99.0.0/24 via 198.51.100.99"),
        "foreign route gone"
    );
}

/// The output of `argv` in `node`, or "" when it fails (no table, no device).
fn output(node: &Node, argv: &[&str]) -> String {
    let mut cmd = std::process::Command::new(argv[0]);
    cmd.args(&argv[1..]);
    String::from_utf8_lossy(&node.ns.run_in(cmd).stdout).into_owned()
}

fn our_table(node: &Node) -> String {
    output(node, &["nft", "list", "table", "inet", "cni-rs"])
}

fn overlay_routes(node: &Node) -> String {
    output(node, &["ip", "route", "show", "dev", "cni-rs.vxlan"])
}

/// Issue 27, item 9: this node's own Node deleted (a watch event) or missing from a
/// re-list is a glitch: the firewall table, the overlay and the pods' traffic stay; a
/// valid Node with another range is a real change and applies.
#[test]
#[ignore = "needs root"]
fn the_own_node_missing_for_a_while_keeps_the_table_and_the_overlay() {
    if !testkit::privileged("the_own_node_missing_for_a_while_keeps_the_table_and_the_overlay") {
        return;
    }
    // On two lan segments: the overlay carries their pods' traffic.
    let c = Cluster::segments("clg", &[0, 1]);
    let (api, access) = api_for(&c);
    let flags = ["--cluster-cidr", CLUSTER_CIDRS];
    let agents: Vec<Agent> = c
        .nodes
        .iter()
        .map(|n| Agent::start(n, &access, &flags))
        .collect();
    // Node 2 is the one that loses its Node (node 1 is the stub's own, never deleted).
    let (n1, n2, agent) = (&c.nodes[0], &c.nodes[1], &agents[1]);
    let serving = |node: &Node, peer: &Node| {
        readyz(node) == Some(200)
            && our_table(node).contains(&node.pod4)
            && overlay_routes(node).contains(&peer.pod4)
    };
    for (node, peer, a) in [(n1, n2, &agents[0]), (n2, n1, agent)] {
        wait_for(
            &format!("{} ready with its table and overlay", node.name),
            || serving(node, peer),
            || format!("table:\n{}\nagent log:\n{}", our_table(node), a.log()),
        );
    }
    let p1 = n1.add_pod("g1", &with_data_dir(agents[0].bridge_conf(), n1));
    let p2 = n2.add_pod("g2", &with_data_dir(agent.bridge_conf(), n2));
    let conflist = || std::fs::read(agent.dir.join("net.d/10-cni-rs.conflist")).unwrap();
    let (table, overlay, conf) = (our_table(n2), overlay_routes(n2), conflist());
    assert!(
        table.contains("ip daddr != 224.0.0.0/4") && table.contains("masquerade fully-random"),
        "{table}"
    );
    let kept = "keeping its last good state";
    let through_the_glitch = |times: usize| {
        wait_for(
            "the agent to see its Node gone",
            || agent.log().matches(kept).count() >= times || !our_table(n2).contains(&n2.pod4),
            || agent.log(),
        );
        assert_eq!(our_table(n2), table, "the table changed:\n{}", agent.log());
        assert_eq!(overlay_routes(n2), overlay, "the overlay changed");
        assert_eq!(conflist(), conf, "the conflist changed");
        // Node 1 drops node 2 meanwhile (for it, node 2 is gone): pod-to-pod traffic
        // waits for the Node; what leaves the cluster is still masqueraded.
        assert_eq!(
            source_seen(&p2.ns, &c.ext, EXT4.into()),
            IpAddr::from(n2.ip4),
            "still masqueraded"
        );
    };
    let node2 = |pod4: &str| {
        api.put_node(
            &n2.name,
            &[pod4, &n2.pod6],
            &[&n2.ip4.to_string(), &n2.ip6.to_string()],
        )
    };

    no_nat(&p2, &p1);
    // Deleted (a DELETED event), then back as it was.
    api.delete_node(&n2.name);
    through_the_glitch(1);
    node2(&n2.pod4);
    wait_for(
        "node 1 to serve node 2 again",
        || udp_source(&p2.ns, &p1.ns, p1.ip4.into()) == Some(p2.ip4.into()),
        || agents[0].log(),
    );
    // Node 2's own agent sees its Node back too (it may have been between two watches),
    // so the next glitch starts from a valid Node.
    let back = "its own Node is valid again";
    wait_for(
        "node 2's agent to see its Node back",
        || agent.log().matches(back).count() >= 1,
        || agent.log(),
    );
    // Missing from a re-list (the watch expired meanwhile).
    api.delete_node_quietly(&n2.name);
    api.expire_watches();
    through_the_glitch(2);

    // A real change: its Node again, with another range: the table follows.
    node2("10.244.12.0/24");
    wait_for(
        "the new range in node 2's table and node 1's overlay",
        || {
            our_table(n2).contains("10.244.12.0/24")
                && !our_table(n2).contains(&n2.pod4)
                && overlay_routes(n1).contains("10.244.12.0/24")
        },
        || format!("table:\n{}\nagent log:\n{}", our_table(n2), agent.log()),
    );
    n1.del_pod(&p1, &with_data_dir(agents[0].bridge_conf(), n1));
    n2.del_pod(&p2, &with_data_dir(agent.bridge_conf(), n2));
}
