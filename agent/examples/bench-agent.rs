//! Scale benchmark of the node agent (issue 20): `bench-agent [NODES] [--kernel]` (default
//! 5000) starts `stub-apiserver` (built beside this example) with NODES other nodes, runs
//! the agent in-process and prints the list's time, the first full reconcile's time, for
//! added and deleted Nodes (21 each, medians) the time from the stub's event to the route
//! in the kernel (a route lookup polled beside the agent) and to the end of the agent's
//! pass (firewall and conflist included), the changes made per event and the agent
//! process's peak RSS (the stub runs in its own process).
//!
//! The kernel: hostnet's FakeNodeNet (the control loop's own cost), or with `--kernel`
//! (root) the real one, in a throwaway network namespace `cnirs-bench-agent-PID` whose
//! veth holds 10.255.255.254/16 and fd00:ff::fffe/64, so every stub node is on-link.
//! Run by scripts/bench-agent.sh. A benchmark, not a test: it asserts nothing about time.

#[path = "support/on_panic.rs"]
mod on_panic;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;
use cni_rs_agent::config::Args;
use cni_rs_agent::control::{agent, run};
use cni_rs_agent::kube::watcher::Shared;
use cni_rs_agent::serve::Metrics;
use hostnet::node::fake::FakeNodeNet;
use hostnet::node::{HostNodeNet, NodeNet, PodRoute};

