//! Network namespaces: open and classify a netns path (Go `ns.GetNS` /
//! `ns.IsNSorErr`), run code inside one, and tell whether a path is the
//! caller's own netns (the skel's "should not be the same" check).
//!
//! This is the one way into a namespace in the workspace: a path is opened
//! once ([`Netns::open`]; for CNI_NETNS, once per call through [`OpenOnce`],
//! shared by skel and the verb), and entered only by [`Netns::run`], on a
//! short-lived scoped thread: the calling thread never changes namespace, so
//! there is nothing to restore and no `?` can leave a thread in the wrong
//! netns. Work bound to a namespace either runs there (sysctls) or creates
//! something there that keeps the namespace (a netlink socket, see
//! `hostnet::netlink::Netlink::in_netns`).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use nix::errno::Errno;
use nix::sched::{CloneFlags, setns};
use nix::sys::statfs::{NSFS_MAGIC, PROC_SUPER_MAGIC, statfs};

/// [`NetnsError::Io`]'s `op` when [`Netns::run`] could not enter the namespace.
pub const OP_ENTER: &str = "error switching to ns";
/// [`NetnsError::Io`]'s `op` when [`Netns::run`] could not start its thread.
pub const OP_SPAWN: &str = "failed to spawn a thread for ns";

/// Why a netns path could not be used. Messages follow the Go reference
/// (`containernetworking/plugins/pkg/ns`) so plugin errors match it.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// The path does not exist (ENOENT). DEL treats this as "already gone".
    #[error("failed to Statfs {}: no such file or directory", go_quote(.0))]
    NotExist(PathBuf),
    /// The path exists but is neither on nsfs nor on procfs.
    #[error("unknown FS magic on {}: {magic:x}", go_quote(.path))]
    NotNetns { path: PathBuf, magic: i64 },
    /// Any other failure; `op` is the Go-style verb phrase, the errno stays
    /// reachable through `source`.
    #[error("{op} {}: {}", go_quote(.path), go_errno(.source))]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The same error again (an [`OpenOnce`] hands its error to every caller). The
/// `io::Error` is rebuilt from its errno, or from its kind and text.
impl Clone for NetnsError {
    fn clone(&self) -> Self {
        match self {
            NetnsError::NotExist(path) => NetnsError::NotExist(path.clone()),
            NetnsError::NotNetns { path, magic } => NetnsError::NotNetns {
                path: path.clone(),
                magic: *magic,
            },
            NetnsError::Io { op, path, source } => NetnsError::Io {
                op,
                path: path.clone(),
                source: match source.raw_os_error() {
                    Some(errno) => io::Error::from_raw_os_error(errno),
                    None => io::Error::new(source.kind(), source.to_string()),
                },
            },
        }
    }
}

impl NetnsError {
    fn io(op: &'static str, path: &Path, source: impl Into<io::Error>) -> Self {
        NetnsError::Io {
            op,
            path: path.to_path_buf(),
            source: source.into(),
        }
    }

    /// The errno behind this error, if any (ENOENT for `NotExist`).
    pub fn errno(&self) -> Option<Errno> {
        match self {
            NetnsError::NotExist(_) => Some(Errno::ENOENT),
            NetnsError::NotNetns { .. } => None,
            NetnsError::Io { source, .. } => source.raw_os_error().map(Errno::from_raw),
        }
    }
}

/// An open network namespace. Holding the file keeps the namespace alive
/// even if its bind mount is removed.
#[derive(Debug)]
pub struct Netns {
    file: File,
    path: PathBuf,
}

