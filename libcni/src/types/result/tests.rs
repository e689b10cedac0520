use super::*;
use crate::version::SUPPORTED;

/// A dual-stack 1.1.0 result with every optional field set.
fn full() -> CniResult {
    CniResult {
        cni_version: "1.1.0".into(),
        interfaces: vec![
            Interface {
                name: "cni0".into(),
                mac: "00:11:22:33:44:55".into(),
                ..Default::default()
            },
            Interface {
                name: "eth0".into(),
                mac: "00:11:22:33:44:66".into(),
                mtu: 1400,
                sandbox: "/var/run/netns/x".into(),
                socket_path: "/tmp/sock".into(),
                pci_id: "0000:00:01.0".into(),
            },
        ],
        ips: vec![
            IpConfig {
                interface: Some(1),
                address: "10.1.0.5/16".parse().unwrap(),
                gateway: Some("10.1.0.1".parse().unwrap()),
            },
            IpConfig {
                interface: Some(1),
                address: "10.2.0.5/16".parse().unwrap(),
                gateway: None,
            },
            IpConfig {
                interface: Some(1),
                address: "2001:db8::5/64".parse().unwrap(),
                gateway: Some("2001:db8::1".parse().unwrap()),
            },
        ],
        routes: vec![
            Route {
                mtu: 1400,
                advmss: 1360,
                priority: 100,
                table: Some(254),
                scope: Some(0),
                ..Route::new(
                    "0.0.0.0/0".parse().unwrap(),
                    Some("10.1.0.1".parse().unwrap()),
                )
            },
            Route::new("::/0".parse().unwrap(), None),
        ],
        dns: Dns {
            nameservers: vec!["1.1.1.1".into()],
            domain: "example.com".into(),
            search: vec!["a.example.com".into()],
            options: vec!["ndots:2".into()],
        },
    }
}

#[test]
fn renders_1_x_with_all_fields() {
    let v = full().to_value("1.1.0").unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "cniVersion": "1.1.0",
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55"},
                {"name": "eth0", "mac": "00:11:22:33:44:66", "mtu": 1400, "sandbox": "/var/run/netns/x",
                 "socketPath": "/tmp/sock", "pciID": "0000:00:01.0"}
            ],
            "ips": [
                {"interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                {"interface": 1, "address": "10.2.0.5/16"},
                {"interface": 1, "address": "2001:db8::5/64", "gateway": "2001:db8::1"}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1400, "advmss": 1360, "priority": 100, "table": 254, "scope": 0},
                {"dst": "::/0"}
            ],
            "dns": {"nameservers": ["1.1.1.1"], "domain": "example.com", "search": ["a.example.com"], "options": ["ndots:2"]}
        })
    );
    // Key order is part of the wire format Go prints.
    let s = full().to_json("1.0.0").unwrap();
    assert!(s.starts_with("{\n    \"cniVersion\": \"1.0.0\",\n    \"interfaces\": ["));
    assert!(s.contains("\"interface\": 1,\n            \"address\""));
}

#[test]
fn dns_omitted_only_for_1_x() {
    let mut r = full();
    r.dns = Dns::default();
    for v in SUPPORTED {
        let out = r.to_value(v).unwrap();
        let has_dns = out.get("dns").is_some();
        assert_eq!(has_dns, !v.starts_with('1'), "{v}");
        if has_dns {
            assert_eq!(out["dns"], serde_json::json!({}));
        }
    }
}

#[test]
fn down_to_0_4_adds_version_and_drops_interface_extras() {
    for v in ["0.3.0", "0.3.1", "0.4.0"] {
        let out = full().to_value(v).unwrap();
        assert_eq!(out["cniVersion"], *v);
        assert_eq!(
            out["ips"][0],
            serde_json::json!({"version": "4", "interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"})
        );
        assert_eq!(out["ips"][2]["version"], "6");
        assert_eq!(
            out["interfaces"][1],
            serde_json::json!({"name": "eth0", "mac": "00:11:22:33:44:66", "sandbox": "/var/run/netns/x"})
        );
        // Routes are copied whole, as Go shares one route type.
        assert_eq!(out["routes"][0]["advmss"], 1360);
        let first_key = out.as_object().unwrap().keys().next().unwrap().clone();
        assert_eq!(first_key, "cniVersion");
    }
}

#[test]
fn down_to_0_2_keeps_first_ip_per_family_and_splits_routes() {
    for v in ["0.1.0", "0.2.0"] {
        let out = full().to_value(v).unwrap();
        assert_eq!(
            out,
            serde_json::json!({
                "cniVersion": v,
                "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]},
                "ip6": {"ip": "2001:db8::5/64", "gateway": "2001:db8::1", "routes": [{"dst": "::/0"}]},
                "dns": {"nameservers": ["1.1.1.1"], "domain": "example.com", "search": ["a.example.com"], "options": ["ndots:2"]}
            })
        );
    }
}

