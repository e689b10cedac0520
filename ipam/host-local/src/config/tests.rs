//! Scenarios of the reference `config_test.go`, plus our own path rules.

use super::*;

fn ipa(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn conf(ipam: &str) -> String {
    format!(
        r#"{{"cniVersion":"0.3.1","name":"mynet","type":"ipvlan","master":"foo0","ipam":{ipam}}}"#
    )
}

/// [`super::load`] at the version skel would hand the verb for this config.
fn load(stdin: &[u8], args: &str) -> Result<IpamConfig, ConfigError> {
    let written = libcni::types::NetConf::parse(stdin)
        .map(|n| n.cni_version)
        .unwrap_or_default();
    super::load(stdin, args, Version::parse(&written).unwrap_or_default())
}

fn load_ok(json: &str, args: &str) -> IpamConfig {
    load(json.as_bytes(), args).unwrap()
}

fn load_err(json: &str, args: &str) -> String {
    load(json.as_bytes(), args).unwrap_err().to_string()
}

fn summary(c: &IpamConfig) -> Vec<Vec<String>> {
    c.ranges
        .iter()
        .map(|s| {
            s.ranges()
                .iter()
                .map(|r| format!("{} {} gw {}", r.subnet, r, r.gateway))
                .collect()
        })
        .collect()
}

#[test]
fn old_style_config() {
    let c = load_ok(
        &conf(
            r#"{"type":"host-local","subnet":"10.1.2.0/24","routes":[{"dst":"0.0.0.0/0"}],"dataDir":"/tmp/x"}"#,
        ),
        "",
    );
    assert_eq!(c.store.name, "mynet");
    assert_eq!(
        summary(&c),
        vec![vec!["10.1.2.0/24 10.1.2.1-10.1.2.254 gw 10.1.2.1"]]
    );
    assert_eq!(c.routes.len(), 1);
    assert!(c.routes[0].gw.is_none());
    assert_eq!(c.store.data_dir, PathBuf::from("/tmp/x"));
    assert!(c.requested.is_empty());
}

#[test]
fn new_style_config_and_default_data_dir() {
    let c = load_ok(
        &conf(
            r#"{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/24"},{"subnet":"11.1.2.0/24"}],[{"subnet":"2001:db8:1::/64"}]]}"#,
        ),
        "",
    );
    assert_eq!(
        summary(&c),
        vec![
            vec![
                "10.1.2.0/24 10.1.2.1-10.1.2.254 gw 10.1.2.1",
                "11.1.2.0/24 11.1.2.1-11.1.2.254 gw 11.1.2.1"
            ],
            vec!["2001:db8:1::/64 2001:db8:1::1-2001:db8:1:0:ffff:ffff:ffff:ffff gw 2001:db8:1::1"],
        ]
    );
    assert_eq!(c.store.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
}

#[test]
fn runtime_ip_ranges_come_first_then_legacy_then_ranges() {
    let json = r#"{"cniVersion":"0.3.1","name":"mynet","type":"ipvlan",
        "ipam":{"type":"host-local","subnet":"10.9.0.0/24","ranges":[[{"subnet":"10.1.2.0/24"}]]},
        "runtimeConfig":{"ipRanges":[[{"subnet":"10.2.2.0/24"}],[{"subnet":"2001:db8:2::/64"}]]}}"#;
    let c = load_ok(json, "");
    let subnets: Vec<String> = c
        .ranges
        .iter()
        .map(|s| s.ranges()[0].subnet.to_string())
        .collect();
    assert_eq!(
        subnets,
        [
            "10.2.2.0/24",
            "2001:db8:2::/64",
            "10.9.0.0/24",
            "10.1.2.0/24"
        ]
    );
}

#[test]
fn requested_ips_in_reference_order() {
    let ipam = r#"{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/24"}]]}"#;
    assert_eq!(
        load_ok(&conf(ipam), "IP=10.1.2.10").requested,
        [ipa("10.1.2.10")]
    );
    assert_eq!(
        load_ok(&conf(ipam), "IP=10.1.2.11/24").requested,
        [ipa("10.1.2.11")]
    );
    let json = r#"{"cniVersion":"0.3.1","name":"mynet","type":"ipvlan",
        "ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/24"}]]},
        "args":{"cni":{"ips":["10.1.2.12/24","10.1.2.13","2001:db8:1::5"]}},
        "runtimeConfig":{"ips":["10.1.2.14/24","10.1.2.12"]}}"#;
    let c = load_ok(json, "IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.1.2.11");
    assert_eq!(
        c.requested,
        [
            "10.1.2.11",
            "10.1.2.12",
            "10.1.2.13",
            "2001:db8:1::5",
            "10.1.2.14"
        ]
        .map(ipa)
    );
    assert_eq!(
        load_err(&conf(ipam), "IP=10.1.2"),
        "cannot understand ip: 10.1.2"
    );
    let e: libcni::Error = load(conf(ipam).as_bytes(), "FOO=1").unwrap_err().into();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (4, "ARGS: unknown args [\"FOO=1\"]")
    );
}

