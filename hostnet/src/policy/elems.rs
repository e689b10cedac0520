//! A netpol set's kind and elements as the kernel holds them, and back. Keys are in
//! network byte order; each part of a concatenation takes a multiple of 4 bytes
//! (`tcp . 80` is `06 00 00 00 00 50 00 00`, as nft stores it).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netpol::addr::{Family, Range};
use netpol::program::{Elem, SetKind};

use crate::nftnl::{SET_CONCAT, SET_INTERVAL, SET_MAP, SetElem, SetSpec};

/// nft's data types `ipv4_addr`, `ipv6_addr`, `inet_proto`, `inet_service`; a
/// concatenation's type is its parts' numbers, 6 bits each.
const IPV4_ADDR: u32 = 7;
const IPV6_ADDR: u32 = 8;
const INET_PROTO: u32 = 12;
const INET_SERVICE: u32 = 13;

fn addr_type(f: Family) -> (u32, u32) {
    match f {
        Family::V4 => (IPV4_ADDR, 4),
        Family::V6 => (IPV6_ADDR, 16),
    }
}

/// The kernel's definition of a set of `kind`.
pub fn set_spec(name: &str, kind: SetKind) -> SetSpec {
    let spec = |flags, key_type, key_len, fields: Vec<u32>, verdicts| SetSpec {
        name: name.to_string(),
        flags,
        key_type,
        key_len,
        fields,
        verdicts,
    };
    match kind {
        SetKind::Addrs(f) => {
            let (t, len) = addr_type(f);
            spec(0, t, len, vec![], false)
        }
        SetKind::Ranges(f) => {
            let (t, len) = addr_type(f);
            spec(SET_INTERVAL, t, len, vec![], false)
        }
        SetKind::ProtoPorts => spec(
            SET_INTERVAL | SET_CONCAT,
            INET_PROTO << 6 | INET_SERVICE,
            8,
            vec![1, 2],
            false,
        ),
        SetKind::AddrProtoPorts(f) => {
            let (t, len) = addr_type(f);
            let key_type = (t << 6 | INET_PROTO) << 6 | INET_SERVICE;
            spec(0, key_type, len + 8, vec![], false)
        }
        SetKind::Dispatch(f) => {
            let (t, len) = addr_type(f);
            spec(SET_MAP, t, len, vec![], true)
        }
        SetKind::PortDispatch => spec(
            SET_INTERVAL | SET_CONCAT | SET_MAP,
            INET_PROTO << 6 | INET_SERVICE,
            8,
            vec![1, 2],
            true,
        ),
    }
}

/// The kind whose definition `spec` is; None for a set we never make.
pub fn kind_of(spec: &SetSpec) -> Option<SetKind> {
    let fams = Family::BOTH;
    let kinds = fams
        .iter()
        .flat_map(|f| {
            [
                SetKind::Addrs(*f),
                SetKind::Ranges(*f),
                SetKind::AddrProtoPorts(*f),
                SetKind::Dispatch(*f),
            ]
        })
        .chain([SetKind::ProtoPorts, SetKind::PortDispatch]);
    kinds
        .into_iter()
        .find(|k| set_spec(&spec.name, *k) == *spec)
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn ip_of(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?))),
        16 => Some(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(bytes).ok()?,
        ))),
        _ => None,
    }
}

fn proto_port(proto: u8, port: u16) -> [u8; 8] {
    let p = port.to_be_bytes();
    [proto, 0, 0, 0, p[0], p[1], 0, 0]
}

fn parse_proto_port(b: &[u8]) -> Option<(u8, u16)> {
    match b {
        [proto, 0, 0, 0, hi, lo, 0, 0] => Some((*proto, u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }
}

/// The address after `ip`, None past the family's last.
fn next(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(a) => u32::from(a)
            .checked_add(1)
            .map(|n| Ipv4Addr::from(n).into()),
        IpAddr::V6(a) => u128::from(a)
            .checked_add(1)
            .map(|n| Ipv6Addr::from(n).into()),
    }
}

fn prev(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(a) => u32::from(a)
            .checked_sub(1)
            .map(|n| Ipv4Addr::from(n).into()),
        IpAddr::V6(a) => u128::from(a)
            .checked_sub(1)
            .map(|n| Ipv6Addr::from(n).into()),
    }
}

