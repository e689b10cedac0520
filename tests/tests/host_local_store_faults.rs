//! host-local against a store someone else holds or spoiled: a held lock, hostile entries
//! (FIFOs, symlinks), an endless resolvConf. Nothing may hang, nothing may be written
//! through a symlink, and every refusal names what is wrong.

mod host_local_support;

use host_local_support::*;
use nix::sys::stat::Mode;
use nix::unistd::mkfifo;
use serde_json::json;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::symlink;

/// The plugin's lock wait in tests (the default is 30 s).
const SHORT_WAIT_MS: &str = "200";

/// Takes the store lock (an `flock` of our own, as a Go host-local or a stuck plugin
/// would hold it); held until the file is dropped.
fn hold_lock(net: &Net) -> File {
    fs::create_dir_all(net.store()).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(net.store().join("lock"))
        .unwrap();
    f.try_lock().expect("lock is free");
    f
}

/// Runs `cmd` with the lock wait set to `wait_ms`; it must fail: its error JSON.
fn run_waiting(cmd: &str, id: &str, stdin: &str, wait_ms: &str) -> serde_json::Value {
    plugin(&ours(), cmd, stdin)
        .container_id(id)
        .ifname("eth0")
        .netns(FAKE_NETNS)
        .env("CNI_RS_LOCK_TIMEOUT_MS", wait_ms)
        .run()
        .assert_failure()
}

#[test]
fn a_held_lock_fails_every_verb_with_try_again_later() {
    let net = Net::new("hl-held-lock");
    let conf = net.simple("1.1.0", "10.1.2.0/24");
    let gc_conf = net.conf(
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}]]}),
        json!({"cni.dev/valid-attachments": []}),
    );
    add_ok(&ours(), "old", &conf);
    let before = net.leases();
    let lock_path = net.store().join("lock");
    let held = hold_lock(&net);
    let holder = format!("PID {}", std::process::id());
    for (cmd, stdin) in [
        ("ADD", &conf),
        ("DEL", &conf),
        ("CHECK", &conf),
        ("GC", &gc_conf),
    ] {
        let err = run_waiting(cmd, "old", stdin, SHORT_WAIT_MS);
        assert_eq!(err["code"], 11, "{cmd}: {err}");
        let msg = err["msg"].as_str().unwrap();
        assert!(
            msg.contains(&lock_path.display().to_string()),
            "{cmd}: {msg}"
        );
        assert!(msg.contains(&holder), "{cmd}: {msg}");
    }
    // STATUS is polled: it gives up after about a second even when the wait for the
    // other verbs is set to ten minutes (were it to wait that long, this test would hang)
    let err = run_waiting("STATUS", "", &conf, "600000");
    assert_eq!(err["code"], 11, "{err}");
    assert!(err["msg"].as_str().unwrap().contains(&holder), "{err}");
    assert_eq!(net.leases(), before);
    drop(held);
    // released: everything works again
    call(&ours(), "DEL", "old", "eth0", &conf).assert_success();
    add_ok(&ours(), "new", &conf);
}

#[test]
fn a_non_regular_lock_is_refused_before_anything_changes() {
    let net = Net::new("hl-bad-lock");
    let conf = net.simple("1.1.0", "10.1.2.0/24");
    let outside = net.tmp.join("outside");
    add_ok(&ours(), "a", &conf);
    let lock = net.store().join("lock");
    for kind in ["dangling symlink", "fifo", "directory"] {
        fs::remove_file(&lock).ok();
        fs::remove_dir(&lock).ok();
        match kind {
            "dangling symlink" => symlink(&outside, &lock).unwrap(),
            "fifo" => mkfifo(&lock, Mode::from_bits_truncate(0o600)).unwrap(),
            _ => fs::create_dir(&lock).unwrap(),
        }
        let before = net.leases();
        for cmd in ["ADD", "DEL"] {
            let out = call(&ours(), cmd, "a", "eth0", &conf);
            let err = out.assert_failure();
            let msg = err["msg"].as_str().unwrap();
            assert!(
                msg.contains(&lock.display().to_string()) && msg.contains("not a regular file"),
                "{kind} {cmd}: {msg}"
            );
        }
        assert_eq!(net.leases(), before, "{kind}");
        assert!(!outside.exists(), "{kind}: created through the symlink");
    }
}

#[test]
fn a_fifo_index_is_replaced_not_waited_on() {
    let net = Net::new("hl-fifo-index");
    let conf = net.simple("1.1.0", "10.1.2.0/24");
    add_ok(&ours(), "a", &conf);
    let index = net.store().join("index.host-local");
    fs::remove_file(&index).unwrap();
    mkfifo(&index, Mode::from_bits_truncate(0o600)).unwrap();
    let ip = add_ok(&ours(), "b", &conf);
    assert_eq!(ip, "10.1.2.3");
    assert!(fs::symlink_metadata(&index).unwrap().is_file());
    call(&ours(), "DEL", "a", "eth0", &conf).assert_success();
    call(&ours(), "CHECK", "b", "eth0", &conf).assert_success();
}

