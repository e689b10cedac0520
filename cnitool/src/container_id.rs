//! The container ID the Go cnitool derives from the netns path, so both tools name the
//! same attachment (and the same cache file) for the same namespace.

use sha2::{Digest, Sha512};
use std::path::Path;

/// `cnitool-` + the first 20 hex digits of sha512 of the absolute netns path.
pub fn container_id(abs_netns: &str) -> String {
    let digest = Sha512::digest(abs_netns.as_bytes());
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("cnitool-{hex}")
}

/// Go `filepath.Abs`: joined to the working directory when relative, then cleaned
/// lexically (symlinks are not resolved).
pub fn absolute(path: &str, cwd: &Path) -> String {
    if path.starts_with('/') {
        clean(path)
    } else {
        clean(&format!("{}/{path}", cwd.display()))
    }
}

/// Go `filepath.Clean` for an absolute path: no `.`, `..`, empty or trailing parts.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_id_as_the_go_cnitool() {
        // sha512("/var/run/netns/testing") starts with 77383ca0a0715733ca6f...
        assert_eq!(
            container_id("/var/run/netns/testing"),
            "cnitool-77383ca0a0715733ca6f"
        );
        assert_eq!(container_id("/run/netns/a"), "cnitool-a145bc1ace582bff43bd");
    }

    #[test]
    fn absolute_like_go() {
        let cwd = Path::new("/var/run");
        assert_eq!(absolute("netns/testing", cwd), "/var/run/netns/testing");
        assert_eq!(absolute("./netns//testing/", cwd), "/var/run/netns/testing");
        assert_eq!(
            absolute("../run/netns/x/../testing", cwd),
            "/var/run/netns/testing"
        );
        assert_eq!(absolute("/a/../../b", cwd), "/b");
        assert_eq!(absolute("/", cwd), "/");
    }
}
