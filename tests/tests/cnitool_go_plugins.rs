//! Our cnitool driving the Go reference `bridge` + `host-local` (in /usr/lib/cni) in a
//! throwaway "host" netns: ADD, CHECK, DEL, GC, the cache file it leaves in between and
//! the container ID it derives. Needs root and a built cnitool (`cargo build -p cnitool`).

use cni_tests::{CnitoolHost, GO_PLUGIN_DIR, NamedNetns, cnitool_container_id, go_plugin_path};
use serde_json::Value;
use std::process::Output;
use testkit::privileged;

struct Setup {
    cni: CnitoolHost,
    ctr: NamedNetns,
    /// The container's netns path, as cnitool takes it.
    netns: String,
}

impl Setup {
    fn new(subnet: &str) -> Setup {
        go_plugin_path("bridge");
        go_plugin_path("host-local");
        let cni = CnitoolHost::new("cnitool", GO_PLUGIN_DIR);
        cni.write_bridge_conflist("1.0.0", "gonet", "cnitool0", subnet);
        let ctr = NamedNetns::new("cnitool-ctr");
        let netns = ctr.path().display().to_string();
        Setup { cni, ctr, netns }
    }

    /// cnitool `verb` on the gonet network for the container, then `extra` arguments.
    fn cnitool(&self, verb: &str, extra: &[&str]) -> Output {
        let mut args = vec![verb, "gonet", &self.netns];
        args.extend_from_slice(extra);
        self.cni.run(&args)
    }
}

#[test]
#[ignore = "needs root"]
fn cnitool_add_check_del_with_go_plugins() {
    if !privileged("cnitool_add_check_del_with_go_plugins") {
        return;
    }
    let s = Setup::new("10.98.0.0/24");
    let out = s.cnitool("add", &[]);
    assert!(out.status.success());
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["ips"][0]["address"], "10.98.0.2/24");
    assert_eq!(result["ips"][0]["gateway"], "10.98.0.1");
    assert!(
        s.ctr
            .exec_in(&["ip", "-o", "addr", "show", "eth0"])
            .contains("10.98.0.2/24")
    );

    // The cache entry: Go's name, Go's field order, the conflist bytes in base64.
    let id = cnitool_container_id(s.ctr.path());
    let name = format!("gonet-{id}-eth0");
    assert_eq!(s.cni.cached_results(), std::slice::from_ref(&name));
    let raw = std::fs::read_to_string(s.cni.results_dir().join(&name)).unwrap();
    assert!(
        raw.starts_with(&format!(
            "{{\"kind\":\"cniCacheV1\",\"containerId\":\"{id}\",\"config\":\""
        )),
        "{raw}"
    );
    let cached: Value = serde_json::from_str(&raw).unwrap();
    let keys: Vec<&String> = cached.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "kind",
            "containerId",
            "config",
            "ifName",
            "networkName",
            "netns",
            "result"
        ]
    );
    assert_eq!(cached["netns"], s.netns);
    assert_eq!(cached["result"]["ips"], result["ips"]);

    assert!(s.cnitool("check", &[]).status.success());
    assert!(s.cnitool("status", &[]).status.success());

    let out = s.cnitool("del", &[]);
    assert!(out.status.success());
    assert!(s.cni.cached_results().is_empty());
    let links = s.ctr.exec_in(&["ip", "-o", "link", "show"]);
    assert!(!links.contains("eth0"), "{links}");
    // A second DEL is fine.
    assert!(s.cnitool("del", &[]).status.success());
}

#[test]
#[ignore = "needs root"]
fn cnitool_gc_releases_what_a_forgotten_container_held() {
    if !privileged("cnitool_gc_releases_what_a_forgotten_container_held") {
        return;
    }
    let s = Setup::new("10.97.0.0/24");
    assert!(s.cnitool("add", &[]).status.success());
    let ipam = s.cni.dir.join("ipam/gonet/10.97.0.2");
    assert!(ipam.exists());
    // GC with the attachment declared valid keeps it.
    let id = cnitool_container_id(s.ctr.path());
    let keep = format!("{id}:eth0");
    assert!(s.cnitool("gc", &["--valid", &keep]).status.success());
    assert!(ipam.exists());
    assert_eq!(s.cni.cached_results().len(), 1);
    // Go cnitool semantics (no valid list): every cached attachment is DEL'd.
    assert!(s.cnitool("gc", &[]).status.success());
    assert!(!ipam.exists());
    assert!(s.cni.cached_results().is_empty());
}
