//! A node in namespaces for the NetworkPolicy tests: a "node" with bridge `br0` (10.50.0.1/24,
//! fd50::1/64) and its pods' veths on it, each pod in its own namespace, and an "outside"
//! namespace routed through the node's uplink. Every pod and the outside serve the
//! probe ports (TCP echo, UDP echo); probes are real connections.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use netpol::addr::Family;

use super::policy_cluster::{OUTSIDE, PROBES, TCP, pod_ip};
use super::tests::{Ns, net};

/// How long a probe waits for its answer: a denied one waits it out.
const WAIT: Duration = Duration::from_millis(800);

fn mac(i: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0, 0x10 + i as u8]
}

/// Answers every probe port of one namespace until dropped.
struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(ns: &Ns) -> Server {
        let (tcp, udp) = ns
            .ns
            .run(|| {
                let mut tcp = Vec::new();
                let mut udp = Vec::new();
                for (proto, port) in PROBES {
                    if proto == TCP {
                        tcp.push(TcpListener::bind(("::", port)).unwrap());
                    } else {
                        udp.push(UdpSocket::bind(("::", port)).unwrap());
                    }
                }
                (tcp, udp)
            })
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || serve(&tcp, &udp, &flag));
        Server {
            stop,
            thread: Some(thread),
        }
    }
}

fn serve(tcp: &[TcpListener], udp: &[UdpSocket], stop: &AtomicBool) {
    for l in tcp {
        l.set_nonblocking(true).unwrap();
    }
    for u in udp {
        u.set_nonblocking(true).unwrap();
    }
    let mut open: Vec<TcpStream> = Vec::new();
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        for l in tcp {
            while let Ok((s, _)) = l.accept() {
                s.set_nonblocking(true).unwrap();
                open.push(s);
            }
        }
        // Echo what came; keep a stream until its peer closes it.
        open.retain_mut(|s| match s.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => s.write_all(&buf[..n]).is_ok(),
            Err(e) => e.kind() == ErrorKind::WouldBlock,
        });
        for u in udp {
            while let Ok((n, from)) = u.recv_from(&mut buf) {
                let _ = u.send_to(&buf[..n], from);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub struct Lab {
    pub node: Ns,
    pub pods: Vec<Ns>,
    pub outside: Ns,
    _servers: Vec<Server>,
}

fn write_sysctl(ns: &Ns, path: &str) {
    ns.ns
        .run(|| std::fs::write(format!("/proc/sys/{path}"), "1"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}

impl Lab {
    /// `pods` pods that know each other's MAC (no probe waits on neighbour discovery).
    pub fn new(pods: usize) -> Lab {
        Lab::build(pods, true)
    }

    /// `pods` pods that find each other by neighbour discovery (ARP, IPv6 ND).
    pub fn resolving(pods: usize) -> Lab {
        Lab::build(pods, false)
    }

    fn build(pods: usize, static_neighbours: bool) -> Lab {
        let node = Ns::new();
        node.nl.create_bridge("br0", None).unwrap();
        let br = node.nl.link_by_name("br0").unwrap().unwrap().index;
        for a in ["10.50.0.1/24", "fd50::1/64"] {
            node.nl.add_address_nodad(br, net(a)).unwrap();
        }
        node.nl.set_up(br).unwrap();
        let pods: Vec<Ns> = (0..pods)
            .map(|i| {
                let pod = Ns::new();
                let host = format!("veth{i}");
                node.nl
                    .create_veth(&host, "eth0", None, Some(mac(i)), pod.ns.as_fd())
                    .unwrap();
                let h = node.nl.link_by_name(&host).unwrap().unwrap().index;
                node.nl.set_master(h, br).unwrap();
                node.nl.set_up(h).unwrap();
                let e = pod.nl.link_by_name("eth0").unwrap().unwrap().index;
                for (ip, len) in [(pod_ip(i, Family::V4), 24), (pod_ip(i, Family::V6), 64)] {
                    pod.nl
                        .add_address_nodad(e, net(&format!("{ip}/{len}")))
                        .unwrap();
                }
                pod.nl.set_up(e).unwrap();
                pod.default_via("10.50.0.1");
                pod.default_via("fd50::1");
                pod
            })
            .collect();
        // Pods may know each other's MAC: no probe then waits on a resolution.
        for (i, pod) in pods.iter().enumerate().filter(|_| static_neighbours) {
            for j in (0..pods.len()).filter(|j| *j != i) {
                for f in Family::BOTH {
                    let m = mac(j).map(|b| format!("{b:02x}")).join(":");
                    let to = pod_ip(j, f).to_string();
                    let args = [
                        "neigh",
                        "replace",
                        &to,
                        "lladdr",
                        &m,
                        "dev",
                        "eth0",
                        "nud",
                        "permanent",
                    ];
                    pod.sh("ip", &args);
                }
            }
        }
        let outside = Ns::new();
        let up = ["192.168.77.1/24", "fd77::1/64"];
        node.link(
            "ext0",
            &up,
            &outside,
            "eth0",
            &["192.168.77.2/24", "fd77::2/64"],
        );
        outside.route_via(net("10.50.0.0/24"), "192.168.77.1".parse().unwrap());
        outside.route_via(net("fd50::/64"), "fd77::1".parse().unwrap());
        for path in [
            "net/ipv4/ip_forward",
            "net/ipv6/conf/all/forwarding",
            "net/bridge/bridge-nf-call-iptables",
            "net/bridge/bridge-nf-call-ip6tables",
        ] {
            write_sysctl(&node, path);
        }
        let mut servers: Vec<Server> = pods.iter().map(Server::start).collect();
        servers.push(Server::start(&outside));
        Lab {
            node,
            pods,
            outside,
            _servers: servers,
        }
    }

    /// The namespace of an end: pod `i`, or the outside.
    pub fn ns(&self, at: Option<usize>) -> &Ns {
        at.map_or(&self.outside, |i| &self.pods[i])
    }
}

/// The address of an end in family `f`.
pub fn addr_of(at: Option<usize>, f: Family) -> IpAddr {
    at.map_or_else(|| OUTSIDE[f as usize].parse().unwrap(), |i| pod_ip(i, f))
}

/// A TCP connection from `from` that echoes a byte, or None when it cannot be made.
pub fn connect(from: &Ns, to: SocketAddr) -> Option<TcpStream> {
    from.ns
        .run(|| {
            let mut s = TcpStream::connect_timeout(&to, WAIT).ok()?;
            echoes(&mut s).then_some(s)
        })
        .unwrap()
}

/// Whether a byte written on `s` comes back.
pub fn echoes(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8];
    s.write_all(b"x").is_ok() && s.read_exact(&mut b).is_ok() && b == *b"x"
}

/// Whether a new connection (TCP) or exchange (UDP: a datagram and its answer, tried
/// three times) from `from` to `to` gets through, both ways.
pub fn probe(from: &Ns, to: SocketAddr, proto: u8) -> bool {
    if proto == TCP {
        return connect(from, to).is_some();
    }
    from.ns
        .run(|| {
            let any: SocketAddr = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
                .parse()
                .unwrap();
            let s = UdpSocket::bind(any).unwrap();
            s.set_read_timeout(Some(WAIT / 2)).unwrap();
            let mut b = [0u8; 8];
            (0..3).any(|_| s.send_to(b"x", to).is_ok() && s.recv_from(&mut b).is_ok())
        })
        .unwrap()
}
