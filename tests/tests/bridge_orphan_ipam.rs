//! A bridge killed while its IPAM plugin runs takes the plugin with it (issue 13: the
//! precondition for running IPAM while the links are made). Otherwise the orphaned
//! host-local would lease an address after the runtime's DEL released the container's,
//! and nothing would ever release it.
//!
//! Deterministic without fault injection: the test holds the store's lock, so host-local
//! blocks before it reads or writes anything; the bridge is killed while it waits for
//! host-local; host-local must die with it. Then the lock is released and the runtime's
//! two DELs run: nothing may be left, and the container attaches again.

#[path = "bridge_support/mod.rs"]
mod support;

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use cni_tests::NamedNetns;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use support::*;
use testkit::privileged;

/// How long a process gets to appear or to die before the test fails (not a performance
/// figure: either happens in milliseconds, or never).
const PATIENCE: Duration = Duration::from_secs(20);

#[test]
fn a_killed_bridge_takes_its_ipam_plugin_with_it() {
    if !privileged("a_killed_bridge_takes_its_ipam_plugin_with_it") {
        return;
    }
    let env = Env::new("orphan");
    let conf = env.conf("1.1.0", &["10.1.31.0/24"], json!({"ipMasq": true}));
    let ctr = NamedNetns::new("orphan-ctr");
    let id = "orphan-ctr";

    let store = env.data.join(NETWORK);
    std::fs::create_dir_all(&store).unwrap();
    let lock = File::create(store.join("lock")).unwrap();
    let held = Flock::lock(lock, FlockArg::LockExclusive).unwrap_or_else(|(_, e)| panic!("{e}"));

    let mut bridge = env
        .plugin("ADD", ctr.path().to_str().unwrap(), id, &conf)
        .spawn_in(&env.host);
    let bridge_pid = bridge.id() as i32;
    let Some(ipam) = wait_for(|| child_named(bridge_pid, "host-local")) else {
        let _ = bridge.kill();
        let out = bridge.wait_with_output().unwrap();
        panic!(
            "the bridge never ran host-local: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    };

    kill(Pid::from_raw(bridge_pid), Signal::SIGKILL).unwrap();
    assert_eq!(bridge.wait().unwrap().signal(), Some(9));
    let died = wait_for(|| (!alive(ipam)).then_some(()));
    // Let a surviving orphan go on, so that the leak it causes shows below too.
    drop(held);
    assert!(
        died.is_some(),
        "host-local (pid {ipam}) outlived the bridge that ran it"
    );

    // What the runtime does next: DEL (no cached result: the ADD printed none), then the
    // second DEL with an empty CNI_NETNS.
    env.del(&ctr, id, &conf);
    env.plugin("DEL", "", id, &conf)
        .run_in(&env.host)
        .assert_success();
    assert_eq!(env.ip_files(), Vec::<String>::new(), "a lease was left");
    env.assert_clean_with(&ctr);

    let again = env.add(&ctr, id, &conf);
    env.del(&ctr, id, &with_prev(&conf, &again));
    env.assert_clean_with(&ctr);
}

/// Polls `probe` until it gives a value, for at most [`PATIENCE`].
fn wait_for<T>(mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if start.elapsed() > PATIENCE {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A child of `parent` running `comm`, from `/proc/<pid>/stat` (`pid (comm) state ppid`).
fn child_named(parent: i32, comm: &str) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let (name, state, ppid) = stat(pid)?;
            (ppid == parent && name == comm && state != 'Z').then_some(pid)
        })
}

/// A process that exists and is not a zombie (a dead orphan waits for its reaper).
fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(_, state, _)| state != 'Z' && state != 'X')
}

fn stat(pid: i32) -> Option<(String, char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name may hold spaces and parentheses: it ends at the last ')'.
    let (head, tail) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let mut fields = tail.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((name, state, ppid))
}
