//! The allocation index kept beside the Go-compatible files, so ADD and DEL need not read
//! every lease file under the lock.
//!
//! It maps each address to a hash of its holder. It is trusted only while the store
//! directory is exactly as it was when the index was written: the header records the
//! directory's device, inode, mtime and ctime (any create/remove/rename by anyone, the Go
//! plugin included, sets the mtime to the current time; putting an old mtime back, as a
//! backup restore does, sets the ctime, which nobody can set back); on any difference the
//! directory is scanned and the index rebuilt. Lookups are verified against the lease files themselves.
//! See `DiskStore::unrepeatable_stamp` for how the recorded mtime is made unrepeatable.
//!
//! The content starts with a text line holding spaces, so the Go plugin (which compares
//! every file's trimmed content with `id\r\nifname` or `id`) can never take it for a lease.

use super::{Attachment, Holder};
use std::fs::Metadata;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::MetadataExt;

pub const FILE_NAME: &str = "index.host-local";
const MAGIC: &[u8] = b"# host-local allocation index v2, not a lease #\n";
const STAMP_LEN: usize = 48;
/// stamp, entry count, body hash, header hash.
const HEADER_LEN: usize = STAMP_LEN + 24;
const RECORD_LEN: usize = 32;

/// The identity and change times of the store directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stamp {
    pub fn of(meta: &Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    fn bytes(&self) -> [u8; STAMP_LEN] {
        let mut b = [0u8; STAMP_LEN];
        let words = [
            self.dev,
            self.ino,
            self.mtime.0 as u64,
            self.mtime.1 as u64,
            self.ctime.0 as u64,
            self.ctime.1 as u64,
        ];
        for (chunk, w) in b.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn from_bytes(b: &[u8]) -> Stamp {
        let w = |i: usize| u64_at(b, i * 8);
        Stamp {
            dev: w(0),
            ino: w(1),
            mtime: (w(2) as i64, w(3) as i64),
            ctime: (w(4) as i64, w(5) as i64),
        }
    }
}

/// A holder reduced to a hash (full holders are only ever read from lease files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Attachment(u64),
    Legacy(u64),
    Unknown,
}

impl Tag {
    pub fn of(holder: &Holder) -> Tag {
        match holder {
            Holder::Attachment(a) => Tag::attachment(a),
            Holder::Legacy(id) => Tag::legacy_id(id),
            // No lookup ever asks for either (GC reads the files themselves), so the
            // index need not tell them apart: its format stays as it was.
            Holder::Empty | Holder::Unknown => Tag::Unknown,
        }
    }

    pub fn attachment(a: &Attachment) -> Tag {
        Tag::Attachment(fnv(&[a.id.as_bytes(), b"\0", a.ifname.as_bytes()]))
    }

    pub fn legacy(a: &Attachment) -> Tag {
        Tag::legacy_id(&a.id)
    }

