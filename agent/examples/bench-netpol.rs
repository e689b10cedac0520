//! Scale benchmark of NetworkPolicy enforcement (issue 29): `bench-netpol [--nodes N]
//! [--pods P] [--namespaces S] [--policies-per-ns K] [--rounds R]` (default 5,000 nodes,
//! 150,000 pods, 1,000 namespaces, 10 policies each, 11 rounds; root). It starts
//! `stub-apiserver` (built beside this example, its own process) serving that cluster
//! (support/netpol_cluster.rs), runs the agent in-process on the real kernel of a
//! throwaway network namespace `cnirs-bench-netpol-PID` (routes and NetworkPolicy alike,
//! as deployed) and prints:
//!
//! - the time from the agent's start to `cni_rs_netpol_in_place` (the first full
//!   programming: lists, engine, one nf_tables transaction), and the table's size;
//! - the agent process's peak RSS then (VmHWM; the stub is not in it);
//! - per event kind, medians over the rounds: the time from the stub's command (written
//!   to its stdin, applied at once, sent to the open watch) to the agent's transaction
//!   committed, seen as its `last_latency_us` metric being written (set right after the
//!   kernel acknowledged the batch), that metric itself (the watch event's arrival
//!   to the kernel), and its enforce latency (to the commit from which nothing the
//!   change denies passes: a new peer set is filled in a transaction of its own);
//! - once, untimed, a read-back of the kernel's table checking each pod event's elements
//!   are (or are no more) there.
//!
//! Run by scripts/bench-netpol.sh. A benchmark, not a test: it asserts nothing about time.

#[path = "support/netpol_cluster.rs"]
#[allow(dead_code)] // the stub uses the rest
mod netpol_cluster;
#[path = "support/on_panic.rs"]
mod on_panic;

use std::io::Write;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;
use cni_rs_agent::config::Args;
use cni_rs_agent::control::{agent, run};
use cni_rs_agent::kube::api::ListFrom;
use cni_rs_agent::kube::collection::{Namespaces, NetworkPolicies, Pods};
use cni_rs_agent::kube::watcher::Shared;
use cni_rs_agent::policy::PolicyKernel;
use cni_rs_agent::serve::Metrics;
use hostnet::node::{HostNodeNet, NodeNet, PolicyNet};
use netpol::program::{Elem, Program};
use netpol_cluster::{Scale, app_of, namespace, pod_ips, policy, tier_of};

const ME: &str = "me";
const NOT_YET: u64 = u64::MAX;

