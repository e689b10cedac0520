//! The reference host-local scenarios (host_local_test.go) against our binary, for every
//! spec version, plus config refusals that must leave the disk untouched.

mod host_local_support;

use host_local_support::*;
use serde_json::{Value, json};

fn dual_stack(net: &Net, version: &str) -> String {
    net.conf(
        version,
        json!({
            "ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "10.2.2.0/24"}], [{"subnet": "2001:db8:1::0/64"}]],
            "routes": [
                {"dst": "0.0.0.0/0"}, {"dst": "::/0"},
                {"dst": "192.168.0.0/16", "gw": "1.1.1.1"},
                {"dst": "2001:db8:2::0/64", "gw": "2001:db8:3::1"}
            ]
        }),
        json!({}),
    )
}

#[test]
fn add_del_dual_stack_every_version() {
    for v in VERSIONS {
        let net = Net::new("hl-dual");
        let conf = dual_stack(&net, v);
        let out = call(&ours(), "ADD", "dummy", "eth0", &conf);
        let r = out.assert_success().json();
        assert!(
            !out.stderr_str()
                .contains("Error retrieving last reserved ip")
        );
        assert_eq!(r["cniVersion"], v);
        match v {
            "0.1.0" | "0.2.0" => {
                assert_eq!(r["ip4"]["ip"], "10.1.2.2/24");
                assert_eq!(r["ip4"]["gateway"], "10.1.2.1");
                assert_eq!(
                    r["ip4"]["routes"],
                    json!([{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "1.1.1.1"}])
                );
                assert_eq!(r["ip6"]["ip"], "2001:db8:1::2/64");
                assert_eq!(r["ip6"]["gateway"], "2001:db8:1::1");
                assert_eq!(r["dns"], json!({}));
            }
            _ => {
                let v1 = v.starts_with('1');
                let ip = |ver: &str, addr: &str, gw: &str| {
                    if v1 {
                        json!({"address": addr, "gateway": gw})
                    } else {
                        json!({"version": ver, "address": addr, "gateway": gw})
                    }
                };
                assert_eq!(
                    r["ips"],
                    json!([
                        ip("4", "10.1.2.2/24", "10.1.2.1"),
                        ip("6", "2001:db8:1::2/64", "2001:db8:1::1")
                    ]),
                    "{v}"
                );
                assert_eq!(r["routes"].as_array().unwrap().len(), 4);
                assert_eq!(
                    r["routes"][3],
                    json!({"dst": "2001:db8:2::/64", "gw": "2001:db8:3::1"})
                );
                assert!(r.get("interfaces").is_none());
                assert_eq!(r.get("dns").is_some(), !v1, "dns is {{}} below 1.0.0 only");
            }
        }
        let leases = net.leases();
        assert_eq!(leases["10.1.2.2"], "dummy\r\neth0");
        assert_eq!(leases["2001:db8:1::2"], "dummy\r\neth0");
        let read = |f: &str| std::fs::read_to_string(net.store().join(f)).unwrap();
        assert_eq!(read("last_reserved_ip.0"), "10.1.2.2");
        assert_eq!(read("last_reserved_ip.1"), "2001:db8:1::2");
        if v >= "0.4.0" {
            call(&ours(), "CHECK", "dummy", "eth0", &conf).assert_success();
        }
        call(&ours(), "DEL", "dummy", "eth0", &conf).assert_success();
        assert!(net.leases().is_empty(), "{v}: {:?}", net.names());
        assert!(net.is_empty_store(), "{:?}", net.names());
        if v >= "0.4.0" {
            let e = call(&ours(), "CHECK", "dummy", "eth0", &conf).assert_failure();
            assert_eq!(
                e["msg"],
                "host-local: Failed to find address added by container dummy"
            );
        }
    }
}

#[test]
fn two_ifnames_of_one_container_are_separate() {
    let net = Net::new("hl-ifnames");
    let conf = net.simple("1.0.0", "10.1.2.0/24");
    assert_eq!(
        first_ip(
            &call(&ours(), "ADD", "dummy", "eth0", &conf)
                .assert_success()
                .json()
        ),
        "10.1.2.2"
    );
    assert_eq!(
        first_ip(
            &call(&ours(), "ADD", "dummy", "eth1", &conf)
                .assert_success()
                .json()
        ),
        "10.1.2.3"
    );
    assert_eq!(net.leases()["10.1.2.3"], "dummy\r\neth1");
    call(&ours(), "DEL", "dummy", "eth0", &conf).assert_success();
    assert_eq!(net.leases().keys().collect::<Vec<_>>(), ["10.1.2.3"]);
}

