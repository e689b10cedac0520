//! Faults: IPAM failures, a netns vanishing mid-ADD, and every way DEL finds the
//! container side already gone. Afterwards no veth, IP reservation or rule remains.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::{NamedNetns, PluginRun, TempDir};
use serde_json::{Value, json};
use support::*;
use testkit::privileged;

/// Masquerade (iptables) and spoof check on, so a leak of either shows.
fn full_conf(env: &Env, version: &str, subnets: &[&str]) -> Value {
    env.conf(
        version,
        subnets,
        json!({"ipMasq": true, "ipMasqBackend": "iptables", "macspoofchk": true}),
    )
}

/// [`full_conf`] (1.0.0) whose IPAM is the script `name` in CNI_PATH, running `body`.
fn scripted_ipam_conf(env: &Env, subnets: &[&str], name: &str, body: &str) -> Value {
    env.ipam_script(name, body);
    let mut conf = full_conf(env, "1.0.0", subnets);
    conf["ipam"]["type"] = json!(name);
    conf
}

#[test]
#[ignore = "needs root"]
fn ipam_exhausted_rolls_back() {
    if !privileged("ipam_exhausted_rolls_back") {
        return;
    }
    let env = Env::new("exh");
    // A /30 has one address left after the gateway.
    let conf = full_conf(&env, "1.0.0", &["10.1.3.0/30"]);
    let c1 = NamedNetns::new("ctr");
    let c2 = NamedNetns::new("ctr");
    let r1 = env.add(&c1, "c1", &conf);
    let before = env.links().len();
    let (_, msg) = error_of(&env.run("ADD", &c2, "c2", &conf));
    assert!(msg.contains("no IP addresses available"), "{msg}");
    assert_eq!(env.links().len(), before, "the failed ADD's veth is gone");
    assert_eq!(links(&c2).len(), 1);
    assert!(!env.nft_ruleset().contains("macspoofchk-c2"));
    env.del(&c1, "c1", &with_prev(&conf, &r1));
    env.del(&c2, "c2", &conf);
    env.assert_clean();
}

#[test]
#[ignore = "needs root"]
fn failing_ipam_plugin_rolls_back() {
    if !privileged("failing_ipam_plugin_rolls_back") {
        return;
    }
    let env = Env::new("ipamfail");
    let ctr = NamedNetns::new("ctr");
    let conf = scripted_ipam_conf(
        &env,
        &["10.1.2.0/24"],
        "failipam",
        r#"[ "$CNI_COMMAND" = ADD ] || exit 0
echo '{"cniVersion":"1.0.0","code":11,"msg":"try again later"}'; exit 1"#,
    );
    let (code, msg) = error_of(&env.run("ADD", &ctr, "dummy-0", &conf));
    assert_eq!((code, msg.as_str()), (11, "try again later"));
    env.assert_clean_with(&ctr);
}

#[test]
#[ignore = "needs root"]
fn ipam_without_ips_rolls_back() {
    if !privileged("ipam_without_ips_rolls_back") {
        return;
    }
    let env = Env::new("noips");
    let marker = env.data.join("ipam-del-called");
    let ctr = NamedNetns::new("ctr");
    let conf = scripted_ipam_conf(
        &env,
        &["10.1.2.0/24"],
        "emptyipam",
        &format!(
            r#"cat >/dev/null
case "$CNI_COMMAND" in
ADD) echo '{{"cniVersion":"1.0.0","ips":[]}}';;
DEL) touch {};;
esac"#,
            marker.display()
        ),
    );
    let (_, msg) = error_of(&env.run("ADD", &ctr, "dummy-0", &conf));
    assert_eq!(msg, "IPAM plugin returned missing IP config");
    assert!(marker.exists(), "the reservation is released");
    env.assert_clean_with(&ctr);
}