/// Nodes added (and deleted again) one at a time after the first reconcile (more with
/// BENCH_AGENT_EVENTS, e.g. under a profiler; at most 250).
fn events() -> u32 {
    std::env::var("BENCH_AGENT_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .map_or(21, |n: u32| n.clamp(1, 250))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            eprintln!("bench-agent: gave up waiting for {what}");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    start.elapsed()
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmHWM:")?
                .trim()
                .strip_suffix(" kB")?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The throwaway namespace of `--kernel`, deleted on drop.
struct BenchNs(String);

impl BenchNs {
    fn make() -> BenchNs {
        let ns = BenchNs(format!("cnirs-bench-agent-{}", std::process::id()));
        let ip = |args: &[&str]| {
            let ok = Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip {}", args.join(" "));
        };
        ip(&["netns", "add", &ns.0]);
        for cmd in [
            "link set lo up",
            "link add uplink type veth peer name uplink-peer",
            "addr add 10.255.255.254/16 dev uplink",
            "addr add fd00:ff::fffe/64 dev uplink nodad",
            "link set uplink up",
            "link set uplink-peer up",
        ] {
            let mut args = vec!["-n", &ns.0];
            args.extend(cmd.split(' '));
            ip(&args);
        }
        ns
    }
}

impl Drop for BenchNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let kernel = argv.iter().any(|a| a == "--kernel");
    let nodes: u32 = argv.iter().find_map(|n| n.parse().ok()).unwrap_or(5000);
    let dir = std::env::temp_dir().join(format!("cni-rs-bench-agent-{}", std::process::id()));
    for sub in ["src", "bin", "net.d", "sa", "leases"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    for name in ["bridge", "host-local", "loopback"] {
        std::fs::write(dir.join("src").join(name), format!("#!/bin/false {name}\n")).unwrap();
    }
    let stub = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .join("stub-apiserver");
    let mut stub = Command::new(stub)
        .args([
            "127.0.0.1:0".as_ref(),
            dir.join("sa").as_os_str(),
            "me".as_ref(),
            "10.244.0.0/24,fd00:244::/64".as_ref(),
        ])
        .env("STUB_NODES", nodes.to_string())
        .stdin(Stdio::piped())
        // Not this process's stdout: a stub that outlived it would hold the script's pipe.
        .stdout(Stdio::null())
        .spawn()
        .map(StubProcess)
        .expect("stub-apiserver (cargo build --example stub-apiserver)");
    wait_for("the stub", Duration::from_secs(60), || {
        dir.join("sa/ready").exists()
    });
    let url = std::fs::read_to_string(dir.join("sa/ready")).unwrap();
    let d = |p: &str| dir.join(p).display().to_string();
    let args = Args::try_parse_from([
        "cni-rs-agent".to_string(),
        format!("--source-dir={}", d("src")),
        format!("--bin-dir={}", d("bin")),
        format!("--conf-dir={}", d("net.d")),
        "--node-name=me".into(),
        format!("--api-server={url}"),
        format!("--token-file={}", d("sa/token")),
        format!("--ca-file={}", d("sa/ca.crt")),
        format!("--ipam-data-dir={}", d("leases")),
        "--interval=3600".into(),
        "--health-listen=127.0.0.1:0".into(),
    ])
    .unwrap();
    // The stub's nodes are on 10.255.0.0/16 and fd00:ff::/64 (see stub-apiserver).
    let fake = FakeNodeNet::new(
        vec![
            "10.255.0.0/16".parse().unwrap(),
            "fd00:ff::/64".parse().unwrap(),
        ],
        vec!["10.255.255.254".parse().unwrap()],
    );
    let bench_ns = kernel.then(BenchNs::make);
    on_panic::clean_up(bench_ns.iter().map(|n| n.0.clone()).collect(), stub.id());
    let host = bench_ns.as_ref().map(|ns| {
        let handle = sysproc::netns::Netns::open(format!("/run/netns/{}", ns.0)).unwrap();
        HostNodeNet::in_netns(&handle).unwrap()
    });
    // Where the route to one destination is ours: the event's own figure, polled apart
    // from the agent's pass (a lookup, not a dump).
    let lookup = bench_ns.as_ref().map(|ns| {
        let handle = sysproc::netns::Netns::open(format!("/run/netns/{}", ns.0)).unwrap();
        hostnet::netlink::Netlink::in_netns(&handle).unwrap()
    });
    let routed = |dst: &str| -> bool {
        let dst: ipnetwork::IpNetwork = dst.parse().unwrap();
        match &lookup {
            Some(nl) => nl
                .route_to(dst.network(), true)
                .is_ok_and(|r| r.dst == dst && r.gateway.is_some()),
            None => fake.with(|s| PodRoute::first_to(&s.ours, &dst).is_some()),
        }
    };
    let net: &(dyn NodeNet + Sync) = match &host {
        Some(h) => h,
        None => &fake,
    };
    let installer = cni_rs_agent::files::Installer::new(&args).unwrap();
    let client = run::client(&args).unwrap();
    let shared = Arc::new(Shared::default());
    let metrics = Arc::new(Metrics::default());
    let want = 2 * nodes as usize;
    let routes = || net.our_routes().map_or(0, |r| r.len());
    let ops = || fake.with(|s| std::mem::take(&mut s.log));
    // The list alone (the API server's and the decoder's part), once before the agent's.
    let list_at = Instant::now();
    let listed = run::client(&args)
        .unwrap()
        .list(&cni_rs_agent::kube::api::ListFrom::Cache)
        .unwrap()
        .items
        .len();
    let list = list_at.elapsed();
    let passes = || metrics.reconciles.load(Ordering::Relaxed);
    let pass_ms = || metrics.last_reconcile_us.load(Ordering::Relaxed) as f64 / 1e3;
    std::thread::scope(|s| {
        let start = Instant::now();
        let runner = {
            let (shared, metrics, args, installer) =
                (shared.clone(), metrics.clone(), &args, &installer);
            s.spawn(move || agent::run(args, installer, client, Some(net), None, shared, metrics))
        };
        wait_for("the first reconcile", Duration::from_secs(600), || {
            passes() >= 1
        });
        let first = start.elapsed();
        let first_pass = pass_ms();
        assert_eq!(routes(), want, "routes after the first reconcile");
        ops();
        let mut stdin = stub.stdin.take().unwrap();
        // One event: the stub's command, then the agent's pass that follows it.
        // One event: the stub's command; the time until the route to `dst` is (or is no
        // more) in the kernel, then until the end of the agent's pass.
        let mut event = |cmd: &str, dst: &str, routes_after: usize| {
            let before = passes();
            let present = !routed(dst);
            let at = Instant::now();
            writeln!(stdin, "{cmd}").unwrap();
            stdin.flush().unwrap();
            while routed(dst) != present {
                assert!(
                    at.elapsed() < Duration::from_secs(60),
                    "{cmd}: no route change"
                );
                // Not faster: the poller would take a core from the agent and the stub.
                std::thread::sleep(Duration::from_micros(250));
            }
            let route = at.elapsed();
            wait_for(cmd, Duration::from_secs(60), || passes() > before);
            let took = at.elapsed();
            assert_eq!(routes(), routes_after, "routes after {cmd}");
            (route, took, pass_ms(), ops())
        };
        // `events` added Nodes, each deleted again: medians (the machine is noisy).
        let events = events();
        let (mut adds, mut dels) = (Vec::new(), Vec::new());
        let (mut add_ops, mut del_ops) = (Vec::new(), Vec::new());
        for k in 0..events {
            let (a, add_ops_k) = {
                let (route, took, pass, o) = event(
                    &format!(
                        "put node-new-{k} 10.250.{k}.0/24,fd02:{k:x}::/64 \
                         10.255.250.{},fd00:ff::fa{:02x}",
                        k + 1,
                        k + 1
                    ),
                    &format!("10.250.{k}.0/24"),
                    want + 2,
                );
                ((route, took, pass), o)
            };
            let (d, del_ops_k) = {
                let (route, took, pass, o) = event(
                    &format!("del node-new-{k}"),
                    &format!("10.250.{k}.0/24"),
                    want,
                );
                ((route, took, pass), o)
            };
            if k == 0 {
                (add_ops, del_ops) = (add_ops_k, del_ops_k);
            }
            adds.push(a);
            dels.push(d);
        }
        let median = |v: &[(Duration, Duration, f64)], f: fn(&(Duration, Duration, f64)) -> f64| {
            let mut x: Vec<f64> = v.iter().map(f).collect();
            x.sort_by(f64::total_cmp);
            x[x.len() / 2]
        };
        let (add_route, add, add_pass) = (
            median(&adds, |e| ms(e.0)),
            median(&adds, |e| ms(e.1)),
            median(&adds, |e| e.2),
        );
        let (del_route, del, del_pass) = (
            median(&dels, |e| ms(e.0)),
            median(&dels, |e| ms(e.1)),
            median(&dels, |e| e.2),
        );
        let kind = if kernel {
            "real kernel, in a namespace"
        } else {
            "fake kernel"
        };
        println!("nodes: {nodes} (+1 this node), routes: {want}, {kind}");
        println!("list alone: {:.3} s ({listed} nodes)", list.as_secs_f64());
        println!(
            "first full reconcile: {:.3} s (start -> list -> every route and the firewall \
             in place; the reconcile pass itself: {first_pass:.1} ms)",
            first.as_secs_f64()
        );
        for (what, route, took, pass) in [
            ("added", add_route, add, add_pass),
            ("deleted", del_route, del, del_pass),
        ] {
            println!(
                "one node {what} (median of {events}): {route:.2} ms from the event to its \
                 IPv4 route in the kernel, {took:.2} ms to the end of its pass (the pass: \
                 {pass:.2} ms)"
            );
        }
        if !kernel {
            println!("changes for the add: {} {add_ops:?}", add_ops.len());
            println!("changes for the delete: {} {del_ops:?}", del_ops.len());
        }
        let rss = peak_rss_kib() as f64 / 1024.0;
        println!("agent peak RSS (VmHWM, the fake kernel's state included): {rss:.1} MiB");
        // One line for scripts/bench-agent.sh's medians.
        println!(
            "summary list_s={:.3} first_s={:.3} first_pass_ms={first_pass:.1} \
             add_route_ms={add_route:.2} add_ms={add:.2} add_pass_ms={add_pass:.2} \
             del_route_ms={del_route:.2} del_ms={del:.2} del_pass_ms={del_pass:.2} \
             rss_mib={rss:.1}",
            list.as_secs_f64(),
            first.as_secs_f64(),
        );
        shared.request_stop(0);
        runner.join().unwrap().unwrap();
    });
    drop(stub);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The stub's process, killed and reaped when dropped (on a panic: `on_panic`).
struct StubProcess(std::process::Child);

impl std::ops::Deref for StubProcess {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for StubProcess {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for StubProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
