//! libcni list operations against shell-script plugins that log every call (env and
//! stdin) and print a canned result: order, prevResult, runtimeConfig, cache, GC, STATUS.
//! No root needed; the cache always lives in a temp dir.

use cni_tests::FakePlugins;
use libcni::runtime::{CniConfig, NetworkConfigList, RuntimeConf, RuntimeError};
use libcni::types::GcAttachment;
use serde_json::{Value, json};
use std::path::PathBuf;

/// A libcni runtime with the fake plugins. Two dirs, to see CNI_PATH joined with ':'.
fn cni(fake: &FakePlugins) -> CniConfig {
    CniConfig::with_cache_dir(
        vec![fake.join("nothing-here"), fake.bin_dir()],
        fake.join("cache"),
    )
}

fn cache_file(fake: &FakePlugins, net: &str, id: &str, ifname: &str) -> PathBuf {
    fake.join("cache/results")
        .join(format!("{net}-{id}-{ifname}"))
}

fn list(version: &str, plugins: Value, extra: Value) -> NetworkConfigList {
    let mut l = json!({"cniVersion": version, "name": "net", "plugins": plugins});
    for (k, v) in extra.as_object().unwrap() {
        l[k] = v.clone();
    }
    NetworkConfigList::from_bytes(l.to_string().as_bytes()).unwrap()
}

fn rt(id: &str) -> RuntimeConf {
    RuntimeConf {
        container_id: id.into(),
        netns: format!("/run/netns/{id}"),
        ifname: "eth0".into(),
        args: vec![("K".into(), "V".into()), ("K2".into(), "V2".into())],
        ..Default::default()
    }
}

fn result_a() -> Value {
    json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1"}]})
}

fn result_b() -> Value {
    json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:02", "sandbox": "/run/netns/c1"}],
        "ips": [{"interface": 0, "address": "10.0.0.2/24", "gateway": "10.0.0.1"}]})
}

fn two_plugins(fake: &FakePlugins) {
    fake.result("a", &result_a());
    fake.result("b", &result_b());
}

/// Plugins a then b in a 1.0.0 list, c1 attached (its result cached), the call log cleared.
fn c1_attached() -> (FakePlugins, NetworkConfigList) {
    let fake = FakePlugins::new(&["a", "b"]);
    two_plugins(&fake);
    let l = list("1.0.0", json!([{"type": "a"}, {"type": "b"}]), json!({}));
    cni(&fake).add_network_list(&l, &rt("c1")).unwrap();
    fake.clear_calls();
    (fake, l)
}