/// IPAM answers that used to panic the bridge (a gateway of another family than its address,
/// with isGateway) or reach the kernel half-done (a `/0` gateway address on the host's
/// bridge): a clear error naming the field, nothing on the bridge, the veth gone and the
/// reservation released.
#[test]
#[ignore = "needs root"]
fn invalid_ipam_result_rolls_back() {
    if !privileged("invalid_ipam_result_rolls_back") {
        return;
    }
    for (answer, want) in [
        (
            r#"{"cniVersion":"1.0.0","ips":[{"address":"fd00::2/64","gateway":"10.0.0.1"}]}"#,
            "invalid IPAM result: ips[0].gateway 10.0.0.1 is not in the address family of fd00::2/64",
        ),
        (
            r#"{"cniVersion":"1.0.0","ips":[{"address":"10.1.2.5/24"}],"routes":[{"dst":"0.0.0.0/0","gw":"fd00::1"}]}"#,
            "invalid IPAM result: routes[0].gw fd00::1 is not in the address family of routes[0].dst 0.0.0.0/0",
        ),
        (
            r#"{"cniVersion":"1.0.0","ips":[{"address":"255.255.255.255/32"}]}"#,
            "invalid IPAM result: ips[0].address 255.255.255.255/32 is the broadcast address",
        ),
        (
            r#"{"cniVersion":"1.0.0","ips":[{"address":"10.1.2.5/0"}]}"#,
            "invalid IPAM result: ips[0].address 10.1.2.5/0 has prefix length 0",
        ),
    ] {
        let env = Env::new("badipam");
        let marker = env.data.join("ipam-del-called");
        let mut conf = scripted_ipam_conf(
            &env,
            &["10.1.2.0/24"],
            "badipam",
            &format!(
                "cat >/dev/null\ncase \"$CNI_COMMAND\" in\nADD) echo '{answer}';;\nDEL) touch {};;\nesac",
                marker.display()
            ),
        );
        conf["isGateway"] = json!(true);
        conf["isDefaultGateway"] = json!(false);
        let ctr = NamedNetns::new("ctr");
        let (code, msg) = error_of(&env.run("ADD", &ctr, "dummy-0", &conf));
        assert_eq!((code, msg.as_str()), (999, want));
        assert!(marker.exists(), "{want}: the reservation is released");
        assert_eq!(
            global_addrs(&env.host, BRIDGE),
            Vec::<String>::new(),
            "{want}"
        );
        env.assert_clean_with(&ctr);
    }
}

/// The kernel refuses a route (its gateway is off-link): the message names the route as
/// `ip route` would (no Rust `Some(..)`), and ADD is undone.
#[test]
#[ignore = "needs root"]
fn unreachable_route_gateway_rolls_back() {
    if !privileged("unreachable_route_gateway_rolls_back") {
        return;
    }
    let env = Env::new("offlink");
    let marker = env.data.join("ipam-del-called");
    let answer = r#"{"cniVersion":"1.0.0","ips":[{"address":"10.1.2.5/24","gateway":"10.1.2.1"}],"routes":[{"dst":"10.9.0.0/16","gw":"99.1.1.1"}]}"#;
    let conf = scripted_ipam_conf(
        &env,
        &["10.1.2.0/24"],
        "offlinkipam",
        &format!(
            "cat >/dev/null\ncase \"$CNI_COMMAND\" in\nADD) echo '{answer}';;\nDEL) touch {};;\nesac",
            marker.display()
        ),
    );
    let ctr = NamedNetns::new("ctr");
    let (code, msg) = error_of(&env.run("ADD", &ctr, "dummy-0", &conf));
    assert_eq!(code, 999);
    assert!(
        msg.starts_with("failed to add route '10.9.0.0/16 via 99.1.1.1 dev eth0': "),
        "{msg}"
    );
    assert!(marker.exists(), "the reservation is released");
    env.assert_clean_with(&ctr);
}

