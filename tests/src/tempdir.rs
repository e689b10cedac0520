//! A temporary directory removed on drop (no `tempfile` crate needed).

use std::path::{Path, PathBuf};

/// A fresh, empty directory under `std::env::temp_dir()`, named
/// `cnirs-<prefix>-<pid>-<n>`; removed with everything in it on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let base = std::env::temp_dir();
        loop {
            let path = base.join(crate::unique_name(&format!("cnirs-{prefix}")));
            // create_dir (not _all) fails on a leftover from a reused pid: try the next name.
            match std::fs::create_dir(&path) {
                Ok(()) => return TempDir { path },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("creating temp dir {}: {e}", path.display()),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path().join(rel)`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
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
