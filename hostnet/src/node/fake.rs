//! An in-memory [`NodeNet`]: routes (ours and someone else's), local addresses, on-link
//! prefixes, the firewall policy, a log of every change and failures on request.
//! `scenarios.rs` runs the same scenarios on it and on the kernel: what it answers is
//! what the kernel answers (each rule below names the kernel behaviour it copies).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Mutex;

use ipnetwork::IpNetwork;

use super::firewall::interval_elems;
use super::firewall_delta::{elems_to_cidrs, set_deltas};
use super::{
    Drift, FamilyPolicy, NodeNet, NodeNetError, NodePolicy, Notify, Op, OverlayPeer, PodRoute,
    Refusal, VxlanSpec, Watch, libc_errno,
};
use crate::nftnl::Elem;

#[derive(Debug, Default)]
pub struct FakeState {
    /// Our routes (protocol ROUTE_PROTO).
    pub ours: BTreeSet<PodRoute>,
    /// Destinations held by routes that are not ours (each via a gateway).
    pub foreign: BTreeSet<IpNetwork>,
    /// Connected prefixes: an address in one of them is on-link, unless a more specific
    /// route via a gateway covers it.
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
    /// The room its sets were made with, where bounded (`policy::room`).
    pub netpol_room: BTreeMap<String, u32>,
    /// The node's conntrack entries, as a test seeds them (`fake_policy.rs`).
    pub conntrack: Vec<netpol::conntrack::CtEntry>,
    /// br_netfilter and its sysctls (`new`: loaded, both off; `default`: not loaded).
    pub bridge_nf: super::BridgeNf,
    /// One line per change: `add 10.1.0.0/24 via 192.168.0.2`, `firewall`, ...
    pub log: Vec<String>,
    /// Operation names (`add_route`, `apply_firewall`, ...) that fail until removed.
    pub fail: Failures,
    /// The MTU of every interface (the default route's, the underlay's); None: no default
    /// route.
    pub mtu: Option<u32>,
}

/// The operations made to fail. As with `FakeKernel`, a failure listed but never met
/// fails the test (when dropped, or removed unmet): the test exercised nothing, the
/// operation was renamed or never called.
#[derive(Debug, Default)]
pub struct Failures {
    listed: BTreeSet<&'static str>,
    /// Listed ones an operation has met since they were listed.
    met: BTreeSet<&'static str>,
    /// Removed before any operation met them.
    unmet: BTreeSet<&'static str>,
    /// Tripwires: they fail an operation that must not be called, and are meant never
    /// to be met.
    forbidden: BTreeSet<&'static str>,
}

impl Failures {
    /// `op` fails from now on; false if it already did.
    pub fn insert(&mut self, op: &'static str) -> bool {
        let new = self.listed.insert(op);
        if new {
            self.met.remove(op);
        }
        new
    }

    /// `op` must not be called: it fails if it is, and nothing is owed if it is not.
    pub fn forbid(&mut self, op: &'static str) {
        self.forbidden.insert(op);
    }

    /// `op` succeeds again; false if it was not failing.
    pub fn remove(&mut self, op: &'static str) -> bool {
        let forbidden = self.forbidden.remove(op);
        let listed = self.listed.remove(op);
        if listed && !self.met.remove(op) {
            self.unmet.insert(op);
        }
        listed || forbidden
    }

    pub fn clear(&mut self) {
        self.forbidden.clear();
        for op in std::mem::take(&mut self.listed) {
            if !self.met.remove(op) {
                self.unmet.insert(op);
            }
        }
    }

    pub fn contains(&self, op: &str) -> bool {
        self.listed.contains(op) || self.forbidden.contains(op)
    }

    /// Whether `op` fails now (and records that its failure was met).
    fn meet(&mut self, op: &'static str) -> bool {
        if self.listed.contains(op) {
            self.met.insert(op);
            return true;
        }
        self.forbidden.contains(op)
    }
}

