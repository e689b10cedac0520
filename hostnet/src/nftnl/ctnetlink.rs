//! Conntrack over the same `NETLINK_NETFILTER` socket (subsystem ctnetlink): the table
//! listed (`IPCTNL_MSG_CT_GET` with `NLM_F_DUMP`, each family) and single entries deleted
//! by their original tuple (`IPCTNL_MSG_CT_DELETE`), what `conntrack -L` / `conntrack -D`
//! do, for TCP, UDP, SCTP, UDP-Lite, ICMP and ICMPv6. A delete always names a tuple: the
//! kernel takes one without a tuple as "flush the whole table".

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netpol::conntrack::{CtEntry, L4, Tuple};

use super::attr::{self, Attrs};
use super::error::NftError;
use super::socket::NfSocket;

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_ID: u16 = 12;
const CTA_ZONE: u16 = 18;

const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;

const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const CTA_PROTO_ICMP_ID: u16 = 4;
const CTA_PROTO_ICMP_TYPE: u16 = 5;
const CTA_PROTO_ICMP_CODE: u16 = 6;
const CTA_PROTO_ICMPV6_ID: u16 = 7;
const CTA_PROTO_ICMPV6_TYPE: u16 = 8;
const CTA_PROTO_ICMPV6_CODE: u16 = 9;

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const ICMP: u8 = 1;
const ICMPV6: u8 = 58;
const TCP: u8 = 6;
const UDP: u8 = 17;
const UDPLITE: u8 = 136;
const SCTP: u8 = 132;

const NEEDS: &str = "nf_conntrack_netlink";

/// (id, type, code) attributes of ICMP or ICMPv6 in `CTA_TUPLE_PROTO`.
fn icmp_attrs(proto: u8) -> (u16, u16, u16) {
    if proto == ICMPV6 {
        (
            CTA_PROTO_ICMPV6_ID,
            CTA_PROTO_ICMPV6_TYPE,
            CTA_PROTO_ICMPV6_CODE,
        )
    } else {
        (CTA_PROTO_ICMP_ID, CTA_PROTO_ICMP_TYPE, CTA_PROTO_ICMP_CODE)
    }
}

fn be16(v: Option<Vec<u8>>) -> Option<u16> {
    Some(u16::from_be_bytes(v?.get(..2)?.try_into().ok()?))
}

fn byte(v: Option<Vec<u8>>) -> Option<u8> {
    v?.first().copied()
}

fn address(v: Option<Vec<u8>>) -> Option<IpAddr> {
    let v = v?;
    if let Ok(b) = <[u8; 4]>::try_from(v.as_slice()) {
        return Some(IpAddr::V4(Ipv4Addr::from(b)));
    }
    let b = <[u8; 16]>::try_from(v.as_slice()).ok()?;
    Some(IpAddr::V6(Ipv6Addr::from(b)))
}

/// A `CTA_TUPLE_*` nest; None for a protocol we do not judge (GRE, DCCP...).
fn decode_tuple(buf: &[u8]) -> Option<Tuple> {
    let t = attr::parse(buf);
    let ip = attr::find(&t, CTA_TUPLE_IP)?;
    let ip = attr::parse(&ip);
    let (src, dst) = match (
        attr::find(&ip, CTA_IP_V4_SRC),
        attr::find(&ip, CTA_IP_V6_SRC),
    ) {
        (Some(s), _) => (s, attr::find(&ip, CTA_IP_V4_DST)),
        (None, Some(s)) => (s, attr::find(&ip, CTA_IP_V6_DST)),
        _ => return None,
    };
    let (src, dst) = (address(Some(src))?, address(dst)?);
    let p = attr::find(&t, CTA_TUPLE_PROTO)?;
    let p = attr::parse(&p);
    let proto = byte(attr::find(&p, CTA_PROTO_NUM))?;
    let l4 = match proto {
        TCP | UDP | UDPLITE | SCTP => L4::Ports {
            src: be16(attr::find(&p, CTA_PROTO_SRC_PORT))?,
            dst: be16(attr::find(&p, CTA_PROTO_DST_PORT))?,
        },
        ICMP | ICMPV6 => {
            let (id, kind, code) = icmp_attrs(proto);
            L4::Icmp {
                kind: byte(attr::find(&p, kind))?,
                code: byte(attr::find(&p, code))?,
                id: be16(attr::find(&p, id))?,
            }
        }
        _ => return None,
    };
    Some(Tuple {
        src,
        dst,
        proto,
        l4,
    })
}

