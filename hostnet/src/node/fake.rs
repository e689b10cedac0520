//! An in-memory [`NodeNet`]: routes (ours and someone else's), local addresses, on-link
//! prefixes, the firewall policy, a log of every change and failures on request.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Mutex;

use ipnetwork::IpNetwork;

use super::{NodeNet, NodeNetError, NodePolicy, OverlayPeer, PodRoute, VxlanSpec, libc_errno};

#[derive(Debug, Default)]
pub struct FakeState {
    /// Our routes (protocol ROUTE_PROTO).
    pub ours: BTreeSet<PodRoute>,
    /// Destinations held by routes that are not ours.
    pub foreign: BTreeSet<IpNetwork>,
    /// Connected prefixes: an address in one of them is on-link.
    pub connected: Vec<IpNetwork>,
    pub local: Vec<IpAddr>,
    pub firewall: Option<NodePolicy>,
    pub forwarding: (bool, bool),
    /// Our VXLAN device, when there is one.
    pub vxlan: Option<VxlanSpec>,
    /// VXLAN devices that are not ours: (name, VNI, port, over IPv6).
    pub other_vxlan: Vec<(String, u32, u16, bool)>,
    /// The overlay peers on it, by node address.
    pub overlay: BTreeMap<IpAddr, OverlayPeer>,
    /// Our NetworkPolicy table's sets and chains, when there is one (`fake_policy.rs`).
    pub netpol: Option<netpol::program::Program>,
    /// One line per change: `add 10.1.0.0/24 via 192.168.0.2`, `firewall`, ...
    pub log: Vec<String>,
    /// Operation names (`add_route`, `apply_firewall`, ...) that fail until removed.
    pub fail: BTreeSet<&'static str>,
}

/// What the firewall table does to a packet leaving the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Egress {
    /// Its source stays.
    Kept,
    /// Its source becomes the node's (`random_fully`: a random source port per new
    /// connection, as the real rule does).
    Masqueraded { random_fully: bool },
}

#[derive(Debug, Default)]
pub struct FakeNodeNet {
    pub state: Mutex<FakeState>,
}

impl FakeNodeNet {
    pub fn new(connected: Vec<IpNetwork>, local: Vec<IpAddr>) -> Self {
        FakeNodeNet {
            state: Mutex::new(FakeState {
                connected,
                local,
                ..FakeState::default()
            }),
        }
    }

    /// What the firewall table in place does to a packet from `src` to `dst`, as the real
    /// rule decides (`firewall.rs`): from this node's pods, not to a no-masquerade range,
    /// multicast or an address of this node.
    pub fn egress(&self, src: IpAddr, dst: IpAddr) -> Egress {
        self.with(|s| {
            let Some(policy) = &s.firewall else {
                return Egress::Kept;
            };
            let family = if src.is_ipv4() {
                &policy.v4
            } else {
                &policy.v6
            };
            let Some(f) = family else {
                return Egress::Kept;
            };
            let masquerade = src.is_ipv4() == dst.is_ipv4()
                && f.pod_cidrs.iter().any(|n| n.contains(src))
                && !f.no_masquerade.iter().any(|n| n.contains(dst))
                && !dst.is_multicast()
                && !s.local.contains(&dst);
            if masquerade {
                Egress::Masqueraded { random_fully: true }
            } else {
                Egress::Kept
            }
        })
    }

    /// Runs `f` on the state (setup and assertions in tests).
    pub fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn op(&self, name: &'static str) -> Result<std::sync::MutexGuard<'_, FakeState>, NodeNetError> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.fail.contains(name) {
            return Err(NodeNetError {
                op: name.to_string(),
                reason: "injected failure".to_string(),
                errno: None,
            });
        }
        Ok(state)
    }
}

impl FakeState {
    /// Whether one of our routes goes to `dst` (routes order by destination first).
    fn ours_to(&self, dst: &IpNetwork) -> bool {
        PodRoute::first_to(&self.ours, dst).is_some()
    }

    /// Whether an overlay peer other than `except` has a route to `dst`.
    fn overlay_holds(&self, dst: &IpNetwork, except: Option<IpAddr>) -> bool {
        self.overlay
            .values()
            .any(|p| Some(p.node_ip) != except && p.pod_cidrs.contains(dst))
    }
}

fn exists(op: &str) -> NodeNetError {
    NodeNetError {
        op: op.to_string(),
        reason: "File exists".to_string(),
        errno: Some(libc_errno::EEXIST),
    }
}

fn not_found(op: &str) -> NodeNetError {
    NodeNetError {
        op: op.to_string(),
        reason: "No such process".to_string(),
        errno: Some(libc_errno::ESRCH),
    }
}

