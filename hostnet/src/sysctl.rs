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

/// `/proc/sys/<c1>/<c2>/...` from components taken literally (they may
/// contain dots, e.g. `&["net", "ipv4", "conf", "cni0.100", "forwarding"]`).
/// Components that are empty, `.`/`..` or contain `/` are rejected.
pub fn path(components: &[&str]) -> io::Result<PathBuf> {
    let mut p = PathBuf::from(ROOT);
    for c in components {
        if c.is_empty() || *c == "." || *c == ".." || c.contains('/') || c.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid sysctl name component {c:?}"),
            ));
        }
        p.push(c);
    }
    Ok(p)
}

/// The `/proc/sys` path of a dotted name (`/` in the name is a literal dot).
pub fn dotted_path(name: &str) -> io::Result<PathBuf> {
    let components: Vec<String> = name.split('.').map(|c| c.replace('/', ".")).collect();
    let refs: Vec<&str> = components.iter().map(String::as_str).collect();
    path(&refs)
}

/// The current value of `name`, without the trailing newline.
pub fn read(name: &str) -> io::Result<String> {
    read_path(&dotted_path(name)?)
}

/// Writes `value` to `name`.
pub fn write(name: &str, value: &str) -> io::Result<()> {
    write_path(&dotted_path(name)?, value)
}

/// Writes `value` to `name` only when the current value differs (compared
/// without surrounding whitespace). Returns whether it wrote.
pub fn ensure(name: &str, value: &str) -> io::Result<bool> {
    ensure_path(&dotted_path(name)?, value)
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("sysctl {}: {e}", path.display()))
}

/// [`read`] for a path from [`path`].
pub fn read_path(path: &Path) -> io::Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim_end_matches('\n').to_string())
        .map_err(|e| with_path(e, path))
}

/// [`write`] for a path from [`path`].
pub fn write_path(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| with_path(e, path))
}

/// [`ensure`] for a path from [`path`].
pub fn ensure_path(path: &Path, value: &str) -> io::Result<bool> {
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
        }
        assert!(dotted_path("net..ipv4").is_err());
    }
}
