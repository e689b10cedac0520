//! Our index beside the Go files must never be trusted when stale: a random mix of Go and
//! Rust ADD/DEL/CHECK on one store (every call right after the previous one, so many land
//! in the same clock tick), and ADDs killed at random moments.

mod host_local_support;

use host_local_support::*;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A tiny deterministic generator (no test dependency needed).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Container ID -> addresses, from the lease files themselves.
fn holders(net: &Net) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (ip, content) in net.leases() {
        let id = content.split("\r\n").next().unwrap_or("").to_string();
        out.entry(id).or_default().insert(ip);
    }
    out
}

#[test]
fn random_interleaving_with_go_keeps_our_view_exact() {
    let net = Net::new("hl-index-mix");
    // small, so the walk wraps and collides, and two sets, so DEL spans both
    let conf = net.conf(
        "1.0.0",
        serde_json::json!({"ranges": [[{"subnet": "10.1.2.0/28"}], [{"subnet": "2001:db8::/124"}]]}),
        serde_json::json!({}),
    );
    let mut rng = Lcg(0x5eed);
    let ids: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
    for step in 0..300 {
        let bin = if rng.below(2) == 0 { ours() } else { go() };
        let who = if bin == ours() { "ours" } else { "go" };
        let id = &ids[rng.below(ids.len() as u64) as usize];
        let before = holders(&net);
        let held = before.contains_key(id.as_str());
        match rng.below(3) {
            0 => {
                let out = call(&bin, "ADD", id, "eth0", &conf);
                let after = holders(&net);
                if held {
                    assert!(
                        !out.success(),
                        "step {step}: {who} re-ADD of {id} succeeded"
                    );
                    assert_eq!(before, after, "step {step}: failed ADD changed the store");
                } else if out.success() {
                    assert_eq!(after[id.as_str()].len(), 2, "step {step}: {after:?}");
                } else {
                    // only exhaustion may refuse a fresh container
                    let msg = out.json()["msg"].as_str().unwrap_or("").to_string();
                    assert!(
                        msg.contains("no IP addresses available"),
                        "step {step}: {msg}"
                    );
                    assert_eq!(before, after, "step {step}: rollback left {after:?}");
                }
            }
            1 => {
                call(&bin, "DEL", id, "eth0", &conf).assert_success();
                assert!(
                    !holders(&net).contains_key(id.as_str()),
                    "step {step}: {who} DEL of {id} left {:?}",
                    holders(&net)
                );
            }
            _ => {
                // our CHECK, right after whatever the other side just did
                let out = call(&ours(), "CHECK", id, "eth0", &conf);
                assert_eq!(out.success(), held, "step {step}: our CHECK of {id}");
            }
        }
    }
    for id in &ids {
        call(&ours(), "DEL", id, "eth0", &conf).assert_success();
    }
    assert!(net.leases().is_empty(), "{:?}", net.names());
}

#[test]
fn killed_adds_leave_nothing_a_del_cannot_release() {
    let net = Net::new("hl-index-kill");
    let conf = net.simple("1.0.0", "10.1.0.0/16");
    // enough leases that the first scan and each index write take a while
    let store = net.store();
    std::fs::create_dir_all(&store).unwrap();
    for i in 0..3000u32 {
        let ip = format!("10.1.{}.{}", 100 + i / 250, 1 + i % 250);
        std::fs::write(store.join(ip), format!("pre{i}\r\neth0")).unwrap();
    }
    let mut rng = Lcg(42);
    for i in 0..40 {
        let mut child = Command::new(ours())
            .env_clear()
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", format!("k{i}"))
            .env("CNI_NETNS", FAKE_NETNS)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/nonexistent")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(conf.as_bytes())
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng.below(6000)));
        let _ = child.kill();
        let _ = child.wait();
    }
    for i in 0..40 {
        let id = format!("k{i}");
        call(&ours(), "DEL", &id, "eth0", &conf).assert_success();
        call(&ours(), "CHECK", &id, "eth0", &conf).assert_failure();
    }
    let left: Vec<(String, String)> = net
        .leases()
        .into_iter()
        .filter(|(_, c)| !c.starts_with("pre"))
        .collect();
    assert!(left.is_empty(), "leases no DEL can release: {left:?}");
    assert_eq!(net.leases().len(), 3000);
}
