//! What the node agent asks of the kernel: routes to the other nodes' pods, marked as ours,
//! and one node-level firewall table (masquerade to outside the cluster, forwarding of pod
//! traffic). The agent's reconcile is written against [`NodeNet`]; [`fake::FakeNodeNet`]
//! (feature `fake`) keeps the same state in memory so its decisions are tested without root.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use ipnetwork::IpNetwork;

mod bridge_nf;
mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
#[cfg(any(test, feature = "fake"))]
mod fake_policy;
mod firewall;
mod firewall_delta;
mod forwarding;
mod host;
mod mtu;
mod overlay;
mod overlay_host;
mod policy;
mod watch;
mod watch_filter;
mod watch_host;

pub use bridge_nf::BridgeNf;
pub use error::{Cause, NodeNetError, Op, Refusal};
pub use host::HostNodeNet;
pub use overlay::{
    OverlayPeer, VXLAN_DEVICE, VXLAN_OVERHEAD_V4, VXLAN_OVERHEAD_V6, VxlanSpec, overlay_address,
    overlay_gateway, vtep_mac,
};
pub use policy::PolicyNet;
pub use watch::{Drift, Notify, Watch};

/// The route protocol number that marks a route as the agent's (`ip route show proto 0xcb`).
/// Unassigned in iproute2's `rt_protos` and by the projects we share nodes with (bird 12,
/// zebra 11, babel 42, bgp 186-192, calico 80, kube-router 0x11).
pub const ROUTE_PROTO: u8 = 0xcb;

/// A route in the main table to another node's pod range: `dst via gateway proto ROUTE_PROTO`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRoute {
    pub dst: IpNetwork,
    pub gateway: IpAddr,
}

impl PodRoute {
    /// The first of `routes` to `dst` (routes order by destination, then gateway), found
    /// without walking the others.
    pub fn first_to<'a>(routes: &'a BTreeSet<PodRoute>, dst: &IpNetwork) -> Option<&'a PodRoute> {
        let lowest = PodRoute {
            dst: *dst,
            gateway: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        routes.range(lowest..).next().filter(|r| r.dst == *dst)
    }
}

/// One family's node-level firewall policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FamilyPolicy {
    /// This node's pod ranges: the sources whose traffic is masqueraded when it leaves the
    /// cluster, and whose traffic is forwarded whatever the node's FORWARD policy.
    pub pod_cidrs: Vec<IpNetwork>,
    /// Destinations never masqueraded: every node's podCIDRs plus `--no-masquerade-cidr`.
    pub no_masquerade: Vec<IpNetwork>,
}

/// The whole node-level firewall state the agent wants; a family that is `None` has no
/// rules of ours.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodePolicy {
    pub v4: Option<FamilyPolicy>,
    pub v6: Option<FamilyPolicy>,
    /// The interface this node's pods are on (the bridge): traffic from the pod ranges is
    /// forwarded whatever the FORWARD policy only when it comes from there, so a packet
    /// with a forged pod source from any other interface is not let through.
    pub pods_on: String,
}

/// The errno values the agent tells apart (stable across Linux architectures).
pub mod libc_errno {
    pub const ENOENT: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const EEXIST: i32 = 17;
    pub const ENODEV: i32 = 19;
    pub const EADDRINUSE: i32 = 98;
}

