//! Test helpers: private network namespaces, tool output.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;

use ipnetwork::IpNetwork;
use nix::sched::{CloneFlags, unshare};
use testkit::privileged;

use crate::testnet::in_netns;

/// When privileged, runs `f` on a fresh thread inside a new, private network
/// namespace; the tools it spawns inherit it, and every rule goes with it.
pub fn netns_test(name: &str, f: impl FnOnce() + Send) {
    if privileged(name) {
        in_netns(f);
    }
}

/// CNI-valid interface names that nft's text syntax cannot spell as chain
/// names or that need care in a comment.
pub const ODD_IFNAMES: [&str; 16] = [
    "e@0", "@e", "e$x", "e;1", "e#1", "e{}", "e\"x", "e\\x", "e'x", "e*", "*", "e\u{1}", "é", "-",
    ".e", "x-mac",
];

pub fn ips(list: &[&str]) -> Vec<IpNetwork> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

/// Output of a command that must succeed.
pub fn run_ok(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `iptables-save -t nat` (or ip6tables) without the timestamp comments.
pub fn nat_save(v6: bool) -> String {
    let tool = if v6 {
        "ip6tables-save"
    } else {
        "iptables-save"
    };
    run_ok(tool, &["-t", "nat"])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The rule and user-chain lines of the nat table: what ipMasq touches.
pub fn nat_rules(v6: bool) -> Vec<String> {
    nat_save(v6)
        .lines()
        .filter(|l| l.starts_with("-A ") || l.starts_with(":CNI-"))
        .map(str::to_string)
        .collect()
}

/// `nft list <what>` text, or "" when it does not exist.
pub fn nft_list(what: &[&str]) -> String {
    let mut args = vec!["list"];
    args.extend_from_slice(what);
    let out = Command::new("nft").args(&args).output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

pub fn nft_apply(script: &str) {
    let out = output_with_stdin(Command::new("nft").args(["-f", "-"]), script);
    assert!(
        out.status.success(),
        "nft -f - failed: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `cmd` with `input` on its stdin; stdout and stderr are captured.
pub fn output_with_stdin(cmd: &mut Command, input: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A second private network namespace held open by a parked thread, reachable
/// by path (`/proc/<pid>/task/<tid>/ns/net`) for tools that want a netns path
/// (CNI_NETNS). Dropping it ends the thread and with it the namespace.
pub struct NetnsThread {
    path: String,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NetnsThread {
    pub fn new() -> NetnsThread {
        let (path_tx, path_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            unshare(CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
            let tid = nix::unistd::gettid();
            let path = format!("/proc/{}/task/{tid}/ns/net", std::process::id());
            path_tx.send(path).unwrap();
            // Parked until the owner drops us (or goes away).
            let _ = stop_rx.recv();
        });
        let path = path_rx.recv().unwrap();
        NetnsThread {
            path,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for NetnsThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
