//! Conntrack entries as the node's kernel lists them, for one question: which existing
//! connections a new program would not have let in ([`crate::eval::denied`]). Replies
//! pass `ct state established,related accept`, so a connection allowed before a change
//! that denies it goes on until its entry is deleted; deleting every entry instead would
//! lose the DNAT state of allowed Service connections.

use std::net::IpAddr;

use crate::eval::Packet;

/// What identifies a connection beyond its addresses and protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum L4 {
    /// TCP, UDP, SCTP (and UDP-Lite): source and destination port.
    Ports { src: u16, dst: u16 },
    /// ICMP or ICMPv6: the message's type, code and identifier.
    Icmp { kind: u8, code: u8, id: u16 },
}

/// One direction of a connection as conntrack keys it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// `IPPROTO_*`.
    pub proto: u8,
    pub l4: L4,
}

/// One conntrack entry: the original direction (what the first packet carried) and the
/// reply direction (what answers carry: after DNAT its source is the real destination,
/// after SNAT its destination the translated source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CtEntry {
    pub orig: Tuple,
    pub reply: Tuple,
    /// The conntrack zone (0 unless someone uses zones).
    pub zone: u16,
    /// The kernel's id of the entry (`CTA_ID`): a delete that names it spares a new
    /// connection that took the same tuple since the listing. None: by tuple alone.
    pub id: Option<u32>,
}

impl CtEntry {
    /// The connection's first packet as the forward hook saw it: the original source
    /// (SNAT happens after forward, in postrouting) and the destination after DNAT
    /// (prerouting, before forward), which is the reply's source. A Service connection is
    /// so judged against its backend pod.
    pub fn first_packet(&self) -> Packet {
        let port = match (self.orig.l4, self.reply.l4) {
            (_, L4::Ports { src, .. }) => src,
            (L4::Icmp { kind, .. }, _) => u16::from(kind),
            (L4::Ports { dst, .. }, L4::Icmp { .. }) => dst,
        };
        Packet {
            src: self.orig.src,
            dst: self.reply.src,
            proto: self.orig.proto,
            port,
        }
    }
}
