//! Privileged tests of [`HostNodeNet`] against the real kernel. Every namespace is made
//! by the test ([`new_netns`]) and vanishes with its handles, rules and links included,
//! also when an assertion fails.

use std::net::{IpAddr, UdpSocket};
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use sysproc::netns::Netns;

use super::{FamilyPolicy, HostNodeNet, NodeNet, NodePolicy, PodRoute, ROUTE_PROTO};
use crate::netlink::{IpFamily, Netlink, RouteSpec};
use crate::testnet::new_netns;
use testkit::{available, privileged};

pub(super) fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `k`'s watch, its notifications on a channel.
pub(super) fn watched(k: &HostNodeNet) -> (super::Watch, std::sync::mpsc::Receiver<super::Drift>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let watch = k
        .watch(Box::new(move |d| {
            let _ = tx.send(d);
        }))
        .unwrap();
    (watch, rx)
}

pub(super) fn route(dst: &str, gw: &str) -> PodRoute {
    PodRoute {
        dst: net(dst),
        gateway: ip(gw),
    }
}

/// A namespace made by the test and a netlink connection into it.
pub(super) struct Ns {
    pub(super) ns: Netns,
    pub(super) nl: Netlink,
}

impl Ns {
    pub(super) fn new() -> Ns {
        let ns = new_netns();
        let nl = Netlink::in_netns(&ns).unwrap();
        let lo = nl.link_by_name("lo").unwrap().unwrap().index;
        nl.set_up(lo).unwrap();
        Ns { ns, nl }
    }

    pub(super) fn node(&self) -> HostNodeNet {
        HostNodeNet::in_netns(&self.ns).unwrap()
    }

    /// A veth `here` (in self) <-> `there` (in `other`), both up, with the addresses
    /// given (IPv6 without DAD).
    pub(super) fn link(
        &self,
        here: &str,
        here_addrs: &[&str],
        other: &Ns,
        there: &str,
        there_addrs: &[&str],
    ) {
        self.nl
            .create_veth(here, there, None, None, other.ns.as_fd())
            .unwrap();
        for (ns, name, addrs) in [(self, here, here_addrs), (other, there, there_addrs)] {
            let index = ns.nl.link_by_name(name).unwrap().unwrap().index;
            for a in addrs {
                ns.nl.add_address_nodad(index, net(a)).unwrap();
            }
            ns.nl.set_up(index).unwrap();
        }
    }

    pub(super) fn default_via(&self, gw: &str) {
        let gw = ip(gw);
        let dst = if gw.is_ipv4() {
            net("0.0.0.0/0")
        } else {
            net("::/0")
        };
        self.route_via(dst, gw);
    }

    pub(super) fn route_via(&self, dst: IpNetwork, gw: IpAddr) {
        self.nl
            .add_route(&RouteSpec {
                dst,
                gateway: Some(gw),
                oif: None,
                priority: None,
                table: None,
                scope: None,
            })
            .unwrap();
    }

