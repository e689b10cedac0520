//! A cluster of "nodes" in network namespaces, for the multi-node tests.
//!
//! ```text
//!   pod ns ─ cni0 ─ node-1 ns ─┐
//!   pod ns ─ cni0 ─ node-2 ns ─┼─ lan0 (bridge in the lan ns) ─ ext ns (outside host, API server)
//!   pod ns ─ cni0 ─ node-3 ns ─┘
//! ```
//! Node i has `eth0` 198.51.100.1i/24 and fd00:100::1i/64 on the lan, a default route via
//! the outside host, pod ranges 10.244.i.0/24 and fd00:10:244:i::/64 served by our bridge and
//! host-local (ipMasq off: the node agent masquerades). Everything lives in namespaces the
//! test made and vanishes with them.
//!
//! [`Cluster::segments`] puts nodes on a second segment too (`lan1`, 203.0.113.0/24 and
//! fd00:200::/64), which the outside host routes to the first: its nodes are not on-link
//! with the first segment's (their routes to each other go through a router).
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use cni_tests::{NamedNetns, PluginRun, TempDir, bin_path};

use crate::apiserver::ApiServer;
use serde_json::{Value, json};

pub const NETWORK: &str = "cni-rs";
pub const EXT4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 200);
pub const EXT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x100, 0, 0, 0, 0, 0, 0xc8);
/// The outside host's (the router's) addresses on the second segment.
pub const EXT4_B: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 200);
pub const EXT6_B: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 0xc8);

pub struct Cluster {
    pub lan: NamedNetns,
    /// The outside host: everything not in the cluster.
    pub ext: NamedNetns,
    pub nodes: Vec<Node>,
}

pub struct Node {
    pub name: String,
    /// 1-based.
    pub index: u8,
    /// 0: the first lan segment, 1: the second.
    pub segment: u8,
    pub ns: NamedNetns,
    pub ip4: Ipv4Addr,
    pub ip6: Ipv6Addr,
    pub pod4: String,
    pub pod6: String,
    pub data: TempDir,
    pub cni: TempDir,
}

pub struct Pod {
    pub ns: NamedNetns,
    pub id: String,
    /// The bridge's ADD result (a chained plugin's prevResult).
    pub result: Value,
    pub ip4: Ipv4Addr,
    pub ip6: Ipv6Addr,
}

impl Cluster {
    /// `n` nodes on one lan segment, no routes between their pod ranges yet.
    pub fn new(tag: &str, n: u8) -> Cluster {
        Cluster::segments(tag, &vec![0; usize::from(n)])
    }

