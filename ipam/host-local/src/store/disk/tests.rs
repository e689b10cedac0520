//! The disk store against real directories: format, legacy files, hostile entries and
//! the index's trust rules.

use super::*;
use libcni::testutil::TempDir;
use std::os::unix::fs::{PermissionsExt, symlink};

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
fn hostile_entries_are_skipped_never_followed() {
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
    fs::write(dir.join("010.0.0.7"), "victim\r\neth0").unwrap();
    fs::write(dir.join("notes.txt"), "victim\r\neth0").unwrap();
    symlink(outside.join("last"), dir.join("last_reserved_ip.0")).unwrap();
    let mut s = open(&t);
    assert!(s.release(&att("victim", "eth0")).unwrap().is_empty());
    let mut all = s.allocated().unwrap();
    all.sort();
    assert_eq!(all, [ipa("10.0.0.5"), ipa("10.0.0.6")]);
    // a symlink or directory under an address's name is taken, not overwritten
    assert!(!s.reserve(&att("a", "eth0"), ipa("10.0.0.3"), 1).unwrap());
    assert!(!s.reserve(&att("a", "eth0"), ipa("10.0.0.4"), 1).unwrap());
    // a symlinked last_reserved_ip is a clear error and leaves no lease behind
    let err = s
        .reserve(&att("a", "eth0"), ipa("10.0.0.8"), 0)
        .unwrap_err();
    assert!(err.to_string().contains("last_reserved_ip.0"), "{err}");
    assert!(!dir.join("10.0.0.8").exists());
    assert_eq!(s.last_reserved(0), None);
    drop(s);
    assert_eq!(fs::read(&secret).unwrap(), b"victim\r\neth0");
    assert!(!outside.join("last").exists());
}

#[test]
fn symlinked_store_or_lock_is_refused() {
    let t = tmp("symdir");
    let elsewhere = tmp("elsewhere");
    symlink(elsewhere.path(), t.join("net")).unwrap();
    assert!(matches!(
        DiskStore::open(t.path(), "net", true),
        Err(StoreError::NotADirectory(_)) | Err(StoreError::Io { .. })
    ));
    let t = tmp("symlock");
    fs::create_dir_all(t.join("net")).unwrap();
    symlink(elsewhere.join("lockfile"), t.join("net/lock")).unwrap();
    let err = DiskStore::open(t.path(), "net", true).err().unwrap();
    assert!(err.to_string().contains("opening lock"), "{err}");
    assert!(!elsewhere.join("lockfile").exists());
    // and a missing store is not created when not asked to
    assert!(
        DiskStore::open(t.path(), "absent", false)
            .unwrap()
            .is_none()
    );
    assert!(!t.join("absent").exists());
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
