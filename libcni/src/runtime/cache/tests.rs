use super::*;
use std::os::unix::fs::PermissionsExt;
use testkit::TempDir;

const CONFIG: &[u8] =
    b"{\"cniVersion\":\"1.0.0\",\"name\":\"net\",\"plugins\":[{\"type\":\"bridge\"}]}\n";

/// What Go libcni writes for this attachment, worked out by hand from its rules:
/// struct field order at the top, base64 `config`, `cniArgs` pairs, and the maps
/// (`capabilityArgs`, `result`) with sorted keys, all compact and HTML-escaped.
const GO_FILE: &str = concat!(
    r#"{"kind":"cniCacheV1","containerId":"cnitool-77383ca0a0715733ca6f","#,
    r#""config":"eyJjbmlWZXJzaW9uIjoiMS4wLjAiLCJuYW1lIjoibmV0IiwicGx1Z2lucyI6W3sidHlwZSI6ImJyaWRnZSJ9XX0K","#,
    r#""ifName":"eth0","networkName":"net","netns":"/var/run/netns/testing","#,
    r#""cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAME","a\u003cb"]],"#,
    r#""capabilityArgs":{"mac":"c2:11:22:33:44:55","portMappings":[{"containerPort":80,"hostPort":8080,"protocol":"tcp"}]},"#,
    r#""result":{"cniVersion":"1.0.0","dns":{"nameservers":["10.1.0.1"]},"#,
    r#""interfaces":[{"mac":"aa:bb:cc:dd:ee:01","name":"cni0"},{"mac":"aa:bb:cc:dd:ee:02","name":"eth0","sandbox":"/var/run/netns/testing"}],"#,
    r#""ips":[{"address":"10.1.0.5/16","gateway":"10.1.0.1","interface":1}],"#,
    r#""routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}]}}"#
);

const RESULT: &str = r#"{"cniVersion":"1.0.0",
    "interfaces":[{"name":"cni0","mac":"aa:bb:cc:dd:ee:01"},{"name":"eth0","mac":"aa:bb:cc:dd:ee:02","sandbox":"/var/run/netns/testing"}],
    "ips":[{"interface":1,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],
    "routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}],
    "dns":{"nameservers":["10.1.0.1"]}}"#;

fn rt() -> RuntimeConf {
    RuntimeConf {
        container_id: "cnitool-77383ca0a0715733ca6f".into(),
        netns: "/var/run/netns/testing".into(),
        ifname: "eth0".into(),
        args: vec![
            ("IgnoreUnknown".into(), "1".into()),
            ("K8S_POD_NAME".into(), "a<b".into()),
        ],
        capability_args: serde_json::from_str(
            r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}],"mac":"c2:11:22:33:44:55"}"#,
        )
        .unwrap(),
    }
}

/// Just the cache key's parts, as a DEL or GC without args has them.
fn key_only(container_id: &str, ifname: &str) -> RuntimeConf {
    RuntimeConf {
        container_id: container_id.into(),
        ifname: ifname.into(),
        ..Default::default()
    }
}

fn result() -> CniResult {
    CniResult::parse_bytes(RESULT.as_bytes(), "").unwrap()
}

#[test]
fn writes_byte_for_byte_what_go_writes() {
    let d = TempDir::new("libcni-cache");
    let cache = Cache::new(d.path());
    cache.add(&result(), CONFIG, "net", &rt()).unwrap();
    let path = d.join("results/net-cnitool-77383ca0a0715733ca6f-eth0");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), GO_FILE);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&d.join("results")), 0o700);
}

