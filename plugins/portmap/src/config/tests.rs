use super::*;
use serde_json::json;

fn load(v: serde_json::Value) -> Result<PortmapConf, Error> {
    PortmapConf::load(v.to_string().as_bytes())
}

fn base(extra: serde_json::Value) -> serde_json::Value {
    let mut v = json!({"cniVersion": "1.0.0", "name": "pmnet", "type": "portmap"});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn mappings(m: serde_json::Value) -> serde_json::Value {
    base(json!({"runtimeConfig": {"portMappings": m}}))
}

#[test]
fn defaults_are_the_references() {
    let c = load(base(json!({}))).unwrap();
    assert!(c.snat && !c.masq_all);
    assert_eq!(c.mark, MarkChain::Own { bit: 13 });
    assert_eq!(c.backend, None);
    assert!(c.mappings.is_empty());
}

#[test]
fn mappings_read_with_go_key_matching() {
    let c = load(mappings(json!([
        {"HostPort": 8080, "containerport": 80, "Protocol": "TCP", "HostIP": "::ffff:10.0.0.1"},
        {"hostPort": 53, "containerPort": 53, "protocol": "udp"},
    ])))
    .unwrap();
    assert_eq!(
        c.mappings[0],
        PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: Some("10.0.0.1".parse().unwrap()),
        }
    );
    assert_eq!(c.mappings[1].host_ip, None);
}

#[test]
fn bad_mappings_name_the_field() {
    for (m, field) in [
        (
            json!({"hostPort": 0, "containerPort": 80, "protocol": "tcp"}),
            "portMappings[0].hostPort",
        ),
        (
            json!({"hostPort": 70000, "containerPort": 80, "protocol": "tcp"}),
            "portMappings[0].hostPort",
        ),
        (
            json!({"hostPort": 80, "containerPort": -1, "protocol": "tcp"}),
            "portMappings[0].containerPort",
        ),
        (
            json!({"hostPort": 80, "containerPort": 80, "protocol": "icmp"}),
            "portMappings[0].protocol",
        ),
        (
            json!({"hostPort": 80, "containerPort": 80}),
            "portMappings[0].protocol",
        ),
        (
            json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp", "hostIP": "nope"}),
            "portMappings[0].hostIP",
        ),
    ] {
        let e = load(mappings(json!([m]))).unwrap_err();
        assert_eq!(e.code, 7, "{}", e.msg);
        assert!(e.msg.contains(field), "{} lacks {field}", e.msg);
    }
}

#[test]
fn mark_and_backend_options() {
    let e = load(base(
        json!({"markMasqBit": 3, "externalSetMarkChain": "KUBE-MARK-MASQ"}),
    ))
    .unwrap_err();
    assert_eq!(e.msg, "Cannot specify externalSetMarkChain and markMasqBit");
    let e = load(base(json!({"markMasqBit": 32}))).unwrap_err();
    assert_eq!(e.msg, "MasqMarkBit must be between 0 and 31");
    assert_eq!(
        load(base(json!({"markMasqBit": 0}))).unwrap().mark,
        MarkChain::Own { bit: 0 }
    );
    let e = load(base(json!({"backend": "ebpf"}))).unwrap_err();
    assert_eq!(e.msg, "unrecognized backend \"ebpf\"");
    let e = load(base(
        json!({"backend": "nftables", "externalSetMarkChain": "X"}),
    ))
    .unwrap_err();
    assert_eq!(
        e.msg,
        "nftables backend was requested but configuration contains iptables-specific options [externalSetMarkChain]"
    );
    let e = load(base(json!({"backend": "iptables", "conditionsV4": ["ip saddr 1.2.3.4"], "conditionsV6": ["ip6 saddr ::1"]}))).unwrap_err();
    assert!(
        e.msg
            .ends_with("nftables-specific options [conditionsV4 conditionsV6]"),
        "{}",
        e.msg
    );
    let c = load(base(
        json!({"backend": "iptables", "conditionsV4": ["-s", "1.2.3.4"]}),
    ))
    .unwrap();
    let k = hostnet::kernel::fake::FakeKernel::new();
    assert_eq!(c.backend(&k).unwrap(), Some(Backend::IpTables));
}

#[test]
fn container_ips_as_the_reference_picks_them() {
    let c = load(base(json!({"prevResult": {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "br0"}, {"name": "eth0", "sandbox": "/run/netns/x"}],
        "ips": [
            {"interface": 0, "address": "10.0.0.1/24"},
            {"interface": 1, "address": "10.0.0.5/24"},
            {"interface": 1, "address": "10.0.0.6/24"},
            {"address": "fd00::5/64"},
        ]
    }})))
    .unwrap();
    let ips = c.container_ips(Version::V1_1_0, "eth0").unwrap();
    assert_eq!(
        ips,
        vec![
            "10.0.0.5/24".parse::<IpNetwork>().unwrap(),
            "fd00::5/64".parse().unwrap()
        ]
    );
}
