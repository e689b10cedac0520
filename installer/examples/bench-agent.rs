//! Scale benchmark of the node agent (issue 20): `bench-agent [NODES]` (default 5000)
//! starts `stub-apiserver` (built beside this example) with NODES other nodes, runs the
//! agent in-process on hostnet's FakeNodeNet (the control loop's own cost: the kernel's
//! is not in it) and prints the first full reconcile's time (list included), the time
//! from one added and one deleted Node to the route's change, the changes made per event
//! and the agent process's peak RSS (the stub runs in its own process).
//! Run by scripts/bench-agent.sh. A benchmark, not a test: it asserts nothing about time.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use cni_install::config::Args;
use cni_install::health::Metrics;
use cni_install::watcher::Shared;
use cni_install::{agent, run};
use hostnet::node::NodeNet;
use hostnet::node::fake::FakeNodeNet;

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

fn main() {
    let nodes: u32 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5000);
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
        .spawn()
        .expect("stub-apiserver (cargo build --example stub-apiserver)");
    wait_for("the stub", Duration::from_secs(60), || {
        dir.join("sa/ready").exists()
    });
    let url = std::fs::read_to_string(dir.join("sa/ready")).unwrap();
    let d = |p: &str| dir.join(p).display().to_string();
    let args = Args::try_parse_from([
        "cni-install".to_string(),
        format!("--source-dir={}", d("src")),
        format!("--bin-dir={}", d("bin")),
        format!("--conf-dir={}", d("net.d")),
        "--node-name=me".into(),
        format!("--api-server={url}"),
        format!("--token-file={}", d("sa/token")),
        format!("--ca-file={}", d("sa/ca.crt")),
        format!("--ipam-data-dir={}", d("leases")),
        "--mtu=1400".into(),
        "--interval=3600".into(),
        "--health-listen=127.0.0.1:0".into(),
    ])
    .unwrap();
    // The stub's nodes are on 10.255.0.0/16 and fd00:ff::/64 (see stub-apiserver).
    let net = FakeNodeNet::new(
        vec![
            "10.255.0.0/16".parse().unwrap(),
            "fd00:ff::/64".parse().unwrap(),
        ],
        vec!["10.255.255.254".parse().unwrap()],
    );
    let installer = run::Installer::new(&args).unwrap();
    let client = run::client(&args).unwrap();
    let shared = Arc::new(Shared::default());
    let metrics = Arc::new(Metrics::default());
    let want = 2 * nodes as usize;
    let routes = || net.with(|s| s.ours.len());
    std::thread::scope(|s| {
        let start = Instant::now();
        let runner = {
            let (shared, metrics, args, installer, net) =
                (shared.clone(), metrics.clone(), &args, &installer, &net);
            s.spawn(move || {
                agent::run(
                    args,
                    installer,
                    client,
                    Some(net as &dyn NodeNet),
                    shared,
                    metrics,
                )
            })
        };
        wait_for("the first reconcile", Duration::from_secs(600), || {
            routes() == want
        });
        let first = start.elapsed();
        // The rest of that pass (the firewall table after the routes) before the events.
        let passes = || {
            metrics
                .reconciles
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        wait_for("the first pass's end", Duration::from_secs(60), || {
            passes() >= 1
        });
        let reconciles = passes();
        net.with(|s| s.log.clear());
        let mut stdin = stub.stdin.take().unwrap();
        let add_at = Instant::now();
        writeln!(
            stdin,
            "put node-new 10.250.0.0/24,fd02::/64 10.255.250.1,fd00:ff::fa01"
        )
        .unwrap();
        stdin.flush().unwrap();
        wait_for("the added node's routes", Duration::from_secs(60), || {
            routes() == want + 2
        });
        let add = add_at.elapsed();
        std::thread::sleep(Duration::from_millis(200));
        let add_ops = net.with(|s| std::mem::take(&mut s.log));
        let del_at = Instant::now();
        writeln!(stdin, "del node-bench-1").unwrap();
        stdin.flush().unwrap();
        wait_for(
            "the deleted node's routes gone",
            Duration::from_secs(60),
            || routes() == want,
        );
        let del = del_at.elapsed();
        std::thread::sleep(Duration::from_millis(200));
        let del_ops = net.with(|s| std::mem::take(&mut s.log));
        println!("nodes: {nodes} (+1 this node), routes: {want}");
        println!(
            "first full reconcile (start -> all routes, list included): {:.3} s ({reconciles} reconcile(s))",
            first.as_secs_f64()
        );
        println!(
            "one node added -> its 2 routes in the fake kernel: {:.2} ms",
            add.as_secs_f64() * 1e3
        );
        println!(
            "one node deleted -> its 2 routes gone: {:.2} ms",
            del.as_secs_f64() * 1e3
        );
        println!("changes for the add: {} {add_ops:?}", add_ops.len());
        println!("changes for the delete: {} {del_ops:?}", del_ops.len());
        println!(
            "agent peak RSS (VmHWM, fake kernel's state included): {:.1} MiB",
            peak_rss_kib() as f64 / 1024.0
        );
        shared.request_stop(0);
        runner.join().unwrap().unwrap();
    });
    let _ = stub.kill();
    let _ = stub.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
