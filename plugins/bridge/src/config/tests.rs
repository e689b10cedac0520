use super::*;

fn load(json: &str) -> Result<BridgeConf, Error> {
    BridgeConf::load(json.as_bytes(), "")
}

#[test]
fn defaults() {
    let c = load(r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#).unwrap();
    assert_eq!(c.bridge, "cni0");
    assert!(!c.is_gateway && !c.ip_masq && !c.is_layer3() && !c.vlan_filtering());
    assert!(!c.preserve_default_vlan);
    assert_eq!((c.mtu, c.mac, c.ip_masq_backend), (None, None, None));
    let c = load(r#"{"name":"n","ipam":{}}"#).unwrap();
    assert!(!c.is_layer3(), "an ipam object without type is L2");
}

#[test]
fn default_gateway_implies_gateway() {
    let c = load(r#"{"name":"n","isDefaultGateway":true,"ipam":{"type":"host-local"}}"#).unwrap();
    assert!(c.is_gateway && c.is_default_gateway && c.is_layer3());
}

#[test]
fn vlan_ids() {
    assert_eq!(load(r#"{"name":"n","vlan":0}"#).unwrap().vlan, 0);
    assert_eq!(load(r#"{"name":"n","vlan":4094}"#).unwrap().vlan, 4094);
    for v in [-100, 5000, 4095] {
        let e = load(&format!(r#"{{"name":"n","vlan":{v}}}"#)).unwrap_err();
        assert_eq!(
            e.msg,
            format!("invalid VLAN ID {v} (must be between 0 and 4094)")
        );
        assert_eq!(e.code, 7);
    }
}

#[test]
fn vlan_trunk_collects() {
    let trunk = |t: &str| load(&format!(r#"{{"name":"n","vlanTrunk":{t}}}"#));
    assert_eq!(trunk("[]").unwrap().vlan_trunk, Vec::<u16>::new());
    assert_eq!(
        trunk(r#"[{"minID":100,"maxID":105}]"#).unwrap().vlan_trunk,
        vec![100, 101, 102, 103, 104, 105]
    );
    assert_eq!(trunk(r#"[{"id":10}]"#).unwrap().vlan_trunk, vec![10]);
    assert_eq!(
        trunk(r#"[{"id":300},{"minID":101,"maxID":103},{"id":5},{"id":102}]"#)
            .unwrap()
            .vlan_trunk,
        vec![5, 101, 102, 103, 300]
    );
    assert!(trunk(r#"[{"id":10}]"#).unwrap().vlan_filtering());
    // vlan and vlanTrunk together are allowed (since v1.8.0).
    assert!(load(r#"{"name":"n","vlan":100,"vlanTrunk":[{"id":101}]}"#).is_ok());
}

#[test]
fn vlan_trunk_errors() {
    let cases = [
        (
            r#"[{"minID":0,"maxID":10}]"#,
            "incorrect trunk minID parameter",
        ),
        (
            r#"[{"minID":4095,"maxID":4095}]"#,
            "incorrect trunk minID parameter",
        ),
        (
            r#"[{"minID":1,"maxID":0}]"#,
            "incorrect trunk maxID parameter",
        ),
        (
            r#"[{"minID":1,"maxID":5000}]"#,
            "incorrect trunk maxID parameter",
        ),
        (
            r#"[{"minID":10,"maxID":5}]"#,
            "minID is greater than maxID in trunk parameter",
        ),
        (
            r#"[{"maxID":5}]"#,
            "minID and maxID should be configured simultaneously, minID is missing",
        ),
        (
            r#"[{"minID":5}]"#,
            "minID and maxID should be configured simultaneously, maxID is missing",
        ),
        (r#"[{"id":0}]"#, "incorrect trunk id parameter"),
        (r#"[{"id":4095}]"#, "incorrect trunk id parameter"),
    ];
    for (t, msg) in cases {
        let e = load(&format!(r#"{{"name":"n","vlanTrunk":{t}}}"#)).unwrap_err();
        assert_eq!(e.msg, msg, "{t}");
    }
}

#[test]
fn exclusive_options() {
    let e = load(r#"{"name":"n","hairpinMode":true,"promiscMode":true}"#).unwrap_err();
    assert_eq!(
        e.msg,
        "cannot set hairpin mode and promiscuous mode at the same time"
    );
    let e = load(r#"{"name":"n","disableContainerInterface":true,"ipam":{"type":"host-local"}}"#)
        .unwrap_err();
    assert_eq!(
        e.msg,
        "cannot use IPAM when DisableContainerInterface flag is set"
    );
    assert!(load(r#"{"name":"n","disableContainerInterface":true}"#).is_ok());
}

#[test]
fn ipmasq_backend() {
    assert_eq!(
        load(r#"{"name":"n","ipMasqBackend":"nftables"}"#)
            .unwrap()
            .ip_masq_backend,
        Some(Backend::NfTables)
    );
    assert_eq!(
        load(r#"{"name":"n","ipMasqBackend":"iptables"}"#)
            .unwrap()
            .ip_masq_backend,
        Some(Backend::IpTables)
    );
    assert_eq!(
        load(r#"{"name":"n","ipMasqBackend":"pf"}"#)
            .unwrap_err()
            .msg,
        "unknown ipmasq backend \"pf\""
    );
}

#[test]
fn bad_types_and_values_name_the_field() {
    let e = load(r#"{"name":"n","mtu":"big"}"#).unwrap_err();
    assert_eq!(e.code, 7);
    assert!(e.msg.starts_with("failed to load netconf: "), "{}", e.msg);
    assert!(
        load(r#"{"name":"n","mtu":20}"#)
            .unwrap_err()
            .msg
            .contains("mtu")
    );
    assert!(
        load(r#"{"name":"n","bridge":"a/b"}"#)
            .unwrap_err()
            .msg
            .contains("bridge name")
    );
    assert!(
        load(r#"{"name":"n","bridge":"averyveryverylongname"}"#)
            .unwrap_err()
            .msg
            .contains("bridge name")
    );
}

#[test]
fn mac_precedence_runtime_config_then_args_then_cni_args() {
    let env = "IgnoreUnknown=1;MAC=02:00:00:00:00:03";
    let all = r#"{"name":"n","runtimeConfig":{"mac":"02:00:00:00:00:01"},"args":{"cni":{"mac":"02:00:00:00:00:02"}}}"#;
    let args_only = r#"{"name":"n","args":{"cni":{"mac":"02:00:00:00:00:02"}}}"#;
    let none = r#"{"name":"n"}"#;
    let mac = |json: &str, env: &str| {
        BridgeConf::load(json.as_bytes(), env)
            .unwrap()
            .mac
            .map(|m| format_mac(&m))
    };
    assert_eq!(mac(all, env).as_deref(), Some("02:00:00:00:00:01"));
    assert_eq!(mac(args_only, env).as_deref(), Some("02:00:00:00:00:02"));
    assert_eq!(mac(none, env).as_deref(), Some("02:00:00:00:00:03"));
    assert_eq!(mac(none, ""), None);
    let e = BridgeConf::load(none.as_bytes(), "MAC=zz:00:00:00:00:00").unwrap_err();
    assert_eq!(
        e.msg,
        "invalid MAC address \"zz:00:00:00:00:00\" in CNI_ARGS MAC"
    );
    let e = BridgeConf::load(none.as_bytes(), "FOO=1").unwrap_err();
    assert!(e.msg.starts_with("ARGS: unknown args"));
}

#[test]
fn mac_parsing() {
    assert_eq!(parse_mac("02:00:00:00:00:0a"), Some([2, 0, 0, 0, 0, 10]));
    assert_eq!(parse_mac("02-00-00-00-00-0A"), Some([2, 0, 0, 0, 0, 10]));
    for bad in [
        "",
        "02:00:00:00:00",
        "02:00:00:00:00:00:00",
        "2:0:0:0:0:0",
        "02:00:00:00:00:0g",
    ] {
        assert_eq!(parse_mac(bad), None, "{bad}");
    }
    assert_eq!(format_mac(&[2, 0, 0, 0, 0, 10]), "02:00:00:00:00:0a");
}

#[test]
fn dns_override_only_when_set() {
    assert!(
        load(r#"{"name":"n","dns":{}}"#)
            .unwrap()
            .dns_override()
            .is_none()
    );
    let c = load(r#"{"name":"n","dns":{"nameservers":["1.1.1.1"]}}"#).unwrap();
    assert_eq!(c.dns_override().unwrap().nameservers, vec!["1.1.1.1"]);
}

/// DEL and GC read a config that ADD refuses, as long as what they need is usable: each
/// mistake is noted and its field read as absent.
#[test]
fn teardown_tolerates_mistakes_it_does_not_depend_on() {
    let base = r#""name":"n","type":"bridge","bridge":"br9","ipam":{"type":"host-local"}"#;
    let cases = [
        r#""mtu":5"#,
        r#""mtu":"abc""#,
        r#""vlan":5000"#,
        r#""vlan":"x""#,
        r#""vlanTrunk":[{"minID":0,"maxID":5}]"#,
        r#""ipMasqBackend":"bogus""#,
        r#""hairpinMode":true,"promiscMode":true"#,
        r#""disableContainerInterface":true"#,
        r#""runtimeConfig":{"mac":"not-a-mac"}"#,
        r#""isGateway":"yes""#,
    ];
    for case in cases {
        let json = format!("{{{base},{case}}}");
        assert_eq!(load(&json).unwrap_err().code, 7, "ADD refuses {json}");
        let (c, ignored) = BridgeConf::read_tolerant(json.as_bytes(), "").unwrap();
        assert_eq!(ignored.len(), 1, "{json}: {ignored:?}");
        assert_eq!((c.bridge.as_str(), c.name()), ("br9", "n"), "{json}");
        assert!(c.is_layer3(), "{json}");
        assert_eq!((c.mtu, c.vlan, c.mac), (None, 0, None), "{json}");
        assert!(c.vlan_trunk.is_empty(), "{json}");
    }
    // A valid config tolerates nothing.
    let (_, ignored) =
        BridgeConf::read_tolerant(format!("{{{base},\"mtu\":1400}}").as_bytes(), "").unwrap();
    assert!(ignored.is_empty());
    // An unreadable ipMasq or macspoofchk reads as on: their teardown is by this
    // attachment's names only, and an earlier ADD may have set them up.
    let (c, _) = BridgeConf::read_tolerant(
        format!(r#"{{{base},"ipMasq":"true","macspoofchk":1}}"#).as_bytes(),
        "",
    )
    .unwrap();
    assert!(c.ip_masq && c.macspoofchk);
}

/// What teardown needs is still refused: an unusable bridge name, name or IPAM type.
#[test]
fn teardown_refuses_mistakes_in_what_it_needs() {
    for json in [
        r#"{"name":"n","bridge":5}"#,
        r#"{"name":"n","bridge":"this-name-is-far-too-long"}"#,
        r#"{"name":"n","ipam":5}"#,
        r#"{"name":"n","ipam":{"type":7}}"#,
        r#"[1]"#,
    ] {
        let e = BridgeConf::read_tolerant(json.as_bytes(), "").unwrap_err();
        assert!(matches!(e.code, 6 | 7), "{json}: {e:?}");
    }
}

#[test]
fn go_field_names_are_read_as_the_reference_reads_them() {
    let c = load(
        r#"{"Name":"n","Bridge":"br9","IsGateway":true,"IPMasq":true,"MTU":1400,
            "RuntimeConfig":{"MAC":"02:00:00:00:00:01"},"IPAM":{"Type":"host-local"}}"#,
    )
    .unwrap();
    assert_eq!(c.bridge, "br9");
    assert!(c.is_gateway && c.ip_masq && c.is_layer3());
    assert_eq!(c.mtu, Some(1400));
    assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 1]));
    let c = load(r#"{"name":"n","Args":{"CNI":{"Mac":"02:00:00:00:00:02"}}}"#).unwrap();
    assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 2]));
    // Repeated keys: the last one wins.
    assert_eq!(
        load(r#"{"name":"n","bridge":"a","Bridge":"b"}"#)
            .unwrap()
            .bridge,
        "b"
    );
}

#[test]
fn wrong_types_are_refused_naming_the_field() {
    for (extra, code, field) in [
        (
            r#""args":{"cni":{"mac":5}}"#,
            7,
            "args.cni.mac: invalid type",
        ),
        (
            r#""runtimeConfig":{"mac":5}"#,
            7,
            "runtimeConfig.mac: invalid type",
        ),
        (r#""runtimeConfig":5"#, 7, "runtimeConfig: invalid type"),
        (r#""prevResult":"x""#, 6, "prevResult: invalid type"),
        (r#""isGateway":"yes""#, 7, "isGateway: invalid type"),
    ] {
        let e = load(&format!(r#"{{"name":"n",{extra}}}"#)).unwrap_err();
        assert_eq!(e.code, code, "{extra}: {}", e.msg);
        assert!(
            e.msg
                .starts_with(&format!("failed to load netconf: {field}")),
            "{extra}: {}",
            e.msg
        );
    }
}

#[test]
fn empty_bridge_name_fails_setup_but_not_teardown() {
    let json = r#"{"name":"n","bridge":""}"#;
    let e = load(json).unwrap_err();
    assert_eq!(e.code, 7);
    assert_eq!(e.msg, "invalid bridge name \"\": interface name is empty");
    let (c, ignored) = BridgeConf::read_tolerant(json.as_bytes(), "").unwrap();
    assert_eq!((c.bridge.as_str(), ignored.len()), ("cni0", 1));
    let c = load(r#"{"name":"n"}"#).unwrap();
    assert_eq!(c.bridge, "cni0");
}
