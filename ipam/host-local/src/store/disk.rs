//! The reference's on-disk store, byte for byte: `<dataDir>/<network>/<ip>` holding
//! `<id>\r\n<ifname>` (0600), `last_reserved_ip.<set>`, and `flock` on `lock`, so the Go
//! plugin can share the directory. Plus our [`index`](super::index), which keeps ADD and
//! DEL from reading every lease file.
//!
//! Nothing here writes or removes through a symlink, nothing writes outside the store, and
//! nothing waits on a FIFO: bookkeeping files that are not regular files are replaced.
//! A lease that is a symlink is read (only), as the reference reads it, so its address
//! stays taken and its holder known; it is never removed.

use super::index::{self, Entry, Stamp, Tag};
use super::lock::{self, LOCK_FILE};
use super::{Attachment, Holder, Store, StoreError};
use libcni::file::{self, Links};
use nix::libc;
use std::collections::HashSet;
use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::{self, ErrorKind, Read};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use sysproc::step;

pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
/// A lease is written under this name, then linked under its address, so it appears with
/// its content or not at all. Not an address: neither we nor the Go plugin (which only
/// counts files named like addresses as leases) take it for one. One name suffices, as
/// every writer holds the lock; one left by a killed writer is removed by the next.
pub const LEASE_TMP: &str = "lease.tmp.host-local";
/// Lease files are tiny; anything bigger is not one.
const MAX_LEASE_LEN: u64 = 4096;

/// The store of one network, locked for as long as it lives.
pub struct DiskStore {
    dir: PathBuf,
    entries: Vec<Entry>,
    /// `entries` differ from the index file (or the index file was not trusted).
    changed: bool,
    taken: Option<HashSet<IpAddr>>,
    /// Dropped last: the flock is released only after the index is written.
    _lock: File,
}

impl DiskStore {
    /// Opens and locks `<data_dir>/<network>`, waiting at most [`lock::verb_wait`] for
    /// the lock. With `create` the directory is made if missing; without, a missing
    /// directory is `None` (nothing was ever allocated).
    pub fn open(
        data_dir: &Path,
        network: &str,
        create: bool,
    ) -> Result<Option<DiskStore>, StoreError> {
        DiskStore::open_waiting(data_dir, network, create, lock::verb_wait())
    }