#[test]
fn hostile_last_reserved_ip_is_replaced_never_written_through() {
    let net = Net::new("hl-last-reserved");
    let conf = net.simple("1.1.0", "10.1.2.0/24");
    add_ok(&ours(), "a", &conf);
    let last = net.store().join("last_reserved_ip.0");
    let target = net.tmp.join("target");
    fs::write(&target, "keep me").unwrap();
    fs::remove_file(&last).unwrap();
    symlink(&target, &last).unwrap();
    assert_eq!(add_ok(&ours(), "b", &conf), "10.1.2.3");
    assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
    assert!(fs::symlink_metadata(&last).unwrap().is_file());
    assert_eq!(fs::read_to_string(&last).unwrap(), "10.1.2.3");
    // a FIFO there neither hangs nor fails
    fs::remove_file(&last).unwrap();
    mkfifo(&last, Mode::from_bits_truncate(0o600)).unwrap();
    assert_eq!(add_ok(&ours(), "c", &conf), "10.1.2.4");
    assert_eq!(fs::read_to_string(&last).unwrap(), "10.1.2.4");
}

#[test]
fn a_symlinked_lease_counts_as_held_like_the_reference() {
    for bin in [ours(), go()] {
        let net = Net::new("hl-symlink-lease");
        let conf = net.simple("1.0.0", "10.1.2.0/24");
        let target = net.tmp.join("target");
        fs::write(&target, "c1\r\neth0").unwrap();
        fs::create_dir_all(net.store()).unwrap();
        symlink(&target, net.store().join("10.1.2.7")).unwrap();
        let err = call(&bin, "ADD", "c1", "eth0", &conf).assert_failure();
        let msg = err["msg"].as_str().unwrap();
        assert!(msg.contains("duplicate allocation"), "{bin:?}: {msg}");
        assert!(msg.contains("10.1.2.7"), "{bin:?}: {msg}");
        // another container never gets the address
        assert_eq!(add_ok(&bin, "c2", &conf), "10.1.2.2", "{bin:?}");
        assert_eq!(fs::read_to_string(&target).unwrap(), "c1\r\neth0");
    }
}

#[test]
fn an_endless_resolv_conf_is_refused() {
    let net = Net::new("hl-resolv-huge");
    let huge = net.tmp.join("resolv.conf");
    // one long line: the reference's line scanner refuses it (64 KiB limit)
    fs::write(&huge, vec![b'a'; 1 << 20]).unwrap();
    for path in [huge.as_path(), "/dev/zero".as_ref()] {
        let conf = net.conf(
            "1.0.0",
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}]], "resolvConf": path}),
            json!({}),
        );
        if path == huge {
            call(&go(), "ADD", "a", "eth0", &conf).assert_failure();
        }
        let err = call(&ours(), "ADD", "a", "eth0", &conf).assert_failure();
        assert_eq!(err["code"], 7, "{err}");
        let msg = err["msg"].as_str().unwrap();
        assert!(
            msg.contains("resolvConf") && msg.contains("too large"),
            "{msg}"
        );
        assert!(net.leases().is_empty(), "{:?}", net.leases());
    }
    // a FIFO is refused at once instead of waiting for a writer
    let fifo = net.tmp.join("resolv.fifo");
    mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
    let conf = net.conf(
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}]], "resolvConf": fifo}),
        json!({}),
    );
    let err = call(&ours(), "ADD", "a", "eth0", &conf).assert_failure();
    assert_eq!(err["code"], 7, "{err}");
}

/// Whether some process waits for an flock on `path` (a `->` line in /proc/locks).
fn someone_waits_for(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).unwrap();
    let ino = format!(":{} ", m.ino());
    fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|l| l.contains("-> FLOCK") && l.contains(&ino))
}

#[test]
fn the_go_plugin_and_ours_take_the_same_lock() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let net = Net::new("hl-go-lock");
    let conf = net.simple("1.0.0", "10.1.2.0/24");
    let lock = net.store().join("lock");
    let held = hold_lock(&net);
    let mut go_add = Command::new(go())
        .env_clear()
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "g")
        .env("CNI_NETNS", FAKE_NETNS)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    go_add
        .stdin
        .take()
        .unwrap()
        .write_all(conf.as_bytes())
        .unwrap();
    // the Go plugin queues on our flock (it waits forever: no timeout to race)
    while !someone_waits_for(&lock) {
        if let Some(status) = go_add.try_wait().unwrap() {
            panic!("the Go plugin did not wait for the lock: {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(net.leases().is_empty());
    // and ours, while the lock is held, gives up naming the holder
    let err = run_waiting("ADD", "r", &conf, SHORT_WAIT_MS);
    assert_eq!(err["code"], 11, "{err}");
    drop(held);
    let out = go_add.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(net.leases().into_keys().collect::<Vec<_>>(), ["10.1.2.2"]);
    assert_eq!(add_ok(&ours(), "r", &conf), "10.1.2.3");
}