    /// Runs a tool inside the namespace; its stdout, or None when it failed.
    pub(super) fn run(&self, cmd: &str, args: &[&str]) -> Option<String> {
        let out = self
            .ns
            .run(|| Command::new(cmd).args(args).output())
            .unwrap()
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub(super) fn sh(&self, cmd: &str, args: &[&str]) -> String {
        self.run(cmd, args)
            .unwrap_or_else(|| panic!("{cmd} {args:?} failed"))
    }

    pub(super) fn udp_listener(&self, addr: &str) -> UdpSocket {
        let sock = self.ns.run(|| UdpSocket::bind(addr)).unwrap().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        sock
    }

    pub(super) fn send_udp(&self, to: &str) {
        let any = if to.starts_with('[') {
            "[::]:0"
        } else {
            "0.0.0.0:0"
        };
        self.send_udp_from(any, to);
    }

    pub(super) fn send_udp_from(&self, from: &str, to: &str) {
        self.ns
            .run(|| UdpSocket::bind(from)?.send_to(b"cni-rs", to))
            .unwrap()
            .unwrap();
    }
}

/// The source address of the next datagram `sock` receives. A wait under a receive
/// timeout ends with EINTR when the process is stopped and continued (signal(7)): wait on.
pub(super) fn source_of(sock: &UdpSocket) -> IpAddr {
    let mut buf = [0u8; 16];
    loop {
        match sock.recv_from(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            got => return got.expect("datagram arrives").1.ip(),
        }
    }
}

/// Every route of `family` as (destination, gateway, protocol).
fn routes_of(nl: &Netlink, family: IpFamily) -> Vec<(IpNetwork, Option<IpAddr>, u8)> {
    (0..=u8::MAX)
        .flat_map(|proto| {
            nl.routes_of_protocol(family, proto)
                .unwrap()
                .into_iter()
                .map(move |r| (r.dst, r.gateway, proto))
        })
        .collect()
}

/// A "node" on a lan (192.168.50.1/24, fd50::1/64; its peer .2 / ::2) holding someone
/// else's routes to 10.2.0.0/24 (at another metric than ours would get) and fd02::/64.
pub(super) fn node_on_a_lan_with_foreign_routes() -> (Ns, Ns) {
    let (node, peer) = (Ns::new(), Ns::new());
    node.link(
        "lan0",
        &["192.168.50.1/24", "fd50::1/64"],
        &peer,
        "lan0",
        &["192.168.50.2/24", "fd50::2/64"],
    );
    node.sh(
        "ip",
        &[
            "route",
            "add",
            "10.2.0.0/24",
            "via",
            "192.168.50.3",
            "metric",
            "100",
        ],
    );
    node.sh("ip", &["-6", "route", "add", "fd02::/64", "via", "fd50::3"]);
    (node, peer)
}

#[test]
#[ignore = "needs root"]
fn routes_are_added_replaced_deleted_and_others_untouched() {
    if !privileged("routes_are_added_replaced_deleted_and_others_untouched") {
        return;
    }
    let (node, _peer) = node_on_a_lan_with_foreign_routes();
    let k = node.node();

    for r in [
        route("10.1.0.0/24", "192.168.50.2"),
        route("fd01::/64", "fd50::2"),
    ] {
        k.add_route(&r).unwrap();
        assert!(
            k.add_route(&r).unwrap_err().is_exists(),
            "a second add of {r:?}"
        );
    }
    let mut ours = k.our_routes().unwrap();
    ours.sort();
    assert_eq!(
        ours,
        vec![
            route("10.1.0.0/24", "192.168.50.2"),
            route("fd01::/64", "fd50::2")
        ]
    );
    let shown = node.sh("ip", &["route", "show", "proto", "0xcb"]);
    assert!(
        shown.trim().starts_with("10.1.0.0/24 nhid ")
            && shown.trim().ends_with(" via 192.168.50.2 dev lan0")
            && shown.lines().count() == 1,
        "{shown}"
    );

    // A destination someone else's route holds: EEXIST, and their route stays.
    for r in [
        route("10.2.0.0/24", "192.168.50.2"),
        route("fd02::/64", "fd50::2"),
    ] {
        let e = k.add_route(&r).unwrap_err();
        assert!(e.is_exists(), "{e}");
        assert!(k.del_route(&r).unwrap_err().is_not_found());
    }
    // Deleting with their gateway but our protocol does not touch theirs.
    assert!(
        k.del_route(&route("10.2.0.0/24", "192.168.50.3"))
            .unwrap_err()
            .is_not_found()
    );
    let v4 = routes_of(&node.nl, IpFamily::V4);
    assert!(
        v4.contains(&(net("10.2.0.0/24"), Some(ip("192.168.50.3")), 3)),
        "{v4:?}"
    );
    let v6 = routes_of(&node.nl, IpFamily::V6);
    assert!(
        v6.iter()
            .any(|r| r.0 == net("fd02::/64") && r.1 == Some(ip("fd50::3"))),
        "{v6:?}"
    );

    // Replace moves our route to the new gateway in place: still one route.
    k.replace_route(&route("10.1.0.0/24", "192.168.50.4"))
        .unwrap();
    k.replace_route(&route("fd01::/64", "fd50::4")).unwrap();
    let mut ours = k.our_routes().unwrap();
    ours.sort();
    assert_eq!(
        ours,
        vec![
            route("10.1.0.0/24", "192.168.50.4"),
            route("fd01::/64", "fd50::4")
        ]
    );

    for r in ours {
        k.del_route(&r).unwrap();
        assert!(k.del_route(&r).unwrap_err().is_not_found());
    }
    assert!(k.our_routes().unwrap().is_empty());
    let v4 = routes_of(&node.nl, IpFamily::V4);
    assert!(v4.iter().all(|r| r.2 != ROUTE_PROTO) && v4.iter().any(|r| r.0 == net("10.2.0.0/24")));
}

#[test]
#[ignore = "needs root"]
fn on_link_means_no_gateway_on_the_way() {
    if !privileged("on_link_means_no_gateway_on_the_way") {
        return;
    }
    let (node, peer) = (Ns::new(), Ns::new());
    let k = node.node();
    assert!(!k.on_link(ip("192.168.50.2")).unwrap(), "no route at all");
    node.link(
        "lan0",
        &["192.168.50.1/24", "fd50::1/64"],
        &peer,
        "lan0",
        &["192.168.50.2/24"],
    );
    node.default_via("192.168.50.254");
    node.default_via("fd50::fe");
    assert!(k.on_link(ip("192.168.50.2")).unwrap());
    assert!(k.on_link(ip("fd50::2")).unwrap());
    assert!(
        !k.on_link(ip("10.9.9.9")).unwrap(),
        "reached through the default gateway"
    );
    assert!(!k.on_link(ip("2001:db8::1")).unwrap());
    let mut local = k.local_addrs().unwrap();
    local.sort();
    for a in ["127.0.0.1", "192.168.50.1", "::1", "fd50::1"] {
        assert!(local.contains(&ip(a)), "{a} in {local:?}");
    }
}

#[test]
#[ignore = "needs root"]
fn forwarding_keeps_router_advertisements_where_a_route_came_from_one() {
    if !privileged("forwarding_keeps_router_advertisements_where_a_route_came_from_one") {
        return;
    }
    let (node, peer) = (Ns::new(), Ns::new());
    node.link("uplink", &[], &peer, "p0", &[]);
    node.link("pods", &[], &peer, "p1", &[]);
    // A route as the kernel learns it from an RA (proto ra) on the uplink only.
    node.sh(
        "ip",
        &[
            "-6",
            "route",
            "add",
            "2001:db8::/64",
            "dev",
            "uplink",
            "proto",
            "ra",
        ],
    );
    let read = |name: &str| {
        node.sh("cat", &[&format!("/proc/sys/net/{name}")])
            .trim()
            .to_string()
    };
    assert_eq!(read("ipv6/conf/uplink/accept_ra"), "1");
    node.node().enable_forwarding(true, true).unwrap();
    assert_eq!(read("ipv4/ip_forward"), "1");
    assert_eq!(read("ipv6/conf/all/forwarding"), "1");
    assert_eq!(read("ipv6/conf/uplink/accept_ra"), "2");
    assert_eq!(
        read("ipv6/conf/pods/accept_ra"),
        "1",
        "no RA route there: left alone"
    );
    let routes = node.sh("ip", &["-6", "route", "show", "proto", "ra"]);
    assert!(routes.contains("2001:db8::/64"), "{routes}");
}

/// A "pod" behind a "node", an "outside" host the node reaches directly and a second
/// "node" whose pod range is reached by one of our routes:
///
/// ```text
/// pod 10.10.1.2 fd10:1::2 --pod0-- node --out0-- outside 192.168.60.9 fd60::9
///                                       --lan0-- node2 192.168.61.2 fd61::2, pods 10.10.2.1 fd10:2::1
/// ```
struct Cluster {
    pod: Ns,
    node: Ns,
    outside: Ns,
    node2: Ns,
}

impl Cluster {
    fn new() -> Cluster {
        let c = Cluster {
            pod: Ns::new(),
            node: Ns::new(),
            outside: Ns::new(),
            node2: Ns::new(),
        };
        c.node.link(
            "pod0",
            &["10.10.1.1/24", "fd10:1::1/64"],
            &c.pod,
            "eth0",
            &["10.10.1.2/24", "fd10:1::2/64"],
        );
        c.node.link(
            "out0",
            &["192.168.60.1/24", "fd60::1/64"],
            &c.outside,
            "eth0",
            &["192.168.60.9/24", "fd60::9/64"],
        );
        c.node.link(
            "lan0",
            &["192.168.61.1/24", "fd61::1/64"],
            &c.node2,
            "eth0",
            &["192.168.61.2/24", "fd61::2/64"],
        );
        let pods2 = c.node2.nl.link_by_name("lo").unwrap().unwrap().index;
        c.node2
            .nl
            .add_address_nodad(pods2, net("10.10.2.1/32"))
            .unwrap();
        c.node2
            .nl
            .add_address_nodad(pods2, net("fd10:2::1/128"))
            .unwrap();
        c.pod.default_via("10.10.1.1");
        c.pod.default_via("fd10:1::1");
        // node2 routes our pods back (its own agent's route); outside does not.
        c.node2.route_via(net("10.10.1.0/24"), ip("192.168.61.1"));
        c.node2.route_via(net("fd10:1::/64"), ip("fd61::1"));
        let k = c.node.node();
        k.add_route(&route("10.10.2.0/24", "192.168.61.2")).unwrap();
        k.add_route(&route("fd10:2::/64", "fd61::2")).unwrap();
        k.enable_forwarding(true, true).unwrap();
        c
    }
}

pub(super) fn policy() -> NodePolicy {
    NodePolicy {
        v4: Some(FamilyPolicy {
            pod_cidrs: vec![net("10.10.1.0/24")],
            no_masquerade: vec![net("10.10.1.0/24"), net("10.10.2.0/24")],
        }),
        v6: Some(FamilyPolicy {
            pod_cidrs: vec![net("fd10:1::/64")],
            no_masquerade: vec![net("fd10:1::/64"), net("fd10:2::/64")],
        }),
        pods_on: "pod0".into(),
    }
}

fn nft_usable(test: &str, ns: &Ns) -> bool {
    available(
        test,
        "nft and iptables (apt-get install nftables iptables)",
        ns.run("nft", &["--version"]).is_some() && ns.run("iptables", &["--version"]).is_some(),
    )
}

/// The packets iptables' FORWARD policy dropped so far (`Chain FORWARD (policy DROP N packets`).
fn policy_drops(ns: &Ns, tool: &str) -> u64 {
    let out = ns.sh(tool, &["-L", "FORWARD", "-v", "-x", "-n"]);
    let first = out.lines().next().unwrap_or_default();
    let count = first
        .split("policy DROP ")
        .nth(1)
        .and_then(|r| r.split(' ').next());
    count
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no DROP policy in {first:?}"))
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "needs root"]
fn pod_traffic_leaving_the_cluster_is_masqueraded_and_pod_to_pod_is_not() {
    let test = "pod_traffic_leaving_the_cluster_is_masqueraded_and_pod_to_pod_is_not";
    if !privileged(test) {
        return;
    }
    let c = Cluster::new();
    if !nft_usable(test, &c.node) {
        return;
    }
    // Docker's setting: forwarding is dropped unless a rule accepts it.
    c.node.sh("iptables", &["-P", "FORWARD", "DROP"]);
    c.node.sh("ip6tables", &["-P", "FORWARD", "DROP"]);
    // Without our rules the policy drops pod traffic too.
    let before = policy_drops(&c.node, "iptables");
    c.pod.send_udp("192.168.60.9:5300");
    wait_for("the FORWARD policy to drop pod traffic", || {
        policy_drops(&c.node, "iptables") > before
    });
    let k = c.node.node();
    k.apply_firewall(&policy()).unwrap();
    assert!(k.firewall_matches(&policy()).unwrap());

    for (listen, to, node_addr) in [
        ("0.0.0.0:5301", "192.168.60.9:5301", "192.168.60.1"),
        ("[::]:5301", "[fd60::9]:5301", "fd60::1"),
    ] {
        let outside = c.outside.udp_listener(listen);
        c.pod.send_udp(to);
        assert_eq!(
            source_of(&outside),
            ip(node_addr),
            "to {to}: the node's address"
        );
    }
    for (listen, to, pod_addr) in [
        ("10.10.2.1:5302", "10.10.2.1:5302", "10.10.1.2"),
        ("[fd10:2::1]:5302", "[fd10:2::1]:5302", "fd10:1::2"),
    ] {
        let peer_pod = c.node2.udp_listener(listen);
        c.pod.send_udp(to);
        assert_eq!(
            source_of(&peer_pod),
            ip(pod_addr),
            "to {to}: the pod's own address"
        );
        // The answer comes back through the node's FORWARD DROP, from the peer pod.
        let (pod_listen, peer_src) = if pod_addr.contains(':') {
            (format!("[{pod_addr}]:5303"), "[fd10:2::1]:0")
        } else {
            (format!("{pod_addr}:5303"), "10.10.2.1:0")
        };
        let pod = c.pod.udp_listener(&pod_listen);
        c.node2.send_udp_from(peer_src, &pod_listen);
        assert_eq!(
            source_of(&pod),
            ip(peer_src.trim_end_matches(":0").trim_matches(['[', ']']))
        );
    }

    // Traffic neither from nor to this node's pods stays dropped: outside -> node2's pods.
    c.outside.route_via(net("10.10.2.0/24"), ip("192.168.60.1"));
    let peer_pod = c.node2.udp_listener("10.10.2.1:5304");
    let before = policy_drops(&c.node, "iptables");
    c.outside.send_udp("10.10.2.1:5304");
    wait_for("the FORWARD policy to drop outside traffic", || {
        policy_drops(&c.node, "iptables") > before
    });
    peer_pod.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 16];
    assert!(
        peer_pod.recv_from(&mut buf).is_err(),
        "outside traffic was forwarded"
    );

