//! The loopback plugin. Differential tests against the Go reference
//! (/usr/lib/cni/loopback, v1.1.1, cniVersion up to 1.0.0): each plugin gets its own fake
//! host and container namespaces and the same input; stdout (byte for byte, with the
//! container's netns path masked), exit codes and the kernel state of `lo` must match.
//! Then DEL's tolerance, and our loopback beside our bridge on one container netns, both
//! at once, as containerd's CRI runs them for every pod.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::{NamedNetns, PluginOutput, PluginRun, TempDir, bin_path, go_plugin_path};
use serde_json::{Value, json};
use std::ffi::OsStr;
use std::path::Path;
use support::{Env, GO_VERSIONS, merge, ping};
use testkit::privileged;

fn conf(version: &str, extra: Value) -> Value {
    merge(
        json!({"cniVersion": version, "name": "lo", "type": "loopback"}),
        extra,
    )
}

/// `cmd` with `bin` run inside `host`, CNI_NETNS `netns`. CNI_IFNAME is not `lo`: both
/// plugins ignore it.
fn run(
    bin: &Path,
    cmd: &str,
    host: &NamedNetns,
    netns: impl AsRef<OsStr>,
    conf: &Value,
) -> PluginOutput {
    PluginRun::new(bin)
        .command(cmd)
        .container_id("ctr-1")
        .netns(netns)
        .ifname("eth0")
        .cni_path(["/nonexistent"])
        .stdin(conf.to_string())
        .run_in(host)
}

/// `lo` as the kernel shows it: admin state and addresses in the kernel's order.
#[derive(Debug, PartialEq)]
struct LoState {
    up: bool,
    addrs: Vec<String>,
}

fn lo_state(ns: &NamedNetns) -> LoState {
    let v: Vec<Value> =
        serde_json::from_str(&ns.exec_in(&["ip", "-j", "addr", "show", "dev", "lo"])).unwrap();
    let up = v[0]["flags"].as_array().unwrap().iter().any(|f| f == "UP");
    let addrs = v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect();
    LoState { up, addrs }
}

/// What one verb did: exit code, stdout (netns path masked, trailing newline dropped)
/// and `lo` afterwards.
#[derive(Debug, PartialEq)]
struct Step {
    cmd: &'static str,
    code: Option<i32>,
    stdout: String,
    lo: LoState,
}

/// ADD, CHECK (where the version has it), DEL, in a fresh container netns that `prepare`
/// may change first.
fn lifecycle(bin: &Path, conf: &Value, prepare: impl Fn(&NamedNetns)) -> Vec<Step> {
    let host = NamedNetns::new("lo-h");
    let ctr = NamedNetns::new("lo-c");
    prepare(&ctr);
    let version = conf["cniVersion"].as_str().unwrap();
    let mut cmds = vec!["ADD"];
    if !matches!(version, "0.1.0" | "0.2.0" | "0.3.0" | "0.3.1") {
        cmds.push("CHECK");
    }
    cmds.push("DEL");
    let ctr_path = ctr.path().to_str().unwrap();
    cmds.into_iter()
        .map(|cmd| {
            let out = run(bin, cmd, &host, ctr.path(), conf);
            Step {
                cmd,
                code: out.code(),
                stdout: out
                    .stdout_str()
                    .replace(ctr_path, "NETNS")
                    .trim_end()
                    .into(),
                lo: lo_state(&ctr),
            }
        })
        .collect()
}

fn ours() -> std::path::PathBuf {
    bin_path("loopback")
}

fn go() -> std::path::PathBuf {
    go_plugin_path("loopback")
}

fn assert_same_as_go(conf: &Value, prepare: impl Fn(&NamedNetns)) -> Vec<Step> {
    let steps = lifecycle(&ours(), conf, &prepare);
    assert_eq!(steps, lifecycle(&go(), conf, &prepare), "{conf}");
    steps
}

#[test]
#[ignore = "needs root"]
fn same_results_and_lo_state_as_go_at_every_version() {
    if !privileged("same_results_and_lo_state_as_go_at_every_version") {
        return;
    }
    for version in GO_VERSIONS {
        let steps = assert_same_as_go(&conf(version, json!({})), |_| {});
        // What both did: lo up with both loopback addresses, then down again.
        let add = &steps[0];
        assert_eq!(add.code, Some(0), "{version}: {}", add.stdout);
        assert!(add.stdout.contains("\"127.0.0.1/8\""), "{}", add.stdout);
        assert!(add.lo.up && add.lo.addrs == ["127.0.0.1/8", "::1/128"]);
        let del = steps.last().unwrap();
        assert_eq!((del.cmd, del.code, del.lo.up), ("DEL", Some(0), false));
    }
}

