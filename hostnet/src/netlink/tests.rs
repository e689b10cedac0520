//! Privileged tests against the real kernel. Each test runs on a fresh thread
//! that unshares its own network namespace (the fake "host"); a second
//! namespace plays the container. Both vanish, with every link in them, when
//! the test's threads and fds are gone, so cleanup holds on failure too.

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use ipnetwork::IpNetwork;
use sysproc::netns::Netns;

use super::{IpFamily, Netlink, RouteSpec};
use crate::sysctl;
use crate::testnet::{in_netns, new_netns};
use testkit::privileged;

/// When privileged, runs `f` with a connection into a new, empty network
/// namespace (the fake host), on a thread of its own.
fn host_test(name: &str, f: impl FnOnce(&Netlink) + Send) {
    if privileged(name) {
        in_netns(|| f(&Netlink::current().unwrap()));
    }
}

/// [`host_test`] plus a second namespace (the container) and a connection into it.
fn host_ctr_test(name: &str, f: impl FnOnce(&Netlink, &Netns, &Netlink) + Send) {
    host_test(name, |host| {
        let ctr_ns = new_netns();
        let ctr = Netlink::in_netns(&ctr_ns).unwrap();
        f(host, &ctr_ns, &ctr)
    })
}

fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0x01, 0x02, 0x03];

/// Host end `veth0` here, `eth0` in `ctr`; both up. Returns (host idx, ctr idx).
fn veth_pair_up(host: &Netlink, ctr_ns: &Netns, ctr: &Netlink) -> (u32, u32) {
    host.create_veth("veth0", "eth0", Some(1400), Some(MAC), ctr_ns.as_fd())
        .unwrap();
    let h = host.link_by_name("veth0").unwrap().unwrap().index;
    let c = ctr.link_by_name("eth0").unwrap().unwrap().index;
    host.set_up(h).unwrap();
    ctr.set_up(c).unwrap();
    (h, c)
}

#[test]
#[ignore = "needs root"]
fn bridge_create_exists_and_lookup() {
    host_test("bridge_create_exists_and_lookup", |nl| {
        nl.create_bridge("br0", Some(1400)).unwrap();
        let br = nl.link_by_name("br0").unwrap().unwrap();
        assert_eq!(br.kind.as_deref(), Some("bridge"));
        assert_eq!(br.mtu, 1400);
        assert!(!br.admin_up);
        assert!(br.mac.is_some());

        let err = nl.create_bridge("br0", None).unwrap_err();
        assert!(err.is_exists(), "{err}");
        assert_eq!(err.errno(), Some(nix::libc::EEXIST));
        assert!(
            err.to_string().starts_with("create bridge \"br0\": "),
            "{err}"
        );

        assert_eq!(nl.link_by_name("nope0").unwrap(), None);
        let err = nl.link_by_index(99999).unwrap_err();
        assert!(err.is_no_device() && err.is_not_found(), "{err}");
        assert_eq!(nl.link_by_index(br.index).unwrap().name, "br0");

        let names: Vec<String> = nl.links().unwrap().into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["lo", "br0"]);

        nl.set_up(br.index).unwrap();
        assert!(nl.link_by_index(br.index).unwrap().admin_up);
        nl.set_down(br.index).unwrap();
        assert!(!nl.link_by_index(br.index).unwrap().admin_up);

        nl.set_promisc(br.index, true).unwrap();
        assert!(nl.link_by_index(br.index).unwrap().promisc);
        nl.set_promisc(br.index, false).unwrap();
        assert!(!nl.link_by_index(br.index).unwrap().promisc);

        nl.set_mac(br.index, MAC).unwrap();
        assert_eq!(nl.link_by_index(br.index).unwrap().mac, Some(MAC));

        nl.delete_link(br.index).unwrap();
        assert_eq!(nl.link_by_name("br0").unwrap(), None);
        assert!(nl.delete_link(br.index).unwrap_err().is_no_device());
    });
}

