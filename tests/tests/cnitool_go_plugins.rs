//! Our cnitool driving the Go reference `bridge` + `host-local` (in /usr/lib/cni) in a
//! throwaway "host" netns: ADD, CHECK, DEL, GC, the cache file it leaves in between and
//! the container ID it derives. Needs root and a built cnitool (`cargo build -p cnitool`).

use cni_tests::{NamedNetns, TempDir, bin_path, go_plugin_path};
use libcni::testutil::privileged;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

struct Setup {
    host: NamedNetns,
    ctr: NamedNetns,
    dir: TempDir,
}

impl Setup {
    fn new(subnet: &str) -> Setup {
        let host = NamedNetns::new("cnitool-host");
        let ctr = NamedNetns::new("cnitool-ctr");
        let dir = TempDir::new("cnitool-go");
        for sub in ["net.d", "cache", "ipam"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "gonet",
            "plugins": [{
                "type": "bridge", "bridge": "cnitool0", "isGateway": true, "ipMasq": true,
                "ipam": {"type": "host-local", "subnet": subnet,
                         "dataDir": dir.join("ipam").display().to_string()}
            }]
        });
        std::fs::write(dir.join("net.d/10-gonet.conflist"), conf.to_string()).unwrap();
        go_plugin_path("bridge");
        go_plugin_path("host-local");
        Setup { host, ctr, dir }
    }

    /// cnitool inside the host netns (`ip netns exec` also gives it the netns's /sys).
    fn cnitool(&self, args: &[&str]) -> Output {
        let out = Command::new("ip")
            .args(["netns", "exec", self.host.name()])
            .arg(bin_path("cnitool"))
            .args(args)
            .env("NETCONFPATH", self.dir.join("net.d"))
            .env("CNI_PATH", cni_tests::GO_PLUGIN_DIR)
            .env("CNI_CACHE_DIR", self.dir.join("cache"))
            .env_remove("CNI_IFNAME")
            .env_remove("CNI_ARGS")
            .env_remove("CAP_ARGS")
            .output()
            .unwrap();
        eprintln!(
            "cnitool {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn results(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.join("cache/results"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

fn sha512_id(path: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("printf %s '{}' | sha512sum", path.display()))
        .output()
        .unwrap();
    format!("cnitool-{}", &String::from_utf8(out.stdout).unwrap()[..20])
}

#[test]
fn cnitool_add_check_del_with_go_plugins() {
    if !privileged("cnitool_add_check_del_with_go_plugins") {
        return;
    }
    let s = Setup::new("10.98.0.0/24");
    let netns = s.ctr.path().display().to_string();
    let out = s.cnitool(&["add", "gonet", &netns]);
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
    let id = sha512_id(s.ctr.path());
    let name = format!("gonet-{id}-eth0");
    assert_eq!(s.results(), std::slice::from_ref(&name));
    let raw = std::fs::read_to_string(s.dir.join("cache/results").join(&name)).unwrap();
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
    assert_eq!(cached["netns"], netns);
    assert_eq!(cached["result"]["ips"], result["ips"]);

    assert!(s.cnitool(&["check", "gonet", &netns]).status.success());
    assert!(s.cnitool(&["status", "gonet", &netns]).status.success());

    let out = s.cnitool(&["del", "gonet", &netns]);
    assert!(out.status.success());
    assert!(s.results().is_empty());
    let links = s.ctr.exec_in(&["ip", "-o", "link", "show"]);
    assert!(!links.contains("eth0"), "{links}");
    // A second DEL is fine.
    assert!(s.cnitool(&["del", "gonet", &netns]).status.success());
}

#[test]
fn cnitool_gc_releases_what_a_forgotten_container_held() {
    if !privileged("cnitool_gc_releases_what_a_forgotten_container_held") {
        return;
    }
    let s = Setup::new("10.97.0.0/24");
    let netns = s.ctr.path().display().to_string();
    assert!(s.cnitool(&["add", "gonet", &netns]).status.success());
    let ipam = s.dir.join("ipam/gonet/10.97.0.2");
    assert!(ipam.exists());
    // GC with the attachment declared valid keeps it.
    let id = sha512_id(s.ctr.path());
    let keep = format!("{id}:eth0");
    assert!(
        s.cnitool(&["gc", "gonet", &netns, "--valid", &keep])
            .status
            .success()
    );
    assert!(ipam.exists());
    assert_eq!(s.results().len(), 1);
    // Go cnitool semantics (no valid list): every cached attachment is DEL'd.
    assert!(s.cnitool(&["gc", "gonet", &netns]).status.success());
    assert!(!ipam.exists());
    assert!(s.results().is_empty());
}