    // Nor is a packet from outside with a forged source in this node's pod range: only
    // the pods' own interface is trusted for it (reverse-path filtering off, as on many
    // nodes, so only our rule could let it through).
    for conf in ["all", "default", "out0"] {
        c.node.sh(
            "sysctl",
            &["-qw", &format!("net.ipv4.conf.{conf}.rp_filter=0")],
        );
    }
    let lo = c.outside.nl.link_by_name("lo").unwrap().unwrap().index;
    c.outside
        .nl
        .add_address_nodad(lo, net("10.10.1.77/32"))
        .unwrap();
    let peer_pod = c.node2.udp_listener("10.10.2.1:5305");
    let before = policy_drops(&c.node, "iptables");
    c.outside.send_udp_from("10.10.1.77:0", "10.10.2.1:5305");
    wait_for("the FORWARD policy to drop a forged pod source", || {
        policy_drops(&c.node, "iptables") > before
    });
    peer_pod.set_nonblocking(true).unwrap();
    assert!(
        peer_pod.recv_from(&mut buf).is_err(),
        "a forged pod source from outside was forwarded"
    );
}

/// Our lines of the namespace's ruleset: the `inet cni-rs` table and our FORWARD rules.
fn our_ruleset(ns: &Ns) -> String {
    let all = ns.sh("nft", &["list", "ruleset"]);
    let table = all.split("table inet cni-rs").nth(1).unwrap_or_default();
    let forward: Vec<&str> = all
        .lines()
        .filter(|l| l.contains("cni-rs: pod traffic"))
        .collect();
    format!("{}\n{}", forward.join("\n"), table.trim())
}

