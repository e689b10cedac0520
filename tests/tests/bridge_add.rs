//! The bridge plugin's ADD/CHECK/DEL scenarios of the reference suite
//! (`bridge_test.go`), for every spec version, against the real kernel.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::NamedNetns;
use serde_json::{Value, json};
use support::*;
use testkit::privileged;

/// What one ADD should produce for a set of subnets.
struct Case {
    subnets: &'static [&'static str],
    /// Gateway CIDRs expected on the bridge.
    gateways: &'static [&'static str],
}

const V4: Case = Case {
    subnets: &["10.1.2.0/24"],
    gateways: &["10.1.2.1/24"],
};
const V6: Case = Case {
    subnets: &["2001:db8::0/64"],
    gateways: &["2001:db8::1/64"],
};
const DUAL: Case = Case {
    subnets: &["192.168.0.0/24", "fd00::0/64"],
    gateways: &["192.168.0.1/24", "fd00::1/64"],
};
const THREE: Case = Case {
    subnets: &["192.168.0.0/24", "fd00::0/64", "2001:db8::0/64"],
    gateways: &["192.168.0.1/24", "fd00::1/64", "2001:db8::1/64"],
};

/// ADD, the reference's assertions, CHECK (>= 0.4.0), DEL, and nothing left.
fn add_check_del(version: &str, case: &Case, extra: Value) {
    let env = Env::new("add");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf(version, case.subnets, extra);
    let out = env.run("ADD", &ctr, "dummy-0", &conf);
    if is_legacy(version) && case.subnets.len() > 2 {
        let (_, msg) = error_of(&out);
        assert_eq!(
            msg,
            format!("CNI version {version} does not support more than 1 address per family")
        );
        env.assert_clean();
        // DEL succeeds with it (the reference's IPAM refuses it again, so a runtime could
        // never finish tearing the container down) and leaves nothing.
        env.del(&ctr, "dummy-0", &conf);
        env.assert_clean_with(&ctr);
        return;
    }
    let result = out.assert_success().json();
    assert_eq!(result["cniVersion"], version);
    assert_result_shape(&env, &ctr, version, &result, case);
    assert_kernel(&env, &ctr, case, &result);

    if !is_legacy(version) && version != "0.3.0" && version != "0.3.1" {
        let check = with_prev(&conf, &result);
        env.run("CHECK", &ctr, "dummy-0", &check).assert_success();
    }
    let del_conf = if is_legacy(version) {
        conf.clone()
    } else {
        with_prev(&conf, &result)
    };
    env.del(&ctr, "dummy-0", &del_conf);
    env.assert_clean_with(&ctr);
    // DEL twice is fine.
    env.del(&ctr, "dummy-0", &del_conf);
}

