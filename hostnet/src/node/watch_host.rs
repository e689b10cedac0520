//! [`super::Watch`] on the real kernel: an rtnetlink socket in the route, link and
//! neighbour multicast groups and a netfilter socket in `NFNLGRP_NFTABLES`, read on one
//! thread that blocks in `poll` (no timer while nothing happens). A message is kept only if
//! it touches our objects and was not sent by the agent's own sockets (their port ids:
//! the kernel stamps a change's notification with its requester's). A burst (a firewall
//! reload is hundreds of messages) is reported once, when the sockets stay quiet.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{setsockopt, sockopt};
use rtnetlink::sys::{Socket, SocketAddr, protocols};

use super::firewall::TABLE;
use super::watch::{Drift, Notify};
use super::{ROUTE_PROTO, VXLAN_DEVICE};

/// iptables-nft's table and chain that hold our accepts (`firewall.rs`).
const IPTABLES_TABLE: &str = "filter";
const IPTABLES_FORWARD: &str = "FORWARD";

const RTNLGRP_LINK: u32 = 1;
const RTNLGRP_NEIGH: u32 = 3;
const RTNLGRP_IPV4_ROUTE: u32 = 7;
const RTNLGRP_IPV6_ROUTE: u32 = 11;
const NFNLGRP_NFTABLES: u32 = 7;

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_DELNEIGH: u16 = 29;
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

/// A burst ends after this long without a message of ours...
const QUIET: Duration = Duration::from_millis(20);
/// ...or at most this long after it began (a steady stream is still reported).
const MAX_LINGER: Duration = Duration::from_millis(200);
/// Room for a burst while the thread is descheduled (an overrun costs a full re-check).
const RCVBUF: usize = 4 << 20;

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

/// The sockets of a watch, made in the node's namespace.
pub(super) struct Sockets {
    route: Socket,
    nft: Option<Socket>,
}

fn group_socket(protocol: isize, groups: &[u32]) -> std::io::Result<Socket> {
    let mut sock = Socket::new(protocol)?;
    sock.bind(&SocketAddr::new(0, 0))?;
    for g in groups {
        sock.add_membership(*g)?;
    }
    if setsockopt(&sock, sockopt::RcvBufForce, &RCVBUF).is_err() {
        sock.set_rx_buf_sz(RCVBUF)?;
    }
    sock.set_non_blocking(true)?;
    Ok(sock)
}

impl Sockets {
    /// Both sockets in the calling thread's namespace; a kernel without nf_tables gets
    /// the route socket only (its error is returned beside it, to be told).
    pub fn open() -> std::io::Result<(Sockets, Option<std::io::Error>)> {
        let route = group_socket(
            protocols::NETLINK_ROUTE,
            &[
                RTNLGRP_LINK,
                RTNLGRP_NEIGH,
                RTNLGRP_IPV4_ROUTE,
                RTNLGRP_IPV6_ROUTE,
            ],
        )?;
        let (nft, err) = match group_socket(protocols::NETLINK_NETFILTER, &[NFNLGRP_NFTABLES]) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        };
        Ok((Sockets { route, nft }, err))
    }
}