/// nft refuses the spoof check (someone else made the `bridge nat` PREROUTING chain with
/// another priority): the message says what failed on which object in one short line,
/// nft's output and the script are in `details`, and ADD is undone.
#[test]
#[ignore = "needs root"]
fn spoofcheck_failure_is_short_and_names_the_object() {
    if !privileged("spoofcheck_failure_is_short_and_names_the_object") {
        return;
    }
    let env = Env::new("scfail");
    env.host.exec_in(&["nft", "add", "table", "bridge", "nat"]);
    env.host.exec_in(&[
        "nft",
        "add",
        "chain",
        "bridge",
        "nat",
        "PREROUTING",
        "{ type filter hook prerouting priority -100 ; }",
    ]);
    let conf = env.conf("1.0.0", &["10.1.2.0/24"], json!({"macspoofchk": true}));
    let ctr = NamedNetns::new("ctr");
    let error = env.run("ADD", &ctr, "dummy-0", &conf).assert_failure();
    let msg = error["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("failed to set up mac spoof check for \"veth"),
        "{msg}"
    );
    assert!(
        msg.contains(
            "(nft chain \"cni-br-iface-dummy-0-eth0\" in table bridge nat): \
             nft -j -f - failed (exit status: 1): Could not process rule: "
        ),
        "{msg}"
    );
    assert!(msg.len() < 250 && !msg.contains('\n'), "{msg}");
    let details = error["details"].as_str().unwrap();
    assert!(
        details.contains("Error: Could not process rule"),
        "{details}"
    );
    assert!(
        details.contains("\"macspoofchk-dummy-0-eth0\""),
        "{details}"
    );
    env.assert_clean_with(&ctr);
}

/// The runtime died mid-DEL (its end of our stderr is closed, so every log line fails
/// with EPIPE): DEL still runs to the end and releases the IP. A log line written with
/// `eprintln!` panicked and aborted DEL before the IPAM DEL.
#[test]
#[ignore = "needs root"]
fn del_finishes_when_stderr_is_gone() {
    if !privileged("del_finishes_when_stderr_is_gone") {
        return;
    }
    let env = Env::new("nostderr");
    let conf = env.conf("1.0.0", &["10.1.2.0/24"], json!({}));
    let ctr = NamedNetns::new("ctr");
    let result = env.add(&ctr, "dummy-0", &conf);
    let ctr_path = ctr.path().to_str().unwrap().to_string();
    drop(ctr);
    // The namespace is gone: DEL logs that, then cleans up the rest.
    env.plugin("DEL", &ctr_path, "dummy-0", &with_prev(&conf, &result))
        .stderr_closed()
        .run_in(&env.host)
        .assert_success();
    assert!(env.ip_files().is_empty(), "the IP is released");
    env.wait_for_no_links(std::time::Duration::from_secs(3));
    env.assert_clean();
}

/// The IPAM deletes the container netns before answering: whatever ADD returns, the
/// runtime's DEL afterwards leaves nothing.
#[test]
#[ignore = "needs root"]
fn netns_vanishing_mid_add() {
    if !privileged("netns_vanishing_mid_add") {
        return;
    }
    let env = Env::new("vanish");
    let ctr = NamedNetns::new("ctr");
    let conf = scripted_ipam_conf(
        &env,
        &["10.1.2.0/24"],
        "vanishipam",
        &format!(
            "[ \"$CNI_COMMAND\" = ADD ] && ip netns del {}\nexec {}",
            ctr.name(),
            env.cni.join("host-local").display()
        ),
    );
    let out = env.run("ADD", &ctr, "dummy-0", &conf);
    assert!(!ctr.path().exists());
    let del_conf = if out.success() {
        with_prev(&conf, &out.json())
    } else {
        conf.clone()
    };
    env.del(&ctr, "dummy-0", &del_conf);
    env.assert_clean();
}

/// How the container side is gone when DEL comes.
#[derive(Debug, Clone, Copy)]
enum Gone {
    /// The netns was deleted (its links died with it).
    Netns,
    /// CNI_NETNS names a file that is not a netns.
    NotNetns,
    /// CNI_NETNS is empty.
    EmptyNetns,
    /// The container interface was deleted.
    Link,
    /// The IP was released already.
    Ip,
}

