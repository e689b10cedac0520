//! [`super::Watch`] on the real kernel: an rtnetlink socket in the route, link and
//! neighbour multicast groups and a netfilter socket in `NFNLGRP_NFTABLES`, read on one
//! thread that blocks in `poll` (no timer while nothing happens). A message is kept only if
//! it touches our objects and was not sent by the agent's own sockets (their port ids:
//! the kernel stamps a change's notification with its requester's). A burst (a firewall
//! reload is hundreds of messages) is reported once, when the sockets stay quiet.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{setsockopt, sockopt};
use rtnetlink::sys::{Socket, SocketAddr, protocols};

use super::watch::{Drift, Notify};
use super::watch_filter::{Filter, nft_drift, route_drift};

const RTNLGRP_LINK: u32 = 1;
const RTNLGRP_NEIGH: u32 = 3;
const RTNLGRP_IPV4_ROUTE: u32 = 7;
const RTNLGRP_IPV6_ROUTE: u32 = 11;
/// Deleting a nexthop deletes its routes without a route notification.
const RTNLGRP_NEXTHOP: u32 = 32;
const NFNLGRP_NFTABLES: u32 = 7;

/// A burst ends after this long without a message of ours...
const QUIET: Duration = Duration::from_millis(20);
/// ...or at most this long after it began (a steady stream is still reported).
const MAX_LINGER: Duration = Duration::from_millis(200);
/// Room for a burst while the thread is descheduled (an overrun costs a full re-check).
const RCVBUF: usize = 4 << 20;

/// The sockets of a watch, made in the node's namespace.
pub(super) struct Sockets {
    route: Socket,
    nft: Option<Arc<Socket>>,
    /// A byte here: the nf_tables group was left for a while (`Quiet`), anything of
    /// ours there may have changed unseen.
    poked: UnixStream,
    poke: Option<UnixStream>,
}

/// The kernel builds one notification per set element of every nf_tables transaction
/// while anyone on the machine listens to the group (the listener bitmap is global, not
/// per namespace): with this watch listening, a NetworkPolicy table of 108,000 elements
/// took 1.1 s instead of 0.2 s. Around a large batch of ours the watch leaves the group;
/// after it, it rejoins and reports our tables as changed (a foreign change meanwhile
/// is then repaired by the comparison), unless the caller knows nothing was missed.
#[derive(Debug)]
pub(super) struct Quiet {
    nft: Weak<Socket>,
    poke: UnixStream,
}

impl Quiet {
    /// Leaves the group; the watch rejoins when the returned guard drops. None: the
    /// watch has ended, or the kernel refused.
    pub fn hold(&self) -> Option<QuietGuard> {
        let nft = self.nft.upgrade()?;
        let poke = self.poke.try_clone().ok()?;
        nft.drop_membership(NFNLGRP_NFTABLES).ok()?;
        Some(QuietGuard {
            nft,
            poke,
            joined: false,
            missed: true,
        })
    }
}

pub(super) struct QuietGuard {
    nft: Arc<Socket>,
    poke: UnixStream,
    joined: bool,
    missed: bool,
}

impl QuietGuard {
    /// Back in the group: what changes from here on is told again.
    pub fn rejoin(&mut self) {
        if !self.joined {
            self.joined = self.nft.add_membership(NFNLGRP_NFTABLES).is_ok();
        }
    }

    /// Nothing changed unseen while out of the group (the caller knows how): no
    /// comparison of our tables is asked for. Only once back in it.
    pub fn nothing_missed(mut self) {
        self.missed = !self.joined;
    }
}

impl Drop for QuietGuard {
    fn drop(&mut self) {
        self.rejoin();
        if self.missed {
            let _ = std::io::Write::write(&mut &self.poke, &[1]);
        }
    }
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
    /// Drops, in the kernel, the netfilter notifications of changes made through the
    /// socket with port id `pid` (ours: the filter would skip them anyway). A
    /// transaction's notifications are one per set element (220,000 for a large
    /// NetworkPolicy table); queued to this socket they made the transaction ~2.5 times
    /// slower and this thread read every one. A notification's `nlmsg_pid` is its
    /// requester's (an skb of coalesced notifications holds one commit's).
    pub fn ignore_nft_from(&self, pid: u32) -> std::io::Result<()> {
        use socket2::{SockFilter, SockRef};
        let Some(nft) = &self.nft else {
            return Ok(());
        };
        // ld [12] (nlmsg_pid, loaded big-endian); jeq pid ? drop : keep.
        let prog = [
            SockFilter::new(0x20, 0, 0, 12),
            SockFilter::new(0x15, 0, 1, u32::from_be_bytes(pid.to_ne_bytes())),
            SockFilter::new(0x06, 0, 0, 0),
            SockFilter::new(0x06, 0, 0, u32::MAX),
        ];
        SockRef::from(nft).attach_filter(&prog)
    }

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
        // Not there before Linux 5.3, nor are nexthop objects (our routes are plain then).
        let _ = route.add_membership(RTNLGRP_NEXTHOP);
        let (nft, err) = match group_socket(protocols::NETLINK_NETFILTER, &[NFNLGRP_NFTABLES]) {
            Ok(s) => (Some(Arc::new(s)), None),
            Err(e) => (None, Some(e)),
        };
        let (poke, poked) = UnixStream::pair()?;
        poked.set_nonblocking(true)?;
        let poke = Some(poke);
        Ok((
            Sockets {
                route,
                nft,
                poked,
                poke,
            },
            err,
        ))
    }

    /// The handle for leaving the nf_tables group around a large batch (None: no
    /// nf_tables here, or already taken).
    pub fn quiet(&mut self) -> Option<Quiet> {
        let nft = Arc::downgrade(self.nft.as_ref()?);
        Some(Quiet {
            nft,
            poke: self.poke.take()?,
        })
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
            PollFd::new(sockets.poked.as_fd(), PollFlags::POLLIN),
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
        let (route_ready, poked, nft_ready) = (readable(1), readable(2), readable(3));
        drop(fds);
        let mut found = Drift::default();
        if poked {
            while (&sockets.poked).read(&mut [0u8; 64]).is_ok_and(|n| n > 0) {}
            found.firewall = true;
            found.policy = true;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overrun_or_a_cut_off_datagram_is_everything() {
        let mut answers = vec![
            Err(std::io::Error::from_raw_os_error(nix::libc::ENOBUFS)),
            Ok(vec![0u8; 20]),
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
        assert_eq!(drain_with(recv, &mut buf, |_| Drift::default()), Drift::ALL);
        // Nothing waiting: nothing found.
        let none = |_: &mut Vec<u8>| Err(std::io::ErrorKind::WouldBlock.into());
        assert!(drain_with(none, &mut buf, |_| Drift::ALL).is_empty());
        let mut buf = Vec::with_capacity(8);
        let mut once = Some(());
        let cut = |_: &mut Vec<u8>| match once.take() {
            Some(()) => Ok(100),
            None => Err(std::io::ErrorKind::WouldBlock.into()),
        };
        assert_eq!(drain_with(cut, &mut buf, |_| Drift::default()), Drift::ALL);
    }
}