fn assert_result_shape(env: &Env, ctr: &NamedNetns, version: &str, result: &Value, case: &Case) {
    let ips = result_ips(result);
    assert_eq!(ips.len(), case.subnets.len(), "{result}");
    if is_legacy(version) {
        assert!(result.get("interfaces").is_none(), "{result}");
        let gw = &result["ip4"]["gateway"];
        if case.subnets[0].contains('.') {
            assert_eq!(gw, case.gateways[0].split('/').next().unwrap());
        }
        return;
    }
    let ifaces = result["interfaces"].as_array().unwrap();
    assert_eq!(ifaces.len(), 3, "{result}");
    assert_eq!(ifaces[0]["name"], BRIDGE);
    let br = env.link(BRIDGE).unwrap();
    assert_eq!(ifaces[0]["mac"], br["address"]);
    assert_eq!(ifaces[0]["mac"].as_str().unwrap().len(), 17);
    let host_veth = ifaces[1]["name"].as_str().unwrap();
    assert!(
        host_veth.starts_with("veth") && host_veth.len() == 12,
        "{host_veth}"
    );
    assert_eq!(ifaces[1]["mac"], env.link(host_veth).unwrap()["address"]);
    assert_eq!(ifaces[2]["name"], IFNAME);
    assert_eq!(ifaces[2]["sandbox"], ctr.path().to_str().unwrap());
    let ctr_link = link(ctr, IFNAME).unwrap();
    assert_eq!(ifaces[2]["mac"], ctr_link["address"]);
    for ip in result["ips"].as_array().unwrap() {
        assert_eq!(ip["interface"], 2, "{result}");
        let has_version = ip.get("version").is_some();
        assert_eq!(has_version, version.starts_with("0."), "{result}");
    }
    let defaults: Vec<&str> = result["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["dst"].as_str().unwrap())
        .collect();
    let want_v4 = case.subnets.iter().any(|s| s.contains('.'));
    let want_v6 = case.subnets.iter().any(|s| s.contains(':'));
    assert_eq!(defaults.contains(&"0.0.0.0/0"), want_v4, "{result}");
    assert_eq!(defaults.contains(&"::/0"), want_v6, "{result}");
}

fn assert_kernel(env: &Env, ctr: &NamedNetns, case: &Case, result: &Value) {
    let br = env.link(BRIDGE).unwrap();
    assert_eq!(br["linkinfo"]["info_kind"], "bridge");
    assert_eq!(br["linkinfo"]["info_data"]["vlan_filtering"], 0);
    assert_eq!(br["promiscuity"], 0);
    let on_bridge = global_addrs(&env.host, BRIDGE);
    for gw in case.gateways {
        assert!(
            on_bridge.contains(&gw.to_string()),
            "{gw} not in {on_bridge:?}"
        );
    }
    let links = env.links();
    assert_eq!(links.len(), 3, "lo, bridge, host veth: {links:?}");
    let veth = links
        .iter()
        .find(|l| l["ifname"].as_str().unwrap().starts_with("veth"))
        .unwrap();
    assert_eq!(veth["master"], BRIDGE);
    assert_eq!(veth["operstate"], "UP");
    assert_ne!(veth["address"], br["address"], "the bridge MAC is its own");
    assert_eq!(veth["linkinfo"]["info_slave_data"]["isolated"], false);
    assert_eq!(veth["linkinfo"]["info_slave_data"]["hairpin"], false);

    let ctr_link = link(ctr, IFNAME).unwrap();
    assert_eq!(ctr_link["linkinfo"]["info_kind"], "veth");
    assert!(oper_up_soon(ctr, IFNAME), "container end operationally up");
    let addrs = global_addrs(ctr, IFNAME);
    let mut want: Vec<String> = result_ips(result);
    want.sort();
    let mut got = addrs.clone();
    got.sort();
    assert_eq!(got, want);
    let v4_gw: Vec<&str> = case
        .gateways
        .iter()
        .filter(|g| g.contains('.'))
        .map(|g| g.split('/').next().unwrap())
        .collect();
    if !v4_gw.is_empty() {
        assert_eq!(default_gateways(ctr, "-4"), vec![v4_gw[0].to_string()]);
    }
    let v6_gw: Vec<&str> = case
        .gateways
        .iter()
        .filter(|g| g.contains(':'))
        .map(|g| g.split('/').next().unwrap())
        .collect();
    if !v6_gw.is_empty() {
        assert_eq!(default_gateways(ctr, "-6"), vec![v6_gw[0].to_string()]);
        // Settled: no address still tentative.
        let text = ctr.exec_in(&["ip", "-6", "addr", "show", "dev", IFNAME]);
        assert!(!text.contains("tentative"), "{text}");
    }
}

/// ADD waits for the host end to forward, as the reference does; the kernel reports the
/// container end's carrier asynchronously (linkwatch), so allow it a moment.
fn oper_up_soon(ns: &NamedNetns, name: &str) -> bool {
    (0..20).any(|_| {
        let up = link(ns, name).unwrap()["operstate"] == "UP";
        if !up {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        up
    })
}

/// [`add_check_del`] of `case` at every version, as the test `test`.
fn each_version(test: &str, case: &Case) {
    if !privileged(test) {
        return;
    }
    for v in VERSIONS {
        add_check_del(v, case, json!({}));
    }
}

#[test]
#[ignore = "needs root"]
fn add_check_del_ipv4_all_versions() {
    each_version("add_check_del_ipv4_all_versions", &V4);
}

#[test]
#[ignore = "needs root"]
fn add_check_del_ipv6_all_versions() {
    each_version("add_check_del_ipv6_all_versions", &V6);
}

#[test]
#[ignore = "needs root"]
fn add_check_del_dual_stack_all_versions() {
    each_version("add_check_del_dual_stack_all_versions", &DUAL);
}

#[test]
#[ignore = "needs root"]
fn three_subnets_all_versions() {
    each_version("three_subnets_all_versions", &THREE);
}

#[test]
#[ignore = "needs root"]
fn dns_from_config_replaces_ipam_dns() {
    if !privileged("dns_from_config_replaces_ipam_dns") {
        return;
    }
    for v in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let env = Env::new("dns");
        let ctr = NamedNetns::new("ctr");
        let dns = json!({"nameservers": ["192.0.2.53"], "search": ["example.com"]});
        let conf = env.conf(v, V4.subnets, json!({ "dns": dns }));
        let result = env.add(&ctr, "dummy-0", &conf);
        assert_eq!(result["dns"]["nameservers"], json!(["192.0.2.53"]));
        env.del(&ctr, "dummy-0", &conf);
        env.assert_clean();
    }
}

#[test]
#[ignore = "needs root"]
fn l2_all_versions() {
    if !privileged("l2_all_versions") {
        return;
    }
    for v in VERSIONS {
        let env = Env::new("l2");
        let ctr = NamedNetns::new("ctr");
        let conf = env.l2_conf(v, json!({}));
        let out = env.run("ADD", &ctr, "dummy-0", &conf);
        if is_legacy(v) {
            let (_, msg) = error_of(&out);
            assert_eq!(msg, "cannot convert: no valid IP addresses");
            env.assert_clean_with(&ctr);
            continue;
        }
        let result = out.assert_success().json();
        assert_eq!(result["interfaces"].as_array().unwrap().len(), 3);
        assert!(
            result
                .get("ips")
                .is_none_or(|i| i.as_array().unwrap().is_empty())
        );
        assert!(oper_up_soon(&ctr, IFNAME));
        assert!(global_addrs(&env.host, BRIDGE).is_empty());
        if v != "0.3.0" && v != "0.3.1" {
            // The reference fails this (IPAM CHECK with no type); we don't.
            env.run("CHECK", &ctr, "dummy-0", &with_prev(&conf, &result))
                .assert_success();
        }
        env.del(&ctr, "dummy-0", &conf);
        env.assert_clean_with(&ctr);
    }
}

#[test]
#[ignore = "needs root"]
fn vlan_configs_fail_cleanly_on_this_kernel() {
    if !privileged("vlan_configs_fail_cleanly_on_this_kernel") {
        return;
    }
    let extras = [
        json!({"vlan": 100}),
        json!({"vlanTrunk": [{"id": 101}, {"minID": 200, "maxID": 210}]}),
        json!({"vlan": 100, "vlanTrunk": [{"id": 101}]}),
        json!({"vlan": 100, "preserveDefaultVlan": true}),
    ];
    for extra in extras {
        for l3 in [false, true] {
            let env = Env::new("vlan");
            let ctr = NamedNetns::new("ctr");
            let conf = if l3 {
                env.conf("1.0.0", V4.subnets, extra.clone())
            } else {
                env.l2_conf("1.0.0", extra.clone())
            };
            let out = env.run("ADD", &ctr, "dummy-0", &conf);
            if out.success() {
                // A kernel with vlan_filtering: the result must be usable and DEL clean.
                env.del(&ctr, "dummy-0", &conf);
            } else {
                let (code, msg) = error_of(&out);
                assert_eq!(code, 999, "{msg}");
                assert!(msg.contains("vlan"), "{msg}");
            }
            env.assert_clean_with(&ctr);
        }
    }
}

#[test]
#[ignore = "needs root"]
fn existing_bridge_is_reused() {
    if !privileged("existing_bridge_is_reused") {
        return;
    }
    let env = Env::new("reuse");
    env.host
        .exec_in(&["ip", "link", "add", BRIDGE, "type", "bridge"]);
    let index = env.link(BRIDGE).unwrap()["ifindex"].clone();
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf("1.0.0", V4.subnets, json!({}));
    let result = env.add(&ctr, "dummy-0", &conf);
    let br = env.link(BRIDGE).unwrap();
    assert_eq!(br["ifindex"], index);
    // Its MAC, unpinned until our gateway went on, is reported and pinned as it is now.
    assert_eq!(result["interfaces"][0]["mac"], br["address"]);
    env.del(&ctr, "dummy-0", &conf);
    assert_eq!(env.link(BRIDGE).unwrap()["address"], br["address"]);
    env.assert_clean();
}

#[test]
#[ignore = "needs root"]
fn bridge_name_taken_by_another_kind() {
    if !privileged("bridge_name_taken_by_another_kind") {
        return;
    }
    let env = Env::new("notbr");
    env.host.exec_in(&[
        "ip", "link", "add", BRIDGE, "type", "veth", "peer", "name", "other0",
    ]);
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf("1.1.0", V4.subnets, json!({}));
    let (_, msg) = error_of(&env.run("ADD", &ctr, "dummy-0", &conf));
    assert_eq!(
        msg,
        format!(
            "failed to create bridge \"{BRIDGE}\": \"{BRIDGE}\" already exists but is not a bridge"
        )
    );
    let (code, msg) = error_of(&env.run("STATUS", &ctr, "dummy-0", &conf));
    assert_eq!(code, 50, "{msg}");
    assert_eq!(env.ip_files(), Vec::<String>::new());
    env.host.exec_in(&["ip", "link", "del", BRIDGE]);
    // L2: no IPAM to ask (the Go host-local predates STATUS).
    let l2 = env.l2_conf("1.1.0", json!({}));
    env.run("STATUS", &ctr, "dummy-0", &l2).assert_success();
}

#[test]
#[ignore = "needs root"]
fn deconfigures_an_unconfigured_bridge_with_del() {
    if !privileged("deconfigures_an_unconfigured_bridge_with_del") {
        return;
    }
    for v in VERSIONS {
        let env = Env::new("delnone");
        let ctr = NamedNetns::new("ctr");
        env.del(&ctr, "dummy-0", &env.conf(v, V4.subnets, json!({})));
        env.assert_clean();
    }
}

/// The reference's ensureAddr cases, driven through ADD: a bridge that already has an
/// address of the family (v4) or an overlapping IPv6 subnet.
#[test]
#[ignore = "needs root"]
fn force_address() {
    if !privileged("force_address") {
        return;
    }
    let cases = [
        ("10.0.0.1/8", "10.1.0.0/16", "10.1.0.1/16", true),
        ("2001:db8::1/48", "2001:db8::/64", "2001:db8::1/64", true),
        ("2001:db9::1/48", "2001:db8::/64", "2001:db8::1/64", false),
    ];
    for (existing, subnet, gw, conflicts) in cases {
        for force in [false, true] {
            let env = Env::new("force");
            env.host
                .exec_in(&["ip", "link", "add", BRIDGE, "type", "bridge"]);
            env.host
                .exec_in(&["ip", "addr", "add", existing, "dev", BRIDGE]);
            let ctr = NamedNetns::new("ctr");
            let conf = env.conf("1.0.0", &[subnet], json!({ "forceAddress": force }));
            let out = env.run("ADD", &ctr, "dummy-0", &conf);
            let addrs = global_addrs(&env.host, BRIDGE);
            if conflicts && !force {
                let (_, msg) = error_of(&out);
                assert_eq!(
                    msg,
                    format!(
                        "failed to set bridge addr: \"{BRIDGE}\" already has an IP address different from {gw}"
                    )
                );
                assert_eq!(addrs, vec![existing.to_string()]);
                // The failed ADD released its IP and removed its veth.
                env.assert_clean_with(&ctr);
                continue;
            }
            out.assert_success();
            assert!(addrs.contains(&gw.to_string()), "{addrs:?}");
            assert_eq!(
                addrs.contains(&existing.to_string()),
                !conflicts,
                "{addrs:?}"
            );
            env.del(&ctr, "dummy-0", &conf);
            env.assert_clean();
        }
    }
}

#[test]
#[ignore = "needs root"]
fn promisc_mode() {
    if !privileged("promisc_mode") {
        return;
    }
    let env = Env::new("promisc");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf("1.0.0", V4.subnets, json!({"promiscMode": true}));
    let result = env.add(&ctr, "dummy-0", &conf);
    let br = env.link(BRIDGE).unwrap();
    assert!(
        br["flags"].as_array().unwrap().contains(&json!("PROMISC")),
        "{br}"
    );
    env.run("CHECK", &ctr, "dummy-0", &with_prev(&conf, &result))
        .assert_success();
    // CHECK notices a bridge whose promiscuous mode differs from the config.
    env.host
        .exec_in(&["ip", "link", "set", BRIDGE, "promisc", "off"]);
    let (_, msg) = error_of(&env.run("CHECK", &ctr, "dummy-0", &with_prev(&conf, &result)));
    assert!(msg.contains("Promisc"), "{msg}");
    env.del(&ctr, "dummy-0", &conf);
    env.assert_clean();
}

#[test]
#[ignore = "needs root"]
fn stable_bridge_mac() {
    if !privileged("stable_bridge_mac") {
        return;
    }
    for case in [&V4, &V6] {
        let env = Env::new("mac");
        let conf = env.conf("1.0.0", case.subnets, json!({}));
        let c1 = NamedNetns::new("ctr");
        let r1 = env.add(&c1, "c1", &conf);
        let mac = env.link(BRIDGE).unwrap()["address"].clone();
        assert_eq!(r1["interfaces"][0]["mac"], mac);
        let c2 = NamedNetns::new("ctr");
        let r2 = env.add(&c2, "c2", &conf);
        assert_eq!(r2["interfaces"][0]["mac"], mac);
        env.del(&c1, "c1", &conf);
        env.del(&c2, "c2", &conf);
        assert_eq!(env.link(BRIDGE).unwrap()["address"], mac);
        env.assert_clean();
    }
}

#[test]
#[ignore = "needs root"]
fn explicit_mac_precedence() {
    if !privileged("explicit_mac_precedence") {
        return;
    }
    let want = "02:00:00:00:00:00";
    let cases = [
        (json!({}), format!("IgnoreUnknown=1;MAC={want}")),
        (
            json!({"args": {"cni": {"mac": want}}}),
            "IgnoreUnknown=1;MAC=02:00:00:00:00:09".to_string(),
        ),
        (
            json!({"runtimeConfig": {"mac": want}, "args": {"cni": {"mac": "02:00:00:00:00:08"}}}),
            "IgnoreUnknown=1;MAC=02:00:00:00:00:09".to_string(),
        ),
    ];
    for (extra, cni_args) in cases {
        let env = Env::new("exmac");
        let ctr = NamedNetns::new("ctr");
        let conf = env.conf("1.0.0", V4.subnets, extra);
        let out = env
            .plugin("ADD", ctr.path().to_str().unwrap(), "dummy-0", &conf)
            .args(&cni_args)
            .run_in(&env.host);
        let result = out.assert_success().json();
        assert_eq!(result["interfaces"][2]["mac"], want);
        assert_eq!(link(&ctr, IFNAME).unwrap()["address"], want);
        env.plugin("DEL", ctr.path().to_str().unwrap(), "dummy-0", &conf)
            .args(&cni_args)
            .run_in(&env.host)
            .assert_success();
        env.assert_clean();
    }
}

#[test]
#[ignore = "needs root"]
fn hairpin_and_port_isolation() {
    if !privileged("hairpin_and_port_isolation") {
        return;
    }
    for (hairpin, isolated) in [(true, false), (false, true), (true, true)] {
        let env = Env::new("port");
        let ctr = NamedNetns::new("ctr");
        let conf = env.conf(
            "1.1.0",
            V4.subnets,
            json!({"hairpinMode": hairpin, "portIsolation": isolated}),
        );
        let result = env.add(&ctr, "dummy-0", &conf);
        let veth = env
            .link(result["interfaces"][1]["name"].as_str().unwrap())
            .unwrap();
        let port = &veth["linkinfo"]["info_slave_data"];
        assert_eq!(port["hairpin"], hairpin, "{port}");
        assert_eq!(port["isolated"], isolated, "{port}");
        env.run("CHECK", &ctr, "dummy-0", &with_prev(&conf, &result))
            .assert_success();
        if hairpin {
            // CHECK verifies hairpin mode, which the reference does not.
            let name = veth["ifname"].as_str().unwrap();
            env.host.exec_in(&[
                "ip",
                "link",
                "set",
                name,
                "type",
                "bridge_slave",
                "hairpin",
                "off",
            ]);
            let (_, msg) = error_of(&env.run("CHECK", &ctr, "dummy-0", &with_prev(&conf, &result)));
            assert!(msg.contains("hairpin"), "{msg}");
        }
        env.del(&ctr, "dummy-0", &conf);
        env.assert_clean();
    }
}

#[test]
#[ignore = "needs root"]
fn disable_container_interface() {
    if !privileged("disable_container_interface") {
        return;
    }
    let env = Env::new("dci");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf(
        "1.0.0",
        V4.subnets,
        json!({"disableContainerInterface": true}),
    );
    let (code, msg) = error_of(&env.run("ADD", &ctr, "dummy-0", &conf));
    assert_eq!(
        (code, msg.as_str()),
        (
            7,
            "cannot use IPAM when DisableContainerInterface flag is set"
        )
    );
    env.assert_clean();
    let conf = env.l2_conf("1.0.0", json!({"disableContainerInterface": true}));
    let result = env.add(&ctr, "dummy-0", &conf);
    assert_ne!(link(&ctr, IFNAME).unwrap()["operstate"], "UP");
    env.run("CHECK", &ctr, "dummy-0", &with_prev(&conf, &result))
        .assert_success();
    env.del(&ctr, "dummy-0", &conf);
    env.assert_clean();
}

#[test]
#[ignore = "needs root"]
fn ipmasq_each_backend() {
    if !privileged("ipmasq_each_backend") {
        return;
    }
    for backend in [None, Some("iptables"), Some("nftables")] {
        for v in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            let env = Env::new("masq");
            let ctr = NamedNetns::new("ctr");
            let mut extra = json!({"ipMasq": true});
            if let Some(b) = backend {
                extra["ipMasqBackend"] = json!(b);
            }
            let conf = env.conf(v, DUAL.subnets, extra);
            let result = env.add(&ctr, "dummy-0", &conf);
            let ips = result_ips(&result);
            if backend == Some("nftables") {
                assert!(env.cni_nat_rules().is_empty());
                let nft = env.host.exec_in(&[
                    "nft",
                    "list",
                    "chain",
                    "inet",
                    "cni_plugins_masquerade",
                    "masq_checks",
                ]);
                let rules: Vec<&str> = nft
                    .lines()
                    .filter(|l| l.contains("masquerade comment"))
                    .collect();
                assert_eq!(rules.len(), 2, "{nft}");
            } else {
                let rules = env.cni_nat_rules().join("\n");
                for ip in &ips {
                    let bare = ip.split('/').next().unwrap();
                    assert!(
                        rules.contains(&format!("-A POSTROUTING -s {bare}")),
                        "{rules}"
                    );
                }
                let id = format!("name: \\\"{NETWORK}\\\" id: \\\"dummy-0\\\"");
                assert!(rules.contains(&id), "{rules}");
            }
            if v != "0.3.1" {
                env.run("CHECK", &ctr, "dummy-0", &with_prev(&conf, &result))
                    .assert_success();
            }
            env.del(&ctr, "dummy-0", &with_prev(&conf, &result));
            env.assert_clean();
        }
    }
}