#[test]
#[ignore = "needs root"]
fn veth_born_in_container_with_bridge_port_options() {
    host_ctr_test(
        "veth_born_in_container_with_bridge_port_options",
        |host, ctr_ns, ctr| {
            host.create_veth("veth0", "eth0", Some(1400), Some(MAC), ctr_ns.as_fd())
                .unwrap();
            let h = host.link_by_name("veth0").unwrap().unwrap();
            let c = ctr.link_by_name("eth0").unwrap().unwrap();
            assert_eq!(
                host.link_by_name("eth0").unwrap(),
                None,
                "peer must not appear in the host"
            );
            assert_eq!(ctr.link_by_name("veth0").unwrap(), None);
            assert_eq!(h.kind.as_deref(), Some("veth"));
            assert_eq!(c.kind.as_deref(), Some("veth"));
            assert_eq!((h.mtu, c.mtu), (1400, 1400));
            assert_eq!(c.mac, Some(MAC));
            assert_eq!(c.peer_index, Some(h.index));
            assert_eq!(h.peer_index, Some(c.index));
            assert_eq!((h.master, h.hairpin, h.isolated), (None, None, None));

            let err = host
                .create_veth("veth0", "eth1", None, None, ctr_ns.as_fd())
                .unwrap_err();
            assert!(err.is_exists(), "{err}");
            let err = host
                .create_veth("veth1", "eth0", None, None, ctr_ns.as_fd())
                .unwrap_err();
            assert!(err.is_exists(), "container name taken: {err}");

            host.create_bridge("br0", None).unwrap();
            let br = host.link_by_name("br0").unwrap().unwrap().index;
            host.set_master(h.index, br).unwrap();
            let port = host.link_by_index(h.index).unwrap();
            assert_eq!(port.master, Some(br));
            assert_eq!((port.hairpin, port.isolated), (Some(false), Some(false)));

            host.set_port_options(h.index, Some(true), None).unwrap();
            let port = host.link_by_index(h.index).unwrap();
            assert_eq!((port.hairpin, port.isolated), (Some(true), Some(false)));
            host.set_port_options(h.index, None, Some(true)).unwrap();
            let port = host.link_by_index(h.index).unwrap();
            assert_eq!((port.hairpin, port.isolated), (Some(true), Some(true)));

            // This kernel has no bridge VLAN support: the dump works but is empty,
            // and adding a VLAN is refused.
            assert_eq!(host.bridge_vlans(h.index).unwrap(), []);
            let err = host.bridge_vlan_add(h.index, 5, true, true).unwrap_err();
            assert_eq!(err.errno(), Some(nix::libc::EOPNOTSUPP), "{err}");

            // Both ends up: the host end reaches oper state up.
            host.set_up(br).unwrap();
            host.set_up(h.index).unwrap();
            ctr.set_up(c.index).unwrap();
            let up = host.wait_oper_up(h.index).unwrap();
            assert_eq!(up.oper_state, "up");

            host.delete_link(h.index).unwrap();
            assert_eq!(host.link_by_name("veth0").unwrap(), None);
            assert_eq!(
                ctr.link_by_name("eth0").unwrap(),
                None,
                "peer goes with the pair"
            );
        },
    );
}

/// A veth's peer namespace as the host numbers it is the id the host gives that
/// namespace's file, and differs from a third namespace's.
#[test]
#[ignore = "needs root"]
fn peer_netns_id_names_the_peers_namespace() {
    host_ctr_test(
        "peer_netns_id_names_the_peers_namespace",
        |host, ctr_ns, ctr| {
            let other_ns = new_netns();
            assert_eq!(host.netns_id(other_ns.as_fd()).unwrap(), None);
            veth_pair_up(host, ctr_ns, ctr);
            let h = host.link_by_name("veth0").unwrap().unwrap();
            let id = host.netns_id(ctr_ns.as_fd()).unwrap();
            assert!(id.is_some());
            assert_eq!(h.peer_netns_id, id);
            assert_ne!(host.netns_id(other_ns.as_fd()).unwrap(), id);
            host.create_veth(
                "hv0",
                "hv1",
                None,
                None,
                std::fs::File::open("/proc/thread-self/ns/net")
                    .unwrap()
                    .as_fd(),
            )
            .unwrap();
            assert_eq!(
                host.link_by_name("hv0").unwrap().unwrap().peer_netns_id,
                None
            );
        },
    )
}

