//! ipMasq, iptables backend, against the kernel.

use libcni::testutil::privileged;

use super::support::{in_netns, ips, nat_rules, run_ok};
use crate::firewall::iptables;
use crate::firewall::names::iptables_chain;

const NET: &str = "fwtest";
const ID: &str = "ctr1";

fn expected_v4(chain: &str) -> Vec<String> {
    let c = r#""name: \"fwtest\" id: \"ctr1\"""#;
    vec![
        format!(":{chain} - [0:0]"),
        format!("-A POSTROUTING -s 10.88.0.5/32 -m comment --comment {c} -j {chain}"),
        format!("-A {chain} -d 10.88.0.0/16 -m comment --comment {c} -j ACCEPT"),
        format!("-A {chain} ! -d 224.0.0.0/4 -m comment --comment {c} -j MASQUERADE"),
    ]
}

fn expected_v6(chain: &str) -> Vec<String> {
    let c = r#""name: \"fwtest\" id: \"ctr1\"""#;
    vec![
        format!(":{chain} - [0:0]"),
        format!("-A POSTROUTING -s fd00:88::5/128 -m comment --comment {c} -j {chain}"),
        format!("-A {chain} -d fd00:88::/64 -m comment --comment {c} -j ACCEPT"),
        format!("-A {chain} ! -d ff00::/8 -m comment --comment {c} -j MASQUERADE"),
    ]
}

#[test]
fn iptables_setup_exact_idempotent_check_teardown() {
    if !privileged("iptables_setup_exact_idempotent_check_teardown") {
        return;
    }
    in_netns(|| {
        let addrs = ips(&["10.88.0.5/16", "fd00:88::5/64"]);
        let chain = iptables_chain(NET, ID);
        assert!(!iptables::check(NET, ID, &addrs).unwrap());

        iptables::setup(NET, ID, &addrs).unwrap();
        assert_eq!(nat_rules(false), expected_v4(&chain));
        assert_eq!(nat_rules(true), expected_v6(&chain));
        assert!(iptables::check(NET, ID, &addrs).unwrap());

        // Repeated setup adds nothing.
        iptables::setup(NET, ID, &addrs).unwrap();
        assert_eq!(nat_rules(false), expected_v4(&chain));
        assert_eq!(nat_rules(true), expected_v6(&chain));

        // A missing rule is noticed by check and restored by setup.
        run_ok("iptables", &["-w", "-t", "nat", "-D", &chain, "2"]);
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
fn iptables_teardown_without_ips_and_legacy_jump() {
    if !privileged("iptables_teardown_without_ips_and_legacy_jump") {
        return;
    }
    in_netns(|| {
        let addrs = ips(&["10.88.0.5/16", "fd00:88::5/64"]);
        let chain = iptables_chain(NET, ID);
        iptables::setup(NET, ID, &addrs).unwrap();
        // The pre-1.0 form of the jump (`-s <ip>/<prefix>`), as old plugins made it.
        let comment = r#"name: "fwtest" id: "ctr1""#;
        run_ok(
            "iptables",
            &[
                "-w",
                "-t",
                "nat",
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
            ],
        );
        // A rule of someone else must survive.
        run_ok(
            "iptables",
            &[
                "-w",
                "-t",
                "nat",
                "-A",
                "POSTROUTING",
                "-s",
                "10.99.0.1",
                "-j",
                "ACCEPT",
            ],
        );
        iptables::teardown(NET, ID, &[]).unwrap();
        assert_eq!(
            nat_rules(false),
            vec!["-A POSTROUTING -s 10.99.0.1/32 -j ACCEPT"]
        );
        assert!(nat_rules(true).is_empty());
    });
}

#[test]
fn iptables_gc_keeps_valid_and_other_networks() {
    if !privileged("iptables_gc_keeps_valid_and_other_networks") {
        return;
    }
    in_netns(|| {
        iptables::setup(NET, "keep", &ips(&["10.88.0.2/16"])).unwrap();
        iptables::setup(NET, "stale", &ips(&["10.88.0.3/16", "fd00:88::3/64"])).unwrap();
        iptables::setup("othernet", "stale", &ips(&["10.77.0.3/16"])).unwrap();
        // portmap uses the same comment format on its own chains: not ours.
        let comment = r#"name: "fwtest" id: "stale""#;
        run_ok(
            "iptables",
            &["-w", "-t", "nat", "-N", "CNI-DN-0123456789abcdef01234"],
        );
        run_ok(
            "iptables",
            &[
                "-w",
                "-t",
                "nat",
                "-A",
                "CNI-DN-0123456789abcdef01234",
                "-j",
                "ACCEPT",
                "-m",
                "comment",
                "--comment",
                comment,
            ],
        );
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