#[test]
fn repeated_add_is_refused() {
    for v in VERSIONS {
        let net = Net::new("hl-repeat");
        let conf = net.simple(v, "10.1.2.0/24");
        assert_eq!(add_ok(&ours(), "dummy", &conf), "10.1.2.2");
        let e = call(&ours(), "ADD", "dummy", "eth0", &conf).assert_failure();
        assert_eq!(
            e["msg"],
            "failed to allocate for range 0: 10.1.2.2 has been allocated to dummy, duplicate allocation is not allowed"
        );
        assert_eq!(add_ok(&ours(), "other", &conf), "10.1.2.3");
        call(&ours(), "ADD", "dummy", "eth0", &conf).assert_failure();
        assert_eq!(net.leases().len(), 2);
    }
}

#[test]
fn del_of_legacy_and_unknown_containers() {
    let net = Net::new("hl-legacy");
    let conf = net.simple("0.3.1", "10.1.2.0/24");
    std::fs::create_dir_all(net.store()).unwrap();
    std::fs::write(net.store().join("10.1.2.2"), "dummy").unwrap();
    call(&ours(), "DEL", "unknown", "eth0", &conf).assert_success();
    assert_eq!(net.leases().len(), 1);
    call(&ours(), "DEL", "dummy", "eth0", &conf).assert_success();
    assert!(net.leases().is_empty());
    // DEL with no netns at all, on a store that was never created
    let fresh = Net::new("hl-nonetns");
    let out = plugin(&ours(), "DEL", &fresh.simple("1.0.0", "10.1.2.0/24"))
        .container_id("c")
        .ifname("eth0")
        .run();
    out.assert_success();
    assert!(!fresh.store().exists());
}

#[test]
fn requested_addresses() {
    for v in VERSIONS {
        let net = Net::new("hl-req");
        // args.cni.ips
        let conf = net.conf(
            v,
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}]]}),
            json!({"args": {"cni": {"ips": ["10.1.2.88"]}}}),
        );
        assert_eq!(add_ok(&ours(), "c1", &conf), "10.1.2.88");
        // CNI_ARGS IP=, and the same address again is refused
        let plain = net.simple(v, "10.1.2.0/24");
        let out = call_args(
            &ours(),
            "ADD",
            "c2",
            "eth0",
            &plain,
            "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.2.77",
        );
        assert_eq!(first_ip(&out.assert_success().json()), "10.1.2.77");
        let e = call_args(&ours(), "ADD", "c3", "eth0", &plain, "IP=10.1.2.77").assert_failure();
        assert_eq!(
            e["msg"],
            "failed to allocate for range 0: requested IP address 10.1.2.77 is not available in range set 10.1.2.1-10.1.2.254"
        );
        let e = call_args(&ours(), "ADD", "c3", "eth0", &plain, "IP=10.1.2.1").assert_failure();
        assert_eq!(
            e["msg"],
            "failed to allocate for range 0: requested ip 10.1.2.1 is subnet's gateway"
        );
        // two requests in one set: the second cannot be served
        let conf = net.conf(
            v,
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}]]}),
            json!({"args": {"cni": {"ips": ["10.1.2.99", "10.1.2.100"]}}}),
        );
        let e = call(&ours(), "ADD", "c4", "eth0", &conf).assert_failure();
        assert_eq!(e["msg"], "failed to allocate all requested IPs: 10.1.2.100");
        assert!(!net.leases().contains_key("10.1.2.99"), "rolled back");
    }
}

#[test]
fn requested_addresses_in_several_sets() {
    for v in VERSIONS {
        let net = Net::new("hl-req2");
        let conf = net.conf(
            v,
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.3.0/24"}]]}),
            json!({"args": {"cni": {"ips": ["10.1.2.88", "10.1.3.77"]}}}),
        );
        let out = call(&ours(), "ADD", "c", "eth0", &conf);
        if v < "0.3.0" {
            let e = out.assert_failure();
            assert_eq!(e["code"], 2);
            assert_eq!(
                e["msg"],
                format!("CNI version {v} does not support more than 1 address per family")
            );
            assert!(!net.data_dir().exists(), "config errors touch nothing");
            continue;
        }
        let r = out.assert_success().json();
        assert_eq!(r["ips"][0]["address"], "10.1.2.88/24");
        assert_eq!(r["ips"][1]["address"], "10.1.3.77/24");
        // a v4 request in the second range of a set, plus a v6 request
        let net = Net::new("hl-req3");
        let conf = net.conf(
            v,
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "10.1.3.0/24"}], [{"subnet": "2001:db8:1::/64"}]]}),
            json!({"args": {"cni": {"ips": ["10.1.3.77", "2001:db8:1::999"]}}}),
        );
        let r = call(&ours(), "ADD", "c", "eth0", &conf)
            .assert_success()
            .json();
        assert_eq!(r["ips"][0]["address"], "10.1.3.77/24");
        assert_eq!(r["ips"][0]["gateway"], "10.1.3.1");
        assert_eq!(r["ips"][1]["address"], "2001:db8:1::999/64");
    }
}

