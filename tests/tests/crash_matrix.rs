//! Crash at every step (issue 10, section 1): for each fault-injection point of bridge ADD
//! and DEL and of host-local ADD and DEL (the `sysproc::step` points, in binaries built with
//! the `fault-injection` feature into `target/faults`), and for both actions (`kill`: SIGKILL
//! there; `fail`: the step returns an error), run the operation with the fault, then what a
//! runtime does next, then check that nothing of the container is left and that it can be
//! attached again.
//!
//! The runtime's sequence: DEL with the cached result as prevResult when the faulty ADD
//! printed one (a killed ADD printed none), DEL again without prevResult and with an empty
//! CNI_NETNS, then GC listing only a bystander attachment made after the fault. A failed
//! (not killed) ADD must also have undone itself before any DEL. Each kill also runs in a
//! variant where the runtime removes the container's netns before its DEL (the pod sandbox
//! went with the crash).
//!
//! Run alone: `cargo test -p cni-tests --test crash_matrix -- --nocapture`
//! (`CRASH_MATRIX_ONLY=<text>` runs the cases whose name contains it).

#[path = "bridge_support/mod.rs"]
mod support;

use std::net::IpAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cni_tests::{NamedNetns, PluginOutput, bin_dir};
use host_local::store::Store;
use host_local::store::disk::DiskStore;
use hostnet::firewall::names;
use serde_json::{Value, json};
use support::*;
use testkit::privileged;

/// Dual stack: masquerade and gateways run one batch or step per family.
const SUBNETS: [&str; 2] = ["10.1.20.0/24", "fd00:20::/64"];
/// Cases run at the same time, each in its own namespaces and dataDir.
const WORKERS: usize = 4;

const BRIDGE_ADD: &[&str] = &[
    "bridge.bridge-created",
    "bridge.veth-created",
    "bridge.port-options-set",
    "bridge.spoofcheck-set",
    "bridge.ipam-added",
    "bridge.container-addresses",
    "bridge.routes",
    "bridge.gateway-addresses",
    "bridge.forwarding",
    "firewall.iptables-family-set",
    "bridge.ipmasq-set",
    "bridge.result-ready",
];
const BRIDGE_DEL: &[&str] = &[
    "bridge.links-deleted",
    "bridge.ipam-released",
    "bridge.spoofcheck-removed",
    "firewall.iptables-family-removed",
    "bridge.ipmasq-removed",
];
const HOST_LOCAL_ADD: &[&str] = &[
    "host-local.lock-taken",
    "host-local.lease-created",
    "host-local.lease-written",
    "host-local.last-reserved-written",
    "host-local.index-written",
];
const HOST_LOCAL_DEL: &[&str] = &[
    "host-local.lock-taken",
    "host-local.lease-removed",
    "host-local.index-written",
];
/// Masquerade steps: these run with both backends, the others with iptables.
const FIREWALL_STEPS: &[&str] = &["bridge.ipmasq-set", "bridge.ipmasq-removed"];

#[derive(Debug, Clone)]
struct Case {
    /// "add" or "del": the verb the fault hits.
    verb: &'static str,
    point: &'static str,
    action: &'static str,
    backend: &'static str,
    /// After the kill the runtime removes the container's netns before it runs DEL.
    netns_gone: bool,
}

impl Case {
    fn step(&self) -> String {
        format!("{}.{}", self.verb, self.point)
    }

    fn name(&self) -> String {
        let gone = if self.netns_gone { ", netns gone" } else { "" };
        format!("{}:{} ({}{gone})", self.step(), self.action, self.backend)
    }

    /// The point is in the bridge process (its own steps and the firewall's).
    fn in_bridge(&self) -> bool {
        !self.point.starts_with("host-local.")
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (verb, points) in [
        ("add", BRIDGE_ADD),
        ("add", HOST_LOCAL_ADD),
        ("del", BRIDGE_DEL),
        ("del", HOST_LOCAL_DEL),
    ] {
        for point in points {
            let backends: &[&str] = if FIREWALL_STEPS.contains(point) {
                &["iptables", "nftables"]
            } else {
                &["iptables"]
            };
            for backend in backends {
                for (action, netns_gone) in [("kill", false), ("fail", false), ("kill", true)] {
                    out.push(Case {
                        verb,
                        point,
                        action,
                        backend,
                        netns_gone,
                    });
                }
            }
        }
    }
    out
}

/// bridge and host-local built with working fault points, beside (never instead of) the
/// normal binaries: `target/faults/debug/`.
fn fault_bins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = bin_dir()
            .parent()
            .expect("the profile dir has a parent")
            .join("faults");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--bins", "-p", "bridge", "-p", "host-local"])
            .args([
                "--features",
                "bridge/fault-injection,host-local/fault-injection",
            ])
            .arg("--target-dir")
            .arg(&target)
            .status()
            .expect("running cargo");
        assert!(status.success(), "building the fault-injection binaries");
        target.join("debug")
    })
}

