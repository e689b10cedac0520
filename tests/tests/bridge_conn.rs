//! Traffic through the bridge, masquerading to an "outside" with no route back, and
//! 50 concurrent ADDs racing to create the bridge.

#[path = "bridge_support.rs"]
mod support;

use cni_tests::NamedNetns;
use libcni::testutil::privileged;
use serde_json::json;
use support::*;

fn bare(cidr: &str) -> &str {
    cidr.split('/').next().unwrap()
}

#[test]
fn two_containers_reach_each_other_and_the_gateway() {
    if !privileged("two_containers_reach_each_other_and_the_gateway") {
        return;
    }
    let env = Env::new("ping");
    let conf = env.conf("1.1.0", &["10.1.4.0/24", "fd00:4::/64"], json!({}));
    let (c1, c2) = (NamedNetns::new("ctr"), NamedNetns::new("ctr"));
    let r1 = env.add(&c1, "c1", &conf);
    let r2 = env.add(&c2, "c2", &conf);
    for (from, to) in [(&c1, &r2), (&c2, &r1)] {
        for ip in result_ips(to) {
            assert!(ping(from, bare(&ip)), "ping {ip}");
        }
        assert!(ping(from, "10.1.4.1"), "ping gateway");
        // The bridge's own address goes through DAD (as in the reference): allow it time.
        let v6_gw = (0..10).any(|_| ping(from, "fd00:4::1"));
        assert!(v6_gw, "ping v6 gateway");
    }
    env.del(&c1, "c1", &conf);
    env.del(&c2, "c2", &conf);
    env.assert_clean();
}

#[test]
fn ipmasq_reaches_an_outside_without_route_back() {
    if !privileged("ipmasq_reaches_an_outside_without_route_back") {
        return;
    }
    for backend in ["iptables", "nftables"] {
        let env = Env::new("out");
        let outside = NamedNetns::new("outside");
        // host up0 192.0.2.1/24 <-> outside out0 192.0.2.2/24; outside knows no pod CIDR.
        env.host.exec_in(&[
            "ip",
            "link",
            "add",
            "up0",
            "type",
            "veth",
            "peer",
            "name",
            "out0",
            "netns",
            outside.name(),
        ]);
        env.host
            .exec_in(&["ip", "addr", "add", "192.0.2.1/24", "dev", "up0"]);
        env.host.exec_in(&["ip", "link", "set", "up0", "up"]);
        outside.exec_in(&["ip", "addr", "add", "192.0.2.2/24", "dev", "out0"]);
        outside.exec_in(&["ip", "link", "set", "out0", "up"]);
        outside.exec_in(&["ip", "link", "set", "lo", "up"]);

        let masq = env.conf(
            "1.0.0",
            &["10.1.5.0/24"],
            json!({"ipMasq": true, "ipMasqBackend": backend}),
        );
        // Another network on its own bridge and subnet, without masquerading.
        let plain = merge(
            env.conf("1.0.0", &["10.1.7.0/24"], json!({})),
            json!({"name": "plainnet", "bridge": "bridge1"}),
        );
        let (c1, c2) = (NamedNetns::new("ctr"), NamedNetns::new("ctr"));
        let r1 = env.add(&c1, "masq", &masq);
        env.add(&c2, "plain", &plain);
        assert!(ping(&c1, "192.0.2.2"), "{backend}: masqueraded ping");
        assert!(
            !ping(&c2, "192.0.2.2"),
            "unmasqueraded ping has no way back"
        );
        env.del(&c1, "masq", &with_prev(&masq, &r1));
        env.del(&c2, "plain", &plain);
        env.host.exec_in(&["ip", "link", "del", "up0"]);
        env.host.exec_in(&["ip", "link", "del", "bridge1"]);
        env.assert_clean();
    }
}

#[test]
fn fifty_concurrent_adds_create_one_bridge() {
    if !privileged("fifty_concurrent_adds_create_one_bridge") {
        return;
    }
    const N: usize = 50;
    let env = Env::new("conc");
    let conf = env.conf(
        "1.0.0",
        &["10.1.6.0/24"],
        json!({"ipMasq": true, "ipMasqBackend": "iptables"}),
    );
    let ctrs: Vec<NamedNetns> = (0..N).map(|_| NamedNetns::new("ctr")).collect();
    assert!(env.link(BRIDGE).is_none());
    let run_all = |cmd: &str| {
        std::thread::scope(|s| {
            let handles: Vec<_> = ctrs
                .iter()
                .enumerate()
                .map(|(i, ctr)| {
                    let (env, conf) = (&env, &conf);
                    s.spawn(move || env.run(cmd, ctr, &format!("c{i}"), conf))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    };
    let adds = run_all("ADD");
    let mut ips: Vec<String> = adds
        .iter()
        .flat_map(|o| result_ips(&o.assert_success().json()))
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), N, "distinct addresses");
    assert_eq!(env.links().len(), 2 + N);
    assert_eq!(env.ip_files().len(), N);
    for out in run_all("DEL") {
        out.assert_success();
    }
    env.assert_clean();
}
