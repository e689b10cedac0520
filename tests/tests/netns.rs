//! sysproc::netns against the real kernel, and the NamedNetns fixture itself.
//! Privileged: each test creates its own named netns and touches no links.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cni_tests::{NamedNetns, PluginRun, TempDir};
use sysproc::netns::{Netns, NetnsError, is_current_netns};
use testkit::privileged;

/// Inode of the netns the calling thread is in.
fn thread_netns_inode() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
}

fn is_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = path.to_str().unwrap();
    mounts.lines().any(|l| l.split(' ').nth(4) == Some(p))
}

#[test]
#[ignore = "needs root"]
fn named_netns_is_usable() {
    if !privileged("named_netns_is_usable") {
        return;
    }
    let ns = NamedNetns::new("usable");
    assert!(ns.name().starts_with("cnirs-usable-"));
    assert_eq!(ns.path(), Path::new("/run/netns").join(ns.name()));
    let opened = Netns::open(ns.path()).unwrap();
    assert_eq!(opened.path(), ns.path());
    assert!(!opened.is_current().unwrap());
    // A fresh netns holds only a loopback, and `ip netns` sees it.
    let links = ns.exec_in(&["ip", "-o", "link", "show"]);
    assert_eq!(links.lines().count(), 1, "{links}");
    assert!(links.contains("lo:"), "{links}");
    let list = String::from_utf8(
        std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        list.lines().any(|l| l.split(' ').next() == Some(ns.name())),
        "{list}"
    );
}

#[test]
fn missing_path_is_not_exist() {
    let err = Netns::open("/run/netns/cnirs-does-not-exist").unwrap_err();
    assert!(
        matches!(&err, NetnsError::NotExist(p) if p == Path::new("/run/netns/cnirs-does-not-exist"))
    );
    assert_eq!(
        err.to_string(),
        r#"failed to Statfs "/run/netns/cnirs-does-not-exist": no such file or directory"#
    );
}

#[test]
fn regular_file_is_not_netns() {
    let dir = TempDir::new("notns");
    let file = dir.join("plain");
    std::fs::write(&file, b"").unwrap();
    let magic = nix::sys::statfs::statfs(&file).unwrap().filesystem_type().0;
    let err = Netns::open(&file).unwrap_err();
    match &err {
        NetnsError::NotNetns { path, magic: m } => {
            assert_eq!(path, &file);
            assert_eq!(*m, magic as i64);
        }
        other => panic!("expected NotNetns, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!("unknown FS magic on \"{}\": {magic:x}", file.display())
    );
}

#[test]
fn tmpfs_file_is_not_netns() {
    // /dev/shm is tmpfs everywhere we run: TMPFS_MAGIC 0x01021994.
    let dir = Path::new("/dev/shm");
    let tmpfs =
        nix::sys::statfs::statfs(dir).unwrap().filesystem_type() == nix::sys::statfs::TMPFS_MAGIC;
    if !testkit::available("tmpfs_file_is_not_netns", "/dev/shm on tmpfs", tmpfs) {
        return;
    }
    let file = dir.join(format!("cnirs-notns-{}", std::process::id()));
    std::fs::write(&file, b"").unwrap();
    let err = Netns::open(&file).unwrap_err();
    std::fs::remove_file(&file).unwrap();
    assert_eq!(
        err.to_string(),
        format!("unknown FS magic on \"{}\": 1021994", file.display())
    );
}

#[test]
fn proc_netns_is_usable_and_current() {
    let ns = Netns::open("/proc/self/ns/net").unwrap();
    assert!(ns.is_current().unwrap());
    assert!(is_current_netns("/proc/self/ns/net").unwrap());
    assert!(is_current_netns("/proc/thread-self/ns/net").unwrap());
    assert!(Netns::current().unwrap().is_current().unwrap());
}

#[test]
#[ignore = "needs root"]
fn run_enters_target_and_leaves_caller_alone() {
    if !privileged("run_enters_target_and_leaves_caller_alone") {
        return;
    }
    let ns = NamedNetns::new("run");
    let target = std::fs::metadata(ns.path()).unwrap().ino();
    let before = thread_netns_inode();
    assert_ne!(before, target);

    let inside = ns.netns().run(thread_netns_inode).unwrap();
    assert_eq!(inside, target);
    assert_eq!(thread_netns_inode(), before, "caller thread moved");

    // A panic inside reaches the caller, which is still where it was.
    let caught = std::panic::catch_unwind(|| ns.run(|| panic!("inside")));
    assert!(caught.is_err());
    assert_eq!(thread_netns_inode(), before);

    // Netns::current() taken inside is the target, seen from anywhere.
    let cur = ns.run(|| Netns::current().unwrap());
    assert!(ns.run(|| cur.is_current().unwrap()));
    assert!(!cur.is_current().unwrap());
}

