//! Run a CNI plugin binary the way a runtime does: `CNI_*` env, config on
//! stdin, result or error JSON on stdout.

use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use crate::NamedNetns;

/// PATH given to plugins: they shell out to `iptables-restore`, `nft`, `ip`.
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One plugin invocation. The environment is cleared except `PATH` and what
/// is set here, so the test runner's own env never leaks in. Only the
/// `CNI_*` variables you set are passed (set one to "" to pass it empty).
///
/// ```no_run
/// # use cni_tests::{NamedNetns, PluginRun, bin_path, bin_dir};
/// # let (host, ctr) = (NamedNetns::new("host"), NamedNetns::new("ctr"));
/// let out = PluginRun::new(bin_path("bridge"))
///     .command("ADD").container_id("ctr1").netns(ctr.path()).ifname("eth0")
///     .cni_path([bin_dir()])
///     .stdin(r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#)
///     .run_in(&host);
/// let result = out.assert_success().json();
/// ```
#[derive(Debug, Clone)]
pub struct PluginRun {
    bin: PathBuf,
    env: Vec<(OsString, OsString)>,
    stdin: Vec<u8>,
    stderr_closed: bool,
}

impl PluginRun {
    pub fn new(bin: impl Into<PathBuf>) -> PluginRun {
        PluginRun {
            bin: bin.into(),
            env: vec![("PATH".into(), SYSTEM_PATH.into())],
            stdin: Vec::new(),
            stderr_closed: false,
        }
    }

    /// Set (or override) any environment variable.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> PluginRun {
        let key = key.as_ref().to_os_string();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.as_ref().to_os_string()));
        self
    }

    /// `CNI_COMMAND`: ADD, DEL, CHECK, VERSION, GC, STATUS.
    pub fn command(self, command: &str) -> PluginRun {
        self.env("CNI_COMMAND", command)
    }

    pub fn container_id(self, id: &str) -> PluginRun {
        self.env("CNI_CONTAINERID", id)
    }

    pub fn netns(self, path: impl AsRef<OsStr>) -> PluginRun {
        self.env("CNI_NETNS", path)
    }

    pub fn ifname(self, ifname: &str) -> PluginRun {
        self.env("CNI_IFNAME", ifname)
    }

    /// `CNI_ARGS`, e.g. `"IgnoreUnknown=1;IP=10.1.2.3"`.
    pub fn args(self, args: &str) -> PluginRun {
        self.env("CNI_ARGS", args)
    }

    /// `CNI_PATH`: the directories joined with `:`.
    pub fn cni_path<P: AsRef<Path>>(self, dirs: impl IntoIterator<Item = P>) -> PluginRun {
        let joined = std::env::join_paths(dirs.into_iter().map(|d| d.as_ref().to_path_buf()))
            .expect("CNI_PATH entries must not contain ':'");
        self.env("CNI_PATH", joined)
    }

    /// The network config (or anything else) fed on stdin.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> PluginRun {
        self.stdin = bytes.into();
        self
    }

    /// Give the plugin a stderr pipe nobody reads (writes fail with EPIPE), as when the
    /// runtime that started it died; the output's stderr is then empty.
    pub fn stderr_closed(mut self) -> PluginRun {
        self.stderr_closed = true;
        self
    }

    /// Run in the test process's own netns. Only for commands that touch
    /// nothing there (VERSION, config errors); otherwise use [`Self::run_in`].
    pub fn run(&self) -> PluginOutput {
        self.wait(self.started(self.command_line().spawn()))
    }

    /// Run with `host` as the plugin's netns (the fake "host": bridges,
    /// sysctls and firewall rules land there).
    pub fn run_in(&self, host: &NamedNetns) -> PluginOutput {
        self.wait(self.spawn_in(host))
    }

    /// Starts the plugin with `host` as its netns, its stdin written and closed, and
    /// returns it running (a test that kills it mid-verb).
    pub fn spawn_in(&self, host: &NamedNetns) -> Child {
        let mut cmd = self.command_line();
        self.started(host.run(move || cmd.spawn()))
    }

    fn command_line(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if self.stderr_closed {
            let (read, write) = nix::unistd::pipe().expect("pipe for stderr");
            drop(read);
            cmd.stderr(Stdio::from(write));
        }
        cmd
    }

    /// The started plugin, its stdin written and closed.
    fn started(&self, child: std::io::Result<Child>) -> Child {
        let mut child =
            child.unwrap_or_else(|e| panic!("starting plugin {}: {e}", self.bin.display()));
        if let Some(mut stdin) = child.stdin.take() {
            // A plugin may exit without reading stdin (VERSION): ignore EPIPE.
            match stdin.write_all(&self.stdin) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
                Err(e) => panic!("writing stdin of {}: {e}", self.bin.display()),
            }
        }
        child
    }

    fn wait(&self, child: Child) -> PluginOutput {
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for {}: {e}", self.bin.display()));
        PluginOutput {
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
        }
    }
}

/// What a plugin run produced.
#[derive(Debug, Clone)]
pub struct PluginOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl PluginOutput {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Exit code (None if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// stdout parsed as JSON (a result, a version reply or an error object).
    ///
    /// # Panics
    /// If stdout is not JSON, showing stdout and stderr.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout)
            .unwrap_or_else(|e| panic!("plugin stdout is not JSON ({e}); {}", self.describe()))
    }

    /// Panic (with stdout and stderr) unless the plugin exited 0.
    pub fn assert_success(&self) -> &PluginOutput {
        assert!(self.success(), "plugin failed; {}", self.describe());
        self
    }

    /// Panic unless the plugin failed; returns its error JSON.
    pub fn assert_failure(&self) -> serde_json::Value {
        assert!(
            !self.success(),
            "plugin unexpectedly succeeded; {}",
            self.describe()
        );
        self.json()
    }

    fn describe(&self) -> String {
        format!(
            "status: {}\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout_str(),
            self.stderr_str()
        )
    }
}
