//! Files someone else may have put in our way: a FIFO (an open for reading waits for a
//! writer forever), a symlink to `/dev/zero` (a read never ends), a directory, a link out
//! of a directory we own. The rules, the same as host-local's store: only regular files
//! are read, never more than a cap, opened `O_NONBLOCK`; entries we own are never followed
//! (`O_NOFOLLOW`) and are written whole or not at all (temp file, fsync, rename).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The most a network configuration may hold: on stdin, in a `.conflist`/`.conf` file.
/// Real ones are a few KiB; a prevResult of a hundred interfaces is under 100 KiB. Beyond
/// this the input is a mistake (`/dev/zero`, a log file) or an attack.
pub const MAX_CONFIG: u64 = 16 << 20;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[source] io::Error),
    /// Not a regular file (`kind` says what it is), or a symlink where none is followed.
    #[error("is {kind}, not a regular file")]
    NotRegular { kind: &'static str },
    #[error("is larger than {} (the limit)", human(*.max))]
    TooLarge { max: u64 },
}

impl ReadError {
    /// The file is not there (`ENOENT`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }

    /// A symlink where none is followed ([`Links::Refuse`]).
    pub fn is_symlink(&self) -> bool {
        matches!(self, ReadError::NotRegular { kind } if *kind == SYMLINK)
    }
}

/// `16 MiB`, `4096 bytes`.
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// Whether a symlink at the path itself is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Configs: an operator's symlink to a regular file is fine.
    Follow,
    /// Entries of a directory we own: a symlink is refused, never read through.
    Refuse,
}

const SYMLINK: &str = "a symlink";

fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        SYMLINK
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading without waiting on a FIFO or taking a terminal, whatever it
/// is; under [`Links::Refuse`] a symlink at `path` itself fails (`ELOOP`).
pub fn open_nonblocking(path: &Path, links: Links) -> io::Result<File> {
    let nofollow = match links {
        Links::Follow => 0,
        Links::Refuse => nix::libc::O_NOFOLLOW,
    };
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY | nofollow)
        .open(path)
}

/// Opens `path` for reading without waiting on a FIFO; an error unless it is a regular file.
pub fn open_regular(path: &Path, links: Links) -> Result<File, ReadError> {
    let file = open_nonblocking(path, links).map_err(|e| match e.raw_os_error() {
        Some(nix::libc::ELOOP) if links == Links::Refuse => ReadError::NotRegular { kind: SYMLINK },
        _ => ReadError::Io(e),
    })?;
    let t = file.metadata().map_err(ReadError::Io)?.file_type();
    if !t.is_file() {
        return Err(ReadError::NotRegular { kind: kind_of(t) });
    }
    Ok(file)
}

/// The content of the regular file `path`, at most `max` bytes (more is an error).
pub fn read_regular(path: &Path, links: Links, max: u64) -> Result<Vec<u8>, ReadError> {
    read_bounded(open_regular(path, links)?, max)
}

/// All of `r`, at most `max` bytes (more is an error); reads one byte past `max` to know.
pub fn read_bounded(r: impl Read, max: u64) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    r.take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(ReadError::Io)?;
    if out.len() as u64 > max {
        return Err(ReadError::TooLarge { max });
    }
    Ok(out)
}

/// The temporary name [`write_atomic`] uses for `path`: hidden, beside it, never a name
/// a loader picks up (it ends in `.tmp`).
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.tmp"))
}

/// A step of [`write_atomic_via`] that failed: what it did (`"renaming into"`), to which path.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct WriteError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn step(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> WriteError {
    move |source| WriteError {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Puts `bytes` at `path` whole or not at all, through [`temp_path`]; see
/// [`write_atomic_via`].
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomic_via(path, &temp_path(path), bytes, mode).map_err(|e| e.source)
}

/// Puts `bytes` with permission bits `mode` at `path` whole or not at all: written to
/// `tmp` (beside it; created fresh 0600, never through a link), chmod to `mode` (the umask
/// does not apply), fsynced, renamed over `path` (which replaces a symlink or FIFO there
/// instead of following it, and fails on a directory), then the directory fsynced so the
/// rename survives a crash. `tmp` is removed on failure.
pub fn write_atomic_via(
    path: &Path,
    tmp: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), WriteError> {
    remove_entry_file(tmp).map_err(step("removing", tmp))?;
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
            .open(tmp)
            .map_err(step("creating", tmp))?;
        f.write_all(bytes).map_err(step("writing", tmp))?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(step("chmod", tmp))?;
        f.sync_all().map_err(step("syncing", tmp))?;
        std::fs::rename(tmp, path).map_err(step("renaming into", path))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    written?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    sync_dir(dir)
}

