//! The NetworkPolicy suite's server in a pod (`netpol-server PORT...`): on each port, both
//! families (one dual-stack `[::]` socket each), TCP and UDP echo (a TCP probe only
//! connects), SCTP accepts and closes when the kernel has SCTP.
//! Prints `ready sctp` (or `ready no-sctp`, the kernel having none) on stdout once every
//! socket is bound, then serves until killed.

#![forbid(unsafe_code)]

use std::io::Write;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockProtocol, SockType, SockaddrIn6, accept, bind, listen,
    setsockopt, socket, sockopt,
};

fn main() {
    let ports: Vec<u16> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| fail(&format!("not a port: {a}")))
        })
        .collect();
    if ports.is_empty() {
        fail("usage: netpol-server PORT...");
    }
    let any = |port| SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port);
    let mut servers: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut sctp_present = true;
    for &port in &ports {
        let tcp =
            TcpListener::bind(any(port)).unwrap_or_else(|e| fail(&format!("tcp {port}: {e}")));
        servers.push(std::thread::spawn(move || {
            // Accepting completes a probe's handshake; the echo serves a connection kept open.
            for conn in tcp.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut conn = conn;
                    let mut back = conn.try_clone()?;
                    std::io::copy(&mut conn, &mut back)
                });
            }
        }));
        let udp = UdpSocket::bind(any(port)).unwrap_or_else(|e| fail(&format!("udp {port}: {e}")));
        servers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, peer)) = udp.recv_from(&mut buf) {
                let _ = udp.send_to(&buf[..n], peer);
            }
        }));
        match sctp_listener(port) {
            Ok(sctp) => servers.push(std::thread::spawn(move || {
                while let Ok(fd) = accept(sctp.as_raw_fd()) {
                    let _ = nix::unistd::close(fd);
                }
            })),
            Err(Errno::EPROTONOSUPPORT) => sctp_present = false,
            Err(e) => fail(&format!("sctp {port}: {e}")),
        }
    }
    println!("ready {}", if sctp_present { "sctp" } else { "no-sctp" });
    let _ = std::io::stdout().flush();
    for s in servers {
        let _ = s.join();
    }
}

/// A one-to-one style SCTP listener on `[::]:port`.
fn sctp_listener(port: u16) -> nix::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Sctp,
    )?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    let addr = SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
    bind(fd.as_raw_fd(), &addr)?;
    listen(&fd, Backlog::new(64)?)?;
    Ok(fd)
}

fn fail(msg: &str) -> ! {
    eprintln!("netpol-server: {msg}");
    std::process::exit(1)
}
