//! Where allocations live. The allocator and the verbs work over the [`Store`] trait;
//! [`disk::DiskStore`] is the Go-compatible directory, [`mem::MemStore`] the test double.

pub mod disk;
pub mod index;
pub mod lock;
#[cfg(test)]
pub mod mem;

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// One attachment: `(containerID, ifname)`. The ID is whitespace-trimmed, as the
/// reference trims it before writing and comparing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attachment {
    pub id: String,
    pub ifname: String,
}

impl Attachment {
    pub fn new(id: &str, ifname: &str) -> Attachment {
        Attachment {
            id: id.trim().to_string(),
            ifname: ifname.to_string(),
        }
    }

    /// The allocation file's content: `<id>\r\n<ifname>`, no trailing newline.
    pub fn file_content(&self) -> String {
        format!("{}\r\n{}", self.id, self.ifname)
    }
}

/// Who holds an allocation, read from its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    Attachment(Attachment),
    /// A file from before ifnames were recorded: the container ID only.
    Legacy(String),
    /// A zero-length file: its writer (the Go plugin, or ours before leases were written
    /// whole) died between creating it (O_EXCL) and writing it. Writers hold the store
    /// lock throughout, so under the lock it is never in progress.
    /// Taken like any lease (ADD skips it), held by no attachment (GC may release it).
    Empty,
    /// Corrupt or foreign content: the address is taken, but by no one we know.
    Unknown,
}

impl Holder {
    pub fn parse(content: &[u8]) -> Holder {
        if content.is_empty() {
            return Holder::Empty;
        }
        let Ok(text) = std::str::from_utf8(content) else {
            return Holder::Unknown;
        };
        let text = text.trim();
        let clean = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
        match text.split_once("\r\n") {
            Some((id, ifname)) if clean(id) && clean(ifname) => {
                Holder::Attachment(Attachment::new(id, ifname))
            }
            None if clean(text) => Holder::Legacy(text.to_string()),
            _ => Holder::Unknown,
        }
    }

    /// Whether this holder belongs to `att` in the reference's sense: the exact
    /// attachment, or (`legacy`) a container-ID-only file of the same container.
    pub fn is(&self, att: &Attachment, legacy: bool) -> bool {
        match self {
            Holder::Attachment(a) => !legacy && a == att,
            Holder::Legacy(id) => legacy && *id == att.id,
            Holder::Empty | Holder::Unknown => false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Injected(#[from] sysproc::step::Injected),
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("{} is a {what}, not a regular file: remove it", path.display())]
    NotARegularFile { path: PathBuf, what: &'static str },
    #[error("store lock {} still held{} after {waited:?}: try again later", path.display(), holder.map(|p| format!(" by PID {p}")).unwrap_or_default())]
    Busy {
        path: PathBuf,
        waited: Duration,
        holder: Option<u32>,
    },
}

impl StoreError {
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> StoreError {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub fn errno(&self) -> Option<i32> {
        match self {
            StoreError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// The allocations of one network. Every method runs with the store locked.
pub trait Store {
    /// Records `ip` for `att` unless it is taken; `set` is the range-set index whose
    /// "last reserved" marker moves to `ip`.
    fn reserve(&mut self, att: &Attachment, ip: IpAddr, set: usize) -> Result<bool, StoreError>;
    /// The last address reserved in range set `set`, if known.
    fn last_reserved(&mut self, set: usize) -> Option<IpAddr>;
    /// A fast "certainly taken" hint for the allocator's walk (false means "try it").
    fn is_taken(&mut self, ip: IpAddr) -> bool;
    /// The addresses whose holder [`is`](Holder::is) `att` (with `legacy`: its
    /// container's ID-only files).
    fn held_by(&mut self, att: &Attachment, legacy: bool) -> Result<Vec<IpAddr>, StoreError>;
    /// Releases these addresses (ADD rollback, GC).
    fn release_ips(&mut self, ips: &[IpAddr]) -> Result<(), StoreError>;
    /// Every allocated address (cheap: STATUS).
    fn allocated(&mut self) -> Result<Vec<IpAddr>, StoreError>;
    /// Every allocation with its holder, read fresh (GC).
    fn holders(&mut self) -> Result<Vec<(IpAddr, Holder)>, StoreError>;

    /// The addresses `att` holds, including legacy ID-only files of its container
    /// (the reference's duplicate check).
    fn ips_of(&mut self, att: &Attachment) -> Result<Vec<IpAddr>, StoreError> {
        let mut ips = self.held_by(att, false)?;
        ips.extend(self.held_by(att, true)?);
        Ok(ips)
    }

    /// Releases every address of `att`; legacy ID-only files only when it has none in
    /// the current format (the reference's DEL). Returns what was released.
    fn release(&mut self, att: &Attachment) -> Result<Vec<IpAddr>, StoreError> {
        for legacy in [false, true] {
            let ips = self.held_by(att, legacy)?;
            if !ips.is_empty() {
                self.release_ips(&ips)?;
                return Ok(ips);
            }
        }
        Ok(vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_parsing() {
        let att = Attachment::new("dummy", "eth0");
        assert_eq!(
            Holder::parse(b"dummy\r\neth0"),
            Holder::Attachment(att.clone())
        );
        assert_eq!(
            Holder::parse(b"  dummy\r\neth0\n"),
            Holder::Attachment(att.clone())
        );
        assert_eq!(Holder::parse(b"dummy"), Holder::Legacy("dummy".into()));
        assert_eq!(Holder::parse(b"dummy\n"), Holder::Legacy("dummy".into()));
        assert_eq!(Holder::parse(b""), Holder::Empty);
        assert!(!Holder::Empty.is(&att, false) && !Holder::Empty.is(&att, true));
        // whitespace is content (no crashed writer leaves it): unknown, not empty
        for junk in [&b"   "[..], b"\n", b"a b", b"\xff\xfe", b"a\r\nb c"] {
            assert_eq!(Holder::parse(junk), Holder::Unknown, "{junk:?}");
        }
        assert!(Holder::parse(b"dummy\r\neth0").is(&att, false));
        assert!(!Holder::parse(b"dummy\r\neth0").is(&att, true));
        assert!(Holder::parse(b"dummy").is(&att, true));
        assert_eq!(
            Attachment::new("   dummy\n ", "eth0").file_content(),
            "dummy\r\neth0"
        );
    }
}