#[test]
#[ignore = "needs root"]
fn apply_replaces_the_whole_table_and_remove_leaves_nothing_of_ours() {
    let test = "apply_replaces_the_whole_table_and_remove_leaves_nothing_of_ours";
    if !privileged(test) {
        return;
    }
    let node = Ns::new();
    if !nft_usable(test, &node) {
        return;
    }
    // Someone else's rules: an iptables FORWARD rule and a table of their own.
    node.sh(
        "iptables",
        &["-A", "FORWARD", "-s", "10.99.0.0/16", "-j", "ACCEPT"],
    );
    node.sh("ip6tables", &["-P", "FORWARD", "DROP"]);
    node.sh("nft", &["add table inet theirs; add chain inet theirs c { type nat hook postrouting priority 100; }"]);
    // The first version's source rule (on any interface), as an earlier agent left it.
    node.sh("nft", &["insert rule ip filter FORWARD ip saddr 10.10.1.0/24 counter accept comment \"cni-rs: pod traffic\""]);
    let k = node.node();
    let p = policy();
    assert!(!k.firewall_matches(&p).unwrap());
    k.apply_firewall(&p).unwrap();
    let first = our_ruleset(&node);
    assert!(
        !first.contains("comment \"cni-rs: pod traffic\""),
        "the earlier version's rule is gone:\n{first}"
    );
    k.apply_firewall(&p).unwrap();
    assert_eq!(our_ruleset(&node), first, "a second apply changes nothing");
    assert!(k.firewall_matches(&p).unwrap());
    for line in [
        "ip daddr 10.10.1.0/24 counter packets 0 bytes 0 accept comment \"cni-rs: pod traffic v2\"",
        "iifname \"pod0\" ip6 saddr fd10:1::/64 counter packets 0 bytes 0 accept comment \"cni-rs: pod traffic v2\"",
        "elements = { 10.10.1.0-10.10.2.255 }",
        "type nat hook postrouting priority srcnat; policy accept;",
        "ip saddr @pods4 ip daddr != @nomasq4 ip daddr != 224.0.0.0/4 fib daddr type != local masquerade fully-random comment \"cni-rs: masquerade v2\"",
        "ip6 saddr @pods6 ip6 daddr != @nomasq6 ip6 daddr != ff00::/8 fib daddr type != local masquerade fully-random comment \"cni-rs: masquerade v2\"",
    ] {
        assert!(first.contains(line), "{line:?} in\n{first}");
    }
    assert_eq!(
        first.matches("comment \"cni-rs: pod traffic v2\"").count(),
        4,
        "{first}"
    );

    // A changed policy replaces the old one whole: new pod range, v6 gone.
    let mut changed = policy();
    changed.v4 = Some(FamilyPolicy {
        pod_cidrs: vec![net("10.10.7.0/24")],
        no_masquerade: vec![net("10.10.0.0/16"), net("172.16.0.0/12")],
    });
    changed.v6 = None;
    k.apply_firewall(&changed).unwrap();
    assert!(k.firewall_matches(&changed).unwrap());
    assert!(!k.firewall_matches(&p).unwrap());
    let now = our_ruleset(&node);
    assert!(
        now.contains("elements = { 10.10.0.0/16, 172.16.0.0/12 }"),
        "{now}"
    );
    assert!(
        now.contains("ip saddr 10.10.7.0/24 counter") && !now.contains("10.10.1.0/24"),
        "{now}"
    );
    assert!(
        !now.contains("pods6") && !now.contains("fd10:1::/64"),
        "{now}"
    );

    // Drift is seen: someone flushes our set.
    node.sh("nft", &["flush set inet cni-rs nomasq4"]);
    assert!(!k.firewall_matches(&changed).unwrap());
    k.apply_firewall(&changed).unwrap();
    let theirs = "-A FORWARD -s 10.99.0.0/16 -j ACCEPT";
    assert!(
        node.sh("iptables", &["-S", "FORWARD"])
            .ends_with(&format!("{theirs}\n"))
    );
    // An iptables FORWARD chain made after our apply (Docker starting later) is seen.
    node.sh("nft", &["delete table ip filter"]);
    assert!(
        k.firewall_matches(&changed).unwrap(),
        "no FORWARD chain: nothing to add"
    );
    node.sh("iptables", &["-P", "FORWARD", "DROP"]);
    node.sh(
        "iptables",
        &["-A", "FORWARD", "-s", "10.99.0.0/16", "-j", "ACCEPT"],
    );
    assert!(!k.firewall_matches(&changed).unwrap());
    k.apply_firewall(&changed).unwrap();
    assert!(k.firewall_matches(&changed).unwrap());

    k.remove_firewall().unwrap();
    k.remove_firewall().unwrap();
    let all = node.sh("nft", &["list", "ruleset"]);
    assert!(!all.contains("cni-rs"), "{all}");
    assert!(all.contains("table inet theirs"), "{all}");
    assert!(k.firewall_matches(&NodePolicy::default()).unwrap());
    let rules = node.sh("iptables", &["-S", "FORWARD"]);
    assert_eq!(rules, format!("-P FORWARD DROP\n{theirs}\n"));
    let rules = node.sh("ip6tables", &["-S", "FORWARD"]);
    assert_eq!(rules, "-P FORWARD DROP\n");
}

