//! The loopback's decisions on hostnet's fake kernel, no root: what ADD brings up and
//! reports, what it refuses, CHECK's verdict, and that DEL never fails.

use hostnet::kernel::fake::FakeKernel;
use libcni::skel::CmdArgs;
use libcni::version::Version;

const CTR: &str = "/run/netns/ctr";

fn args(netns: &str, conf: &str) -> CmdArgs {
    CmdArgs {
        container_id: "c1".into(),
        netns: netns.into(),
        ifname: "lo".into(),
        args: String::new(),
        path: "/nonexistent".into(),
        stdin_data: conf.as_bytes().to_vec(),
        version: Version(1, 0, 0),
        opened_netns: Default::default(),
    }
}

const CONF: &str = r#"{"cniVersion":"1.0.0","name":"lo","type":"loopback"}"#;

/// A container namespace whose `lo` holds `addrs`.
fn node(addrs: &[&str]) -> FakeKernel {
    let k = FakeKernel::new();
    k.add_netns(CTR);
    k.add_loopback(CTR, addrs);
    k
}

#[test]
fn add_brings_lo_up_and_reports_its_first_address_of_each_family() {
    let k = node(&["127.0.0.1/8", "127.0.0.2/8", "::1/128"]);
    let result = crate::add::add(&k, &args(CTR, CONF)).unwrap();
    assert_eq!(k.take_log(), [format!("{CTR}: set_up lo")]);
    assert!(k.link(CTR, "lo").unwrap().admin_up);
    let ips: Vec<String> = result.ips.iter().map(|ip| ip.address.to_string()).collect();
    assert_eq!(ips, ["127.0.0.1/8", "::1/128"]);
    assert_eq!(result.interfaces[0].sandbox, CTR);
    // IPv6 disabled: no ::1, no IPv6 entry.
    let k = node(&["127.0.0.1/8"]);
    let result = crate::add::add(&k, &args(CTR, CONF)).unwrap();
    assert_eq!(result.ips.len(), 1);
}

#[test]
fn add_refuses_an_address_that_is_not_loopback_after_lo_is_up() {
    let k = node(&["127.0.0.1/8", "10.1.2.3/24"]);
    let e = crate::add::add(&k, &args(CTR, CONF)).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (
            999,
            r#"loopback interface found with non-loopback address "10.1.2.3""#
        )
    );
    // As in the reference, lo is up by then.
    assert_eq!(k.take_log(), [format!("{CTR}: set_up lo")]);
}

#[test]
fn add_fails_without_a_namespace_or_lo_and_changes_nothing() {
    let k = node(&[]);
    let e = crate::add::add(&k, &args("/run/netns/gone", CONF)).unwrap_err();
    assert_eq!(
        e.msg,
        r#"failed to Statfs "/run/netns/gone": no such file or directory"#
    );
    let k = FakeKernel::new();
    k.add_netns(CTR);
    let e = crate::add::add(&k, &args(CTR, CONF)).unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (999, "Link not found"));
    // A prevResult that cannot be read is refused before lo is touched.
    let k = node(&["127.0.0.1/8"]);
    let bad = r#"{"cniVersion":"1.0.0","name":"lo","type":"loopback","prevResult":{"ips":7}}"#;
    let e = crate::add::add(&k, &args(CTR, bad)).unwrap_err();
    assert!(
        e.msg.starts_with("failed to parse prevResult: "),
        "{}",
        e.msg
    );
    assert!(k.take_log().is_empty());
}

#[test]
fn check_wants_lo_up() {
    let k = node(&["127.0.0.1/8"]);
    let e = libcni::Error::from(crate::lo::check(&k, &args(CTR, CONF)).unwrap_err());
    assert_eq!(e.msg, "loopback interface is down");
    crate::add::add(&k, &args(CTR, CONF)).unwrap();
    crate::lo::check(&k, &args(CTR, CONF)).unwrap();
}

#[test]
fn del_sets_lo_down_and_never_fails() {
    let k = node(&["127.0.0.1/8"]);
    crate::add::add(&k, &args(CTR, CONF)).unwrap();
    k.take_log();
    crate::lo::del(&k, &args(CTR, CONF));
    assert_eq!(k.take_log(), [format!("{CTR}: set_down lo")]);
    assert!(!k.link(CTR, "lo").unwrap().admin_up);
    // lo refusing, the namespace gone or not given: nothing happens, and no error.
    k.fail(&format!("{CTR}: set_down lo"));
    crate::lo::del(&k, &args(CTR, CONF));
    crate::lo::del(&k, &args("/run/netns/gone", CONF));
    crate::lo::del(&k, &args("", CONF));
    assert!(k.take_log().is_empty());
}
