//! Leases do not outlive a reboot. After a node reboots every container is gone, but
//! host-local's lease files stay and no runtime calls GC, so each reboot would leak the
//! addresses of the pods that ran. At start the agent frees, under host-local's own lock,
//! the lease files of our network written before this boot, once per boot.
//!
//! Which boot is "this one" is the kernel's `boot_id` (random per boot; no clock step can
//! change it), recorded beside the leases in [`MARKER`] after each cleanup. Only when the
//! marker names another boot are leases freed, those with an mtime older than `btime` in
//! /proc/stat (pods may start before the agent after a reboot: the conflist and binaries
//! persist). A restart of the agent within a boot frees nothing, however far the clock
//! stepped since the pods started (`btime` is "now minus uptime" and moves with the
//! clock: a node without an RTC that syncs NTP after its pods started would otherwise see
//! their leases as older than the boot).
//!
//! No marker yet (the first run of an agent that writes one, or a store no agent cleaned):
//! nothing is freed and the marker is written. Freeing by `btime` there could free running
//! pods' leases if the clock stepped; leases of an earlier boot leak until the next reboot
//! instead, which frees them.
//!
//! The marker must be nothing either host-local takes for its own: its name is not an
//! address (both read only files named as one as leases), `lock` or `last_reserved_ip.*`,
//! and its content has spaces and a newline in the middle, so the Go plugin's DEL, which
//! compares every file's trimmed content with `id\r\nifname` or `id` (container IDs have
//! neither), never removes it.
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
/// The boot the leases beside it were last cleaned in (see the module's text).
pub const MARKER: &str = "boot_id.cni-install";
const MARKER_HEAD: &str =
    "# cni-install: leases of boots before this one were freed; not a lease #";
/// The kernel's random identity of this boot.
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

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
    #[error("{BOOT_ID}: {0:?} is not a boot id")]
    BadBootId(String),
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
fn boot_time(proc_stat: &str) -> Result<SystemTime, LeaseError> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<u64>().ok())
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
        .ok_or(LeaseError::NoBootTime)
}

/// This boot: the kernel's `boot_id` and the `btime` of /proc/stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    pub id: String,
    pub time: SystemTime,
}

impl Boot {
    /// From the texts of [`BOOT_ID`] and /proc/stat.
    pub fn parse(boot_id: &str, proc_stat: &str) -> Result<Boot, LeaseError> {
        let id = boot_id.trim();
        let ok = !id.is_empty()
            && id.len() <= 64
            && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if !ok {
            return Err(LeaseError::BadBootId(id.chars().take(80).collect()));
        }
        Ok(Boot {
            id: id.to_string(),
            time: boot_time(proc_stat)?,
        })
    }

    /// This node's boot.
    pub fn read() -> Result<Boot, LeaseError> {
        let read = |p: &str| std::fs::read_to_string(p).map_err(io("reading", Path::new(p)));
        Boot::parse(&read(BOOT_ID)?, &read("/proc/stat")?)
    }
}

/// What [`free_stale`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// The marker names this boot: cleaned already (an agent restart).
    Done,
    /// No marker yet: nothing freed, the marker written (see the module's text).
    Marked,
    /// The marker named another boot: these leases were freed.
    Freed(Vec<IpAddr>),
}

/// Frees the lease files of `<data_dir>/<network>` of boots before `boot`, once per boot
/// (see the module's text). A missing directory is made (as host-local makes it), so the
/// boot is recorded before the first pod.
pub fn free_stale(data_dir: &Path, network: &str, boot: &Boot) -> Result<Cleanup, LeaseError> {
    let dir = data_dir.join(network);
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    let _lock = lock(&dir.join(LOCK_FILE))?;
    let marker = dir.join(MARKER);
    let cleanup = match read_marker(&marker)? {
        Some(id) if id == boot.id => return Ok(Cleanup::Done),
        Some(_) => Cleanup::Freed(free_before(&dir, boot.time)?),
        None => Cleanup::Marked,
    };
    let content = format!("{MARKER_HEAD}\n{}\n", boot.id);
    libcni::file::write_atomic(&marker, content.as_bytes(), 0o644)
        .map_err(io("writing", &marker))?;
    Ok(cleanup)
}

/// The boot id the marker records; None when there is none (or it is not ours: written
/// anew).
fn read_marker(path: &Path) -> Result<Option<String>, LeaseError> {
    use libcni::file::{Links, ReadError};
    match libcni::file::read_regular(path, Links::Refuse, 4096) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let mut lines = text.lines();
            Ok((lines.next() == Some(MARKER_HEAD))
                .then(|| lines.next().map(|l| l.trim().to_string()))
                .flatten())
        }
        Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(ReadError::Io(e)) => Err(io("reading", path)(e)),
        Err(_) => Ok(None), // not a regular file, or too large: replaced
    }
}

