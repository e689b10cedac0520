//! cni-rs-agent staying running (the DaemonSet, here `--files-only`: the binary never
//! touches the test machine's kernel; the agent's kernel side runs in-process on the fake
//! in `agent.rs`), replacing files under a concurrent reader, and read-only host mounts.

mod support;

use std::os::unix::fs::MetadataExt;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use support::{Node, eventually, fake_binary, stderr};

/// The running installer; SIGKILLed on drop if a test failed before stopping it.
struct Daemon(Option<Child>, u16);

/// A port free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Daemon {
    fn start(node: &Node) -> Daemon {
        let port = free_port();
        let child = node
            .cmd()
            .args(["--interval", "1", "--files-only"])
            .args(["--health-listen", &format!("127.0.0.1:{port}")])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Daemon(Some(child), port)
    }

    /// GET `path` on the health endpoint (None while it does not answer yet).
    fn get(&self, path: &str) -> Option<String> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", self.1)).ok()?;
        write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        c.read_to_string(&mut out).ok()?;
        Some(out)
    }

    /// A counter or gauge of /metrics.
    fn metric(&self, name: &str) -> Option<u64> {
        let text = self.get("/metrics")?;
        let line = text.lines().find(|l| l.starts_with(&format!("{name} ")))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// SIGTERM, then its exit status and log.
    fn terminate(mut self) -> std::process::Output {
        let child = self.0.take().unwrap();
        // SAFETY: plain kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        child.wait_with_output().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn subnet(node: &Node) -> Option<String> {
    let text = std::fs::read(node.conflist_path()).ok()?;
    let conf: serde_json::Value = serde_json::from_slice(&text).ok()?;
    Some(
        conf["plugins"][0]["ipam"]["ranges"][0][0]["subnet"]
            .as_str()?
            .to_string(),
    )
}

#[test]
fn puts_back_removed_or_changed_files_follows_the_pod_cidr_and_stops_on_sigterm() {
    let node = Node::new(&["10.244.3.0/24"]);
    let daemon = Daemon::start(&node);
    eventually("the conflist", || {
        subnet(&node).as_deref() == Some("10.244.3.0/24")
    });
    assert_eq!(node.names("bin"), ["bridge", "host-local", "loopback"]);

    eventually("ready", || {
        daemon
            .get("/readyz")
            .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    assert!(daemon.get("/healthz").unwrap().starts_with("HTTP/1.1 200"));

    // Nothing changes: passes go by (the periodic re-check, another node's event) and no
    // file is rewritten; the API server is watched, not polled.
    let stamp = |p: &str| {
        let m = std::fs::metadata(node.dir.join(p)).unwrap();
        (m.ino(), m.mtime_nsec())
    };
    let before = (stamp("bin/bridge"), stamp("net.d/10-cni-rs.conflist"));
    let requests = node.api.requests();
    let seen = daemon.metric("cni_rs_reconciles_total").unwrap();
    node.api
        .put_node("node-2", &["10.244.9.0/24"], &["172.18.0.9"]);
    eventually("three more passes", || {
        daemon.metric("cni_rs_reconciles_total").unwrap() >= seen + 3
    });
    assert_eq!(
        (stamp("bin/bridge"), stamp("net.d/10-cni-rs.conflist")),
        before
    );
    // Only the /metrics... requests went to the health endpoint, none to the API server.
    assert_eq!(node.api.requests(), requests);

    std::fs::remove_file(node.dir.join("bin/bridge")).unwrap();
    std::fs::write(node.dir.join("bin/host-local"), "truncated").unwrap();
    std::fs::write(node.conflist_path(), "{").unwrap();
    eventually("the files put back", || {
        std::fs::read(node.dir.join("bin/bridge")).ok() == Some(fake_binary("bridge", 1))
            && std::fs::read(node.dir.join("bin/host-local")).ok()
                == Some(fake_binary("host-local", 1))
            && subnet(&node).is_some()
    });

    node.api
        .set(|b| b.pod_cidrs = vec!["10.244.4.0/24".into(), "fd00:4::/64".into()]);
    eventually("the new podCIDRs", || {
        subnet(&node).as_deref() == Some("10.244.4.0/24")
    });

    // The API server gone (a dropped watch, then 403s): the conflist is still put back
    // from the last known podCIDRs.
    node.api.set(|b| b.forbidden = true);
    node.api.drop_watches();
    // Two errors: the drop, then the 403 of the watch (or list) after a backoff.
    eventually("a refused retry", || {
        daemon.metric("cni_rs_api_errors_total").unwrap_or(0) >= 2
    });
    std::fs::remove_file(node.conflist_path()).unwrap();
    eventually("the conflist put back", || {
        subnet(&node).as_deref() == Some("10.244.4.0/24")
    });

    let out = daemon.terminate();
    let log = stderr(&out);
    assert!(out.status.success(), "{}: {log}", out.status);
    for want in [
        "installed",
        "wrote",
        "podCIDRs changed",
        "403 Forbidden",
        "signal 15: exiting",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    // Files stay in place after a stop.
    assert_eq!(node.names("net.d"), ["10-cni-rs.conflist"]);
}

#[test]
fn sigterm_ends_the_wait_for_a_pod_cidr() {
    let node = Node::new(&[]);
    let daemon = Daemon::start(&node);
    eventually("a watch", || node.api.watches() >= 1);
    let out = daemon.terminate();
    assert!(out.status.success(), "{}", stderr(&out));
    // The binaries do not wait for a podCIDR; the conflist does.
    assert!(node.names("net.d").is_empty());
    assert!(daemon_not_ready_log(&stderr(&out)), "{}", stderr(&out));
}

fn daemon_not_ready_log(log: &str) -> bool {
    log.contains("has no spec.podCIDR(s) yet") && log.contains("signal 15: exiting")
}

/// Large files make a partial state likely to be caught if there were one.
fn big_binary(fill: u8) -> Vec<u8> {
    vec![fill; 4 << 20]
}

#[test]
fn a_concurrent_reader_never_sees_a_partial_binary_or_conflist() {
    let node = Node::new(&["10.244.1.0/24"]);
    std::fs::write(node.dir.join("src/bridge"), big_binary(b'a')).unwrap();
    node.once_ok();

    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU32::new(0));
    let reader = {
        let (done, reads) = (done.clone(), reads.clone());
        let (bin, conf) = (node.dir.join("bin/bridge"), node.conflist_path());
        std::thread::spawn(move || -> Result<(), String> {
            while !done.load(Ordering::SeqCst) {
                let b = std::fs::read(&bin).map_err(|e| format!("bridge: {e}"))?;
                let whole = b.len() == 4 << 20
                    && (b.iter().all(|&c| c == b'a') || b.iter().all(|&c| c == b'b'));
                if !whole {
                    return Err(format!("partial bridge: {} bytes", b.len()));
                }
                let c = std::fs::read(&conf).map_err(|e| format!("conflist: {e}"))?;
                serde_json::from_slice::<serde_json::Value>(&c).map_err(|e| {
                    format!("partial conflist ({e}): {}", String::from_utf8_lossy(&c))
                })?;
                reads.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
    };
    for round in 0..16u8 {
        let fill = if round % 2 == 0 { b'b' } else { b'a' };
        std::fs::write(node.dir.join("src/bridge"), big_binary(fill)).unwrap();
        node.api
            .set(|b| b.pod_cidrs = vec![format!("10.244.{}.0/24", round + 2)]);
        let out = node.once_ok();
        assert!(stderr(&out).contains("installed") && stderr(&out).contains("wrote"));
    }
    done.store(true, Ordering::SeqCst);
    reader.join().unwrap().unwrap();
    assert!(reads.load(Ordering::SeqCst) > 0);
    assert_eq!(subnet(&node).as_deref(), Some("10.244.17.0/24"));
    // No temporary file left behind.
    assert_eq!(node.names("bin"), ["bridge", "host-local", "loopback"]);
    assert_eq!(node.names("net.d"), ["10-cni-rs.conflist"]);
}

/// `cni-rs-agent --once` in a private mount namespace where `ro_dir` is a read-only mount.
fn once_with_read_only(node: &Node, ro_dir: &str) -> std::process::Output {
    let ro = node.dir.join(ro_dir);
    let cmd = node.cmd();
    let mut shell = std::process::Command::new("unshare");
    shell
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$0\" \"$0\" && mount -o remount,bind,ro \"$0\" && exec \"$@\"")
        .arg(&ro)
        .arg(cmd.get_program())
        .args(["--once", "--wait", "5"])
        .env_clear()
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))));
    let out = shell.output().unwrap();
    eprintln!("{}", stderr(&out));
    out
}

#[test]
#[ignore = "needs root"]
fn read_only_bin_dir_is_a_clear_error_and_no_conflist() {
    if !testkit::privileged("read_only_bin_dir_is_a_clear_error_and_no_conflist") {
        return;
    }
    let node = Node::new(&["10.244.3.0/24"]);
    let out = once_with_read_only(&node, "bin");
    assert!(!out.status.success());
    let log = stderr(&out);
    assert!(
        log.contains("Read-only file system") && log.contains("must be mounted read-write"),
        "{log}"
    );
    assert!(
        log.contains(&node.dir.join("bin").display().to_string()),
        "{log}"
    );
    assert!(node.names("net.d").is_empty() && node.names("bin").is_empty());
}

#[test]
#[ignore = "needs root"]
fn read_only_conf_dir_is_a_clear_error() {
    if !testkit::privileged("read_only_conf_dir_is_a_clear_error") {
        return;
    }
    let node = Node::new(&["10.244.3.0/24"]);
    let out = once_with_read_only(&node, "net.d");
    assert!(!out.status.success());
    let log = stderr(&out);
    assert!(
        log.contains("Read-only file system") && log.contains("net.d"),
        "{log}"
    );
    assert!(node.names("net.d").is_empty());
}

#[test]
fn metrics_count_api_requests_by_kind_over_one_connection_across_watch_restarts() {
    let node = Node::new(&["10.244.3.0/24"]);
    let daemon = Daemon::start(&node);
    let requests = |kind: &str| {
        daemon.metric(&format!(
            "cni_rs_api_requests_total{{kind=\"{kind}\",outcome=\"ok\"}}"
        ))
    };
    eventually("a watch counted", || requests("watch") >= Some(1));
    // A 410 mid-watch: a re-list and a new watch, on the same connection.
    node.api.expire_watches();
    node.api
        .put_node("node-2", &["10.244.9.0/24"], &["172.18.0.9"]);
    eventually("the re-list and its watch", || {
        requests("list") >= Some(2) && requests("watch") >= Some(2)
    });
    assert_eq!(requests("list").unwrap(), u64::from(node.api.lists()));
    assert_eq!(node.api.connections(), 1);
    assert_eq!(daemon.metric("cni_rs_api_connections_total"), Some(1));
    assert!(node.api.counts().list_rvs.iter().all(Option::is_some));
}