#[test]
#[ignore = "needs root"]
fn crash_at_every_step() {
    if !privileged("crash_at_every_step") {
        return;
    }
    let only = std::env::var("CRASH_MATRIX_ONLY").unwrap_or_default();
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.name().contains(&only))
        .collect();
    assert!(!cases.is_empty(), "no case matches {only:?}");
    let bins = fault_bins();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(n) else { break };
                    let outcome =
                        std::panic::catch_unwind(|| run_case(bins, n, case)).map_err(|e| {
                            e.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default()
                        });
                    if let Err(msg) = outcome {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{}: {msg}", case.name()));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let steps: std::collections::BTreeSet<String> = cases.iter().map(Case::step).collect();
    println!(
        "crash matrix: {} cases run ({} steps x {{kill, fail, kill with the netns gone}}, masquerade steps x {{iptables, nftables}}), {} failed",
        cases.len(),
        steps.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn run_case(bins: &Path, n: usize, case: &Case) {
    let env = Env::with_plugins(
        &format!("crash{n}"),
        bins.join("bridge"),
        bins.join("host-local"),
    );
    let conf = env.conf(
        "1.1.0",
        &SUBNETS,
        json!({"ipMasq": true, "ipMasqBackend": case.backend, "macspoofchk": true}),
    );
    let mut ctr = NamedNetns::new("ctr");
    let by_ctr = NamedNetns::new("by");
    let id = format!("crash{n}-ctr");
    let by = format!("crash{n}-by");
    let fired_log = env.data.join("fired");
    let faulty = |cmd: &str, ctr: &NamedNetns, conf: &Value| {
        env.plugin(cmd, ctr.path().to_str().unwrap(), &id, conf)
            .env("CNI_RS_FAULT", format!("{}:{}", case.step(), case.action))
            .env("CNI_RS_FAULT_LOG", &fired_log)
            .run_in(&env.host)
    };

    // The runtime's cached result for the container, if the faulty verb left one.
    let (cached, by_result) = if case.verb == "add" {
        let out = faulty("ADD", &ctr, &conf);
        check_fault(case, &out, &fired_log);
        if !out.success() && case.action == "fail" {
            // A failed ADD undoes itself, before any DEL.
            assert_container_gone(&env, &ctr, &id, &[]);
        }
        let cached = out.success().then(|| out.json());
        (cached, env.add(&by_ctr, &by, &conf))
    } else {
        let result = env.add(&ctr, &id, &conf);
        let by_result = env.add(&by_ctr, &by, &conf);
        let out = faulty("DEL", &ctr, &with_prev(&conf, &result));
        check_fault(case, &out, &fired_log);
        (Some(result), by_result)
    };

    // What the runtime does next.
    let ctr_path = ctr.path().to_str().unwrap().to_string();
    if case.netns_gone {
        // The pod sandbox is gone: its netns took the veth pair with it (the kernel
        // dismantles a namespace asynchronously). A fresh one serves the next ADD.
        ctr = NamedNetns::new("ctr");
        wait_for_veths_gone(&env, &[&by_result]);
    }
    let del_conf = cached
        .as_ref()
        .map_or(conf.clone(), |r| with_prev(&conf, r));
    env.plugin("DEL", &ctr_path, &id, &del_conf)
        .run_in(&env.host)
        .assert_success();
    env.plugin("DEL", "", &id, &conf)
        .run_in(&env.host)
        .assert_success();
    let gc = merge(
        conf.clone(),
        json!({"cni.dev/valid-attachments": [{"containerID": by, "ifname": IFNAME}]}),
    );
    env.plugin("GC", "", "", &gc)
        .run_in(&env.host)
        .assert_success();

    assert_container_gone(&env, &ctr, &id, &[&by_result]);
    env.run("CHECK", &by_ctr, &by, &with_prev(&conf, &by_result))
        .assert_success();

    // The same container attaches again, with an address that works.
    let again = env.add(&ctr, &id, &conf);
    for ip in again["ips"].as_array().unwrap() {
        let gw = ip["gateway"].as_str().unwrap();
        assert!(
            ping(&ctr, gw),
            "re-added container cannot ping its gateway {gw}"
        );
    }
    env.del(&ctr, &id, &with_prev(&conf, &again));
    env.del(&by_ctr, &by, &with_prev(&conf, &by_result));
    env.assert_clean_with(&ctr);
}

/// Whether `ip` lies in `subnet` (`addr/prefix`).
fn in_subnet(ip: IpAddr, subnet: &str) -> bool {
    let (net, prefix) = subnet.split_once('/').unwrap();
    let prefix: u32 = prefix.parse().unwrap();
    match (ip, net.parse().unwrap()) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Waits (at most 10 s) until the host has no veth but those of `keep`.
fn wait_for_veths_gone(env: &Env, keep: &[&Value]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !host_veths(env, keep).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The host's links but lo, the bridge and the host ends of `keep`'s results.
fn host_veths(env: &Env, keep: &[&Value]) -> Vec<String> {
    let kept: Vec<&str> = keep
        .iter()
        .map(|r| r["interfaces"][1]["name"].as_str().unwrap())
        .collect();
    env.links()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .filter(|n| n != "lo" && n != BRIDGE && !kept.contains(&n.as_str()))
        .collect()
}

/// The fault was injected (a misspelt step would match nothing and prove nothing), and a
/// killed bridge died by SIGKILL.
fn check_fault(case: &Case, out: &PluginOutput, log: &Path) {
    let fired = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        fired.lines().any(|l| l == case.step()),
        "fault {} never fired (fired: {fired:?}); stdout: {} stderr: {}",
        case.step(),
        out.stdout_str(),
        out.stderr_str()
    );
    if case.action == "kill" && case.in_bridge() {
        assert_eq!(out.status.signal(), Some(9), "bridge was not killed");
    }
    // A killed IPAM plugin fails the bridge's verb; so does every failed step but the
    // index's (a failure writing it only costs the next caller a scan).
    let verb_fails = case.action == "kill" || case.point != "host-local.index-written";
    assert_eq!(
        out.success(),
        !verb_fails,
        "stdout: {} stderr: {}",
        out.stdout_str(),
        out.stderr_str()
    );
}

/// Nothing of container `id` remains: no veth in the host (but those of `keep`), nothing
/// but lo in its netns, no lease (but those of `keep`), no firewall rule or chain naming it
/// (both iptables families, all tables; nftables), the host-local index agrees with the
/// lease files, and `last_reserved_ip` is an address of the range.
///
/// About `last_reserved_ip`: it is where the next allocation starts (round robin, so a
/// freed address is not handed out again at once); pointing at a freed address is its
/// normal state after every DEL, in the reference too, and never makes an address taken or
/// handed out twice. What would matter is a marker that is not an address of the range
/// (torn or foreign content): that is what is checked.
fn assert_container_gone(env: &Env, ctr: &NamedNetns, id: &str, keep: &[&Value]) {
    let veths = host_veths(env, keep);
    assert!(veths.is_empty(), "links left in the host: {veths:?}");
    let ctr_links: Vec<Value> = links(ctr)
        .into_iter()
        .map(|l| l["ifname"].clone())
        .collect();
    assert_eq!(ctr_links, vec![json!("lo")], "container keeps only lo");

    let mut kept_ips: Vec<String> = keep
        .iter()
        .flat_map(|r| result_ips(r))
        .map(|a| a.split('/').next().unwrap().to_string())
        .collect();
    kept_ips.sort();
    let mut leases = env.ip_files();
    leases.sort();
    assert_eq!(leases, kept_ips, "leases left");
    assert_store_consistent(env, &leases);

    let chain = names::iptables_chain(NETWORK, id);
    let instance = names::nft_instance_hash(NETWORK, IFNAME, id);
    let mut left = Vec::new();
    for tool in ["iptables-save", "ip6tables-save"] {
        left.extend(
            env.host
                .exec_in(&[tool])
                .lines()
                .filter(|l| l.contains(id) || l.contains(&chain))
                .map(|l| format!("{tool}: {l}")),
        );
    }
    left.extend(
        env.nft_ruleset()
            .lines()
            .filter(|l| l.contains(id) || l.contains(&instance))
            .map(|l| format!("nft: {l}")),
    );
    assert!(
        left.is_empty(),
        "firewall left for {id}:\n{}",
        left.join("\n")
    );
}

/// What host-local believes is allocated (its index, when it trusts it) is what the lease
/// files say, and the round-robin marker is an address of the range.
fn assert_store_consistent(env: &Env, leases: &[String]) {
    // Nothing else in the store: a killed writer's temporary lease is gone too.
    if let Ok(dir) = std::fs::read_dir(env.data.join(NETWORK)) {
        let known = [
            "lock",
            "last_reserved_ip.0",
            "last_reserved_ip.1",
            "index.host-local",
        ];
        let others: Vec<String> = dir
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !known.contains(&n.as_str()) && !leases.contains(n))
            .collect();
        assert!(
            others.is_empty(),
            "unexpected files in the store: {others:?}"
        );
    }
    let Some(mut store) = DiskStore::open(env.data.path(), NETWORK, false).unwrap() else {
        assert!(leases.is_empty());
        return;
    };
    let mut allocated: Vec<String> = store
        .allocated()
        .unwrap()
        .iter()
        .map(IpAddr::to_string)
        .collect();
    allocated.sort();
    assert_eq!(
        allocated, leases,
        "host-local's index disagrees with the leases"
    );
    drop(store);
    for (set, subnet) in SUBNETS.iter().enumerate() {
        let marker = env
            .data
            .join(NETWORK)
            .join(format!("last_reserved_ip.{set}"));
        if let Ok(text) = std::fs::read_to_string(&marker) {
            assert!(
                text.parse().is_ok_and(|ip| in_subnet(ip, subnet)),
                "{} is {text:?}, not an address of {subnet}",
                marker.display()
            );
        }
    }
}
