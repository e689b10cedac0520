//! ipMasq, iptables backend, against the kernel.

use super::support::{ips, nat_rules, netns_test, run_ok};
use crate::firewall::iptables;
use crate::firewall::names::iptables_chain;

const NET: &str = "fwtest";
const ID: &str = "ctr1";

/// `nat_rules` after setup of NET/ID with 10.88.0.5/16 (v4) or fd00:88::5/64 (v6).
fn expected(chain: &str, v6: bool) -> Vec<String> {
    let c = r#""name: \"fwtest\" id: \"ctr1\"""#;
    let (src, dst, multicast) = if v6 {
        ("fd00:88::5/128", "fd00:88::/64", "ff00::/8")
    } else {
        ("10.88.0.5/32", "10.88.0.0/16", "224.0.0.0/4")
    };
    vec![
        format!(":{chain} - [0:0]"),
        format!("-A POSTROUTING -s {src} -m comment --comment {c} -j {chain}"),
        format!("-A {chain} -d {dst} -m comment --comment {c} -j ACCEPT"),
        format!("-A {chain} ! -d {multicast} -m comment --comment {c} -j MASQUERADE"),
    ]
}

/// `iptables -w -t nat ARGS...`, which must succeed.
fn ipt_nat(args: &[&str]) {
    run_ok("iptables", &[&["-w", "-t", "nat"], args].concat());
}

#[test]
#[ignore = "needs root"]
fn iptables_setup_exact_idempotent_check_teardown() {
    netns_test("iptables_setup_exact_idempotent_check_teardown", || {
        let addrs = ips(&["10.88.0.5/16", "fd00:88::5/64"]);
        let chain = iptables_chain(NET, ID);
        assert!(!iptables::check(NET, ID, &addrs).unwrap());

        iptables::setup(NET, ID, &addrs).unwrap();
        assert_eq!(nat_rules(false), expected(&chain, false));
        assert_eq!(nat_rules(true), expected(&chain, true));
        assert!(iptables::check(NET, ID, &addrs).unwrap());

        // Repeated setup adds nothing.
        iptables::setup(NET, ID, &addrs).unwrap();
        assert_eq!(nat_rules(false), expected(&chain, false));
        assert_eq!(nat_rules(true), expected(&chain, true));

        // A missing rule is noticed by check and restored by setup.
        ipt_nat(&["-D", &chain, "2"]);
        assert!(!iptables::check(NET, ID, &addrs).unwrap());
        iptables::setup(NET, ID, &addrs).unwrap();
        assert!(iptables::check(NET, ID, &addrs).unwrap());

        iptables::teardown(NET, ID, &addrs).unwrap();
        assert!(nat_rules(false).is_empty());
        assert!(nat_rules(true).is_empty());
        // Tolerant: nothing left to remove.
        iptables::teardown(NET, ID, &addrs).unwrap();
        iptables::teardown(NET, ID, &[]).unwrap();
    });
}

#[test]
#[ignore = "needs root"]
fn iptables_teardown_without_ips_and_legacy_jump() {
    netns_test("iptables_teardown_without_ips_and_legacy_jump", || {
        let addrs = ips(&["10.88.0.5/16", "fd00:88::5/64"]);
        let chain = iptables_chain(NET, ID);
        iptables::setup(NET, ID, &addrs).unwrap();
        // The pre-1.0 form of the jump (`-s <ip>/<prefix>`), as old plugins made it.
        let comment = r#"name: "fwtest" id: "ctr1""#;
        ipt_nat(&[
            "-A",
            "POSTROUTING",
            "-s",
            "10.88.0.5/16",
            "-j",
            &chain,
            "-m",
            "comment",
            "--comment",
            comment,
        ]);
        // A rule of someone else must survive.
        ipt_nat(&["-A", "POSTROUTING", "-s", "10.99.0.1", "-j", "ACCEPT"]);
        iptables::teardown(NET, ID, &[]).unwrap();
        assert_eq!(
            nat_rules(false),
            vec!["-A POSTROUTING -s 10.99.0.1/32 -j ACCEPT"]
        );
        assert!(nat_rules(true).is_empty());
    });
}

