//! Leases do not outlive a reboot. After a node reboots every container is gone, but
//! host-local's lease files stay and no runtime calls GC, so each reboot would leak the
//! addresses of the pods that ran. At start the agent frees, under host-local's own lock,
//! every lease file of our network written before this boot (mtime older than `btime` in
//! /proc/stat). Leases written since (pods may start before the agent after a reboot: the
//! conflist and binaries persist) are left alone, so this is safe at any time.
//!
//! Why not host-local's dataDir on /run (kindnet): moving it on a node with running pods
//! would give the next pod an address a running pod holds (the old leases stay behind in
//! /var/lib/cni); and Go's and our host-local would no longer share one store on a node
//! switching between them.

use std::fs::{File, OpenOptions};
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// host-local's lock file in a network's store directory.
const LOCK_FILE: &str = "lock";
/// How long we wait for host-local to release its lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("/proc/stat: no btime line (cannot tell leases of an earlier boot)")]
    NoBootTime,
    #[error(
        "{0}: still locked by host-local after {LOCK_WAIT:?}; leases of an earlier boot not freed yet"
    )]
    Locked(std::path::PathBuf),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LeaseError {
    let path = path.to_path_buf();
    move |source| LeaseError::Io { what, path, source }
}

/// This boot's start, from `/proc/stat` text.
pub fn boot_time(proc_stat: &str) -> Result<SystemTime, LeaseError> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<u64>().ok())
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
        .ok_or(LeaseError::NoBootTime)
}

/// Frees the lease files of `<data_dir>/<network>` last written before `boot`; the
/// addresses freed. A missing directory has nothing to free.
pub fn free_before(
    data_dir: &Path,
    network: &str,
    boot: SystemTime,
) -> Result<Vec<IpAddr>, LeaseError> {
    let dir = data_dir.join(network);
    if !dir.is_dir() {
        return Ok(vec![]);
    }
    let _lock = lock(&dir.join(LOCK_FILE))?;
    let mut freed = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(io("reading", &dir))? {
        let entry = entry.map_err(io("reading", &dir))?;
        let Some(ip) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<IpAddr>().ok())
        else {
            continue; // lock, last_reserved_ip.*, host-local's index, anything else
        };
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(io("reading", &path))?;
        let written = meta.modified().map_err(io("reading", &path))?;
        if meta.is_file() && written < boot {
            std::fs::remove_file(&path).map_err(io("removing", &path))?;
            freed.push(ip);
        }
    }
    freed.sort();
    Ok(freed)
}

/// host-local's exclusive flock, waited for at most [`LOCK_WAIT`].
fn lock(path: &Path) -> Result<File, LeaseError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io("opening", path))?;
    let end = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Err(LeaseError::Locked(path.into())),
            Err(std::fs::TryLockError::Error(e)) => return Err(io("locking", path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::FileTimes;

    fn lease(dir: &Path, name: &str, written: SystemTime) {
        std::fs::write(dir.join(name), "ctr\r\neth0").unwrap();
        let f = File::options().write(true).open(dir.join(name)).unwrap();
        f.set_times(FileTimes::new().set_modified(written)).unwrap();
    }

    #[test]
    fn reads_btime() {
        let stat = "cpu  1 2 3\nintr 5\nbtime 1764590000\nprocesses 9\n";
        assert_eq!(
            boot_time(stat).unwrap(),
            UNIX_EPOCH + Duration::from_secs(1764590000)
        );
        assert!(matches!(boot_time("cpu 1\n"), Err(LeaseError::NoBootTime)));
        let real = std::fs::read_to_string("/proc/stat").unwrap();
        assert!(boot_time(&real).unwrap() < SystemTime::now());
    }

    #[test]
    fn a_simulated_reboot_frees_the_old_leases_and_keeps_the_live_one() {
        let data = testkit::TempDir::new("cni-install-leases");
        let dir = data.join("cni-rs");
        std::fs::create_dir_all(&dir).unwrap();
        let boot = SystemTime::now() - Duration::from_secs(600);
        let before = boot - Duration::from_secs(3600);
        lease(&dir, "10.244.1.2", before);
        lease(&dir, "fd00:1::2", before);
        // A pod started after the reboot, before the agent.
        lease(&dir, "10.244.1.3", boot + Duration::from_secs(5));
        for keep in ["last_reserved_ip.0", "index.host-local", "lock"] {
            lease(&dir, keep, before);
        }
        let freed = free_before(data.path(), "cni-rs", boot).unwrap();
        assert_eq!(
            freed,
            [
                "10.244.1.2".parse::<IpAddr>().unwrap(),
                "fd00:1::2".parse().unwrap()
            ]
        );
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "10.244.1.3",
                "index.host-local",
                "last_reserved_ip.0",
                "lock"
            ]
        );
        // Again (a restart of the agent in the same boot): nothing more.
        assert!(free_before(data.path(), "cni-rs", boot).unwrap().is_empty());
        // Another network's leases are not ours.
        std::fs::create_dir_all(data.join("other")).unwrap();
        lease(&data.join("other"), "10.9.0.2", before);
        free_before(data.path(), "cni-rs", boot).unwrap();
        assert!(data.join("other/10.9.0.2").exists());
        assert!(
            free_before(data.path(), "missing", boot)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn waits_for_host_locals_lock() {
        let data = testkit::TempDir::new("cni-install-leases");
        let dir = data.join("cni-rs");
        std::fs::create_dir_all(&dir).unwrap();
        let boot = SystemTime::now();
        lease(&dir, "10.244.1.2", boot - Duration::from_secs(60));
        let held = File::create(dir.join(LOCK_FILE)).unwrap();
        held.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = data.path().to_path_buf();
        let t = std::thread::spawn(move || {
            let r = free_before(&path, "cni-rs", boot);
            tx.send(()).unwrap();
            r
        });
        // While host-local holds the lock the lease stays.
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
        assert!(dir.join("10.244.1.2").exists());
        held.unlock().unwrap();
        assert_eq!(t.join().unwrap().unwrap().len(), 1);
    }
}
