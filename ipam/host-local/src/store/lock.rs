//! The store lock: `flock` on `<store>/lock`, the lock the Go host-local takes, so the two
//! exclude each other. Waiting for it is bounded: a stuck holder must not wedge every pod
//! start (nor STATUS, which runtimes poll) on the node.

use super::StoreError;
use nix::libc;
use nix::sys::stat::{major, minor};
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

pub const LOCK_FILE: &str = "lock";
/// How long ADD, DEL, CHECK and GC wait for the lock by default.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// STATUS never waits longer than this.
const STATUS_WAIT: Duration = Duration::from_secs(1);
/// Hidden knob, in milliseconds: the wait of ADD, DEL, CHECK and GC (tests set a short
/// one; STATUS waits the shorter of it and [`STATUS_WAIT`]). Unset or invalid: 30 s.
const WAIT_ENV: &str = "CNI_RS_LOCK_TIMEOUT_MS";

/// The lock wait of ADD, DEL, CHECK and GC.
pub fn verb_wait() -> Duration {
    std::env::var(WAIT_ENV)
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .map_or(DEFAULT_WAIT, Duration::from_millis)
}

/// The lock wait of STATUS.
pub fn status_wait() -> Duration {
    verb_wait().min(STATUS_WAIT)
}

/// Opens `path` (creating it like the Go plugin does) and locks it within `wait`.
pub fn acquire(path: &Path, wait: Duration) -> Result<File, StoreError> {
    let file = open(path)?;
    match file.try_lock() {
        Ok(()) => return Ok(file),
        Err(TryLockError::WouldBlock) => {}
        Err(TryLockError::Error(e)) => return Err(StoreError::io("locking", path, e)),
    }
    // Contended: a blocking flock on a helper thread, woken by the kernel the moment the
    // lock is free (no polling). On timeout the thread is left behind; the process exits
    // soon after, and should it get the lock before, dropping its descriptor (the last
    // one of this open file) releases it.
    let waiter = file
        .try_clone()
        .map_err(|e| StoreError::io("locking", path, e))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(waiter.lock());
        drop(waiter);
    });
    match rx.recv_timeout(wait) {
        Ok(Ok(())) => Ok(file),
        Ok(Err(e)) => Err(StoreError::io("locking", path, e)),
        Err(_) => Err(StoreError::Busy {
            path: path.to_path_buf(),
            waited: wait,
            holder: holder_pid(&file),
        }),
    }
}

/// O_RDONLY|O_CREAT like the Go plugin's lock file, but never through a symlink and never
/// blocking (a FIFO); anything but a regular file is refused.
fn open(path: &Path) -> Result<File, StoreError> {
    let not_regular = |what: &'static str| StoreError::NotARegularFile {
        path: path.to_path_buf(),
        what,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => not_regular("symbolic link"),
            Some(libc::EISDIR) => not_regular("directory"),
            _ => StoreError::io("opening lock", path, e),
        })?;
    let kind = file
        .metadata()
        .map_err(|e| StoreError::io("inspecting lock", path, e))?
        .file_type();
    if !kind.is_file() {
        return Err(not_regular(if kind.is_fifo() {
            "FIFO"
        } else {
            "special file"
        }));
    }
    Ok(file)
}

/// The PID of the process holding `file`'s flock, from `/proc/locks` (lines
/// `N: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF`, major and minor in hex;
/// waiters' lines carry `->` and are skipped).
fn holder_pid(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    let id = format!("{:02x}:{:02x}:{}", major(dev), minor(dev), meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [_, "FLOCK", _, _, pid, file_id, ..] if *file_id == id => {
                pid.parse().ok().filter(|p| *p > 0)
            }
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::TempDir;

    #[test]
    fn a_held_lock_times_out_naming_its_holder() {
        let t = TempDir::new("hl-lock-held");
        let path = t.join(LOCK_FILE);
        let held = acquire(&path, Duration::ZERO).unwrap();
        let err = acquire(&path, Duration::from_millis(50)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&path.display().to_string())
                && msg.contains(&format!("PID {}", std::process::id())),
            "{msg}"
        );
        assert_eq!(
            libcni::Error::from(err).code,
            libcni::error::code::TRY_AGAIN_LATER
        );
        drop(held);
        // the abandoned waiter never keeps the lock from the next caller
        acquire(&path, Duration::from_secs(600)).unwrap();
    }

    #[test]
    fn a_waiter_gets_the_lock_when_it_is_released() {
        let t = TempDir::new("hl-lock-wait");
        let path = t.join(LOCK_FILE);
        let held = acquire(&path, Duration::ZERO).unwrap();
        let p = path.clone();
        let waiter = std::thread::spawn(move || acquire(&p, Duration::from_secs(600)).map(drop));
        // released only once the waiter blocks in flock (a `->` line in /proc/locks)
        let ino = format!(":{} ", held.metadata().unwrap().ino());
        while !std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .any(|l| l.contains("-> FLOCK") && l.contains(&ino))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(held);
        waiter.join().unwrap().unwrap();
    }
}
