//! Our cnitool driving a bridge + host-local conflist inside a fake "host" netns, the
//! way an operator runs it: conflist dir, result cache and host-local store in a temp dir.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{NamedNetns, TempDir, bin_path};

/// A "host" netns and a temp dir holding `net.d/` (NETCONFPATH), `cache/`
/// (CNI_CACHE_DIR) and `ipam/` (host-local's dataDir); all removed on drop.
#[derive(Debug)]
pub struct CnitoolHost {
    pub host: NamedNetns,
    pub dir: TempDir,
    cni_path: PathBuf,
}

impl CnitoolHost {
    /// `prefix` names the netns and the temp dir; the plugins are looked up in `cni_path`.
    pub fn new(prefix: &str, cni_path: impl Into<PathBuf>) -> CnitoolHost {
        let dir = TempDir::new(prefix);
        for sub in ["net.d", "cache", "ipam"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        CnitoolHost {
            host: NamedNetns::new(&format!("{prefix}-host")),
            dir,
            cni_path: cni_path.into(),
        }
    }

    /// Writes `net.d/10-<name>.conflist`: one `bridge` (isGateway, ipMasq) with
    /// `host-local` on `subnet`, its store in `ipam/`.
    pub fn write_bridge_conflist(&self, version: &str, name: &str, bridge: &str, subnet: &str) {
        let conf = serde_json::json!({
            "cniVersion": version,
            "name": name,
            "plugins": [{
                "type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": true,
                "ipam": {"type": "host-local", "subnet": subnet,
                         "dataDir": self.dir.join("ipam")}
            }]
        });
        let file = self.dir.join(format!("net.d/10-{name}.conflist"));
        std::fs::write(file, conf.to_string()).unwrap();
    }

    /// Runs cnitool inside the host netns (`ip netns exec` also gives it the netns's
    /// /sys); logs status and stderr, does not check the status.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("ip")
            .args(["netns", "exec", self.host.name()])
            .arg(bin_path("cnitool"))
            .args(args)
            .env("NETCONFPATH", self.dir.join("net.d"))
            .env("CNI_PATH", &self.cni_path)
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

    /// [`Self::run`], panicking unless cnitool succeeds.
    pub fn run_ok(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "cnitool {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `cache/results`: one file per cached attachment.
    pub fn results_dir(&self) -> PathBuf {
        self.dir.join("cache/results")
    }

    /// Sorted file names in [`Self::results_dir`] (none before the first ADD).
    pub fn cached_results(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.results_dir())
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// The container ID cnitool derives from a netns path (`cnitool-` + 20 hex digits of
/// its sha512), computed independently with `sha512sum`.
pub fn cnitool_container_id(netns: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("printf %s '{}' | sha512sum", netns.display()))
        .output()
        .unwrap();
    format!("cnitool-{}", &String::from_utf8(out.stdout).unwrap()[..20])
}
