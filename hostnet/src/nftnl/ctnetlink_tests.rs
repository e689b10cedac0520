use super::*;

/// An attribute header as the kernel writes it (host byte order), then the value padded.
fn nla(ty: u16, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(4 + value.len() as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(value);
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out
}

fn nest(ty: u16, parts: &[Vec<u8>]) -> Vec<u8> {
    nla(ty | 0x8000, &parts.concat())
}

fn v4_tcp() -> CtEntry {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    CtEntry {
        orig: Tuple {
            src: ip("10.0.0.1"),
            dst: ip("10.96.0.10"),
            proto: TCP,
            l4: L4::Ports {
                src: 40000,
                dst: 80,
            },
        },
        reply: Tuple {
            src: ip("10.0.0.2"),
            dst: ip("10.0.0.1"),
            proto: TCP,
            l4: L4::Ports {
                src: 8080,
                dst: 40000,
            },
        },
        zone: 0,
        id: Some(7),
    }
}

#[test]
fn a_delete_names_the_original_tuple_and_the_id() {
    let want = [
        nest(
            1,
            &[
                nest(1, &[nla(1, &[10, 0, 0, 1]), nla(2, &[10, 96, 0, 10])]),
                nest(2, &[nla(1, &[6]), nla(2, &[0x9c, 0x40]), nla(3, &[0, 80])]),
            ],
        ),
        nla(12, &[0, 0, 0, 7]),
    ]
    .concat();
    assert_eq!(delete_attrs(&v4_tcp()).0, want);
    // A zone goes with it; no id: by tuple alone.
    let e = CtEntry {
        zone: 3,
        id: None,
        ..v4_tcp()
    };
    assert_eq!(delete_attrs(&e).0[..want.len() - 8], want[..want.len() - 8]);
    assert_eq!(delete_attrs(&e).0[want.len() - 8..], nla(18, &[0, 3]));
}

#[test]
fn a_listed_entry_decodes_with_both_tuples_whatever_else_it_carries() {
    let ip6 = |s: &str| s.parse::<Ipv6Addr>().unwrap().octets();
    let (a, b) = (ip6("fd00::1"), ip6("fd00::2"));
    let icmp6 = |src: &[u8; 16], dst: &[u8; 16], kind: u8| {
        [
            nest(1, &[nla(3, src), nla(4, dst)]),
            nest(
                2,
                &[
                    nla(1, &[58]),
                    nla(7, &[0x12, 0x34]),
                    nla(8, &[kind]),
                    nla(9, &[0]),
                ],
            ),
        ]
    };
    let msg = [
        nest(1, &icmp6(&a, &b, 128)),
        nest(2, &icmp6(&b, &a, 129)),
        nla(3, &[0, 0, 0, 0x8e]),             // CTA_STATUS
        nla(7, &[0, 0, 0, 30]),               // CTA_TIMEOUT
        nest(4, &[nest(1, &[nla(1, &[3])])]), // CTA_PROTOINFO
        nla(12, &[0xde, 0xad, 0xbe, 0xef]),   // CTA_ID
        nla(18, &[0, 5]),                     // CTA_ZONE
    ]
    .concat();
    let e = decode_entry(&msg).unwrap();
    assert_eq!(e.orig.src, IpAddr::V6(Ipv6Addr::from(a)));
    assert_eq!(e.reply.src, IpAddr::V6(Ipv6Addr::from(b)));
    assert_eq!(
        e.orig.l4,
        L4::Icmp {
            kind: 128,
            code: 0,
            id: 0x1234
        }
    );
    assert_eq!(
        e.reply.l4,
        L4::Icmp {
            kind: 129,
            code: 0,
            id: 0x1234
        }
    );
    assert_eq!((e.zone, e.id), (5, Some(0xdead_beef)));
    // What we write for a delete reads back as the same tuple.
    let tcp = v4_tcp();
    let mut both = Attrs::new();
    encode_tuple(&mut both, CTA_TUPLE_ORIG, &tcp.orig);
    encode_tuple(&mut both, CTA_TUPLE_REPLY, &tcp.reply);
    both.u32(CTA_ID, 7);
    assert_eq!(decode_entry(&both.0), Some(tcp));
}

#[test]
fn protocols_without_a_tuple_of_ours_and_cut_messages_are_skipped() {
    let gre = |proto: u8| {
        let t = [
            nest(1, &[nla(1, &[10, 0, 0, 1]), nla(2, &[10, 0, 0, 2])]),
            nest(2, &[nla(1, &[proto]), nla(2, &[0, 1]), nla(3, &[0, 2])]),
        ];
        [nest(1, &t), nest(2, &t)].concat()
    };
    assert_eq!(decode_entry(&gre(47)), None, "GRE");
    for proto in [TCP, UDP, UDPLITE, SCTP] {
        assert!(decode_entry(&gre(proto)).is_some(), "{proto}");
    }
    let whole = gre(TCP);
    assert_eq!(decode_entry(&whole[..whole.len() / 2]), None);
}
