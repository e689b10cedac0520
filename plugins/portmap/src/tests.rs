//! The verbs against hostnet's recording fake ([`FakeKernel`] as [`PortMapper`]): what ADD,
//! CHECK, DEL, GC and STATUS decide (which backend, what is removed after a failure, which
//! failures count). No root, no tools: the rules themselves are tested in hostnet and, as
//! traffic, in `tests/tests/portmap_*.rs`.

use hostnet::firewall::Backend;
use hostnet::kernel::fake::FakeKernel;
use libcni::Error;
use libcni::skel::CmdArgs;
use serde_json::{Value, json};

use crate::{add, check, teardown};

const PREV: &str = r#"{"cniVersion": "1.0.0",
    "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": "/run/netns/ctr"}],
    "ips": [{"interface": 1, "address": "10.1.0.2/24"},
            {"interface": 1, "address": "fd00::2/64"}]}"#;

/// A portmap config with prevResult and `mappings`, plus `extra` top-level fields.
fn conf(mappings: Value, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0", "name": "net", "type": "portmap",
        "runtimeConfig": {"portMappings": mappings},
        "prevResult": serde_json::from_str::<Value>(PREV).unwrap(),
    });
    for (key, v) in extra.as_object().unwrap() {
        c[key] = v.clone();
    }
    c
}

fn web() -> Value {
    json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
           {"hostPort": 5353, "containerPort": 53, "protocol": "udp"}])
}

fn args_of(id: &str, conf: &Value) -> CmdArgs {
    CmdArgs {
        container_id: id.into(),
        netns: "/run/netns/ctr".into(),
        ifname: "eth0".into(),
        args: String::new(),
        path: "/nonexistent".into(),
        stdin_data: conf.to_string().into_bytes(),
        version: libcni::version::Version(1, 0, 0),
        opened_netns: Default::default(),
    }
}

fn args(conf: &Value) -> CmdArgs {
    args_of("c1", conf)
}

fn add(k: &FakeKernel, conf: &Value) -> Result<(), Error> {
    add::add(k, &args(conf)).map(drop).map_err(Error::from)
}

fn check(k: &FakeKernel, conf: &Value) -> Result<(), Error> {
    check::check(k, &args(conf)).map_err(Error::from)
}

fn del(k: &FakeKernel, conf: &Value) -> Result<(), Error> {
    teardown::del(k, &args(conf)).map_err(Error::from)
}

fn rules(k: &FakeKernel) -> Vec<String> {
    k.state().rules.iter().cloned().collect()
}

fn rules_of(k: &FakeKernel, backend: &str) -> usize {
    let prefix = format!("portmap {backend} ");
    rules(k).iter().filter(|r| r.starts_with(&prefix)).count()
}

fn probed(log: &[String]) -> bool {
    log.iter().any(|l| l.starts_with("fw: probe"))
}

#[test]
fn add_maps_each_address_and_passes_prev_result_on() {
    let k = FakeKernel::new();
    let c = conf(web(), json!({}));
    let result = add::add(&k, &args(&c)).unwrap();
    assert_eq!(result.ips.len(), 2, "prevResult passed on");
    assert_eq!(
        rules(&k),
        [
            "portmap iptables net c1 10.1.0.2 tcp:8080->80,udp:5353->53",
            "portmap iptables net c1 fd00::2 tcp:8080->80,udp:5353->53",
        ]
    );
    let log = k.take_log();
    assert!(!probed(&log), "the common path probes no tool: {log:?}");
    // Stale UDP flows go after the rules, per family; localnet for the IPv4 address only.
    let after_add = &log[log
        .iter()
        .position(|l| l.starts_with("fw: portmap add"))
        .unwrap()..];
    assert!(
        after_add
            .iter()
            .any(|l| l.starts_with("fw: conntrack delete udp ipv4"))
    );
    assert!(
        after_add
            .iter()
            .any(|l| l.starts_with("fw: conntrack delete udp ipv6"))
    );
    assert_eq!(
        (log.iter())
            .filter(|l| l.contains("route_localnet"))
            .collect::<Vec<_>>(),
        ["host: route_localnet to 10.1.0.2"]
    );
    // A second ADD replaces the attachment's rules.
    let c = conf(
        json!([{"hostPort": 8081, "containerPort": 80, "protocol": "tcp"}]),
        json!({}),
    );
    add(&k, &c).unwrap();
    assert_eq!(rules(&k).len(), 2);
    assert!(rules(&k).iter().all(|r| r.ends_with("tcp:8081->80")));
}

