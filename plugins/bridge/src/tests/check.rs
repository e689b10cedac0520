//! CHECK: what it notices when the node no longer matches the ADD result.

use super::*;

fn check(k: &Node, result: &CniResult) -> Result<(), libcni::Error> {
    Ok(k.check(&args(&conf_prev(result)))?)
}

#[test]
fn passes_right_after_add_and_asks_ipam_first() {
    let (k, result) = added();
    check(&k, &result).unwrap();
    assert_eq!(k.take_log(), ["ipam: CHECK"]);
}

#[test]
fn each_drift_is_noticed() {
    type Drift = fn(&Node, &str);
    let cases: &[(&str, Drift, &str)] = &[
        (
            "bridge MAC",
            |k, _| k.edit_link(HOST, "cni0", |l| l.mac = Some([2, 1, 1, 1, 1, 1])),
            "Bridge interface cni0 Mac doesn't match: ",
        ),
        (
            "bridge promisc",
            |k, _| k.edit_link(HOST, "cni0", |l| l.promisc = true),
            "Bridge interface cni0 configured Promisc Mode false doesn't match current state: true",
        ),
        (
            "bridge kind",
            |k, _| k.edit_link(HOST, "cni0", |l| l.kind = Some("veth".into())),
            "Interface cni0 does not have link type of bridge",
        ),
        (
            "container interface gone",
            |k, _| k.edit_link(CTR, "eth0", |l| l.name = "eth9".into()),
            "CNI created interface in container eth0 not found",
        ),
        (
            "container MAC",
            |k, _| k.edit_link(CTR, "eth0", |l| l.mac = Some([2, 1, 1, 1, 1, 1])),
            "Interface eth0 Mac ",
        ),
        (
            "port left the bridge",
            |k, veth| k.edit_link(HOST, veth, |l| l.master = None),
            "veth veth",
        ),
        (
            "hairpin",
            |k, veth| k.edit_link(HOST, veth, |l| l.hairpin = Some(true)),
            "bridge port veth",
        ),
        (
            "spoof check rules",
            |k, _| {
                k.state().rules.remove("spoofcheck c1 eth0");
            },
            "mac spoof check rules for veth",
        ),
        (
            "masquerade rules",
            |k, _| {
                k.state().rules.remove("ipmasq net c1 eth0");
            },
            "masquerade rules for \"c1\" are missing",
        ),
        (
            "container address",
            |k, _| {
                let mut st = k.state();
                st.namespaces.get_mut(CTR).unwrap().addrs.clear();
            },
            "Failed to match addr 10.1.0.5/24 on interface eth0",
        ),
        (
            "container route",
            |k, _| {
                let mut st = k.state();
                st.namespaces.get_mut(CTR).unwrap().routes.clear();
            },
            "Expected route 0.0.0.0/0 not found in the container",
        ),
    ];
    for (what, drift, want) in cases {
        let (k, result) = added();
        drift(&k, &host_veth(&result));
        let e = check(&k, &result).expect_err(what);
        assert_eq!(e.code, 999, "{what}");
        assert!(e.msg.starts_with(want), "{what}: {}", e.msg);
    }
}

#[test]
fn a_result_from_another_sandbox_or_without_the_bridge_is_refused() {
    let (k, mut result) = added();
    result.interfaces[2].sandbox = "/run/netns/other".into();
    let e = check(&k, &result).unwrap_err();
    assert_eq!(
        e.msg,
        "Sandbox in prevResult doesn't match configured netns: /run/netns/ctr"
    );
    let (k, mut result) = added();
    result.interfaces.remove(0);
    let e = check(&k, &result).unwrap_err();
    assert_eq!(
        e.msg,
        "CNI created bridge cni0 in host namespace was not found"
    );
}

#[test]
fn ipam_and_firewall_read_failures_are_errors() {
    let (k, result) = added();
    k.fail("ipam: CHECK");
    assert_eq!(check(&k, &result).unwrap_err().code, 11);
    let (k, result) = added();
    k.fail("fw: check ipmasq");
    let e = check(&k, &result).unwrap_err();
    assert!(
        e.msg.starts_with("failed to read masquerade rules: "),
        "{}",
        e.msg
    );
}
