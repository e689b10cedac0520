//! What a notification says of our objects: the netlink messages of the route and
//! netfilter multicast groups, parsed only as far as needed to tell whether they touch a
//! route of ours (protocol [`ROUTE_PROTO`]), our device, its entries, a link our routes may
//! use, our table or iptables-nft's `filter FORWARD`, and whether the agent sent them.

use std::collections::BTreeSet;

use super::firewall::TABLE;
use super::watch::Drift;
use super::{ROUTE_PROTO, VXLAN_DEVICE};

/// iptables-nft's table and chain that hold our accepts (`firewall.rs`).
const IPTABLES_TABLE: &str = "filter";
const IPTABLES_FORWARD: &str = "FORWARD";

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_DELNEIGH: u16 = 29;
const RTM_DELNEXTHOP: u16 = 105;
const IFLA_IFNAME: u16 = 3;
const IFLA_MASTER: u16 = 10;
const IFF_UP: u32 = 1;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWGEN: u16 = 15;
const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;
/// The table's name is attribute 1 of every nf_tables object message (table, chain, rule,
/// set, element list, object, flowtable).
const NFTA_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_CHAIN_NAME: u16 = 3;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_DELCHAIN: u16 = 5;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_DELRULE: u16 = 8;
const NFT_MSG_DESTROYCHAIN: u16 = 27;
const NFT_MSG_DESTROYRULE: u16 = 28;

/// The agent's own sockets' port ids, our device's index and the links that are up, which
/// decide what is ours.
#[derive(Debug, Default, Clone)]
pub(super) struct Filter {
    pub route_pid: Option<u32>,
    pub nft_pid: Option<u32>,
    pub vxlan_index: Option<u32>,
    /// Links administratively up that are no port of a bridge (or bond): one set down, or
    /// deleted (which sets it down first), loses its IPv4 routes, ours too, and the kernel
    /// tells no route deletion for them. (A pod's veth, a bridge port, carries no route.)
    pub up: BTreeSet<u32>,
    /// Links set down while watched: up again, ours can be added back.
    pub downed: BTreeSet<u32>,
}

/// The netlink messages of a datagram: (type, sender port id, body).
fn messages(datagram: &[u8]) -> impl Iterator<Item = (u16, u32, &[u8])> {
    let mut rest = datagram;
    std::iter::from_fn(move || {
        if rest.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        if len < 16 || len > rest.len() {
            return None;
        }
        let ty = u16::from_ne_bytes([rest[4], rest[5]]);
        let pid = u32::from_ne_bytes(rest[12..16].try_into().ok()?);
        let body = &rest[16..len];
        rest = &rest[((len + 3) & !3).min(rest.len())..];
        Some((ty, pid, body))
    })
}

/// The attributes after a fixed header of `fixed` bytes: (type, payload).
fn attrs(body: &[u8], fixed: usize) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = body.get(fixed..).unwrap_or_default();
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        // The nested and byte-order flags are not part of the type.
        let ty = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        let payload = &rest[4..len];
        rest = &rest[((len + 3) & !3).min(rest.len())..];
        Some((ty, payload))
    })
}

/// A string attribute without its trailing NULs.
fn name(payload: &[u8]) -> &[u8] {
    let end = payload
        .iter()
        .position(|b| *b == 0)
        .unwrap_or(payload.len());
    &payload[..end]
}

fn u32_at(body: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(body.get(at..at + 4)?.try_into().ok()?))
}

