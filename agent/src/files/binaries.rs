//! The plugin binaries: every regular file of the source dir, copied into the host's bin
//! dir. Other files in the bin dir (other vendors' plugins) are never touched.

use std::path::{Path, PathBuf};

use crate::files::atomic::{self, FileError};

pub struct Binary {
    pub name: String,
    pub content: Vec<u8>,
}

/// The binaries to install, sorted by name.
pub fn load(source_dir: &Path) -> Result<Vec<Binary>, String> {
    let fail = |e: std::io::Error| format!("source dir {}: {e}", source_dir.display());
    let mut bins = Vec::new();
    for entry in std::fs::read_dir(source_dir).map_err(fail)? {
        let path: PathBuf = entry.map_err(fail)?.path();
        if !std::fs::metadata(&path).map_err(fail)?.is_file() {
            continue;
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string);
        let name = name.ok_or_else(|| format!("{}: not a UTF-8 name", path.display()))?;
        let content = std::fs::read(&path).map_err(fail)?;
        bins.push(Binary { name, content });
    }
    if bins.is_empty() {
        return Err(format!(
            "source dir {}: no binaries in it",
            source_dir.display()
        ));
    }
    bins.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(bins)
}

/// Copies the binaries that differ; the names it wrote.
pub fn install<'a>(bins: &'a [Binary], bin_dir: &Path) -> Result<Vec<&'a str>, FileError> {
    let mut written = Vec::new();
    for bin in bins {
        if atomic::put(bin_dir, &bin.name, &bin.content, 0o755)? {
            written.push(bin.name.as_str());
        }
    }
    Ok(written)
}

/// Removes our binaries from the bin dir: those still identical to ours (a file someone
/// replaced since is theirs now). Returns (removed, left alone).
pub fn uninstall<'a>(
    bins: &'a [Binary],
    bin_dir: &Path,
) -> Result<(Vec<&'a str>, Vec<&'a str>), FileError> {
    let (mut removed, mut kept) = (Vec::new(), Vec::new());
    for bin in bins {
        let path = bin_dir.join(&bin.name);
        if atomic::same(&path, &bin.content, None) {
            atomic::remove(&path)?;
            removed.push(bin.name.as_str());
        } else if path.exists() {
            kept.push(bin.name.as_str());
        }
    }
    Ok((removed, kept))
}