fn del_when_gone(gone: Gone, version: &str, with_prev_result: bool) {
    let env = Env::new("gone");
    let conf = full_conf(&env, version, &["10.1.2.0/24", "fd00::/64"]);
    let ctr = NamedNetns::new("ctr");
    let ctr_path = ctr.path().to_str().unwrap().to_string();
    let result = env.add(&ctr, "dummy-0", &conf);
    assert!(!env.cni_nat_rules().is_empty());
    let junk = TempDir::new("notns");
    let mut ctr = Some(ctr);
    let netns = match gone {
        Gone::Netns => {
            drop(ctr.take());
            ctr_path
        }
        Gone::NotNetns => {
            let file = junk.join("ns");
            std::fs::write(&file, "").unwrap();
            file.to_str().unwrap().to_string()
        }
        Gone::EmptyNetns => String::new(),
        Gone::Link => {
            ctr.as_ref()
                .unwrap()
                .exec_in(&["ip", "link", "del", IFNAME]);
            ctr_path
        }
        Gone::Ip => {
            PluginRun::new(env.cni.join("host-local"))
                .command("DEL")
                .container_id("dummy-0")
                .netns(&ctr_path)
                .ifname(IFNAME)
                .cni_path([env.cni.path()])
                .stdin(conf.to_string())
                .run_in(&env.host)
                .assert_success();
            assert!(env.ip_files().is_empty());
            ctr_path
        }
    };
    let del_conf = if with_prev_result {
        with_prev(&conf, &result)
    } else {
        conf.clone()
    };
    let run = || {
        env.plugin("DEL", &netns, "dummy-0", &del_conf)
            .run_in(&env.host)
    };
    run().assert_success();
    let what = format!("{gone:?}, {version}, prevResult: {with_prev_result}");
    assert!(env.ip_files().is_empty(), "{what}");
    assert_eq!(env.cni_nat_rules(), Vec::<String>::new(), "{what}");
    assert!(!env.nft_ruleset().contains("macspoofchk"), "{what}");
    // The host veth can only be found through prevResult when the netns is unreachable
    // but alive.
    let host_veth_findable = with_prev_result || !matches!(gone, Gone::NotNetns | Gone::EmptyNetns);
    if host_veth_findable {
        if matches!(gone, Gone::Netns) {
            // The kernel destroys a deleted namespace (and the veth pair in it) from a
            // work queue, so the host end may outlive our DEL by a moment.
            env.wait_for_no_links(std::time::Duration::from_secs(3));
        }
        env.assert_clean();
    }
    run().assert_success();
    drop(ctr);
}

#[test]
#[ignore = "needs root"]
fn del_when_container_side_is_gone() {
    if !privileged("del_when_container_side_is_gone") {
        return;
    }
    for gone in [
        Gone::Netns,
        Gone::NotNetns,
        Gone::EmptyNetns,
        Gone::Link,
        Gone::Ip,
    ] {
        for prev in [true, false] {
            del_when_gone(gone, "1.0.0", prev);
        }
        del_when_gone(gone, "1.1.0", true);
    }
}

/// ADD fails after the masquerade rules and the spoof check are in place (a 0.2.0 result
/// cannot carry two IPv4 addresses, found only when the result is converted): everything,
/// rules included, is undone, with either backend.
#[test]
#[ignore = "needs root"]
fn failure_after_ipmasq_rolls_back_everything() {
    if !privileged("failure_after_ipmasq_rolls_back_everything") {
        return;
    }
    for backend in ["iptables", "nftables"] {
        let env = Env::new("late");
        let conf = env.conf(
            "0.2.0",
            &["10.1.2.0/24", "10.1.3.0/24"],
            json!({"ipMasq": true, "ipMasqBackend": backend, "macspoofchk": true}),
        );
        let ctr = NamedNetns::new("ctr");
        let (_, msg) = error_of(&env.run("ADD", &ctr, "dummy-0", &conf));
        assert!(
            msg.contains("does not support more than 1 address"),
            "{msg}"
        );
        assert_eq!(links(&ctr).len(), 1, "{backend}: container veth left");
        env.assert_clean();
    }
}