    /// [`open`](Self::open), waiting at most `wait` for the lock.
    pub fn open_waiting(
        data_dir: &Path,
        network: &str,
        create: bool,
        wait: Duration,
    ) -> Result<Option<DiskStore>, StoreError> {
        let dir = data_dir.join(network);
        // One lstat when the store exists (every call after the first); mkdir only when not.
        let meta = match fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == ErrorKind::NotFound && create => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(&dir)
                    .map_err(|e| StoreError::io("creating store directory", &dir, e))?;
                fs::symlink_metadata(&dir)
            }
            other => other,
        };
        match meta {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(StoreError::NotADirectory(dir)),
            Err(e) if e.kind() == ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(StoreError::io("inspecting store directory", &dir, e)),
        }
        let lock = lock::acquire(&dir.join(LOCK_FILE), wait)?;
        step::point("host-local.lock-taken")?;
        let mut store = DiskStore {
            dir,
            entries: Vec::new(),
            changed: false,
            taken: None,
            _lock: lock,
        };
        store.load()?;
        Ok(Some(store))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn stamp(&self) -> Result<Stamp, StoreError> {
        fs::symlink_metadata(&self.dir)
            .map(|m| Stamp::of(&m))
            .map_err(|e| StoreError::io("inspecting store directory", &self.dir, e))
    }

    /// The index when it is current, else a full scan.
    fn load(&mut self) -> Result<(), StoreError> {
        let stamp = self.stamp()?;
        let path = self.dir.join(index::FILE_NAME);
        if let Some(bytes) = read_nofollow(&path, u64::MAX)
            && let Some((recorded, entries)) = index::decode(&bytes)
            && recorded == stamp
        {
            self.entries = entries;
            self.changed = false;
            self.taken = None;
            return Ok(());
        }
        self.rescan().map(|_| ())
    }

    /// Reads every lease file (the reference's cost, paid only when the index is stale).
    fn rescan(&mut self) -> Result<Vec<(IpAddr, Holder)>, StoreError> {
        let found = self.scan()?;
        self.entries = found
            .iter()
            .map(|(ip, h)| Entry {
                ip: *ip,
                tag: Tag::of(h),
            })
            .collect();
        self.changed = true;
        self.taken = None;
        Ok(found)
    }

    fn scan(&self) -> Result<Vec<(IpAddr, Holder)>, StoreError> {
        let rd = fs::read_dir(&self.dir)
            .map_err(|e| StoreError::io("reading store directory", &self.dir, e))?;
        let mut found = Vec::new();
        for dent in rd {
            let dent = dent.map_err(|e| StoreError::io("reading store directory", &self.dir, e))?;
            let name = dent.file_name();
            if name == LEASE_TMP {
                libcni::log!(
                    "host-local: removing {}: left by a writer that was killed",
                    dent.path().display()
                );
                let _ = fs::remove_file(dent.path());
                continue;
            }
            let Some(ip) = lease_name(&name.to_string_lossy()) else {
                continue; // lock, last_reserved_ip.*, the index, anything foreign
            };
            // Taken whatever it is; only regular files and symlinks are opened (opening a
            // device or a FIFO can block or have effects).
            let readable = dent
                .file_type()
                .is_ok_and(|t| t.is_file() || t.is_symlink());
            let holder = if readable {
                self.read_holder(ip)
            } else {
                libcni::log!(
                    "host-local: {} is not a regular file: taken, held by no one",
                    dent.path().display()
                );
                Some(Holder::Unknown)
            };
            if let Some(holder) = holder {
                found.push((ip, holder));
            }
        }
        Ok(found)
    }

    fn lease_path(&self, ip: IpAddr) -> PathBuf {
        self.dir.join(ip.to_string())
    }

    /// The holder of a lease file; None when nothing has its name. A symlink is read
    /// through when it leads to a regular file (the reference reads it too), anything
    /// else that has the name is held by no one.
    fn read_holder(&self, ip: IpAddr) -> Option<Holder> {
        let path = self.lease_path(ip);
        let read = match file::read_regular(&path, Links::Refuse, MAX_LEASE_LEN) {
            Err(e) if e.is_not_found() => return None,
            // a symlink: opened only when it leads to a regular file
            Err(e) if e.is_symlink() => match fs::metadata(&path) {
                Ok(m) if m.is_file() => file::read_regular(&path, Links::Follow, MAX_LEASE_LEN),
                _ => return Some(Holder::Unknown),
            },
            read => read,
        };
        Some(read.map_or(Holder::Unknown, |bytes| Holder::parse(&bytes)))
    }

    /// Writes `content` as the lease of `ip` unless something already has its name.
    fn write_lease(&self, ip: IpAddr, content: &[u8]) -> Result<bool, StoreError> {
        let tmp = self.dir.join(LEASE_TMP);
        let path = self.lease_path(ip);
        let fail = |e| StoreError::io("writing lease", &path, e);
        remove_if_present(&tmp).map_err(fail)?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .mode(0o600)
            .open(&tmp)
            .map_err(fail)?;
        // link(2) never replaces: an existing file, symlink or directory means taken.
        let linked = injected("host-local.lease-created")
            .and_then(|()| file.write_all_at(content, 0))
            .and_then(|()| match fs::hard_link(&tmp, &path) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            });
        let _ = fs::remove_file(&tmp);
        linked.map_err(fail)
    }

    /// Writes the index if it changed; a failure only costs the next caller a scan.
    fn flush(&mut self) {
        if !self.changed {
            return;
        }
        let path = self.dir.join(index::FILE_NAME);
        let result = if self.entries.is_empty() {
            // An empty store needs no index: scanning it is free.
            match fs::remove_file(&path) {
                Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        } else {
            self.write_index(&path)
                .and_then(|()| injected("host-local.index-written"))
        };
        if let Err(e) = result {
            libcni::log!("host-local: writing {}: {e}", path.display());
            let _ = fs::remove_file(&path);
        }
        self.changed = false;
    }

    fn write_index(&self, path: &Path) -> std::io::Result<()> {
        let file = open_for_rewrite(path)?;
        // Creating the file may have changed the directory: stamp it only now (writing
        // the file's content does not change the directory).
        let stamp = self.unrepeatable_stamp()?;
        let bytes = index::encode(&stamp, &self.entries);
        file.write_all_at(&bytes, 0)?;
        file.set_len(bytes.len() as u64)
    }

    /// Directory times come from the coarse clock: a change by someone else later in the
    /// same tick would leave the mtime as it is, and the index would look current. So the
    /// mtime is moved back by one nanosecond, to a value no later change can produce (they
    /// all get the current time, at least the old mtime). A filesystem that cannot hold
    /// that exact value gets no index.
    fn unrepeatable_stamp(&self) -> std::io::Result<Stamp> {
        let dir = File::open(&self.dir)?;
        let now = dir.metadata()?.modified()?;
        let before = now
            .checked_sub(Duration::from_nanos(1))
            .ok_or_else(|| std::io::Error::other("directory mtime out of range"))?;
        dir.set_times(FileTimes::new().set_modified(before))?;
        let meta = dir.metadata()?;
        if meta.modified()? != before {
            return Err(std::io::Error::other(
                "filesystem timestamps too coarse for the index",
            ));
        }
        Ok(Stamp::of(&meta))
    }

    fn forget(&mut self, mut ips: Vec<IpAddr>) {
        // Sorted, not hashed: the few addresses forgotten are looked up by binary search,
        // so the many index entries are not hashed.
        ips.sort_unstable();
        let before = self.entries.len();
        self.entries.retain(|e| ips.binary_search(&e.ip).is_err());
        if let Some(t) = self.taken.as_mut() {
            for ip in &ips {
                t.remove(ip);
            }
        }
        // Nothing forgotten, nothing to write (a removal the index did not know of has
        // changed the directory, so the next caller rescans anyway).
        if self.entries.len() != before {
            self.changed = true;
        }
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The address a lease file name stands for; only canonical names (as `ip.String()`
/// writes them) count.
fn lease_name(name: &str) -> Option<IpAddr> {
    let ip: IpAddr = name.parse().ok()?;
    (ip.to_string() == name).then_some(ip)
}

/// Up to `max` bytes of a regular file (the rest is not read), never through a symlink;
/// None on any error.
fn read_nofollow(path: &Path, max: u64) -> Option<Vec<u8>> {
    let file = file::open_regular(path, Links::Refuse).ok()?;
    file::read_bounded(file.take(max), max).ok()
}

/// A fault-injection point as an IO error, for steps whose errors are IO errors.
fn injected(name: &str) -> io::Result<()> {
    step::point(name).map_err(io::Error::other)
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Opens one of our bookkeeping files for rewriting, creating it 0600. Anything else under
/// its name (a symlink, a FIFO, a socket) is removed and replaced: never written through,
/// never waited on.
fn open_for_rewrite(path: &Path) -> io::Result<File> {
    let open = |flags: i32| {
        OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | flags)
            .mode(0o600)
            .open(path)
    };
    match open(0) {
        Ok(f) if f.metadata()?.is_file() => return Ok(f),
        Ok(_) => {}
        // ELOOP: a symlink; ENXIO: a FIFO without a reader, or a socket
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENXIO)) => {}
        Err(e) => return Err(e),
    }
    fs::remove_file(path)?;
    open(libc::O_EXCL)
}

/// Replaces a small file's content (see [`open_for_rewrite`]).
fn write_small(path: &Path, content: &[u8]) -> io::Result<()> {
    let file = open_for_rewrite(path)?;
    file.write_all_at(content, 0)?;
    file.set_len(content.len() as u64)
}

impl Store for DiskStore {
    fn reserve(&mut self, att: &Attachment, ip: IpAddr, set: usize) -> Result<bool, StoreError> {
        let path = self.lease_path(ip);
        if !self.write_lease(ip, att.file_content().as_bytes())? {
            if !self.entries.iter().any(|e| e.ip == ip) {
                // Someone changed the store behind an index we trusted.
                self.rescan()?;
            }
            if self.taken.is_none() {
                self.taken = Some(self.entries.iter().map(|e| e.ip).collect());
            }
            return Ok(false);
        }
        let last = self.dir.join(format!("{LAST_RESERVED_PREFIX}{set}"));
        let marked = injected("host-local.lease-written")
            .and_then(|()| write_small(&last, ip.to_string().as_bytes()))
            .and_then(|()| injected("host-local.last-reserved-written"));
        if let Err(e) = marked {
            let _ = fs::remove_file(&path);
            return Err(StoreError::io("writing", &last, e));
        }
        self.entries.push(Entry {
            ip,
            tag: Tag::attachment(att),
        });
        if let Some(t) = self.taken.as_mut() {
            t.insert(ip);
        }
        self.changed = true;
        Ok(true)
    }

    fn last_reserved(&mut self, set: usize) -> Option<IpAddr> {
        let path = self.dir.join(format!("{LAST_RESERVED_PREFIX}{set}"));
        let bytes = read_nofollow(&path, 64)?;
        let ip: IpAddr = std::str::from_utf8(&bytes).ok()?.trim().parse().ok()?;
        Some(ip.to_canonical())
    }

    fn is_taken(&mut self, ip: IpAddr) -> bool {
        // Built on the first collision only: the walk usually starts at a free address.
        self.taken.as_ref().is_some_and(|t| t.contains(&ip))
    }

    /// The index's candidates, verified against the lease files; a lookup the files
    /// contradict means the index is wrong: rescan once.
    fn held_by(&mut self, att: &Attachment, legacy: bool) -> Result<Vec<IpAddr>, StoreError> {
        let want = if legacy {
            Tag::legacy(att)
        } else {
            Tag::attachment(att)
        };
        for attempt in 0..2 {
            let candidates: Vec<IpAddr> = self
                .entries
                .iter()
                .filter(|e| e.tag == want)
                .map(|e| e.ip)
                .collect();
            let mut verified = Vec::with_capacity(candidates.len());
            let mut contradicted = false;
            for ip in candidates {
                match self.read_holder(ip) {
                    Some(h) if h.is(att, legacy) => verified.push(ip),
                    _ => contradicted = true,
                }
            }
            if !contradicted || attempt == 1 {
                return Ok(verified);
            }
            self.rescan()?;
        }
        Ok(vec![])
    }

    fn release_ips(&mut self, ips: &[IpAddr]) -> Result<(), StoreError> {
        let mut gone = Vec::with_capacity(ips.len());
        let mut failure = None;
        for ip in ips {
            let path = self.lease_path(*ip);
            if fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink()) {
                // taken and read like a lease, but no host-local wrote it: left alone
                libcni::log!(
                    "host-local: leaving {}: a symlink, not a lease host-local wrote",
                    path.display()
                );
                continue;
            }
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    failure.get_or_insert(StoreError::io("removing lease", &path, e));
                    continue;
                }
            }
            gone.push(*ip);
        }
        if let Err(e) = step::point("host-local.lease-removed") {
            failure.get_or_insert(e.into());
        }
        self.forget(gone);
        failure.map_or(Ok(()), Err)
    }

    fn allocated(&mut self) -> Result<Vec<IpAddr>, StoreError> {
        Ok(self.entries.iter().map(|e| e.ip).collect())
    }

    fn holders(&mut self) -> Result<Vec<(IpAddr, Holder)>, StoreError> {
        self.rescan()
    }
}

#[cfg(test)]
mod tests;
