//! Fixtures for the installer tests: a fake node (source, bin and conf dirs, service
//! account files) and the stub API server.

#![allow(dead_code)] // each test file uses part of it

pub mod apiserver;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use testkit::TempDir;

pub use apiserver::ApiServer;

pub const NODE: &str = "node-1";

/// A node's directories in a temp dir: `src/` (what the image ships), `bin/` and `net.d/`
/// (the host paths), `sa/` (service-account token and CA).
pub struct Node {
    pub dir: TempDir,
    pub api: ApiServer,
}

impl Node {
    pub fn new(pod_cidrs: &[&str]) -> Node {
        Node::listening_on("127.0.0.1:0", pod_cidrs)
    }

    /// With the stub API server on `listen` (e.g. "[::1]:0").
    pub fn listening_on(listen: &str, pod_cidrs: &[&str]) -> Node {
        let dir = TempDir::new("cni-rs-agent-test");
        for sub in ["src", "bin", "net.d", "sa"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        let api = ApiServer::start(listen, NODE, pod_cidrs);
        std::fs::write(dir.join("sa/token"), format!("{}\n", api.token)).unwrap();
        std::fs::write(dir.join("sa/ca.crt"), &api.ca_pem).unwrap();
        for name in ["bridge", "host-local", "loopback"] {
            std::fs::write(dir.join("src").join(name), fake_binary(name, 1)).unwrap();
        }
        Node { dir, api }
    }

    /// cni-rs-agent set up for this node through the environment variables (so a test's
    /// flag overrides one), nothing else from the test's environment.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cni-rs-agent"));
        cmd.env_clear()
            .env("CNI_RS_SOURCE_DIR", self.dir.join("src"))
            .env("CNI_RS_BIN_DIR", self.dir.join("bin"))
            .env("CNI_RS_CONF_DIR", self.dir.join("net.d"))
            .env("NODE_NAME", NODE)
            .env("CNI_RS_API_SERVER", self.api.url())
            .env("CNI_RS_MTU", "1400")
            .env("CNI_RS_TOKEN_FILE", self.dir.join("sa/token"))
            .env("CNI_RS_CA_FILE", self.dir.join("sa/ca.crt"));
        cmd
    }

    /// `cni-rs-agent --once --wait WAIT ARGS`, logged.
    pub fn once(&self, wait: u64, args: &[&str]) -> Output {
        let out = self
            .cmd()
            .args(["--once", "--wait", &wait.to_string()])
            .args(args)
            .output()
            .unwrap();
        eprintln!("cni-rs-agent --once: {}\n{}", out.status, stderr(&out));
        out
    }

    pub fn once_ok(&self) -> Output {
        let out = self.once(10, &[]);
        assert!(
            out.status.success(),
            "cni-rs-agent --once failed: {}",
            stderr(&out)
        );
        out
    }

    pub fn conflist_path(&self) -> PathBuf {
        self.dir.join("net.d/10-cni-rs.conflist")
    }

    pub fn conflist(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.conflist_path()).unwrap()).unwrap()
    }

    /// Sorted names in `sub` (e.g. "bin", "net.d").
    pub fn names(&self, sub: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

/// Content standing in for a plugin binary, version `v`.
pub fn fake_binary(name: &str, v: u32) -> Vec<u8> {
    format!("#!/bin/false {name} v{v}\n").into_bytes()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Polls `cond` every 50 ms until it holds; panics naming `what` after a generous limit
/// (a liveness guard, not a timing assertion).
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The in-process agent's flags for `node` and `extra` (`--interval=1` unless given).
pub fn args_with(node: &Node, extra: &[&str]) -> cni_rs_agent::config::Args {
    use clap::Parser;
    let d = |p: &str| node.dir.join(p).display().to_string();
    let mut argv = vec![
        "cni-rs-agent".to_string(),
        format!("--source-dir={}", d("src")),
        format!("--bin-dir={}", d("bin")),
        format!("--conf-dir={}", d("net.d")),
        format!("--node-name={NODE}"),
        format!("--api-server={}", node.api.url()),
        format!("--token-file={}", d("sa/token")),
        format!("--ca-file={}", d("sa/ca.crt")),
        format!("--ipam-data-dir={}", d("leases")),
        "--health-listen=127.0.0.1:0".into(),
    ];
    if !extra.iter().any(|a| a.starts_with("--interval")) {
        argv.push("--interval=1".into());
    }
    argv.extend(extra.iter().map(|s| s.to_string()));
    cni_rs_agent::config::Args::try_parse_from(argv).unwrap()
}

/// Stops the in-process agent when the test ends, also when it fails.
pub struct StopOnDrop(pub std::sync::Arc<cni_rs_agent::kube::watcher::Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.request_stop(0);
    }
}