/// Go v1.1.1 has no 1.1.0; a newer reference prints the same result labeled 1.1.0.
#[test]
#[ignore = "needs root"]
fn version_1_1_0_is_the_1_0_0_result_relabeled() {
    if !privileged("version_1_1_0_is_the_1_0_0_result_relabeled") {
        return;
    }
    let go_1_0 = lifecycle(&go(), &conf("1.0.0", json!({})), |_| {});
    let expected: Vec<Step> = go_1_0
        .into_iter()
        .map(|s| Step {
            stdout: s.stdout.replace("\"1.0.0\"", "\"1.1.0\""),
            ..s
        })
        .collect();
    assert_eq!(
        lifecycle(&ours(), &conf("1.1.0", json!({})), |_| {}),
        expected
    );
}

/// A config without a version (no key, `null`, `""`): the reference prints the real
/// 0.1.0 shape (`ip4`, `ip6`, `dns`), not its 1.0.0 result relabeled; ours byte for byte.
#[test]
#[ignore = "needs root"]
fn no_version_prints_the_0_1_0_shape_like_go() {
    if !privileged("no_version_prints_the_0_1_0_shape_like_go") {
        return;
    }
    let confs = [
        json!({"name": "lo", "type": "loopback"}),
        json!({"cniVersion": null, "name": "lo", "type": "loopback"}),
        json!({"cniVersion": "", "name": "lo", "type": "loopback"}),
    ];
    for conf in confs {
        let add = |bin: &Path| {
            let host = NamedNetns::new("lo-h");
            let ctr = NamedNetns::new("lo-c");
            let out = run(bin, "ADD", &host, ctr.path(), &conf);
            let stdout = out
                .stdout_str()
                .replace(ctr.path().to_str().unwrap(), "NETNS");
            (out.code(), stdout, lo_state(&ctr))
        };
        let ours = add(&ours());
        assert_eq!(ours, add(&go()), "{conf}");
        assert!(ours.1.contains("\"ip4\""), "{}", ours.1);
    }
}

#[test]
#[ignore = "needs root"]
fn status_gc_and_version_answer() {
    if !privileged("status_gc_and_version_answer") {
        return;
    }
    let host = NamedNetns::new("lo-h");
    let c = conf("1.1.0", json!({}));
    for cmd in ["STATUS", "GC"] {
        let out = run(&ours(), cmd, &host, "", &c);
        assert_eq!(
            (out.code(), out.stdout_str()),
            (Some(0), String::new()),
            "{cmd}"
        );
    }
    let ours_v = run(&ours(), "VERSION", &host, "", &c)
        .assert_success()
        .json();
    let go_v = run(&go(), "VERSION", &host, "", &c).assert_success().json();
    let mut versions = go_v["supportedVersions"].as_array().unwrap().clone();
    versions.push(json!("1.1.0"));
    assert_eq!(
        ours_v,
        json!({"cniVersion": "1.1.0", "supportedVersions": versions})
    );
}

/// In a chain the reference passes prevResult through at the config's version.
#[test]
#[ignore = "needs root"]
fn passes_prev_result_through_like_go() {
    if !privileged("passes_prev_result_through_like_go") {
        return;
    }
    let ips_form = |version: &str, v4: Value, v6: Value| {
        json!({"cniVersion": version,
               "interfaces": [{"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": "/x"}],
               "ips": [v4, v6],
               "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}],
               "dns": {"nameservers": ["192.0.2.53"]}})
    };
    let v4_040 = json!({"version": "4", "interface": 0, "address": "10.1.0.5/24",
                        "gateway": "10.1.0.1"});
    let v6_040 = json!({"version": "6", "interface": 0, "address": "fd00::5/64",
                        "gateway": "fd00::1"});
    let v4_100 = json!({"interface": 0, "address": "10.1.0.5/24", "gateway": "10.1.0.1"});
    let v6_100 = json!({"interface": 0, "address": "fd00::5/64", "gateway": "fd00::1"});
    let prevs = [
        json!({"cniVersion": "0.2.0",
               "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1",
                       "routes": [{"dst": "0.0.0.0/0"}]}}),
        ips_form("0.3.1", v4_040.clone(), v6_040.clone()),
        ips_form("0.4.0", v4_040, v6_040),
        ips_form("1.0.0", v4_100.clone(), v6_100),
        // No cniVersion: read at the config's.
        json!({"ips": [v4_100]}),
    ];
    let config_versions = ["0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.0.0"];
    for (prev, version) in prevs.into_iter().zip(config_versions) {
        let steps = assert_same_as_go(&conf(version, json!({ "prevResult": prev })), |_| {});
        assert_eq!(steps[0].code, Some(0), "{}", steps[0].stdout);
        assert!(
            steps[0].stdout.contains("10.1.0.5/24"),
            "{}",
            steps[0].stdout
        );
    }
}

