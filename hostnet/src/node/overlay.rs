//! The VXLAN overlay to peers that are not on-link (flannel's vxlan backend, without its
//! Node annotation): one device [`VXLAN_DEVICE`], and per peer an FDB entry, a neighbour
//! entry per pod range and an on-link route per pod range, all on that device.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use sha2::{Digest, Sha256};

/// Our VXLAN device (12 of the 15 characters a link name may have). Only a `vxlan` link of
/// this name is ours.
pub const VXLAN_DEVICE: &str = "cni-rs.vxlan";

/// Bytes of encapsulation over an IPv4 underlay: outer IPv4 20 + UDP 8 + VXLAN 8 + inner
/// Ethernet 14.
pub const VXLAN_OVERHEAD_V4: u32 = 50;
/// Over IPv6: the outer header is 40 bytes.
pub const VXLAN_OVERHEAD_V6: u32 = 70;

/// The device the caller wants: VNI, UDP port, the node's underlay address and the MTU of
/// the underlay interface (the device gets it minus the overhead of the underlay's family),
/// and the device's own address of each family ([`overlay_address`] of this node's pod
/// range), the source of the node's own packets through the overlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanSpec {
    pub vni: u32,
    pub port: u16,
    pub local: IpAddr,
    pub underlay_mtu: u32,
    pub addr4: Option<Ipv4Addr>,
    pub addr6: Option<Ipv6Addr>,
}

impl VxlanSpec {
    /// The device's own addresses as `/32` and `/128`: no connected route, only the
    /// address (the pod range's route stays the bridge's).
    pub fn addrs(&self) -> Vec<IpNetwork> {
        let v4 = self.addr4.map(|a| IpNetwork::new(a.into(), 32));
        let v6 = self.addr6.map(|a| IpNetwork::new(a.into(), 128));
        v4.into_iter().chain(v6).filter_map(Result::ok).collect()
    }

    /// The device's MTU: what a pod's packet may be for the encapsulated one to fit.
    pub fn mtu(&self) -> u32 {
        let overhead = match self.local {
            IpAddr::V4(_) => VXLAN_OVERHEAD_V4,
            IpAddr::V6(_) => VXLAN_OVERHEAD_V6,
        };
        self.underlay_mtu.saturating_sub(overhead)
    }
}

/// A peer reached through the overlay: its node (underlay) address and its pod ranges.
/// Everything else is derived: its VTEP MAC ([`vtep_mac`] of `node_ip`) and, per range,
/// the gateway ([`overlay_gateway`]) the route goes via.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OverlayPeer {
    pub node_ip: IpAddr,
    /// Sorted, no duplicates (use [`OverlayPeer::new`]), so peers compare by value.
    pub pod_cidrs: Vec<IpNetwork>,
}

impl OverlayPeer {
    pub fn new(node_ip: IpAddr, mut pod_cidrs: Vec<IpNetwork>) -> OverlayPeer {
        pod_cidrs.sort();
        pod_cidrs.dedup();
        OverlayPeer { node_ip, pod_cidrs }
    }

    /// The peer's VTEP MAC.
    pub fn mac(&self) -> [u8; 6] {
        vtep_mac(self.node_ip)
    }
}

/// The VTEP MAC of the node with underlay address `addr`, the same on every node: the first
/// six bytes of SHA-256 of `"cni-rs vtep "` followed by the address's octets (4 or 16),
/// then made locally administered (bit 1 of the first byte set) and unicast (bit 0 clear).
/// 46 random bits: two nodes of a 5,000-node cluster share one with odds of about 2e-7.
pub fn vtep_mac(addr: IpAddr) -> [u8; 6] {
    let mut h = Sha256::new();
    h.update(b"cni-rs vtep ");
    match addr {
        IpAddr::V4(a) => h.update(a.octets()),
        IpAddr::V6(a) => h.update(a.octets()),
    }
    let d = h.finalize();
    let mut mac = [d[0], d[1], d[2], d[3], d[4], d[5]];
    mac[0] = (mac[0] & 0xfe) | 0x02;
    mac
}

/// The next hop of the route to a peer's pod range `cidr`: its network address (flannel's
/// `.0`), never a pod's (host-local starts at the second address), in either family. It
/// exists only as our neighbour entry on the device.
pub fn overlay_gateway(cidr: &IpNetwork) -> IpAddr {
    cidr.network()
}

/// This node's address on the device for its pod range `cidr`: the same network address
/// every peer's route to that range goes via ([`overlay_gateway`]), so a reply to it comes
/// back through the overlay. Never a pod's or the bridge's (host-local hands out from the
/// second address on, the first is the gateway); in IPv6 it is also the subnet-router
/// anycast address the bridge holds, which Linux allows beside a unicast `/128`.
pub fn overlay_address(cidr: &IpNetwork) -> IpAddr {
    cidr.network()
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn vtep_mac_is_stable_unicast_local_and_per_address() {
        let a = vtep_mac("192.168.1.10".parse().unwrap());
        assert_eq!(a, vtep_mac("192.168.1.10".parse().unwrap()));
        for addr in [
            "192.168.1.10",
            "192.168.1.11",
            "fd00::a",
            "::ffff:192.168.1.10",
        ] {
            let mac = vtep_mac(addr.parse().unwrap());
            assert_eq!(mac[0] & 0x01, 0, "{addr}: unicast");
            assert_eq!(mac[0] & 0x02, 0x02, "{addr}: locally administered");
        }
        assert_ne!(a, vtep_mac("192.168.1.11".parse().unwrap()));
        assert_ne!(
            a,
            vtep_mac("::ffff:192.168.1.10".parse().unwrap()),
            "a mapped address is another node's"
        );
        // Pinned: every node of a cluster must derive the same MAC, across releases too
        // (computed independently: Python's hashlib over the documented input).
        assert_eq!(
            vtep_mac("10.0.0.1".parse().unwrap()),
            [0xe6, 0x1a, 0xfc, 0xd8, 0x30, 0xb7]
        );
    }

    #[test]
    fn mtu_subtracts_the_underlay_family_overhead() {
        let spec = |local: &str| VxlanSpec {
            vni: 1,
            port: 8472,
            local: local.parse().unwrap(),
            underlay_mtu: 1500,
            addr4: None,
            addr6: None,
        };
        assert_eq!(spec("192.168.1.1").mtu(), 1450);
        assert_eq!(spec("fd00::1").mtu(), 1430);
    }

    #[test]
    fn gateway_is_the_network_address_and_peers_compare_sorted() {
        assert_eq!(
            overlay_gateway(&"10.244.3.0/24".parse().unwrap()),
            "10.244.3.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            overlay_gateway(&"fd10:3::/64".parse().unwrap()),
            "fd10:3::".parse::<IpAddr>().unwrap()
        );
        let ip = "192.168.2.2".parse().unwrap();
        let (a, b): (IpNetwork, IpNetwork) = (
            "fd10:3::/64".parse().unwrap(),
            "10.244.3.0/24".parse().unwrap(),
        );
        assert_eq!(
            OverlayPeer::new(ip, vec![a, b, a]),
            OverlayPeer::new(ip, vec![b, a])
        );
    }
}
