//! Privileged tests of [`NodeNet::watch`] on the real kernel, in a namespace of the test's:
//! someone else's changes to our objects are told, our own and others' objects are not, a
//! drop ends the thread, a large batch of ours (made out of the nf_tables group) is
//! followed by a re-check.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::tests::{Ns, ip, net, policy, watched};
use super::{
    Drift, FamilyPolicy, NodeNet, NodePolicy, OverlayPeer, PodRoute, VXLAN_DEVICE, VxlanSpec,
};
use testkit::{available, privileged};

/// The next notification (a bounded wait for it: the kernel tells at once).
fn told(rx: &Receiver<Drift>) -> Drift {
    rx.recv_timeout(Duration::from_secs(5))
        .expect("a notification")
}

/// Notifications until one with `firewall` (the test's marker); what came before it.
fn until_firewall(rx: &Receiver<Drift>) -> Drift {
    let mut before = Drift::default();
    loop {
        let d = told(rx);
        if d.firewall {
            return before.union(Drift {
                firewall: false,
                ..d
            });
        }
        before = before.union(d);
    }
}

const ROUTES: Drift = Drift {
    routes: true,
    overlay: true,
    firewall: false,
    policy: false,
    lost: false,
};
const OVERLAY: Drift = Drift {
    routes: false,
    overlay: true,
    firewall: false,
    policy: false,
    lost: false,
};

#[test]
#[ignore = "needs root"]
fn someone_elses_changes_to_our_objects_are_told_and_our_own_are_not() {
    let test = "someone_elses_changes_to_our_objects_are_told_and_our_own_are_not";
    if !privileged(test) {
        return;
    }
    let (node, peer) = (Ns::new(), Ns::new());
    if !available(
        test,
        "nft and iptables-nft (apt-get install nftables iptables)",
        node.run("nft", &["--version"]).is_some()
            && node
                .run("iptables", &["--version"])
                .is_some_and(|v| v.contains("nf_tables")),
    ) {
        return;
    }
    node.link(
        "lan0",
        &["192.168.50.1/24"],
        &peer,
        "lan0",
        &["192.168.50.2/24"],
    );
    // iptables' FORWARD chain, where our accepts go.
    node.sh("iptables", &["-P", "FORWARD", "DROP"]);
    let k = node.node();
    let (watch, rx) = watched(&k);

    // Our own changes, and someone else's route that is not ours: nothing told. The
    // marker (someone else deletes our table) is the first thing told.
    let r = |dst: &str| PodRoute {
        dst: net(dst),
        gateway: ip("192.168.50.2"),
    };
    k.add_route(&r("10.1.0.0/24")).unwrap();
    assert!(k.add_routes(&[r("10.2.0.0/24")])[0].is_ok());
    k.del_route(&r("10.2.0.0/24")).unwrap();
    let policy = NodePolicy {
        v4: Some(FamilyPolicy {
            pod_cidrs: vec![net("10.0.0.0/24")],
            no_masquerade: vec![net("10.0.0.0/16")],
        }),
        v6: None,
        pods_on: "cni0".into(),
    };
    k.apply_firewall(&policy).unwrap();
    node.sh(
        "ip",
        &["route", "add", "10.9.0.0/24", "via", "192.168.50.2"],
    );
    node.sh("nft", &["delete", "table", "inet", "cni-rs"]);
    assert_eq!(until_firewall(&rx), Drift::default());

    // Someone else deletes our route (NetworkManager, systemd-networkd).
    node.sh("ip", &["route", "del", "10.1.0.0/24", "proto", "0xcb"]);
    assert_eq!(told(&rx), ROUTES);
    // A firewall reload flushes FORWARD, our accepts with it.
    k.apply_firewall(&policy).unwrap();
    node.sh("iptables", &["-F", "FORWARD"]);
    assert_eq!(
        told(&rx),
        Drift {
            firewall: true,
            ..Drift::default()
        }
    );

    // Our device and a peer: what our own changes tell (at most "look at the overlay
    // again") comes before the marker.
    let spec = VxlanSpec {
        vni: 7,
        port: 8472,
        local: ip("192.168.50.1"),
        underlay_mtu: 1500,
        addr4: None,
        addr6: None,
    };
    let peer_ip = ip("192.168.60.9");
    let add_device = || {
        k.ensure_vxlan(&spec).unwrap();
        k.add_overlay_peer(&OverlayPeer::new(peer_ip, vec![net("10.244.8.0/24")]))
            .unwrap();
        // One transaction: one burst.
        node.sh("nft", &["add table inet cni-rs; delete table inet cni-rs"]);
        let echo = until_firewall(&rx);
        assert!(!echo.routes && !echo.lost, "{echo:?}");
    };
    add_device();
    // Its neighbour entry deleted.
    node.sh("ip", &["neigh", "del", "10.244.8.0", "dev", VXLAN_DEVICE]);
    assert_eq!(told(&rx), OVERLAY);
    // Its FDB entry deleted.
    add_device();
    let mac = OverlayPeer::new(peer_ip, vec![]).mac();
    let mac: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    let mac = mac.join(":");
    node.sh(
        "bridge",
        &[
            "fdb",
            "del",
            &mac,
            "dev",
            VXLAN_DEVICE,
            "dst",
            "192.168.60.9",
        ],
    );
    assert_eq!(told(&rx), OVERLAY);
    // The device deleted, or set down: the routes through it went too.
    node.sh("ip", &["link", "del", VXLAN_DEVICE]);
    assert_eq!(told(&rx), ROUTES);
    add_device();
    node.sh("ip", &["link", "set", VXLAN_DEVICE, "down"]);
    assert_eq!(told(&rx), ROUTES);
    // The uplink set down (our IPv4 routes through it go without a word from the kernel)
    // and up again (they can be added back).
    node.sh("ip", &["link", "set", "lan0", "down"]);
    assert_eq!(told(&rx), ROUTES);
    node.sh("ip", &["link", "set", "lan0", "up"]);
    assert_eq!(told(&rx), ROUTES);

    // Dropped: the thread ends (and with it the sender it held).
    drop(watch);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)),
        Err(RecvTimeoutError::Disconnected)
    );
}