/// Teardown with the IPs removes by name; a jump it does not know still referring to the
/// chain makes it fall back to listing, so that goes too.
#[test]
#[ignore = "needs root"]
fn iptables_teardown_with_ips_and_legacy_jump() {
    netns_test("iptables_teardown_with_ips_and_legacy_jump", || {
        let addrs = ips(&["10.88.0.5/16", "fd00:88::5/64"]);
        let chain = iptables_chain(NET, ID);
        iptables::setup(NET, ID, &addrs).unwrap();
        ipt_nat(&["-A", "POSTROUTING", "-s", "10.88.0.5/16", "-j", &chain]);
        ipt_nat(&["-A", "POSTROUTING", "-s", "10.99.0.1", "-j", "ACCEPT"]);
        iptables::teardown(NET, ID, &addrs).unwrap();
        assert_eq!(
            nat_rules(false),
            vec!["-A POSTROUTING -s 10.99.0.1/32 -j ACCEPT"]
        );
        assert!(nat_rules(true).is_empty());

        // A chain whose jump is already gone is removed all the same.
        iptables::setup(NET, ID, &addrs).unwrap();
        ipt_nat(&[
            "-D",
            "POSTROUTING",
            "-s",
            "10.88.0.5/32",
            "-m",
            "comment",
            "--comment",
            r#"name: "fwtest" id: "ctr1""#,
            "-j",
            &chain,
        ]);
        iptables::teardown(NET, ID, &addrs).unwrap();
        assert_eq!(
            nat_rules(false),
            vec!["-A POSTROUTING -s 10.99.0.1/32 -j ACCEPT"]
        );
        assert!(nat_rules(true).is_empty());
    });
}

#[test]
#[ignore = "needs root"]
fn iptables_gc_keeps_valid_and_other_networks() {
    netns_test("iptables_gc_keeps_valid_and_other_networks", || {
        iptables::setup(NET, "keep", &ips(&["10.88.0.2/16"])).unwrap();
        iptables::setup(NET, "stale", &ips(&["10.88.0.3/16", "fd00:88::3/64"])).unwrap();
        iptables::setup("othernet", "stale", &ips(&["10.77.0.3/16"])).unwrap();
        // portmap uses the same comment format on its own chains: not ours.
        let comment = r#"name: "fwtest" id: "stale""#;
        ipt_nat(&["-N", "CNI-DN-0123456789abcdef01234"]);
        ipt_nat(&[
            "-A",
            "CNI-DN-0123456789abcdef01234",
            "-j",
            "ACCEPT",
            "-m",
            "comment",
            "--comment",
            comment,
        ]);
        let before_other: Vec<String> = nat_rules(false)
            .into_iter()
            .filter(|l| {
                l.contains("othernet")
                    || l.contains("CNI-DN-")
                    || l.contains(&iptables_chain("othernet", "stale"))
            })
            .collect();

        iptables::gc(NET, &[("keep", "eth0")]).unwrap();

        let v4 = nat_rules(false);
        let stale = iptables_chain(NET, "stale");
        assert!(v4.iter().all(|l| !l.contains(&stale)), "{v4:#?}");
        assert!(nat_rules(true).is_empty());
        assert!(iptables::check(NET, "keep", &ips(&["10.88.0.2/16"])).unwrap());
        for line in before_other {
            assert!(v4.contains(&line), "lost {line}");
        }
        // Empty valid set: the network's last chain goes too.
        iptables::gc(NET, &[]).unwrap();
        assert!(!iptables::check(NET, "keep", &ips(&["10.88.0.2/16"])).unwrap());
        assert!(iptables::check("othernet", "stale", &ips(&["10.77.0.3/16"])).unwrap());
    });
}

#[test]
#[ignore = "needs root"]
fn iptables_setup_through_a_prestarted_tool() {
    netns_test("iptables_setup_through_a_prestarted_tool", || {
        let chain = iptables_chain(NET, ID);
        let pre = iptables::prestart(iptables::Family::V4).unwrap();
        iptables::setup_with(NET, ID, &ips(&["10.88.0.5/16"]), Some(pre)).unwrap();
        assert_eq!(nat_rules(false), expected(&chain, false));
        iptables::teardown(NET, ID, &[]).unwrap();

        // Started for the wrong family: killed unused (having read nothing, it changed
        // nothing); the IPv6 rules come from a tool of their own.
        let pre = iptables::prestart(iptables::Family::V4).unwrap();
        iptables::setup_with(NET, ID, &ips(&["fd00:88::5/64"]), Some(pre)).unwrap();
        assert!(nat_rules(false).is_empty());
        assert_eq!(nat_rules(true), expected(&chain, true));
        iptables::teardown(NET, ID, &[]).unwrap();
    });
}