#[derive(Parser)]
struct Opts {
    #[arg(long, default_value_t = 5000)]
    nodes: u32,
    #[arg(long, default_value_t = 150_000)]
    pods: u32,
    #[arg(long, default_value_t = 1000)]
    namespaces: u32,
    #[arg(long, default_value_t = 10)]
    policies_per_ns: u32,
    #[arg(long, default_value_t = 11)]
    rounds: u32,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            eprintln!("bench-netpol: gave up waiting for {what}");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    start.elapsed()
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix(" kB")?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn loadavg() -> String {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The throwaway namespace (the node), deleted on drop. Its uplink holds 10.255.255.254/16
/// and fd00:ff::fffe/64 so that every stub node is on-link (as in bench-agent).
struct BenchNs(String);

impl BenchNs {
    fn make() -> BenchNs {
        let ns = BenchNs(format!("cnirs-bench-netpol-{}", std::process::id()));
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

    fn host(&self) -> HostNodeNet {
        let handle = sysproc::netns::Netns::open(format!("/run/netns/{}", self.0)).unwrap();
        HostNodeNet::in_netns(&handle).unwrap()
    }
}

impl Drop for BenchNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The stub's process, killed and reaped when dropped (on a panic: `on_panic`).
struct StubProcess(std::process::Child);

impl Drop for StubProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How many of the table's elements name `ip` (set members, map keys, named-port keys).
fn elements_of(program: &Program, ip: IpAddr) -> usize {
    let names = |e: &Elem| match e {
        Elem::Addr(a) | Elem::AddrProtoPort(a, ..) | Elem::Jump(a, _) => *a == ip,
        Elem::Range(_) | Elem::ProtoPorts(..) | Elem::PortJump(..) => false,
    };
    program
        .sets
        .values()
        .map(|s| s.elems.iter().filter(|e| names(e)).count())
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Figures of one event kind over the rounds, per event (ms): to the commit seen, the
/// agent's sync latency, its enforce latency.
#[derive(Default)]
struct Samples(Vec<(f64, f64, f64)>);

fn main() {
    let o = Opts::parse();
    let scale = Scale {
        nodes: o.nodes,
        pods: o.pods,
        namespaces: o.namespaces.max(1),
        policies_per_ns: o.policies_per_ns,
    };
    let load_before = loadavg();
    let dir = std::env::temp_dir().join(format!("cni-rs-bench-netpol-{}", std::process::id()));
    for sub in ["src", "bin", "net.d", "sa", "leases"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    for name in ["bridge", "host-local", "loopback"] {
        std::fs::write(dir.join("src").join(name), format!("#!/bin/false {name}\n")).unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    let stub_at = Instant::now();
    let mut stub = Command::new(exe.parent().unwrap().join("stub-apiserver"))
        .args([
            "127.0.0.1:0".as_ref(),
            dir.join("sa").as_os_str(),
            ME.as_ref(),
            "10.244.0.0/24,fd00:244::/64".as_ref(),
        ])
        .env("STUB_NODES", o.nodes.to_string())
        .env("STUB_NETPOL", scale.env())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map(StubProcess)
        .expect("stub-apiserver (cargo build --example stub-apiserver)");
    // Its content, not the file's existence: the stub may not have written it yet.
    let ready = || std::fs::read_to_string(dir.join("sa/ready")).unwrap_or_default();
    wait_for("the stub", Duration::from_secs(600), || {
        ready().starts_with("https://")
    });
    let stub_ready = stub_at.elapsed();
    let url = ready();
    let d = |p: &str| dir.join(p).display().to_string();
    let args = Args::try_parse_from([
        "cni-rs-agent".to_string(),
        format!("--source-dir={}", d("src")),
        format!("--bin-dir={}", d("bin")),
        format!("--conf-dir={}", d("net.d")),
        format!("--node-name={ME}"),
        format!("--api-server={url}"),
        format!("--token-file={}", d("sa/token")),
        format!("--ca-file={}", d("sa/ca.crt")),
        format!("--ipam-data-dir={}", d("leases")),
        "--interval=3600".into(),
        "--health-listen=127.0.0.1:0".into(),
    ])
    .unwrap();
    let ns = BenchNs::make();
    on_panic::clean_up(vec![ns.0.clone(), format!("{}-w", ns.0)], stub.0.id());
    // One kernel for both loops, as the agent's main makes it (run.rs).
    let (net, reader) = (Arc::new(ns.host()), ns.host());
    let installer = cni_rs_agent::files::Installer::new(&args).unwrap();
    let client = run::client(&args).unwrap();
    let shared = Arc::new(Shared::default());
    let metrics = Arc::new(Metrics::default());
    let p = &metrics.policy;
    let mut stdin = stub.0.stdin.take().unwrap();

    std::thread::scope(|s| {
        let start = Instant::now();
        {
            let (shared, metrics, args, installer, net) =
                (shared.clone(), metrics.clone(), &args, &installer, &net);
            let addrs = net.clone();
            // The conntrack dump on a socket of its own, as run.rs makes it.
            let dumper = ns.host();
            let policy = PolicyKernel {
                net: Box::new(net.clone()),
                local_addrs: Box::new(move || addrs.local_addrs()),
                conntrack: Arc::new(move || dumper.conntrack()),
            };
            s.spawn(move || {
                let routes: &dyn NodeNet = &**net;
                agent::run(
                    args,
                    installer,
                    client,
                    Some(routes),
                    Some(policy),
                    shared,
                    metrics,
                )
            });
        }
        wait_for("the first programming", Duration::from_secs(1800), || {
            p.in_place.load(Ordering::Acquire)
        });
        let first = start.elapsed();
        let (hwm, rss) = (status_kib("VmHWM:"), status_kib("VmRSS:"));
        let (chains, rules, elements) = (
            p.chains.load(Ordering::Relaxed),
            p.rules.load(Ordering::Relaxed),
            p.set_elements.load(Ordering::Relaxed),
        );
        let read_at = Instant::now();
        let held = reader.read_policy().unwrap().expect("our table, readable");
        let read_back = read_at.elapsed();
        let held_elements: usize = held.sets.values().map(|s| s.elems.len()).sum();
        assert_eq!(
            held_elements as u64, elements,
            "the kernel holds the program's elements"
        );

        // One command to the stub; the time until the agent's transaction for it is
        // committed (its latency metric written), and that metric.
        let mut event = |cmd: String| -> (f64, f64, f64) {
            p.last_latency_us.store(NOT_YET, Ordering::SeqCst);
            let at = Instant::now();
            writeln!(stdin, "{cmd}").unwrap();
            stdin.flush().unwrap();
            wait_for(&cmd, Duration::from_secs(120), || {
                p.last_latency_us.load(Ordering::SeqCst) != NOT_YET
            });
            let took = at.elapsed();
            (
                ms(took),
                p.last_latency_us.load(Ordering::SeqCst) as f64 / 1e3,
                p.last_enforce_latency_us.load(Ordering::SeqCst) as f64 / 1e3,
            )
        };
        let put = |kind: &str, v: serde_json::Value| format!("object {kind} {v}");
        let pod_json = |i: u32, app: u32, tier: u32| put("pod", scale.pod(ME, i, app, tier));
        let del_pod = |i: u32| format!("delete pod ns{} pod{i}", scale.namespace_of(i));
        // Fresh pods beyond the listed ones: this node's with an even app (selected by
        // a policy), remote ones of tier t1 in the namespace of a selected local pod.
        let mut fresh = scale.pods;
        let mut next = |want: &dyn Fn(u32) -> bool| {
            let i = (fresh..).find(|&i| want(i)).unwrap();
            fresh = i + 1;
            i
        };
        let anchor = (0..scale.pods)
            .find(|&i| {
                scale.node_of(i) == 0
                    && app_of(i).is_multiple_of(2)
                    && app_of(i) / 2 < scale.policies_per_ns
            })
            .expect("a pod on this node selected by a policy (more pods?)");
        let anchor_ns = scale.namespace_of(anchor);
        let anchor_policy = app_of(anchor) / 2;
        // (what, summary key, goal)
        let kinds = [
            ("local pod start", "local_start", "goal <= 10 ms"),
            ("local pod relabelled", "local_relabel", "goal <= 10 ms"),
            ("local pod end", "local_end", "goal <= 10 ms"),
            ("remote pod start", "remote_start", "goal <= 10 ms"),
            ("remote pod relabelled", "remote_relabel", "goal <= 10 ms"),
            ("remote pod end", "remote_end", "goal <= 10 ms"),
            ("policy changed (a port)", "policy_port", "goal <= 50 ms"),
            ("policy changed back", "policy_back", "goal <= 50 ms"),
            ("policy added", "policy_add", "goal <= 50 ms"),
            ("policy deleted", "policy_del", "goal <= 50 ms"),
            ("namespace relabelled", "ns_relabel", ""),
            ("namespace relabelled back", "ns_back", ""),
        ];
        let mut samples: Vec<Samples> = kinds.iter().map(|_| Samples::default()).collect();
        let mut checks = Vec::new();
        let ip = |i: u32| -> IpAddr { pod_ips(i).0.parse().unwrap() };
        let held_of = |i: u32| elements_of(&reader.read_policy().unwrap().unwrap(), ip(i));
        for round in 0..o.rounds {
            let check = round == 0;
            let mut record = |k: usize, f: (f64, f64, f64)| samples[k].0.push(f);
            let l = next(&|i| {
                scale.node_of(i) == 0
                    && app_of(i).is_multiple_of(2)
                    && app_of(i) / 2 < scale.policies_per_ns
            });
            let (app, tier) = (app_of(l), tier_of(l));
            record(0, event(pod_json(l, app, tier)));
            if check {
                checks.push(("local pod start", held_of(l)));
            }
            let other = (app + 2) % (2 * scale.policies_per_ns.clamp(1, 10));
            record(1, event(pod_json(l, other, tier)));
            record(2, event(del_pod(l)));
            if check {
                checks.push(("local pod end (0 wanted)", held_of(l)));
            }
            let r = next(&|i| {
                scale.node_of(i) != 0 && scale.namespace_of(i) == anchor_ns && tier_of(i) == 1
            });
            record(3, event(pod_json(r, app_of(r), 1)));
            if check {
                checks.push(("remote pod start", held_of(r)));
            }
            record(4, event(pod_json(r, app_of(r), 2)));
            record(5, event(del_pod(r)));
            if check {
                checks.push(("remote pod end (0 wanted)", held_of(r)));
            }
            record(
                6,
                event(put("networkpolicy", policy(anchor_ns, anchor_policy, 81))),
            );
            record(
                7,
                event(put("networkpolicy", policy(anchor_ns, anchor_policy, 80))),
            );
            let mut added = policy(anchor_ns, anchor_policy, 82);
            added["metadata"]["name"] = format!("bench-{round}").into();
            record(8, event(put("networkpolicy", added)));
            record(
                9,
                event(format!("delete networkpolicy ns{anchor_ns} bench-{round}")),
            );
            let team = anchor_ns % 7;
            record(
                10,
                event(put("namespace", namespace(anchor_ns, (team + 1) % 7))),
            );
            record(11, event(put("namespace", namespace(anchor_ns, team))));
        }
        let load_after = loadavg();

        // What the first programming is made of, measured apart after the rest (so the
        // peak RSS above is the agent's alone).
        let lists = run::client(&args).unwrap();
        let at = Instant::now();
        let pods = lists.list_of::<Pods>(&ListFrom::Cache).unwrap().items;
        let list_pods = at.elapsed();
        let at = Instant::now();
        let namespaces = lists.list_of::<Namespaces>(&ListFrom::Cache).unwrap().items;
        let policies = lists
            .list_of::<NetworkPolicies>(&ListFrom::Cache)
            .unwrap()
            .items;
        let list_rest = at.elapsed();
        let at = Instant::now();
        let mut engine = netpol::engine::Engine::new(ME, &[]);
        engine.load(&namespaces, pods, policies);
        let engine_load = at.elapsed();
        // Its name is known to `on_panic::clean_up`.
        let empty = BenchNs(format!("{}-w", ns.0));
        let _ = Command::new("ip").args(["netns", "add", &empty.0]).status();
        let at = Instant::now();
        empty.host().replace_policy(engine.program()).unwrap();
        let kernel_write = at.elapsed();
        drop(empty);

        println!(
            "cluster: {} nodes (+ this one), {} pods, {} namespaces, {} policies; real kernel, in a namespace",
            o.nodes,
            o.pods,
            scale.namespaces,
            scale.namespaces * o.policies_per_ns
        );
        println!("load average (1/5/15 min): {load_before} before, {load_after} after");
        println!(
            "stub ready (objects made): {:.2} s",
            stub_ready.as_secs_f64()
        );
        println!(
            "first full programming: {:.3} s from the agent's start to netpol in place (goal <= 2 s); \
             table: {chains} chains, {rules} rules, {elements} set elements",
            first.as_secs_f64()
        );
        println!(
            "  apart: list of pods {:.3} s, namespaces + policies {:.3} s, engine load {:.3} s, \
             one transaction of the whole table into an empty namespace {:.3} s, read-back {:.3} s",
            list_pods.as_secs_f64(),
            list_rest.as_secs_f64(),
            engine_load.as_secs_f64(),
            kernel_write.as_secs_f64(),
            read_back.as_secs_f64()
        );
        println!(
            "agent peak RSS after the first programming: VmHWM {:.1} MiB, VmRSS {:.1} MiB \
             (goal <= 150 MiB; routes of {} nodes included, the stub is its own process)",
            hwm as f64 / 1024.0,
            rss as f64 / 1024.0,
            o.nodes
        );
        for (what, n) in &checks {
            println!("kernel read-back after {what}: {n} elements name the pod");
        }
        let mut summary = vec![
            format!("first_s={:.3}", first.as_secs_f64()),
            format!("hwm_mib={:.1}", hwm as f64 / 1024.0),
            format!("rss_mib={:.1}", rss as f64 / 1024.0),
            format!("elements={elements}"),
        ];
        println!(
            "events (median of {} rounds): to commit seen / agent's metric / to enforced \
             (what the change denies denied; new peer sets are filled after)",
            o.rounds
        );
        for (k, (what, key, goal)) in kinds.iter().enumerate() {
            let v = &samples[k].0;
            let seen = median(v.iter().map(|x| x.0).collect());
            let metric = median(v.iter().map(|x| x.1).collect());
            let enforced = median(v.iter().map(|x| x.2).collect());
            println!("  {what:<26} {seen:>8.2} ms  {metric:>8.2} ms  {enforced:>8.2} ms  {goal}");
            summary.push(format!("{key}_ms={seen:.2}"));
            summary.push(format!("{key}_agent_ms={metric:.2}"));
            summary.push(format!("{key}_enforced_ms={enforced:.2}"));
        }
        println!("summary {}", summary.join(" "));
        shared.request_stop(0);
    });
    drop(stub);
    drop(ns);
    let _ = std::fs::remove_dir_all(&dir);
    // The agent's loops are detached threads: end here.
    std::process::exit(0);
}
