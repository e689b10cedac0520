//! The connections a policy change denies, forgotten (and only those), on the fake and on
//! the real kernel; neighbour discovery through an isolated pod's bridge; br_netfilter.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use netpol::cluster::Cluster;
use netpol::compile::compile;
use netpol::conntrack::{CtEntry, L4, Tuple};
use netpol::diff::diff;
use netpol::eval::denied;
use netpol::model::{Namespace, NetworkPolicy, Pod};
use netpol::program::{Match, Program};
use serde_json::{Value, json};

use super::fake::FakeNodeNet;
use super::policy_cluster::{NODE, NODE_IPS, TCP, UDP};
use super::policy_lab::{Lab, connect, echoes};
use super::tests::{Ns, ip};
use super::{BridgeNf, PolicyNet, Refusal};
use testkit::privileged;

/// Pods p1 (10.50.0.11, fd50::11) and p2 (10.50.0.12, fd50::12) of namespace `app` on
/// the node; `ingress` the ingress rules of a policy selecting `pods` (None: no policy).
fn program(pods: Value, ingress: Option<Value>) -> Program {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "app"}})).unwrap();
    let pod = |name: &str, i: u8| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": "app", "name": name, "labels": {"pod": name}},
            "spec": {"nodeName": NODE},
            "status": {"phase": "Running", "podIPs": [
                {"ip": format!("10.50.0.1{i}")}, {"ip": format!("fd50::1{i}")}]}
        }))
        .unwrap()
    };
    let pols: Vec<NetworkPolicy> = ingress
        .into_iter()
        .map(|rules| {
            let pods = pods.clone();
            serde_json::from_value(json!({
                "metadata": {"namespace": "app", "name": "p2-in"},
                "spec": {"podSelector": pods, "ingress": rules}
            }))
            .unwrap()
        })
        .collect();
    let node_ips = NODE_IPS.iter().map(|s| ip(s)).collect();
    let nodes = BTreeMap::from([(NODE.to_string(), node_ips)]);
    let c = Cluster::new(&[ns], &[pod("p1", 1), pod("p2", 2)], &pols, nodes);
    let mut p = compile(&c, NODE);
    assert!(p.refused.is_empty(), "{:?}", p.refused);
    p.local = NODE_IPS.iter().map(|s| ip(s)).collect();
    p
}

/// TCP 8080, 5432 and UDP 5500 to p2 allowed; then only TCP 5432.
fn allowing() -> Program {
    program(
        p2(),
        Some(json!([{"ports": [
        {"port": 8080}, {"port": 5432}, {"protocol": "UDP", "port": 5500}]}])),
    )
}

fn denying() -> Program {
    program(p2(), Some(json!([{"ports": [{"port": 5432}]}])))
}

fn p2() -> Value {
    json!({"matchLabels": {"pod": "p2"}})
}

fn entry(src: &str, dst: &str, proto: u8, sport: u16, dport: u16, id: u32) -> CtEntry {
    let t = |s: &str, d: &str, a, b| Tuple {
        src: ip(s),
        dst: ip(d),
        proto,
        l4: L4::Ports { src: a, dst: b },
    };
    CtEntry {
        orig: t(src, dst, sport, dport),
        reply: t(dst, src, dport, sport),
        zone: 0,
        id: Some(id),
    }
}

#[test]
fn the_fake_forgets_the_denied_connections_and_only_those() {
    let fake = FakeNodeNet::new(vec![], NODE_IPS.iter().map(|s| ip(s)).collect());
    let http = entry("10.50.0.11", "10.50.0.12", TCP, 40000, 8080, 1);
    let db = entry("10.50.0.11", "10.50.0.12", TCP, 40001, 5432, 2);
    let dns = entry("fd50::11", "fd50::12", UDP, 40002, 5500, 3);
    fake.with(|s| s.conntrack = vec![http, db, dns]);
    fake.replace_policy(&allowing()).unwrap();
    let listed = fake.conntrack().unwrap();
    assert_eq!(denied(&allowing(), &listed).unwrap(), vec![]);

    let deny = denying();
    fake.apply_policy(&diff(&allowing(), &deny)).unwrap();
    let gone = denied(&deny, &fake.conntrack().unwrap()).unwrap();
    assert_eq!(gone, vec![http, dns]);
    assert_eq!(fake.forget_connections(&gone).unwrap(), 2);
    assert_eq!(fake.conntrack().unwrap(), vec![db]);
    // Already gone: success, nothing deleted; another id under the same tuple is spared.
    assert_eq!(fake.forget_connections(&gone).unwrap(), 0);
    let newer = CtEntry { id: Some(9), ..db };
    assert_eq!(fake.forget_connections(&[newer]).unwrap(), 0);
    assert_eq!(fake.conntrack().unwrap(), vec![db]);
}

