//! Traffic through the bridge, masquerading to an "outside" with no route back, and
//! 50 concurrent ADDs racing to create the bridge.

#[path = "bridge_support/mod.rs"]
mod support;

use cni_tests::NamedNetns;
use serde_json::json;
use support::*;
use testkit::privileged;

fn bare(cidr: &str) -> &str {
    cidr.split('/').next().unwrap()
}

#[test]
#[ignore = "needs root"]
fn two_containers_reach_each_other_and_the_gateway() {
    if !privileged("two_containers_reach_each_other_and_the_gateway") {
        return;
    }
    let env = Env::new("ping");
    let conf = env.conf("1.1.0", &["10.1.4.0/24", "fd00:4::/64"], json!({}));
    let (c1, c2) = (NamedNetns::new("ctr"), NamedNetns::new("ctr"));
    let r1 = env.add(&c1, "c1", &conf);
    // A successful ADD means the container can talk: the gateway address is usable at
    // once (added without DAD), so the very first ping gets through.
    assert_eq!(tentative_addrs(&env.host, BRIDGE), Vec::<String>::new());
    assert!(ping(&c1, "fd00:4::1"), "ping v6 gateway right after ADD");
    let r2 = env.add(&c2, "c2", &conf);
    for (from, to) in [(&c1, &r2), (&c2, &r1)] {
        for ip in result_ips(to) {
            assert!(ping(from, bare(&ip)), "ping {ip}");
        }
        assert!(ping(from, "10.1.4.1"), "ping gateway");
        assert!(ping(from, "fd00:4::1"), "ping v6 gateway");
    }
    env.del(&c1, "c1", &conf);
    env.del(&c2, "c2", &conf);
    env.assert_clean();
}

#[test]
#[ignore = "needs root"]
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
#[ignore = "needs root"]
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
        let all = ctrs.iter().enumerate().map(|(i, c)| (format!("c{i}"), c));
        env.run_concurrently(cmd, &conf, all)
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

/// Global addresses of `dev` in `ns` still doing DAD (IPv6 only has DAD).
fn tentative_addrs(ns: &NamedNetns, dev: &str) -> Vec<String> {
    global_addr_info(ns, dev)
        .iter()
        .filter(|a| a["tentative"] == true)
        .map(|a| a["local"].as_str().unwrap().to_string())
        .collect()
}

/// 50 ADDs at once with the nftables backend and the spoof check: every `nft` transaction
/// rewrites the shared `postrouting` chain, and none may lose another container's rule.
/// Then ADDs and DELs race each other on the same bridge.
#[test]
#[ignore = "needs root"]
fn fifty_concurrent_adds_with_nftables_keep_every_rule() {
    if !privileged("fifty_concurrent_adds_with_nftables_keep_every_rule") {
        return;
    }
    const N: usize = 50;
    let env = Env::new("concnft");
    let conf = env.conf(
        "1.0.0",
        &["10.1.8.0/24"],
        json!({"ipMasq": true, "ipMasqBackend": "nftables", "macspoofchk": true}),
    );
    let ctrs: Vec<NamedNetns> = (0..N + N / 2).map(|_| NamedNetns::new("ctr")).collect();
    let run = |cmd: &str, range: std::ops::Range<usize>| {
        let some = range.map(|i| (format!("c{i}"), &ctrs[i]));
        env.run_concurrently(cmd, &conf, some)
    };
    for out in run("ADD", 0..N) {
        out.assert_success();
    }
    let count = |ruleset: &str, what: &str| ruleset.lines().filter(|l| l.contains(what)).count();
    let nft = env.nft_ruleset();
    assert_eq!(count(&nft, "masquerade comment"), N, "{nft}");
    assert_eq!(count(&nft, "goto masq_checks"), 1, "{nft}");
    assert_eq!(count(&nft, "iifname \"veth"), N, "{nft}");
    // Half the containers go while as many new ones come.
    let (dels, adds) = std::thread::scope(|s| {
        let d = s.spawn(|| run("DEL", 0..N / 2));
        let a = s.spawn(|| run("ADD", N..N + N / 2));
        (d.join().unwrap(), a.join().unwrap())
    });
    for out in dels.iter().chain(&adds) {
        out.assert_success();
    }
    let nft = env.nft_ruleset();
    assert_eq!(count(&nft, "masquerade comment"), N, "{nft}");
    assert_eq!(count(&nft, "iifname \"veth"), N, "{nft}");
    for out in run("DEL", N / 2..N + N / 2) {
        out.assert_success();
    }
    env.assert_clean();
}