#[test]
#[ignore = "needs root"]
fn wait_oper_up_reports_final_state() {
    host_ctr_test("wait_oper_up_reports_final_state", |host, ctr_ns, _| {
        host.create_veth("veth0", "eth0", None, None, ctr_ns.as_fd())
            .unwrap();
        let h = host.link_by_name("veth0").unwrap().unwrap().index;
        host.set_up(h).unwrap();
        // The container end stays down, so the host end never gets a carrier.
        let err = host.wait_oper_up(h).unwrap_err();
        // "down" rather than "lowerlayerdown" when IFLA_LINK (the peer's index
        // in the other namespace) happens to equal the link's own index.
        let state = err.last_state().unwrap();
        assert!(state == "down" || state == "lowerlayerdown", "{err}");
    });
}

#[test]
#[ignore = "needs root"]
fn one_links_addresses_are_filtered_by_the_kernel() {
    use rtnetlink::packet_core::NLM_F_DUMP;
    use rtnetlink::packet_route::RouteNetlinkMessage;
    use rtnetlink::packet_route::address::AddressMessage;
    host_test("one_links_addresses_are_filtered_by_the_kernel", |nl| {
        nl.create_bridge("br0", None).unwrap();
        let br = nl.link_by_name("br0").unwrap().unwrap().index;
        nl.add_address(br, net("10.1.2.3/24")).unwrap();
        nl.set_up(1).unwrap(); // lo gets 127.0.0.1
        let raw_indexes = |strict: bool| -> Vec<u32> {
            let mut msg = AddressMessage::default();
            msg.header.index = br;
            let answers = nl
                .request_checked(
                    &|| "list addresses".into(),
                    RouteNetlinkMessage::GetAddress(msg),
                    NLM_F_DUMP,
                    strict,
                )
                .unwrap();
            answers
                .into_iter()
                .filter_map(|m| match m {
                    RouteNetlinkMessage::NewAddress(a) => Some(a.header.index),
                    _ => None,
                })
                .collect()
        };
        // Lenient checking ignores the header: every link's addresses come back.
        assert!(raw_indexes(false).contains(&1));
        // Strict: only the bridge's, and the socket is lenient again afterwards.
        let strict = raw_indexes(true);
        assert!(
            !strict.is_empty() && strict.iter().all(|i| *i == br),
            "{strict:?}"
        );
        assert!(raw_indexes(false).contains(&1));
        assert_eq!(nl.addresses(Some(br)).unwrap().len(), 1);
    });
}

#[test]
#[ignore = "needs root"]
fn ipv4_addresses_with_broadcast() {
    host_test("ipv4_addresses_with_broadcast", |nl| {
        nl.create_bridge("br0", None).unwrap();
        let br = nl.link_by_name("br0").unwrap().unwrap().index;

        nl.add_address(br, net("10.1.2.3/24")).unwrap();
        nl.add_address(br, net("10.9.9.0/31")).unwrap();
        let err = nl.add_address(br, net("10.1.2.3/24")).unwrap_err();
        assert!(err.is_exists(), "{err}");

        let addrs = nl.addresses(Some(br)).unwrap();
        let a = addrs.iter().find(|a| a.addr == net("10.1.2.3/24")).unwrap();
        assert_eq!(a.broadcast, Some("10.1.2.255".parse().unwrap()));
        assert_eq!(
            (a.index, a.scope, a.tentative, a.dadfailed),
            (br, 0, false, false)
        );
        let p2p = addrs.iter().find(|a| a.addr == net("10.9.9.0/31")).unwrap();
        assert_eq!(p2p.broadcast, None);

        // lo has 127.0.0.1 only once it is up; the unfiltered list covers all links.
        nl.set_up(1).unwrap();
        assert!(nl.addresses(None).unwrap().iter().any(|a| a.index == 1));

        nl.del_address(br, net("10.1.2.3/24")).unwrap();
        assert!(
            !nl.addresses(Some(br))
                .unwrap()
                .iter()
                .any(|a| a.addr == net("10.1.2.3/24"))
        );
        let err = nl.del_address(br, net("10.1.2.3/24")).unwrap_err();
        assert!(err.is_not_found(), "{err}");
    });
}