#[test]
#[ignore = "needs root"]
fn same_netns_detection() {
    if !privileged("same_netns_detection") {
        return;
    }
    let a = NamedNetns::new("samea");
    let b = NamedNetns::new("sameb");
    assert!(!is_current_netns(a.path()).unwrap());
    assert!(a.run(|| is_current_netns(a.path()).unwrap()));
    assert!(!a.run(|| is_current_netns(b.path()).unwrap()));
    // /proc/self names the main thread, which stays outside.
    assert!(!a.run(|| is_current_netns("/proc/self/ns/net").unwrap()));
    // A missing CNI_NETNS is an error, not "same".
    assert!(matches!(
        is_current_netns("/run/netns/cnirs-missing"),
        Err(NetnsError::NotExist(_))
    ));
}

#[test]
#[ignore = "needs root"]
fn named_netns_removed_on_drop_and_on_panic() {
    if !privileged("named_netns_removed_on_drop_and_on_panic") {
        return;
    }
    let ns = NamedNetns::new("drop");
    let path = ns.path().to_path_buf();
    assert!(is_mounted(&path));
    drop(ns);
    assert!(!path.exists());
    assert!(!is_mounted(&path));

    let mut seen = None;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ns = NamedNetns::new("panic");
        seen = Some(ns.path().to_path_buf());
        panic!("test failure while a netns exists");
    }));
    assert!(caught.is_err());
    let path = seen.unwrap();
    assert!(!path.exists(), "{} left behind", path.display());
    assert!(!is_mounted(&path));
}

#[test]
#[ignore = "needs root"]
fn parallel_named_netns_are_distinct() {
    if !privileged("parallel_named_netns_are_distinct") {
        return;
    }
    let all: Vec<NamedNetns> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| NamedNetns::new("par"))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut inodes: Vec<u64> = all
        .iter()
        .map(|n| std::fs::metadata(n.path()).unwrap().ino())
        .collect();
    inodes.sort();
    inodes.dedup();
    assert_eq!(inodes.len(), 8);
    let paths: Vec<_> = all.iter().map(|n| n.path().to_path_buf()).collect();
    drop(all);
    assert!(paths.iter().all(|p| !p.exists()));
}

/// The fixtures end to end, against the Go reference plugins: VERSION in the
/// test's own netns, then ADD/CHECK/DEL with a fake host and a container.
#[test]
#[ignore = "needs root"]
fn plugin_run_drives_go_reference_bridge() {
    if !privileged("plugin_run_drives_go_reference_bridge") {
        return;
    }
    let bridge = cni_tests::go_plugin_path("bridge");
    let version = PluginRun::new(&bridge).command("VERSION").run();
    let supported = version.assert_success().json()["supportedVersions"].clone();
    assert!(
        supported.as_array().unwrap().iter().any(|v| v == "1.0.0"),
        "{supported}"
    );

    let host = NamedNetns::new("plhost");
    let ctr = NamedNetns::new("plctr");
    let data = TempDir::new("plstore");
    let conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "fixture-net", "type": "bridge",
        "bridge": "cnirs0", "isGateway": true,
        "ipam": {"type": "host-local", "subnet": "10.99.0.0/24",
                 "dataDir": data.path()}
    })
    .to_string();
    let run = |cmd: &str| {
        PluginRun::new(&bridge)
            .command(cmd)
            .container_id("fixture-ctr")
            .netns(ctr.path())
            .ifname("eth0")
            .cni_path([cni_tests::GO_PLUGIN_DIR])
            .stdin(conf.clone())
            .run_in(&host)
    };
    let add = run("ADD");
    let result = add.assert_success().json();
    assert_eq!(result["ips"][0]["address"], "10.99.0.2/24", "{result}");
    // The bridge landed in the fake host, the veth end in the container.
    assert!(
        host.exec_in(&["ip", "-o", "link", "show", "cnirs0"])
            .contains("cnirs0")
    );
    assert!(
        ctr.exec_in(&["ip", "-o", "addr", "show", "eth0"])
            .contains("10.99.0.2/24")
    );
    assert!(data.join("fixture-net/10.99.0.2").exists());

    let del = run("DEL");
    del.assert_success();
    assert!(!data.join("fixture-net/10.99.0.2").exists());
    let failed = PluginRun::new(&bridge)
        .command("ADD")
        .stdin("not json")
        .run_in(&host)
        .assert_failure();
    assert!(failed["code"].is_number(), "{failed}");
}