/// A DEL whose IPAM DEL fails once: the error goes back to the runtime, which retries;
/// the retry (the link and the rules are gone by now) releases the IP and succeeds.
#[test]
#[ignore = "needs root"]
fn del_failing_half_way_is_retried() {
    if !privileged("del_failing_half_way_is_retried") {
        return;
    }
    for prev in [true, false] {
        let env = Env::new("delretry");
        let marker = env.data.join("del-failed-once");
        let conf = scripted_ipam_conf(
            &env,
            &["10.1.2.0/24", "fd00::/64"],
            "flakyipam",
            &format!(
                r#"if [ "$CNI_COMMAND" = DEL ] && [ ! -e {m} ]; then
  touch {m}; cat >/dev/null
  echo '{{"cniVersion":"1.0.0","code":11,"msg":"store busy"}}'; exit 1
fi
exec {hl}"#,
                m = marker.display(),
                hl = env.cni.join("host-local").display()
            ),
        );
        let ctr = NamedNetns::new("ctr");
        let result = env.add(&ctr, "dummy-0", &conf);
        let del_conf = if prev {
            with_prev(&conf, &result)
        } else {
            conf.clone()
        };
        let (code, msg) = error_of(&env.run("DEL", &ctr, "dummy-0", &del_conf));
        assert_eq!((code, msg.as_str()), (11, "store busy"));
        // The link is gone; the address is still reserved.
        assert_eq!(links(&ctr).len(), 1);
        assert_eq!(env.ip_files().len(), 2);
        env.del(&ctr, "dummy-0", &del_conf);
        env.assert_clean();
    }
}

/// DEL with a prevResult that names only the IPv4 address of a dual-stack attachment
/// (stale cache): the steps it starts at once with the link delete know only that one, and
/// the IPv6 address the link turned out to have still gets its masquerade rules removed.
#[test]
#[ignore = "needs root"]
fn del_with_stale_prev_result_removes_the_rules_of_every_address() {
    if !privileged("del_with_stale_prev_result_removes_the_rules_of_every_address") {
        return;
    }
    let env = Env::new("delstale");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf(
        "1.0.0",
        &["10.1.2.0/24", "fd00::/64"],
        json!({"ipMasq": true, "ipMasqBackend": "iptables"}),
    );
    let result = env.add(&ctr, "dummy-0", &conf);
    let mut stale = result.clone();
    stale["ips"]
        .as_array_mut()
        .unwrap()
        .retain(|ip| ip["address"].as_str().unwrap().contains('.'));
    assert_eq!(result_ips(&stale), vec!["10.1.2.2/24"]);
    env.del(&ctr, "dummy-0", &with_prev(&conf, &stale));
    env.assert_clean_with(&ctr);
}

/// A node without iptables (nft only; plugins#1280): the automatic backend falls back to
/// nftables for both families, and DEL (which tries both backends) still succeeds and
/// leaves nothing. Then a node where only IPv6 NAT fails: ADD of a dual-stack result fails
/// and undoes its IPv4 rules.
#[test]
#[ignore = "needs root"]
fn one_backend_unavailable() {
    if !privileged("one_backend_unavailable") {
        return;
    }
    let tools = TempDir::new("tools");
    std::os::unix::fs::symlink("/usr/sbin/nft", tools.join("nft")).unwrap();
    let env = Env::new("nftonly");
    let conf = env.conf(
        "1.0.0",
        &["10.1.2.0/24", "fd00::/64"],
        json!({"ipMasq": true}),
    );
    let ctr = NamedNetns::new("ctr");
    let path = tools.path().to_str().unwrap().to_string();
    let run = |cmd: &str, conf: &Value| {
        env.plugin(cmd, ctr.path().to_str().unwrap(), "dummy-0", conf)
            .env("PATH", &path)
            .run_in(&env.host)
    };
    let result = run("ADD", &conf).assert_success().json();
    let nft = env.nft_ruleset();
    assert_eq!(nft.matches("masquerade comment").count(), 2, "{nft}");
    run("CHECK", &with_prev(&conf, &result)).assert_success();
    run("DEL", &with_prev(&conf, &result)).assert_success();
    env.assert_clean();

    // ip6tables present but its nat table unusable.
    for tool in ["iptables", "iptables-save", "iptables-restore"] {
        std::os::unix::fs::symlink(format!("/usr/sbin/{tool}"), tools.join(tool)).unwrap();
    }
    for tool in ["ip6tables", "ip6tables-save", "ip6tables-restore"] {
        write_script(
            &tools.join(tool),
            "echo \"$0 v1.8.9: can't initialize ip6tables table 'nat': Table does not exist\" >&2; exit 3",
        );
    }
    let out = run("ADD", &conf);
    let (_, msg) = error_of(&out);
    assert!(msg.contains("masquerad"), "{msg}");
    env.assert_clean();
    run("DEL", &conf).assert_success();
}

