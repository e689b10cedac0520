//! Fixtures for the binary-level tests: real binaries, real namespaces, real
//! kernel. Every fixture cleans up on `Drop`, so a panicking test leaves
//! nothing behind.
//!
//! - [`NamedNetns`]: a throwaway netns under `/run/netns` (`cnirs-…`), usable
//!   as `CNI_NETNS` and as a fake "host" to run plugins in.
//! - [`bin_path`] / [`go_plugin_path`]: our built binaries and the Go
//!   reference plugins.
//! - [`PluginRun`]: run a plugin binary with `CNI_*` env and stdin.
//! - [`TempDir`]: a unique temporary directory.
//! - [`FakePlugins`]: logging shell-script plugins, for runtime tests without root.
//! - [`CnitoolHost`] / [`cnitool_container_id`]: our cnitool in a fake host netns.
//! - [`fuzz`]: the fuzz targets' bodies (run by `fuzz/` and by the replay test).
//!
//! Privileged tests start with `if !testkit::privileged("name") { return; }`.

#![forbid(unsafe_code)]

mod bins;
mod cnitool;
mod fake_plugin;
pub mod fuzz;
mod named_netns;
mod plugin;
mod tempdir;

pub use bins::{GO_PLUGIN_DIR, bin_dir, bin_path, go_plugin_path};
pub use cnitool::{CnitoolHost, cnitool_container_id};
pub use fake_plugin::{Call, FakePlugins};
pub use named_netns::NamedNetns;
pub use plugin::{PluginOutput, PluginRun};
pub use tempdir::TempDir;

use std::sync::atomic::{AtomicU64, Ordering};

/// `<prefix>-<pid>-<n>`: unique within this process, and across processes
/// running at the same time.
fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}