fn last_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => Ipv4Addr::BROADCAST.into(),
        IpAddr::V6(_) => Ipv6Addr::from(u128::MAX).into(),
    }
}

fn key(key: Vec<u8>) -> SetElem {
    SetElem {
        key,
        ..SetElem::default()
    }
}

/// The kernel elements of one netpol element: an address range is a start and, unless it
/// runs to the family's last address, an interval end one past it.
pub fn to_kernel(e: &Elem) -> Vec<SetElem> {
    match e {
        Elem::Addr(ip) => vec![key(ip_bytes(*ip))],
        Elem::Range(r) => {
            let mut out = vec![key(ip_bytes(r.first))];
            if let Some(end) = next(r.last) {
                out.push(SetElem {
                    interval_end: true,
                    ..key(ip_bytes(end))
                });
            }
            out
        }
        Elem::ProtoPorts(proto, a, b) => vec![SetElem {
            key_end: Some(proto_port(*proto, *b).to_vec()),
            ..key(proto_port(*proto, *a).to_vec())
        }],
        Elem::AddrProtoPort(ip, proto, port) => {
            vec![key(
                [ip_bytes(*ip), proto_port(*proto, *port).to_vec()].concat()
            )]
        }
        Elem::Jump(ip, chain) => vec![SetElem {
            jump: Some(chain.clone()),
            ..key(ip_bytes(*ip))
        }],
        Elem::PortJump(proto, a, b, chain) => vec![SetElem {
            key_end: Some(proto_port(*proto, *b).to_vec()),
            jump: Some(chain.clone()),
            ..key(proto_port(*proto, *a).to_vec())
        }],
    }
}

/// The netpol elements of a set of `kind` from what the kernel lists; None when one is
/// not of that kind's shape.
pub fn from_kernel(kind: SetKind, held: Vec<SetElem>) -> Option<BTreeSet<Elem>> {
    if let SetKind::Ranges(_) = kind {
        return ranges(held);
    }
    held.iter()
        .map(|e| {
            let plain = e.key_end.is_none() && !e.interval_end && e.jump.is_none();
            match kind {
                SetKind::Addrs(_) if plain => Some(Elem::Addr(ip_of(&e.key)?)),
                SetKind::ProtoPorts if !e.interval_end && e.jump.is_none() => {
                    let (proto, a) = parse_proto_port(&e.key)?;
                    let (p2, b) = parse_proto_port(e.key_end.as_deref()?)?;
                    (proto == p2).then_some(Elem::ProtoPorts(proto, a, b))
                }
                SetKind::AddrProtoPorts(_) if plain => {
                    let (addr, pp) = e.key.split_at(e.key.len().checked_sub(8)?);
                    let (proto, port) = parse_proto_port(pp)?;
                    Some(Elem::AddrProtoPort(ip_of(addr)?, proto, port))
                }
                SetKind::Dispatch(_) if e.key_end.is_none() && !e.interval_end => {
                    Some(Elem::Jump(ip_of(&e.key)?, e.jump.clone()?))
                }
                SetKind::PortDispatch if !e.interval_end => {
                    let (proto, a) = parse_proto_port(&e.key)?;
                    let (p2, b) = parse_proto_port(e.key_end.as_deref()?)?;
                    let chain = e.jump.clone()?;
                    (proto == p2).then_some(Elem::PortJump(proto, a, b, chain))
                }
                _ => None,
            }
        })
        .collect()
}