#[test]
fn resolv_conf_becomes_dns() {
    let net = Net::new("hl-dns");
    let rc = net.tmp.join("resolv.conf");
    std::fs::write(&rc, "# c\nnameserver 10.1.2.123\ndomain example.com\nsearch a.example b.example\noptions ndots:5\n").unwrap();
    let conf = net.conf(
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}]], "resolvConf": rc}),
        json!({}),
    );
    let r = call(&ours(), "ADD", "c", "eth0", &conf)
        .assert_success()
        .json();
    assert_eq!(
        r["dns"],
        json!({"nameservers": ["10.1.2.123"], "domain": "example.com", "search": ["a.example", "b.example"], "options": ["ndots:5"]})
    );
    let missing = net.conf(
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}]], "resolvConf": net.tmp.join("nope")}),
        json!({}),
    );
    let e = call(&ours(), "ADD", "c2", "eth0", &missing).assert_failure();
    assert_eq!(e["code"], 7);
}

#[test]
fn bad_configs_are_code_7_and_touch_nothing() {
    let net = Net::new("hl-bad");
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"ranges": [[{"subnet": "10.1.2.5/24"}]]}),
            "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 10.1.2.0",
        ),
        (
            json!({"subnet": "10.1.2.0/31"}),
            "invalid range set 0: Network 10.1.2.0/31 too small to allocate from",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.3.1"}]]}),
            "invalid range set 0: RangeStart 10.1.3.1 not in network 10.1.2.0/24",
        ),
        (
            // the reference takes it, hands out .255 and then 10.1.3.0, 10.1.3.1, ...
            json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.255"}]]}),
            "invalid range set 0: RangeStart 10.1.2.255 not in network 10.1.2.0/24",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeEnd": "10.1.3.1"}]]}),
            "invalid range set 0: RangeEnd 10.1.3.1 not in network 10.1.2.0/24",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "10.1.2.0/25"}]]}),
            "invalid range set 0: subnets 10.1.2.1-10.1.2.254 and 10.1.2.1-10.1.2.126 overlap",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.0.0/16"}]]}),
            "range set 0 overlaps with 1",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "2001:db8::/64"}]]}),
            "invalid range set 0: mixed address families",
        ),
        (json!({}), "no IP ranges specified"),
        (
            json!({"subnet": "10.1.2.0/24", "dataDir": "/tmp/../etc"}),
            "dataDir \"/tmp/../etc\" must be an absolute path without '..' components",
        ),
    ];
    for (ipam, msg) in cases {
        let conf = net.conf("1.0.0", ipam, json!({}));
        let e = call(&ours(), "ADD", "c", "eth0", &conf).assert_failure();
        assert_eq!(
            (e["code"].as_u64(), e["msg"].as_str()),
            (Some(7), Some(msg))
        );
    }
    let e = call(
        &ours(),
        "ADD",
        "c",
        "eth0",
        r#"{"cniVersion":"1.0.0","name":"mynet","type":"bridge"}"#,
    )
    .assert_failure();
    assert_eq!(e["msg"], "IPAM config missing 'ipam' key");
    assert!(
        !net.data_dir().exists(),
        "nothing written: {:?}",
        net.names()
    );
}

/// A store that cannot be opened is an error for every verb that needs it (code 5, the
/// path named), never a silent success, and is left as it is.
#[test]
fn every_verb_fails_on_a_store_that_is_not_a_directory() {
    let net = Net::new("hl-notdir");
    let conf = net.conf(
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}]]}),
        json!({"cni.dev/valid-attachments": []}),
    );
    std::fs::create_dir_all(net.data_dir()).unwrap();
    std::fs::write(net.store(), "not a dir").unwrap();
    let store = net.store().display().to_string();
    for cmd in ["DEL", "CHECK", "ADD", "GC"] {
        let out = if cmd == "GC" {
            plugin(&ours(), cmd, &conf).run()
        } else {
            call(&ours(), cmd, "c", "eth0", &conf)
        };
        let e = out.assert_failure();
        assert_eq!(e["code"], 5, "{cmd}: {e}");
        assert!(e["msg"].as_str().unwrap().contains(&store), "{cmd}: {e}");
    }
    assert_eq!(std::fs::read_to_string(net.store()).unwrap(), "not a dir");
}
