//! The prober: every source to every destination pod, for every kind, at once (a thread
//! per probe, each joined to its source's namespace), with short timeouts. A probe is
//! one new connection: TCP and SCTP connect (the server accepts), UDP gets its datagram
//! echoed. A policy drops, so "does not connect" is a timeout.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use cni_tests::NamedNetns;
use netpol::addr::Family;
use netpol::validate::Protocol;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, setns};
use nix::sys::socket::{
    AddressFamily, SockFlag, SockProtocol, SockType, SockaddrStorage, connect, getsockopt, socket,
    sockopt,
};

use super::table::{Kind, Table};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
const UDP_TRIES: u32 = 4;
const UDP_WAIT: Duration = Duration::from_millis(250);
/// Threads alive at once: a whole table (864 probes without SCTP), since a denied probe
/// only waits out its timeout.
const PARALLEL: usize = 1296;

/// A destination pod: its key and addresses (v4, v6).
pub struct Dest {
    pub key: String,
    pub ips: [IpAddr; 2],
}

/// Probes every (source, destination, kind) and returns what connected.
pub fn observe(sources: &[(String, &NamedNetns)], dests: &[Dest], kinds: &[Kind]) -> Table {
    let mut jobs = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        for s in 0..sources.len() {
            for d in 0..dests.len() {
                jobs.push((k, s, d, *kind));
            }
        }
    }
    let mut results = vec![false; jobs.len()];
    for (chunk, out) in jobs.chunks(PARALLEL).zip(results.chunks_mut(PARALLEL)) {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&(_, s, d, kind)| {
                    let ns = sources[s].1;
                    let ip = match kind.family {
                        Family::V4 => dests[d].ips[0],
                        Family::V6 => dests[d].ips[1],
                    };
                    scope.spawn(move || {
                        setns(ns.netns(), CloneFlags::CLONE_NEWNET)
                            .unwrap_or_else(|e| panic!("entering {}: {e}", ns.name()));
                        connects(kind.proto, SocketAddr::new(ip, kind.port))
                    })
                })
                .collect();
            for (h, o) in handles.into_iter().zip(out.iter_mut()) {
                *o = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            }
        });
    }
    let mut cells = std::collections::BTreeMap::new();
    for kind in kinds {
        cells.insert(*kind, vec![vec![false; dests.len()]; sources.len()]);
    }
    for ((_, s, d, kind), ok) in jobs.into_iter().zip(results) {
        cells.get_mut(&kind).expect("every kind has a matrix")[s][d] = ok;
    }
    Table {
        sources: sources.iter().map(|(l, _)| l.clone()).collect(),
        dests: dests.iter().map(|d| d.key.clone()).collect(),
        cells,
    }
}

/// One new connection from this thread's namespace.
fn connects(proto: Protocol, dst: SocketAddr) -> bool {
    match proto {
        Protocol::Tcp => TcpStream::connect_timeout(&dst, CONNECT_TIMEOUT).is_ok(),
        Protocol::Udp => udp_echoed(dst),
        Protocol::Sctp => sctp_connects(dst).unwrap_or(false),
    }
}

fn udp_echoed(dst: SocketAddr) -> bool {
    let any: IpAddr = match dst {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let Ok(sock) = UdpSocket::bind(SocketAddr::new(any, 0)) else {
        return false;
    };
    // Connected: only the server's answer is read.
    if sock.connect(dst).is_err() || sock.set_read_timeout(Some(UDP_WAIT)).is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    (0..UDP_TRIES).any(|_| {
        sock.send(b"netpol-probe").is_ok()
            && matches!(sock.recv(&mut buf), Ok(n) if &buf[..n] == b"netpol-probe")
    })
}

fn sctp_connects(dst: SocketAddr) -> nix::Result<bool> {
    let family = match dst {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        SockProtocol::Sctp,
    )?;
    match connect(fd.as_raw_fd(), &SockaddrStorage::from(dst)) {
        Ok(()) => return Ok(true),
        Err(Errno::EINPROGRESS) => {}
        Err(_) => return Ok(false),
    }
    let ms = u16::try_from(CONNECT_TIMEOUT.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(fd_borrow(&fd), PollFlags::POLLOUT)];
    if poll(&mut fds, PollTimeout::from(ms))? == 0 {
        return Ok(false);
    }
    Ok(getsockopt(&fd, sockopt::SocketError)? == 0)
}

fn fd_borrow(fd: &std::os::fd::OwnedFd) -> std::os::fd::BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}

/// Whether this kernel has SCTP, tried in `ns` (a socket, nothing sent).
pub fn sctp_available(ns: &NamedNetns) -> bool {
    ns.run(|| {
        match socket(
            AddressFamily::Inet6,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::Sctp,
        ) {
            Ok(_) => true,
            Err(Errno::EPROTONOSUPPORT) => false,
            Err(e) => panic!("an SCTP socket: {e}"),
        }
    })
}

/// A flow kept open from a pod: one socket (one source port, one conntrack entry).
pub enum Flow {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

impl Flow {
    /// A TCP connection from `ns` to `dst`; `None` when it does not connect.
    pub fn tcp(ns: &NamedNetns, dst: SocketAddr) -> Option<Flow> {
        let conn = ns
            .run(|| TcpStream::connect_timeout(&dst, CONNECT_TIMEOUT))
            .ok()?;
        conn.set_read_timeout(Some(CONNECT_TIMEOUT)).ok()?;
        Some(Flow::Tcp(conn))
    }

    /// A connected UDP socket from `ns` to `dst`; `None` when it cannot be made.
    pub fn udp(ns: &NamedNetns, dst: SocketAddr) -> Option<Flow> {
        let any: IpAddr = match dst {
            SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let sock = ns.run(|| UdpSocket::bind(SocketAddr::new(any, 0))).ok()?;
        sock.connect(dst).ok()?;
        sock.set_read_timeout(Some(UDP_WAIT)).ok()?;
        Some(Flow::Udp(sock))
    }

    /// Whether this flow's data is echoed now (TCP: one byte, retransmitted by the kernel
    /// within the wait; UDP: a datagram, sent again on each try).
    pub fn echoes(&self) -> bool {
        use std::io::{Read, Write};
        let mut buf = [0u8; 16];
        match self {
            Flow::Udp(sock) => (0..UDP_TRIES).any(|_| {
                sock.send(b"netpol-flow").is_ok()
                    && matches!(sock.recv(&mut buf), Ok(n) if &buf[..n] == b"netpol-flow")
            }),
            Flow::Tcp(conn) => {
                let mut conn = conn;
                conn.write_all(b"f").is_ok() && matches!(conn.read(&mut buf), Ok(1))
            }
        }
    }
}
