//! The desired state of one node's nftables table, as data: named sets (with their
//! elements), chains (with their rules). Each type here is one nftables construct, so the
//! kernel session encodes it 1:1 (see the crate docs for the nft rendering), and `diff`
//! turns two programs into set-element and chain changes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::addr::{Family, Range};
use crate::members::Source;
use crate::validate::PolicyError;

/// Our own table: `table inet cni-rs-netpol`.
pub const TABLE: &str = "cni-rs-netpol";
/// The base chains, both on the forward hook: egress first (priority filter - 1), then
/// ingress (priority filter). An `accept` ends only its own base chain, so an egress
/// allow still meets the ingress check; a drop in either is final.
pub const EGRESS_CHAIN: &str = "egress";
pub const INGRESS_CHAIN: &str = "ingress";
/// `IPPROTO_ICMPV6`.
pub const ICMPV6: u8 = 58;
/// The ICMPv6 types of neighbour discovery every base chain accepts: router solicitation
/// (133), router advertisement (134), neighbour solicitation (135) and advertisement (136).
pub const ND_TYPES: std::ops::RangeInclusive<u8> = 133..=136;

/// The verdict map of local pods isolated for a direction: pod address -> selection chain.
pub fn dispatch_map(dir_egress: bool, family: Family) -> String {
    let d = if dir_egress { "egress" } else { "ingress" };
    format!("{d}-pods{}", family.suffix())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hook {
    /// `type filter hook forward priority filter - 1; policy accept`.
    ForwardEgress,
    /// `type filter hook forward priority filter; policy accept`.
    ForwardIngress,
}

/// A set's key type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetKind {
    /// `type ipv4_addr` / `ipv6_addr` (a hash set): selected pods' addresses, one
    /// element per pod, so a pod event is one element added or removed.
    Addrs(Family),
    /// `type ipv4_addr; flags interval`: ipBlocks minus their excepts (policy only).
    Ranges(Family),
    /// `type inet_proto . inet_service; flags interval`: numeric ports.
    ProtoPorts,
    /// `type ipv4_addr . inet_proto . inet_service`: named ports resolved per pod.
    AddrProtoPorts(Family),
    /// `type ipv4_addr : verdict`: local pod -> its selection chain.
    Dispatch(Family),
    /// `type inet_proto . inet_service : verdict; flags interval`: a selection chain's
    /// port ranges -> the policies whose ports admit them.
    PortDispatch,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Elem {
    Addr(IpAddr),
    Range(Range),
    /// Protocol number and an inclusive port range.
    ProtoPorts(u8, u16, u16),
    AddrProtoPort(IpAddr, u8, u16),
    /// `addr : jump chain`.
    Jump(IpAddr, String),
    /// `proto . first-last : jump chain`.
    PortJump(u8, u16, u16, String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub kind: SetKind,
    pub elems: BTreeSet<Elem>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// `ip saddr` / `ip6 saddr` (the set's family picks which).
    Saddr,
    Daddr,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Match {
    /// `ct state established,related`.
    Established,
    /// `icmpv6 type 133-136`: router and neighbour solicitation and advertisement
    /// (`nd-router-solicit`, `nd-router-advert`, `nd-neighbor-solicit`, `nd-neighbor-advert`).
    NeighbourDiscovery,
    /// `ip saddr @set` / `ip daddr @set` (family from the set).
    AddrIn(Field, String),
    /// `meta l4proto . th dport @set`.
    ProtoPortIn(String),
    /// `ip daddr . meta l4proto . th dport @set`.
    DaddrProtoPortIn(String),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    Accept,
    Drop,
    Jump(String),
    /// `ip saddr vmap @map` / `ip daddr vmap @map`: no element, no verdict (next rule).
    Map(Field, String),
    /// `meta l4proto . th dport vmap @map` (a `PortDispatch` map).
    PortMap(String),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    pub matches: Vec<Match>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chain {
    pub hook: Option<Hook>,
    pub rules: Vec<Rule>,
}

/// One node's table. Names are derived from object identity (a policy's namespace/name,
/// a rule's index), never from order, so an unrelated change renames nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Program {
    pub sets: BTreeMap<String, Set>,
    pub chains: BTreeMap<String, Chain>,
    /// The node's own addresses. Traffic to or from them takes the input or output hook,
    /// not forward, so it never meets these chains (a pod and its own node always talk).
    pub local: BTreeSet<IpAddr>,
    /// Policies refused (enforced as deny-all stand-ins): for the log line and metric.
    pub refused: Vec<PolicyError>,
    /// The sets whose elements follow remote pods, and where they come from (not kernel
    /// state: what `update::pod_event` recomputes).
    pub sources: BTreeMap<String, Source>,
}

/// A short stable name for an identity: 64-bit FNV-1a, hex. Kernel object names are
/// bounded; namespace/name pairs are not.
pub fn short_id(identity: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in identity.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
