//! Which conntrack entries a program denies (`eval::denied`), and neighbour discovery,
//! which every program accepts before its dispatch.

mod common;

use std::net::IpAddr;

use common::*;
use netpol::conntrack::{CtEntry, L4, Tuple};
use netpol::eval::{Packet, denied};
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// x/a (10.1.1.1, node-1) isolated for ingress, allowing TCP 81 from anywhere.
fn world() -> Net {
    World::upstream()
        .policy(
            "x",
            "a-81",
            json!({"podSelector": {"matchLabels": {"pod": "a"}},
                   "ingress": [{"ports": [{"port": 81}]}]}),
        )
        .build()
}

fn tuple(src: &str, dst: &str, proto: u8, l4: L4) -> Tuple {
    Tuple {
        src: ip(src),
        dst: ip(dst),
        proto,
        l4,
    }
}

fn ports(src: u16, dst: u16) -> L4 {
    L4::Ports { src, dst }
}

/// An entry without NAT: the reply is the original reversed.
fn plain(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> CtEntry {
    CtEntry {
        orig: tuple(src, dst, proto, ports(sport, dport)),
        reply: tuple(dst, src, proto, ports(dport, sport)),
        zone: 0,
        id: Some(7),
    }
}

#[test]
fn only_the_connections_the_program_now_drops_are_denied() {
    let net = world();
    let node1 = &net.programs[0];
    // y/b (10.1.2.2) -> x/a: port 80 denied, port 81 allowed, UDP 80 denied.
    let tcp80 = plain("10.1.2.2", "10.1.1.1", TCP, 40000, 80);
    let tcp81 = plain("10.1.2.2", "10.1.1.1", TCP, 40001, 81);
    let udp80 = plain("fd00:1:0:2::2", "fd00:1:0:1::1", UDP, 5353, 80);
    // x/a's own connections out: not isolated for egress.
    let out = plain("10.1.1.1", "10.1.2.2", TCP, 40002, 80);
    // The node (kubelet's probe) to x/a: never through forward.
    let probe = plain("10.0.0.1", "10.1.1.1", TCP, 40003, 80);
    // A Service (10.96.0.10:8080) DNATed to x/a:80 and to x/a:81, the client masqueraded
    // by the node on the way out (the reply goes to the node's address).
    let service = |port: u16| CtEntry {
        orig: tuple("10.1.2.2", "10.96.0.10", TCP, ports(40004, 8080)),
        reply: tuple("10.1.1.1", "10.0.0.1", TCP, ports(port, 61000)),
        zone: 0,
        id: None,
    };
    let entries = [tcp80, tcp81, udp80, out, probe, service(80), service(81)];
    let got = denied(node1, &entries).unwrap();
    assert_eq!(got, vec![tcp80, udp80, service(80)]);
    // Node-2 holds no isolated pod among these: it denies none of them.
    assert_eq!(denied(&net.programs[1], &entries).unwrap(), vec![]);
    // Each verdict is the program's own on the first packet.
    for e in &entries[..4] {
        let first = e.first_packet();
        assert_eq!(node1.passes(&first).unwrap(), !got.contains(e), "{e:?}");
    }
}

#[test]
fn icmp_entries_are_judged_by_the_request_and_hairpins_are_judged() {
    let net = world();
    let echo = CtEntry {
        orig: tuple(
            "10.1.3.3",
            "10.1.1.1",
            ICMP,
            L4::Icmp {
                kind: 8,
                code: 0,
                id: 9,
            },
        ),
        reply: tuple(
            "10.1.1.1",
            "10.1.3.3",
            ICMP,
            L4::Icmp {
                kind: 0,
                code: 0,
                id: 9,
            },
        ),
        zone: 0,
        id: None,
    };
    assert_eq!(echo.first_packet().port, 8);
    // x/a through its own Service back to itself: forwarded, so policed (port 80 denied).
    let hairpin = CtEntry {
        orig: tuple("10.1.1.1", "10.96.0.10", TCP, ports(40000, 80)),
        reply: tuple("10.1.1.1", "10.0.0.1", TCP, ports(80, 61000)),
        zone: 0,
        id: None,
    };
    let got = denied(&net.programs[0], &[echo, hairpin]).unwrap();
    assert_eq!(got, vec![echo, hairpin]);
}

#[test]
fn neighbour_discovery_passes_every_isolated_pod() {
    let net = World::upstream()
        .policy(
            "x",
            "deny",
            json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        )
        .build();
    let (a, b) = (ip("fd00:1:0:1::1"), ip("fd00:1:0:1::2"));
    let icmp6 = |src, dst, kind| Packet {
        src,
        dst,
        proto: 58,
        port: kind,
    };
    for p in &net.programs {
        for kind in 133..=136 {
            assert!(p.passes(&icmp6(a, b, kind)).unwrap(), "type {kind}");
            assert!(p.passes(&icmp6(b, a, kind)).unwrap(), "type {kind}");
        }
    }
    // Echo requests and other ICMPv6 stay denied, as does ICMP (v4) with those numbers.
    let node1 = &net.programs[0];
    for kind in [128, 132, 137, 1] {
        assert!(!node1.passes(&icmp6(a, b, kind)).unwrap(), "type {kind}");
    }
    let v4 = Packet {
        src: ip("10.1.2.1"),
        dst: ip("10.1.1.1"),
        proto: 58,
        port: 135,
    };
    assert!(!node1.passes(&v4).unwrap());
    // And the isolation itself holds.
    assert!(!net.reach("y/a", "x/a", TCP, 80));
}