/// Frees the lease files in `dir` last written before `boot`, under the lock; the
/// addresses freed.
fn free_before(dir: &Path, boot: SystemTime) -> Result<Vec<IpAddr>, LeaseError> {
    let mut freed = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("reading", dir))? {
        let entry = entry.map_err(io("reading", dir))?;
        let Some(ip) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<IpAddr>().ok())
        else {
            continue; // lock, last_reserved_ip.*, host-local's index, the marker, anything else
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

    const DAY: Duration = Duration::from_secs(86_400);

    fn lease(dir: &Path, name: &str, written: SystemTime) {
        std::fs::write(dir.join(name), "ctr\r\neth0").unwrap();
        let f = File::options().write(true).open(dir.join(name)).unwrap();
        f.set_times(FileTimes::new().set_modified(written)).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut left: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        left
    }

    fn boot(id: &str, time: SystemTime) -> Boot {
        Boot {
            id: id.into(),
            time,
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    /// A store cleaned last in boot `id`.
    fn marked(dir: &Path, id: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(MARKER), format!("{MARKER_HEAD}\n{id}\n")).unwrap();
    }

    #[test]
    fn reads_btime_and_boot_id() {
        let stat = "cpu  1 2 3\nintr 5\nbtime 1764590000\nprocesses 9\n";
        assert_eq!(
            boot_time(stat).unwrap(),
            UNIX_EPOCH + Duration::from_secs(1764590000)
        );
        assert!(matches!(boot_time("cpu 1\n"), Err(LeaseError::NoBootTime)));
        let b = Boot::parse("0f3c2b9e-7d1a-4c55-9a43-2f1e8f0f6d1b\n", stat).unwrap();
        assert_eq!(b.id, "0f3c2b9e-7d1a-4c55-9a43-2f1e8f0f6d1b");
        for bad in ["", "not a boot id", "a\nb"] {
            assert!(matches!(
                Boot::parse(bad, stat),
                Err(LeaseError::BadBootId(_))
            ));
        }
        let real = Boot::read().unwrap();
        assert!(real.time < SystemTime::now());
        assert_eq!(real, Boot::read().unwrap(), "one boot, one id");
    }

    #[test]
    fn a_reboot_frees_the_old_leases_and_keeps_the_live_one() {
        let data = testkit::TempDir::new("cni-rs-agent-leases");
        let dir = data.join("cni-rs");
        marked(&dir, "the-boot-before");
        let now = boot("this-boot", SystemTime::now() - Duration::from_secs(600));
        let before = now.time - Duration::from_secs(3600);
        lease(&dir, "10.244.1.2", before);
        lease(&dir, "fd00:1::2", before);
        // A pod started after the reboot, before the agent.
        lease(&dir, "10.244.1.3", now.time + Duration::from_secs(5));
        for keep in ["last_reserved_ip.0", "index.host-local", "lock"] {
            lease(&dir, keep, before);
        }
        let cleanup = free_stale(data.path(), "cni-rs", &now).unwrap();
        assert_eq!(cleanup, Cleanup::Freed(ips(&["10.244.1.2", "fd00:1::2"])));
        assert_eq!(
            names(&dir),
            [
                "10.244.1.3",
                MARKER,
                "index.host-local",
                "last_reserved_ip.0",
                "lock"
            ]
        );
        // Again (a restart of the agent in the same boot): nothing more.
        assert_eq!(
            free_stale(data.path(), "cni-rs", &now).unwrap(),
            Cleanup::Done
        );
        // Another network's leases are not ours.
        std::fs::create_dir_all(data.join("other")).unwrap();
        lease(&data.join("other"), "10.9.0.2", before);
        free_stale(data.path(), "cni-rs", &now).unwrap();
        assert!(data.join("other/10.9.0.2").exists());
        // A store no pod used yet is marked, so the next boot's cleanup knows it.
        assert_eq!(
            free_stale(data.path(), "new", &now).unwrap(),
            Cleanup::Marked
        );
        assert!(data.join("new").join(MARKER).exists());
    }

    /// Issue 27, item 7. A node without an RTC: pods start, then NTP steps the clock a day
    /// forward. `btime` moves with it (now minus uptime), so the running pods' leases look
    /// older than the boot; the clock is "stepped" here by the leases' mtimes and `btime`.
    #[test]
    fn an_agent_restart_after_a_clock_step_frees_no_running_pods_lease() {
        let data = testkit::TempDir::new("cni-rs-agent-leases");
        let dir = data.join("cni-rs");
        marked(&dir, "the-boot-before");
        let booted = SystemTime::now() - 2 * DAY;
        let first = boot("this-boot", booted);
        lease(&dir, "10.244.1.2", booted - DAY); // of the boot before
        lease(&dir, "10.244.1.3", booted + Duration::from_secs(5)); // started before the agent
        assert_eq!(
            free_stale(data.path(), "cni-rs", &first).unwrap(),
            Cleanup::Freed(ips(&["10.244.1.2"]))
        );
        lease(&dir, "10.244.1.4", booted + Duration::from_secs(60)); // started after it
        // The step: /proc/stat's btime is a day later now; then the agent restarts.
        let stepped = boot("this-boot", booted + DAY);
        lease(&dir, "10.244.1.5", stepped.time + Duration::from_secs(60));
        assert_eq!(
            free_stale(data.path(), "cni-rs", &stepped).unwrap(),
            Cleanup::Done
        );
        assert_eq!(
            names(&dir),
            ["10.244.1.3", "10.244.1.4", "10.244.1.5", MARKER, "lock"]
        );
        // The next boot frees them, whatever the clock says since.
        let next = boot("the-next-boot", SystemTime::now());
        assert_eq!(
            free_stale(data.path(), "cni-rs", &next).unwrap(),
            Cleanup::Freed(ips(&["10.244.1.3", "10.244.1.4", "10.244.1.5"]))
        );
    }

    /// The first run of an agent that keeps a marker: leases that look older than the boot
    /// may be running pods' (a clock step before the upgrade): none is freed.
    #[test]
    fn no_marker_yet_frees_nothing_and_marks_the_boot() {
        let data = testkit::TempDir::new("cni-rs-agent-leases");
        let dir = data.join("cni-rs");
        std::fs::create_dir_all(&dir).unwrap();
        let now = boot("this-boot", SystemTime::now());
        lease(&dir, "10.244.1.2", now.time - DAY);
        assert_eq!(
            free_stale(data.path(), "cni-rs", &now).unwrap(),
            Cleanup::Marked
        );
        assert!(dir.join("10.244.1.2").exists());
        let text = std::fs::read_to_string(dir.join(MARKER)).unwrap();
        assert_eq!(text, format!("{MARKER_HEAD}\nthis-boot\n"));
        // Neither host-local takes it for a lease: its name is no address, and the Go
        // plugin's DEL (trimmed content == "id\r\nifname" or "id") never matches it, as
        // a container ID has no space or newline.
        assert!(MARKER.parse::<IpAddr>().is_err());
        assert!(!["lock", "index.host-local"].contains(&MARKER));
        assert!(!MARKER.starts_with("last_reserved_ip."));
        assert!(text.trim().contains(' ') && text.trim().contains('\n'));
        // A garbled marker is not trusted either: nothing freed, marked anew.
        std::fs::write(dir.join(MARKER), "this-boot\n").unwrap();
        let later = boot("later-boot", SystemTime::now());
        assert_eq!(
            free_stale(data.path(), "cni-rs", &later).unwrap(),
            Cleanup::Marked
        );
        assert!(dir.join("10.244.1.2").exists());
        assert_eq!(
            free_stale(data.path(), "cni-rs", &boot("after", SystemTime::now())).unwrap(),
            Cleanup::Freed(ips(&["10.244.1.2"]))
        );
    }

    #[test]
    fn waits_for_host_locals_lock() {
        let data = testkit::TempDir::new("cni-rs-agent-leases");
        let dir = data.join("cni-rs");
        marked(&dir, "the-boot-before");
        let now = boot("this-boot", SystemTime::now());
        lease(&dir, "10.244.1.2", now.time - Duration::from_secs(60));
        let held = File::create(dir.join(LOCK_FILE)).unwrap();
        held.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = data.path().to_path_buf();
        let t = std::thread::spawn(move || {
            let r = free_stale(&path, "cni-rs", &now);
            tx.send(()).unwrap();
            r
        });
        // While host-local holds the lock the lease stays.
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
        assert!(dir.join("10.244.1.2").exists());
        held.unlock().unwrap();
        assert_eq!(
            t.join().unwrap().unwrap(),
            Cleanup::Freed(ips(&["10.244.1.2"]))
        );
    }
}
