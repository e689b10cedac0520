//! What counts as drift, from messages made as the kernel makes them.

use super::*;

const RTM_NEWNEIGH: u16 = 28;
const OURS: u32 = 4242;

fn msg(ty: u16, pid: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&u32::try_from(16 + body.len()).unwrap().to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&pid.to_ne_bytes());
    m.extend_from_slice(body);
    while m.len() % 4 != 0 {
        m.push(0);
    }
    m
}

fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&u16::try_from(4 + payload.len()).unwrap().to_ne_bytes());
    a.extend_from_slice(&ty.to_ne_bytes());
    a.extend_from_slice(payload);
    while a.len() % 4 != 0 {
        a.push(0);
    }
    a
}

fn route(ty: u16, pid: u32, proto: u8) -> Vec<u8> {
    msg(ty, pid, &[2, 24, 0, 0, 254, proto, 0, 1, 0, 0, 0, 0])
}

fn link(ty: u16, index: u32, flags: u32, name: &str) -> Vec<u8> {
    let mut body = vec![0, 0, 1, 0];
    body.extend_from_slice(&index.to_ne_bytes());
    body.extend_from_slice(&flags.to_ne_bytes());
    body.extend_from_slice(&0u32.to_ne_bytes());
    body.extend(attr(IFLA_IFNAME, format!("{name}\0").as_bytes()));
    msg(ty, 0, &body)
}

/// A link that is a port of bridge 4 (a pod's veth on `cni0`).
fn port(ty: u16, index: u32, flags: u32, name: &str) -> Vec<u8> {
    let mut m = link(ty, index, flags, name);
    m.extend(attr(IFLA_MASTER, &4u32.to_ne_bytes()));
    let len = u32::try_from(m.len()).unwrap();
    m[..4].copy_from_slice(&len.to_ne_bytes());
    m
}

fn neigh(ty: u16, pid: u32, index: u32) -> Vec<u8> {
    let mut body = vec![7, 0, 0, 0];
    body.extend_from_slice(&index.to_ne_bytes());
    body.extend_from_slice(&[0x80, 0, 0, 0]);
    msg(ty, pid, &body)
}