/// Reads `sockets` until `stop` is readable (or closed), calling `notify` after each burst.
pub(super) fn run(sockets: Sockets, stop: UnixStream, mut filter: Filter, notify: Notify) {
    let mut buf = Vec::with_capacity(1 << 16);
    let mut pending = Drift::default();
    // A burst: when its first and its latest message of ours came.
    let mut burst: Option<(Instant, Instant)> = None;
    let due = |(first, last): (Instant, Instant)| (last + QUIET).min(first + MAX_LINGER);
    loop {
        let timeout = match burst {
            None => PollTimeout::NONE,
            Some(b) => {
                let left = due(b).saturating_duration_since(Instant::now());
                PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO)
            }
        };
        let mut fds = vec![
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            PollFd::new(sockets.route.as_fd(), PollFlags::POLLIN),
        ];
        if let Some(nft) = &sockets.nft {
            fds.push(PollFd::new(nft.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            // Cannot wait any more: everything once, and the end (the periodic re-check
            // stays).
            Err(_) => {
                notify(Drift::ALL);
                return;
            }
        }
        let readable = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        if readable(0) {
            let _ = (&stop).read(&mut [0u8; 1]);
            return;
        }
        let (route_ready, nft_ready) = (readable(1), readable(2));
        drop(fds);
        let mut found = Drift::default();
        if route_ready {
            found = found.union(drain(&sockets.route, &mut buf, |d| {
                route_drift(d, &mut filter)
            }));
        }
        if let (true, Some(nft)) = (nft_ready, &sockets.nft) {
            found = found.union(drain(nft, &mut buf, |d| nft_drift(d, &filter)));
        }
        let now = Instant::now();
        if !found.is_empty() {
            pending = pending.union(found);
            burst = Some(burst.map_or((now, now), |(first, _)| (first, now)));
        }
        if burst.is_some_and(|b| now >= due(b)) {
            burst = None;
            notify(std::mem::take(&mut pending));
        }
    }
}

/// Every datagram waiting on `sock`, each classified by `classify`; an overrun is
/// [`Drift::ALL`].
fn drain(sock: &Socket, buf: &mut Vec<u8>, classify: impl FnMut(&[u8]) -> Drift) -> Drift {
    drain_with(|b| sock.recv(b, nix::libc::MSG_TRUNC), buf, classify)
}

/// [`drain`] over `recv` (a datagram into the buffer: its full length, or an error).
fn drain_with(
    mut recv: impl FnMut(&mut Vec<u8>) -> std::io::Result<usize>,
    buf: &mut Vec<u8>,
    mut classify: impl FnMut(&[u8]) -> Drift,
) -> Drift {
    let mut found = Drift::default();
    loop {
        buf.clear();
        match recv(buf) {
            Ok(n) if n > buf.capacity() => {
                // Cut off: what it was cannot be told, so it may have been ours.
                found = found.union(classify(buf)).union(Drift::ALL);
            }
            Ok(_) => found = found.union(classify(buf)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return found,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // ENOBUFS: the kernel dropped notifications; the socket goes on after.
            Err(_) => found = Drift::ALL,
        }
    }
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

/// What a netfilter datagram says of our table or an iptables-nft `filter FORWARD` chain
/// (where our accepts are).
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
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTM_NEWNEIGH: u16 = 28;
    const OURS: u32 = 4242;

    fn msg(ty: u16, pid: u32, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&u32::try_from(16 + body.len()).unwrap().to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&1u32.to_ne_bytes());
        m.extend_from_slice(&pid.to_ne_bytes());
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&u16::try_from(4 + payload.len()).unwrap().to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(payload);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn route(ty: u16, pid: u32, proto: u8) -> Vec<u8> {
        msg(ty, pid, &[2, 24, 0, 0, 254, proto, 0, 1, 0, 0, 0, 0])
    }

    fn link(ty: u16, index: u32, flags: u32, name: &str) -> Vec<u8> {
        let mut body = vec![0, 0, 1, 0];
        body.extend_from_slice(&index.to_ne_bytes());
        body.extend_from_slice(&flags.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend(attr(IFLA_IFNAME, format!("{name}\0").as_bytes()));
        msg(ty, 0, &body)
    }

    /// A link that is a port of bridge 4 (a pod's veth on `cni0`).
    fn port(ty: u16, index: u32, flags: u32, name: &str) -> Vec<u8> {
        let mut m = link(ty, index, flags, name);
        m.extend(attr(IFLA_MASTER, &4u32.to_ne_bytes()));
        let len = u32::try_from(m.len()).unwrap();
        m[..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    fn neigh(ty: u16, pid: u32, index: u32) -> Vec<u8> {
        let mut body = vec![7, 0, 0, 0];
        body.extend_from_slice(&index.to_ne_bytes());
        body.extend_from_slice(&[0x80, 0, 0, 0]);
        msg(ty, pid, &body)
    }

    fn nft(kind: u16, pid: u32, family: u8, table: &str, chain: Option<&str>) -> Vec<u8> {
        let mut body = vec![family, 0, 0, 0];
        body.extend(attr(NFTA_TABLE, format!("{table}\0").as_bytes()));
        if let Some(c) = chain {
            let at = if kind == NFT_MSG_DELRULE || kind == NFT_MSG_NEWRULE {
                NFTA_RULE_CHAIN
            } else {
                NFTA_CHAIN_NAME
            };
            body.extend(attr(at, format!("{c}\0").as_bytes()));
        }
        msg((NFNL_SUBSYS_NFTABLES << 8) | kind, pid, &body)
    }

    const ROUTES: Drift = Drift {
        routes: true,
        overlay: true,
        firewall: false,
        lost: false,
    };
    const OVERLAY: Drift = Drift {
        routes: false,
        overlay: true,
        firewall: false,
        lost: false,
    };
    const FIREWALL: Drift = Drift {
        routes: false,
        overlay: false,
        firewall: true,
        lost: false,
    };

    fn filter() -> Filter {
        Filter {
            route_pid: Some(OURS),
            nft_pid: Some(OURS),
            vxlan_index: None,
            up: BTreeSet::from([2]),
            downed: BTreeSet::new(),
        }
    }

    #[test]
    fn only_someone_elses_changes_to_our_routes_count() {
        let mut f = filter();
        let none = Drift::default();
        assert_eq!(
            route_drift(&route(RTM_DELROUTE, 99, ROUTE_PROTO), &mut f),
            ROUTES
        );
        assert_eq!(
            route_drift(&route(RTM_NEWROUTE, 0, ROUTE_PROTO), &mut f),
            ROUTES
        );
        // Our own (the kernel's echo) and someone else's routes of another protocol.
        assert_eq!(
            route_drift(&route(RTM_DELROUTE, OURS, ROUTE_PROTO), &mut f),
            none
        );
        assert_eq!(route_drift(&route(RTM_DELROUTE, 99, 4), &mut f), none);
        // Several messages in one datagram.
        let mut two = route(RTM_DELROUTE, 99, 4);
        two.extend(route(RTM_DELROUTE, 99, ROUTE_PROTO));
        assert_eq!(route_drift(&two, &mut f), ROUTES);
        // Garbage is no message.
        assert_eq!(route_drift(&[1, 2, 3], &mut f), none);
    }

    #[test]
    fn our_device_is_followed_by_name_and_its_entries_by_index() {
        let mut f = filter();
        let none = Drift::default();
        // Made (down first, then up): its index is learnt.
        assert_eq!(
            route_drift(&link(RTM_NEWLINK, 9, 0, VXLAN_DEVICE), &mut f),
            OVERLAY
        );
        assert_eq!(
            route_drift(&link(RTM_NEWLINK, 9, IFF_UP, VXLAN_DEVICE), &mut f),
            none
        );
        assert_eq!(f.vxlan_index, Some(9));
        // Other links, a pod's veth coming and going, do not count.
        assert_eq!(route_drift(&link(RTM_NEWLINK, 5, 0, "veth1"), &mut f), none);
        assert_eq!(route_drift(&link(RTM_DELLINK, 5, 0, "veth1"), &mut f), none);
        // Its entries deleted by someone else; not ours, not added, not other links'.
        assert_eq!(route_drift(&neigh(RTM_DELNEIGH, 99, 9), &mut f), OVERLAY);
        assert_eq!(route_drift(&neigh(RTM_DELNEIGH, OURS, 9), &mut f), none);
        assert_eq!(route_drift(&neigh(RTM_NEWNEIGH, 99, 9), &mut f), none);
        assert_eq!(route_drift(&neigh(RTM_DELNEIGH, 99, 5), &mut f), none);
        // Renamed away, then deleted: told, and forgotten.
        assert_eq!(
            route_drift(&link(RTM_NEWLINK, 9, IFF_UP, "other"), &mut f),
            OVERLAY
        );
        assert_eq!(f.vxlan_index, None);
        assert_eq!(route_drift(&neigh(RTM_DELNEIGH, 99, 9), &mut f), none);
        route_drift(&link(RTM_NEWLINK, 11, IFF_UP, VXLAN_DEVICE), &mut f);
        assert_eq!(
            route_drift(&link(RTM_DELLINK, 11, IFF_UP, VXLAN_DEVICE), &mut f),
            OVERLAY
        );
        assert_eq!(f.vxlan_index, None);
    }

    #[test]
    fn a_link_set_down_may_have_taken_our_routes_with_it() {
        let mut f = filter();
        let none = Drift::default();
        // The uplink (up when the watch began) changes but stays up: nothing.
        assert_eq!(
            route_drift(&link(RTM_NEWLINK, 2, IFF_UP, "eth0"), &mut f),
            none
        );
        // Set down: its IPv4 routes went without a word from the kernel.
        assert_eq!(
            route_drift(&link(RTM_NEWLINK, 2, 0, "eth0"), &mut f),
            ROUTES
        );
        assert_eq!(route_drift(&link(RTM_NEWLINK, 2, 0, "eth0"), &mut f), none);
        // Up again: now ours can be added back.
        assert_eq!(
            route_drift(&link(RTM_NEWLINK, 2, IFF_UP, "eth0"), &mut f),
            ROUTES
        );
        assert_eq!(
            route_drift(&link(RTM_NEWLINK, 2, IFF_UP, "eth0"), &mut f),
            none
        );
        // A pod's veth: made down, set up, made a port, deleted (down first). Nothing.
        for m in [
            link(RTM_NEWLINK, 30, 0, "veth30"),
            link(RTM_NEWLINK, 30, IFF_UP, "veth30"),
            port(RTM_NEWLINK, 30, IFF_UP, "veth30"),
            port(RTM_NEWLINK, 30, 0, "veth30"),
            link(RTM_DELLINK, 30, 0, "veth30"),
        ] {
            assert_eq!(route_drift(&m, &mut f), none);
        }
        // A link of the node's network deleted (set down first): ours through it went.
        route_drift(&link(RTM_NEWLINK, 40, IFF_UP, "eth1"), &mut f);
        assert_eq!(
            route_drift(&link(RTM_NEWLINK, 40, 0, "eth1"), &mut f),
            ROUTES
        );
        assert_eq!(route_drift(&link(RTM_DELLINK, 40, 0, "eth1"), &mut f), none);
        assert!(f.downed.is_empty() && !f.up.contains(&40));
    }

    #[test]
    fn our_table_and_iptables_forward_count_and_nothing_else() {
        let f = filter();
        let none = Drift::default();
        let inet = NFPROTO_INET;
        assert_eq!(nft_drift(&nft(2, 99, inet, TABLE, None), &f), FIREWALL);
        assert_eq!(
            nft_drift(
                &nft(NFT_MSG_DELRULE, 99, inet, TABLE, Some("postrouting")),
                &f
            ),
            FIREWALL
        );
        // Our own batch's echo, and the generation message every batch ends with.
        assert_eq!(nft_drift(&nft(2, OURS, inet, TABLE, None), &f), none);
        assert_eq!(
            nft_drift(&nft(NFT_MSG_NEWGEN, 99, inet, TABLE, None), &f),
            none
        );
        // Someone else's table, or a table of that name in another family.
        assert_eq!(nft_drift(&nft(2, 99, inet, "firewalld", None), &f), none);
        assert_eq!(nft_drift(&nft(2, 99, NFPROTO_IPV4, TABLE, None), &f), none);
        // iptables-nft's FORWARD (flushed, its chain or table gone), not its other chains.
        for family in [NFPROTO_IPV4, NFPROTO_IPV6] {
            let rule = nft(NFT_MSG_DELRULE, 99, family, "filter", Some("FORWARD"));
            assert_eq!(nft_drift(&rule, &f), FIREWALL);
            let chain = nft(NFT_MSG_DELCHAIN, 99, family, "filter", Some("FORWARD"));
            assert_eq!(nft_drift(&chain, &f), FIREWALL);
            assert_eq!(nft_drift(&nft(2, 99, family, "filter", None), &f), FIREWALL);
            let kube = nft(NFT_MSG_NEWRULE, 99, family, "filter", Some("KUBE-SERVICES"));
            assert_eq!(nft_drift(&kube, &f), none);
            let nat = nft(NFT_MSG_DELRULE, 99, family, "nat", Some("FORWARD"));
            assert_eq!(nft_drift(&nat, &f), none);
        }
    }

    #[test]
    fn an_overrun_or_a_cut_off_datagram_is_everything() {
        let mut answers = vec![
            Err(std::io::Error::from_raw_os_error(nix::libc::ENOBUFS)),
            Ok(route(RTM_DELROUTE, 99, 4)),
        ];
        let mut buf = Vec::with_capacity(64);
        let recv = |b: &mut Vec<u8>| match answers.pop() {
            None => Err(std::io::ErrorKind::WouldBlock.into()),
            Some(Ok(m)) => {
                b.extend_from_slice(&m);
                Ok(m.len())
            }
            Some(Err(e)) => Err(e),
        };
        let mut f = filter();
        assert_eq!(
            drain_with(recv, &mut buf, |d| route_drift(d, &mut f)),
            Drift::ALL
        );
        let mut buf = Vec::with_capacity(8);
        let mut once = Some(());
        let cut = |_: &mut Vec<u8>| match once.take() {
            Some(()) => Ok(100),
            None => Err(std::io::ErrorKind::WouldBlock.into()),
        };
        assert_eq!(drain_with(cut, &mut buf, |_| Drift::default()), Drift::ALL);
    }
}