#[test]
fn reads_what_go_writes() {
    let d = TempDir::new("libcni-cache");
    std::fs::create_dir_all(d.join("results")).unwrap();
    std::fs::write(
        d.join("results/net-cnitool-77383ca0a0715733ca6f-eth0"),
        GO_FILE,
    )
    .unwrap();
    let cache = Cache::new(d.path());
    let bare = key_only("cnitool-77383ca0a0715733ca6f", "eth0");
    let r = cache.result("net", "1.0.0", &bare).unwrap().unwrap();
    assert_eq!(r, result());
    // Converted to the config's version for use as prevResult.
    let r = cache.result("net", "0.4.0", &bare).unwrap().unwrap();
    assert_eq!(r.cni_version, "0.4.0");
    let (config, refilled) = cache.config("net", &bare).unwrap().unwrap();
    assert_eq!(config, CONFIG);
    assert_eq!(refilled.args, rt().args);
    assert_eq!(refilled.capability_args, rt().capability_args);
    let atts = cache.attachments(None).unwrap();
    assert_eq!(atts.len(), 1);
    assert_eq!(atts[0].network, "net");
    assert_eq!(atts[0].netns, "/var/run/netns/testing");
    assert_eq!(atts[0].config, CONFIG);
}

#[test]
fn minimal_entry_omits_empty_fields_and_keeps_dns_of_old_versions() {
    let d = TempDir::new("libcni-cache");
    let cache = Cache::new(d.path());
    let rt = key_only("c1", "eth0");
    let r = CniResult::parse_bytes(
        br#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}"#,
        "",
    )
    .unwrap();
    cache.add(&r, b"{}", "n", &rt).unwrap();
    assert_eq!(
        std::fs::read_to_string(d.join("results/n-c1-eth0")).unwrap(),
        r#"{"kind":"cniCacheV1","containerId":"c1","config":"e30=","ifName":"eth0","networkName":"n","result":{"cniVersion":"0.4.0","dns":{},"ips":[{"address":"10.0.0.2/24","version":"4"}]}}"#
    );
}

#[test]
fn missing_legacy_and_corrupt_entries() {
    let d = TempDir::new("libcni-cache");
    let cache = Cache::new(d.path());
    let rt = key_only("c1", "eth0");
    assert_eq!(cache.result("n", "1.0.0", &rt).unwrap(), None);
    assert!(cache.config("n", &rt).unwrap().is_none());
    std::fs::create_dir_all(cache.results_dir()).unwrap();
    let file = cache.file_path("n", &rt).unwrap();
    // Legacy: the file is a bare result.
    std::fs::write(
        &file,
        r#"{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.0.0.2/24"}],"dns":{}}"#,
    )
    .unwrap();
    let r = cache.result("n", "1.0.0", &rt).unwrap().unwrap();
    assert_eq!(r.cni_version, "1.0.0");
    assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
    assert!(matches!(
        cache.config("n", &rt).unwrap_err(),
        CacheError::WrongKind { .. }
    ));
    std::fs::write(&file, "{garbage").unwrap();
    assert!(cache.result("n", "1.0.0", &rt).is_err());
    assert!(cache.attachments(None).unwrap().is_empty());
    cache.remove("n", &rt).unwrap();
    cache.remove("n", &rt).unwrap();
    assert!(!file.exists());
    let e = cache.file_path("", &rt).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cache file path requires network name")
    );
}