    /// A node per entry of `segments`, on that segment (0 or 1); the outside host routes
    /// between the two.
    pub fn segments(tag: &str, segments: &[u8]) -> Cluster {
        let lan = NamedNetns::new(&format!("{tag}-lan"));
        let ext = NamedNetns::new(&format!("{tag}-ext"));
        for (seg, (ip4, ip6)) in [(EXT4, EXT6), (EXT4_B, EXT6_B)].into_iter().enumerate() {
            if seg == 1 && !segments.contains(&1) {
                break;
            }
            let bridge = format!("lan{seg}");
            lan.exec_in(&["ip", "link", "add", &bridge, "type", "bridge"]);
            lan.exec_in(&["ip", "link", "set", &bridge, "up"]);
            plug(
                &lan,
                &bridge,
                &ext,
                &format!("mext{seg}"),
                &format!("eth{seg}"),
                &format!("{ip4}/24"),
                &format!("{ip6}/64"),
            );
        }
        if segments.contains(&1) {
            ext.exec_in(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
            ext.exec_in(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
        }
        let nodes = (1..=segments.len() as u8)
            .map(|i| {
                let ns = NamedNetns::new(&format!("{tag}-n{i}"));
                let segment = segments[usize::from(i - 1)];
                let (ip4, ip6) = node_addrs(i, segment);
                lan.exec_in(&[
                    "ip",
                    "link",
                    "add",
                    &format!("m{i}"),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns.name(),
                ]);
                ns.exec_in(&["ip", "link", "set", "lo", "up"]);
                ns.exec_in(&["ip", "link", "set", "eth0", "up"]);
                let cni = TempDir::new(&format!("{tag}-n{i}-cni"));
                for plugin in ["bridge", "host-local"] {
                    std::os::unix::fs::symlink(bin_path(plugin), cni.join(plugin)).unwrap();
                }
                let mut node = Node {
                    name: format!("node-{i}"),
                    index: i,
                    segment,
                    ns,
                    ip4,
                    ip6,
                    pod4: format!("10.244.{i}.0/24"),
                    pod6: format!("fd00:10:244:{i}::/64"),
                    data: TempDir::new(&format!("{tag}-n{i}-data")),
                    cni,
                };
                node.attach(&lan, segment);
                node
            })
            .collect();
        Cluster { lan, ext, nodes }
    }
}

/// Node `i`'s addresses on `segment`.
fn node_addrs(i: u8, segment: u8) -> (Ipv4Addr, Ipv6Addr) {
    // .1i and ::1i (hex)
    let (v4, v6) = (10 + i, 0x10 + u16::from(i));
    match segment {
        0 => (
            Ipv4Addr::new(198, 51, 100, v4),
            Ipv6Addr::new(0xfd00, 0x100, 0, 0, 0, 0, 0, v6),
        ),
        _ => (
            Ipv4Addr::new(203, 0, 113, v4),
            Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, v6),
        ),
    }
}

/// A veth from bridge `bridge` in `lan` to `ifname` in `member`, with the member's addresses.
fn plug(
    lan: &NamedNetns,
    bridge: &str,
    member: &NamedNetns,
    lan_end: &str,
    ifname: &str,
    ip4: &str,
    ip6: &str,
) {
    lan.exec_in(&[
        "ip",
        "link",
        "add",
        lan_end,
        "type",
        "veth",
        "peer",
        "name",
        ifname,
        "netns",
        member.name(),
    ]);
    lan.exec_in(&["ip", "link", "set", lan_end, "master", bridge, "up"]);
    member.exec_in(&["ip", "link", "set", "lo", "up"]);
    member.exec_in(&["ip", "addr", "add", ip4, "dev", ifname]);
    member.exec_in(&["ip", "addr", "add", ip6, "dev", ifname, "nodad"]);
    member.exec_in(&["ip", "link", "set", ifname, "up"]);
}

impl Node {
    /// Moves this node onto `segment` of `lan`: another bridge port, that segment's
    /// addresses and default routes (the Node object is the caller's to update).
    pub fn move_to(&mut self, lan: &NamedNetns, segment: u8) {
        // Global scope only: IPv6 neighbour discovery needs the link-local address.
        self.ns
            .exec_in(&["ip", "addr", "flush", "dev", "eth0", "scope", "global"]);
        (self.ip4, self.ip6) = node_addrs(self.index, segment);
        self.attach(lan, segment);
    }

    /// Its lan port on `segment`'s bridge, `eth0` with this node's addresses, default
    /// routes via the outside host on that segment.
    fn attach(&mut self, lan: &NamedNetns, segment: u8) {
        let port = format!("m{}", self.index);
        lan.exec_in(&[
            "ip",
            "link",
            "set",
            &port,
            "master",
            &format!("lan{segment}"),
            "up",
        ]);
        self.segment = segment;
        let ns = &self.ns;
        ns.exec_in(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", self.ip4),
            "dev",
            "eth0",
        ]);
        ns.exec_in(&[
            "ip",
            "addr",
            "add",
            &format!("{}/64", self.ip6),
            "dev",
            "eth0",
            "nodad",
        ]);
        let (gw4, gw6) = if segment == 0 {
            (EXT4, EXT6)
        } else {
            (EXT4_B, EXT6_B)
        };
        ns.exec_in(&["ip", "route", "replace", "default", "via", &gw4.to_string()]);
        ns.exec_in(&[
            "ip",
            "-6",
            "route",
            "replace",
            "default",
            "via",
            &gw6.to_string(),
        ]);
    }