#[test]
#[ignore = "needs root"]
fn lo_without_ipv6_like_go() {
    if !privileged("lo_without_ipv6_like_go") {
        return;
    }
    let no_ipv6 = |ctr: &NamedNetns| {
        ctr.exec_in(&["sysctl", "-qw", "net.ipv6.conf.lo.disable_ipv6=1"]);
    };
    let steps = assert_same_as_go(&conf("1.0.0", json!({})), no_ipv6);
    assert_eq!(steps[0].code, Some(0), "{}", steps[0].stdout);
    assert!(!steps[0].stdout.contains("::1"), "{}", steps[0].stdout);
    assert_eq!(steps[0].lo.addrs, ["127.0.0.1/8"]);
}

/// A non-loopback address on lo fails ADD (after lo is up, as in Go); DEL still works.
#[test]
#[ignore = "needs root"]
fn non_loopback_address_on_lo_fails_like_go() {
    if !privileged("non_loopback_address_on_lo_fails_like_go") {
        return;
    }
    let foreign = |ctr: &NamedNetns| {
        ctr.exec_in(&["ip", "addr", "add", "10.9.9.9/32", "dev", "lo"]);
    };
    let steps = assert_same_as_go(&conf("1.0.0", json!({})), foreign);
    assert_eq!(steps[0].code, Some(1));
    assert!(
        steps[0]
            .stdout
            .contains(r#"loopback interface found with non-loopback address \"10.9.9.9\""#),
        "{}",
        steps[0].stdout
    );
    assert_eq!(steps.last().unwrap().code, Some(0));
}

#[test]
#[ignore = "needs root"]
fn check_fails_like_go_when_lo_is_down() {
    if !privileged("check_fails_like_go_when_lo_is_down") {
        return;
    }
    let c = conf("1.0.0", json!({}));
    let check_after = |bin: &Path| {
        let host = NamedNetns::new("lo-h");
        let ctr = NamedNetns::new("lo-c");
        run(bin, "ADD", &host, ctr.path(), &c).assert_success();
        ctr.exec_in(&["ip", "link", "set", "lo", "down"]);
        let out = run(bin, "CHECK", &host, ctr.path(), &c);
        (out.code(), out.json())
    };
    let ours = check_after(&ours());
    assert_eq!(ours, check_after(&go()));
    assert_eq!(
        ours,
        (
            Some(1),
            json!({"code": 999, "msg": "loopback interface is down"})
        )
    );
}

/// Unusable CNI_NETNS paths and bad configs: the same error JSON as Go.
#[test]
#[ignore = "needs root"]
fn same_errors_as_go() {
    if !privileged("same_errors_as_go") {
        return;
    }
    let host = NamedNetns::new("lo-h");
    let tmp = TempDir::new("lo-err");
    let file = tmp.join("not-a-netns");
    std::fs::write(&file, "").unwrap();
    let missing = tmp.join("missing");
    let c = conf("1.0.0", json!({}));
    let mut cases: Vec<(&str, &Path, Value)> = Vec::new();
    for cmd in ["ADD", "CHECK"] {
        for path in [missing.as_path(), file.as_path(), tmp.path()] {
            cases.push((cmd, path, c.clone()));
        }
    }
    cases.push(("ADD", &missing, conf("9.9.9", json!({}))));
    cases.push(("CHECK", &missing, conf("0.3.1", json!({}))));
    cases.push((
        "ADD",
        &missing,
        json!({"cniVersion": "1.0.0", "type": "loopback"}),
    ));
    for (cmd, path, c) in &cases {
        let ours = run(&ours(), cmd, &host, path, c);
        let go = run(&go(), cmd, &host, path, c);
        let (mut ours_err, go_err) = (ours.json(), go.json());
        // The list of supported versions names 1.1.0 only in ours.
        if let Some(d) = ours_err["details"].as_str() {
            ours_err["details"] = d.replace(r#" "1.1.0""#, "").into();
        }
        assert_eq!(ours.code(), Some(1), "{cmd} {path:?} {c}");
        assert_eq!(
            (ours.code(), ours_err),
            (go.code(), go_err),
            "{cmd} {path:?} {c}"
        );
    }
    // Malformed config: both refuse. Go's json message names the Go struct field and is
    // untyped (999); ours is serde's, as a decoding failure (6).
    let bad = json!({"cniVersion": "1.0.0", "name": "lo", "type": 5});
    for bin in [ours(), go()] {
        let out = run(&bin, "ADD", &host, &missing, &bad);
        assert_eq!(out.code(), Some(1), "{}", out.stdout_str());
    }
}

/// DEL succeeds whatever became of the namespace. Go agrees for a missing path and an
/// empty CNI_NETNS; for a path that is not a netns Go fails, ours succeeds on purpose
/// (a failing DEL only keeps the runtime from removing the pod; lo holds nothing).
#[test]
#[ignore = "needs root"]
fn del_succeeds_whatever_the_netns_state() {
    if !privileged("del_succeeds_whatever_the_netns_state") {
        return;
    }
    let host = NamedNetns::new("lo-h");
    let tmp = TempDir::new("lo-del");
    let file = tmp.join("not-a-netns");
    std::fs::write(&file, "").unwrap();
    let gone = {
        let ctr = NamedNetns::new("lo-gone");
        ctr.path().to_path_buf()
    };
    let c = conf("1.0.0", json!({}));
    let del = |bin: &Path, path: &Path| {
        let out = run(bin, "DEL", &host, path, &c);
        (out.code(), out.stdout_str())
    };
    let ok = (Some(0), String::new());
    for path in [tmp.join("missing").as_path(), Path::new(""), gone.as_path()] {
        assert_eq!(del(&ours(), path), ok, "{path:?}");
        assert_eq!(del(&go(), path), ok, "{path:?}");
    }
    for path in [file.as_path(), tmp.path()] {
        assert_eq!(del(&ours(), path), ok, "{path:?}");
        assert_eq!(del(&go(), path).0, Some(1), "{path:?}");
    }
}

/// containerd's CRI runs the `loopback` network and the pod network for every pod at the
/// same time, on the same netns: ADD, CHECK and DEL of both, concurrently.
#[test]
#[ignore = "needs root"]
fn loopback_and_bridge_at_once_on_one_netns() {
    if !privileged("loopback_and_bridge_at_once_on_one_netns") {
        return;
    }
    let env = Env::new("lobr");
    let lo_bin = ours();
    let lo_conf = conf("1.0.0", json!({}));
    let br_conf = env.conf("1.0.0", &["10.1.41.0/24", "fd00:41::/64"], json!({}));
    for round in 0..3 {
        let ctr = NamedNetns::new("lobr-c");
        let both = |cmd: &str, br_conf: &Value| {
            std::thread::scope(|s| {
                let lo = s.spawn(|| run(&lo_bin, cmd, &env.host, ctr.path(), &lo_conf));
                let br = s.spawn(|| env.run(cmd, &ctr, "ctr-1", br_conf));
                (lo.join().unwrap(), br.join().unwrap())
            })
        };
        let (lo, br) = both("ADD", &br_conf);
        let lo_result = lo.assert_success().json();
        let br_result = br.assert_success().json();
        assert_eq!(
            lo_result["ips"][0]["address"], "127.0.0.1/8",
            "round {round}"
        );
        assert!(lo_state(&ctr).up);
        assert!(ping(&ctr, "127.0.0.1"), "round {round}: lo does not answer");
        assert!(ping(&ctr, "10.1.41.1"), "round {round}: no gateway");

        let br_prev = support::with_prev(&br_conf, &br_result);
        let (lo, br) = both("CHECK", &br_prev);
        lo.assert_success();
        br.assert_success();
        let (lo, br) = both("DEL", &br_prev);
        lo.assert_success();
        br.assert_success();
        assert!(!lo_state(&ctr).up, "round {round}");
        env.assert_clean_with(&ctr);
    }
}
