//! The whole suite at spec 1.1.0: our cnitool runs a conflist of our bridge + host-local
//! in a throwaway "host" netns. GC with a valid list must remove what a forgotten
//! attachment still holds (its IP lease and its masquerade chain) through the plugins'
//! own GC, keep the valid attachments working, and STATUS must report ready.
//! Needs root and built binaries (`cargo build --workspace`).

use cni_tests::{CnitoolHost, NamedNetns, bin_dir, cnitool_container_id};
use serde_json::Value;
use std::process::Output;
use testkit::privileged;

const NETWORK: &str = "fullstack";

struct Stack {
    cni: CnitoolHost,
}

impl Stack {
    fn new() -> Stack {
        let cni = CnitoolHost::new("full", bin_dir());
        cni.write_bridge_conflist("1.1.0", NETWORK, "fullbr0", "10.96.0.0/24");
        Stack { cni }
    }

    fn cnitool(&self, args: &[&str]) -> Output {
        self.cni.run_ok(args)
    }

    /// ADDs a container; returns its IP.
    fn add(&self, ctr: &NamedNetns) -> String {
        let out = self.cnitool(&["add", NETWORK, &ctr.path().display().to_string()]);
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(result["cniVersion"], "1.1.0");
        let cidr = result["ips"][0]["address"].as_str().unwrap();
        cidr.split('/').next().unwrap().to_string()
    }

    fn leases(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.cni.dir.join("ipam").join(NETWORK))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect();
        names.sort();
        names
    }

    fn masquerade_sources(&self) -> Vec<String> {
        let rules = self.cni.host.exec_in(&["iptables-save", "-t", "nat"]);
        let mut sources: Vec<String> = rules
            .lines()
            .filter(|l| l.starts_with("-A POSTROUTING -s "))
            .filter_map(|l| l.split_whitespace().nth(3))
            .map(|s| s.trim_end_matches("/32").to_string())
            .collect();
        sources.sort();
        sources
    }

    fn cache_entries(&self) -> usize {
        self.cni.cached_results().len()
    }
}

fn attachment(ctr: &NamedNetns) -> String {
    format!("{}:eth0", cnitool_container_id(ctr.path()))
}

#[test]
#[ignore = "needs root"]
fn gc_removes_what_a_forgotten_attachment_holds() {
    if !privileged("gc_removes_what_a_forgotten_attachment_holds") {
        return;
    }
    let stack = Stack::new();
    let (a, b, forgotten) = (
        NamedNetns::new("full-a"),
        NamedNetns::new("full-b"),
        NamedNetns::new("full-c"),
    );
    let ip_a = stack.add(&a);
    let ip_b = stack.add(&b);
    let ip_c = stack.add(&forgotten);
    stack.cnitool(&["status", NETWORK]);

    // The runtime loses track of the third container: its cache entry and its netns go,
    // its lease and masquerade rules stay behind.
    for entry in std::fs::read_dir(stack.cni.results_dir()).unwrap() {
        let entry = entry.unwrap();
        let cached: Value = serde_json::from_slice(&std::fs::read(entry.path()).unwrap()).unwrap();
        if cached["netns"] == forgotten.path().display().to_string() {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    drop(forgotten);
    assert_eq!(stack.cache_entries(), 2);
    let mut all = vec![ip_a.clone(), ip_b.clone(), ip_c.clone()];
    all.sort();
    assert_eq!(stack.leases(), all);
    assert_eq!(stack.masquerade_sources(), all);

    let (valid_a, valid_b) = (attachment(&a), attachment(&b));
    stack.cnitool(&["gc", NETWORK, "--valid", &valid_a, "--valid", &valid_b]);

    let mut kept = vec![ip_a.clone(), ip_b.clone()];
    kept.sort();
    assert_eq!(
        stack.leases(),
        kept,
        "host-local GC releases the forgotten lease"
    );
    assert_eq!(
        stack.masquerade_sources(),
        kept,
        "bridge GC removes the forgotten masquerade rules"
    );
    assert_eq!(stack.cache_entries(), 2);
    a.exec_in(&["ping", "-c1", "-W2", &ip_b]);

    for ctr in [&a, &b] {
        stack.cnitool(&["del", NETWORK, &ctr.path().display().to_string()]);
    }
    assert!(stack.leases().is_empty());
    assert!(stack.masquerade_sources().is_empty());
    assert_eq!(stack.cache_entries(), 0);
}

/// A conflist with a plugin key nested as deep as Go accepts (10,000 levels in all) goes
/// through cnitool (load, copy, cache) and both plugins, ADD and DEL.
#[test]
#[ignore = "needs root"]
fn a_config_nested_10000_levels_deep_is_added_and_deleted() {
    if !privileged("a_config_nested_10000_levels_deep_is_added_and_deleted") {
        return;
    }
    let stack = Stack::new();
    let file = stack.cni.dir.join(format!("net.d/10-{NETWORK}.conflist"));
    let text = std::fs::read_to_string(&file).unwrap();
    // list object, plugins array, plugin object: 3 levels before the key.
    let deep = format!("{}1{}", "[".repeat(9_997), "]".repeat(9_997));
    let plugin = r#""type":"bridge""#;
    assert!(text.contains(plugin), "{text}");
    std::fs::write(
        &file,
        text.replacen(plugin, &format!("{plugin},\"x\":{deep}"), 1),
    )
    .unwrap();
    let ctr = NamedNetns::new("full-deep");
    let ip = stack.add(&ctr);
    assert_eq!(stack.leases(), [ip]);
    stack.cnitool(&["del", NETWORK, &ctr.path().display().to_string()]);
    assert_eq!(stack.leases(), Vec::<String>::new());
    assert_eq!(stack.cache_entries(), 0);
}