    /// The bridge plugin's config as the node's conflist has it (ipMasq off).
    pub fn bridge_conf(&self) -> Value {
        json!({
            "cniVersion": "1.0.0", "name": NETWORK, "type": "bridge", "bridge": "cni0",
            "isGateway": true, "ipMasq": false, "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": self.pod4}], [{"subnet": self.pod6}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                "dataDir": self.data.path(),
            },
        })
    }

    fn plugin(&self, cmd: &str, pod: &NamedNetns, id: &str, conf: &Value) -> PluginRun {
        let kind = conf["type"].as_str().unwrap_or("bridge");
        PluginRun::new(bin_path(kind))
            .command(cmd)
            .container_id(id)
            .netns(pod.path())
            .ifname("eth0")
            .cni_path([self.cni.path()])
            .stdin(conf.to_string())
    }

    /// A pod on this node, attached with `conf` (see [`Node::bridge_conf`]).
    pub fn add_pod(&self, id: &str, conf: &Value) -> Pod {
        let ns = NamedNetns::new(&format!("{id}-p"));
        let result = self
            .plugin("ADD", &ns, id, conf)
            .run_in(&self.ns)
            .assert_success()
            .json();
        let ip = |v6: bool| -> IpAddr {
            result["ips"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|ip| ip["address"].as_str()?.split('/').next()?.parse().ok())
                .find(|a: &IpAddr| a.is_ipv6() == v6)
                .unwrap_or_else(|| panic!("no address of that family in {result}"))
        };
        let (IpAddr::V4(ip4), IpAddr::V6(ip6)) = (ip(false), ip(true)) else {
            unreachable!()
        };
        Pod {
            ns,
            id: id.to_string(),
            result,
            ip4,
            ip6,
        }
    }

    /// Runs the chained `portmap` (its config from the conflist) for `pod` with `mappings`
    /// (`runtimeConfig.portMappings`); `cmd` ADD or DEL.
    pub fn portmap(&self, cmd: &str, pod: &Pod, portmap: &Value, mappings: Value) {
        let mut conf = portmap.clone();
        conf["runtimeConfig"] = json!({ "portMappings": mappings });
        conf["prevResult"] = pod.result.clone();
        self.plugin(cmd, &pod.ns, &pod.id, &conf)
            .run_in(&self.ns)
            .assert_success();
    }

    pub fn del_pod(&self, pod: &Pod, conf: &Value) {
        self.plugin("DEL", &pod.ns, &pod.id, conf)
            .run_in(&self.ns)
            .assert_success();
    }

    /// Routes of `proto` in the node's main table, as `dst via gw` lines.
    /// The routes of `proto` as `DST via GW` (through a nexthop or not: the agent's
    /// go through nexthop objects, an earlier version's did not).
    pub fn routes(&self, proto: &str) -> Vec<String> {
        let mut lines: Vec<String> = ["-4", "-6"]
            .iter()
            .flat_map(|fam| {
                self.ns
                    .exec_in(&["ip", fam, "route", "show", "proto", proto])
                    .lines()
                    .map(without_nhid)
                    .collect::<Vec<_>>()
            })
            .collect();
        lines.sort();
        lines
    }
}

/// The source address a datagram from `from` to `dst` (a socket in `to`) arrives with, or
/// `None` when nothing arrives within about 5 s.
pub fn udp_source(from: &NamedNetns, to: &NamedNetns, dst: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = match dst {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    // A socket keeps the namespace it was made in; it is then used from this thread. A
    // port of the kernel's choosing: a fixed one was seen taken under a loaded full run.
    let rx = to
        .run(|| UdpSocket::bind(SocketAddr::new(any, 0)))
        .expect("bind the probe receiver");
    let port = rx.local_addr().expect("the probe receiver's port").port();
    let tx = from
        .run(|| UdpSocket::bind(SocketAddr::new(any, 0)))
        .expect("bind the probe sender");
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 16];
    for _ in 0..25 {
        // The first datagrams may be lost while neighbours resolve.
        let _ = tx.send_to(b"probe", SocketAddr::new(dst, port));
        if let Ok((_, src)) = rx.recv_from(&mut buf) {
            return Some(src.ip());
        }
    }
    None
}