#[test]
#[ignore = "needs root"]
fn ipv6_addresses_settle() {
    host_ctr_test("ipv6_addresses_settle", |host, ctr_ns, ctr| {
        host.create_veth("veth0", "eth0", None, None, ctr_ns.as_fd())
            .unwrap();
        // accept_dad=0 before the link goes up, so that its link-local
        // address skips DAD too: everything settles at once.
        assert!(sysctl::ensure("net.ipv6.conf.veth0.accept_dad", "0").unwrap());
        let h = host.link_by_name("veth0").unwrap().unwrap().index;
        host.set_up(h).unwrap();
        ctr.set_up(ctr.link_by_name("eth0").unwrap().unwrap().index)
            .unwrap();
        // The kernel still clears TENTATIVE from a work queue, so poll briefly.
        host.add_address(h, net("fd00:1::2/64")).unwrap();
        host.settle_addresses(h, Duration::from_secs(5)).unwrap();

        // With DAD: tentative first, then settled.
        sysctl::write("net.ipv6.conf.veth0.accept_dad", "1").unwrap();
        host.add_address(h, net("fd00:2::2/64")).unwrap();
        let a = host.addresses(Some(h)).unwrap();
        assert!(
            a.iter()
                .find(|a| a.addr == net("fd00:2::2/64"))
                .unwrap()
                .tentative
        );
        host.settle_addresses(h, Duration::from_secs(10)).unwrap();
        assert!(
            host.addresses(Some(h))
                .unwrap()
                .iter()
                .all(|a| !a.tentative)
        );

        // A down link never runs DAD: the wait ends without error.
        host.set_down(h).unwrap();
        host.add_address(h, net("fd00:3::2/64")).unwrap();
        host.settle_addresses(h, Duration::from_millis(200))
            .unwrap();
    });
}

#[test]
#[ignore = "needs root"]
fn nodad_address_is_never_tentative() {
    host_ctr_test("nodad_address_is_never_tentative", |host, ctr_ns, ctr| {
        let (h, _) = veth_pair_up(host, ctr_ns, ctr);
        assert_eq!(sysctl::read("net.ipv6.conf.veth0.accept_dad").unwrap(), "1");
        host.add_address_nodad(h, net("fd00:5::1/64")).unwrap();
        host.add_address_nodad(h, net("10.5.0.1/24")).unwrap();
        let a = host.addresses(Some(h)).unwrap();
        let got = |n: &str| a.iter().find(|a| a.addr == net(n)).unwrap().tentative;
        assert!(!got("fd00:5::1/64"), "usable at once, no DAD");
        assert!(!got("10.5.0.1/24"));
        let err = host.add_address_nodad(h, net("fd00:5::1/64")).unwrap_err();
        assert!(err.is_exists(), "{err}");
    });
}

#[test]
#[ignore = "needs root"]
fn ipv6_dad_failure_is_reported() {
    host_ctr_test("ipv6_dad_failure_is_reported", |host, ctr_ns, ctr| {
        let (h, c) = veth_pair_up(host, ctr_ns, ctr);
        // The container side owns the address without DAD; the host's DAD then fails.
        ctr_ns
            .run(|| sysctl::write("net.ipv6.conf.eth0.accept_dad", "0").unwrap())
            .unwrap();
        ctr.add_address(c, net("fd00:5::1/64")).unwrap();
        // Let the host end's link-local address settle first so DAD can send.
        host.settle_addresses(h, Duration::from_secs(10)).unwrap();
        host.add_address(h, net("fd00:5::1/64")).unwrap();
        let err = host
            .settle_addresses(h, Duration::from_secs(10))
            .unwrap_err();
        assert!(
            matches!(err, super::NetlinkError::DadFailed { .. }),
            "{err}"
        );
    });
}

