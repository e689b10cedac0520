//! Traffic through the mappings, all between namespaces the test made: a client netns
//! wired to the node (the fake host netns) reaches the pod at the node's address and at a
//! `hostIP`, over TCP and UDP, IPv4 and IPv6; the pod reaches itself through the node
//! (hairpin); the node reaches it at `127.0.0.1:hostPort`; DEL closes the ports.

#[path = "portmap_support/mod.rs"]
mod support;

use support::*;
use testkit::privileged;

#[test]
#[ignore = "needs root"]
fn tcp_and_udp_reach_the_pod_through_the_node() {
    if !privileged("tcp_and_udp_reach_the_pod_through_the_node") {
        return;
    }
    let node = Node::new("pmconn");
    let client = node.client();
    let pod = node.attach("pm-conn");
    let _tcp = TcpServer::start(&pod.ns, 80, "pod");
    let _udp = UdpServer::start(&pod.ns, 53, "pod");
    let mappings = [
        tcp(30080, 80),
        udp(30053, 53),
        on(tcp(30081, 80), NODE4),
        on(udp(30054, 53), NODE4),
    ];
    // Nothing answers before the mapping.
    assert_eq!(tcp_get(&client, &format!("{NODE4}:30080")), None);
    node.map(&ours(), &pod, &mappings);

    // From outside: the client's own address reaches the pod (no SNAT on the way in).
    let client_src = format!("pod ::ffff:{}", "192.168.249.2");
    for port in [30080, 30081] {
        let got = tcp_get(&client, &format!("{NODE4}:{port}"));
        assert_eq!(got.as_deref(), Some(client_src.as_str()), "tcp {port}");
    }
    for port in [30053, 30054] {
        let got = udp_get(&client, &format!("{NODE4}:{port}"));
        assert_eq!(got.as_deref(), Some(client_src.as_str()), "udp {port}");
    }
    // The node's other address (the gateway) takes the mappings without hostIP only.
    assert!(tcp_get(&client, &format!("{GATEWAY4}:30080")).is_some());
    assert_eq!(tcp_get(&client, &format!("{GATEWAY4}:30081")), None);

    // From the node itself, to its address and to localhost (route_localnet, masqueraded
    // to the bridge's address so the pod can answer).
    assert!(tcp_get(node.host(), &format!("{NODE4}:30080")).is_some());
    let via_lo = tcp_get(node.host(), "127.0.0.1:30080");
    assert_eq!(
        via_lo.as_deref(),
        Some(format!("pod ::ffff:{GATEWAY4}").as_str())
    );

    // Hairpin: the pod reaches itself through the node, masqueraded (else it would answer
    // itself directly and the connection would not match).
    let me = pod.ip(false);
    let hairpin = tcp_get(&pod.ns, &format!("{NODE4}:30080")).expect("hairpin connects");
    assert!(
        !hairpin.ends_with(&me),
        "hairpin traffic is masqueraded: {hairpin}"
    );
    assert!(udp_get(&pod.ns, &format!("{NODE4}:30053")).is_some());

    // DEL closes every port.
    node.unmap(&ours(), &pod, &mappings);
    assert_eq!(tcp_get(&client, &format!("{NODE4}:30080")), None);
    assert_eq!(tcp_get(&client, &format!("{NODE4}:30081")), None);
    assert_eq!(udp_get(&client, &format!("{NODE4}:30053")), None);
    assert_eq!(tcp_get(node.host(), "127.0.0.1:30080"), None);
    node.detach(&pod);
}

#[test]
#[ignore = "needs root"]
fn ipv6_mappings_reach_the_pod() {
    if !privileged("ipv6_mappings_reach_the_pod") {
        return;
    }
    let node = Node::new("pmconn6");
    let client = node.client();
    let pod = node.attach("pm-conn6");
    let _tcp = TcpServer::start(&pod.ns, 80, "pod");
    let _udp = UdpServer::start(&pod.ns, 53, "pod");
    let mappings = [tcp(30080, 80), udp(30053, 53), on(tcp(30081, 80), NODE6)];
    node.map(&ours(), &pod, &mappings);

    let client_src = "pod fd00:c::2";
    for port in [30080, 30081] {
        let got = tcp_get(&client, &format!("[{NODE6}]:{port}"));
        assert_eq!(got.as_deref(), Some(client_src), "tcp {port}");
    }
    let got = udp_get(&client, &format!("[{NODE6}]:30053"));
    assert_eq!(got.as_deref(), Some(client_src));
    // An IPv6 hostIP is not mapped on IPv4.
    assert_eq!(tcp_get(&client, &format!("{NODE4}:30081")), None);
    let me = pod.ip(true);
    let hairpin = tcp_get(&pod.ns, &format!("[{NODE6}]:30080")).expect("hairpin connects");
    assert!(
        !hairpin.ends_with(&me),
        "hairpin traffic is masqueraded: {hairpin}"
    );

    node.unmap(&ours(), &pod, &mappings);
    assert_eq!(tcp_get(&client, &format!("[{NODE6}]:30080")), None);
    node.detach(&pod);
}

#[test]
#[ignore = "needs root"]
fn a_udp_flow_seen_before_the_mapping_reaches_the_pod_after_it() {
    if !privileged("a_udp_flow_seen_before_the_mapping_reaches_the_pod_after_it") {
        return;
    }
    // The stale entry is deleted with conntrack-tools (kube-proxy's dependency too).
    let conntrack = std::path::Path::new("/usr/sbin/conntrack").exists();
    if !testkit::available("a_udp_flow_seen_before_the_mapping", "conntrack", conntrack) {
        return;
    }
    let node = Node::new("pmct");
    let client = node.client();
    let pod = node.attach("pm-ct");
    let _udp = UdpServer::start(&pod.ns, 53, "pod");
    // One client socket, one flow: its first datagram meets no mapping and makes a
    // conntrack entry without NAT, which every later datagram of the flow would follow.
    let sock = client.run(|| std::net::UdpSocket::bind("0.0.0.0:0").unwrap());
    sock.set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .unwrap();
    let to = format!("{NODE4}:30055");
    let ask = |sock: &std::net::UdpSocket| {
        sock.send_to(b"ping", to.as_str()).unwrap();
        let mut buf = [0u8; 64];
        sock.recv_from(&mut buf)
            .ok()
            .map(|(n, _)| String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    assert_eq!(ask(&sock), None);
    node.map(&ours(), &pod, &[udp(30055, 53)]);
    let got = ask(&sock).expect("the flow reaches the pod once mapped");
    assert!(got.starts_with("pod "), "{got}");
    node.unmap(&ours(), &pod, &[udp(30055, 53)]);
    node.detach(&pod);
}
