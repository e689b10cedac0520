//! `CNI_RS_TIMINGS=1` (sysproc::step): every step point of the bridge and its host-local
//! logs its duration on stderr, stdout stays the plain result; unset, nothing is logged.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::NamedNetns;
use serde_json::json;
use support::*;
use testkit::privileged;

/// The step names of the `timing:` lines on stderr, in order.
fn timed_steps(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("timing: "))
        .map(|l| {
            let (name, ms) = l.rsplit_once(' ').expect("timing line: <step> <ms>");
            assert!(ms.parse::<f64>().is_ok_and(|ms| ms >= 0.0), "{l}");
            name.to_string()
        })
        .collect()
}

#[test]
#[ignore = "needs root"]
fn timings_log_each_step_on_stderr_only_when_asked() {
    if !privileged("timings_log_each_step_on_stderr_only_when_asked") {
        return;
    }
    let env = Env::new("timings");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf("1.0.0", &["10.1.2.0/24"], json!({"ipMasq": true}));
    let run = |cmd: &str, conf: &serde_json::Value, timings: bool| {
        let mut run = env.plugin(cmd, ctr.path().to_str().unwrap(), "timed", conf);
        if timings {
            run = run.env("CNI_RS_TIMINGS", "1");
        }
        run.run_in(&env.host)
    };

    let add = run("ADD", &conf, true);
    let result = add.assert_success().json();
    assert_eq!(result_ips(&result), vec!["10.1.2.2/24"]);
    let steps = timed_steps(&add.stderr_str());
    for step in [
        "add.bridge.bridge-created",
        "add.bridge.veth-created",
        "add.host-local.lock-taken",
        "add.host-local.total",
        "add.bridge.ipam-added",
        "add.bridge.ipmasq-set",
        "add.bridge.total",
    ] {
        assert!(steps.iter().any(|s| s == step), "{step} not in {steps:?}");
    }
    assert_eq!(steps.last().map(String::as_str), Some("add.bridge.total"));

    let del = run("DEL", &with_prev(&conf, &result), true);
    del.assert_success();
    assert_eq!(del.stdout_str(), "");
    let steps = timed_steps(&del.stderr_str());
    for step in [
        "del.bridge.links-deleted",
        "del.host-local.lease-removed",
        "del.bridge.ipam-released",
        "del.bridge.ipmasq-removed",
        "del.bridge.total",
    ] {
        assert!(steps.iter().any(|s| s == step), "{step} not in {steps:?}");
    }
    env.assert_clean_with(&ctr);

    // Unset: not one timing line.
    let add = run("ADD", &conf, false);
    add.assert_success();
    assert_eq!(timed_steps(&add.stderr_str()), Vec::<String>::new());
    let del = run("DEL", &conf, false);
    del.assert_success();
    assert_eq!(timed_steps(&del.stderr_str()), Vec::<String>::new());
    env.assert_clean_with(&ctr);
}