#[test]
fn down_to_0_2_without_ips_fails() {
    let r = CniResult {
        interfaces: full().interfaces,
        ..Default::default()
    };
    for v in ["0.1.0", "0.2.0"] {
        assert_eq!(
            r.to_value(v).unwrap_err().msg,
            "cannot convert: no valid IP addresses"
        );
    }
    // Routes of a family without an IP are dropped.
    let mut r = full();
    r.ips.retain(|i| i.address.is_ipv4());
    let out = r.to_value("0.2.0").unwrap();
    assert!(out.get("ip6").is_none());
    assert_eq!(out["ip4"]["routes"].as_array().unwrap().len(), 1);
}

#[test]
fn up_from_0_2_builds_ips_and_concatenates_routes() {
    let input = serde_json::json!({
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
        "ip6": {"ip": "2001:db8::5/64", "routes": [{"dst": "::/0", "gw": "2001:db8::1"}]},
        "dns": {"nameservers": ["8.8.8.8"]}
    });
    let r = CniResult::parse(&input, "").unwrap();
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let out = r.to_value(v).unwrap();
        let ver = |s: &str| {
            if v.starts_with('1') {
                None
            } else {
                Some(s.to_string())
            }
        };
        let ips = out["ips"].as_array().unwrap();
        assert_eq!(ips.len(), 2);
        assert_eq!(ips[0]["address"], "10.1.0.5/16");
        assert_eq!(ips[0]["gateway"], "10.1.0.1");
        assert_eq!(
            ips[0]
                .get("version")
                .and_then(|x| x.as_str())
                .map(String::from),
            ver("4")
        );
        assert!(ips[0].get("interface").is_none());
        assert_eq!(ips[1]["address"], "2001:db8::5/64");
        assert_eq!(
            out["routes"],
            serde_json::json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "2001:db8::1"}])
        );
        assert!(out.get("interfaces").is_none());
        assert_eq!(out["dns"]["nameservers"][0], "8.8.8.8");
    }
}

#[test]
fn lossless_between_0_3_and_0_4_and_within_1_x_and_0_x() {
    let base = full();
    for (a, b) in [
        ("0.3.0", "0.4.0"),
        ("0.4.0", "0.3.1"),
        ("0.3.1", "0.3.0"),
        ("1.0.0", "1.1.0"),
        ("1.1.0", "1.0.0"),
        ("0.1.0", "0.2.0"),
        ("0.2.0", "0.1.0"),
    ] {
        let at_a = base.convert_to(a).unwrap();
        let at_b = at_a.convert_to(b).unwrap();
        let mut expect = at_a.clone();
        expect.cni_version = b.into();
        assert_eq!(at_b, expect, "{a} -> {b}");
        assert_eq!(at_b.to_value(a).unwrap(), at_a.to_value(a).unwrap());
    }
}

#[test]
fn every_pair_of_versions_converts() {
    for from in SUPPORTED {
        let at_from = full().convert_to(from).unwrap();
        for to in SUPPORTED {
            let out = at_from.convert_to(to).unwrap();
            assert_eq!(out.cni_version, *to);
            // IPv4 and IPv6 survive every conversion.
            assert!(
                out.ips
                    .iter()
                    .any(|i| i.address.to_string() == "10.1.0.5/16"),
                "{from}->{to}"
            );
            assert!(
                out.ips
                    .iter()
                    .any(|i| i.address.to_string() == "2001:db8::5/64"),
                "{from}->{to}"
            );
        }
    }
}

#[test]
fn parse_stamps_default_version_and_rejects_garbage() {
    let r = CniResult::parse(
        &serde_json::json!({"ips": [{"address": "10.0.0.2/24"}]}),
        "1.0.0",
    )
    .unwrap();
    assert_eq!(r.cni_version, "1.0.0");
    assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
    let r = CniResult::parse(&serde_json::json!({"ip4": {"ip": "10.0.0.2/24"}}), "").unwrap();
    assert_eq!(r.ips.len(), 1);
    assert!(CniResult::parse(&serde_json::json!([1]), "1.0.0").is_err());
    assert!(
        CniResult::parse(
            &serde_json::json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2"}]}),
            ""
        )
        .is_err()
    );
    assert!(CniResult::parse(&serde_json::json!({"cniVersion": "7.0.0"}), "").is_err());
    assert_eq!(full().to_value("2.0.0").unwrap_err().code, 1);
}
