//! Shared helpers of the host_local* binary tests: configs in temp dirs, plugin calls
//! (ours or the Go reference), and store inspection.

#![allow(dead_code)] // each test file uses a different part

use cni_tests::{PluginOutput, PluginRun, TempDir, bin_dir, bin_path, go_plugin_path};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

pub const VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];
/// host-local never enters the netns; any path that is not our own namespace will do.
pub const FAKE_NETNS: &str = "/var/run/netns/host-local-test-absent";

pub fn ours() -> PathBuf {
    bin_path("host-local")
}

pub fn go() -> PathBuf {
    go_plugin_path("host-local")
}

/// A network whose store lives in a fresh temp dir.
pub struct Net {
    pub tmp: TempDir,
    pub name: String,
}

impl Net {
    pub fn new(tag: &str) -> Net {
        Net {
            tmp: TempDir::new(tag),
            name: "mynet".into(),
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.tmp.join("data")
    }

    pub fn store(&self) -> PathBuf {
        self.data_dir().join(&self.name)
    }

    /// A network config at `version` with `ipam` (dataDir added) and extra top-level keys.
    pub fn conf(&self, version: &str, ipam: Value, extra: Value) -> String {
        let mut ipam = ipam;
        ipam["type"] = json!("host-local");
        if ipam.get("dataDir").is_none() {
            ipam["dataDir"] = json!(self.data_dir());
        }
        let mut c =
            json!({"cniVersion": version, "name": self.name, "type": "bridge", "ipam": ipam});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                c.insert(k.clone(), v.clone());
            }
        }
        c.to_string()
    }

    /// `ranges: [[subnet]]` at `version`.
    pub fn simple(&self, version: &str, subnet: &str) -> String {
        self.conf(
            version,
            json!({"ranges": [[{"subnet": subnet}]]}),
            json!({}),
        )
    }

    /// Lease files (named like addresses) and their content.
    pub fn leases(&self) -> BTreeMap<String, String> {
        self.names()
            .into_iter()
            .filter(|n| n.parse::<IpAddr>().is_ok())
            .map(|n| {
                let content = std::fs::read_to_string(self.store().join(&n)).unwrap_or_default();
                (n, content)
            })
            .collect()
    }

    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = match std::fs::read_dir(self.store()) {
            Ok(rd) => rd
                .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => vec![],
        };
        v.sort();
        v
    }

    /// True when only bookkeeping files are left: `lock`, `last_reserved_ip.*`.
    pub fn is_empty_store(&self) -> bool {
        self.names()
            .iter()
            .all(|n| n == "lock" || n.starts_with("last_reserved_ip."))
    }
}

pub fn call(bin: &Path, cmd: &str, id: &str, ifname: &str, stdin: &str) -> PluginOutput {
    call_args(bin, cmd, id, ifname, stdin, "")
}

pub fn call_args(
    bin: &Path,
    cmd: &str,
    id: &str,
    ifname: &str,
    stdin: &str,
    args: &str,
) -> PluginOutput {
    let mut run = plugin(bin, cmd, stdin)
        .container_id(id)
        .ifname(ifname)
        .netns(FAKE_NETNS);
    if !args.is_empty() {
        run = run.args(args);
    }
    run.run()
}

/// Only `CNI_COMMAND`, `CNI_PATH` and the config: as GC and STATUS are called (add
/// container ID and ifname for a DEL without a netns).
pub fn plugin(bin: &Path, cmd: &str, stdin: &str) -> PluginRun {
    PluginRun::new(bin)
        .command(cmd)
        .cni_path([bin_dir()])
        .stdin(stdin.to_string())
}

/// `f(0..n)` on `n` threads released together; the results in order.
pub fn all_at_once<T: Send + 'static>(
    n: usize,
    f: impl Fn(usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (f, barrier) = (f.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                f(i)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The first address of an ADD result of any version.
pub fn first_ip(result: &Value) -> String {
    let addr = result["ips"][0]["address"]
        .as_str()
        .or_else(|| result["ip4"]["ip"].as_str())
        .or_else(|| result["ip6"]["ip"].as_str())
        .unwrap_or_else(|| panic!("no address in {result}"));
    addr.split('/').next().unwrap().to_string()
}

pub fn add_ok(bin: &Path, id: &str, stdin: &str) -> String {
    let out = call(bin, "ADD", id, "eth0", stdin);
    first_ip(&out.assert_success().json())
}
