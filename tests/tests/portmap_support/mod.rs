//! Shared harness of the portmap tests (included by each `portmap_*.rs` with `#[path]`).
//!
//! A test's node is the bridge harness's fake "host" netns (our bridge and host-local in
//! CNI_PATH); portmap (ours or the Go one) is chained after the bridge there, as a runtime
//! chains it, with the bridge's result as prevResult.
#![allow(dead_code, unused_imports)]

#[path = "../bridge_support/mod.rs"]
mod bridge;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use bridge::{BRIDGE, Env, IFNAME, NETWORK, error_of, merge};
use cni_tests::{NamedNetns, PluginOutput, PluginRun, bin_path, go_plugin_path};
use serde_json::{Value, json};

/// The highest version the Go plugins (v1.1.1) speak.
pub const VERSION: &str = "1.0.0";
pub const SUBNET4: &str = "10.249.0.0/24";
pub const SUBNET6: &str = "fd00:249::/64";
pub const GATEWAY4: &str = "10.249.0.1";
pub const GATEWAY6: &str = "fd00:249::1";

pub fn ours() -> PathBuf {
    bin_path("portmap")
}

pub fn go() -> PathBuf {
    go_plugin_path("portmap")
}

pub fn tcp(host_port: u16, container_port: u16) -> Value {
    json!({"hostPort": host_port, "containerPort": container_port, "protocol": "tcp"})
}

pub fn udp(host_port: u16, container_port: u16) -> Value {
    json!({"hostPort": host_port, "containerPort": container_port, "protocol": "udp"})
}

pub fn on(mapping: Value, host_ip: &str) -> Value {
    merge(mapping, json!({ "hostIP": host_ip }))
}

/// A node: the host netns with the bridge (masquerading, dual stack) and one container.
pub struct Node {
    pub env: Env,
    pub subnets: Vec<&'static str>,
}

/// One pod attached: its netns, container ID and the bridge's result.
pub struct Pod {
    pub ns: NamedNetns,
    pub id: String,
    pub result: Value,
}

impl Pod {
    /// The pod's address of `v6`'s family in its result, without the prefix.
    pub fn ip(&self, v6: bool) -> String {
        let ips = self.result["ips"].as_array().expect("result has ips");
        let ip = (ips.iter())
            .filter_map(|i| i["address"].as_str())
            .find(|a| a.contains(':') == v6)
            .expect("an address of the family");
        ip.split('/').next().unwrap_or(ip).to_string()
    }
}

impl Node {
    pub fn new(tag: &str) -> Node {
        Node::with_subnets(tag, vec![SUBNET4, SUBNET6])
    }

    pub fn with_subnets(tag: &str, subnets: Vec<&'static str>) -> Node {
        Node {
            env: Env::new(tag),
            subnets,
        }
    }

    pub fn host(&self) -> &NamedNetns {
        &self.env.host
    }

    /// As the cluster's conflist: hairpin mode on the ports (a bridged pod's connection
    /// DNATed back to itself leaves by the port it came in; br_netfilter sees it bridged).
    pub fn bridge_conf(&self) -> Value {
        self.env.conf(
            VERSION,
            &self.subnets,
            json!({"ipMasq": true, "hairpinMode": true}),
        )
    }

