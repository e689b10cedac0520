//! Test gating for privileged tests (they need root for namespaces, links,
//! mounts and firewall rules).
//!
//! Every privileged test starts with:
//!
//! ```no_run
//! # fn example() {
//! if !libcni::testutil::privileged("bridge_add_creates_veth") {
//!     return;
//! }
//! // ... the test, in its own network namespace ...
//! # }
//! ```
//!
//! Not root: the test prints `skipping <test>: needs root` and passes. Not
//! root with `CI` set: it panics, so CI can never go green by skipping.

/// True when the process may run privileged tests (effective uid 0).
///
/// # Panics
/// When not root and the env var `CI` is set and non-empty.
pub fn privileged(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    if in_ci {
        panic!("{test}: needs root, and CI is set: privileged tests must not be skipped in CI");
    }
    eprintln!("skipping {test}: needs root");
    false
}
