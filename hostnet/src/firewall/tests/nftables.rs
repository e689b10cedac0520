//! ipMasq, nftables backend, against the kernel: the reference's golden dump.

use super::support::{ODD_IFNAMES, ips, netns_test, nft_list};
use crate::firewall::nftables;

const TABLE: [&str; 3] = ["table", "inet", "cni_plugins_masquerade"];

/// `nft list table` of the reference test's state, with `rules` in masq_checks.
fn dump(rules: &[&str]) -> String {
    let mut s = String::from(
        "table inet cni_plugins_masquerade {\n\
         \tcomment \"Masquerading for plugins from github.com/containernetworking/plugins\"\n\
         \tchain masq_checks {\n\
         \t\tcomment \"Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet\"\n",
    );
    for r in rules {
        s.push_str(&format!("\t\t{r}\n"));
    }
    s.push_str(
        "\t}\n\n\
         \tchain postrouting {\n\
         \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t\tip daddr 224.0.0.0/4 return\n\
         \t\tip6 daddr ff00::/8 return\n\
         \t\tgoto masq_checks\n\
         \t}\n\
         }\n",
    );
    s
}

const ONE: &str = "ip saddr 192.168.1.1 ip daddr != 192.168.1.0/24 masquerade comment \"6fd94d501e58f0aa-287fc69eff0574a2, net: unit-test, if: eth0, id: one\"";
const TWO: &str = "ip saddr 192.168.1.2 ip daddr != 192.168.1.0/24 masquerade comment \"6fd94d501e58f0aa-d750b2c8f0f25d5f, net: unit-test, if: eth0, id: two\"";
const THREE: &str = "ip saddr 192.168.99.5 ip daddr != 192.168.99.0/24 masquerade comment \"6fd94d501e58f0aa-a4d4adb82b669cfe, net: unit-test, if: eth0, id: three\"";
const ALT: &str = "ip saddr 10.0.0.5 ip daddr != 10.0.0.0/24 masquerade comment \"82783ef24bdc7036-acb19d111858e348, net: alternate, if: net1, id: three\"";
const FOUR: &str = "ip saddr 192.168.1.1 ip daddr != 192.168.1.0/24 masquerade comment \"6fd94d501e58f0aa-e766de567ef6c543, net: unit-test, if: eth0, id: four\"";

/// The scenario of `Test_setupIPMasqNFTables` (pkg/ip/ipmasq_nftables_linux_test.go).
#[test]
#[ignore = "needs root"]
fn nftables_reference_scenario() {
    netns_test("nftables_reference_scenario", || {
        let containers = [
            ("unit-test", "eth0", "one", "192.168.1.1/24"),
            ("unit-test", "eth0", "two", "192.168.1.2/24"),
            ("unit-test", "eth0", "three", "192.168.99.5/24"),
            ("alternate", "net1", "three", "10.0.0.5/24"),
        ];
        for (net, ifname, id, addr) in containers {
            nftables::setup(net, ifname, id, &ips(&[addr])).unwrap();
        }
        assert_eq!(nft_list(&TABLE), dump(&[ONE, TWO, THREE, ALT]));
        for (net, ifname, id, addr) in containers {
            assert!(nftables::check(net, ifname, id, &ips(&[addr])).unwrap());
        }

        // Repeated setup replaces the attachment's rule instead of adding one
        // (it moves to the end of the chain).
        nftables::setup("unit-test", "eth0", "one", &ips(&["192.168.1.1/24"])).unwrap();
        assert_eq!(nft_list(&TABLE), dump(&[TWO, THREE, ALT, ONE]));

        // "four" reuses one's address; tearing down "one" leaves "four".
        nftables::setup("unit-test", "eth0", "four", &ips(&["192.168.1.1/24"])).unwrap();
        nftables::teardown("unit-test", "eth0", "one").unwrap();
        assert_eq!(nft_list(&TABLE), dump(&[TWO, THREE, ALT, FOUR]));
        assert!(!nftables::check("unit-test", "eth0", "one", &ips(&["192.168.1.1/24"])).unwrap());
        nftables::teardown("unit-test", "eth0", "one").unwrap();

        nftables::gc(
            "unit-test",
            &[("two", "eth0"), ("three", "eth0"), ("one", "eth0")],
        )
        .unwrap();
        nftables::gc("alternate", &[("three", "net1")]).unwrap();
        assert_eq!(nft_list(&TABLE), dump(&[TWO, THREE, ALT]));

        nftables::gc("unit-test", &[]).unwrap();
        nftables::gc("alternate", &[]).unwrap();
        // The table and both chains stay, as in the reference.
        assert_eq!(nft_list(&TABLE), dump(&[]));
    });
}

#[test]
#[ignore = "needs root"]
fn nftables_dual_stack_and_missing_table() {
    netns_test("nftables_dual_stack_and_missing_table", || {
        // Nothing there yet: teardown, gc and check are fine.
        nftables::teardown("n", "eth0", "c").unwrap();
        nftables::gc("n", &[]).unwrap();
        let addrs = ips(&["10.1.2.3/24", "fd00:1::3/64"]);
        assert!(!nftables::check("n", "eth0", "c", &addrs).unwrap());

        nftables::setup("n", "eth0", "c", &addrs).unwrap();
        let listing = nft_list(&["chain", "inet", "cni_plugins_masquerade", "masq_checks"]);
        assert!(
            listing.contains("ip6 saddr fd00:1::3 ip6 daddr != fd00:1::/64 masquerade comment")
        );
        assert!(nftables::check("n", "eth0", "c", &addrs).unwrap());
        nftables::teardown("n", "eth0", "c").unwrap();
        assert_eq!(nft_list(&TABLE), dump(&[]));
    });
}

/// The ifname goes into the rule comment only (quoted text, which holds
/// anything but `"`, which the comment strips as the reference does).
#[test]
#[ignore = "needs root"]
fn nftables_unusual_ifnames() {
    netns_test("nftables_unusual_ifnames", || {
        let addrs = ips(&["10.1.2.3/24"]);
        for ifname in ODD_IFNAMES {
            nftables::setup("n", ifname, "c", &addrs).unwrap();
            let comment = crate::firewall::names::nft_comment("n", ifname, "c");
            assert!(
                nft_list(&TABLE).contains(&format!("masquerade comment \"{comment}\"")),
                "{ifname:?}"
            );
            assert!(
                nftables::check("n", ifname, "c", &addrs).unwrap(),
                "{ifname:?}"
            );
            nftables::teardown("n", ifname, "c").unwrap();
            assert_eq!(nft_list(&TABLE), dump(&[]), "{ifname:?}");
        }
    });
}
