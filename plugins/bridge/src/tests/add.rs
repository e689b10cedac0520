//! ADD: the reference's order (but IPAM, which runs while the links are made), and what a
//! failure at each step leaves (nothing) and in which order it is undone (firewall, veth,
//! then the IP: the link goes before the IP, so the IP is never in use twice).

use super::*;
use serde_json::json;

#[test]
fn configures_the_node_in_the_reference_order() {
    let k = node();
    let result = k.add(&args(&conf())).unwrap().result;
    let veth = host_veth(&result);
    let log = k.take_log();
    assert_in_order(
        &log,
        &[
            "host: create_bridge cni0",
            "host: set_mac cni0",
            "host: sysctl net.ipv6.conf.cni0.accept_ra=0",
            "host: set_up cni0",
            &format!("host: create_veth {veth} eth0@{CTR}"),
            &format!("host: set_master cni0 {veth}"),
            &format!("host: set_port_options {veth}"),
            &format!("host: set_up {veth}"),
            &format!("host: sysctl net.ipv6.conf.{veth}.accept_ra=0"),
            "fw: setup spoofcheck c1 eth0",
            &format!("{CTR}: sysctl net.ipv6.conf.eth0.accept_dad=0"),
            &format!("{CTR}: sysctl net.ipv4.conf.eth0.arp_notify=1"),
            &format!("{CTR}: add_address eth0 10.1.0.5/24"),
            &format!("{CTR}: set_up eth0"),
            &format!("{CTR}: add_route 0.0.0.0/0 via 10.1.0.1"),
            "host: add_address cni0 10.1.0.1/24",
            "host: sysctl net.ipv4.ip_forward=1",
            "host: set_mac cni0",
        ],
    );
    // IPAM runs while the links are made, and is done before the container's interface
    // is configured (it runs only once the interface name is found free: see
    // `an_existing_container_interface_is_refused_before_anything_is_made`).
    let at = |line: &str| log.iter().position(|l| l.starts_with(line)).unwrap();
    assert!(at("ipam: ADD") < at(&format!("{CTR}: sysctl")));
    // The masquerade rules go on while the container's addresses do, once IPAM is done;
    // their tool was started once the links were made.
    assert!(at("ipam: ADD") < at("fw: setup ipmasq net c1 eth0"));
    assert!(at(&format!("host: set_up {veth}")) < at("fw: prestart ipmasq"));
    let names: Vec<&str> = result.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["cni0", veth.as_str(), "eth0"]);
    assert_eq!(result.interfaces[2].sandbox, CTR);
    assert_eq!(result.ips[0].gateway, Some("10.1.0.1".parse().unwrap()));
    let bridge_mac = k.link(HOST, "cni0").unwrap().mac;
    assert_eq!(
        result.interfaces[0].mac,
        crate::config::mac_string(bridge_mac)
    );
    assert!(k.ipam.leased());
    assert_eq!(k.state().rules.len(), 2);
}

/// Each ADD step that can fail (by the log line of its call), and what must be undone
/// after it, in order. IPAM has run (and is undone) by the time any link step fails; the
/// masquerade rules have gone on (and are removed) by the time a container or gateway
/// address step fails.
const STEPS: &[(&str, &[&str])] = &[
    ("/run/netns/ctr: link_by_name eth0", &[]),
    ("host: link_by_name cni0", &["ipam: DEL"]),
    ("host: create_bridge", &["ipam: DEL"]),
    ("host: set_up cni0", &["ipam: DEL"]),
    ("host: create_veth", &["ipam: DEL"]),
    ("host: set_master", &["host: delete_link veth", "ipam: DEL"]),
    (
        "host: set_port_options",
        &["host: delete_link veth", "ipam: DEL"],
    ),
    (
        "host: set_up veth",
        &["host: delete_link veth", "ipam: DEL"],
    ),
    (
        "fw: setup spoofcheck",
        &[
            "fw: teardown spoofcheck",
            "host: delete_link veth",
            "ipam: DEL",
        ],
    ),
    (
        "ipam: ADD",
        &["fw: teardown spoofcheck", "host: delete_link veth"],
    ),
    (
        "/run/netns/ctr: add_address",
        &[
            "fw: teardown ipmasq",
            "fw: teardown spoofcheck",
            "host: delete_link veth",
            "ipam: DEL",
        ],
    ),
    (
        "/run/netns/ctr: set_up eth0",
        &[
            "fw: teardown ipmasq",
            "fw: teardown spoofcheck",
            "host: delete_link veth",
            "ipam: DEL",
        ],
    ),
    (
        "/run/netns/ctr: add_route",
        &[
            "fw: teardown ipmasq",
            "fw: teardown spoofcheck",
            "host: delete_link veth",
            "ipam: DEL",
        ],
    ),
    (
        "host: add_address cni0",
        &[
            "fw: teardown ipmasq",
            "fw: teardown spoofcheck",
            "host: delete_link veth",
            "ipam: DEL",
        ],
    ),
    (
        "host: sysctl net.ipv4.ip_forward",
        &[
            "fw: teardown ipmasq",
            "fw: teardown spoofcheck",
            "host: delete_link veth",
            "ipam: DEL",
        ],
    ),
    (
        "fw: setup ipmasq",
        &[
            "fw: teardown ipmasq",
            "fw: teardown spoofcheck",
            "host: delete_link veth",
            "ipam: DEL",
        ],
    ),
];

