//! DEL: success after cleaning what can be cleaned, with each piece missing; a host veth
//! goes on prevResult's word only when it provably is this attachment's; every failure
//! is reported.

use super::*;

fn del(k: &Node, conf: &str, netns: &str) -> Result<(), crate::error::BridgeError> {
    let mut a = args(conf);
    a.netns = netns.into();
    k.del(&a)
}

/// Breaks the container side without touching the host end: the container interface is
/// renamed (DEL finds no `eth0` in a living namespace).
fn rename_container_iface(k: &Node) {
    k.edit_link(CTR, "eth0", |l| l.name = "eth9".into());
}

#[test]
fn removes_everything_and_a_second_del_is_fine() {
    let (k, result) = added();
    del(&k, &conf_prev(&result), CTR).unwrap();
    assert_clean(&k);
    del(&k, &conf_prev(&result), CTR).unwrap();
    del(&k, &conf(), CTR).unwrap();
    assert_clean(&k);
}

#[test]
fn without_prev_result_the_link_goes_before_the_ip() {
    let (k, _) = added();
    del(&k, &conf(), CTR).unwrap();
    assert_in_order(
        &k.take_log(),
        &[&format!("{CTR}: delete_link eth0"), "ipam: DEL"],
    );
    assert_clean(&k);
}

#[test]
fn a_gone_namespace_is_success_after_the_rest_is_cleaned() {
    for prev in [true, false] {
        let (k, result) = added();
        k.remove_netns(CTR);
        let conf = if prev { conf_prev(&result) } else { conf() };
        del(&k, &conf, CTR).unwrap();
        assert_clean(&k);
    }
}

#[test]
fn an_unreachable_namespace_leaves_the_host_end_to_prev_result() {
    // Empty CNI_NETNS: the container side cannot be reached, its namespace may live on.
    let (k, result) = added();
    let veth = host_veth(&result);
    del(&k, &conf_prev(&result), "").unwrap();
    assert!(k.take_log().contains(&format!("host: delete_link {veth}")));
    assert_clean(&k);
}

#[test]
fn a_namespace_without_the_link_still_loses_our_host_end() {
    let (k, result) = added();
    rename_container_iface(&k);
    del(&k, &conf_prev(&result), CTR).unwrap();
    assert!(k.link(HOST, &host_veth(&result)).is_none());
    assert!(!k.ipam.leased());
}

#[test]
fn a_host_veth_that_is_not_ours_is_left_alone() {
    // Its MAC is not the one prevResult recorded (a reused name).
    let (k, result) = added();
    let veth = host_veth(&result);
    rename_container_iface(&k);
    k.edit_link(HOST, &veth, |l| l.mac = Some([2, 9, 9, 9, 9, 9]));
    del(&k, &conf_prev(&result), CTR).unwrap();
    assert!(k.link(HOST, &veth).is_some());

    // Its peer lives in another namespace than the one this DEL names.
    let (k, result) = added();
    let veth = host_veth(&result);
    rename_container_iface(&k);
    k.add_netns("/run/netns/other");
    let other = k.state().namespaces["/run/netns/other"].id;
    k.edit_link(HOST, &veth, |l| l.peer_netns_id = Some(other));
    del(&k, &conf_prev(&result), CTR).unwrap();
    assert!(k.link(HOST, &veth).is_some());

    // prevResult records no MAC for it.
    let (k, mut result) = added();
    let veth = host_veth(&result);
    rename_container_iface(&k);
    result.interfaces[1].mac.clear();
    del(&k, &conf_prev(&result), CTR).unwrap();
    assert!(k.link(HOST, &veth).is_some());
    // The rest is cleaned all the same.
    assert!(!k.ipam.leased());
    assert!(k.state().rules.is_empty());
}

#[test]
fn a_gone_ip_record_or_firewall_rule_is_no_failure() {
    let (k, result) = added();
    k.ipam.set_leased(false);
    k.state().rules.clear();
    del(&k, &conf_prev(&result), CTR).unwrap();
    assert_clean(&k);
}

#[test]
fn every_failure_is_reported_and_every_step_runs() {
    let (k, result) = added();
    k.fail("fw: teardown spoofcheck");
    k.fail("ipam: DEL");
    let e = libcni::Error::from(del(&k, &conf_prev(&result), CTR).unwrap_err());
    // In step order: links, IPAM, spoof check, masquerade; the first failure's code.
    assert_eq!(e.code, 11);
    assert_eq!(
        e.msg,
        "fake IPAM DEL failure; failed to remove mac spoof check: \
         failed to run fw: teardown spoofcheck c1 eth0: Operation not permitted (os error 1)"
    );
    let st = k.state();
    assert_eq!(st.rules.iter().collect::<Vec<_>>(), ["spoofcheck c1 eth0"]);
    assert!(st.namespaces[CTR].links.is_empty());
}

#[test]
fn one_failure_reads_as_before() {
    let (k, result) = added();
    k.fail("fw: teardown ipmasq");
    let e = libcni::Error::from(del(&k, &conf_prev(&result), CTR).unwrap_err());
    assert_eq!(
        e.msg,
        "failed to remove IP masquerading: \
         failed to run fw: teardown ipmasq net c1 eth0: Operation not permitted (os error 1)"
    );
    assert!(!k.ipam.leased());
}

#[test]
fn without_prev_result_a_failed_link_delete_stops_del() {
    // The masquerade rules are known by the link's addresses; the IP stays leased while
    // the link may still use it, and the runtime retries.
    let (k, _) = added();
    k.fail(&format!("{CTR}: delete_link eth0"));
    let e = libcni::Error::from(del(&k, &conf(), CTR).unwrap_err());
    assert!(
        e.msg.starts_with("failed to delete \"eth0\": "),
        "{}",
        e.msg
    );
    assert!(k.ipam.leased());
    assert!(!k.take_log().iter().any(|l| l.starts_with("ipam")));
}

#[test]
fn a_gone_host_veth_is_no_failure() {
    let drop_host_end = |k: &Node, veth: &str| {
        let mut st = k.state();
        let host = st.namespaces.get_mut(HOST).unwrap();
        host.links.retain(|l| l.name != veth);
    };
    // The container end is still there: it goes, the rest is cleaned.
    let (k, result) = added();
    drop_host_end(&k, &host_veth(&result));
    del(&k, &conf_prev(&result), CTR).unwrap();
    assert_clean(&k);
    // Neither end is found: nothing to delete, the rest is cleaned.
    let (k, result) = added();
    drop_host_end(&k, &host_veth(&result));
    rename_container_iface(&k);
    del(&k, &conf_prev(&result), CTR).unwrap();
    assert!(!k.ipam.leased());
    assert!(k.state().rules.is_empty());
}
