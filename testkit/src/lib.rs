//! Test support shared by every crate's tests (a dev-dependency only, so none of it ships
//! in a plugin): gating for privileged tests (they need root for namespaces, links, mounts
//! and firewall rules) and a temporary directory.
//!
//! Every privileged test is marked ignored and starts with the gate:
//!
//! ```no_run
//! #[test]
//! #[ignore = "needs root"]
//! fn bridge_add_creates_veth() {
//!     if !testkit::privileged("bridge_add_creates_veth") {
//!         return;
//!     }
//!     // ... the test, in its own network namespace ...
//! }
//! ```
//!
//! So a run without root reports them in the test runner's own summary (`N ignored`)
//! instead of counting them as passed; `scripts/test.sh` runs them as root with
//! `cargo test -- --include-ignored`. Run that way without root, the gate prints
//! `skipping <test>: needs root` and the test passes, or panics when `CI` is set, so CI can
//! never go green by skipping. A privileged test that is not marked fails a run without
//! root (see [`privileged`]); `CNIRS_UNPRIVILEGED=1` makes root look like any user, so a
//! root run can check that every privileged test is marked.

#![forbid(unsafe_code)]

/// True when the process may run privileged tests (effective uid 0, and
/// `CNIRS_UNPRIVILEGED` unset).
///
/// # Panics
/// Not privileged: when the env var `CI` is set and non-empty; and when the test runner
/// was not asked for ignored tests (`--ignored`, `--include-ignored`), since the test
/// then runs only because it lacks its `#[ignore = "needs root"]` mark.
pub fn privileged(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root() && std::env::var_os("CNIRS_UNPRIVILEGED").is_none();
    if !root && !asked_for_ignored() {
        panic!(
            "{test} needs root but is not marked #[ignore = \"needs root\"]: mark it, so that \
             a run without root reports it as ignored rather than passed"
        );
    }
    available(test, "root", root)
}

/// Whether the test runner runs ignored tests (only privileged tests are ignored here).
fn asked_for_ignored() -> bool {
    std::env::args().any(|a| a == "--ignored" || a == "--include-ignored")
}

/// The one gate every skip goes through: true when `present`; otherwise prints
/// `skipping <test>: needs <what>` and returns false, or panics when `CI` is set.
pub fn available(test: &str, what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    if in_ci {
        panic!("{test}: needs {what}, and CI is set: tests must not be skipped in CI");
    }
    eprintln!("skipping {test}: needs {what}");
    false
}

/// A fresh, empty directory under `std::env::temp_dir()`, named `cnirs-<prefix>-<pid>-<n>`,
/// removed with everything in it on drop.
#[derive(Debug)]
pub struct TempDir {
    path: std::path::PathBuf,
}

impl TempDir {
    /// # Panics
    /// When the directory cannot be created.
    pub fn new(prefix: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        loop {
            let path = std::env::temp_dir().join(format!(
                "cnirs-{prefix}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            // create_dir (not _all) fails on a leftover from a reused pid: try the next name.
            match std::fs::create_dir(&path) {
                Ok(()) => return TempDir { path },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("creating temp dir {}: {e}", path.display()),
            }
        }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// `self.path().join(rel)`.
    pub fn join(&self, rel: impl AsRef<std::path::Path>) -> std::path::PathBuf {
        self.path.join(rel)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: removing temp dir {}: {e}", self.path.display());
        }
    }
}
