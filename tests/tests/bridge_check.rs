//! CHECK's failure paths: each way the prevResult or the kernel can disagree with what ADD
//! made gets its own error; and ADD's and DEL's error paths that need no IPAM.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::NamedNetns;
use serde_json::{Value, json};
use support::*;
use testkit::privileged;

/// A prevResult edit and the start of the error CHECK must give for it.
type Edit = fn(&mut Value);

#[test]
#[ignore = "needs root"]
fn check_reports_each_prev_result_mismatch() {
    if !privileged("check_reports_each_prev_result_mismatch") {
        return;
    }
    let env = Env::new("chk");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf("1.0.0", &["10.1.2.0/24"], json!({}));
    let result = env.add(&ctr, "dummy-0", &conf);
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let check = |prev: Option<&Value>| {
        let conf = match prev {
            Some(p) => with_prev(&conf, p),
            None => conf.clone(),
        };
        env.run("CHECK", &ctr, "dummy-0", &conf)
    };
    check(Some(&result)).assert_success();
    let (_, msg) = error_of(&check(None));
    assert_eq!(msg, "Required prevResult missing");

    let cases: [(Edit, String); 8] = [
        (
            |r| r["interfaces"][2]["sandbox"] = json!("/run/netns/elsewhere"),
            "Sandbox in prevResult doesn't match configured netns".into(),
        ),
        (
            |r| r["interfaces"][0]["name"] = json!("otherbr"),
            format!("CNI created bridge {BRIDGE} in host namespace was not found"),
        ),
        (
            |r| r["interfaces"][0]["mac"] = json!("02:00:00:00:00:01"),
            format!("Bridge interface {BRIDGE} Mac doesn't match"),
        ),
        (
            |r| r["interfaces"][2]["mac"] = json!("02:00:00:00:00:01"),
            format!("Interface {IFNAME} Mac 02:00:00:00:00:01 doesn't match container Mac"),
        ),
        (
            |r| r["interfaces"][1]["mac"] = json!("02:00:00:00:00:01"),
            format!("Interface {veth} Mac doesn't match"),
        ),
        (
            |r| r["interfaces"][1]["name"] = json!("vethgone"),
            format!("CNI veth created for bridge {BRIDGE} was not found"),
        ),
        (
            |r| r["ips"][0]["address"] = json!("10.1.2.200/24"),
            format!("Failed to match addr 10.1.2.200/24 on interface {IFNAME}"),
        ),
        (
            |r| {
                let route = json!({"dst": "10.9.9.0/24", "gw": "10.1.2.1"});
                r["routes"].as_array_mut().unwrap().push(route)
            },
            "Expected route 10.9.9.0/24 via 10.1.2.1 not found in the container".into(),
        ),
    ];
    for (edit, want) in cases {
        let mut prev = result.clone();
        edit(&mut prev);
        let (code, msg) = error_of(&check(Some(&prev)));
        assert!(msg.starts_with(&want), "want {want:?}, got {msg:?}");
        assert_eq!(code, 999, "{msg}");
    }

    // The kernel side: the port leaves the bridge, then the container interface goes.
    env.host.exec_in(&["ip", "link", "set", &veth, "nomaster"]);
    let (_, msg) = error_of(&check(Some(&result)));
    assert_eq!(msg, format!("veth {veth} is not a port of bridge {BRIDGE}"));
    ctr.exec_in(&["ip", "link", "del", IFNAME]);
    let (_, msg) = error_of(&check(Some(&result)));
    assert_eq!(
        msg,
        format!("CNI created interface in container {IFNAME} not found")
    );
    env.del(&ctr, "dummy-0", &with_prev(&conf, &result));
    env.assert_clean_with(&ctr);
}

#[test]
#[ignore = "needs root"]
fn check_notices_missing_spoof_check_rules() {
    if !privileged("check_notices_missing_spoof_check_rules") {
        return;
    }
    let env = Env::new("chkspoof");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf("1.0.0", &["10.1.2.0/24"], json!({"macspoofchk": true}));
    let result = env.add(&ctr, "dummy-0", &conf);
    let prev = with_prev(&conf, &result);
    env.host
        .exec_in(&["nft", "flush", "table", "bridge", "nat"]);
    let (_, msg) = error_of(&env.run("CHECK", &ctr, "dummy-0", &prev));
    let veth = result["interfaces"][1]["name"].as_str().unwrap();
    assert_eq!(msg, format!("mac spoof check rules for {veth} are missing"));
    env.del(&ctr, "dummy-0", &prev);
    env.assert_clean_with(&ctr);
}

/// ADD refuses a container that already has the interface name, before any IPAM call.
#[test]
#[ignore = "needs root"]
fn add_refuses_an_existing_container_interface() {
    if !privileged("add_refuses_an_existing_container_interface") {
        return;
    }
    let env = Env::new("dupif");
    let ctr = NamedNetns::new("ctr");
    ctr.exec_in(&[
        "ip", "link", "add", IFNAME, "type", "veth", "peer", "name", "peer0",
    ]);
    let conf = env.conf("1.0.0", &["10.1.2.0/24"], json!({}));
    let (code, msg) = error_of(&env.run("ADD", &ctr, "dummy-0", &conf));
    assert_eq!(
        (code, msg.as_str()),
        (999, "container veth name (\"eth0\") already exists")
    );
    assert_eq!(links(&ctr).len(), 3, "lo and the container's own pair");
    env.assert_clean();
}

/// A prevResult that does not parse is ignored: DEL still cleans up from the kernel.
#[test]
#[ignore = "needs root"]
fn del_ignores_an_unreadable_prev_result() {
    if !privileged("del_ignores_an_unreadable_prev_result") {
        return;
    }
    let env = Env::new("badprev");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf(
        "1.0.0",
        &["10.1.2.0/24"],
        json!({"ipMasq": true, "ipMasqBackend": "iptables"}),
    );
    env.add(&ctr, "dummy-0", &conf);
    let del_conf = with_prev(&conf, &json!({"ips": "not a list"}));
    let out = env.run("DEL", &ctr, "dummy-0", &del_conf);
    out.assert_success();
    assert!(
        out.stderr_str().contains("ignoring unreadable prevResult"),
        "{}",
        out.stderr_str()
    );
    env.assert_clean_with(&ctr);
}