#[test]
fn add_runs_in_order_chains_prev_result_and_caches() {
    let fake = FakePlugins::new(&["a", "b"]);
    two_plugins(&fake);
    let l = list(
        "1.0.0",
        json!([{"type": "a"}, {"type": "b", "x": "<y>"}]),
        json!({}),
    );
    let r = cni(&fake).add_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(r.to_value("1.0.0").unwrap(), result_b());
    let calls = fake.calls();
    assert_eq!(fake.trace(), ["a ADD", "b ADD"]);
    assert_eq!(
        calls[0].stdin,
        json!({"cniVersion": "1.0.0", "name": "net", "type": "a"})
    );
    assert_eq!(calls[1].stdin["prevResult"], result_a());
    assert_eq!(calls[1].stdin["x"], "<y>");
    let env = &calls[0].env;
    assert_eq!(env["CNI_CONTAINERID"], "c1");
    assert_eq!(env["CNI_NETNS"], "/run/netns/c1");
    assert_eq!(env["CNI_IFNAME"], "eth0");
    assert_eq!(env["CNI_ARGS"], "K=V;K2=V2");
    assert_eq!(
        env["CNI_PATH"],
        format!("{0}/nothing-here:{0}/bin", fake.path().display())
    );
    let cached: Value =
        serde_json::from_slice(&std::fs::read(cache_file(&fake, "net", "c1", "eth0")).unwrap())
            .unwrap();
    assert_eq!(cached["kind"], "cniCacheV1");
    assert_eq!(cached["result"], result_b());
    assert_eq!(cached["cniArgs"], json!([["K", "V"], ["K2", "V2"]]));
    // The cached config is the list's bytes.
    assert_eq!(
        cached["config"].as_str().unwrap().len() % 4,
        0,
        "base64 with padding"
    );
    let got = cni(&fake)
        .get_network_list_cached_result(&l, &rt("c1"))
        .unwrap()
        .unwrap();
    assert_eq!(got.to_value("1.0.0").unwrap(), result_b());
    let (bytes, refilled) = cni(&fake)
        .get_network_list_cached_config(
            &l,
            &RuntimeConf {
                args: vec![],
                ..rt("c1")
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(bytes, l.bytes);
    assert_eq!(refilled.args, rt("c1").args);
}

#[test]
fn plugin_stdin_is_go_marshalled() {
    let fake = FakePlugins::new(&["a"]);
    fake.result("a", &result_a());
    let l = list(
        "1.0.0",
        json!([{"type": "a", "z": 1, "b": {"d": 1, "c": 2}}]),
        json!({}),
    );
    cni(&fake).add_network_list(&l, &rt("c1")).unwrap();
    let raw = std::fs::read_to_string(fake.join("calls/0000.stdin")).unwrap();
    assert_eq!(
        raw,
        r#"{"b":{"c":2,"d":1},"cniVersion":"1.0.0","name":"net","type":"a","z":1}"#
    );
}

#[test]
fn capabilities_become_runtime_config() {
    let fake = FakePlugins::new(&["a", "b"]);
    two_plugins(&fake);
    let l = list(
        "1.0.0",
        json!([
            {"type": "a", "capabilities": {"mac": true, "portMappings": false, "ips": true}},
            {"type": "b", "runtimeConfig": {"stale": 1}}
        ]),
        json!({}),
    );
    let mut r = rt("c1");
    r.capability_args = json!({"mac": "02:00:00:00:00:09", "portMappings": [], "bandwidth": {}})
        .as_object()
        .unwrap()
        .clone();
    cni(&fake).add_network_list(&l, &r).unwrap();
    let calls = fake.calls();
    assert_eq!(
        calls[0].stdin["runtimeConfig"],
        json!({"mac": "02:00:00:00:00:09"})
    );
    // capabilities pass through unchanged; a plugin without matching capabilities gets
    // no new runtimeConfig (its own key is passed through as is).
    assert_eq!(calls[0].stdin["capabilities"]["portMappings"], false);
    assert_eq!(calls[1].stdin["runtimeConfig"], json!({"stale": 1}));
    // DEL carries the same runtimeConfig.
    fake.clear_calls();
    cni(&fake).del_network_list(&l, &r).unwrap();
    assert_eq!(
        fake.calls()[1].stdin["runtimeConfig"],
        json!({"mac": "02:00:00:00:00:09"})
    );
}

#[test]
fn del_in_reverse_with_cached_prev_result_then_cache_removed() {
    let (fake, l) = c1_attached();
    let cni = cni(&fake);
    cni.del_network_list(&l, &rt("c1")).unwrap();
    let calls = fake.calls();
    assert_eq!(fake.trace(), ["b DEL", "a DEL"]);
    for c in &calls {
        assert_eq!(c.stdin["prevResult"], result_b());
        assert_eq!(c.env["CNI_NETNS"], "/run/netns/c1");
    }
    assert!(!cache_file(&fake, "net", "c1", "eth0").exists());
    // A second DEL succeeds, without prevResult.
    fake.clear_calls();
    cni.del_network_list(&l, &rt("c1")).unwrap();
    assert!(
        fake.calls()
            .iter()
            .all(|c| c.stdin.get("prevResult").is_none())
    );
}

#[test]
fn del_below_040_sends_no_prev_result_but_clears_cache() {
    let fake = FakePlugins::new(&["a"]);
    fake.result(
        "a",
        &json!({"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.0.0.2/24"}]}),
    );
    let l = list("0.3.1", json!([{"type": "a"}]), json!({}));
    cni(&fake).add_network_list(&l, &rt("c1")).unwrap();
    fake.clear_calls();
    cni(&fake).del_network_list(&l, &rt("c1")).unwrap();
    assert!(fake.calls()[0].stdin.get("prevResult").is_none());
    assert!(!cache_file(&fake, "net", "c1", "eth0").exists());
}