impl Drop for Failures {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let never: BTreeSet<_> = self.listed.difference(&self.met).collect();
            assert!(
                never.is_empty() && self.unmet.is_empty(),
                "failures listed but never met: {:?}",
                never.into_iter().chain(&self.unmet).collect::<Vec<_>>()
            );
        }
    }
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
    /// The agent's [`NodeNet::watch`], told by [`FakeNodeNet::drift`].
    watcher: Mutex<Option<Watcher>>,
}

struct Watcher(Notify);

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watcher")
    }
}

impl FakeNodeNet {
    pub fn new(connected: Vec<IpNetwork>, local: Vec<IpAddr>) -> Self {
        FakeNodeNet {
            state: Mutex::new(FakeState {
                connected,
                local,
                bridge_nf: super::BridgeNf {
                    loaded: true,
                    ..super::BridgeNf::default()
                },
                ..FakeState::default()
            }),
            watcher: Mutex::default(),
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

    /// What the kernel tells a watch when someone else changed `drift`'s objects (the
    /// change itself is the test's, on the state); false if nothing watches.
    pub fn drift(&self, drift: Drift) -> bool {
        let watcher = self.watcher.lock().unwrap_or_else(|p| p.into_inner());
        watcher.as_ref().map(|w| (w.0)(drift)).is_some()
    }

    /// Runs `f` on the state (setup and assertions in tests).
    pub fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The state for the method `name` doing `op`, unless a test made `name` fail.
    fn op(
        &self,
        name: &'static str,
        op: &Op,
    ) -> Result<std::sync::MutexGuard<'_, FakeState>, NodeNetError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.fail.meet(name) {
            return Err(NodeNetError::new(op.clone(), Refusal::Injected));
        }
        Ok(state)
    }
}

impl FakeState {
    /// Whether one of our routes goes to `dst` (routes order by destination first).
    fn ours_to(&self, dst: &IpNetwork) -> bool {
        PodRoute::first_to(&self.ours, dst).is_some()
    }

    /// Whether an overlay peer has a route to `dst`.
    fn overlay_holds(&self, dst: &IpNetwork) -> bool {
        self.overlay.values().any(|p| p.pod_cidrs.contains(dst))
    }

    /// Whether a route already goes to exactly `dst`: the kernel's fib-match lookup finds
    /// it (a connected prefix included), whatever its metric.
    fn held(&self, dst: &IpNetwork) -> bool {
        self.foreign.contains(dst)
            || self.ours_to(dst)
            || self.overlay_holds(dst)
            || self.connected.iter().any(|c| c == dst)
    }

    /// Every local address: the links' and our device's (as the kernel's address dump).
    fn local_addrs(&self) -> Vec<IpAddr> {
        let device = self.vxlan.iter().flat_map(VxlanSpec::addrs);
        self.local
            .iter()
            .copied()
            .chain(device.map(|a| a.ip()))
            .collect()
    }

    /// The kernel's answer for `addr`: the most specific route wins; local addresses and
    /// connected prefixes have no gateway, every other route has one (a tie goes to the
    /// connected prefix, whose metric 0 is below a foreign route's).
    fn on_link(&self, addr: IpAddr) -> bool {
        let host = |a: IpAddr| IpNetwork::from(a);
        let direct = self.local_addrs().into_iter().map(host);
        let direct = direct.chain(self.connected.iter().copied());
        let via = self.ours.iter().map(|r| r.dst);
        let via = via.chain(self.foreign.iter().copied());
        let via = via.chain(self.overlay.values().flat_map(|p| p.pod_cidrs.clone()));
        let best = |nets: &mut dyn Iterator<Item = IpNetwork>| {
            nets.filter(|n| n.contains(addr)).map(|n| n.prefix()).max()
        };
        match (best(&mut direct.into_iter()), best(&mut via.into_iter())) {
            (Some(d), Some(v)) => d >= v,
            (d, _) => d.is_some(),
        }
    }

    /// A gateway must be on a link: the kernel refuses one that no connected prefix holds
    /// (ENETUNREACH; IPv6 EHOSTUNREACH), even when a route via another gateway reaches it.
    fn gateway_on_link(&self, op: &Op, route: &PodRoute) -> Result<(), NodeNetError> {
        if self.connected.iter().any(|c| c.contains(route.gateway)) {
            return Ok(());
        }
        let refused = Refusal::GatewayNotOnLink(route.gateway);
        Err(NodeNetError::new(op.clone(), refused))
    }
}

