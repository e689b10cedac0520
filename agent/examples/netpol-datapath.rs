//! The helper of scripts/bench-netpol-datapath.sh (issue 29's datapath figures):
//!
//! - `netpol-datapath table NETNS none|empty|POLICIES`: the NetworkPolicy table of the
//!   node namespace `/run/netns/NETNS` as the agent programs it (hostnet's PolicyNet,
//!   from a netpol Engine): `none` removes it; `empty` is the table with no policy (base
//!   chains, `ct state established,related accept`, empty dispatch maps: a node whose
//!   pods no policy selects); POLICIES (e.g. 1000): that many policies selecting the
//!   server pod (10.60.0.3, `app=server` in namespace `bench`), policy `pNNNN` allowing
//!   the client pod (10.60.0.2, `app=client`) on TCP port 30000+NNNN, and the last one
//!   the selection chain tries (`p` + the highest number) also on the benchmark's ports
//!   5201 (iperf3) and 9000 (`connect`). Before the selection chain's port map that was
//!   the worst case, every policy chain walked for a new connection; now the map sends
//!   it to the one policy admitting its port. Plus as many unrelated policies, selecting
//!   no pod of this node.
//! - `netpol-datapath serve PORT`: accepts TCP connections and closes each at once
//!   (runs until killed).
//! - `netpol-datapath connect ADDR:PORT SECONDS`: opens connections one after the
//!   other (connect, read to the server's close, close) and prints how many per second.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use hostnet::node::{HostNodeNet, PolicyNet};
use netpol::cluster::Pod;
use netpol::engine::Engine;
use netpol::model::{Namespace, NetworkPolicy};
use netpol::program::{Elem, Verdict};
use serde_json::json;

const NS: &str = "bench";
const CLIENT: [&str; 2] = ["10.60.0.2", "fd60::2"];
const SERVER: [&str; 2] = ["10.60.0.3", "fd60::3"];
const NODE_ADDRS: [&str; 2] = ["10.60.0.1", "fd60::1"];
const BENCH_PORTS: [u16; 2] = [5201, 9000];

fn pod(name: &str, app: &str, ips: [&str; 2]) -> Pod {
    Pod {
        namespace: NS.into(),
        name: name.into(),
        labels: std::sync::Arc::new([("app".to_string(), app.to_string())].into_iter().collect()),
        node: "node".into(),
        host_network: false,
        ips: ips.iter().map(|a| a.parse().unwrap()).collect(),
        named_ports: vec![].into(),
        created: "".into(),
    }
}

fn policy(name: &str, selects: &str, ports: &[u16]) -> NetworkPolicy {
    let ports: Vec<_> = ports
        .iter()
        .map(|p| json!({ "protocol": "TCP", "port": p }))
        .collect();
    serde_json::from_value(json!({
        "metadata": { "namespace": NS, "name": name },
        "spec": {
            "podSelector": { "matchLabels": { "app": selects } },
            "policyTypes": ["Ingress"],
            "ingress": [{ "from": [{ "podSelector": { "matchLabels": { "app": "client" } } }],
                          "ports": ports }],
        }
    }))
    .unwrap()
}

fn table(netns: &str, what: &str) {
    let handle = sysproc::netns::Netns::open(format!("/run/netns/{netns}")).unwrap();
    let net = HostNodeNet::in_netns(&handle).unwrap();
    if what == "none" {
        net.remove_policy().unwrap();
        println!("table: none");
        return;
    }
    let n: u32 = if what == "empty" {
        0
    } else {
        what.parse().expect("none, empty or a number")
    };
    let node: Vec<IpAddr> = NODE_ADDRS.iter().map(|a| a.parse().unwrap()).collect();
    let mut engine = Engine::new("node", &node);
    let mut policies = Vec::new();
    for i in 0..n {
        let name = format!("p{i:04}");
        let mut ports = vec![30000 + i as u16];
        if i + 1 == n {
            ports.extend(BENCH_PORTS);
        }
        policies.push(policy(&name, "server", &ports));
        policies.push(policy(
            &format!("unrelated{i:04}"),
            &format!("nobody{i}"),
            &[80],
        ));
    }
    let namespace: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": NS } })).unwrap();
    engine.load(
        &[namespace],
        [
            pod("client", "client", CLIENT),
            pod("server", "server", SERVER),
        ],
        policies.iter().map(netpol::validate::Policy::from_object),
    );
    let program = engine.program();
    net.replace_policy(program).unwrap();
    assert!(
        net.policy_matches(program).unwrap(),
        "the kernel holds the program"
    );
    let rules: usize = program.chains.values().map(|c| c.rules.len()).sum();
    let elements: usize = program.sets.values().map(|s| s.elems.len()).sum();
    // What a new connection to the server walks: its selection chain's port map (the
    // policies whose ports admit the packet's) and the policies tried one by one.
    let server: IpAddr = SERVER[0].parse().unwrap();
    let at = program
        .sets
        .values()
        .flat_map(|s| &s.elems)
        .find_map(|e| match e {
            Elem::Jump(ip, chain) if *ip == server => program.chains.get(chain),
            _ => None,
        })
        .map(|c| {
            let tried = c
                .rules
                .iter()
                .filter(|r| matches!(r.verdict, Verdict::Jump(_)))
                .count();
            let ranges = c.rules.iter().find_map(|r| match &r.verdict {
                Verdict::PortMap(m) => program.sets.get(m).map(|s| s.elems.len()),
                _ => None,
            });
            format!(
                "; the server's selection chain: a port map of {} ranges, then {tried} \
                 policies tried one by one",
                ranges.unwrap_or(0)
            )
        });
    println!(
        "table: {n} policies selecting the server, {n} unrelated: {} chains, {rules} rules, \
         {elements} elements{}",
        program.chains.len(),
        at.unwrap_or_default()
    );
}

fn serve(port: u16) {
    let listener = TcpListener::bind(("::", port)).unwrap();
    for conn in listener.incoming() {
        drop(conn);
    }
}

fn connect(to: SocketAddr, secs: f64) {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let (mut done, mut buf) = (0u64, [0u8; 16]);
    while Instant::now() < end {
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("connect {to}: {e}"));
        while s.read(&mut buf).is_ok_and(|n| n > 0) {}
        done += 1;
    }
    println!("{:.0}", done as f64 / start.elapsed().as_secs_f64());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["table", netns, what] => table(netns, what),
        ["serve", port] => serve(port.parse().unwrap()),
        ["connect", to, secs] => connect(to.parse().unwrap(), secs.parse().unwrap()),
        _ => {
            eprintln!(
                "usage: netpol-datapath table NETNS none|empty|POLICIES | serve PORT | \
                 connect ADDR:PORT SECONDS"
            );
            std::process::exit(2);
        }
    }
}
