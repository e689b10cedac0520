//! Stdin is decoded the way the Go reference decodes it (encoding/json): Go field names
//! and deep nesting work as with the reference, and what it refuses is refused with
//! nothing changed. Each case runs our bridge + host-local and the reference's
//! (/usr/lib/cni) on the same input.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::{NamedNetns, PluginOutput, PluginRun, TempDir, bin_path, go_plugin_path};
use serde_json::{Value, json};
use support::{error_of, links, normalize_result};
use testkit::privileged;

const NETWORK: &str = "gonet";
const MAC: &str = "02:00:00:00:00:07";

/// A host netns, a container netns, a dataDir and a CNI_PATH holding `bridge` and
/// `host-local` of one implementation.
struct World {
    host: NamedNetns,
    ctr: NamedNetns,
    data: TempDir,
    cni: TempDir,
}

impl World {
    fn new(go: bool) -> World {
        let cni = TempDir::new("gojson-cni");
        for p in ["bridge", "host-local"] {
            let bin = if go { go_plugin_path(p) } else { bin_path(p) };
            std::os::unix::fs::symlink(bin, cni.join(p)).unwrap();
        }
        World {
            host: NamedNetns::new("gojson-h"),
            ctr: NamedNetns::new("gojson-c"),
            data: TempDir::new("gojson-data"),
            cni,
        }
    }

    fn run(&self, cmd: &str, stdin: &str) -> PluginOutput {
        PluginRun::new(self.cni.join("bridge"))
            .command(cmd)
            .container_id("ctr1")
            .netns(self.ctr.path())
            .ifname("eth0")
            .cni_path([self.cni.path()])
            .stdin(stdin)
            .run_in(&self.host)
    }

    /// The plain config with `extra` merged in at the top level.
    fn conf(&self, extra: Value) -> Value {
        let mut c = json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "bridge",
            "bridge": "gobr0", "isGateway": true,
            "ipam": {"type": "host-local", "subnet": "10.1.7.0/24", "dataDir": self.data.path()}});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    /// Host links other than lo, container links other than lo, lease files.
    fn state(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let names = |ns: &NamedNetns| -> Vec<String> {
            links(ns)
                .iter()
                .filter_map(|l| l["ifname"].as_str().map(String::from))
                .filter(|n| n != "lo")
                .collect()
        };
        let leases = std::fs::read_dir(self.data.join(NETWORK))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.starts_with("10."))
                    .collect()
            })
            .unwrap_or_default();
        (names(&self.host), names(&self.ctr), leases)
    }
}

/// `levels` arrays inside each other, as JSON text: at the top level of a config the
/// document is `levels + 1` deep.
fn nested(levels: usize) -> String {
    format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
}

/// Splices `"key": <raw JSON>` into the top level of `conf`'s text.
fn with_raw(conf: &Value, key: &str, raw: &str) -> String {
    format!("{{\"{key}\":{raw},{}", &conf.to_string()[1..])
}

#[test]
#[ignore = "needs root"]
fn go_field_names_give_the_reference_result() {
    if !privileged("go_field_names_give_the_reference_result") {
        return;
    }
    let mut results = Vec::new();
    for go in [false, true] {
        let w = World::new(go);
        // As the Go host-local and bridge read it; RuntimeConfig as containerd's CRI sends it.
        let conf = json!({"cniVersion": "1.0.0", "Name": NETWORK, "Type": "bridge",
            "Bridge": "gobr0", "IsGateway": true, "RuntimeConfig": {"Mac": MAC},
            "IPAM": {"Type": "host-local", "Subnet": "10.1.7.0/24", "DataDir": w.data.path(),
                     "Routes": [{"Dst": "0.0.0.0/0"}]}});
        let result = w.run("ADD", &conf.to_string()).assert_success().json();
        let (host, ctr, leases) = w.state();
        assert!(host.contains(&"gobr0".to_string()), "go={go}: {host:?}");
        assert_eq!(ctr, ["eth0"], "go={go}");
        assert_eq!(leases, ["10.1.7.2"], "go={go}");
        let routes = w.ctr.exec_in(&["ip", "-4", "route", "show", "default"]);
        assert!(routes.contains("via 10.1.7.1"), "go={go}: {routes}");
        let mut del = conf.clone();
        del["prevResult"] = result.clone();
        w.run("DEL", &del.to_string()).assert_success();
        assert_eq!(w.state().1, Vec::<String>::new(), "go={go}");
        assert_eq!(w.state().2, Vec::<String>::new(), "go={go}");
        results.push(normalize_result(&result, Some(MAC)));
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0]["interfaces"][2]["mac"], MAC);
}

#[test]
#[ignore = "needs root"]
fn deeply_nested_unknown_keys_work_up_to_the_reference_limit() {
    if !privileged("deeply_nested_unknown_keys_work_up_to_the_reference_limit") {
        return;
    }
    for depth in [1_000, 10_000] {
        let deep = nested(depth - 1);
        let w = World::new(false);
        let conf = w.conf(json!({}));
        let result = w
            .run("ADD", &with_raw(&conf, "unknown", &deep))
            .assert_success()
            .json();
        assert_eq!(w.state().2, ["10.1.7.2"], "{depth}");
        // Deep at the top level and inside prevResult (an object in the object).
        let prev = format!(
            "{{\"unknown\":{},{}",
            nested(depth - 2),
            &result.to_string()[1..]
        );
        let del = format!(
            "{{\"prevResult\":{prev},{}",
            &with_raw(&conf, "unknown", &deep)[1..]
        );
        // The reference accepts this DEL (nothing left to do for it here) ...
        let go = World::new(true);
        go.run("DEL", &del).assert_success();
        // ... and ours releases the attachment with it.
        w.run("DEL", &del).assert_success();
        assert_eq!(w.state().1, Vec::<String>::new(), "{depth}");
        assert_eq!(w.state().2, Vec::<String>::new(), "{depth}");
    }
    // One level more: the reference refuses it, so do we (a decoding error).
    let w = World::new(false);
    let too_deep = with_raw(&w.conf(json!({})), "unknown", &nested(10_000));
    let (code, msg) = error_of(&w.run("DEL", &too_deep));
    assert_eq!(code, 6, "{msg}");
    assert!(msg.contains("exceeded max depth"), "{msg}");
    assert!(!World::new(true).run("DEL", &too_deep).success());
}

#[test]
#[ignore = "needs root"]
fn wrong_types_are_refused_like_the_reference_with_nothing_changed() {
    if !privileged("wrong_types_are_refused_like_the_reference_with_nothing_changed") {
        return;
    }
    for (extra, field) in [
        (json!({"args": {"cni": {"mac": 5}}}), "args.cni.mac"),
        (json!({"runtimeConfig": {"mac": 5}}), "runtimeConfig.mac"),
        (json!({"prevResult": "x"}), "prevResult"),
    ] {
        for go in [false, true] {
            let w = World::new(go);
            let out = w.run("ADD", &w.conf(extra.clone()).to_string());
            let (code, msg) = error_of(&out);
            assert!(msg.starts_with("failed to load netconf: "), "{msg}");
            if !go {
                assert!(msg.contains(&format!("{field}: invalid type")), "{msg}");
                assert!(code == 6 || code == 7, "{extra}: {code}");
            }
            assert_eq!(
                w.state(),
                (vec![], vec![], vec![]),
                "go={go} {extra}: nothing changed"
            );
        }
    }
}