impl NodeNet for FakeNodeNet {
    fn our_routes(&self) -> Result<Vec<PodRoute>, NodeNetError> {
        Ok(self.op("our_routes")?.ours.iter().cloned().collect())
    }

    fn add_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let mut s = self.op("add_route")?;
        if s.foreign.contains(&route.dst)
            || s.ours_to(&route.dst)
            || s.overlay_holds(&route.dst, None)
        {
            return Err(exists("add_route"));
        }
        s.ours.insert(route.clone());
        s.log
            .push(format!("add {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn replace_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let mut s = self.op("replace_route")?;
        s.ours.retain(|r| r.dst != route.dst);
        s.ours.insert(route.clone());
        s.log
            .push(format!("replace {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn del_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let mut s = self.op("del_route")?;
        if !s.ours.remove(route) {
            return Err(not_found("del_route"));
        }
        s.log
            .push(format!("del {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn on_link(&self, addr: IpAddr) -> Result<bool, NodeNetError> {
        Ok(self
            .op("on_link")?
            .connected
            .iter()
            .any(|n| n.contains(addr)))
    }

    fn local_addrs(&self) -> Result<Vec<IpAddr>, NodeNetError> {
        Ok(self.op("local_addrs")?.local.clone())
    }

    fn apply_firewall(&self, policy: &NodePolicy) -> Result<(), NodeNetError> {
        let mut s = self.op("apply_firewall")?;
        s.firewall = Some(policy.clone());
        s.log.push("firewall".to_string());
        Ok(())
    }

    fn firewall_matches(&self, policy: &NodePolicy) -> Result<bool, NodeNetError> {
        Ok(self.op("firewall_matches")?.firewall.as_ref() == Some(policy))
    }

    fn remove_firewall(&self) -> Result<(), NodeNetError> {
        let mut s = self.op("remove_firewall")?;
        if s.firewall.take().is_some() {
            s.log.push("remove firewall".to_string());
        }
        Ok(())
    }

    fn enable_forwarding(&self, v4: bool, v6: bool) -> Result<(), NodeNetError> {
        let mut s = self.op("enable_forwarding")?;
        s.forwarding = (s.forwarding.0 || v4, s.forwarding.1 || v6);
        Ok(())
    }

    fn ensure_vxlan(&self, spec: &VxlanSpec) -> Result<(), NodeNetError> {
        let mut s = self.op("ensure_vxlan")?;
        // The device itself, apart from its addresses (which change in place).
        let device = |v: &VxlanSpec| VxlanSpec {
            addr4: None,
            addr6: None,
            ..*v
        };
        let same = s.vxlan.as_ref().map(device) == Some(device(spec));
        let clash = s.other_vxlan.iter().find(|(_, vni, port, v6)| {
            (*vni, *port, *v6) == (spec.vni, spec.port, spec.local.is_ipv6())
        });
        if let (false, Some((name, ..))) = (same, clash) {
            return Err(NodeNetError {
                op: "ensure_vxlan".to_string(),
                reason: format!(
                    "the VXLAN device {name} already has VNI {} on UDP port {}",
                    spec.vni, spec.port
                ),
                errno: Some(libc_errno::EADDRINUSE),
            });
        }
        if !same {
            // The real device is made anew: its entries go with the old one.
            if s.vxlan.take().is_some() {
                s.overlay.clear();
            }
            s.log
                .push(format!("vxlan vni {} local {}", spec.vni, spec.local));
        }
        if s.vxlan != Some(*spec) {
            s.vxlan = Some(*spec);
        }
        Ok(())
    }

    fn remove_vxlan(&self) -> Result<(), NodeNetError> {
        let mut s = self.op("remove_vxlan")?;
        if s.vxlan.take().is_some() {
            s.overlay.clear();
            s.log.push("remove vxlan".to_string());
        }
        Ok(())
    }

    fn overlay_peers(&self) -> Result<Vec<OverlayPeer>, NodeNetError> {
        Ok(self
            .op("overlay_peers")?
            .overlay
            .values()
            .cloned()
            .collect())
    }

    fn add_overlay_peer(&self, peer: &OverlayPeer) -> Result<(), NodeNetError> {
        let mut s = self.op("add_overlay_peer")?;
        if s.vxlan.is_none() {
            return Err(NodeNetError {
                op: "add_overlay_peer".to_string(),
                reason: "no vxlan device".to_string(),
                errno: Some(libc_errno::ENODEV),
            });
        }
        let held = peer.pod_cidrs.iter().any(|c| {
            s.foreign.contains(c) || s.ours_to(c) || s.overlay_holds(c, Some(peer.node_ip))
        });
        if held {
            return Err(exists("add_overlay_peer"));
        }
        let peer = OverlayPeer::new(peer.node_ip, peer.pod_cidrs.clone());
        let cidrs: Vec<String> = peer.pod_cidrs.iter().map(ToString::to_string).collect();
        s.log
            .push(format!("overlay {} {}", peer.node_ip, cidrs.join(",")));
        s.overlay.insert(peer.node_ip, peer);
        Ok(())
    }

    fn del_overlay_peer(&self, peer: &OverlayPeer) -> Result<(), NodeNetError> {
        let mut s = self.op("del_overlay_peer")?;
        if s.overlay.remove(&peer.node_ip).is_some() {
            s.log.push(format!("del overlay {}", peer.node_ip));
        }
        Ok(())
    }
}

#[cfg(test)]
mod unit {
    use super::*;
    use crate::node::VxlanSpec;

    fn spec(vni: u32) -> VxlanSpec {
        VxlanSpec {
            vni,
            port: 8472,
            local: "192.168.10.11".parse().unwrap(),
            underlay_mtu: 1500,
            addr4: None,
            addr6: None,
        }
    }

    #[test]
    fn overlay_and_direct_routes_exclude_each_other_and_a_new_device_drops_peers() {
        let k = FakeNodeNet::default();
        let cidr: IpNetwork = "10.244.3.0/24".parse().unwrap();
        let peer = OverlayPeer::new("192.168.20.21".parse().unwrap(), vec![cidr]);
        assert_eq!(
            k.add_overlay_peer(&peer).unwrap_err().errno,
            Some(libc_errno::ENODEV)
        );
        k.ensure_vxlan(&spec(1)).unwrap();
        k.add_overlay_peer(&peer).unwrap();
        k.add_overlay_peer(&peer).unwrap();
        let direct = PodRoute {
            dst: cidr,
            gateway: "192.168.10.12".parse().unwrap(),
        };
        assert!(k.add_route(&direct).unwrap_err().is_exists());
        assert!(k.our_routes().unwrap().is_empty());
        k.ensure_vxlan(&spec(1)).unwrap();
        assert_eq!(k.overlay_peers().unwrap(), vec![peer.clone()]);
        k.ensure_vxlan(&spec(2)).unwrap();
        assert!(k.overlay_peers().unwrap().is_empty());
        k.add_route(&direct).unwrap();
        assert!(k.add_overlay_peer(&peer).unwrap_err().is_exists());
        k.remove_vxlan().unwrap();
        assert_eq!(k.our_routes().unwrap(), vec![direct]);
    }

    /// Issue 27, item 9: what leaves the cluster is masqueraded with random source ports;
    /// multicast and pod-to-pod traffic keep their source.
    #[test]
    fn egress_is_masqueraded_random_fully_except_multicast_and_the_cluster() {
        let node: IpAddr = "192.168.10.11".parse().unwrap();
        let k = FakeNodeNet::new(vec![], vec![node]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (pod4, pod6) = (ip("10.244.1.2"), ip("fd00:244:1::2"));
        assert_eq!(k.egress(pod4, ip("8.8.8.8")), Egress::Kept, "no table yet");
        let family = |pods: &str, nomasq: &[&str]| super::super::FamilyPolicy {
            pod_cidrs: vec![pods.parse().unwrap()],
            no_masquerade: nomasq.iter().map(|n| n.parse().unwrap()).collect(),
        };
        k.apply_firewall(&NodePolicy {
            v4: Some(family("10.244.1.0/24", &["10.244.0.0/16"])),
            v6: Some(family("fd00:244:1::/64", &["fd00:244::/48"])),
        })
        .unwrap();
        let masq = Egress::Masqueraded { random_fully: true };
        assert_eq!(k.egress(pod4, ip("8.8.8.8")), masq);
        assert_eq!(k.egress(pod6, ip("2001:db8::1")), masq);
        for dst in ["224.0.0.251", "239.255.255.250", "ff02::fb", "ff05::1:3"] {
            assert_eq!(k.egress(pod4, ip(dst)), Egress::Kept, "{dst}");
            assert_eq!(k.egress(pod6, ip(dst)), Egress::Kept, "{dst}");
        }
        assert_eq!(k.egress(pod4, ip("10.244.2.5")), Egress::Kept);
        assert_eq!(k.egress(pod4, node), Egress::Kept);
        assert_eq!(k.egress(ip("192.168.10.99"), ip("8.8.8.8")), Egress::Kept);
    }
}