#[test]
#[ignore = "needs root"]
fn routes_default_ecmp_table_scope_priority() {
    host_ctr_test(
        "routes_default_ecmp_table_scope_priority",
        |host, ctr_ns, ctr| {
            let (h, _) = veth_pair_up(host, ctr_ns, ctr);
            sysctl::write("net.ipv6.conf.veth0.accept_dad", "0").unwrap();
            host.add_address(h, net("10.9.0.2/24")).unwrap();
            host.add_address(h, net("fd00:9::2/64")).unwrap();

            let default = |gw: &str| RouteSpec {
                dst: if gw.contains(':') {
                    net("::/0")
                } else {
                    net("0.0.0.0/0")
                },
                gateway: Some(ip(gw)),
                oif: Some(h),
                priority: None,
                table: None,
                scope: None,
            };

            // IPv4: a default route via a gateway, then a second gateway.
            host.add_route(&default("10.9.0.1")).unwrap();
            let err = host.add_route(&default("10.9.0.1")).unwrap_err();
            assert!(err.is_exists(), "identical route: {err}");
            host.add_route(&default("10.9.0.254")).unwrap();
            let v4: Vec<_> = host
                .routes(IpFamily::V4)
                .unwrap()
                .into_iter()
                .filter(|r| r.dst == net("0.0.0.0/0"))
                .collect();
            // IPv4 keeps two separate routes for the same destination, and
            // without NLM_F_APPEND the kernel puts the newer one first.
            let gws: Vec<_> = v4.iter().map(|r| r.gateway).collect();
            assert_eq!(
                gws,
                [Some(ip("10.9.0.254")), Some(ip("10.9.0.1"))],
                "{v4:?}"
            );
            assert!(
                v4.iter()
                    .all(|r| r.table == 254 && r.scope == 0 && r.oif == Some(h))
            );

            // IPv6: the second gateway joins the first as one multipath route.
            host.add_route(&default("fd00:9::1")).unwrap();
            host.add_route(&default("fd00:9::fe")).unwrap();
            let err = host.add_route(&default("fd00:9::fe")).unwrap_err();
            assert!(err.is_exists(), "identical v6 route: {err}");
            let v6: Vec<_> = host
                .routes(IpFamily::V6)
                .unwrap()
                .into_iter()
                .filter(|r| r.dst == net("::/0"))
                .collect();
            assert_eq!(v6.len(), 1, "{v6:?}");
            assert_eq!(
                v6[0].multipath_gateways,
                [ip("fd00:9::1"), ip("fd00:9::fe")]
            );

            // Table, scope and priority.
            let spec = RouteSpec {
                dst: net("192.168.50.0/24"),
                gateway: None,
                oif: Some(h),
                priority: Some(50),
                table: Some(100),
                scope: Some(253),
            };
            host.add_route(&spec).unwrap();
            let r = host.routes(IpFamily::V4).unwrap();
            let r = r.iter().find(|r| r.dst == net("192.168.50.0/24")).unwrap();
            assert_eq!(
                (r.table, r.scope, r.priority, r.gateway),
                (100, 253, Some(50), None)
            );

            let high = RouteSpec {
                table: Some(1000),
                dst: net("192.168.60.0/24"),
                ..spec.clone()
            };
            host.add_route(&high).unwrap();
            assert!(
                host.routes(IpFamily::V4)
                    .unwrap()
                    .iter()
                    .any(|r| r.table == 1000)
            );

            // The kernel's prefix route of the address is listed too (CHECK needs it).
            assert!(
                host.routes(IpFamily::V4)
                    .unwrap()
                    .iter()
                    .any(|r| r.dst == net("10.9.0.0/24") && r.gateway.is_none() && r.scope == 253)
            );

            host.del_route(&spec).unwrap();
            assert!(host.del_route(&spec).unwrap_err().is_not_found());
        },
    );
}

#[test]
#[ignore = "needs root"]
fn sysctl_ensure_in_own_netns() {
    host_test("sysctl_ensure_in_own_netns", |nl| {
        // A dotted interface name, as the VLAN gateway interface has.
        nl.create_bridge("br0.5", None).unwrap();
        let p = sysctl::path(&["net", "ipv4", "conf", "br0.5", "forwarding"]).unwrap();
        assert_eq!(sysctl::read_path(&p).unwrap(), "0");
        assert!(sysctl::ensure_path(&p, "1").unwrap());
        assert!(!sysctl::ensure_path(&p, "1").unwrap());
        assert_eq!(sysctl::read("net.ipv4.conf.br0/5.forwarding").unwrap(), "1");

        assert!(sysctl::ensure("net.ipv4.ip_forward", "1").unwrap());
        assert!(!sysctl::ensure("net.ipv4.ip_forward", "1").unwrap());
        assert_eq!(sysctl::read("net.ipv4.ip_forward").unwrap(), "1");
        assert!(sysctl::read("net.ipv4.conf.nope0.forwarding").is_err());
    });
}