#[test]
fn the_fake_enables_bridge_netfilter_only_when_the_module_is_there() {
    let fake = FakeNodeNet::new(vec![], vec![]);
    let off = fake.bridge_netfilter().unwrap();
    assert!(off.loaded && !off.polices_bridged_traffic());
    fake.enable_bridge_netfilter().unwrap();
    assert!(fake.bridge_netfilter().unwrap().polices_bridged_traffic());

    fake.with(|s| s.bridge_nf = BridgeNf::default());
    let e = fake.enable_bridge_netfilter().unwrap_err();
    assert_eq!(e.refusal(), Some(&Refusal::NoBridgeNetfilter));
    assert!(e.to_string().contains("modprobe br_netfilter"), "{e}");
}

/// The listed entry of a connection from `src` to `dst` (after DNAT: the reply's source).
fn listed(entries: &[CtEntry], src: SocketAddr, dst: SocketAddr) -> Option<CtEntry> {
    entries.iter().copied().find(|e| {
        let p = e.first_packet();
        matches!(e.orig.l4, L4::Ports { src: s, .. } if s == src.port())
            && p.src == src.ip()
            && (p.dst, p.port) == (dst.ip(), dst.port())
    })
}

/// Waits until neither pod has TCP data unacknowledged (Send-Q 0 on every established
/// socket). A server still waiting for an ACK when its connection's entry goes would
/// retransmit, and conntrack would take that for a new connection from the server
/// (`nf_conntrack_tcp_loose`), judged in that direction (see the report).
fn quiescent(pods: &[&Ns]) {
    for _ in 0..500 {
        let busy = pods.iter().any(|p| {
            p.sh("ss", &["-Htn", "state", "established"])
                .lines()
                .any(|l| l.split_whitespace().nth(1) != Some("0"))
        });
        if !busy {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("TCP data stays unacknowledged");
}

/// Whether a datagram on `s` (connected) comes back.
fn udp_echoes(s: &UdpSocket) -> bool {
    let mut b = [0u8; 8];
    (0..3).any(|_| s.send(b"x").is_ok() && s.recv(&mut b).is_ok())
}

#[test]
#[ignore = "needs root"]
fn a_change_that_denies_established_connections_ends_them_and_spares_the_allowed() {
    if !privileged("a_change_that_denies_established_connections_ends_them_and_spares_the_allowed")
    {
        return;
    }
    let lab = Lab::new(2);
    let k = lab.node.node();
    assert!(k.bridge_netfilter().unwrap().polices_bridged_traffic());
    // A Service: 10.96.0.10:80 -> p2:8080 and 10.96.0.11:80 -> p2:5432, DNATed on the node.
    lab.node.sh(
        "nft",
        &["add table ip svc
           add chain ip svc pre { type nat hook prerouting priority dstnat; }
           add rule ip svc pre ip daddr 10.96.0.10 tcp dport 80 dnat to 10.50.0.12:8080
           add rule ip svc pre ip daddr 10.96.0.11 tcp dport 80 dnat to 10.50.0.12:5432"],
    );
    let allow = allowing();
    k.replace_policy(&allow).unwrap();

    let (p1, p2) = (&lab.pods[0], &lab.pods[1]);
    let to = |a: &str, port| SocketAddr::new(ip(a), port);
    let mut http = connect(p1, to("10.50.0.12", 8080)).expect("allowed");
    let mut http6 = connect(p1, to("fd50::12", 8080)).expect("allowed");
    let mut db = connect(p1, to("10.50.0.12", 5432)).expect("allowed");
    let mut svc_http = connect(p1, to("10.96.0.10", 80)).expect("allowed");
    let mut svc_db = connect(p1, to("10.96.0.11", 80)).expect("allowed");
    let dns = p1
        .ns
        .run(|| {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.connect("10.50.0.12:5500").unwrap();
            s.set_read_timeout(Some(Duration::from_millis(400)))
                .unwrap();
            s
        })
        .unwrap();
    assert!(udp_echoes(&dns), "allowed");
    // p2 pings p1 (not isolated): an ICMP entry, never denied here.
    p2.sh("ping", &["-c1", "-W1", "10.50.0.11"]);
    p2.sh("ping", &["-c1", "-W1", "fd50::11"]);

    let deny = denying();
    k.apply_policy(&diff(&allow, &deny)).unwrap();
    assert!(echoes(&mut http), "without a flush the connection goes on");
    let entries = k.conntrack().unwrap();
    let me = |s: &std::net::TcpStream| s.local_addr().unwrap();
    let backend = |port| to("10.50.0.12", port);
    let want = [
        listed(&entries, me(&http), backend(8080)).expect("http listed"),
        listed(&entries, me(&http6), to("fd50::12", 8080)).expect("http6 listed"),
        listed(&entries, dns.local_addr().unwrap(), backend(5500)).expect("udp listed"),
        listed(&entries, me(&svc_http), backend(8080)).expect("service listed by backend"),
    ];
    let kept = [
        listed(&entries, me(&db), backend(5432)).expect("db listed"),
        listed(&entries, me(&svc_db), backend(5432)).expect("service db listed"),
    ];
    assert_eq!(want[3].orig.dst, ip("10.96.0.10"), "DNATed: {:?}", want[3]);
    for (kind, dst) in [(8u8, "10.50.0.11"), (128, "fd50::11")] {
        assert!(
            entries.iter().any(|e| e.orig.dst == ip(dst)
                && matches!(e.orig.l4, L4::Icmp { kind: k, .. } if k == kind)),
            "no echo request entry to {dst} in {entries:?}"
        );
    }

    quiescent(&[p1, p2]);
    let gone = denied(&deny, &entries).unwrap();
    for e in &want {
        assert!(gone.contains(e), "{e:?} not judged denied: {gone:?}");
    }
    for e in &kept {
        assert!(!gone.contains(e), "{e:?} judged denied");
    }
    assert!(gone.len() < entries.len());
    assert_eq!(k.forget_connections(&gone).unwrap(), gone.len());
    assert_eq!(k.forget_connections(&gone).unwrap(), 0, "already gone");

    assert!(
        !echoes(&mut http),
        "the denied connection's next send gets no answer"
    );
    assert!(!echoes(&mut http6));
    assert!(!echoes(&mut svc_http));
    assert!(!udp_echoes(&dns), "the denied flow stops");
    assert!(echoes(&mut db), "the allowed connection keeps working");
    assert!(
        echoes(&mut svc_db),
        "and the allowed Service connection its DNAT"
    );
    let after = k.conntrack().unwrap();
    for e in &want {
        assert!(!after.contains(e), "{e:?} still there");
    }
}

/// Whether pod `from` resolves `to` (IPv6) from scratch: its cache flushed, a ping (which
/// the policy may drop) makes it solicit, and the answer fills the entry.
fn resolves(from: &Ns, to: &str) -> bool {
    from.sh("ip", &["-6", "neigh", "flush", "dev", "eth0"]);
    let _ = from.run("ping", &["-6", "-c1", "-W1", to]);
    let shown = from.sh("ip", &["-6", "neigh", "show", to, "dev", "eth0"]);
    shown.contains("lladdr")
}

#[test]
#[ignore = "needs root"]
fn an_isolated_pod_still_resolves_its_ipv6_neighbours_across_the_bridge() {
    if !privileged("an_isolated_pod_still_resolves_its_ipv6_neighbours_across_the_bridge") {
        return;
    }
    let lab = Lab::resolving(2);
    let k = lab.node.node();
    assert!(k.bridge_netfilter().unwrap().polices_bridged_traffic());
    // A deny-all ingress: both pods isolated, nothing allowed in.
    let deny = program(json!({}), Some(json!([])));
    k.replace_policy(&deny).unwrap();
    assert_eq!(
        k.read_policy().unwrap().map(|p| p.chains),
        Some(deny.chains.clone())
    );
    let listed = lab
        .node
        .sh("nft", &["list", "table", "inet", "cni-rs-netpol"]);
    assert_eq!(
        listed.matches("icmpv6 type 133-136 accept").count(),
        2,
        "both base chains: {listed}"
    );
    let (p1, p2) = (&lab.pods[0], &lab.pods[1]);
    assert!(resolves(p1, "fd50::12"));
    assert!(resolves(p2, "fd50::11"));
    assert!(
        connect(p1, SocketAddr::new(ip("fd50::12"), 8080)).is_none(),
        "isolated"
    );

    // The same program without the neighbour discovery rules: resolution fails, so the
    // rule is what lets it through.
    let mut bare = deny.clone();
    for c in bare.chains.values_mut() {
        c.rules.retain(|r| r.matches != [Match::NeighbourDiscovery]);
    }
    assert_ne!(bare.chains, deny.chains);
    k.replace_policy(&bare).unwrap();
    assert!(!resolves(p1, "fd50::12"));
    k.remove_policy().unwrap();
    assert!(resolves(p1, "fd50::12"), "and without policy it resolves");
}

#[test]
#[ignore = "needs root"]
fn bridge_netfilter_is_read_and_enabled_in_the_nodes_namespace_only() {
    if !privileged("bridge_netfilter_is_read_and_enabled_in_the_nodes_namespace_only") {
        return;
    }
    let knobs = ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables"];
    let read = |ns: Option<&Ns>| -> Vec<String> {
        let get = || {
            knobs
                .iter()
                .map(|k| std::fs::read_to_string(format!("/proc/sys/net/bridge/{k}")).unwrap())
                .collect()
        };
        ns.map_or_else(get, |n| n.ns.run(get).unwrap())
    };
    // The machine's own values, only read (this test must not change them).
    let machine = read(None);
    let node = Ns::new();
    let k = node.node();
    node.ns
        .run(|| {
            for knob in knobs {
                std::fs::write(format!("/proc/sys/net/bridge/{knob}"), "0").unwrap();
            }
        })
        .unwrap();
    let off = k.bridge_netfilter().unwrap();
    assert_eq!(
        off,
        BridgeNf {
            loaded: true,
            call_iptables: false,
            call_ip6tables: false
        }
    );
    k.enable_bridge_netfilter().unwrap();
    assert!(k.bridge_netfilter().unwrap().polices_bridged_traffic());
    assert_eq!(read(Some(&node)), ["1\n", "1\n"]);
    k.enable_bridge_netfilter().unwrap();
    assert_eq!(read(None), machine, "the machine's namespace is untouched");
}