#[test]
fn a_failure_at_each_step_is_rolled_back_in_order() {
    for (step, undo) in STEPS {
        let k = node();
        k.fail(step);
        let e = k.add(&args(&conf())).expect_err(step);
        let log = k.take_log();
        // The failed call was the last change; everything after it is the rollback.
        let rollback: Vec<&str> = log
            .iter()
            .map(String::as_str)
            .filter(|l| {
                ["fw: teardown", "host: delete_link", "ipam: DEL"]
                    .iter()
                    .any(|u| l.starts_with(u))
            })
            .collect();
        assert_eq!(rollback.len(), undo.len(), "{step}: {e}\n{log:#?}");
        assert_in_order(&log, undo);
        assert_clean(&k);
    }
}

#[test]
fn failures_carry_the_reference_message_and_the_errno() {
    let k = node();
    k.fail("host: set_master");
    let e = k.add(&args(&conf())).unwrap_err();
    assert_eq!(e.errno(), Some(1));
    let wire = libcni::Error::from(e);
    assert_eq!(wire.code, 999);
    assert!(
        wire.msg.starts_with("failed to connect \"veth")
            && wire.msg.contains("\" to bridge cni0: "),
        "{}",
        wire.msg
    );

    let k = node();
    k.fail("host: create_bridge");
    let e = libcni::Error::from(k.add(&args(&conf())).unwrap_err());
    assert!(
        e.msg
            .starts_with("failed to create bridge \"cni0\": could not add \"cni0\": ")
    );

    // IPAM's own error comes back as it is, code included.
    let k = node();
    k.fail("ipam: ADD");
    let e = libcni::Error::from(k.add(&args(&conf())).unwrap_err());
    assert_eq!((e.code, e.msg.as_str()), (11, "fake IPAM ADD failure"));
}

#[test]
fn a_link_failure_and_an_ipam_failure_are_both_reported() {
    let k = node();
    k.fail("host: create_veth");
    k.fail("ipam: ADD");
    let e = libcni::Error::from(k.add(&args(&conf())).unwrap_err());
    // The link's error first (the reference's order), with its code.
    assert_eq!(e.code, 999, "{}", e.msg);
    assert!(
        e.msg.starts_with("failed to make veth pair for \"eth0\": ")
            && e.msg.ends_with("; fake IPAM ADD failure"),
        "{}",
        e.msg
    );
    // IPAM failed: there is no lease to release.
    assert!(!k.take_log().iter().any(|l| l.starts_with("ipam: DEL")));
    assert_clean(&k);
}

#[test]
fn a_container_address_failure_and_a_masquerade_failure_are_both_reported() {
    let k = node();
    k.fail("/run/netns/ctr: add_address");
    k.fail("fw: setup ipmasq");
    let e = libcni::Error::from(k.add(&args(&conf())).unwrap_err());
    let parts: Vec<&str> = e.msg.split("; ").collect();
    assert_eq!(parts.len(), 2, "{}", e.msg);
    assert!(parts[0].contains("add_address"), "{}", e.msg);
    assert!(parts[1].contains("setup ipmasq"), "{}", e.msg);
    // Its rules may be half made: they are removed by name, as is everything else.
    assert!(
        k.take_log()
            .iter()
            .any(|l| l.starts_with("fw: teardown ipmasq"))
    );
    assert_clean(&k);
}

#[test]
fn no_masquerade_tool_is_started_without_addresses_or_masquerade() {
    // L2: no IPAM, so no address to masquerade even with ipMasq.
    let l2 = conf_with(&[("ipam", json!({})), ("isGateway", json!(false))]);
    for conf in [l2, conf_with(&[("ipMasq", json!(false))])] {
        let k = node();
        k.add(&args(&conf)).unwrap();
        let log = k.take_log();
        assert!(
            !log.iter().any(|l| l.contains("ipmasq")),
            "{conf}\n{log:#?}"
        );
    }
}

#[test]
fn best_effort_sysctls_do_not_fail_add() {
    let k = node();
    k.fail(&format!("{CTR}: sysctl net.ipv4.conf.eth0.arp_notify"));
    k.fail("host: sysctl net.ipv6.conf.cni0.accept_ra");
    k.add(&args(&conf())).unwrap();
}

#[test]
fn an_existing_container_interface_is_refused_before_anything_is_made() {
    let k = node();
    use hostnet::kernel::Kernel;
    let ctr = hostnet::kernel::fake::FakeNetns(CTR.into());
    let host = k.host().unwrap();
    k.create_veth(&host, "vethx", "eth0", None, None, &ctr)
        .unwrap();
    k.take_log();
    let e = libcni::Error::from(k.add(&args(&conf())).unwrap_err());
    assert_eq!(e.msg, "container veth name (\"eth0\") already exists");
    let log = k.take_log();
    assert!(
        !log.iter()
            .any(|l| l.contains("create_veth") || l.starts_with("ipam")),
        "{log:#?}"
    );
}

#[test]
fn a_bridge_address_failure_carries_the_reference_prefix() {
    let k = node();
    // The first link_by_index is the bridge's re-read after its gateway address went on.
    k.fail("host: link_by_index");
    let e = libcni::Error::from(k.add(&args(&conf())).unwrap_err());
    assert!(
        e.msg
            .starts_with("failed to set bridge addr: could not lookup bridge: "),
        "{}",
        e.msg
    );
    assert_clean(&k);
}