/// One listed entry (an `IPCTNL_MSG_CT_NEW` message's attributes).
pub fn decode_entry(attrs: &[u8]) -> Option<CtEntry> {
    let a = attr::parse(attrs);
    Some(CtEntry {
        orig: decode_tuple(&attr::find(&a, CTA_TUPLE_ORIG)?)?,
        reply: decode_tuple(&attr::find(&a, CTA_TUPLE_REPLY)?)?,
        zone: be16(attr::find(&a, CTA_ZONE)).unwrap_or(0),
        id: attr::find(&a, CTA_ID).and_then(|v| attr::as_u32(&v)),
    })
}

fn encode_tuple(a: &mut Attrs, ty: u16, t: &Tuple) {
    a.nested(ty, |n| {
        n.nested(CTA_TUPLE_IP, |ip| match (t.src, t.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                ip.bytes(CTA_IP_V4_SRC, &s.octets())
                    .bytes(CTA_IP_V4_DST, &d.octets());
            }
            (s, d) => {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                    IpAddr::V6(a) => a.octets(),
                };
                ip.bytes(CTA_IP_V6_SRC, &v6(s)).bytes(CTA_IP_V6_DST, &v6(d));
            }
        });
        n.nested(CTA_TUPLE_PROTO, |p| {
            p.bytes(CTA_PROTO_NUM, &[t.proto]);
            match t.l4 {
                L4::Ports { src, dst } => {
                    p.bytes(CTA_PROTO_SRC_PORT, &src.to_be_bytes())
                        .bytes(CTA_PROTO_DST_PORT, &dst.to_be_bytes());
                }
                L4::Icmp { kind, code, id } => {
                    let (id_ty, kind_ty, code_ty) = icmp_attrs(t.proto);
                    p.bytes(id_ty, &id.to_be_bytes())
                        .bytes(kind_ty, &[kind])
                        .bytes(code_ty, &[code]);
                }
            }
        });
    });
}

fn family(e: &CtEntry) -> u8 {
    match e.orig.src {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    }
}

/// The attributes of the delete of `e`: its original tuple, zone and id.
pub fn delete_attrs(e: &CtEntry) -> Attrs {
    let mut a = Attrs::new();
    encode_tuple(&mut a, CTA_TUPLE_ORIG, &e.orig);
    if e.zone != 0 {
        a.bytes(CTA_ZONE, &e.zone.to_be_bytes());
    }
    if let Some(id) = e.id {
        a.u32(CTA_ID, id);
    }
    a
}

fn with_needs(e: NftError) -> NftError {
    match e {
        NftError::Os { op, source, .. } => NftError::Os {
            op,
            source,
            needs: NEEDS,
        },
        other => other,
    }
}

/// Every entry of the socket's namespace, both families, of the protocols [`L4`] covers.
pub fn list(nf: &mut NfSocket) -> Result<Vec<CtEntry>, NftError> {
    let mut out = Vec::new();
    for (family, what) in [
        (AF_INET, "list IPv4 conntrack entries"),
        (AF_INET6, "list IPv6 conntrack entries"),
    ] {
        let answers = nf
            .dump_of(NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_GET, family, what)
            .map_err(with_needs)?;
        out.extend(answers.iter().filter_map(|a| decode_entry(&a.attrs)));
    }
    Ok(out)
}

/// Deletes each of `entries`; one already gone (ENOENT: it ended, or its tuple now
/// belongs to a newer connection with another id) is skipped. The count deleted.
pub fn forget(nf: &mut NfSocket, entries: &[CtEntry]) -> Result<usize, NftError> {
    let mut deleted = 0;
    for e in entries {
        let what = format!(
            "delete conntrack entry proto {} {} -> {} ({})",
            e.orig.proto,
            e.orig.src,
            e.orig.dst,
            port_of(&e.orig)
        );
        let attrs = delete_attrs(e);
        match nf.acked(
            NFNL_SUBSYS_CTNETLINK,
            IPCTNL_MSG_CT_DELETE,
            family(e),
            &attrs,
            &what,
        ) {
            Ok(()) => deleted += 1,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(with_needs(e)),
        }
    }
    Ok(deleted)
}

fn port_of(t: &Tuple) -> String {
    match t.l4 {
        L4::Ports { src, dst } => format!("{src}->{dst}"),
        L4::Icmp { kind, code, id } => format!("type {kind} code {code} id {id}"),
    }
}

#[cfg(test)]
#[path = "ctnetlink_tests.rs"]
mod tests;