/// The source address a TCP connection from `from` to `dst` arrives with at a listener on
/// `port` in `to`, or `None` when it cannot connect. Port 0: a listener port of the
/// kernel's choosing, which `dst` is then connected on (a fixed one was seen taken under a
/// loaded full run, as with the UDP probe).
pub fn tcp_source(
    from: &NamedNetns,
    to: &NamedNetns,
    mut dst: SocketAddr,
    port: u16,
) -> Option<IpAddr> {
    let listener = to
        .run(|| std::net::TcpListener::bind(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port)))
        .expect("bind the probe listener");
    if port == 0 {
        dst.set_port(
            listener
                .local_addr()
                .expect("the probe listener's port")
                .port(),
        );
    }
    let conn = from.run(|| std::net::TcpStream::connect_timeout(&dst, Duration::from_secs(3)));
    conn.ok()?;
    listener.set_nonblocking(true).unwrap();
    for _ in 0..40 {
        if let Ok((_, peer)) = listener.accept() {
            return Some(match peer.ip() {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                v4 => v4,
            });
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    None
}

/// Each family's datagram from `from` reaches `to` with `from`'s own pod address.
pub fn no_nat(from: &Pod, to: &Pod) {
    for (dst, src) in [
        (IpAddr::from(to.ip4), IpAddr::from(from.ip4)),
        (IpAddr::from(to.ip6), IpAddr::from(from.ip6)),
    ] {
        assert_eq!(
            source_seen(&from.ns, &to.ns, dst),
            src,
            "{} -> {}: the receiver must see the sender's pod address",
            from.id,
            to.id
        );
    }
}

/// `udp_source` that must arrive.
pub fn source_seen(from: &NamedNetns, to: &NamedNetns, dst: IpAddr) -> IpAddr {
    udp_source(from, to, dst).unwrap_or_else(|| {
        panic!(
            "nothing from {} reached {dst} in {}",
            from.name(),
            to.name()
        )
    })
}

/// The stub API server inside a namespace. It is stopped from inside that namespace too: its
/// stop wakes its accept loop by connecting to its address, which only works there.
pub struct NsApi<'a> {
    api: Option<ApiServer>,
    ns: &'a cni_tests::NamedNetns,
}

impl std::ops::Deref for NsApi<'_> {
    type Target = ApiServer;
    fn deref(&self) -> &ApiServer {
        self.api.as_ref().expect("running")
    }
}

impl Drop for NsApi<'_> {
    fn drop(&mut self) {
        if let Some(api) = self.api.take() {
            let _ = self.ns.netns().run(move || drop(api));
        }
    }
}

/// The API server in the outside host's namespace, serving `c`'s nodes (node-1 is the one
/// `ApiServer::start` names, the others are added).
pub fn api_for(c: &Cluster) -> (NsApi<'_>, ApiAccess) {
    api_in(&c.ext, &c.nodes)
}

/// [`api_for`] borrowing only the outside host (the nodes may change meanwhile).
pub fn api_in<'a>(ext: &'a NamedNetns, nodes: &[Node]) -> (NsApi<'a>, ApiAccess) {
    let first = &nodes[0];
    let api = ext.run(|| {
        ApiServer::start(
            &format!("{EXT4}:0"),
            &first.name,
            &[&first.pod4, &first.pod6],
        )
    });
    api.set(|b| b.internal_ips = vec![first.ip4.to_string(), first.ip6.to_string()]);
    for n in &nodes[1..] {
        api.put_node(
            &n.name,
            &[&n.pod4, &n.pod6],
            &[&n.ip4.to_string(), &n.ip6.to_string()],
        );
    }
    let access = ApiAccess {
        url: api.url(),
        token: api.token.clone(),
        ca_pem: api.ca_pem.clone(),
    };
    (
        NsApi {
            api: Some(api),
            ns: ext,
        },
        access,
    )
}

/// The conflist's bridge config with the node's own host-local dataDir.
pub fn with_data_dir(mut conf: serde_json::Value, node: &Node) -> serde_json::Value {
    conf["ipam"]["dataDir"] = node.data.path().to_str().unwrap().into();
    conf
}

/// The node agent (`cni-rs-agent`) running inside a node's namespace; killed on drop.
pub struct Agent {
    child: Option<std::process::Child>,
    pub dir: TempDir,
    args: Vec<String>,
}

/// What an agent needs to reach the API server.
pub struct ApiAccess {
    pub url: String,
    pub token: String,
    pub ca_pem: String,
}

impl Agent {
    /// Starts the agent for `node` with the test's dirs; `extra` are more flags (an
    /// `--interval` there replaces the default 1 s).
    pub fn start(node: &Node, api: &ApiAccess, extra: &[&str]) -> Agent {
        Agent::start_with_sources(node, api, extra, |source| {
            for plugin in ["bridge", "host-local", "loopback", "portmap"] {
                std::fs::copy(bin_path(plugin), source.join(plugin)).unwrap();
            }
        })
    }