#[test]
fn overlaps_between_and_within_sets() {
    assert_eq!(
        load_err(
            &conf(
                r#"{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.1.2.0/24"}]]}"#
            ),
            ""
        ),
        "range set 0 overlaps with 1"
    );
    assert_eq!(
        load_err(
            &conf(
                r#"{"type":"host-local","ranges":[[{"subnet":"10.2.2.0/24"}],[{"subnet":"10.3.2.0/24"}],[{"subnet":"10.1.0.0/16"},{"subnet":"10.3.0.0/16"}]]}"#
            ),
            ""
        ),
        "range set 1 overlaps with 2"
    );
    assert_eq!(
        load_err(
            &conf(
                r#"{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/22"},{"subnet":"10.1.2.0/24"}]]}"#
            ),
            ""
        ),
        "invalid range set 0: subnets 10.1.0.1-10.1.3.254 and 10.1.2.1-10.1.2.254 overlap"
    );
}

#[test]
fn mixed_families_and_versions() {
    assert_eq!(
        load_err(
            &conf(
                r#"{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/24"},{"subnet":"2001:db8:1::/64"}]]}"#
            ),
            ""
        ),
        "invalid range set 0: mixed address families"
    );
    let two_v4 = r#"{"cniVersion":"0.2.0","name":"mynet","type":"ipvlan",
        "ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.2.2.0/24"}]]}}"#;
    let e = load(two_v4.as_bytes(), "").unwrap_err();
    assert_eq!(
        e.to_string(),
        "CNI version 0.2.0 does not support more than 1 address per family"
    );
    assert_eq!(libcni::Error::from(e).code, 2);
    let v4_v6 = r#"{"cniVersion":"0.2.0","name":"mynet","type":"ipvlan",
        "ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"2001:db8:1::/64"}]]}}"#;
    assert_eq!(load_ok(v4_v6, "").ranges.len(), 2);
}

#[test]
fn missing_pieces_and_bad_values_are_code_7() {
    let cases = [
        (
            r#"{"cniVersion":"1.0.0","name":"n"}"#,
            "IPAM config missing 'ipam' key",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":null}"#,
            "IPAM config missing 'ipam' key",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local"}}"#,
            "no IP ranges specified",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[]]}}"#,
            "invalid range set 0: empty range set",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.1.2.3/24"}}"#,
            "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 10.1.2.0",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.1.2.0/24","dataDir":"rel/dir"}}"#,
            "dataDir \"rel/dir\" must be an absolute path without '..' components",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.1.2.0/24","dataDir":"/tmp/../etc"}}"#,
            "dataDir \"/tmp/../etc\" must be an absolute path without '..' components",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"..","ipam":{"subnet":"10.1.2.0/24"}}"#,
            "network name \"..\" cannot name a directory inside dataDir",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"a/b","ipam":{"subnet":"10.1.2.0/24"}}"#,
            "network name \"a/b\" cannot name a directory inside dataDir",
        ),
    ];
    for (json, want) in cases {
        let e: libcni::Error = load(json.as_bytes(), "").unwrap_err().into();
        assert_eq!((e.code, e.msg.as_str()), (7, want), "{json}");
    }
}

