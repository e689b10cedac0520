//! The backend-independent entry points: choice, both-backend teardown and gc.

use ipnetwork::IpNetwork;

use super::support::{ips, nat_rules, netns_test, nft_list};
use crate::firewall::{
    Attachment, Backend, check_ipmasq, gc_ipmasq, nftables, setup_ipmasq, teardown_ipmasq,
};

const MASQ_CHAIN: [&str; 4] = ["chain", "inet", "cni_plugins_masquerade", "masq_checks"];

#[test]
fn backend_config_values() {
    assert_eq!(Backend::from_config(None).unwrap(), None);
    assert_eq!(Backend::from_config(Some("")).unwrap(), None);
    assert_eq!(
        Backend::from_config(Some("iptables")).unwrap(),
        Some(Backend::IpTables)
    );
    assert_eq!(
        Backend::from_config(Some("nftables")).unwrap(),
        Some(Backend::NfTables)
    );
    let err = Backend::from_config(Some("ebtables")).unwrap_err();
    assert_eq!(err.to_string(), "unknown ipmasq backend \"ebtables\"");
}

#[test]
#[ignore = "needs root"]
fn teardown_and_gc_clean_both_backends() {
    netns_test("teardown_and_gc_clean_both_backends", || {
        let att = Attachment {
            network: "both",
            container_id: "c1",
            ifname: "eth0",
        };
        let addrs = ips(&["10.5.0.9/24", "fd00:5::9/64"]);
        // Auto mode picks iptables where iptables works (it does here).
        assert_eq!(setup_ipmasq(None, &att, &addrs).unwrap(), Backend::IpTables);
        assert_eq!(
            setup_ipmasq(Some(Backend::NfTables), &att, &addrs).unwrap(),
            Backend::NfTables
        );
        assert!(check_ipmasq(Some(Backend::IpTables), &att, &addrs).unwrap());
        assert!(check_ipmasq(Some(Backend::NfTables), &att, &addrs).unwrap());
        assert!(check_ipmasq(None, &att, &addrs).unwrap());

        // Teardown without IPs removes both.
        teardown_ipmasq(&att, &[]).unwrap();
        assert!(nat_rules(false).is_empty() && nat_rules(true).is_empty());
        assert!(!check_ipmasq(None, &att, &addrs).unwrap());
        let left = nft_list(&MASQ_CHAIN);
        assert!(!left.contains("masquerade comment"), "{left}");
        teardown_ipmasq(&att, &addrs).unwrap();

        // GC: one valid attachment in each backend survives.
        let keep = Attachment {
            network: "both",
            container_id: "keep",
            ifname: "eth0",
        };
        for backend in [Backend::IpTables, Backend::NfTables] {
            setup_ipmasq(Some(backend), &att, &addrs).unwrap();
            setup_ipmasq(Some(backend), &keep, &ips(&["10.5.0.10/24"])).unwrap();
        }
        gc_ipmasq("both", &[("keep", "eth0")]).unwrap();
        for backend in [Backend::IpTables, Backend::NfTables] {
            assert!(check_ipmasq(Some(backend), &keep, &ips(&["10.5.0.10/24"])).unwrap());
            assert!(!check_ipmasq(Some(backend), &att, &addrs).unwrap());
        }
        assert!(nat_rules(true).is_empty());
        // nftables rule for `keep` only.
        assert_eq!(
            nftables::check("both", "eth0", "keep", &ips(&["10.5.0.10/24"])).ok(),
            Some(true)
        );
        assert_eq!(
            nft_list(&MASQ_CHAIN).matches("masquerade comment").count(),
            1
        );
    });
}

/// Attachment `c<i>` of network "busy", with its address.
fn busy(i: usize, f: impl FnOnce(&Attachment, &[IpNetwork])) {
    let id = format!("c{i}");
    let att = Attachment {
        network: "busy",
        container_id: &id,
        ifname: "eth0",
    };
    f(&att, &ips(&[&format!("10.6.0.{}/24", i + 2)]))
}

/// Many plugin processes run at once on a busy node: concurrent setups and
/// teardowns of different attachments must neither fail nor lose rules.
#[test]
#[ignore = "needs root"]
fn concurrent_setup_and_teardown() {
    netns_test("concurrent_setup_and_teardown", || {
        // Threads spawned here share this thread's network namespace.
        let run_all = |teardown: bool| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    std::thread::spawn(move || {
                        busy(i, |att, addrs| {
                            for backend in [Backend::IpTables, Backend::NfTables] {
                                if teardown {
                                    teardown_ipmasq(att, addrs).unwrap();
                                } else {
                                    setup_ipmasq(Some(backend), att, addrs).unwrap();
                                }
                            }
                        })
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        };
        run_all(false);
        for i in 0..8 {
            busy(i, |att, addrs| {
                assert!(check_ipmasq(Some(Backend::IpTables), att, addrs).unwrap());
                assert!(check_ipmasq(Some(Backend::NfTables), att, addrs).unwrap());
            });
        }
        assert_eq!(nat_rules(false).len(), 8 * 4);
        run_all(true);
        assert!(nat_rules(false).is_empty());
        assert_eq!(
            nft_list(&MASQ_CHAIN).matches("masquerade comment").count(),
            0
        );
    });
}