#[test]
#[ignore = "needs root"]
fn check_notices_missing_masquerade_rules() {
    if !privileged("check_notices_missing_masquerade_rules") {
        return;
    }
    let env = Env::new("chkmasq");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf(
        "1.0.0",
        V4.subnets,
        json!({"ipMasq": true, "ipMasqBackend": "iptables"}),
    );
    let result = env.add(&ctr, "dummy-0", &conf);
    let prev = with_prev(&conf, &result);
    env.run("CHECK", &ctr, "dummy-0", &prev).assert_success();
    env.host
        .exec_in(&["iptables", "-t", "nat", "-F", "POSTROUTING"]);
    let (_, msg) = error_of(&env.run("CHECK", &ctr, "dummy-0", &prev));
    assert!(msg.contains("masquerade"), "{msg}");
    env.del(&ctr, "dummy-0", &prev);
    env.assert_clean();
}

#[test]
#[ignore = "needs root"]
fn macspoofchk_rules() {
    if !privileged("macspoofchk_rules") {
        return;
    }
    let env = Env::new("spoof");
    let ctr = NamedNetns::new("ctr");
    let conf = env.conf("1.0.0", V4.subnets, json!({"macspoofchk": true}));
    let result = env.add(&ctr, "dummy-0", &conf);
    let nft = env.nft_ruleset();
    let comment = "macspoofchk-dummy-0-eth0";
    assert_eq!(nft.matches(comment).count(), 4, "{nft}");
    let mac = result["interfaces"][2]["mac"].as_str().unwrap();
    assert!(nft.contains(&format!("ether saddr {mac} return")), "{nft}");
    let host_veth = result["interfaces"][1]["name"].as_str().unwrap();
    assert!(nft.contains(&format!("iifname \"{host_veth}\"")), "{nft}");
    env.run("CHECK", &ctr, "dummy-0", &with_prev(&conf, &result))
        .assert_success();
    env.del(&ctr, "dummy-0", &conf);
    env.assert_clean();
    assert!(!env.nft_ruleset().contains("cni-br-iface-dummy-0"));
}