fn nft(kind: u16, pid: u32, family: u8, table: &str, chain: Option<&str>) -> Vec<u8> {
    let mut body = vec![family, 0, 0, 0];
    body.extend(attr(NFTA_TABLE, format!("{table}\0").as_bytes()));
    if let Some(c) = chain {
        let at = if kind == NFT_MSG_DELRULE || kind == NFT_MSG_NEWRULE {
            NFTA_RULE_CHAIN
        } else {
            NFTA_CHAIN_NAME
        };
        body.extend(attr(at, format!("{c}\0").as_bytes()));
    }
    msg((NFNL_SUBSYS_NFTABLES << 8) | kind, pid, &body)
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
const FIREWALL: Drift = Drift {
    routes: false,
    overlay: false,
    firewall: true,
    policy: false,
    lost: false,
};

fn filter() -> Filter {
    Filter {
        route_pid: Some(OURS),
        nft_pid: Some(OURS),
        vxlan_index: None,
        up: BTreeSet::from([2]),
        downed: BTreeSet::new(),
    }
}

#[test]
fn only_someone_elses_changes_to_our_routes_count() {
    let mut f = filter();
    let none = Drift::default();
    assert_eq!(
        route_drift(&route(RTM_DELROUTE, 99, ROUTE_PROTO), &mut f),
        ROUTES
    );
    assert_eq!(
        route_drift(&route(RTM_NEWROUTE, 0, ROUTE_PROTO), &mut f),
        ROUTES
    );
    // Our own (the kernel's echo) and someone else's routes of another protocol.
    assert_eq!(
        route_drift(&route(RTM_DELROUTE, OURS, ROUTE_PROTO), &mut f),
        none
    );
    assert_eq!(route_drift(&route(RTM_DELROUTE, 99, 4), &mut f), none);
    // Several messages in one datagram.
    let mut two = route(RTM_DELROUTE, 99, 4);
    two.extend(route(RTM_DELROUTE, 99, ROUTE_PROTO));
    assert_eq!(route_drift(&two, &mut f), ROUTES);
    // Garbage is no message.
    assert_eq!(route_drift(&[1, 2, 3], &mut f), none);
}

#[test]
fn our_device_is_followed_by_name_and_its_entries_by_index() {
    let mut f = filter();
    let none = Drift::default();
    // Made (down first, then up): its index is learnt.
    assert_eq!(
        route_drift(&link(RTM_NEWLINK, 9, 0, VXLAN_DEVICE), &mut f),
        OVERLAY
    );
    assert_eq!(
        route_drift(&link(RTM_NEWLINK, 9, IFF_UP, VXLAN_DEVICE), &mut f),
        none
    );
    assert_eq!(f.vxlan_index, Some(9));
    // Other links, a pod's veth coming and going, do not count.
    assert_eq!(route_drift(&link(RTM_NEWLINK, 5, 0, "veth1"), &mut f), none);
    assert_eq!(route_drift(&link(RTM_DELLINK, 5, 0, "veth1"), &mut f), none);
    // Its entries deleted by someone else; not ours, not added, not other links'.
    assert_eq!(route_drift(&neigh(RTM_DELNEIGH, 99, 9), &mut f), OVERLAY);
    assert_eq!(route_drift(&neigh(RTM_DELNEIGH, OURS, 9), &mut f), none);
    assert_eq!(route_drift(&neigh(RTM_NEWNEIGH, 99, 9), &mut f), none);
    assert_eq!(route_drift(&neigh(RTM_DELNEIGH, 99, 5), &mut f), none);
    // Renamed away, then deleted: told, and forgotten.
    assert_eq!(
        route_drift(&link(RTM_NEWLINK, 9, IFF_UP, "other"), &mut f),
        OVERLAY
    );
    assert_eq!(f.vxlan_index, None);
    assert_eq!(route_drift(&neigh(RTM_DELNEIGH, 99, 9), &mut f), none);
    route_drift(&link(RTM_NEWLINK, 11, IFF_UP, VXLAN_DEVICE), &mut f);
    assert_eq!(
        route_drift(&link(RTM_DELLINK, 11, IFF_UP, VXLAN_DEVICE), &mut f),
        OVERLAY
    );
    assert_eq!(f.vxlan_index, None);
}

#[test]
fn a_link_set_down_may_have_taken_our_routes_with_it() {
    let mut f = filter();
    let none = Drift::default();
    // The uplink (up when the watch began) changes but stays up: nothing.
    assert_eq!(
        route_drift(&link(RTM_NEWLINK, 2, IFF_UP, "eth0"), &mut f),
        none
    );
    // Set down: its IPv4 routes went without a word from the kernel.
    assert_eq!(
        route_drift(&link(RTM_NEWLINK, 2, 0, "eth0"), &mut f),
        ROUTES
    );
    assert_eq!(route_drift(&link(RTM_NEWLINK, 2, 0, "eth0"), &mut f), none);
    // Up again: now ours can be added back.
    assert_eq!(
        route_drift(&link(RTM_NEWLINK, 2, IFF_UP, "eth0"), &mut f),
        ROUTES
    );
    assert_eq!(
        route_drift(&link(RTM_NEWLINK, 2, IFF_UP, "eth0"), &mut f),
        none
    );
    // A pod's veth: made down, set up, made a port, deleted (down first). Nothing.
    for m in [
        link(RTM_NEWLINK, 30, 0, "veth30"),
        link(RTM_NEWLINK, 30, IFF_UP, "veth30"),
        port(RTM_NEWLINK, 30, IFF_UP, "veth30"),
        port(RTM_NEWLINK, 30, 0, "veth30"),
        link(RTM_DELLINK, 30, 0, "veth30"),
    ] {
        assert_eq!(route_drift(&m, &mut f), none);
    }
    // A link of the node's network deleted (set down first): ours through it went.
    route_drift(&link(RTM_NEWLINK, 40, IFF_UP, "eth1"), &mut f);
    assert_eq!(
        route_drift(&link(RTM_NEWLINK, 40, 0, "eth1"), &mut f),
        ROUTES
    );
    assert_eq!(route_drift(&link(RTM_DELLINK, 40, 0, "eth1"), &mut f), none);
    assert!(f.downed.is_empty() && !f.up.contains(&40));
}

#[test]
fn our_table_and_iptables_forward_count_and_nothing_else() {
    let f = filter();
    let none = Drift::default();
    let inet = NFPROTO_INET;
    assert_eq!(nft_drift(&nft(2, 99, inet, TABLE, None), &f), FIREWALL);
    assert_eq!(
        nft_drift(
            &nft(NFT_MSG_DELRULE, 99, inet, TABLE, Some("postrouting")),
            &f
        ),
        FIREWALL
    );
    // Our own batch's echo, and the generation message every batch ends with.
    assert_eq!(nft_drift(&nft(2, OURS, inet, TABLE, None), &f), none);
    assert_eq!(
        nft_drift(&nft(NFT_MSG_NEWGEN, 99, inet, TABLE, None), &f),
        none
    );
    // The NetworkPolicy table: someone else's change, not our own.
    let policy = Drift {
        policy: true,
        ..Drift::default()
    };
    let netpol = netpol::program::TABLE;
    assert_eq!(nft_drift(&nft(2, 99, inet, netpol, None), &f), policy);
    assert_eq!(nft_drift(&nft(2, OURS, inet, netpol, None), &f), none);
    assert_eq!(nft_drift(&nft(2, 99, NFPROTO_IPV4, netpol, None), &f), none);
    // Someone else's table, or a table of that name in another family.
    assert_eq!(nft_drift(&nft(2, 99, inet, "firewalld", None), &f), none);
    assert_eq!(nft_drift(&nft(2, 99, NFPROTO_IPV4, TABLE, None), &f), none);
    // iptables-nft's FORWARD (flushed, its chain or table gone), not its other chains.
    for family in [NFPROTO_IPV4, NFPROTO_IPV6] {
        let rule = nft(NFT_MSG_DELRULE, 99, family, "filter", Some("FORWARD"));
        assert_eq!(nft_drift(&rule, &f), FIREWALL);
        let chain = nft(NFT_MSG_DELCHAIN, 99, family, "filter", Some("FORWARD"));
        assert_eq!(nft_drift(&chain, &f), FIREWALL);
        assert_eq!(nft_drift(&nft(2, 99, family, "filter", None), &f), FIREWALL);
        let kube = nft(NFT_MSG_NEWRULE, 99, family, "filter", Some("KUBE-SERVICES"));
        assert_eq!(nft_drift(&kube, &f), none);
        let nat = nft(NFT_MSG_DELRULE, 99, family, "nat", Some("FORWARD"));
        assert_eq!(nft_drift(&nat, &f), none);
    }
}

#[test]
fn a_nexthop_of_ours_deleted_by_someone_else_is_route_drift() {
    let mut f = filter();
    // nhmsg: family, scope, protocol, resvd, flags.
    let nh = |pid: u32, proto: u8| msg(105, pid, &[2, 0, proto, 0, 0, 0, 0, 0]);
    assert!(
        route_drift(&nh(0, ROUTE_PROTO), &mut f).routes,
        "the kernel's (device gone)"
    );
    assert!(
        route_drift(&nh(7, ROUTE_PROTO), &mut f).routes,
        "someone else's"
    );
    assert!(
        !route_drift(&nh(OURS, ROUTE_PROTO), &mut f).routes,
        "our own"
    );
    assert!(!route_drift(&nh(7, 3), &mut f).routes, "not ours");
}