/// CNI allows interface names like `e@0` (no `/`, `:` or whitespace). The Go bridge sets
/// up its spoof check for them (it talks JSON to nft); our DEL must remove those rules and
/// succeed, or the pod is stuck in a DEL loop. Our own ADD writes JSON too: it must create
/// the very same rules, pass CHECK, and leave nothing after DEL.
#[test]
#[ignore = "needs root"]
fn spoofcheck_del_with_unusual_ifname() {
    if !privileged("spoofcheck_del_with_unusual_ifname") {
        return;
    }
    const ODD: &str = "e@0";
    let env = Env::with_bridge("oddif", cni_tests::go_plugin_path("bridge"));
    let conf = env.conf("1.0.0", &["10.1.2.0/24"], json!({"macspoofchk": true}));
    let ctr = NamedNetns::new("ctr");
    let ctr_path = ctr.path().to_str().unwrap().to_string();
    let go = env
        .plugin("ADD", &ctr_path, "dummy-0", &conf)
        .ifname(ODD)
        .run_in(&env.host);
    let result = go.assert_success().json();
    let go_rules = spoofcheck_table(&env, &result);
    assert!(go_rules.contains("macspoofchk-dummy-0-e@0"));
    let ours = |cmd: &str, conf: &Value| {
        PluginRun::new(cni_tests::bin_path("bridge"))
            .command(cmd)
            .container_id("dummy-0")
            .netns(&ctr_path)
            .ifname(ODD)
            .cni_path([env.cni.path()])
            .stdin(conf.to_string())
            .run_in(&env.host)
    };
    ours("DEL", &with_prev(&conf, &result)).assert_success();
    env.assert_clean();
    assert!(!env.nft_ruleset().contains("cni-br-iface-dummy-0"));

    let result = ours("ADD", &conf).assert_success().json();
    assert_eq!(spoofcheck_table(&env, &result), go_rules);
    ours("CHECK", &with_prev(&conf, &result)).assert_success();
    ours("DEL", &with_prev(&conf, &result)).assert_success();
    env.assert_clean();
    assert!(!env.nft_ruleset().contains("cni-br-iface-dummy-0"));
}

/// `nft list table bridge nat` with the attachment's random host veth name and
/// container MAC (interfaces 1 and 2 of a bridge result) replaced by placeholders.
fn spoofcheck_table(env: &Env, result: &Value) -> String {
    let veth = result["interfaces"][1]["name"].as_str().unwrap();
    let mac = result["interfaces"][2]["mac"].as_str().unwrap();
    env.host
        .exec_in(&["nft", "list", "table", "bridge", "nat"])
        .replace(veth, "VETH")
        .replace(&mac.to_ascii_lowercase(), "MAC")
}