    /// [`Agent::start`] with the source dir (the binaries it installs) filled by `fill`.
    pub fn start_with_sources(
        node: &Node,
        api: &ApiAccess,
        extra: &[&str],
        fill: impl FnOnce(&std::path::Path),
    ) -> Agent {
        let dir = TempDir::new(&format!("{}-agent", node.name));
        let source = dir.join("source");
        std::fs::create_dir_all(&source).unwrap();
        fill(&source);
        std::fs::write(dir.join("token"), &api.token).unwrap();
        std::fs::write(dir.join("ca.crt"), &api.ca_pem).unwrap();
        let path = |p: &str| dir.join(p).to_str().unwrap().to_string();
        let mut args: Vec<String> = [
            "--node-name",
            &node.name,
            "--api-server",
            &api.url,
            "--token-file",
            &path("token"),
            "--ca-file",
            &path("ca.crt"),
            "--source-dir",
            &path("source"),
            "--bin-dir",
            &path("bin"),
            "--conf-dir",
            &path("net.d"),
            "--ipam-data-dir",
            node.data.path().to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // A re-check every second unless the test sets its own.
        if !extra.contains(&"--interval") {
            args.extend(["--interval".to_string(), "1".to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut agent = Agent {
            child: None,
            dir,
            args,
        };
        agent.spawn(node);
        agent
    }

    fn spawn(&mut self, node: &Node) {
        for d in ["bin", "net.d"] {
            std::fs::create_dir_all(self.dir.join(d)).unwrap();
        }
        let mut cmd = std::process::Command::new(bin_path("cni-rs-agent"));
        cmd.args(&self.args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(self.dir.join("agent.log")).unwrap())
            .stderr(std::fs::File::create(self.dir.join("agent.err")).unwrap());
        // Forked from a thread inside the node's namespace, the agent lives there.
        self.child = Some(node.ns.run(|| cmd.spawn()).expect("start the agent"));
    }

    /// Stops it (SIGKILL: what it leaves in the kernel stays, as after a crash).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self, node: &Node) {
        self.stop();
        self.spawn(node);
    }

    /// `--uninstall` with the same flags, to completion.
    pub fn uninstall(&mut self, node: &Node) {
        self.stop();
        let out = node.ns.run_in({
            let mut cmd = std::process::Command::new(bin_path("cni-rs-agent"));
            cmd.args(&self.args).arg("--uninstall").env_clear();
            cmd
        });
        assert!(
            out.status.success(),
            "--uninstall failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The agent's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.err")).unwrap_or_default()
    }

    /// The bridge plugin's config from the conflist the agent wrote.
    pub fn bridge_conf(&self) -> Value {
        self.plugin_conf(0)
    }

    /// The conflist's plugin `i` as a runtime passes it (with the list's name and version).
    pub fn plugin_conf(&self, i: usize) -> Value {
        let text = std::fs::read_to_string(self.dir.join("net.d/10-cni-rs.conflist"))
            .expect("the agent wrote its conflist");
        let list: Value = serde_json::from_str(&text).unwrap();
        let mut conf = list["plugins"][i].clone();
        conf["name"] = list["name"].clone();
        conf["cniVersion"] = list["cniVersion"].clone();
        conf
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `DST [nhid N] via GW dev D ...` as `DST via GW`.
fn without_nhid(line: &str) -> String {
    let mut words = line.split_whitespace();
    let mut kept = Vec::new();
    while let Some(w) = words.next() {
        if w == "nhid" {
            words.next();
        } else {
            kept.push(w);
        }
    }
    kept.into_iter().take(3).collect::<Vec<_>>().join(" ")
}

/// Polls `check` every 50 ms until it holds; panics after 20 s with `what` and `detail`.
pub fn wait_for(what: &str, mut check: impl FnMut() -> bool, detail: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        if std::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}\n{}", detail());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET /readyz` on the agent's health port inside the node: its status code.
pub fn readyz(node: &Node) -> Option<u16> {
    get(node, "/readyz").map(|(code, _)| code)
}

/// The value of the agent's metric `cni_rs_<name>` on `/metrics`.
pub fn metric(node: &Node, name: &str) -> Option<u64> {
    let (_, body) = get(node, "/metrics")?;
    let name = format!("cni_rs_{name} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&name))
        .and_then(|v| v.trim().parse().ok())
}

/// `GET path` on the agent's health port inside the node: status code and whole answer.
fn get(node: &Node, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut conn = node
        .ns
        .run(|| std::net::TcpStream::connect("127.0.0.1:9277"))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    let code = answer.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, answer))
}