/// `policy` as the kernel holds it, to compare: per family, the interval set elements of
/// its pod and no-masquerade ranges (order, duplicates and covered ranges vanish); an
/// empty policy is no table at all.
fn held_policy(policy: &NodePolicy) -> [Option<[Vec<Elem>; 2]>; 2] {
    let held = |f: &Option<FamilyPolicy>, key_len| {
        f.as_ref()
            .map(|f| [&f.pod_cidrs, &f.no_masquerade].map(|c| interval_elems(c, key_len)))
    };
    [held(&policy.v4, 4), held(&policy.v6, 16)]
}

fn exists(op: Op) -> NodeNetError {
    NodeNetError::new(op, Refusal::Errno(libc_errno::EEXIST))
}

fn not_found(op: Op) -> NodeNetError {
    NodeNetError::new(op, Refusal::Errno(libc_errno::ESRCH))
}

impl NodeNet for FakeNodeNet {
    fn our_routes(&self) -> Result<Vec<PodRoute>, NodeNetError> {
        Ok(self
            .op("our_routes", &Op::ListRoutes)?
            .ours
            .iter()
            .cloned()
            .collect())
    }

    fn add_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let op = Op::AddRoute(route.clone());
        let mut s = self.op("add_route", &op)?;
        if s.held(&route.dst) {
            return Err(exists(op));
        }
        s.gateway_on_link(&op, route)?;
        s.ours.insert(route.clone());
        s.log
            .push(format!("add {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn replace_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let op = Op::ReplaceRoute(route.clone());
        let mut s = self.op("replace_route", &op)?;
        s.gateway_on_link(&op, route)?;
        s.ours.retain(|r| r.dst != route.dst);
        s.ours.insert(route.clone());
        s.log
            .push(format!("replace {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn del_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let op = Op::DeleteRoute(route.clone());
        let mut s = self.op("del_route", &op)?;
        if !s.ours.remove(route) {
            return Err(not_found(op));
        }
        s.log
            .push(format!("del {} via {}", route.dst, route.gateway));
        Ok(())
    }

    fn on_link(&self, addr: IpAddr) -> Result<bool, NodeNetError> {
        Ok(self.op("on_link", &Op::RouteTo(addr))?.on_link(addr))
    }

    fn local_addrs(&self) -> Result<Vec<IpAddr>, NodeNetError> {
        Ok(self.op("local_addrs", &Op::ListAddresses)?.local_addrs())
    }

    fn apply_firewall(&self, policy: &NodePolicy) -> Result<(), NodeNetError> {
        let mut s = self.op("apply_firewall", &Op::ApplyFirewall)?;
        // As `firewall::apply_batch`: a pod range of everything is refused.
        let pods = [&policy.v4, &policy.v6].into_iter().flatten();
        let all = pods.flat_map(|f| &f.pod_cidrs).find(|c| c.prefix() == 0);
        if let Some(all) = all {
            let refused = Refusal::EverythingPodCidr(*all);
            return Err(NodeNetError::new(Op::ApplyFirewall, refused));
        }
        s.firewall = Some(policy.clone());
        s.log.push("firewall".to_string());
        Ok(())
    }

    fn update_firewall(&self, from: &NodePolicy, to: &NodePolicy) -> Result<(), NodeNetError> {
        let Some(deltas) = set_deltas(from, to) else {
            return self.apply_firewall(to);
        };
        if deltas.is_empty() {
            return Ok(()); // as `HostNodeNet`: no batch at all
        }
        let mut s = self.op("update_firewall", &Op::ApplyFirewall)?;
        // As the kernel: a set or element deleted that is not there fails the whole batch.
        let enoent = || NodeNetError::new(Op::ApplyFirewall, Refusal::Errno(libc_errno::ENOENT));
        let mut next = s.firewall.clone().ok_or_else(enoent)?;
        for d in &deltas {
            let fam = if d.key_len == 4 {
                &mut next.v4
            } else {
                &mut next.v6
            };
            let f = fam.as_mut().ok_or_else(enoent)?;
            let mut elems: BTreeSet<Elem> = interval_elems(&f.no_masquerade, d.key_len)
                .into_iter()
                .collect();
            for e in &d.del {
                if !elems.remove(e) {
                    return Err(enoent());
                }
            }
            elems.extend(d.add.iter().cloned());
            let elems: Vec<Elem> = elems.into_iter().collect();
            f.no_masquerade = elems_to_cidrs(&elems, d.key_len);
        }
        s.firewall = Some(next);
        s.log.push("firewall elements".to_string());
        Ok(())
    }

    fn firewall_matches(&self, policy: &NodePolicy) -> Result<bool, NodeNetError> {
        let s = self.op("firewall_matches", &Op::ReadFirewall)?;
        let none = NodePolicy::default();
        let held = held_policy(s.firewall.as_ref().unwrap_or(&none));
        Ok(held == held_policy(policy))
    }

    fn remove_firewall(&self) -> Result<(), NodeNetError> {
        let mut s = self.op("remove_firewall", &Op::RemoveFirewall)?;
        if s.firewall.take().is_some() {
            s.log.push("remove firewall".to_string());
        }
        Ok(())
    }

    fn enable_forwarding(&self, v4: bool, v6: bool) -> Result<(), NodeNetError> {
        let mut s = self.op("enable_forwarding", &Op::EnableForwarding)?;
        s.forwarding = (s.forwarding.0 || v4, s.forwarding.1 || v6);
        Ok(())
    }

    fn ensure_vxlan(&self, spec: &VxlanSpec) -> Result<(), NodeNetError> {
        let mut s = self.op("ensure_vxlan", &Op::EnsureVxlan)?;
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
            let taken = Refusal::VniInUse {
                device: name.clone(),
                vni: spec.vni,
                port: spec.port,
            };
            return Err(NodeNetError::new(Op::EnsureVxlan, taken));
        }
        if !same {
            // The real device is made anew: its entries go with the old one.
            if s.vxlan.take().is_some() {
                s.overlay.clear();
            }
            s.log
                .push(format!("vxlan vni {} local {}", spec.vni, spec.local));
        }
        // IPv4 flushes its routes through a device that loses its last IPv4 address
        // (IPv6 keeps them: the device keeps its link-local address).
        if s.vxlan.is_some_and(|v| v.addr4.is_some()) && spec.addr4.is_none() {
            for p in s.overlay.values_mut() {
                p.pod_cidrs.retain(IpNetwork::is_ipv6);
            }
        }
        s.vxlan = Some(*spec);
        Ok(())
    }

    fn remove_vxlan(&self) -> Result<(), NodeNetError> {
        let mut s = self.op("remove_vxlan", &Op::RemoveVxlan)?;
        if s.vxlan.take().is_some() {
            s.overlay.clear();
            s.log.push("remove vxlan".to_string());
        }
        Ok(())
    }

    fn overlay_peers(&self) -> Result<Vec<OverlayPeer>, NodeNetError> {
        Ok(self
            .op("overlay_peers", &Op::ListOverlayPeers)?
            .overlay
            .values()
            .cloned()
            .collect())
    }

    fn add_overlay_peer(&self, peer: &OverlayPeer) -> Result<(), NodeNetError> {
        let op = Op::AddOverlayPeer(peer.clone());
        let mut s = self.op("add_overlay_peer", &op)?;
        if s.vxlan.is_none() {
            return Err(NodeNetError::new(op, Refusal::NoDevice));
        }
        // Another peer's overlay range is taken over (the kernel replaces the route and
        // the neighbour entry); any other route to it stays and refuses the peer.
        let held = peer
            .pod_cidrs
            .iter()
            .any(|c| !s.overlay_holds(c) && s.held(c));
        if held {
            return Err(exists(op));
        }
        for p in s.overlay.values_mut() {
            p.pod_cidrs.retain(|c| !peer.pod_cidrs.contains(c));
        }
        let cidrs: Vec<String> = peer.pod_cidrs.iter().map(ToString::to_string).collect();
        s.log
            .push(format!("overlay {} {}", peer.node_ip, cidrs.join(",")));
        // The entries are replaced, not the peer: its other ranges' routes stay.
        let had = s.overlay.remove(&peer.node_ip).map(|p| p.pod_cidrs);
        let cidrs = [had.unwrap_or_default(), peer.pod_cidrs.clone()].concat();
        s.overlay
            .insert(peer.node_ip, OverlayPeer::new(peer.node_ip, cidrs));
        Ok(())
    }

    fn del_overlay_peer(&self, peer: &OverlayPeer) -> Result<(), NodeNetError> {
        let mut s = self.op("del_overlay_peer", &Op::DeleteOverlayPeer(peer.clone()))?;
        if s.overlay.remove(&peer.node_ip).is_some() {
            s.log.push(format!("del overlay {}", peer.node_ip));
        }
        Ok(())
    }

    fn default_route_mtu(&self) -> Result<Option<u32>, NodeNetError> {
        Ok(self.op("default_route_mtu", &Op::DefaultRouteMtu)?.mtu)
    }

    fn underlay_mtu(&self, addr: IpAddr) -> Result<Option<u32>, NodeNetError> {
        Ok(self.op("underlay_mtu", &Op::UnderlayMtu(addr))?.mtu)
    }

    /// One watch at a time (a second replaces the first); [`FakeNodeNet::drift`] tells it.
    fn watch(&self, notify: Notify) -> Result<Watch, NodeNetError> {
        drop(self.op("watch", &Op::Watch)?);
        *self.watcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(Watcher(notify));
        Ok(Watch::detached())
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
        // The direct route's gateway on the node's lan (the kernel wants it on-link).
        let k = FakeNodeNet::new(vec!["192.168.10.0/24".parse().unwrap()], vec![]);
        let cidr: IpNetwork = "10.244.3.0/24".parse().unwrap();
        let peer = OverlayPeer::new("192.168.20.21".parse().unwrap(), vec![cidr]);
        assert_eq!(
            k.add_overlay_peer(&peer).unwrap_err().errno(),
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

    /// Issue 28, item 5: a failure no operation met means the test exercised nothing.
    #[test]
    #[should_panic(expected = "failures listed but never met: [\"add_rout\"]")]
    fn a_failure_never_met_fails_the_test() {
        let k = FakeNodeNet::default();
        k.with(|s| s.fail.insert("add_rout"));
        k.our_routes().unwrap();
    }

    #[test]
    #[should_panic(expected = "failures listed but never met: [\"apply_firewall\"]")]
    fn a_failure_removed_before_it_was_met_fails_the_test() {
        let k = FakeNodeNet::default();
        k.with(|s| {
            s.fail.insert("our_routes");
            s.fail.insert("apply_firewall");
        });
        k.our_routes().unwrap_err();
        k.with(|s| s.fail.clear());
        k.our_routes().unwrap();
    }

    #[test]
    fn a_forbidden_operation_fails_and_is_owed_nothing() {
        let k = FakeNodeNet::default();
        k.with(|s| {
            s.fail.forbid("our_routes");
            s.fail.forbid("overlay_peers");
        });
        k.our_routes().unwrap_err();
        k.with(|s| s.fail.remove("our_routes"));
        k.our_routes().unwrap();
    }

    #[test]
    fn a_failure_met_then_removed_passes() {
        let k = FakeNodeNet::default();
        k.with(|s| s.fail.insert("remove_firewall"));
        k.remove_firewall().unwrap_err();
        k.remove_firewall().unwrap_err();
        k.with(|s| s.fail.remove("remove_firewall"));
        k.remove_firewall().unwrap();
        // Listed anew, it must be met anew.
        k.with(|s| s.fail.insert("remove_firewall"));
        k.remove_firewall().unwrap_err();
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
            pods_on: "cni0".into(),
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