/// Our ADD, CHECK and DEL with spoof check and nftables masquerading, for
/// CNI-valid interface names that nft's text syntax cannot spell as chain names.
#[test]
#[ignore = "needs root"]
fn unusual_ifnames_add_check_del() {
    if !privileged("unusual_ifnames_add_check_del") {
        return;
    }
    let env = Env::new("oddnames");
    let conf = env.conf(
        "1.0.0",
        &["10.1.2.0/24"],
        json!({"macspoofchk": true, "ipMasq": true, "ipMasqBackend": "nftables"}),
    );
    for (i, ifname) in [
        "e@0", "e$x", "e;1", "e#1", "e{}", "e*", "e\\x", "e'x", "x-mac",
    ]
    .into_iter()
    .enumerate()
    {
        let ctr = NamedNetns::new("ctr");
        let id = format!("odd-{i}");
        let run = |cmd: &str, conf: &Value| {
            env.plugin(cmd, ctr.path().to_str().unwrap(), &id, conf)
                .ifname(ifname)
                .run_in(&env.host)
        };
        let result = run("ADD", &conf).assert_success().json();
        let nft = env.nft_ruleset();
        assert!(
            nft.contains(&format!("macspoofchk-{id}-{ifname}")),
            "{ifname:?}:\n{nft}"
        );
        assert!(
            nft.contains(&format!("if: {ifname}, id: {id}")),
            "{ifname:?}:\n{nft}"
        );
        assert!(link(&ctr, ifname).is_some(), "{ifname:?}");
        run("CHECK", &with_prev(&conf, &result)).assert_success();
        run("DEL", &with_prev(&conf, &result)).assert_success();
        env.assert_clean();
        assert!(!env.nft_ruleset().contains("cni-br-iface-"), "{ifname:?}");
    }
}

/// A DEL for another container whose prevResult names the victim's host veth (a stale
/// cache, a reused name) must leave the victim alone: the MAC must be the one recorded,
/// and when the DEL names a living namespace the veth's peer must live there.
#[test]
#[ignore = "needs root"]
fn del_never_deletes_another_attachments_veth() {
    if !privileged("del_never_deletes_another_attachments_veth") {
        return;
    }
    let env = Env::new("owner");
    let conf = full_conf(&env, "1.0.0", &["10.1.2.0/24"]);
    let victim = NamedNetns::new("victim");
    let result = env.add(&victim, "victim", &conf);
    let veth = result["interfaces"][1].clone();
    let veth_name = veth["name"].as_str().unwrap().to_string();
    assert!(env.link(&veth_name).is_some());

    let other = NamedNetns::new("other");
    let junk = TempDir::new("owner-notns");
    let file = junk.join("ns");
    std::fs::write(&file, "").unwrap();
    let missing = junk.join("missing");
    let stale = |mac: &str| {
        with_prev(
            &conf,
            &json!({"cniVersion": "1.0.0", "ips": [],
                    "interfaces": [{"name": BRIDGE}, {"name": veth_name, "mac": mac}]}),
        )
    };
    let real_mac = veth["mac"].as_str().unwrap();
    let cases = [
        ("", "02:00:00:00:00:01"),
        (missing.to_str().unwrap(), "02:00:00:00:00:01"),
        (file.to_str().unwrap(), "02:00:00:00:00:01"),
        (other.path().to_str().unwrap(), "02:00:00:00:00:01"),
        // The right MAC, but the peer lives elsewhere than the namespace this DEL names.
        (other.path().to_str().unwrap(), real_mac),
        (other.path().to_str().unwrap(), &real_mac.to_uppercase()),
    ];
    for (netns, mac) in cases {
        let out = env
            .plugin("DEL", netns, "ghost", &stale(mac))
            .run_in(&env.host);
        out.assert_success();
        assert!(
            env.link(&veth_name).is_some(),
            "DEL (netns {netns:?}, mac {mac}) deleted the victim's veth"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("leaving"),
            "DEL says why it left {veth_name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(link(&victim, IFNAME).is_some(), "the victim keeps its eth0");
    assert_eq!(env.ip_files().len(), 1, "the victim keeps its lease");
    assert!(
        !env.cni_nat_rules().is_empty(),
        "the victim keeps its rules"
    );

    env.del(&victim, "victim", &with_prev(&conf, &result));
    env.assert_clean_with(&victim);
}