#[test]
fn add_without_mappings_or_container_addresses_changes_nothing() {
    let k = FakeKernel::new();
    add(&k, &conf(json!([]), json!({}))).unwrap();
    let mut c = conf(web(), json!({}));
    c["prevResult"]["ips"] = json!([]);
    add(&k, &c).unwrap();
    assert_eq!(k.take_log(), Vec::<String>::new());
    let mut c = conf(web(), json!({}));
    c.as_object_mut().unwrap().remove("prevResult");
    let e = add(&k, &c).unwrap_err();
    assert!(e.msg.contains("chained plugin"), "{}", e.msg);
}

#[test]
fn automatic_add_falls_back_to_nftables_only_when_iptables_is_unusable() {
    let k = FakeKernel::new();
    k.make_unusable(Backend::IpTables);
    add(&k, &conf(web(), json!({}))).unwrap();
    assert_eq!((rules_of(&k, "iptables"), rules_of(&k, "nftables")), (0, 2));
    // iptables failing while usable: its error, no nftables attempt.
    let k = FakeKernel::new();
    k.fail("fw: portmap add iptables");
    let e = add(&k, &conf(web(), json!({}))).unwrap_err();
    assert_eq!(e.code, 999);
    assert!(
        e.msg.starts_with("unable to set up port mappings"),
        "{}",
        e.msg
    );
    assert!(!k.take_log().iter().any(|l| l.contains("nftables net")));
    assert_eq!(rules(&k), Vec::<String>::new());
    // A configured backend is used as is, no fallback.
    let k = FakeKernel::new();
    k.make_unusable(Backend::NfTables);
    assert!(add(&k, &conf(web(), json!({"backend": "nftables"}))).is_err());
    assert_eq!(rules(&k), Vec::<String>::new());
}

#[test]
fn options_of_one_backend_choose_it_before_any_attempt() {
    // nft conditions with no backend: the automatic choice is probed first and must fit.
    let nft_conds = json!({"conditionsV4": ["ip", "saddr", "!=", "10.9.0.0/16"]});
    let k = FakeKernel::new();
    let e = add(&k, &conf(web(), nft_conds.clone())).unwrap_err();
    assert!(e.msg.contains("nftables-specific options"), "{}", e.msg);
    assert_eq!(rules(&k), Vec::<String>::new());
    let k = FakeKernel::new();
    k.make_unusable(Backend::IpTables);
    add(&k, &conf(web(), nft_conds)).unwrap();
    assert_eq!(rules_of(&k, "nftables"), 2);
}

#[test]
fn a_failed_route_localnet_removes_the_mappings() {
    let k = FakeKernel::new();
    k.make_unusable(Backend::IpTables);
    k.fail("host: route_localnet");
    let e = add(&k, &conf(web(), json!({}))).unwrap_err();
    assert!(e.msg.contains("route_localnet"), "{}", e.msg);
    assert_eq!(rules(&k), Vec::<String>::new());
    // Removed with the backend used, not both.
    let log = k.take_log();
    assert!(
        log.iter()
            .any(|l| l == "fw: portmap remove nftables net c1")
    );
    assert!(
        !log.iter()
            .any(|l| l.starts_with("fw: portmap remove iptables"))
    );
}

#[test]
fn without_snat_no_route_localnet_and_conntrack_failures_are_not_fatal() {
    let k = FakeKernel::new();
    k.fail("fw: conntrack delete udp ipv4");
    add(&k, &conf(web(), json!({"snat": false}))).unwrap();
    assert_eq!(rules(&k).len(), 2);
    assert!(!k.take_log().iter().any(|l| l.contains("route_localnet")));
}

