//! A bridge killed while its IPAM plugin runs takes the plugin with it (issue 13: the
//! precondition for running IPAM while the links are made). Otherwise the orphaned
//! host-local would lease an address after the runtime's DEL released the container's,
//! and nothing would ever release it.
//!
//! Deterministic without fault injection: the test holds the store's lock, so host-local
//! blocks before it reads or writes anything; the bridge is killed while it waits for
//! host-local, with its links made and its masquerade tool started; every child must die
//! with it. Then the lock is released and the runtime's two DELs run: nothing may be left
//! (also once a surviving orphan finished), and the container attaches again.

#[path = "bridge_support/mod.rs"]
mod support;

use std::fs::File;
use std::os::unix::fs::MetadataExt;
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
#[ignore = "needs root"]
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
    // Killed once host-local waits for the lock (it has read and written nothing), the
    // masquerade tool has started (IPv4, started while IPAM finishes) and the container's
    // interface exists: every child, and links for DEL to remove, are there.
    let ino = format!(":{} ", held.metadata().unwrap().ino());
    let ready = wait_for(|| {
        let kids = children(bridge_pid);
        let waiting = std::fs::read_to_string("/proc/locks")
            .ok()?
            .lines()
            .any(|l| l.contains("-> FLOCK") && l.contains(&ino));
        let named = |name: &str| kids.iter().any(|(_, comm)| comm.starts_with(name));
        let all =
            waiting && named("host-local") && named("iptables") && link(&ctr, IFNAME).is_some();
        all.then_some(kids)
    });
    let Some(kids) = ready else {
        let _ = bridge.kill();
        let out = bridge.wait_with_output().unwrap();
        panic!(
            "the bridge never got to wait for host-local with its links made: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    };

    kill(Pid::from_raw(bridge_pid), Signal::SIGKILL).unwrap();
    assert_eq!(bridge.wait().unwrap().signal(), Some(9));
    let all_gone = |kids: &[(i32, String)]| kids.iter().all(|(pid, _)| !alive(*pid));
    wait_for(|| all_gone(&kids).then_some(()));
    let survivors: Vec<_> = kids
        .iter()
        .filter(|(pid, _)| alive(*pid))
        .cloned()
        .collect();
    drop(held);

    // What the runtime does next: DEL (no cached result: the ADD printed none), then the
    // second DEL with an empty CNI_NETNS.
    env.del(&ctr, id, &conf);
    env.plugin("DEL", "", id, &conf)
        .run_in(&env.host)
        .assert_success();
    // An orphan may lease or add rules after those DELs: let it finish, then look.
    wait_for(|| all_gone(&survivors).then_some(()));
    env.assert_clean_with(&ctr);
    assert!(
        survivors.is_empty(),
        "outlived the bridge that ran them: {survivors:?}"
    );

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

/// The living children of `parent` and their names, from `/proc/<pid>/stat`
/// (`pid (comm) state ppid`).
fn children(parent: i32) -> Vec<(i32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let (name, state, ppid) = stat(pid)?;
            (ppid == parent && state != 'Z').then_some((pid, name))
        })
        .collect()
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