#[test]
fn attachments_filtered_by_container_like_go() {
    let d = TempDir::new("libcni-cache");
    let cache = Cache::new(d.path());
    for (net, id, ifname) in [
        ("b", "c1", "eth0"),
        ("a", "c1", "eth1"),
        ("a", "c2", "eth0"),
    ] {
        let rt = key_only(id, ifname);
        cache.add(&result(), b"{}", net, &rt).unwrap();
    }
    std::fs::write(cache.results_dir().join("junk-c1-x"), "{}").unwrap();
    let all: Vec<_> = cache
        .attachments(None)
        .unwrap()
        .into_iter()
        .map(|a| format!("{}/{}/{}", a.network, a.container_id, a.ifname))
        .collect();
    assert_eq!(all, ["a/c1/eth1", "a/c2/eth0", "b/c1/eth0"]);
    let c1: Vec<_> = cache
        .attachments(Some("c1"))
        .unwrap()
        .into_iter()
        .map(|a| a.network)
        .collect();
    assert_eq!(c1, ["a", "b"]);
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// An entry that is a symlink is never written or read through: ADD replaces the link
/// (the file it pointed to, outside the cache, keeps its content; a dangling link creates
/// nothing), and a link to /dev/zero is an error at once, not a read without end.
#[test]
fn symlink_entries_are_replaced_never_followed() {
    let d = TempDir::new("libcni-cache");
    let cache = Cache::new(d.join("cache"));
    let rt = key_only("c1", "eth0");
    std::fs::create_dir_all(cache.results_dir()).unwrap();
    let entry = cache.file_path("n", &rt).unwrap();
    let outside = d.join("outside");
    std::fs::write(&outside, "precious").unwrap();
    std::os::unix::fs::symlink(&outside, &entry).unwrap();
    let e = cache.result("n", "1.0.0", &rt).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: is a symlink, not a regular file", entry.display())
    );
    cache.add(&result(), CONFIG, "n", &rt).unwrap();
    assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
    assert!(!std::fs::symlink_metadata(&entry).unwrap().is_symlink());
    assert_eq!(cache.result("n", "1.0.0", &rt).unwrap(), Some(result()));

    std::fs::remove_file(&entry).unwrap();
    std::os::unix::fs::symlink(d.join("dangling"), &entry).unwrap();
    cache.add(&result(), CONFIG, "n", &rt).unwrap();
    assert!(!d.join("dangling").exists());

    std::fs::remove_file(&entry).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &entry).unwrap();
    assert!(matches!(
        cache.result("n", "1.0.0", &rt),
        Err(CacheError::Entry { .. })
    ));
    assert!(cache.attachments(None).unwrap().is_empty());
    cache.remove("n", &rt).unwrap();
    assert!(std::fs::symlink_metadata(&entry).is_err());
}

/// A FIFO or a directory in an entry's place: reading does not wait and says what it is,
/// GC's listing skips it, ADD's write fails on a directory, and `remove` (DEL) clears
/// either so the next ADD works.
#[test]
fn fifo_and_directory_entries_fail_fast_and_are_removed() {
    let d = TempDir::new("libcni-cache");
    let cache = Cache::new(d.path());
    let rt = key_only("c1", "eth0");
    std::fs::create_dir_all(cache.results_dir()).unwrap();
    let entry = cache.file_path("n", &rt).unwrap();
    mkfifo(&entry);
    let e = cache.result("n", "1.0.0", &rt).unwrap_err();
    assert!(
        e.to_string().ends_with("is a FIFO, not a regular file"),
        "{e}"
    );
    assert!(cache.config("n", &rt).is_err());
    assert!(cache.attachments(None).unwrap().is_empty());
    cache.remove("n", &rt).unwrap();

    std::fs::create_dir(&entry).unwrap();
    let e = cache.add(&result(), CONFIG, "n", &rt).unwrap_err();
    assert!(matches!(e, CacheError::Io { .. }), "{e}");
    assert!(!file::temp_path(&entry).exists());
    cache.remove("n", &rt).unwrap();
    cache.add(&result(), CONFIG, "n", &rt).unwrap();
    assert_eq!(cache.result("n", "1.0.0", &rt).unwrap(), Some(result()));
}

/// `results` itself a regular file or a symlink out of the cache dir: ADD's write fails.
#[test]
fn results_dir_must_be_a_directory_of_its_own() {
    let d = TempDir::new("libcni-cache");
    let rt = key_only("c1", "eth0");
    let cache = Cache::new(d.join("a"));
    std::fs::create_dir_all(d.join("a")).unwrap();
    std::fs::write(cache.results_dir(), "").unwrap();
    assert!(cache.add(&result(), CONFIG, "n", &rt).is_err());
    let cache = Cache::new(d.join("b"));
    std::fs::create_dir_all(d.join("b")).unwrap();
    std::fs::create_dir(d.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(d.join("elsewhere"), cache.results_dir()).unwrap();
    let e = cache.add(&result(), CONFIG, "n", &rt).unwrap_err();
    assert!(matches!(e, CacheError::LinkedDir { .. }), "{e}");
    assert_eq!(std::fs::read_dir(d.join("elsewhere")).unwrap().count(), 0);
}