#[test]
fn check_finds_the_rules_with_the_backend_that_made_them() {
    let k = FakeKernel::new();
    let c = conf(web(), json!({}));
    add(&k, &c).unwrap();
    check(&k, &c).unwrap();
    let changed = conf(
        json!([{"hostPort": 9090, "containerPort": 80, "protocol": "tcp"}]),
        json!({}),
    );
    let e = check(&k, &changed).unwrap_err();
    assert_eq!(e.code, 999);
    assert_eq!(
        e.msg,
        "missing port mapping rules for container \"c1\" (iptables)"
    );
    // Automatic CHECK on a node without iptables looks in nftables.
    let k = FakeKernel::new();
    k.make_unusable(Backend::IpTables);
    add(&k, &c).unwrap();
    check(&k, &c).unwrap();
    k.state().rules.clear();
    let e = check(&k, &c).unwrap_err();
    assert!(e.msg.ends_with("(nftables)"), "{}", e.msg);
    // A tool failure is its own error; no prevResult is refused; no mappings: nothing to do.
    k.fail("fw: portmap check");
    let e = check(&k, &c).unwrap_err();
    assert!(
        e.msg.starts_with("could not check port mappings"),
        "{}",
        e.msg
    );
    let mut no_prev = c.clone();
    no_prev.as_object_mut().unwrap().remove("prevResult");
    assert!(check(&k, &no_prev).unwrap_err().msg.contains("prevResult"));
    check(&k, &conf(json!([]), json!({}))).unwrap();
}

#[test]
fn del_removes_from_both_backends_whatever_the_config() {
    let k = FakeKernel::new();
    let c = conf(web(), json!({}));
    add(&k, &c).unwrap();
    add(&k, &conf(web(), json!({"backend": "nftables"}))).unwrap();
    assert_eq!(rules(&k).len(), 4);
    // A config that broke after ADD still finds the rules by name.
    del(&k, &conf(web(), json!({"backend": "ebpf"}))).unwrap();
    assert_eq!(rules(&k), Vec::<String>::new());
    del(&k, &c).unwrap();
    // A backend whose tool is missing has nothing to remove: not an error.
    k.make_unusable(Backend::NfTables);
    del(&k, &c).unwrap();
    // A usable backend's failure is.
    k.fail("fw: portmap remove iptables");
    let e = del(&k, &c).unwrap_err();
    assert!(
        e.msg.starts_with("could not remove port mappings"),
        "{}",
        e.msg
    );
}

#[test]
fn del_without_mappings_touches_nothing() {
    let k = FakeKernel::new();
    add(&k, &conf(web(), json!({}))).unwrap();
    k.take_log();
    del(&k, &conf(json!([]), json!({}))).unwrap();
    assert_eq!(k.take_log(), Vec::<String>::new());
    assert_eq!(rules(&k).len(), 2);
}

#[test]
fn gc_removes_this_networks_iptables_attachments_not_listed() {
    let k = FakeKernel::new();
    for id in ["keep", "stale"] {
        add::add(&k, &args_of(id, &conf(web(), json!({})))).unwrap();
    }
    let mut other = conf(web(), json!({}));
    other["name"] = json!("other");
    add::add(&k, &args_of("stale", &other)).unwrap();
    let nft = conf(web(), json!({"backend": "nftables"}));
    add::add(&k, &args_of("stale-nft", &nft)).unwrap();

    let gc = |valid: Value| {
        let c = json!({"cniVersion": "1.1.0", "name": "net", "type": "portmap",
                       "cni.dev/valid-attachments": valid});
        teardown::gc(&k, &args(&c)).map_err(Error::from)
    };
    gc(json!([{"containerID": "keep", "ifname": "eth0"}])).unwrap();
    let left = rules(&k);
    assert!(left.iter().all(|r| !r.contains(" net stale ")), "{left:?}");
    assert!(left.iter().any(|r| r.contains(" net keep ")));
    assert!(left.iter().any(|r| r.contains(" other stale ")));
    assert!(
        left.iter().any(|r| r.contains("stale-nft")),
        "nftables rules stay"
    );
    // A GC without iptables is no failure.
    k.make_unusable(Backend::IpTables);
    gc(json!([])).unwrap();
}

#[test]
fn status_says_whether_a_backend_works() {
    let status = |k: &FakeKernel, extra: Value| {
        let c = json!({"cniVersion": "1.1.0", "name": "net", "type": "portmap"});
        let mut c = c;
        for (key, v) in extra.as_object().unwrap() {
            c[key] = v.clone();
        }
        check::status(k, &args(&c)).map_err(Error::from)
    };
    let k = FakeKernel::new();
    k.make_unusable(Backend::IpTables);
    status(&k, json!({})).unwrap();
    status(&k, json!({"backend": "nftables"})).unwrap();
    let e = status(&k, json!({"backend": "iptables"})).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (50, "iptables is not usable on this node")
    );
    k.make_unusable(Backend::NfTables);
    let e = status(&k, json!({})).unwrap_err();
    assert_eq!(e.code, 50);
    assert!(
        e.msg.starts_with("neither iptables nor nftables"),
        "{}",
        e.msg
    );
}