#[test]
#[ignore = "needs root"]
fn gc_removes_rules_of_invalid_attachments() {
    if !privileged("gc_removes_rules_of_invalid_attachments") {
        return;
    }
    let env = Env::new("gc");
    let mut keep = Vec::new();
    let mut results = Vec::new();
    let ctrs: Vec<NamedNetns> = (0..4).map(|_| NamedNetns::new("ctr")).collect();
    for (i, ctr) in ctrs.iter().enumerate() {
        let backend = if i % 2 == 0 { "iptables" } else { "nftables" };
        let conf = env.conf(
            "1.1.0",
            V4.subnets,
            json!({"ipMasq": true, "ipMasqBackend": backend, "macspoofchk": true}),
        );
        results.push(env.add(ctr, &format!("c{i}"), &conf));
        if i < 2 {
            keep.push(json!({"containerID": format!("c{i}"), "ifname": IFNAME}));
        }
    }
    let gc_conf = env.conf(
        "1.1.0",
        V4.subnets,
        json!({"cni.dev/valid-attachments": keep}),
    );
    env.plugin("GC", "", "", &gc_conf)
        .run_in(&env.host)
        .assert_success();
    let nat = env.cni_nat_rules().join("\n");
    let nft = env.nft_ruleset();
    assert!(nft.contains("id: c1") && !nft.contains("id: c3"), "{nft}");
    let chain = |id: &str| hostnet::firewall::names::iptables_chain(NETWORK, id);
    assert!(
        nat.contains(&chain("c0")) && !nat.contains(&chain("c2")),
        "{nat}"
    );
    // The spoof-check chains of removed attachments go only when their veth is gone.
    for (i, ctr) in ctrs.iter().enumerate() {
        let conf = env.conf(
            "1.1.0",
            V4.subnets,
            json!({"ipMasq": true, "macspoofchk": true}),
        );
        env.del(ctr, &format!("c{i}"), &with_prev(&conf, &results[i]));
    }
    env.assert_clean();
}
