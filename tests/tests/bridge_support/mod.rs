//! Shared harness of the bridge plugin tests (included by each `bridge_*.rs` with
//! `#[path]`; as a test target of its own it holds no tests).
//!
//! Every test gets a fake "host" netns (the bridge, sysctls and firewall rules land
//! there), container netns(es), a dataDir and a CNI_PATH in temp dirs holding our bridge
//! and our host-local (a broken host-local fails these tests).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use cni_tests::{NamedNetns, PluginOutput, PluginRun, TempDir, bin_path};
use serde_json::{Value, json};

pub const VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];
/// Versions the Go plugins (v1.1.1) speak.
pub const GO_VERSIONS: [&str; 6] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"];
pub const BRIDGE: &str = "bridge0";
pub const NETWORK: &str = "testnet";
pub const IFNAME: &str = "eth0";

pub fn is_legacy(version: &str) -> bool {
    version == "0.1.0" || version == "0.2.0"
}

/// One test's world: host netns, data dir, CNI_PATH dir.
pub struct Env {
    pub host: NamedNetns,
    pub data: TempDir,
    pub cni: TempDir,
    pub bridge_bin: PathBuf,
}

impl Env {
    /// Our bridge as `bridge` in CNI_PATH.
    pub fn new(tag: &str) -> Env {
        Env::with_bridge(tag, bin_path("bridge"))
    }

    pub fn with_bridge(tag: &str, bridge_bin: PathBuf) -> Env {
        Env::with_plugins(tag, bridge_bin, bin_path("host-local"))
    }

    /// `bridge_bin` as `bridge` and `host_local_bin` as `host-local` in CNI_PATH.
    pub fn with_plugins(tag: &str, bridge_bin: PathBuf, host_local_bin: PathBuf) -> Env {
        let host = NamedNetns::new(&format!("{tag}-h"));
        let data = TempDir::new(&format!("{tag}-data"));
        let cni = TempDir::new(&format!("{tag}-cni"));
        std::os::unix::fs::symlink(&bridge_bin, cni.join("bridge")).unwrap();
        std::os::unix::fs::symlink(host_local_bin, cni.join("host-local")).unwrap();
        // The host netns starts with lo down; pings to the gateway need nothing else.
        host.exec_in(&["ip", "link", "set", "lo", "up"]);
        Env {
            host,
            data,
            cni,
            bridge_bin,
        }
    }

    /// An executable IPAM script `name` in CNI_PATH.
    pub fn ipam_script(&self, name: &str, body: &str) {
        write_script(&self.cni.join(name), body);
    }

    pub fn plugin(&self, cmd: &str, netns: &str, id: &str, conf: &Value) -> PluginRun {
        PluginRun::new(&self.bridge_bin)
            .command(cmd)
            .container_id(id)
            .netns(netns)
            .ifname(IFNAME)
            .cni_path([self.cni.path()])
            .stdin(conf.to_string())
    }

    pub fn run(&self, cmd: &str, ctr: &NamedNetns, id: &str, conf: &Value) -> PluginOutput {
        self.plugin(cmd, ctr.path().to_str().unwrap(), id, conf)
            .run_in(&self.host)
    }

    pub fn add(&self, ctr: &NamedNetns, id: &str, conf: &Value) -> Value {
        self.run("ADD", ctr, id, conf).assert_success().json()
    }

    pub fn del(&self, ctr: &NamedNetns, id: &str, conf: &Value) {
        self.run("DEL", ctr, id, conf).assert_success();
    }

    /// The standard L3 config: isDefaultGateway, host-local over `subnets` (one range set each).
    pub fn conf(&self, version: &str, subnets: &[&str], extra: Value) -> Value {
        let ranges: Vec<Value> = subnets.iter().map(|s| json!([{"subnet": s}])).collect();
        let base = json!({
            "cniVersion": version, "name": NETWORK, "type": "bridge", "bridge": BRIDGE,
            "isDefaultGateway": true,
            "ipam": {"type": "host-local", "ranges": ranges, "dataDir": self.data.path()},
        });
        merge(base, extra)
    }

    /// L2: `"ipam": {}`.
    pub fn l2_conf(&self, version: &str, extra: Value) -> Value {
        merge(
            json!({"cniVersion": version, "name": NETWORK, "type": "bridge",
                   "bridge": BRIDGE, "ipam": {}}),
            extra,
        )
    }

    pub fn links(&self) -> Vec<Value> {
        links(&self.host)
    }

    pub fn link(&self, name: &str) -> Option<Value> {
        link(&self.host, name)
    }

