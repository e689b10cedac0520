//! Test helpers: private network namespaces, tool output, temp dirs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::thread::JoinHandle;

use ipnetwork::IpNetwork;
use nix::sched::{CloneFlags, unshare};

/// Run `f` on a fresh thread inside a new, private network namespace; tools
/// it spawns inherit that namespace. The namespace (and every rule in it)
/// disappears with the thread, so nothing leaks even when `f` panics.
pub fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        unshare(CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        f()
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

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
    use std::io::Write;
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(
        child.wait().unwrap().success(),
        "nft -f - failed:\n{script}"
    );
}

/// A temporary directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let nonce: u64 = rand::random();
        let path = std::env::temp_dir().join(format!("hostnet-fw-{tag}-{nonce:016x}"));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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
