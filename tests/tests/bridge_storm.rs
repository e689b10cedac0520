//! Storms and reboots: many pods starting and stopping at once on two networks that share
//! one host-local dataDir, and a node coming back from a reboot with its namespaces and
//! runtime cache gone. No operation may fail, no address may be handed out twice, and
//! nothing may be left at the end.

#[path = "bridge_support/mod.rs"]
mod support;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use cni_tests::NamedNetns;
use serde_json::{Value, json};
use support::*;
use testkit::privileged;

const OTHER: &str = "othernet";
const OTHER_BRIDGE: &str = "bridge1";
/// Containers per network; each is ADDed and DELeted once: 2 * 2 * 50 = 200 operations.
const PER_NETWORK: usize = 50;
/// Operations in flight at once.
const WORKERS: usize = 12;

/// Network 0 is the harness's (`NETWORK` on `BRIDGE`), network 1 `OTHER` on
/// `OTHER_BRIDGE`; both keep their leases under the same dataDir.
fn networks(env: &Env, extra: Value) -> [Value; 2] {
    let mut other = env.conf("1.1.0", &["10.2.0.0/24"], extra.clone());
    other["name"] = json!(OTHER);
    other["bridge"] = json!(OTHER_BRIDGE);
    [env.conf("1.1.0", &["10.1.0.0/24"], extra), other]
}

/// A small deterministic generator (xorshift), seeded per run and printed, so a failing
/// interleaving can be replayed.
struct Shuffle(u64);

impl Shuffle {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

enum Op {
    Add(usize),
    Del(usize, Value),
}

/// What the storm shares between its workers.
struct Storm<'a> {
    env: &'a Env,
    confs: [Value; 2],
    queue: Mutex<(VecDeque<Op>, Shuffle)>,
    /// (network, address) -> container, while attached.
    held: Mutex<HashMap<(usize, String), usize>>,
    netns: Mutex<HashMap<usize, NamedNetns>>,
    failures: Mutex<Vec<String>>,
    done: AtomicUsize,
}

impl Storm<'_> {
    fn network(&self, ctr: usize) -> usize {
        ctr % 2
    }

    fn next(&self) -> Option<Op> {
        self.queue.lock().unwrap().0.pop_front()
    }

    /// A DEL goes to a random place in the queue, so ADDs and DELs interleave.
    fn push_del(&self, ctr: usize, result: Value) {
        let mut guard = self.queue.lock().unwrap();
        let (queue, shuffle) = &mut *guard;
        let at = if queue.is_empty() {
            0
        } else {
            shuffle.below(queue.len() + 1)
        };
        queue.insert(at, Op::Del(ctr, result));
    }

    fn fail(&self, what: String) {
        self.failures.lock().unwrap().push(what);
    }

    fn run(&self, op: Op) {
        match op {
            Op::Add(ctr) => {
                let ns = NamedNetns::new("storm");
                let conf = &self.confs[self.network(ctr)];
                let out = self.env.run("ADD", &ns, &format!("c{ctr}"), conf);
                self.netns.lock().unwrap().insert(ctr, ns);
                if !out.success() {
                    return self.fail(format!(
                        "ADD c{ctr}: {}",
                        String::from_utf8_lossy(&out.stdout)
                    ));
                }
                let result = out.json();
                for ip in result_ips(&result) {
                    let key = (self.network(ctr), ip.clone());
                    if let Some(other) = self.held.lock().unwrap().insert(key, ctr) {
                        self.fail(format!("{ip} handed to c{ctr} while c{other} holds it"));
                    }
                }
                self.push_del(ctr, result);
            }
            Op::Del(ctr, result) => {
                let ns = self.netns.lock().unwrap().remove(&ctr).unwrap();
                let conf = with_prev(&self.confs[self.network(ctr)], &result);
                let out = self.env.run("DEL", &ns, &format!("c{ctr}"), &conf);
                if !out.success() {
                    self.fail(format!(
                        "DEL c{ctr}: {}",
                        String::from_utf8_lossy(&out.stdout)
                    ));
                }
                // Released only once DEL returned: a reuse before that is a duplicate.
                for ip in result_ips(&result) {
                    self.held.lock().unwrap().remove(&(self.network(ctr), ip));
                }
            }
        }
    }
}

