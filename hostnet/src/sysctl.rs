//! Sysctl reads and writes through `/proc/sys`.
//!
//! `/proc/sys/net` shows the network namespace of the calling *thread*, so to
//! change a container's sysctls call these from a thread that has entered the
//! container's namespace.
//!
//! Names are dotted (`net.ipv4.conf.eth0.arp_notify`). As in sysctl(8), a `/`
//! inside a dotted name stands for a literal dot, so the VLAN interface
//! `cni0.100` is written `net.ipv4.conf.cni0/100.forwarding`. Code that has an
//! interface name in hand should rather build the path from components with
//! [`path`] and use the `*_path` functions.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const ROOT: &str = "/proc/sys";

/// Where `/proc/sys` is, when not there: a container whose own `/proc/sys` is read-only
/// gets the host's `/proc/sys/net` bound elsewhere (the node agent's DaemonSet). Set once,
/// before the first sysctl; a second call is ignored (the first root stays).
static ROOT_OVERRIDE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Reads and writes sysctls under `root` instead of `/proc/sys` from now on.
pub fn set_root(root: PathBuf) {
    let _ = ROOT_OVERRIDE.set(root);
}

/// A sysctl that could not be named, read or written. The io error (and its errno:
/// ENOENT for a missing interface or knob, EACCES, EROFS...) stays reachable.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    #[error("invalid sysctl name component {0:?}")]
    InvalidName(String),
    #[error("sysctl {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl SysctlError {
    /// The errno, when the kernel refused.
    pub fn errno(&self) -> Option<i32> {
        match self {
            SysctlError::Io { source, .. } => source.raw_os_error(),
            SysctlError::InvalidName(_) => None,
        }
    }

    /// The io error kind (`InvalidInput` for a bad name).
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            SysctlError::Io { source, .. } => source.kind(),
            SysctlError::InvalidName(_) => io::ErrorKind::InvalidInput,
        }
    }
}

/// For callers that speak `io::Result`: same kind and message, this error as the source.
impl From<SysctlError> for io::Error {
    fn from(e: SysctlError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

pub type Result<T> = std::result::Result<T, SysctlError>;

/// `/proc/sys/<c1>/<c2>/...` from components taken literally (they may
/// contain dots, e.g. `&["net", "ipv4", "conf", "cni0.100", "forwarding"]`).
/// Components that are empty, `.`/`..` or contain `/` are rejected.
pub fn path(components: &[&str]) -> Result<PathBuf> {
    let mut p = ROOT_OVERRIDE
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from(ROOT));
    for c in components {
        if c.is_empty() || *c == "." || *c == ".." || c.contains('/') || c.contains('\0') {
            return Err(SysctlError::InvalidName(c.to_string()));
        }
        p.push(c);
    }
    Ok(p)
}

/// The `/proc/sys` path of a dotted name (`/` in the name is a literal dot).
pub fn dotted_path(name: &str) -> Result<PathBuf> {
    let components: Vec<String> = name.split('.').map(|c| c.replace('/', ".")).collect();
    let refs: Vec<&str> = components.iter().map(String::as_str).collect();
    path(&refs)
}

/// The current value of `name`, without the trailing newline.
pub fn read(name: &str) -> Result<String> {
    read_path(&dotted_path(name)?)
}

/// Writes `value` to `name`.
pub fn write(name: &str, value: &str) -> Result<()> {
    write_path(&dotted_path(name)?, value)
}

/// Writes `value` to `name` only when the current value differs (compared
/// without surrounding whitespace). Returns whether it wrote.
pub fn ensure(name: &str, value: &str) -> Result<bool> {
    ensure_path(&dotted_path(name)?, value)
}

fn with_path(source: io::Error, path: &Path) -> SysctlError {
    SysctlError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// [`read`] for a path from [`path`].
pub fn read_path(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim_end_matches('\n').to_string())
        .map_err(|e| with_path(e, path))
}

/// [`write`] for a path from [`path`].
pub fn write_path(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value).map_err(|e| with_path(e, path))
}

/// [`ensure`] for a path from [`path`].
pub fn ensure_path(path: &Path, value: &str) -> Result<bool> {
    if read_path(path)?.trim() == value.trim() {
        return Ok(false);
    }
    write_path(path, value)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_names_map_slashes_to_dots() {
        assert_eq!(
            dotted_path("net.ipv4.conf.cni0/100.forwarding").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/cni0.100/forwarding")
        );
        assert_eq!(
            dotted_path("net.ipv4.ip_forward").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
    }

    #[test]
    fn components_are_taken_literally_and_checked() {
        assert_eq!(
            path(&["net", "ipv4", "conf", "cni0.100", "forwarding"]).unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/cni0.100/forwarding")
        );
        for bad in [&["net", ".."][..], &["net", ""], &["net", "a/b"]] {
            assert_eq!(path(bad).unwrap_err().kind(), io::ErrorKind::InvalidInput);
            assert!(matches!(path(bad), Err(SysctlError::InvalidName(_))));
        }
        assert!(dotted_path("net..ipv4").is_err());
    }

    #[test]
    fn the_errno_survives_with_the_message() {
        let e = read("net.ipv4.conf.cnirs-none0.forwarding").unwrap_err();
        assert_eq!(e.errno(), Some(nix::libc::ENOENT));
        assert_eq!(
            e.to_string(),
            "sysctl /proc/sys/net/ipv4/conf/cnirs-none0/forwarding: \
             No such file or directory (os error 2)"
        );
        let io = io::Error::from(e);
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
        assert!(io.to_string().ends_with("(os error 2)"));
    }
}