#[test]
fn corrupt_cache_never_blocks_del() {
    let (fake, l) = c1_attached();
    let file = cache_file(&fake, "net", "c1", "eth0");
    std::fs::write(
        &file,
        "{\"kind\":\"cniCacheV1\",\"result\":{\"cniVersion\":\"9.9.9\"",
    )
    .unwrap();
    cni(&fake).del_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(fake.trace(), ["b DEL", "a DEL"]);
    assert!(
        fake.calls()
            .iter()
            .all(|c| c.stdin.get("prevResult").is_none())
    );
    assert!(!file.exists());
}

#[test]
fn failed_del_keeps_the_cache_for_a_retry() {
    let (fake, l) = c1_attached();
    fake.fail("a", "DEL", 11, "busy");
    let e = cni(&fake).del_network_list(&l, &rt("c1")).unwrap_err();
    assert_eq!(e.to_string(), r#"plugin type="a" failed (delete): busy"#);
    assert_eq!(e.cni_error().unwrap().code, 11);
    assert!(cache_file(&fake, "net", "c1", "eth0").exists());
    // The retry still sends the cached result, and then clears it.
    std::fs::remove_file(fake.join("a.DEL.error")).unwrap();
    fake.clear_calls();
    cni(&fake).del_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(fake.trace(), ["b DEL", "a DEL"]);
    assert!(
        fake.calls()
            .iter()
            .all(|c| c.stdin["prevResult"] == result_b())
    );
    assert!(!cache_file(&fake, "net", "c1", "eth0").exists());
}

/// A directory where the cache entry belongs (or `results` a regular file): the ADD's
/// plugins ran, the cache write fails, and the list's DEL undoes them (reverse order, the
/// result as prevResult) before the error returns. The directory entry is cleared, so the
/// next ADD works.
#[test]
fn failed_cache_write_undoes_the_add() {
    let fake = FakePlugins::new(&["a", "b"]);
    two_plugins(&fake);
    let l = list("1.0.0", json!([{"type": "a"}, {"type": "b"}]), json!({}));
    let entry = cache_file(&fake, "net", "c1", "eth0");
    std::fs::create_dir_all(&entry).unwrap();
    let e = cni(&fake).add_network_list(&l, &rt("c1")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(r#"failed to set network "net" cached result: "#),
        "{e}"
    );
    assert_eq!(fake.trace(), ["a ADD", "b ADD", "b DEL", "a DEL"]);
    let calls = fake.calls();
    assert_eq!(calls[2].stdin["prevResult"], result_b());
    assert_eq!(calls[3].env["CNI_NETNS"], "/run/netns/c1");
    assert!(std::fs::symlink_metadata(&entry).is_err(), "entry cleared");
    fake.clear_calls();
    cni(&fake).add_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(fake.trace(), ["a ADD", "b ADD"]);
    assert!(entry.is_file());

    // `results` a regular file: the same undo; a DEL that fails too is reported with it.
    let fake = FakePlugins::new(&["a", "b"]);
    two_plugins(&fake);
    std::fs::create_dir_all(fake.join("cache")).unwrap();
    std::fs::write(fake.join("cache/results"), "").unwrap();
    fake.fail("a", "DEL", 11, "busy");
    let e = cni(&fake).add_network_list(&l, &rt("c1")).unwrap_err();
    assert_eq!(fake.trace(), ["a ADD", "b ADD", "b DEL", "a DEL"]);
    assert!(
        e.to_string()
            .ends_with(r#" (undoing the ADD failed too: plugin type="a" failed (delete): busy)"#),
        "{e}"
    );
}

/// DEL clears whatever sits where the cache entry belongs: a symlink (not what it points
/// to), a FIFO (never opened for a blocking read), an empty directory.
#[test]
fn del_clears_links_fifos_and_directories_in_the_cache() {
    let (fake, l) = c1_attached();
    let entry = cache_file(&fake, "net", "c1", "eth0");
    let outside = fake.join("outside");
    std::fs::write(&outside, "precious").unwrap();
    let make: [(&str, &dyn Fn()); 3] = [
        ("symlink", &|| {
            std::os::unix::fs::symlink(&outside, &entry).unwrap()
        }),
        ("fifo", &|| {
            nix::unistd::mkfifo(&entry, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        }),
        ("directory", &|| std::fs::create_dir(&entry).unwrap()),
    ];
    for (what, make) in make {
        let _ = std::fs::remove_file(&entry);
        make();
        fake.clear_calls();
        cni(&fake).del_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(fake.trace(), ["b DEL", "a DEL"], "{what}");
        assert!(std::fs::symlink_metadata(&entry).is_err(), "{what} left");
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
    }
}

#[test]
fn failed_add_writes_no_cache_and_keeps_the_code() {
    let fake = FakePlugins::new(&["a", "b"]);
    two_plugins(&fake);
    fake.fail("b", "ADD", 7, "bad config");
    let l = list(
        "1.0.0",
        json!([{"type": "a"}, {"type": "b", "name": "second"}]),
        json!({}),
    );
    let e = cni(&fake).add_network_list(&l, &rt("c1")).unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"plugin type="b" name="second" failed (add): bad config"#
    );
    assert_eq!(e.cni_error().unwrap().code, 7);
    assert!(!cache_file(&fake, "net", "c1", "eth0").exists());
    // A missing plugin is reported the same way.
    let l = list("1.0.0", json!([{"type": "missing"}]), json!({}));
    let e = cni(&fake).add_network_list(&l, &rt("c1")).unwrap_err();
    assert!(
        e.to_string().contains("failed to find plugin \"missing\""),
        "{e}"
    );
}

#[test]
fn add_validates_before_exec() {
    let fake = FakePlugins::new(&["a"]);
    fake.result("a", &result_a());
    let l = list("1.0.0", json!([{"type": "a"}]), json!({}));
    let cni = cni(&fake);
    let cases = [
        (
            RuntimeConf {
                container_id: "".into(),
                ..rt("c1")
            },
            3,
        ),
        (
            RuntimeConf {
                container_id: "bad id".into(),
                ..rt("c1")
            },
            4,
        ),
        (
            RuntimeConf {
                ifname: "".into(),
                ..rt("c1")
            },
            4,
        ),
        (
            RuntimeConf {
                ifname: "a-very-long-interface".into(),
                ..rt("c1")
            },
            4,
        ),
        (
            RuntimeConf {
                ifname: "eth/0".into(),
                ..rt("c1")
            },
            4,
        ),
    ];
    for (r, code) in cases {
        let e = cni.add_network_list(&l, &r).unwrap_err();
        assert_eq!(e.cni_error().unwrap().code, code, "{r:?}");
    }
    let mut bad = list("1.0.0", json!([{"type": "a"}]), json!({}));
    bad.name = "bad/name".into();
    assert_eq!(
        cni.add_network_list(&bad, &rt("c1"))
            .unwrap_err()
            .cni_error()
            .unwrap()
            .code,
        7
    );
    assert!(fake.calls().is_empty());
}

#[test]
fn check_forward_with_cached_result_and_disable_check() {
    let (fake, l) = c1_attached();
    let cni = cni(&fake);
    cni.check_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(fake.trace(), ["a CHECK", "b CHECK"]);
    assert!(
        fake.calls()
            .iter()
            .all(|c| c.stdin["prevResult"] == result_b())
    );

    fake.clear_calls();
    fake.fail("a", "CHECK", 100, "veth gone");
    let e = cni.check_network_list(&l, &rt("c1")).unwrap_err();
    assert_eq!(e.to_string(), "veth gone");
    assert_eq!(e.cni_error().unwrap().code, 100);
    assert_eq!(fake.trace(), ["a CHECK"]);

    fake.clear_calls();
    let disabled = list(
        "1.0.0",
        json!([{"type": "a"}, {"type": "b"}]),
        json!({"disableCheck": "true"}),
    );
    cni.check_network_list(&disabled, &rt("c1")).unwrap();
    let old = list("0.3.1", json!([{"type": "a"}]), json!({}));
    assert!(matches!(
        cni.check_network_list(&old, &rt("c1")).unwrap_err(),
        RuntimeError::CheckNotSupported(_)
    ));
    assert_eq!(
        cni.check_network_list(&old, &rt("c1"))
            .unwrap_err()
            .to_string(),
        r#"configuration version "0.3.1" does not support the CHECK command"#
    );
    assert!(fake.calls().is_empty());
}

#[test]
fn status_returns_the_first_error_as_is() {
    let fake = FakePlugins::new(&["a", "b", "c"]);
    let l = list(
        "1.1.0",
        json!([{"type": "a"}, {"type": "b"}, {"type": "c"}]),
        json!({}),
    );
    let cni = cni(&fake);
    cni.get_status_network_list(&l).unwrap();
    assert_eq!(fake.trace(), ["a STATUS", "b STATUS", "c STATUS"]);
    let c = &fake.calls()[0];
    for k in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS"] {
        assert_eq!(c.env[k], "", "{k}");
    }
    assert_eq!(
        c.stdin,
        json!({"cniVersion": "1.1.0", "name": "net", "type": "a"})
    );

    fake.clear_calls();
    fake.fail("b", "STATUS", 50, "no more IPs");
    let e = cni.get_status_network_list(&l).unwrap_err();
    match &e {
        RuntimeError::Cni(err) => assert_eq!((err.code, err.msg.as_str()), (50, "no more IPs")),
        other => panic!("not passed through: {other:?}"),
    }
    assert_eq!(e.to_string(), "no more IPs");
    assert_eq!(fake.trace(), ["a STATUS", "b STATUS"]);

    // Below 1.1.0 there is no STATUS: ready.
    fake.clear_calls();
    cni.get_status_network_list(&list("1.0.0", json!([{"type": "b"}]), json!({})))
        .unwrap();
    assert!(fake.calls().is_empty());
}

/// Three cached attachments: c1 and c2 of "net", c3 of "other".
fn gc_setup(fake: &FakePlugins, version: &str, extra: Value) -> NetworkConfigList {
    two_plugins(fake);
    let l = list(version, json!([{"type": "a"}, {"type": "b"}]), extra);
    let cni = cni(fake);
    cni.add_network_list(&l, &rt("c1")).unwrap();
    let mut r2 = rt("c2");
    r2.args = vec![("ONLY".into(), "c2".into())];
    cni.add_network_list(&l, &r2).unwrap();
    let mut other = list(version, json!([{"type": "a"}]), json!({}));
    other.name = "other".into();
    cni.add_network_list(&other, &rt("c3")).unwrap();
    fake.clear_calls();
    l
}

#[test]
fn gc_without_valid_list_deletes_every_cached_attachment_of_the_network() {
    let fake = FakePlugins::new(&["a", "b"]);
    let l = gc_setup(&fake, "1.1.0", json!({}));
    cni(&fake).gc_network_list(&l, None).unwrap();
    assert_eq!(
        fake.trace(),
        ["b DEL", "a DEL", "b DEL", "a DEL", "a GC", "b GC"]
    );
    let calls = fake.calls();
    // DEL uses what the cache remembers of each attachment.
    assert_eq!(calls[0].env["CNI_CONTAINERID"], "c1");
    assert_eq!(calls[2].env["CNI_CONTAINERID"], "c2");
    assert_eq!(calls[2].env["CNI_ARGS"], "ONLY=c2");
    assert_eq!(calls[2].env["CNI_NETNS"], "/run/netns/c2");
    // The cached result, converted to the list's version.
    let mut want = result_b();
    want["cniVersion"] = json!("1.1.0");
    assert_eq!(calls[2].stdin["prevResult"], want);
    // GC: no attachment env, no valid list keys.
    assert_eq!(calls[4].env["CNI_CONTAINERID"], "");
    assert_eq!(
        calls[4].stdin,
        json!({"cniVersion": "1.1.0", "name": "net", "type": "a"})
    );
    assert!(!cache_file(&fake, "net", "c1", "eth0").exists());
    assert!(!cache_file(&fake, "net", "c2", "eth0").exists());
    assert!(cache_file(&fake, "other", "c3", "eth0").exists());
}

#[test]
fn gc_with_valid_list_keeps_valid_attachments() {
    let fake = FakePlugins::new(&["a", "b"]);
    let l = gc_setup(&fake, "1.1.0", json!({}));
    let valid = [GcAttachment {
        container_id: "c1".into(),
        ifname: "eth0".into(),
    }];
    cni(&fake).gc_network_list(&l, Some(&valid)).unwrap();
    assert_eq!(fake.trace(), ["b DEL", "a DEL", "a GC", "b GC"]);
    let calls = fake.calls();
    assert_eq!(calls[0].env["CNI_CONTAINERID"], "c2");
    let want = json!([{"containerID": "c1", "ifname": "eth0"}]);
    assert_eq!(calls[2].stdin["cni.dev/valid-attachments"], want);
    assert_eq!(calls[2].stdin["cni.dev/attachments"], want);
    assert!(cache_file(&fake, "net", "c1", "eth0").exists());
    assert!(!cache_file(&fake, "net", "c2", "eth0").exists());
}

#[test]
fn gc_with_empty_valid_list_sends_an_empty_list() {
    let fake = FakePlugins::new(&["a", "b"]);
    let l = gc_setup(&fake, "1.1.0", json!({}));
    cni(&fake).gc_network_list(&l, Some(&[])).unwrap();
    assert_eq!(fake.trace().len(), 6);
    assert_eq!(
        fake.calls()[4].stdin["cni.dev/valid-attachments"],
        json!([])
    );
}

#[test]
fn gc_disabled_and_below_110() {
    let fake = FakePlugins::new(&["a", "b"]);
    let l = gc_setup(&fake, "1.1.0", json!({"disableGC": true}));
    cni(&fake).gc_network_list(&l, None).unwrap();
    assert!(fake.calls().is_empty());
    assert!(cache_file(&fake, "net", "c1", "eth0").exists());

    let fake = FakePlugins::new(&["a", "b"]);
    let l = gc_setup(&fake, "1.0.0", json!({}));
    cni(&fake).gc_network_list(&l, None).unwrap();
    assert_eq!(fake.trace(), ["b DEL", "a DEL", "b DEL", "a DEL"]);
}

#[test]
fn gc_carries_on_after_errors_and_reports_them_all() {
    let fake = FakePlugins::new(&["a", "b"]);
    let l = gc_setup(&fake, "1.1.0", json!({}));
    fake.fail("b", "DEL", 11, "try later");
    fake.fail("a", "GC", 100, "gc broke");
    let e = cni(&fake).gc_network_list(&l, None).unwrap_err();
    assert_eq!(fake.trace(), ["b DEL", "b DEL", "a GC", "b GC"]);
    assert_eq!(
        e.to_string(),
        "failed to delete stale attachment c1 eth0: plugin type=\"b\" failed (delete): try later\n\
         failed to delete stale attachment c2 eth0: plugin type=\"b\" failed (delete): try later\n\
         failed to GC plugin a: gc broke"
    );
    assert_eq!(e.cni_error().unwrap().code, 11);
}

#[test]
fn gc_with_no_cache_dir_still_reaches_the_plugins() {
    let fake = FakePlugins::new(&["a"]);
    let l = list("1.1.0", json!([{"type": "a"}]), json!({}));
    cni(&fake).gc_network_list(&l, None).unwrap();
    assert_eq!(fake.trace(), ["a GC"]);
}

#[test]
fn validate_finds_plugins_and_versions() {
    let fake = FakePlugins::new(&["a", "b"]);
    let l = list(
        "1.0.0",
        json!([{"type": "a", "capabilities": {"mac": true, "ips": false}}, {"type": "b", "capabilities": {"portMappings": true}}]),
        json!({}),
    );
    let cni = cni(&fake);
    assert_eq!(
        cni.validate_network_list(&l).unwrap(),
        ["mac", "portMappings"]
    );
    let c = &fake.calls()[0];
    assert_eq!(c.command, "VERSION");
    assert_eq!(c.env["CNI_NETNS"], "dummy");
    assert_eq!(c.stdin, json!({"cniVersion": "1.1.0"}));
    let bad = list("0.3.1", json!([{"type": "a"}, {"type": "nope"}]), json!({}));
    let e = cni.validate_network_list(&bad).unwrap_err().to_string();
    assert!(
        e.starts_with("[plugin a does not support config version \"0.3.1\" "),
        "{e}"
    );
    assert!(e.contains("failed to find plugin \"nope\""), "{e}");
    assert_eq!(
        cni.get_version_info("b").unwrap(),
        ["0.4.0", "1.0.0", "1.1.0"]
    );
}
