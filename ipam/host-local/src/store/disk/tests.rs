//! The disk store against real directories: format, legacy files, hostile entries and
//! the index's trust rules.

use super::*;
use std::os::unix::fs::{PermissionsExt, symlink};
use testkit::TempDir;

fn tmp(tag: &str) -> TempDir {
    TempDir::new(&format!("hl-disk-{tag}"))
}

fn ipa(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn open(t: &TempDir) -> DiskStore {
    DiskStore::open(t.path(), "net", true).unwrap().unwrap()
}

/// A store where ("a", "eth0") holds 10.0.0.2, written and closed (the index is current).
fn with_one_lease(tag: &str) -> TempDir {
    let t = tmp(tag);
    open(&t)
        .reserve(&att("a", "eth0"), ipa("10.0.0.2"), 0)
        .unwrap();
    t
}

fn att(id: &str, ifname: &str) -> Attachment {
    Attachment::new(id, ifname)
}

fn names(t: &TempDir) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(t.join("net"))
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn files_are_byte_compatible() {
    let t = tmp("format");
    let mut s = open(&t);
    assert!(
        s.reserve(&att("dummy", "eth0"), ipa("10.1.2.2"), 0)
            .unwrap()
    );
    assert!(
        s.reserve(&att("dummy", "eth0"), ipa("2001:db8:1::2"), 1)
            .unwrap()
    );
    assert!(
        !s.reserve(&att("other", "eth0"), ipa("10.1.2.2"), 0)
            .unwrap()
    );
    drop(s);
    let dir = t.join("net");
    assert_eq!(fs::read(dir.join("10.1.2.2")).unwrap(), b"dummy\r\neth0");
    assert_eq!(
        fs::read(dir.join("2001:db8:1::2")).unwrap(),
        b"dummy\r\neth0"
    );
    assert_eq!(
        fs::read(dir.join("last_reserved_ip.0")).unwrap(),
        b"10.1.2.2"
    );
    assert_eq!(
        fs::read(dir.join("last_reserved_ip.1")).unwrap(),
        b"2001:db8:1::2"
    );
    let mode = fs::metadata(dir.join("10.1.2.2"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(dir.join(LOCK_FILE).is_file());
    assert!(dir.join(index::FILE_NAME).is_file());
}

#[test]
fn release_reads_the_index_and_honours_legacy_files() {
    let t = tmp("release");
    let mut s = open(&t);
    s.reserve(&att("a", "eth0"), ipa("10.0.0.2"), 0).unwrap();
    s.reserve(&att("a", "eth1"), ipa("10.0.0.3"), 0).unwrap();
    drop(s);
    // a lease from an old plugin: ID only
    fs::write(t.join("net/10.0.0.9"), "legacy").unwrap();
    let mut s = open(&t);
    assert_eq!(s.ips_of(&att("a", "eth0")).unwrap(), [ipa("10.0.0.2")]);
    assert_eq!(s.release(&att("a", "eth0")).unwrap(), [ipa("10.0.0.2")]);
    assert_eq!(s.release(&att("a", "eth0")).unwrap(), Vec::<IpAddr>::new());
    assert_eq!(s.ips_of(&att("legacy", "eth0")).unwrap(), [ipa("10.0.0.9")]);
    assert_eq!(
        s.release(&att("legacy", "whatever")).unwrap(),
        [ipa("10.0.0.9")]
    );
    assert_eq!(s.release(&att("a", "eth1")).unwrap(), [ipa("10.0.0.3")]);
    drop(s);
    // an empty store keeps only lock and last_reserved_ip.*
    assert_eq!(names(&t), ["last_reserved_ip.0", "lock"]);
}

#[test]
fn a_change_behind_the_index_is_seen() {
    let t = with_one_lease("stale");
    // Another plugin (the Go one) adds and removes leases right after us.
    fs::write(t.join("net/10.0.0.5"), "b\r\neth0").unwrap();
    let mut s = open(&t);
    assert!(s.allocated().unwrap().contains(&ipa("10.0.0.5")));
    assert_eq!(s.ips_of(&att("b", "eth0")).unwrap(), [ipa("10.0.0.5")]);
    drop(s);
    fs::remove_file(t.join("net/10.0.0.2")).unwrap();
    let mut s = open(&t);
    assert_eq!(s.allocated().unwrap(), [ipa("10.0.0.5")]);
    assert!(!s.allocated().unwrap().contains(&ipa("10.0.0.2")));
}

#[test]
fn changes_in_the_same_clock_tick_are_seen() {
    let t = tmp("tick");
    for i in 0..50u32 {
        let mut s = open(&t);
        let mine = ipa(&format!("10.0.1.{}", i + 1));
        assert!(s.reserve(&att(&format!("r{i}"), "eth0"), mine, 0).unwrap());
        drop(s);
        // right away, as a Go plugin waiting on the lock would
        let theirs = format!("10.0.2.{}", i + 1);
        fs::write(t.join("net").join(&theirs), format!("g{i}\r\neth0")).unwrap();
        let mut s = open(&t);
        assert!(
            s.allocated().unwrap().contains(&ipa(&theirs)),
            "iteration {i}"
        );
        assert_eq!(
            s.ips_of(&att(&format!("g{i}"), "eth0")).unwrap(),
            [ipa(&theirs)]
        );
    }
}

#[test]
fn a_corrupt_index_is_rebuilt() {
    let t = with_one_lease("corrupt");
    let idx = t.join("net").join(index::FILE_NAME);
    let mut bytes = fs::read(&idx).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0xff;
    // rewrite in place: the directory itself does not change
    std::fs::OpenOptions::new()
        .write(true)
        .open(&idx)
        .unwrap()
        .write_all_at(&bytes, 0)
        .unwrap();
    let mut s = open(&t);
    assert_eq!(s.ips_of(&att("a", "eth0")).unwrap(), [ipa("10.0.0.2")]);
}

#[test]
fn an_in_place_edit_is_caught_by_verification() {
    let t = with_one_lease("edit");
    // same directory, new content: the index is trusted, but reading the lease corrects it
    fs::write(t.join("net/10.0.0.2"), "z\r\neth0").unwrap();
    let mut s = open(&t);
    assert!(s.ips_of(&att("a", "eth0")).unwrap().is_empty());
    assert_eq!(s.release(&att("z", "eth0")).unwrap(), [ipa("10.0.0.2")]);
}

#[test]
fn hostile_entries_are_taken_never_written_through() {
    let t = tmp("hostile");
    let outside = tmp("outside");
    let secret = outside.join("secret");
    fs::write(&secret, "victim\r\neth0").unwrap();
    let dir = t.join("net");
    fs::create_dir_all(&dir).unwrap();
    symlink(&secret, dir.join("10.0.0.3")).unwrap();
    fs::create_dir(dir.join("10.0.0.4")).unwrap();
    fs::write(dir.join("10.0.0.5"), "").unwrap();
    fs::write(dir.join("10.0.0.6"), vec![b'x'; 10_000]).unwrap();
    nix::unistd::mkfifo(&dir.join("10.0.0.7"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    symlink(outside.join("nothing"), dir.join("10.0.0.9")).unwrap();
    fs::write(dir.join("010.0.0.7"), "victim\r\neth0").unwrap();
    fs::write(dir.join("notes.txt"), "victim\r\neth0").unwrap();
    symlink(outside.join("last"), dir.join("last_reserved_ip.0")).unwrap();
    let mut s = open(&t);
    let mut all = s.allocated().unwrap();
    all.sort();
    let taken = [
        "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.9",
    ];
    assert_eq!(all, taken.map(ipa));
    // a symlinked lease is read, as the reference reads it: the victim holds it (its
    // re-ADD is a duplicate), but it is never removed
    assert_eq!(s.ips_of(&att("victim", "eth0")).unwrap(), [ipa("10.0.0.3")]);
    s.release(&att("victim", "eth0")).unwrap();
    assert!(fs::symlink_metadata(dir.join("10.0.0.3")).is_ok());
    assert_eq!(s.ips_of(&att("victim", "eth0")).unwrap(), [ipa("10.0.0.3")]);
    // whatever has an address's name is taken, never overwritten
    for ip in taken {
        assert!(!s.reserve(&att("a", "eth0"), ipa(ip), 1).unwrap(), "{ip}");
    }
    // a symlinked last_reserved_ip is absent, then replaced
    assert_eq!(s.last_reserved(0), None);
    assert!(s.reserve(&att("a", "eth0"), ipa("10.0.0.8"), 0).unwrap());
    assert_eq!(s.last_reserved(0), Some(ipa("10.0.0.8")));
    drop(s);
    assert!(
        fs::symlink_metadata(dir.join("last_reserved_ip.0"))
            .unwrap()
            .is_file()
    );
    assert_eq!(fs::read(&secret).unwrap(), b"victim\r\neth0");
    assert!(!outside.join("last").exists() && !outside.join("nothing").exists());
    // the index written over these entries gives the same answers
    let mut s = open(&t);
    assert_eq!(s.allocated().unwrap().len(), taken.len() + 1);
    assert_eq!(s.ips_of(&att("victim", "eth0")).unwrap(), [ipa("10.0.0.3")]);
}

#[test]
fn a_non_regular_lock_or_index_is_never_waited_on() {
    let t = with_one_lease("fifo");
    let dir = t.join("net");
    let fifo = |p: &Path| {
        fs::remove_file(p).unwrap();
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap();
    };
    fifo(&dir.join(index::FILE_NAME));
    let mut s = open(&t);
    assert_eq!(s.ips_of(&att("a", "eth0")).unwrap(), [ipa("10.0.0.2")]);
    assert!(s.reserve(&att("b", "eth0"), ipa("10.0.0.3"), 0).unwrap());
    drop(s);
    assert!(
        fs::symlink_metadata(dir.join(index::FILE_NAME))
            .unwrap()
            .is_file()
    );
    fifo(&dir.join(LOCK_FILE));
    let err = DiskStore::open(t.path(), "net", true).err().unwrap();
    assert!(
        matches!(err, StoreError::NotARegularFile { what: "FIFO", .. }),
        "{err}"
    );
}

#[test]
fn a_lease_is_never_visible_without_its_content() {
    // A reader racing the writer (as a kill at any point would freeze it) must never see
    // a lease file that exists but is empty or partial.
    let t = tmp("whole");
    let dir = t.join("net");
    let mut s = open(&t);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (dir, done) = (dir.clone(), done.clone());
        std::thread::spawn(move || {
            let mut seen = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for dent in fs::read_dir(&dir).unwrap() {
                    let name = dent.unwrap().file_name().into_string().unwrap();
                    if name.parse::<IpAddr>().is_err() {
                        continue;
                    }
                    if let Ok(bytes) = fs::read(dir.join(&name)) {
                        assert!(bytes.ends_with(b"\r\neth0"), "{name}: {bytes:?}");
                        seen += 1;
                    }
                }
            }
            seen
        })
    };
    for i in 0..3000u32 {
        let ip = IpAddr::from([10, 1, (i / 250) as u8, (i % 250 + 1) as u8]);
        assert!(s.reserve(&att(&format!("c{i}"), "eth0"), ip, 0).unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}

#[test]
fn a_leftover_temp_lease_is_ignored_and_removed() {
    // a writer killed after writing its temporary file, before linking it
    let t = with_one_lease("tmp");
    let dir = t.join("net");
    fs::write(dir.join(LEASE_TMP), "dead\r\neth0").unwrap();
    assert!(LEASE_TMP.parse::<IpAddr>().is_err());
    let mut s = open(&t);
    assert!(s.ips_of(&att("dead", "eth0")).unwrap().is_empty());
    assert_eq!(s.allocated().unwrap(), [ipa("10.0.0.2")]);
    drop(s);
    assert!(!dir.join(LEASE_TMP).exists());
    // and one left next to a current index is replaced by the next write
    fs::write(dir.join(LEASE_TMP), "dead\r\neth0").unwrap();
    drop(open(&t)); // rescans (the directory changed) and writes a current index
    fs::write(dir.join(LEASE_TMP), "dead\r\neth0").unwrap();
    let mut s = open(&t);
    assert!(s.reserve(&att("b", "eth0"), ipa("10.0.0.3"), 0).unwrap());
    drop(s);
    assert_eq!(
        names(&t),
        [
            "10.0.0.2",
            "10.0.0.3",
            index::FILE_NAME,
            "last_reserved_ip.0",
            "lock"
        ]
    );
    assert_eq!(fs::read(dir.join("10.0.0.3")).unwrap(), b"b\r\neth0");
}

#[test]
fn nothing_released_writes_nothing() {
    // DEL of an unknown attachment (runtimes repeat DELs) and a refused ADD's empty
    // rollback must not rewrite the whole index (megabytes on a busy node) or touch
    // the directory.
    let t = with_one_lease("noop");
    let dir = t.join("net");
    let stamp = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (
            m.modified().unwrap(),
            std::os::unix::fs::MetadataExt::ino(&m),
        )
    };
    let before = (stamp(&dir), stamp(&dir.join(index::FILE_NAME)));
    let mut s = open(&t);
    assert!(s.release(&att("nobody", "eth0")).unwrap().is_empty());
    s.release_ips(&[]).unwrap();
    drop(s);
    assert_eq!(before, (stamp(&dir), stamp(&dir.join(index::FILE_NAME))));
}

#[test]
fn a_restored_mtime_does_not_revive_a_stale_index() {
    // A backup restore (tar, rsync -a, cp -a) or a `touch -d` puts the directory's old
    // mtime back after its content changed: the index must still not be trusted.
    let t = with_one_lease("restore");
    let dir = t.join("net");
    let old = fs::metadata(&dir).unwrap().modified().unwrap();
    fs::write(dir.join("10.0.0.7"), "b\r\neth0").unwrap();
    File::open(&dir)
        .unwrap()
        .set_times(FileTimes::new().set_modified(old))
        .unwrap();
    let mut s = open(&t);
    assert_eq!(s.release(&att("b", "eth0")).unwrap(), [ipa("10.0.0.7")]);
}

#[test]
fn an_empty_lease_is_taken_held_by_no_one_and_releasable() {
    // what a writer killed between O_EXCL create and write leaves behind
    let t = with_one_lease("empty");
    let dir = t.join("net");
    fs::write(dir.join("10.0.0.3"), "").unwrap();
    fs::write(dir.join("10.0.0.4"), "   ").unwrap();
    for _ in 0..2 {
        // first from a scan, then from the index that scan wrote
        let mut s = open(&t);
        assert!(s.allocated().unwrap().contains(&ipa("10.0.0.3")));
        assert!(!s.reserve(&att("b", "eth0"), ipa("10.0.0.3"), 0).unwrap());
        assert!(s.release(&att("", "")).unwrap().is_empty());
        assert_eq!(s.ips_of(&att("a", "eth0")).unwrap(), [ipa("10.0.0.2")]);
    }
    let mut s = open(&t);
    let mut holders = s.holders().unwrap();
    holders.sort_by_key(|(ip, _)| *ip);
    assert_eq!(
        holders,
        [
            (ipa("10.0.0.2"), Holder::Attachment(att("a", "eth0"))),
            (ipa("10.0.0.3"), Holder::Empty),
            (ipa("10.0.0.4"), Holder::Unknown),
        ]
    );
    s.release_ips(&[ipa("10.0.0.3")]).unwrap();
    assert!(s.reserve(&att("b", "eth0"), ipa("10.0.0.3"), 0).unwrap());
    drop(s);
    assert_eq!(fs::read(dir.join("10.0.0.3")).unwrap(), b"b\r\neth0");
}