/// What an rtnetlink datagram says of our objects; learns our device's index on the way.
pub(super) fn route_drift(datagram: &[u8], filter: &mut Filter) -> Drift {
    let mut d = Drift::default();
    for (ty, pid, body) in messages(datagram) {
        match ty {
            // rtmsg: family, dst_len, src_len, tos, table, protocol, ...
            RTM_NEWROUTE | RTM_DELROUTE
                if Some(pid) != filter.route_pid && body.get(5) == Some(&ROUTE_PROTO) =>
            {
                d.routes = true;
                d.overlay = true;
            }
            // nhmsg: family, scope, protocol, ... A nexthop of ours deleted by someone else,
            // or by the kernel with its device: its routes went with it, untold.
            RTM_DELNEXTHOP
                if Some(pid) != filter.route_pid && body.get(2) == Some(&ROUTE_PROTO) =>
            {
                d.routes = true;
            }
            // ifinfomsg: family, pad, type (u16), index, flags, change.
            RTM_NEWLINK | RTM_DELLINK => {
                let (Some(index), Some(flags)) = (u32_at(body, 4), u32_at(body, 8)) else {
                    continue;
                };
                let ours = attrs(body, 16)
                    .any(|(t, p)| t == IFLA_IFNAME && name(p) == VXLAN_DEVICE.as_bytes());
                let port = attrs(body, 16).any(|(t, _)| t == IFLA_MASTER);
                let was_ours = filter.vxlan_index == Some(index);
                if link_changed(filter, ty, index, flags, port) {
                    d.routes = true;
                    d.overlay = true;
                }
                if ours && ty == RTM_NEWLINK {
                    filter.vxlan_index = Some(index);
                } else if was_ours {
                    // Deleted, or renamed away.
                    filter.vxlan_index = None;
                }
                let down = ty == RTM_DELLINK || flags & IFF_UP == 0;
                if (ours || was_ours) && (down || !ours) {
                    d.overlay = true;
                }
            }
            // ndmsg: family, pads, ifindex, state, flags, type. An FDB entry (family
            // AF_BRIDGE) or a neighbour entry of our device went.
            RTM_DELNEIGH
                if Some(pid) != filter.route_pid
                    && filter.vxlan_index.is_some()
                    && u32_at(body, 4) == filter.vxlan_index =>
            {
                d.overlay = true;
            }
            _ => {}
        }
    }
    d
}

/// Follows a link's state; true when it was set down (deleting it does that first) or up
/// again after: its IPv4 routes went with it, and can be added back. A port of a bridge
/// is not followed.
fn link_changed(filter: &mut Filter, ty: u16, index: u32, flags: u32, port: bool) -> bool {
    if port || ty == RTM_DELLINK {
        filter.up.remove(&index);
        filter.downed.remove(&index);
        return false;
    }
    if flags & IFF_UP == 0 {
        let downed = filter.up.remove(&index);
        if downed {
            filter.downed.insert(index);
        }
        downed
    } else {
        filter.up.insert(index);
        filter.downed.remove(&index)
    }
}

/// What a netfilter datagram says of our tables (the node's, NetworkPolicy's) or an
/// iptables-nft `filter FORWARD` chain (where our accepts are).
pub(super) fn nft_drift(datagram: &[u8], filter: &Filter) -> Drift {
    let mut d = Drift::default();
    for (ty, pid, body) in messages(datagram) {
        let (subsys, msg) = (ty >> 8, ty & 0xff);
        if subsys != NFNL_SUBSYS_NFTABLES || msg == NFT_MSG_NEWGEN {
            continue;
        }
        if Some(pid) == filter.nft_pid {
            continue;
        }
        // nfgenmsg: family, version, res_id.
        let Some(&family) = body.first() else {
            continue;
        };
        let mut table: &[u8] = &[];
        let mut chain: &[u8] = &[];
        for (t, p) in attrs(body, 4) {
            match (msg, t) {
                (_, NFTA_TABLE) => table = name(p),
                (NFT_MSG_NEWRULE | NFT_MSG_DELRULE | NFT_MSG_DESTROYRULE, NFTA_RULE_CHAIN)
                | (NFT_MSG_NEWCHAIN | NFT_MSG_DELCHAIN | NFT_MSG_DESTROYCHAIN, NFTA_CHAIN_NAME) => {
                    chain = name(p)
                }
                _ => {}
            }
        }
        let ours = family == NFPROTO_INET && table == TABLE.as_bytes();
        // The table itself (deleted, flushed) or its FORWARD chain, or a rule in that chain.
        let forward = matches!(family, NFPROTO_IPV4 | NFPROTO_IPV6)
            && table == IPTABLES_TABLE.as_bytes()
            && (chain.is_empty() || chain == IPTABLES_FORWARD.as_bytes());
        if ours || forward {
            d.firewall = true;
        }
        if family == NFPROTO_INET && table == netpol::program::TABLE.as_bytes() {
            d.policy = true;
        }
    }
    d
}

#[cfg(test)]
#[path = "watch_filter_tests.rs"]
mod tests;