/// The kernel as the node agent sees it, in the host's network namespace (or, in tests, a
/// "node" namespace).
pub trait NodeNet {
    /// Every route in the main table with protocol [`ROUTE_PROTO`], both families, except
    /// the overlay's (those through [`VXLAN_DEVICE`]: [`NodeNet::overlay_peers`] has them).
    fn our_routes(&self) -> Result<Vec<PodRoute>, NodeNetError>;
    /// Adds a route that must not exist yet (`NLM_F_EXCL`): a route of someone else to the
    /// same destination (whatever its metric) makes this fail with EEXIST and is left alone.
    /// The gateway must be on a link (a connected prefix holds it): ENETUNREACH otherwise
    /// (IPv6: EHOSTUNREACH), also when a route via another gateway reaches it.
    fn add_route(&self, route: &PodRoute) -> Result<(), NodeNetError>;
    /// [`NodeNet::add_route`] for each of `routes`, its result in order; one failing stops
    /// none of the others. [`HostNodeNet`] pipelines them.
    fn add_routes(&self, routes: &[PodRoute]) -> Vec<Result<(), NodeNetError>> {
        routes.iter().map(|r| self.add_route(r)).collect()
    }
    /// Replaces our route to `route.dst` (a changed gateway) in one message. The kernel
    /// matches the route replaced by destination and metric, not protocol: call it only
    /// for a destination of ours (someone else's route at our metric would be replaced).
    fn replace_route(&self, route: &PodRoute) -> Result<(), NodeNetError>;
    /// Deletes our route (matched by destination, gateway and protocol).
    fn del_route(&self, route: &PodRoute) -> Result<(), NodeNetError>;
    /// Whether `addr` is directly reachable: the kernel's route to it has no gateway.
    fn on_link(&self, addr: IpAddr) -> Result<bool, NodeNetError>;
    /// [`NodeNet::on_link`] for each of `addrs`, its answer in order. [`HostNodeNet`]
    /// pipelines the lookups.
    fn on_link_many(&self, addrs: &[IpAddr]) -> Vec<Result<bool, NodeNetError>> {
        addrs.iter().map(|a| self.on_link(*a)).collect()
    }
    /// Every address on this node's interfaces (a peer claiming one is refused).
    fn local_addrs(&self) -> Result<Vec<IpAddr>, NodeNetError>;
    /// Makes our firewall table exactly `policy`, in one transaction: table `inet cni-rs`
    /// (masquerade) and, where iptables-nft's `filter FORWARD` chains exist, our commented
    /// accepts for the pod ranges at their head (see `firewall.rs`).
    fn apply_firewall(&self, policy: &NodePolicy) -> Result<(), NodeNetError>;
    /// Makes our firewall table, which holds `from` (what the last apply left), `to`. When
    /// only the no-masquerade ranges differ (a Node came or went), by deleting and adding
    /// just those set elements in one transaction, without reading the kernel; otherwise
    /// as [`NodeNet::apply_firewall`]. A table that does not hold `from` may fail the
    /// transaction (an element deleted that is not there: ENOENT), which changes nothing;
    /// one that holds more than `from` keeps that: compare ([`NodeNet::firewall_matches`])
    /// where that matters. The default: [`NodeNet::apply_firewall`].
    fn update_firewall(&self, from: &NodePolicy, to: &NodePolicy) -> Result<(), NodeNetError> {
        let _ = from;
        self.apply_firewall(to)
    }
    /// Whether our firewall table is present and matches `policy` (readiness, drift): its
    /// sets' elements, its chain and rules, and our FORWARD accepts in every iptables-nft
    /// `filter FORWARD` chain (one made after our apply, as Docker's, is drift).
    fn firewall_matches(&self, policy: &NodePolicy) -> Result<bool, NodeNetError>;
    /// Removes our firewall table and our FORWARD accepts (and only ours); absent, or a
    /// kernel without nf_tables, is success.
    fn remove_firewall(&self) -> Result<(), NodeNetError>;
    /// Turns IPv4 and/or IPv6 forwarding on (keeping an RA-learned IPv6 default route:
    /// `accept_ra` 2 first on each interface that holds a `proto ra` route and has 1).
    fn enable_forwarding(&self, v4: bool, v6: bool) -> Result<(), NodeNetError>;
    /// Makes [`VXLAN_DEVICE`] exactly `spec` (VNI, port, local address, learning off, MTU,
    /// our own [`vtep_mac`], the addresses [`VxlanSpec::addrs`] and no other global one) and
    /// up. A device of ours with other parameters is deleted and made anew, which drops its
    /// peers' entries, and a family's last address removed takes that family's routes
    /// through it: list [`NodeNet::overlay_peers`] after any change of `spec`. A link of that name that is
    /// not a VXLAN device is someone else's: EEXIST. Another VXLAN device with our VNI and
    /// port over the same family (flannel's `flannel.1`), which the kernel would refuse
    /// ours for: EADDRINUSE ([`NodeNetError::is_in_use`], [`Refusal::VniInUse`] names it).
    fn ensure_vxlan(&self, spec: &VxlanSpec) -> Result<(), NodeNetError>;
    /// Deletes [`VXLAN_DEVICE`] (and with it every FDB, neighbour entry and route through
    /// it); absent is success, a non-VXLAN link of that name is left alone.
    fn remove_vxlan(&self) -> Result<(), NodeNetError>;
    /// The peers our device holds, rebuilt from its FDB entries, neighbour entries and our
    /// routes through it, sorted by node address. A peer whose entries are half there
    /// (an FDB entry without routes) is listed with what it has; routes and neighbour
    /// entries that lead to no FDB entry are listed as one peer with the unspecified
    /// node address of their family, which is never wanted, so a diff deletes them.
    /// No device: empty.
    fn overlay_peers(&self) -> Result<Vec<OverlayPeer>, NodeNetError>;
    /// Sets up `peer` (FDB entry, then a neighbour entry and an on-link route per pod range);
    /// idempotent: what is there already is replaced. A pod range held by a route that is
    /// not an overlay route (someone else's, or our direct route: delete that first) fails
    /// with EEXIST. Needs the device ([`NodeNet::ensure_vxlan`]): ENODEV otherwise.
    fn add_overlay_peer(&self, peer: &OverlayPeer) -> Result<(), NodeNetError>;
    /// Removes `peer`'s routes, neighbour entries and FDB entry; what is already gone is
    /// skipped. A changed peer is `del` old then `add` new (they may share pod ranges).
    fn del_overlay_peer(&self, peer: &OverlayPeer) -> Result<(), NodeNetError>;
    /// The MTU of the interface holding the IPv4 default route, else the IPv6 one (the
    /// pods' MTU without the overlay); None: no default route (or a kernel that cannot
    /// tell: the default).
    fn default_route_mtu(&self) -> Result<Option<u32>, NodeNetError> {
        Ok(None)
    }
    /// The MTU of the interface holding `addr` (the overlay's underlay), else
    /// [`NodeNet::default_route_mtu`].
    fn underlay_mtu(&self, addr: IpAddr) -> Result<Option<u32>, NodeNetError> {
        let _ = addr;
        self.default_route_mtu()
    }
    /// Tells `notify`, from a thread of its own, each time someone else changes (or
    /// deletes) a route of ours, our VXLAN device or its entries, our firewall table or
    /// an iptables-nft `filter FORWARD` chain; a burst once, when it is over. Our own
    /// changes are not told, or told at most once per change (a pass that finds nothing to
    /// do changes nothing: no loop). Dropping the [`Watch`] ends it. The default: not
    /// supported (the agent then repairs drift at its periodic re-check only).
    fn watch(&self, notify: Notify) -> Result<Watch, NodeNetError> {
        let _ = notify;
        Err(NodeNetError::new(Op::Watch, Refusal::NotSupported))
    }
}

#[cfg(test)]
mod conntrack_tests;
#[cfg(test)]
mod nexthop_tests;
#[cfg(test)]
mod overlay_tests;
#[cfg(test)]
mod policy_cluster;
#[cfg(test)]
mod policy_lab;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod watch_tests;
