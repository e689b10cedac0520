//! `resolvConf`: a resolv.conf file turned into the result's `dns`.

use libcni::file::{self, Links, ReadError};
use libcni::types::Dns;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// A resolv.conf is well under a kilobyte; the reference's line scanner gives up on a
/// 64 KiB line. Anything longer (`/dev/zero`, a log file by mistake) is refused.
const MAX_LEN: u64 = 64 * 1024;

/// Reads and parses the file; see [`parse`]. A FIFO is refused rather than waited on; a
/// device is read as the reference reads it, up to the cap (`/dev/zero` is too large).
pub fn read(path: &Path) -> io::Result<Dns> {
    let file = file::open_nonblocking(path, Links::Follow)?;
    if file.metadata()?.file_type().is_fifo() {
        return Err(io::Error::other("a FIFO, not a file"));
    }
    let bytes = file::read_bounded(file, MAX_LEN).map_err(|e| match e {
        ReadError::Io(e) => e,
        _ => io::Error::other(format!("too large (over {MAX_LEN} bytes)")),
    })?;
    let text =
        String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(parse(&text))
}

/// `nameserver`, `domain`, `search` and `options` lines, as the reference reads them:
/// comments (`#`, `;`), blank lines and lines with a single field are skipped, unknown
/// keywords ignored.
pub fn parse(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let fields: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        let [key, first, ..] = fields.as_slice() else {
            continue;
        };
        match key.as_str() {
            "nameserver" => dns.nameservers.push(first.clone()),
            "domain" => dns.domain = first.clone(),
            "search" => dns.search.extend_from_slice(&fields[1..]),
            "options" => dns.options.extend_from_slice(&fields[1..]),
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn simple() {
        let d = parse("nameserver 10.1.2.123\n");
        assert_eq!(d.nameservers, strs(&["10.1.2.123"]));
        assert!(d.domain.is_empty() && d.search.is_empty() && d.options.is_empty());
    }

    #[test]
    fn comments_and_junk() {
        let d = parse(
            "nameserver 10.1.2.123\n# nameserver 10.1.2.124\n; nameserver 10.1.2.125\n\
             \n   nameserver    10.1.2.126   \nnameserver\nfrobnicate 1\n",
        );
        assert_eq!(d.nameservers, strs(&["10.1.2.123", "10.1.2.126"]));
    }

    #[test]
    fn all_fields() {
        let d = parse(
            "nameserver 10.1.2.123\nnameserver 10.1.2.124\ndomain example.com\n\
             search example.com example.net\noptions ndots:5 attempts:2\noptions debug\n",
        );
        assert_eq!(d.nameservers, strs(&["10.1.2.123", "10.1.2.124"]));
        assert_eq!(d.domain, "example.com");
        assert_eq!(d.search, strs(&["example.com", "example.net"]));
        assert_eq!(d.options, strs(&["ndots:5", "attempts:2", "debug"]));
    }
}