fn storm(tag: &str, extra: Value) {
    let env = Env::new(tag);
    let seed = u64::from(std::process::id()) << 16 | 0x9e37;
    eprintln!("{tag}: seed {seed:#x}");
    let mut shuffle = Shuffle(seed);
    let mut adds: Vec<usize> = (0..2 * PER_NETWORK).collect();
    for i in (1..adds.len()).rev() {
        adds.swap(i, shuffle.below(i + 1));
    }
    let storm = Storm {
        env: &env,
        confs: networks(&env, extra),
        queue: Mutex::new((adds.into_iter().map(Op::Add).collect(), shuffle)),
        held: Mutex::new(HashMap::new()),
        netns: Mutex::new(HashMap::new()),
        failures: Mutex::new(Vec::new()),
        done: AtomicUsize::new(0),
    };
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                while let Some(op) = storm.next() {
                    storm.run(op);
                    storm.done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let failures = storm.failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{tag}: {failures:#?}");
    assert_eq!(
        storm.done.into_inner(),
        4 * PER_NETWORK,
        "every ADD and DEL ran"
    );
    assert!(storm.held.into_inner().unwrap().is_empty());
    assert_nothing_left(&env);
}

/// No veth, lease or rule of either network.
fn assert_nothing_left(env: &Env) {
    let links: Vec<String> = env
        .links()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .filter(|n| !["lo", BRIDGE, OTHER_BRIDGE].contains(&n.as_str()))
        .collect();
    assert!(links.is_empty(), "links left: {links:?}");
    for net in [NETWORK, OTHER] {
        assert_eq!(leases(env, net), Vec::<String>::new(), "{net}: leases left");
    }
    assert_eq!(env.cni_nat_rules(), Vec::<String>::new());
    let nft = env.nft_ruleset();
    assert!(
        !nft.contains("masquerade comment") && !nft.contains("macspoofchk"),
        "{nft}"
    );
}

/// The addresses leased in `network`'s store.
fn leases(env: &Env, network: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(env.data.join(network)) else {
        return vec![];
    };
    let mut ips: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect();
    ips.sort();
    ips
}

#[test]
#[ignore = "needs root"]
fn storm_of_200_operations_with_ip_masquerade() {
    if !privileged("storm_of_200_operations_with_ip_masquerade") {
        return;
    }
    storm(
        "storm-masq",
        json!({"ipMasq": true, "ipMasqBackend": "iptables"}),
    );
}

#[test]
#[ignore = "needs root"]
fn storm_of_200_operations_with_mac_spoof_check() {
    if !privileged("storm_of_200_operations_with_mac_spoof_check") {
        return;
    }
    storm(
        "storm-spoof",
        json!({"ipMasq": true, "ipMasqBackend": "nftables", "macspoofchk": true}),
    );
}

/// After a reboot the namespaces are gone (their veths with them) and the runtime lost
/// its cache, so no DEL will ever come for the old pods. GC with the live set frees their
/// leases and rules, and a full range serves new pods again from the freed addresses.
#[test]
#[ignore = "needs root"]
fn gc_after_a_reboot_frees_everything_of_the_dead() {
    if !privileged("gc_after_a_reboot_frees_everything_of_the_dead") {
        return;
    }
    let env = Env::new("reboot");
    // Exactly 8 addresses per network.
    let extra = json!({"ipMasq": true, "ipMasqBackend": "iptables", "macspoofchk": true});
    let mut confs = networks(&env, extra);
    confs[0]["ipam"]["ranges"] =
        json!([[{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.10", "rangeEnd": "10.1.0.17"}]]);
    confs[1]["ipam"]["ranges"] =
        json!([[{"subnet": "10.2.0.0/24", "rangeStart": "10.2.0.10", "rangeEnd": "10.2.0.17"}]]);
    let live: Vec<NamedNetns> = (0..2).map(|_| NamedNetns::new("live")).collect();
    let mut live_results = Vec::new();
    for (net, conf) in confs.iter().enumerate() {
        live_results.push(env.add(&live[net], "live", conf));
        for i in 0..7 {
            let dead = NamedNetns::new("dead");
            env.add(&dead, &format!("dead{i}"), conf);
            // The reboot: the namespace goes, and with it the veth pair.
        }
        let full = NamedNetns::new("full");
        let (code, _) = error_of(&env.run("ADD", &full, "too-many", conf));
        assert_ne!(code, 0, "the range is full");
    }
    wait_for_only(&env, &live_veths(&live_results));
    let freed: Vec<Vec<String>> = [NETWORK, OTHER]
        .iter()
        .map(|net| leases(&env, net))
        .collect();
    for conf in &confs {
        let mut gc = conf.clone();
        gc["cni.dev/valid-attachments"] = json!([{"containerID": "live", "ifname": IFNAME}]);
        env.plugin("GC", "", "", &gc)
            .run_in(&env.host)
            .assert_success();
    }
    for (net, name) in [NETWORK, OTHER].iter().enumerate() {
        assert_eq!(
            leases(&env, name),
            result_ips(&live_results[net])
                .iter()
                .map(|a| a.split('/').next().unwrap().to_string())
                .collect::<Vec<_>>(),
            "{name}: only the live pod's lease is left"
        );
    }
    let nat = env.cni_nat_rules().join("\n");
    for i in 0..7 {
        let chain = hostnet::firewall::names::iptables_chain(NETWORK, &format!("dead{i}"));
        assert!(!nat.contains(&chain), "dead{i}'s rules are gone:\n{nat}");
    }
    let chain = hostnet::firewall::names::iptables_chain(NETWORK, "live");
    assert!(nat.contains(&chain), "the live pod keeps its rules");
    // New pods get the freed addresses: the range holds nothing else.
    let new: Vec<NamedNetns> = (0..14).map(|_| NamedNetns::new("new")).collect();
    for (i, ns) in new.iter().enumerate() {
        let net = i % 2;
        let got = result_ips(&env.add(ns, &format!("new{i}"), &confs[net]));
        let ip = got[0].split('/').next().unwrap().to_string();
        assert!(freed[net].contains(&ip), "{ip} was one of the freed");
    }
    // Everything goes.
    for (i, ns) in new.iter().enumerate() {
        env.del(ns, &format!("new{i}"), &confs[i % 2]);
    }
    for (net, conf) in confs.iter().enumerate() {
        env.del(&live[net], "live", &with_prev(conf, &live_results[net]));
    }
    assert_nothing_left(&env);
}

fn live_veths(results: &[Value]) -> Vec<String> {
    results
        .iter()
        .map(|r| r["interfaces"][1]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Waits (3 s at most) until the host has no links but lo, the bridges and `keep`: the
/// kernel destroys a deleted namespace, and the veth pairs in it, from a work queue.
fn wait_for_only(env: &Env, keep: &[String]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        let extra = env
            .links()
            .iter()
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .filter(|n| !["lo", BRIDGE, OTHER_BRIDGE].contains(&n.as_str()))
            .filter(|n| !keep.contains(n))
            .count();
        if extra == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