/// fsyncs the directory `dir`, so that an entry created, renamed or removed in it stays so
/// after a crash.
pub fn sync_dir(dir: &Path) -> Result<(), WriteError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(step("syncing directory", dir))
}

/// Removes a file or symlink at `path` (never what it points to); a missing one is fine.
fn remove_entry_file(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes whatever is at `path` in a directory we own: a file, a symlink (not its
/// target), a FIFO, or an empty directory. A missing entry is fine.
pub fn remove_entry(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir(path),
        Ok(_) => remove_entry_file(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mkfifo(path: &Path) {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }

    #[test]
    fn reads_only_regular_files_and_at_most_the_cap() {
        let dir = testkit::TempDir::new("libcni-file");
        let file = dir.join("f");
        std::fs::write(&file, "12345").unwrap();
        assert_eq!(read_regular(&file, Links::Refuse, 5).unwrap(), b"12345");
        let e = read_regular(&file, Links::Refuse, 4).unwrap_err();
        assert_eq!(e.to_string(), "is larger than 4 bytes (the limit)");
        // A FIFO is refused without waiting for a writer.
        mkfifo(&dir.join("fifo"));
        let e = read_regular(&dir.join("fifo"), Links::Follow, 5).unwrap_err();
        assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        // /dev/zero through a link: refused, not read forever.
        symlink("/dev/zero", dir.join("zero")).unwrap();
        let e = read_regular(&dir.join("zero"), Links::Follow, MAX_CONFIG).unwrap_err();
        assert_eq!(e.to_string(), "is a character device, not a regular file");
        symlink(&file, dir.join("link")).unwrap();
        assert_eq!(
            read_regular(&dir.join("link"), Links::Follow, 5).unwrap(),
            b"12345"
        );
        let e = read_regular(&dir.join("link"), Links::Refuse, 5).unwrap_err();
        assert_eq!(e.to_string(), "is a symlink, not a regular file");
        std::fs::create_dir(dir.join("d")).unwrap();
        let e = read_regular(&dir.join("d"), Links::Follow, 5).unwrap_err();
        assert_eq!(e.to_string(), "is a directory, not a regular file");
        assert!(
            read_regular(&dir.join("none"), Links::Follow, 5)
                .unwrap_err()
                .is_not_found()
        );
        assert_eq!(human(MAX_CONFIG), "16 MiB");
    }

    #[test]
    fn atomic_write_sets_the_exact_mode_and_names_a_failed_step() {
        use std::os::unix::fs::PermissionsExt;
        let dir = testkit::TempDir::new("libcni-file");
        // 0666: a umask (022 at least) would take bits from a mode given at creation.
        write_atomic(&dir.join("f"), b"x", 0o666).unwrap();
        let mode = std::fs::metadata(dir.join("f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o666);
        std::fs::create_dir(dir.join("d")).unwrap();
        let e = write_atomic_via(&dir.join("d"), &dir.join(".d.x"), b"x", 0o600).unwrap_err();
        assert_eq!(
            (e.op, e.path.as_path()),
            ("renaming into", dir.join("d").as_path())
        );
        assert!(!dir.join(".d.x").exists());
    }

    #[test]
    fn atomic_write_replaces_links_and_fifos_instead_of_following_them() {
        let dir = testkit::TempDir::new("libcni-file");
        let outside = dir.join("outside");
        std::fs::write(&outside, "keep").unwrap();
        let entry = dir.join("entry");
        symlink(&outside, &entry).unwrap();
        write_atomic(&entry, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        assert_eq!(read_regular(&entry, Links::Refuse, 10).unwrap(), b"new");
        // A dangling link creates nothing where it points.
        std::fs::remove_file(&entry).unwrap();
        symlink(dir.join("nowhere"), &entry).unwrap();
        write_atomic(&entry, b"new", 0o600).unwrap();
        assert!(!dir.join("nowhere").exists());
        std::fs::remove_file(&entry).unwrap();
        mkfifo(&entry);
        write_atomic(&entry, b"new", 0o600).unwrap();
        assert_eq!(read_regular(&entry, Links::Refuse, 10).unwrap(), b"new");
        // A directory in the way is an error, and no temp file is left.
        std::fs::remove_file(&entry).unwrap();
        std::fs::create_dir(&entry).unwrap();
        assert!(write_atomic(&entry, b"new", 0o600).is_err());
        assert!(!temp_path(&entry).exists());
        // remove_entry takes the directory, a link (not its target), a FIFO.
        remove_entry(&entry).unwrap();
        symlink(&outside, &entry).unwrap();
        remove_entry(&entry).unwrap();
        assert!(outside.exists() && !entry.exists());
        remove_entry(&entry).unwrap();
    }
}
