//! Where the binaries under test live.

use std::path::{Path, PathBuf};

/// The Go reference plugins (Debian `containernetworking-plugins`).
pub const GO_PLUGIN_DIR: &str = "/usr/lib/cni";

/// The cargo profile directory holding our built binaries: the directory
/// above this test executable's `deps/` (so `CARGO_TARGET_DIR` and
/// `--release` are followed automatically).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test executable has a parent dir");
    match deps.file_name() {
        Some(n) if n == "deps" => deps.parent().unwrap_or(deps).to_path_buf(),
        _ => deps.to_path_buf(),
    }
}

/// Path of our binary `name` (e.g. "bridge", "host-local", "cnitool").
///
/// # Panics
/// If it is not built, with the command that builds it.
pub fn bin_path(name: &str) -> PathBuf {
    let mut tried = vec![bin_dir().join(name)];
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = Path::new(&dir);
        tried.push(dir.join("debug").join(name));
        tried.push(dir.join("release").join(name));
    }
    tried
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "binary {name:?} not found (looked at {tried:?}): \
                 run `cargo build --workspace` first"
            )
        })
}

/// Path of the Go reference plugin `name` in [`GO_PLUGIN_DIR`].
///
/// # Panics
/// If it is missing, saying which package provides it.
pub fn go_plugin_path(name: &str) -> PathBuf {
    let path = Path::new(GO_PLUGIN_DIR).join(name);
    assert!(
        path.is_file(),
        "Go reference plugin {} missing: apt-get install containernetworking-plugins",
        path.display()
    );
    path
}
