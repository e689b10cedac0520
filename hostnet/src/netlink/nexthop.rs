//! Nexthop objects (`ip nexthop`, Linux 5.3+): one gateway on one device that routes refer
//! to by id (`RTA_NH_ID`). The kernel adds a route via a nexthop object without comparing
//! its gateway with every other next hop of the device, which a plain `via GW` route costs.
//!
//! netlink-packet-route has no nexthop messages, so they are built and read here as bytes
//! (`struct nhmsg` and its `NHA_*` attributes), on the connection's own socket.

use std::net::IpAddr;

use rtnetlink::packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST};
use rtnetlink::sys::{AsyncSocket, AsyncSocketExt, SocketAddr};

use super::{Netlink, NetlinkError, runtime};

const RTM_NEWNEXTHOP: u16 = 104;
const RTM_DELNEXTHOP: u16 = 105;
const RTM_GETNEXTHOP: u16 = 106;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NHA_ID: u16 = 1;
const NHA_OIF: u16 = 5;
const NHA_GATEWAY: u16 = 6;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// `struct nhmsg`: family, scope, protocol, reserved, flags (u32).
const NHMSG_LEN: usize = 8;
const NLMSG_HDR: usize = 16;

/// A gateway nexthop object as the kernel reports it (groups and blackholes are left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHop {
    pub id: u32,
    pub gateway: IpAddr,
    pub oif: u32,
    /// `RTPROT_*` of whoever made it.
    pub protocol: u8,
}

fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// One request: the netlink header (its length filled in), `nhmsg`, then `attrs`.
pub(super) fn message(kind: u16, flags: u16, family: u8, protocol: u8, attrs: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(NLMSG_HDR + NHMSG_LEN + attrs.len());
    let len = (NLMSG_HDR + NHMSG_LEN + attrs.len()) as u32;
    buf.extend_from_slice(&len.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    buf.extend_from_slice(&[0; 8]); // sequence and port: set when sent
    buf.extend_from_slice(&[family, 0, protocol, 0, 0, 0, 0, 0]);
    buf.extend_from_slice(attrs);
    buf
}

fn new_message(nh: &NextHop) -> Vec<u8> {
    let mut attrs = Vec::new();
    attr(&mut attrs, NHA_ID, &nh.id.to_ne_bytes());
    attr(&mut attrs, NHA_OIF, &nh.oif.to_ne_bytes());
    let family = match nh.gateway {
        IpAddr::V4(v4) => {
            attr(&mut attrs, NHA_GATEWAY, &v4.octets());
            AF_INET
        }
        IpAddr::V6(v6) => {
            attr(&mut attrs, NHA_GATEWAY, &v6.octets());
            AF_INET6
        }
    };
    message(
        RTM_NEWNEXTHOP,
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        family,
        nh.protocol,
        &attrs,
    )
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// A gateway nexthop from an `RTM_NEWNEXTHOP` body (`nhmsg` and attributes).
fn parse(body: &[u8]) -> Option<NextHop> {
    let protocol = *body.get(2)?;
    let (mut id, mut oif, mut gateway) = (None, None, None);
    let mut at = NHMSG_LEN;
    while let Some(len) = u16_at(body, at).map(usize::from) {
        if len < 4 {
            break;
        }
        let kind = u16_at(body, at + 2)? & 0x3fff;
        let payload = body.get(at + 4..at + len)?;
        match kind {
            NHA_ID => id = u32_at(payload, 0),
            NHA_OIF => oif = u32_at(payload, 0),
            NHA_GATEWAY => {
                gateway = match payload.len() {
                    4 => Some(IpAddr::from(<[u8; 4]>::try_from(payload).ok()?)),
                    16 => Some(IpAddr::from(<[u8; 16]>::try_from(payload).ok()?)),
                    _ => None,
                }
            }
            _ => {}
        }
        at += len.next_multiple_of(4);
    }
    Some(NextHop {
        id: id?,
        gateway: gateway?,
        oif: oif?,
        protocol,
    })
}

impl Netlink {
    /// Every gateway nexthop object (`ip nexthop show`). A kernel without nexthop
    /// objects answers EINVAL or EOPNOTSUPP.
    pub fn nexthops(&self) -> Result<Vec<NextHop>, NetlinkError> {
        const OP: &str = "list nexthops";
        for _ in 0..super::DUMP_ATTEMPTS {
            match self.dump_nexthops() {
                Ok(Some(list)) => return Ok(list),
                Ok(None) => continue,
                Err(e) => return Err(NetlinkError::os(OP, e)),
            }
        }
        Err(NetlinkError::os(OP, nix::libc::EINTR))
    }

    /// One dump; None if the kernel marked it inconsistent. Err: an errno.
    fn dump_nexthops(&self) -> Result<Option<Vec<NextHop>>, i32> {
        let rt = runtime().map_err(|e| e.errno().unwrap_or(nix::libc::EIO))?;
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let sock = conn.as_mut().get_mut().socket_mut();
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut req = message(RTM_GETNEXTHOP, NLM_F_DUMP, 0, 0, &[]);
        req[8..12].copy_from_slice(&seq.to_ne_bytes());
        let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(nix::libc::EIO);
        sock.socket_ref()
            .send_to(&req, &SocketAddr::new(0, 0), 0)
            .map_err(errno)?;
        let mut out = Vec::new();
        let mut interrupted = false;
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        loop {
            buf.clear();
            rt.block_on(sock.recv(&mut buf)).map_err(errno)?;
            let mut data = &buf[..];
            while let (Some(len), Some(kind), Some(flags), Some(s)) = (
                u32_at(data, 0),
                u16_at(data, 4),
                u16_at(data, 6),
                u32_at(data, 8),
            ) {
                let len = len as usize;
                let Some(body) = data.get(NLMSG_HDR..len) else {
                    return Err(nix::libc::EIO);
                };
                data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
                if s != seq {
                    continue;
                }
                interrupted |= flags & NLM_F_DUMP_INTR != 0;
                match kind {
                    NLMSG_DONE => return Ok((!interrupted).then_some(out)),
                    NLMSG_ERROR => {
                        let code = u32_at(body, 0).map_or(-nix::libc::EIO, |c| c as i32);
                        return Err(-code);
                    }
                    RTM_NEWNEXTHOP => out.extend(parse(body)),
                    _ => {}
                }
            }
        }
    }

    /// Adds each of `hops` (`NLM_F_EXCL`: EEXIST if its id is taken), pipelined; the
    /// results in order. ENOBUFS: the answer was lost, the nexthop may be in place.
    pub fn add_nexthops(&self, hops: &[NextHop]) -> Vec<Result<(), NetlinkError>> {
        let op = |i: usize| {
            format!(
                "add nexthop id {} via {} dev {}",
                hops[i].id, hops[i].gateway, hops[i].oif
            )
        };
        self.request_many_raw(&op, hops.iter().map(new_message).collect())
    }

    /// Deletes nexthop `id` (ESRCH if there is none); the kernel deletes every route
    /// using it.
    pub fn del_nexthop(&self, id: u32) -> Result<(), NetlinkError> {
        let mut attrs = Vec::new();
        attr(&mut attrs, NHA_ID, &id.to_ne_bytes());
        let msg = message(RTM_DELNEXTHOP, NLM_F_ACK, 0, 0, &attrs);
        self.request_many_raw(&|_| format!("delete nexthop id {id}"), vec![msg])
            .pop()
            .unwrap_or_else(|| Err(NetlinkError::os("delete nexthop", nix::libc::EIO)))
    }
}