/// DEL and GC read only the store location: every other mistake is ignored, the
/// location's own mistakes are refused with the same messages as ADD gives.
#[test]
fn store_location_ignores_all_but_name_and_data_dir() {
    let broken = [
        r#"{"subnet":""}"#,
        r#"{"ranges":[[{"subnet":""}]]}"#,
        r#"{"subnet":"10.1.2.0/33"}"#,
        r#"{"subnet":"10.1.2.0/24","gateway":"not-an-ip"}"#,
        r#"{"subnet":"10.1.2.0/24","rangeStart":"10.1.3.5"}"#,
        r#"{"subnet":"10.1.2.0/24","routes":[{"dst":"bogus"}]}"#,
        r#"{"subnet":"10.1.2.0/24","routes":"x"}"#,
        r#"{"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.1.2.0/25"}]]}"#,
        r#"{"ranges":5,"resolvConf":7}"#,
    ];
    for ipam in broken {
        let json = format!(
            r#"{{"cniVersion":"1.0.0","name":"n","ipam":{}}}"#,
            ipam.replacen('{', r#"{"type":"host-local","dataDir":"/tmp/x","#, 1)
        );
        assert!(load(json.as_bytes(), "").is_err(), "ADD refuses {json}");
        let at = load_store_location(json.as_bytes()).unwrap();
        assert_eq!(
            (at.name.as_str(), at.data_dir.as_path()),
            ("n", Path::new("/tmp/x")),
            "{json}"
        );
    }
    let cases = [
        (r#"{"name":"n"}"#, "IPAM config missing 'ipam' key"),
        (
            r#"{"name":"n","ipam":{"dataDir":"rel"}}"#,
            "dataDir \"rel\" must be an absolute path without '..' components",
        ),
        (
            r#"{"name":"a/b","ipam":{}}"#,
            "network name \"a/b\" cannot name a directory inside dataDir",
        ),
    ];
    for (json, want) in cases {
        let e: libcni::Error = load_store_location(json.as_bytes()).unwrap_err().into();
        assert_eq!((e.code, e.msg.as_str()), (7, want), "{json}");
    }
    let e = load_store_location(br#"{"name":"n","ipam":{"dataDir":5}}"#).unwrap_err();
    assert!(matches!(e, ConfigError::Decode(_)), "{e}");
}

#[test]
fn go_field_names_are_read_as_the_reference_reads_them() {
    let c = load_ok(
        &conf(
            r#"{"Type":"host-local","Subnet":"10.1.2.0/24","RangeStart":"10.1.2.9","DataDir":"/tmp/x",
                "Routes":[{"Dst":"0.0.0.0/0","GW":"10.1.2.1"}],"ResolvConf":""}"#,
        ),
        "",
    );
    assert_eq!(
        summary(&c),
        [["10.1.2.0/24 10.1.2.9-10.1.2.254 gw 10.1.2.1"]]
    );
    assert_eq!(c.store.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(c.routes.len(), 1);
    assert_eq!(c.routes[0].gw, Some(ipa("10.1.2.1")));
    let c = load_ok(
        r#"{"Name":"n","CNIVersion":"1.0.0","IPAM":{"Ranges":[[{"Subnet":"10.1.2.0/24"}]]},
            "RuntimeConfig":{"IPs":["10.1.2.7"]},"Args":{"CNI":{"IPs":["10.1.2.8"]}}}"#,
        "",
    );
    assert_eq!((c.store.name.as_str(), c.version), ("n", Version(1, 0, 0)));
    assert_eq!(c.requested, [ipa("10.1.2.8"), ipa("10.1.2.7")]);
}

#[test]
fn wrong_types_are_refused_naming_the_field() {
    let e = load_err(
        &conf(r#"{"subnet":"10.1.2.0/24","routes":[{"dst":5}]}"#),
        "",
    );
    assert!(e.contains("dst is not a string"), "{e}");
    let e = load_err(
        r#"{"name":"n","ipam":{"subnet":"10.1.2.0/24"},"runtimeConfig":{"ips":"10.1.2.7"}}"#,
        "",
    );
    assert!(
        e.starts_with("failed to load netconf: runtimeConfig.ips: invalid type"),
        "{e}"
    );
}