    /// One hash for a legacy file's ID and an attachment's container ID: they must match.
    fn legacy_id(id: &str) -> Tag {
        Tag::Legacy(fnv(&[id.as_bytes()]))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub ip: IpAddr,
    pub tag: Tag,
}

/// FNV-1a 64: stable across builds (the index outlives the binary that wrote it).
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A fast word-wise checksum, to detect torn or foreign content.
fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        h = (h ^ u64_at(c, 0))
            .wrapping_mul(0xff51_afd7_ed55_8ccd)
            .rotate_left(31);
    }
    for b in chunks.remainder() {
        h = (h ^ u64::from(*b)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    }
    h
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The whole file with `stamp` in its header.
pub fn encode(stamp: &Stamp, entries: &[Entry]) -> Vec<u8> {
    // Records go straight into the file's buffer (megabytes on a busy node); the header
    // is filled in once the body's hash is known.
    let body_at = MAGIC.len() + HEADER_LEN;
    let mut out = Vec::with_capacity(body_at + entries.len() * RECORD_LEN);
    out.extend_from_slice(MAGIC);
    out.resize(body_at, 0);
    for e in entries {
        let (kind, hash) = match e.tag {
            Tag::Attachment(h) => (1u8, h),
            Tag::Legacy(h) => (2, h),
            Tag::Unknown => (3, 0),
        };
        let mut rec = [0u8; RECORD_LEN];
        rec[0] = kind;
        rec[8..16].copy_from_slice(&hash.to_le_bytes());
        match e.ip {
            IpAddr::V4(v4) => {
                rec[1] = 4;
                rec[16..20].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                rec[1] = 6;
                rec[16..32].copy_from_slice(&v6.octets());
            }
        }
        out.extend_from_slice(&rec);
    }
    let h = header(stamp, entries.len() as u64, checksum(&out[body_at..]));
    out[MAGIC.len()..body_at].copy_from_slice(&h);
    out
}

/// The header: stamp, entry count, body hash, and its own hash.
fn header(stamp: &Stamp, count: u64, body_hash: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..STAMP_LEN].copy_from_slice(&stamp.bytes());
    h[STAMP_LEN..STAMP_LEN + 8].copy_from_slice(&count.to_le_bytes());
    h[STAMP_LEN + 8..STAMP_LEN + 16].copy_from_slice(&body_hash.to_le_bytes());
    let sum = checksum(&h[..STAMP_LEN + 16]);
    h[STAMP_LEN + 16..].copy_from_slice(&sum.to_le_bytes());
    h
}

/// The stamp and entries of a well-formed file; None for anything else.
pub fn decode(file: &[u8]) -> Option<(Stamp, Vec<Entry>)> {
    let rest = file.strip_prefix(MAGIC)?;
    let (h, body) = rest.split_at_checked(HEADER_LEN)?;
    if checksum(&h[..STAMP_LEN + 16]) != u64_at(h, STAMP_LEN + 16) {
        return None;
    }
    let count = usize::try_from(u64_at(h, STAMP_LEN)).ok()?;
    if body.len() != count.checked_mul(RECORD_LEN)? || checksum(body) != u64_at(h, STAMP_LEN + 8) {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    for rec in body.chunks_exact(RECORD_LEN) {
        let hash = u64_at(rec, 8);
        let tag = match rec[0] {
            1 => Tag::Attachment(hash),
            2 => Tag::Legacy(hash),
            3 => Tag::Unknown,
            _ => return None,
        };
        let ip = match rec[1] {
            4 => IpAddr::V4(Ipv4Addr::new(rec[16], rec[17], rec[18], rec[19])),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&rec[16..32]);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            _ => return None,
        };
        entries.push(Entry { ip, tag });
    }
    Some((Stamp::from_bytes(h), entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<Entry> {
        vec![
            Entry {
                ip: "10.1.2.3".parse().unwrap(),
                tag: Tag::attachment(&Attachment::new("c1", "eth0")),
            },
            Entry {
                ip: "2001:db8::5".parse().unwrap(),
                tag: Tag::Legacy(7),
            },
            Entry {
                ip: "10.1.2.4".parse().unwrap(),
                tag: Tag::Unknown,
            },
        ]
    }

    #[test]
    fn round_trip() {
        let stamp = Stamp {
            dev: 1,
            ino: 2,
            mtime: (3, 4),
            ctime: (5, 6),
        };
        assert_eq!(
            decode(&encode(&stamp, &entries())),
            Some((stamp, entries()))
        );
    }

    #[test]
    fn corruption_is_detected() {
        let file = encode(&Stamp::default(), &entries());
        for cut in [0, 10, MAGIC.len() + 5, file.len() - 1] {
            assert_eq!(decode(&file[..cut]), None, "cut at {cut}");
        }
        for flip in [MAGIC.len() + 3, file.len() - 3, file.len() - 30] {
            let mut bad = file.clone();
            bad[flip] ^= 0x40;
            assert_eq!(decode(&bad), None, "flip at {flip}");
        }
    }

    #[test]
    fn never_looks_like_a_lease() {
        let file = encode(&Stamp::default(), &entries());
        let text = String::from_utf8_lossy(&file);
        assert!(text.trim().contains(' '));
        assert_eq!(Holder::parse(&file), Holder::Unknown);
        assert!(FILE_NAME.parse::<IpAddr>().is_err());
    }
}