/// Starts and interval ends, in key order, paired into ranges. An end with no start
/// before it (nft writes one at the family's first address) closes nothing.
fn ranges(mut held: Vec<SetElem>) -> Option<BTreeSet<Elem>> {
    held.sort();
    let mut out = BTreeSet::new();
    let mut open: Option<IpAddr> = None;
    for e in held {
        if e.key_end.is_some() || e.jump.is_some() {
            return None;
        }
        let ip = ip_of(&e.key)?;
        match (e.interval_end, open.take()) {
            (false, None) => open = Some(ip),
            (false, Some(_)) => return None,
            (true, Some(first)) => {
                out.insert(Elem::Range(Range {
                    first,
                    last: prev(ip)?,
                }));
            }
            (true, None) => {}
        }
    }
    if let Some(first) = open {
        out.insert(Elem::Range(Range {
            first,
            last: last_of(first),
        }));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_kind_and_element_round_trips() {
        let cases = [
            (SetKind::Addrs(Family::V4), Elem::Addr(ip("10.1.0.5"))),
            (SetKind::Addrs(Family::V6), Elem::Addr(ip("fd00::5"))),
            (
                SetKind::Ranges(Family::V4),
                Elem::Range(Range {
                    first: ip("0.0.0.0"),
                    last: ip("9.255.255.255"),
                }),
            ),
            (
                SetKind::Ranges(Family::V6),
                Elem::Range(Range {
                    first: ip("fd00::"),
                    last: ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
                }),
            ),
            (SetKind::ProtoPorts, Elem::ProtoPorts(6, 80, 81)),
            (
                SetKind::AddrProtoPorts(Family::V6),
                Elem::AddrProtoPort(ip("fd00::1"), 17, 53),
            ),
            (
                SetKind::Dispatch(Family::V4),
                Elem::Jump(ip("10.1.0.1"), "sel-1-in".into()),
            ),
            (
                SetKind::PortDispatch,
                Elem::PortJump(6, 8000, 8080, "pol-1-in".into()),
            ),
        ];
        for (kind, elem) in cases {
            let spec = set_spec("s", kind);
            assert_eq!(kind_of(&spec), Some(kind), "{kind:?}");
            let back = from_kernel(kind, to_kernel(&elem)).unwrap();
            assert_eq!(back, BTreeSet::from([elem.clone()]), "{kind:?}");
        }
    }

    #[test]
    fn keys_are_laid_out_as_nft_stores_them() {
        // `nft --debug=netlink`: `element 00000006 00005000 - 00000006 00005100` for
        // tcp . 80-81, `0101010a 00000006 0000901f` for 10.1.1.1 . tcp . 8080.
        let e = &to_kernel(&Elem::ProtoPorts(6, 80, 81))[0];
        assert_eq!(e.key, [6, 0, 0, 0, 0, 80, 0, 0]);
        assert_eq!(e.key_end.as_deref(), Some(&[6, 0, 0, 0, 0, 81, 0, 0][..]));
        let e = &to_kernel(&Elem::AddrProtoPort(ip("10.1.1.1"), 6, 8080))[0];
        assert_eq!(e.key, [10, 1, 1, 1, 6, 0, 0, 0, 0x1f, 0x90, 0, 0]);
        // 10.2.0.0-10.2.0.255 is a start and an end at 10.2.1.0.
        let r = to_kernel(&Elem::Range(Range {
            first: ip("10.2.0.0"),
            last: ip("10.2.0.255"),
        }));
        assert_eq!(r[1].key, [10, 2, 1, 0]);
        assert!(r[1].interval_end && !r[0].interval_end);
    }

    #[test]
    fn a_leading_interval_end_closes_nothing_and_an_odd_start_is_refused() {
        let mut held = to_kernel(&Elem::Range(Range {
            first: ip("10.2.0.0"),
            last: ip("10.2.0.255"),
        }));
        held.push(SetElem {
            key: vec![0; 4],
            interval_end: true,
            ..SetElem::default()
        });
        assert_eq!(
            from_kernel(SetKind::Ranges(Family::V4), held)
                .unwrap()
                .len(),
            1
        );
        let two_starts = vec![key(vec![10, 0, 0, 0]), key(vec![10, 0, 0, 9])];
        assert_eq!(from_kernel(SetKind::Ranges(Family::V4), two_starts), None);
    }
}