#[test]
#[ignore = "needs root"]
fn a_large_batch_is_compared_after_only_if_someone_else_committed_meanwhile() {
    let test = "a_large_batch_is_compared_after_only_if_someone_else_committed_meanwhile";
    if !privileged(test) {
        return;
    }
    let node = Ns::new();
    if !available(
        test,
        "nft (apt-get install nftables)",
        node.run("nft", &["--version"]).is_some(),
    ) {
        return;
    }
    use super::PolicyNet;
    use netpol::addr::Family;
    use netpol::program::{Elem, Program, Set, SetKind};
    let k = node.node();
    let (_watch, rx) = watched(&k);
    // `n` addresses from 10.0.0.0.
    let addrs = |n: u32| {
        (0..n)
            .map(|i| Elem::Addr(std::net::Ipv4Addr::from(0x0a00_0000 + i).into()))
            .collect()
    };
    let mut program = Program::default();
    program.sets.insert(
        "peer-test-pods4".into(),
        Set {
            kind: SetKind::Addrs(Family::V4),
            elems: addrs(5000),
        },
    );
    // Past QUIET_ELEMS: the watch leaves the nf_tables group for the batch. The ruleset's
    // generation moved by our commit alone: nothing to compare (the marker, a foreign
    // delete of the firewall table, comes first).
    k.replace_policy(&program).unwrap();
    k.apply_firewall(&policy()).unwrap();
    node.sh("nft", &["delete", "table", "inet", "cni-rs"]);
    assert_eq!(
        until_firewall(&rx),
        Drift::default(),
        "a large batch of ours alone"
    );
    // Someone else commits while the watch is out of the group: unseen, so our tables
    // are to be compared.
    k.with_nft(super::Op::ReplacePolicy, |nf| {
        k.quiet_batch(nf, 1 << 20, |nf| {
            node.sh("nft", &["add", "table", "inet", "someone-else"]);
            nf.batch(&crate::policy::replace_batch(&program)?)
        })
    })
    .unwrap();
    let d = told(&rx);
    assert!(
        d.policy && d.firewall,
        "after a foreign commit meanwhile: {d:?}"
    );
    // Back in the group: someone else's change is told again.
    node.sh("nft", &["delete", "table", "inet", "cni-rs-netpol"]);
    assert!(told(&rx).policy, "a foreign delete after the batch");
    // A small batch of ours: nothing told (the marker, a foreign delete, comes first).
    program.sets.get_mut("peer-test-pods4").unwrap().elems = addrs(10);
    k.replace_policy(&program).unwrap();
    k.apply_firewall(&policy()).unwrap();
    node.sh("nft", &["delete", "table", "inet", "cni-rs"]);
    assert_eq!(until_firewall(&rx), Drift::default());
}