    /// The portmap config a runtime sends: `runtimeConfig.portMappings`, the bridge's result.
    pub fn portmap_conf(&self, mappings: &[Value], prev: Option<&Value>, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": VERSION, "name": NETWORK, "type": "portmap",
            "capabilities": {"portMappings": true},
        });
        if !mappings.is_empty() {
            conf["runtimeConfig"] = json!({ "portMappings": mappings });
        }
        if let Some(prev) = prev {
            conf["prevResult"] = prev.clone();
        }
        merge(conf, extra)
    }

    /// The bridge's ADD of a new pod `id`.
    pub fn attach(&self, id: &str) -> Pod {
        let ns = NamedNetns::new("pm-ctr");
        ns.exec_in(&["ip", "link", "set", "lo", "up"]);
        let result = self.env.add(&ns, id, &self.bridge_conf());
        Pod {
            ns,
            id: id.to_string(),
            result,
        }
    }

    pub fn portmap(&self, bin: &Path, cmd: &str, pod: &Pod, conf: &Value) -> PluginOutput {
        PluginRun::new(bin)
            .command(cmd)
            .container_id(&pod.id)
            .netns(pod.ns.path())
            .ifname(IFNAME)
            .cni_path([self.env.cni.path()])
            .stdin(conf.to_string())
            .run_in(self.host())
    }

    /// portmap ADD chained after the pod's bridge ADD; its output must be the prevResult.
    pub fn map(&self, bin: &Path, pod: &Pod, mappings: &[Value]) {
        self.map_with(bin, pod, mappings, json!({}));
    }

    pub fn map_with(&self, bin: &Path, pod: &Pod, mappings: &[Value], extra: Value) {
        let conf = self.portmap_conf(mappings, Some(&pod.result), extra);
        let out = self.portmap(bin, "ADD", pod, &conf);
        // An empty `dns` is dropped or kept depending on the Go version; nothing else differs.
        let strip = |v: &Value| bridge::merge(v.clone(), json!({"dns": null}));
        assert_eq!(
            strip(&out.assert_success().json()),
            strip(&pod.result),
            "prevResult passed on"
        );
    }

    /// portmap DEL (with prevResult, as libcni sends it).
    pub fn unmap(&self, bin: &Path, pod: &Pod, mappings: &[Value]) {
        let conf = self.portmap_conf(mappings, Some(&pod.result), json!({}));
        self.portmap(bin, "DEL", pod, &conf).assert_success();
    }

    /// The bridge's DEL of the pod (after its portmap DEL).
    pub fn detach(&self, pod: &Pod) {
        let conf = bridge::with_prev(&self.bridge_conf(), &pod.result);
        self.env.del(&pod.ns, &pod.id, &conf);
    }

    /// portmap's chains and rules in both families' nat tables (`iptables-save`,
    /// counters zeroed), the masquerade jump and the hooks included.
    pub fn portmap_rules(&self) -> Vec<String> {
        let mut out = Vec::new();
        for tool in ["iptables-save", "ip6tables-save"] {
            let text = self.host().exec_in(&[tool, "-t", "nat"]);
            out.push(format!("# {tool}"));
            out.extend(
                text.lines()
                    .filter(|l| l.contains("HOSTPORT") || l.contains("CNI-DN-"))
                    .map(zero_counters),
            );
        }
        out
    }

    /// Only the family headers: no portmap chain or rule is left.
    pub fn assert_no_portmap_rules(&self) {
        let rules: Vec<String> = self
            .portmap_rules()
            .into_iter()
            .filter(|l| !l.starts_with('#'))
            .collect();
        assert_eq!(rules, Vec::<String>::new(), "portmap rules left");
    }

    /// The attachment's own chains and jumps, without the shared chains (which stay).
    pub fn attachment_rules(&self) -> Vec<String> {
        self.portmap_rules()
            .into_iter()
            .filter(|l| l.contains("CNI-DN-"))
            .collect()
    }

    /// A second netns wired to the host by a veth: 192.168.249.2/24 and fd00:c::2/64 on its
    /// end, .1 and ::1 on the host's (the node's "own" address, as a NIC's).
    pub fn client(&self) -> NamedNetns {
        let client = NamedNetns::new("pm-cli");
        let host = self.host();
        host.exec_in(&[
            "ip", "link", "add", "pmc0", "type", "veth", "peer", "name", "pmc1",
        ]);
        host.exec_in(&[
            "ip",
            "link",
            "set",
            "pmc1",
            "netns",
            client.path().to_str().unwrap(),
        ]);
        for (ns, dev, v4, v6) in [
            (host, "pmc0", "192.168.249.1/24", "fd00:c::1/64"),
            (&client, "pmc1", "192.168.249.2/24", "fd00:c::2/64"),
        ] {
            ns.exec_in(&["ip", "addr", "add", v4, "dev", dev]);
            ns.exec_in(&["ip", "addr", "add", v6, "dev", dev, "nodad"]);
            ns.exec_in(&["ip", "link", "set", dev, "up"]);
            ns.exec_in(&["ip", "link", "set", "lo", "up"]);
        }
        client.exec_in(&["ip", "route", "add", "default", "via", "192.168.249.1"]);
        client.exec_in(&["ip", "-6", "route", "add", "default", "via", "fd00:c::1"]);
        client
    }
}

pub const NODE4: &str = "192.168.249.1";
pub const NODE6: &str = "fd00:c::1";

const WAIT: Duration = Duration::from_secs(3);

/// A TCP server in `ns` on `port` (all addresses, both families): answers each connection
/// with `reply` and the peer address it saw, until dropped.
pub struct TcpServer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpServer {
    pub fn start(ns: &NamedNetns, port: u16, reply: &'static str) -> TcpServer {
        let listener = ns.run(|| {
            let l = std::net::TcpListener::bind(("::", port)).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        });
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || serve_tcp(listener, reply, &flag));
        TcpServer {
            stop,
            thread: Some(thread),
        }
    }
}

fn serve_tcp(listener: TcpListener, reply: &str, stop: &std::sync::atomic::AtomicBool) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut s, peer)) => {
                let _ = s.write_all(format!("{reply} {}", peer.ip()).as_bytes());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Connects from `ns` to `addr`; what the server said (`None`: refused or timed out).
pub fn tcp_get(ns: &NamedNetns, addr: &str) -> Option<String> {
    let addr: SocketAddr = addr.parse().unwrap();
    ns.run(move || {
        let mut s = TcpStream::connect_timeout(&addr, WAIT).ok()?;
        s.set_read_timeout(Some(WAIT)).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    })
}

/// A UDP echo in `ns` on `port`: answers each datagram with `reply` and the peer address,
/// until dropped.
pub struct UdpServer(TcpServer);

impl UdpServer {
    pub fn start(ns: &NamedNetns, port: u16, reply: &'static str) -> UdpServer {
        let sock = ns.run(|| UdpSocket::bind(("::", port)).unwrap());
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok((_, peer)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(format!("{reply} {}", peer.ip()).as_bytes(), peer);
                }
            }
        });
        UdpServer(TcpServer {
            stop,
            thread: Some(thread),
        })
    }
}

/// Sends a datagram from `ns` to `addr`; the answer, if one came.
pub fn udp_get(ns: &NamedNetns, addr: &str) -> Option<String> {
    let addr: SocketAddr = addr.parse().unwrap();
    ns.run(move || {
        let bind = if addr.is_ipv6() {
            "[::]:0"
        } else {
            "0.0.0.0:0"
        };
        let s = UdpSocket::bind(bind).ok()?;
        s.set_read_timeout(Some(WAIT)).ok()?;
        s.send_to(b"ping", addr).ok()?;
        let mut buf = [0u8; 128];
        let (n, _) = s.recv_from(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    })
}

fn zero_counters(line: &str) -> String {
    // `:CHAIN - [12:345]` => `:CHAIN - [0:0]`; rules carry no counters in this form.
    match line.rsplit_once(" [") {
        Some((head, _)) if line.starts_with(':') => format!("{head} [0:0]"),
        _ => line.to_string(),
    }
}