    /// `cmd` for every `(container id, netns)` at once, each on its own thread.
    pub fn run_concurrently<'a>(
        &self,
        cmd: &str,
        conf: &Value,
        ctrs: impl IntoIterator<Item = (String, &'a NamedNetns)>,
    ) -> Vec<PluginOutput> {
        std::thread::scope(|s| {
            let handles: Vec<_> = ctrs
                .into_iter()
                .map(|(id, ctr)| s.spawn(move || self.run(cmd, ctr, &id, conf)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Reserved IPs in the dataDir (files named like addresses).
    pub fn ip_files(&self) -> Vec<String> {
        let dir = self.data.join(NETWORK);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return vec![];
        };
        entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect()
    }

    /// NAT rules and chains mentioning CNI, both families.
    pub fn cni_nat_rules(&self) -> Vec<String> {
        let mut out = Vec::new();
        for tool in ["iptables-save", "ip6tables-save"] {
            let text = self.host.exec_in(&[tool, "-t", "nat"]);
            out.extend(
                text.lines()
                    .filter(|l| l.contains("CNI-"))
                    .map(str::to_string),
            );
        }
        out
    }

    pub fn nft_ruleset(&self) -> String {
        self.host.exec_in(&["nft", "list", "ruleset"])
    }

    /// Waits until the host has no links but lo and the bridge, or `timeout` passes.
    pub fn wait_for_no_links(&self, timeout: std::time::Duration) {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            let others = self
                .links()
                .iter()
                .filter(|l| {
                    let n = l["ifname"].as_str().unwrap_or_default();
                    n != "lo" && n != BRIDGE
                })
                .count();
            if others == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// [`Env::assert_clean`], and the container `ctr` has nothing but lo.
    pub fn assert_clean_with(&self, ctr: &NamedNetns) {
        let names: Vec<Value> = links(ctr)
            .into_iter()
            .map(|l| l["ifname"].clone())
            .collect();
        assert_eq!(names, vec![json!("lo")], "container keeps only lo");
        self.assert_clean();
    }

    /// Nothing of any attachment is left: host links are lo and (maybe) the bridge,
    /// no reserved IP, no masquerade rule, no spoof-check rule.
    pub fn assert_clean(&self) {
        let names: BTreeSet<String> = self
            .links()
            .iter()
            .map(|l| l["ifname"].as_str().unwrap().to_string())
            .filter(|n| n != "lo" && n != BRIDGE)
            .collect();
        assert!(names.is_empty(), "links left in host: {names:?}");
        assert_eq!(
            self.ip_files(),
            Vec::<String>::new(),
            "IP reservations left"
        );
        assert_eq!(
            self.cni_nat_rules(),
            Vec::<String>::new(),
            "iptables rules left"
        );
        let nft = self.nft_ruleset();
        assert!(
            !nft.contains("masquerade comment") && !nft.contains("macspoofchk"),
            "nft rules left:\n{nft}"
        );
    }
}

pub fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Object merge: keys of `extra` replace those of `base`; `null` removes.
pub fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            if v.is_null() {
                b.remove(&k);
            } else {
                b.insert(k, v);
            }
        }
    }
    base
}

pub fn links(ns: &NamedNetns) -> Vec<Value> {
    serde_json::from_str(&ns.exec_in(&["ip", "-d", "-j", "link", "show"])).unwrap()
}

/// The link `name` of `ns` as `ip -d -j link show` describes it.
pub fn link(ns: &NamedNetns, name: &str) -> Option<Value> {
    links(ns).into_iter().find(|l| l["ifname"] == name)
}

/// `ip -j addr show dev <dev>`'s addr_info entries of global scope.
pub fn global_addr_info(ns: &NamedNetns, dev: &str) -> Vec<Value> {
    let v: Vec<Value> =
        serde_json::from_str(&ns.exec_in(&["ip", "-j", "addr", "show", "dev", dev])).unwrap();
    v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scope"] == "global")
        .cloned()
        .collect()
}

/// Global addresses of `dev` in `ns`, `addr/prefix`.
pub fn global_addrs(ns: &NamedNetns, dev: &str) -> Vec<String> {
    global_addr_info(ns, dev)
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// Default route gateways of a family (`-4` / `-6`) in `ns`.
pub fn default_gateways(ns: &NamedNetns, family: &str) -> Vec<String> {
    let v: Vec<Value> =
        serde_json::from_str(&ns.exec_in(&["ip", "-j", family, "route", "show", "default"]))
            .unwrap();
    v.iter()
        .filter_map(|r| r["gateway"].as_str().map(str::to_string))
        .collect()
}

/// Pings `addr` from inside `ns` (addresses of namespaces the test created only).
pub fn ping(ns: &NamedNetns, addr: &str) -> bool {
    let mut cmd = Command::new("ping");
    cmd.args(["-c", "1", "-W", "2", addr]);
    ns.run_in(cmd).status.success()
}

/// The error object of a failed plugin run: (code, msg).
pub fn error_of(out: &PluginOutput) -> (u64, String) {
    let v = out.assert_failure();
    (
        v["code"].as_u64().unwrap_or(0),
        v["msg"].as_str().unwrap_or_default().to_string(),
    )
}

/// The container IPs of a result of any version.
pub fn result_ips(result: &Value) -> Vec<String> {
    if let Some(ips) = result["ips"].as_array() {
        return ips
            .iter()
            .map(|i| i["address"].as_str().unwrap().to_string())
            .collect();
    }
    ["ip4", "ip6"]
        .iter()
        .filter_map(|k| result[k]["ip"].as_str().map(str::to_string))
        .collect()
}

/// The conf for CHECK/DEL with `prevResult` (chained versions only).
pub fn with_prev(conf: &Value, result: &Value) -> Value {
    merge(conf.clone(), json!({ "prevResult": result }))
}

/// A result with what differs between two runs replaced: MACs (but `keep_mac`, one the
/// test chose), random veth names, netns paths; an empty `dns` dropped (newer Go omits it).
pub fn normalize_result(v: &Value, keep_mac: Option<&str>) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !(*k == "dns" && **v == json!({})))
                .map(|(k, v)| {
                    let v = match (k.as_str(), v.as_str()) {
                        ("mac", Some(m)) if Some(m) != keep_mac => json!("MAC"),
                        ("sandbox", Some(_)) => json!("NETNS"),
                        ("name", Some(n)) if n.starts_with("veth") => json!("VETH"),
                        _ => normalize_result(v, keep_mac),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| normalize_result(x, keep_mac)).collect()),
        other => other.clone(),
    }
}