impl Netns {
    /// Open `path` after checking it is a namespace file (Go `GetNS`).
    pub fn open(path: impl AsRef<Path>) -> Result<Netns, NetnsError> {
        let path = path.as_ref();
        check_is_netns(path)?;
        let file = File::open(path).map_err(|e| NetnsError::io("failed to open", path, e))?;
        Ok(Netns {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The calling thread's netns. The recorded path names this thread by
    /// tid, so it stays meaningful when handed to other threads.
    pub fn current() -> Result<Netns, NetnsError> {
        let path = PathBuf::from(format!(
            "/proc/{}/task/{}/ns/net",
            std::process::id(),
            nix::unistd::gettid()
        ));
        // Open via thread-self: same inode, and immune to a tid race.
        let file = File::open("/proc/thread-self/ns/net")
            .map_err(|e| NetnsError::io("failed to open", &path, e))?;
        Ok(Netns { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` on a fresh thread that has joined this namespace, and return
    /// its value. A panic in `f` is resumed on the caller.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        std::thread::scope(|s| {
            let worker = std::thread::Builder::new()
                .name("netns-run".into())
                .spawn_scoped(s, || {
                    setns(&self.file, CloneFlags::CLONE_NEWNET)
                        .map_err(|e| NetnsError::io(OP_ENTER, &self.path, e))?;
                    Ok(f())
                })
                .map_err(|e| NetnsError::io(OP_SPAWN, &self.path, e))?;
            match worker.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// True when this is the calling thread's own netns.
    pub fn is_current(&self) -> Result<bool, NetnsError> {
        let here = Netns::current()?;
        Ok(same_inode(&here.file, &here.path)? == same_inode(&self.file, &self.path)?)
    }
}

impl AsFd for Netns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// A namespace path opened at most once, on first use, and shared by clones: skel opens
/// CNI_NETNS through it to refuse the plugin's own netns, and the verb gets the same open
/// file (or the same error) through [`crate::skel::CmdArgs::open_netns`].
#[derive(Debug, Clone, Default)]
pub struct OpenOnce(Arc<OnceLock<Opened>>);

/// The path [`OpenOnce`] opened, and how that went.
type Opened = (String, Result<Arc<Netns>, NetnsError>);

impl OpenOnce {
    /// The namespace at `path`, opened by the first call; a later call for another path
    /// opens that one uncached.
    pub fn open(&self, path: &str) -> Result<Arc<Netns>, NetnsError> {
        let (opened, result) = self
            .0
            .get_or_init(|| (path.to_string(), Netns::open(path).map(Arc::new)));
        if opened == path {
            result.clone()
        } else {
            Netns::open(path).map(Arc::new)
        }
    }

    /// Whether a path was opened (or tried) through this cell or a clone of it.
    pub fn is_opened(&self) -> bool {
        self.0.get().is_some()
    }
}

/// Always equal: a cache of what its path names, not part of a value's identity (so
/// `CmdArgs` compares by what the runtime sent).
impl PartialEq for OpenOnce {
    fn eq(&self, _: &OpenOnce) -> bool {
        true
    }
}

/// True when `path` names the calling thread's own netns (same dev and
/// inode). The skel refuses ADD/DEL in that case unless overridden, with
/// "plugin's netns and netns from CNI_NETNS should not be the same".
pub fn is_current_netns(path: impl AsRef<Path>) -> Result<bool, NetnsError> {
    Netns::open(path)?.is_current()
}

/// `IsNSorErr`: the path must be on nsfs (a bind-mounted netns) or procfs
/// (`/proc/<pid>/ns/net`). Statfs first, like Go, so a FIFO or device is never
/// opened.
pub fn check_is_netns(path: &Path) -> Result<(), NetnsError> {
    let st = match statfs(path) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Err(NetnsError::NotExist(path.to_path_buf())),
        Err(e) => return Err(NetnsError::io("failed to Statfs", path, e)),
    };
    let kind = st.filesystem_type();
    if kind == NSFS_MAGIC || kind == PROC_SUPER_MAGIC {
        Ok(())
    } else {
        #[allow(clippy::unnecessary_cast)] // fs_type_t differs between libcs
        let magic = kind.0 as i64;
        Err(NetnsError::NotNetns {
            path: path.to_path_buf(),
            magic,
        })
    }
}

fn same_inode(file: &File, path: &Path) -> Result<(u64, u64), NetnsError> {
    let m = file
        .metadata()
        .map_err(|e| NetnsError::io("failed to stat", path, e))?;
    Ok((m.dev(), m.ino()))
}

/// Go's `%v` of a syscall error: the lower-case strerror text.
fn go_errno(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => {
            let desc = Errno::from_raw(n).desc();
            let mut chars = desc.chars();
            match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => desc.to_string(),
            }
        }
        None => e.to_string(),
    }
}

fn go_quote(path: &Path) -> String {
    crate::goquote::quote_bytes(path.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_path_is_not_exist() {
        let err = Netns::open("/nonexistent/cnirs/netns").unwrap_err();
        assert!(matches!(err, NetnsError::NotExist(_)), "{err:?}");
        assert_eq!(err.errno(), Some(Errno::ENOENT));
        assert_eq!(
            err.to_string(),
            r#"failed to Statfs "/nonexistent/cnirs/netns": no such file or directory"#
        );
    }

    #[test]
    fn proc_file_is_accepted_and_current() {
        // /proc/self/ns/net is on procfs; opening it needs no privilege.
        let ns = Netns::open("/proc/thread-self/ns/net").unwrap();
        assert!(ns.is_current().unwrap());
        assert!(Netns::current().unwrap().is_current().unwrap());
    }

    #[test]
    fn open_once_opens_once_and_shares_the_result() {
        let once = OpenOnce::default();
        let a = once.open("/proc/thread-self/ns/net").unwrap();
        let b = once.clone().open("/proc/thread-self/ns/net").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let missing = OpenOnce::default();
        for _ in 0..2 {
            let e = missing.open("/nonexistent/cnirs/netns").unwrap_err();
            assert!(matches!(e, NetnsError::NotExist(_)), "{e:?}");
        }
        // Another path is not served from the cache.
        assert!(once.open("/nonexistent/cnirs/netns").is_err());
    }

    #[test]
    fn a_cloned_error_reads_the_same() {
        let e = NetnsError::io(OP_ENTER, Path::new("/x"), Errno::EINVAL);
        assert_eq!(e.clone().to_string(), e.to_string());
        assert_eq!(e.clone().errno(), Some(Errno::EINVAL));
    }

    #[test]
    fn io_error_message_is_go_like() {
        let e = NetnsError::io("failed to open", Path::new("/x"), Errno::EACCES);
        assert_eq!(e.to_string(), r#"failed to open "/x": permission denied"#);
        assert_eq!(e.errno(), Some(Errno::EACCES));
    }
}