/// Not a timed test: the figures are printed for BENCHMARKS.md (`--nocapture`); what is
/// asserted is that 5,000 routes and a 5,000-range set all land and read back.
#[test]
#[ignore = "needs root"]
fn five_thousand_routes_and_ranges_land_whole() {
    let test = "five_thousand_routes_and_ranges_land_whole";
    if !privileged(test) {
        return;
    }
    let (node, peer) = (Ns::new(), Ns::new());
    node.link(
        "lan0",
        &["192.168.50.1/24"],
        &peer,
        "lan0",
        &["192.168.50.2/24"],
    );
    let k = node.node();
    // Every other /24 of 10.0.0.0/9: 5,000 ranges that do not merge.
    let cidrs: Vec<IpNetwork> = (0..5000u32)
        .map(|i| {
            IpNetwork::V4(ipnetwork::Ipv4Network::new((0x0a00_0000 + (i << 9)).into(), 24).unwrap())
        })
        .collect();
    let started = Instant::now();
    for dst in &cidrs {
        k.add_route(&PodRoute {
            dst: *dst,
            gateway: ip("192.168.50.2"),
        })
        .unwrap();
    }
    let added = started.elapsed();
    let started = Instant::now();
    let ours = k.our_routes().unwrap();
    let listed = started.elapsed();
    assert_eq!(ours.len(), 5000);

    if !nft_usable(test, &node) {
        return;
    }
    let policy = NodePolicy {
        v4: Some(FamilyPolicy {
            pod_cidrs: vec![net("10.255.0.0/24")],
            no_masquerade: cidrs.clone(),
        }),
        v6: None,
        pods_on: "cni0".into(),
    };
    let started = Instant::now();
    k.apply_firewall(&policy).unwrap();
    let applied = started.elapsed();
    assert!(k.firewall_matches(&policy).unwrap());
    let count = node
        .sh("nft", &["list", "set", "inet", "cni-rs", "nomasq4"])
        .matches("/24")
        .count();
    assert_eq!(count, 5000);
    eprintln!(
        "add_route x5000: {added:?}; our_routes over 5000: {listed:?}; apply_firewall with 5000 ranges: {applied:?}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_legacy_iptables_filter_table_is_detected() {
    let test = "a_legacy_iptables_filter_table_is_detected";
    if !privileged(test) {
        return;
    }
    let node = Ns::new();
    let legacy = node.run("iptables-legacy", &["--version"]).is_some();
    if !available(test, "iptables-legacy (apt-get install iptables)", legacy) {
        return;
    }
    let k = node.node();
    node.sh("iptables", &["-P", "FORWARD", "DROP"]);
    assert!(
        k.legacy_iptables_filters().is_empty(),
        "iptables-nft is not legacy"
    );
    node.sh("iptables-legacy", &["-P", "FORWARD", "DROP"]);
    assert_eq!(k.legacy_iptables_filters(), vec!["ip_tables_names"]);
}

/// `n` distinct /24s of 10.128.0.0/9 and /64s of fd80::/16, alternating families.
fn many_routes(n: u32) -> Vec<PodRoute> {
    (0..n)
        .map(|i| match i % 2 {
            0 => route(
                &format!("10.{}.{}.0/24", 128 + i / 512, (i / 2) % 256),
                "192.168.50.2",
            ),
            _ => route(&format!("fd80:{i:x}::/64"), "fd50::2"),
        })
        .collect()
}

#[test]
#[ignore = "needs root"]
fn a_batch_of_routes_adds_each_but_those_in_the_way_in_order() {
    if !privileged("a_batch_of_routes_adds_each_but_those_in_the_way_in_order") {
        return;
    }
    let (node, _peer) = node_on_a_lan_with_foreign_routes();
    let k = node.node();

    // More than one datagram's worth (256), the foreign and an unreachable gateway amid.
    let mut batch = many_routes(600);
    batch.insert(100, route("10.2.0.0/24", "192.168.50.2"));
    batch.insert(300, route("fd02::/64", "fd50::2"));
    batch.insert(500, route("10.3.0.0/24", "10.99.0.1"));
    let results = k.add_routes(&batch);
    assert_eq!(results.len(), batch.len());
    for (i, (r, res)) in batch.iter().zip(&results).enumerate() {
        match i {
            100 | 300 => assert!(res.as_ref().is_err_and(|e| e.is_exists()), "{r:?}: {res:?}"),
            500 => assert_eq!(
                res.as_ref().map_err(|e| e.errno()),
                Err(Some(nix::libc::ENETUNREACH)),
                "{r:?}"
            ),
            _ => assert!(res.is_ok(), "{r:?}: {res:?}"),
        }
    }
    let mut ours = k.our_routes().unwrap();
    ours.sort();
    let mut want = many_routes(600);
    want.sort();
    assert_eq!(ours, want);
    // Theirs stay theirs.
    let v4 = routes_of(&node.nl, IpFamily::V4);
    assert!(
        v4.contains(&(net("10.2.0.0/24"), Some(ip("192.168.50.3")), 3)),
        "{v4:?}"
    );
    let v6 = routes_of(&node.nl, IpFamily::V6);
    assert!(
        v6.iter()
            .any(|r| r.0 == net("fd02::/64") && r.1 == Some(ip("fd50::3")) && r.2 != ROUTE_PROTO),
        "{v6:?}"
    );

    // Again: each is there now, as add_route says one by one.
    let again = k.add_routes(&want);
    assert!(
        again
            .iter()
            .all(|r| r.as_ref().is_err_and(|e| e.is_exists()))
    );
    assert!(k.add_route(&want[7]).unwrap_err().is_exists());
    assert!(k.add_routes(&[]).is_empty());
}

#[test]
#[ignore = "needs root"]
fn on_link_many_answers_as_on_link_does() {
    if !privileged("on_link_many_answers_as_on_link_does") {
        return;
    }
    let (node, peer) = (Ns::new(), Ns::new());
    node.link(
        "lan0",
        &["192.168.50.1/24", "fd50::1/64"],
        &peer,
        "lan0",
        &["192.168.50.2/24"],
    );
    node.default_via("192.168.50.254");
    node.default_via("fd50::fe");
    node.sh("ip", &["route", "add", "unreachable", "10.66.0.0/16"]);
    node.sh(
        "ip",
        &["-6", "route", "add", "unreachable", "2001:db8:66::/48"],
    );
    node.sh("ip", &["route", "add", "prohibit", "10.67.0.0/16"]);
    let k = node.node();
    let mix = [
        ("192.168.50.2", Some(true)),
        ("fd50::2", Some(true)),
        ("10.9.9.9", Some(false)),
        ("2001:db8::1", Some(false)),
        ("10.66.1.1", Some(false)),
        ("2001:db8:66::1", Some(false)),
        // An error of its own (EACCES), amid the others.
        ("10.67.1.1", None),
    ];
    // Over one datagram's worth (256).
    let addrs: Vec<IpAddr> = mix.iter().cycle().take(7 * 50).map(|m| ip(m.0)).collect();
    let many = k.on_link_many(&addrs);
    assert_eq!(many.len(), addrs.len());
    for (i, (a, got)) in addrs.iter().zip(&many).enumerate() {
        let one = k.on_link(*a);
        assert_eq!(got.as_ref().ok(), one.as_ref().ok(), "{a}");
        assert_eq!(
            got.as_ref().err().map(|e| e.errno()),
            one.as_ref().err().map(|e| e.errno()),
            "{a}"
        );
        assert_eq!(got.as_ref().ok().copied(), mix[i % 7].1, "{a}: {got:?}");
    }
}

/// Issue 27, item 9: the masquerade rule draws source ports at random (`fully-random`) and
/// leaves multicast alone; a table an earlier agent made (same sets, the rule without
/// either) does not match and is made anew.
#[test]
#[ignore = "needs root"]
fn masquerade_is_fully_random_skips_multicast_and_replaces_an_earlier_rule() {
    let test = "masquerade_is_fully_random_skips_multicast_and_replaces_an_earlier_rule";
    if !privileged(test) {
        return;
    }
    let node = Ns::new();
    if !nft_usable(test, &node) {
        return;
    }
    // What the agent before this change left: the same table, the rule without either.
    let earlier = "table inet cni-rs {
        set pods4 { type ipv4_addr; flags interval; elements = { 10.10.1.0/24 } }
        set nomasq4 { type ipv4_addr; flags interval; elements = { 10.10.1.0/24, 10.10.2.0/24 } }
        set pods6 { type ipv6_addr; flags interval; elements = { fd10:1::/64 } }
        set nomasq6 { type ipv6_addr; flags interval; elements = { fd10:1::/64, fd10:2::/64 } }
        chain postrouting {
            type nat hook postrouting priority srcnat; policy accept;
            ip saddr @pods4 ip daddr != @nomasq4 fib daddr type != local masquerade
            ip6 saddr @pods6 ip6 daddr != @nomasq6 fib daddr type != local masquerade
        }
    }";
    let file = testkit::TempDir::new("cni-rs-earlier-table");
    let path = file.join("table.nft");
    std::fs::write(&path, earlier).unwrap();
    node.sh("nft", &["-f", path.to_str().unwrap()]);
    let k = node.node();
    assert!(
        !k.firewall_matches(&policy()).unwrap(),
        "the earlier rule was taken for the current one"
    );
    k.apply_firewall(&policy()).unwrap();
    assert!(k.firewall_matches(&policy()).unwrap());
    let rules: Vec<String> = our_ruleset(&node)
        .lines()
        .filter(|l| l.contains("masquerade"))
        .map(|l| l.trim().to_string())
        .collect();
    assert_eq!(
        rules,
        [
            "ip saddr @pods4 ip daddr != @nomasq4 ip daddr != 224.0.0.0/4 fib daddr type != local masquerade fully-random comment \"cni-rs: masquerade v2\"",
            "ip6 saddr @pods6 ip6 daddr != @nomasq6 ip6 daddr != ff00::/8 fib daddr type != local masquerade fully-random comment \"cni-rs: masquerade v2\"",
        ]
    );
}
