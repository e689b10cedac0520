//! Files that appear whole or not at all (libcni's [`file::write_atomic_via`]: a temporary
//! name in the same directory, chmod, fsync, rename over the target, fsync the directory)
//! under temporary names of ours. Unchanged files are not touched.

use libcni::file::{self, Links, WriteError};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Marks our temporary files. The name ends in a counter, never in `.conf`, `.conflist`
/// or `.json` (libcni loads those, also half-written) and starts with a dot.
const TMP_MARK: &str = ".cni-rs-tmp.";

#[derive(Debug, thiserror::Error)]
#[error("{op} {path}: {source}{}", hint(.source))]
pub struct FileError {
    pub op: &'static str,
    pub path: PathBuf,
    pub source: std::io::Error,
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EROFS) => " (a read-only mount: the host directory must be mounted read-write)",
        Some(libc::EACCES) | Some(libc::EPERM) => " (not writable by this container)",
        _ => "",
    }
}

impl From<WriteError> for FileError {
    fn from(e: WriteError) -> FileError {
        FileError {
            op: e.op,
            path: e.path,
            source: e.source,
        }
    }
}

fn err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FileError {
    let path = path.to_path_buf();
    move |source| FileError { op, path, source }
}

/// Puts `content` with `mode` at `dir/name` unless it is already there; true if it wrote.
/// The write is [`file::write_atomic_via`] under a name of ours ([`TMP_MARK`]).
pub fn put(dir: &Path, name: &str, content: &[u8], mode: u32) -> Result<bool, FileError> {
    let target = dir.join(name);
    if same(&target, content, Some(mode)) {
        return Ok(false);
    }
    std::fs::create_dir_all(dir).map_err(err("creating", dir))?;
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let tmp = dir.join(format!(
        ".{name}{TMP_MARK}{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    file::write_atomic_via(&target, &tmp, content, mode)?;
    Ok(true)
}

/// Removes `path` if it exists; true if it did.
pub fn remove(path: &Path) -> Result<bool, FileError> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            file::sync_dir(path.parent().unwrap_or(Path::new("/")))?;
            Ok(true)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(err("removing", path)(e)),
    }
}

/// Removes temporary files a killed installer left in `dir`; their names.
pub fn remove_stale_temps(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with('.') && n.contains(TMP_MARK))
        .filter(|n| std::fs::remove_file(dir.join(n)).is_ok())
        .collect()
}

/// True if `path` is a regular file with exactly `content` (and permission bits `mode`).
/// A symlink to one counts; a FIFO or device is not opened for long (never waited on).
pub fn same(path: &Path, content: &[u8], mode: Option<u32>) -> bool {
    let Ok(file) = file::open_regular(path, Links::Follow) else {
        return false;
    };
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if meta.len() != content.len() as u64 || mode.is_some_and(|m| meta.mode() & 0o7777 != m) {
        return false;
    }
    file::read_bounded(file, content.len() as u64).is_ok_and(|have| have == content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use testkit::TempDir;

    #[test]
    fn a_fifo_in_the_way_is_replaced_without_waiting_on_it() {
        let dir = TempDir::new("cni-rs-agent-atomic");
        let target = dir.join("10-x.conflist");
        let made = std::process::Command::new("mkfifo").arg(&target).status();
        assert!(made.unwrap().success());
        let (done, wait) = std::sync::mpsc::channel();
        let path = dir.path().to_path_buf();
        // A thread, so that a put that waits for a FIFO writer fails the test, not hangs it.
        std::thread::spawn(move || done.send(put(&path, "10-x.conflist", b"{}", 0o644).unwrap()));
        let wrote = wait.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(wrote, Ok(true), "put waited on the FIFO");
        assert_eq!(std::fs::read(&target).unwrap(), b"{}");
    }

    #[test]
    fn the_mode_is_exact_whatever_the_umask() {
        let dir = TempDir::new("cni-rs-agent-atomic");
        // 0666: a umask (022 at least) would take bits from a mode given at creation.
        put(dir.path(), "f", b"x", 0o666).unwrap();
        assert_eq!(
            std::fs::metadata(dir.join("f")).unwrap().mode() & 0o7777,
            0o666
        );
        // A failed step names itself and the path.
        std::fs::create_dir(dir.join("d")).unwrap();
        let e = put(dir.path(), "d", b"x", 0o644).unwrap_err();
        assert_eq!(e.op, "renaming into");
        assert_eq!(e.path, dir.join("d"));
    }

    #[test]
    fn writes_then_skips_identical_content() {
        let dir = TempDir::new("cni-rs-agent-atomic");
        assert!(put(dir.path(), "a.conflist", b"one", 0o644).unwrap());
        let ino = std::fs::metadata(dir.join("a.conflist")).unwrap().ino();
        assert!(!put(dir.path(), "a.conflist", b"one", 0o644).unwrap());
        assert_eq!(
            std::fs::metadata(dir.join("a.conflist")).unwrap().ino(),
            ino
        );
        assert!(put(dir.path(), "a.conflist", b"two", 0o644).unwrap());
        assert_eq!(std::fs::read(dir.join("a.conflist")).unwrap(), b"two");
        // Only the target is left: the temporary file was renamed.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.conflist"]);
    }

    #[test]
    fn a_changed_mode_is_put_back() {
        let dir = TempDir::new("cni-rs-agent-atomic");
        put(dir.path(), "bridge", b"elf", 0o755).unwrap();
        std::fs::set_permissions(dir.join("bridge"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert!(put(dir.path(), "bridge", b"elf", 0o755).unwrap());
        assert_eq!(
            std::fs::metadata(dir.join("bridge")).unwrap().mode() & 0o7777,
            0o755
        );
    }

    #[test]
    fn stale_temps_are_ours_only() {
        let dir = TempDir::new("cni-rs-agent-atomic");
        for name in [
            ".bridge.cni-rs-tmp.12.0",
            ".10-x.conflist.cni-rs-tmp.3.1",
            "bridge",
            ".other",
        ] {
            std::fs::write(dir.join(name), "x").unwrap();
        }
        let mut removed = remove_stale_temps(dir.path());
        removed.sort();
        assert_eq!(
            removed,
            [".10-x.conflist.cni-rs-tmp.3.1", ".bridge.cni-rs-tmp.12.0"]
        );
        assert!(dir.join("bridge").exists() && dir.join(".other").exists());
    }

    #[test]
    fn temp_names_are_not_loaded_by_libcni() {
        let name = format!(".10-cni-rs.conflist{TMP_MARK}1.2");
        let ext = Path::new(&name).extension().unwrap();
        assert!(!["conf", "conflist", "json"].contains(&ext.to_str().unwrap()));
    }
}
