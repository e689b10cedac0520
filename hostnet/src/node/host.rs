//! [`NodeNet`] on the real kernel: rtnetlink for routes and addresses, nf_tables over
//! netlink for the firewall table (no `nft` binary: the agent's image is `FROM scratch`),
//! `/proc/sys` for forwarding.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use sysproc::netns::{Netns, NetnsError};

use super::firewall;
use super::firewall_delta;
use super::forwarding;
use super::overlay_host;
use super::watch_filter::Filter;
use super::watch_host::{self, Quiet, Sockets};
use super::{
    Cause, NodeNet, NodeNetError, NodePolicy, Notify, Op, OverlayPeer, PodRoute, ROUTE_PROTO,
    Refusal, VXLAN_DEVICE, VxlanSpec, Watch, mtu,
};
use crate::netlink::{IpFamily, MAIN_TABLE, Netlink, NetlinkError, NextHop, Route, RouteSpec};
use crate::nftnl::{self, NfSocket, NftError};

/// The kernel of the namespace this was opened in.
#[derive(Debug)]
pub struct HostNodeNet {
    routes: Netlink,
    /// Where sysctls are written and the netfilter socket is opened.
    /// `None`: the process's own namespace, worked in directly (entering a namespace needs
    /// CAP_SYS_ADMIN, which the DaemonSet does not grant); `Some`: a test's "node".
    netns: Option<Netns>,
    /// Opened at first use: a node without nf_tables still gets its routes.
    nft: Mutex<Option<NfSocket>>,
    /// Our nexthop objects as last seen; `None`: to be read from the kernel.
    hops: Mutex<Option<Hops>>,
    /// The running watch's way out of the nf_tables group around a large batch.
    quiet: Mutex<Option<Quiet>>,
}

/// A batch of more set elements than this is written with the watch out of the
/// nf_tables group (see `Quiet`).
const QUIET_ELEMS: usize = 4096;

/// Where our nexthops are numbered from: far from the small ids people pick by hand.
const FIRST_NH_ID: u32 = 0xcb00_0001;

/// Our direct routes go through one nexthop object of ours per gateway (on the device the
/// gateway is reached by): the kernel adds a route via a nexthop object without comparing
/// its gateway with every other next hop of the device, which 5,000 plain `via` routes on
/// one uplink cost (~4x the time of the whole first pass). A nexthop of ours serves our
/// routes only: it is deleted when the last of them goes.
#[derive(Debug, Default)]
struct Hops {
    /// False: the kernel has no nexthop objects (before 5.3); plain `via` routes then.
    supported: bool,
    /// Ours, by gateway.
    by_gateway: HashMap<IpAddr, u32>,
    /// Every nexthop's gateway (someone else's too), by id: what a route says with only
    /// `RTA_NH_ID` (`nexthop_compat_mode` off).
    gateway_of: HashMap<u32, IpAddr>,
    /// Our routes through each nexthop of ours.
    uses: HashMap<u32, usize>,
    next_id: u32,
}

impl Hops {
    fn load(routes: &Netlink) -> Result<Hops, NetlinkError> {
        let list = match routes.nexthops() {
            Ok(list) => list,
            Err(e) if matches!(e.errno(), Some(nix::libc::EINVAL | nix::libc::EOPNOTSUPP)) => {
                return Ok(Hops::default());
            }
            Err(e) => return Err(e),
        };
        let mut hops = Hops {
            supported: true,
            next_id: FIRST_NH_ID,
            ..Hops::default()
        };
        for nh in list {
            hops.gateway_of.insert(nh.id, nh.gateway);
            if nh.protocol == ROUTE_PROTO {
                hops.by_gateway.insert(nh.gateway, nh.id);
                hops.uses.insert(nh.id, 0);
                // Past ours: `free_id` then finds one at once, not after 10,000 lookups.
                if nh.id >= hops.next_id {
                    hops.next_id = nh.id.wrapping_add(1);
                }
            }
        }
        Ok(hops)
    }

    /// An id no nexthop has.
    fn free_id(&mut self) -> u32 {
        while self.gateway_of.contains_key(&self.next_id) || self.next_id == 0 {
            self.next_id = self.next_id.wrapping_add(1);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    fn insert(&mut self, nh: &NextHop) {
        self.gateway_of.insert(nh.id, nh.gateway);
        self.by_gateway.insert(nh.gateway, nh.id);
        self.uses.entry(nh.id).or_insert(0);
    }

    fn forget(&mut self, id: u32) {
        if let Some(gw) = self.gateway_of.remove(&id) {
            self.by_gateway.remove(&gw);
        }
        self.uses.remove(&id);
    }
}

/// A route of someone else holds `route`'s destination.
fn exists(route: &PodRoute) -> NodeNetError {
    NodeNetError::new(Op::AddRoute(route.clone()), Refusal::RouteExists(route.dst))
}

/// Whether `route` may be added, from the kernel's fib-match lookup of its destination's
/// first address: NLM_F_EXCL only sees a route of the same metric, so any route to this
/// very destination (the most specific entry for that address) is someone's.
fn free_for(route: &PodRoute, held: Result<Route, NetlinkError>) -> Result<(), NodeNetError> {
    match held {
        Ok(held) if held.dst == route.dst && held.table == MAIN_TABLE => Err(exists(route)),
        Ok(_) => Ok(()),
        // Nothing routes there yet.
        Err(e)
            if matches!(
                e.errno(),
                Some(nix::libc::ENETUNREACH | nix::libc::EHOSTUNREACH)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(NodeNetError::new(Op::AddRoute(route.clone()), e)),
    }
}

/// [`NodeNet::on_link`]'s answer from the kernel's route to the address.
fn on_link_of(addr: IpAddr, route: Result<Route, NetlinkError>) -> Result<bool, NodeNetError> {
    match route {
        Ok(route) => Ok(route.gateway.is_none() && route.multipath_gateways.is_empty()),
        Err(e)
            if matches!(
                e.errno(),
                Some(nix::libc::ENETUNREACH | nix::libc::EHOSTUNREACH)
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(NodeNetError::new(Op::RouteTo(addr), e)),
    }
}

fn spec(route: &PodRoute) -> RouteSpec {
    RouteSpec {
        dst: route.dst,
        gateway: Some(route.gateway),
        oif: None,
        priority: None,
        table: Some(MAIN_TABLE),
        scope: None,
    }
}

impl HostNodeNet {
    /// The calling thread's network namespace (the host's, in the DaemonSet).
    pub fn current() -> Result<HostNodeNet, NodeNetError> {
        let routes = Netlink::current().map_err(NodeNetError::of(Op::Open))?;
        Ok(HostNodeNet {
            routes,
            netns: None,
            nft: Mutex::new(None),
            hops: Mutex::new(None),
            quiet: Mutex::new(None),
        })
    }

    /// The namespace `ns` (tests use a namespace as a "node").
    pub fn in_netns(ns: &Netns) -> Result<HostNodeNet, NodeNetError> {
        // Our own handle of `ns`, opened from inside it (its path may name a thread's).
        let (node, own) = ns
            .run(|| (HostNodeNet::current(), Netns::current()))
            .map_err(NodeNetError::of(Op::Open))?;
        let mut node = node?;
        node.netns = Some(own.map_err(NodeNetError::of(Op::Open))?);
        Ok(node)
    }

    /// Runs `f` in our namespace: directly in the process's own, on a thread inside a
    /// test's namespace otherwise.
    pub(super) fn run_here<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        match &self.netns {
            None => Ok(f()),
            Some(ns) => ns.run(f),
        }
    }

    /// The netfilter socket, opened in our namespace on first use.
    pub(super) fn nft(&self, op: &Op) -> Result<MutexGuard<'_, Option<NfSocket>>, NodeNetError> {
        let mut guard = self.nft.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let sock = self
                .run_here(NfSocket::open)
                .map_err(NodeNetError::of(op.clone()))?
                .map_err(NodeNetError::of(op.clone()))?;
            *guard = Some(sock);
        }
        Ok(guard)
    }

    /// `batch` (of `elems` set elements) on `nf`; a large one with the watch out of the
    /// nf_tables group, if a watch runs. Our tables are compared afterwards unless the
    /// ruleset's generation moved by this batch's commit alone (each commit in the
    /// namespace moves it by one): then no one else changed anything meanwhile, and a
    /// read-back of 220,000 elements (~1.3 s of the policy loop) is saved.
    pub(super) fn quiet_batch<T>(
        &self,
        nf: &mut NfSocket,
        elems: usize,
        batch: impl FnOnce(&mut NfSocket) -> Result<T, NftError>,
    ) -> Result<T, NftError> {
        if elems <= QUIET_ELEMS {
            return batch(nf);
        }
        // Read while still in the group: a change before it is told, one after it counted.
        let before = nftnl::generation(nf).ok();
        let guard = {
            let quiet = self.quiet.lock().unwrap_or_else(|p| p.into_inner());
            quiet.as_ref().and_then(Quiet::hold)
        };
        let Some(mut guard) = guard else {
            return batch(nf);
        };
        let result = batch(nf);
        guard.rejoin();
        let after = nftnl::generation(nf).ok();
        let ours = u32::from(result.is_ok());
        if before
            .zip(after)
            .is_some_and(|(b, a)| a == b.wrapping_add(ours))
        {
            guard.nothing_missed();
        }
        result
    }

    pub(super) fn with_nft<T>(
        &self,
        op: Op,
        f: impl FnOnce(&mut NfSocket) -> Result<T, NftError>,
    ) -> Result<T, NodeNetError> {
        let mut guard = self.nft(&op)?;
        let Some(sock) = guard.as_mut() else {
            return Err(NodeNetError::new(op, Refusal::NoNftSocket));
        };
        f(sock).map_err(NodeNetError::of(op))
    }

    /// The families with a legacy (x_tables, not nf_tables) iptables `filter` table in
    /// our namespace: `ip_tables_names` and/or `ip6_tables_names` list it. nf_tables cannot
    /// see such a table, so a FORWARD policy of DROP there drops pod traffic whatever we do.
    pub fn legacy_iptables_filters(&self) -> Vec<&'static str> {
        let found = self.run_here(|| {
            ["ip_tables_names", "ip6_tables_names"]
                .into_iter()
                .filter(|f| {
                    std::fs::read_to_string(format!("/proc/thread-self/net/{f}"))
                        .is_ok_and(|t| t.lines().any(|l| l == "filter"))
                })
                .collect()
        });
        found.unwrap_or_default()
    }

    fn warn_if_legacy_iptables(&self) {
        let legacy = self.legacy_iptables_filters();
        if !legacy.is_empty() {
            eprintln!(
                "warning: this node has legacy (non-nf_tables) iptables filter tables ({}); \
                 a FORWARD policy of DROP there is not overridden for pod traffic \
                 (add `iptables -I FORWARD -s <podCIDR> -j ACCEPT` and `-d` there, or use iptables-nft)",
                legacy.join(", ")
            );
        }
    }
}

/// The agent runs its reconcile and its health endpoint on different threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<HostNodeNet>();
};

impl HostNodeNet {
    /// Our routes and nexthops from the kernel. A nexthop of ours no route of ours uses
    /// (a pass stopped between the two adds) is deleted on the way.
    fn read(&self) -> Result<(Vec<PodRoute>, Hops), NetlinkError> {
        let overlay = overlay_host::device_if_ours(&self.routes)?;
        let mut hops = Hops::load(&self.routes)?;
        let mut out = Vec::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            let routes = self.routes.routes_of_protocol(family, ROUTE_PROTO)?;
            for r in routes
                .into_iter()
                .filter(|r| r.table == MAIN_TABLE)
                .filter(|r| overlay.is_none() || r.oif != overlay)
            {
                if let Some(n) = r.nh_id.and_then(|id| hops.uses.get_mut(&id)) {
                    *n += 1;
                }
                // Through a nexthop: its gateway (the route tells it only in compat mode).
                let gateway = r
                    .gateway
                    .or_else(|| r.nh_id.and_then(|id| hops.gateway_of.get(&id).copied()));
                out.extend(gateway.map(|gateway| PodRoute {
                    dst: r.dst,
                    gateway,
                }));
            }
        }
        let unused: Vec<u32> = hops
            .uses
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(id, _)| *id)
            .collect();
        for id in unused {
            if self.routes.del_nexthop(id).is_ok() {
                hops.forget(id);
            }
        }
        Ok((out, hops))
    }

    /// Our nexthops as last seen, read from the kernel if not known.
    fn hops(&self) -> MutexGuard<'_, Option<Hops>> {
        let mut guard = self.hops.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = self.read().ok().map(|(_, hops)| hops);
        }
        guard
    }

    /// Our nexthop for each of `gateways`, made where missing on the device the kernel
    /// reaches the gateway by. A gateway without one (not on a link, or the kernel
    /// refused) gets a plain `via` route.
    fn nexthops_for(&self, hops: &mut Hops, gateways: &[IpAddr]) -> HashMap<IpAddr, u32> {
        let mut missing: Vec<IpAddr> = gateways
            .iter()
            .filter(|gw| !hops.by_gateway.contains_key(gw))
            .copied()
            .collect();
        missing.sort_unstable();
        missing.dedup();
        let found = self.routes.routes_to(&missing, false);
        let new: Vec<NextHop> = missing
            .into_iter()
            .zip(found)
            .filter_map(|(gateway, r)| {
                let r = r.ok().filter(|r| r.gateway.is_none())?;
                Some(NextHop {
                    id: hops.free_id(),
                    gateway,
                    oif: r.oif?,
                    protocol: ROUTE_PROTO,
                })
            })
            .collect();
        for (nh, r) in new.iter().zip(self.routes.add_nexthops(&new)) {
            if r.is_ok() {
                hops.insert(nh);
            }
        }
        gateways
            .iter()
            .filter_map(|gw| Some((*gw, *hops.by_gateway.get(gw)?)))
            .collect()
    }

    /// Deletes those of `ids` no route of ours uses any more.
    fn drop_unused(&self, hops: &mut Hops, ids: impl IntoIterator<Item = u32>) {
        for id in ids {
            if hops.uses.get(&id) == Some(&0) {
                match self.routes.del_nexthop(id) {
                    Ok(()) => hops.forget(id),
                    Err(e) if e.is_not_found() => hops.forget(id),
                    // Kept: the next read from the kernel deletes it.
                    Err(_) => {}
                }
            }
        }
    }

    /// Adds the routes `free` of `routes`, through our nexthops where the kernel has them.
    fn add_free(&self, routes: &[PodRoute], free: &[usize]) -> Vec<Result<(), NetlinkError>> {
        let mut guard = self.hops();
        let via = match guard.as_mut() {
            Some(hops) if hops.supported => {
                let gateways: Vec<IpAddr> = free.iter().map(|i| routes[*i].gateway).collect();
                self.nexthops_for(hops, &gateways)
            }
            _ => HashMap::new(),
        };
        let (through, plain): (Vec<usize>, Vec<usize>) = free
            .iter()
            .partition(|i| via.contains_key(&routes[**i].gateway));
        let hop_routes: Vec<_> = through
            .iter()
            .map(|i| (routes[*i].dst, via[&routes[*i].gateway]))
            .collect();
        let specs: Vec<RouteSpec> = plain.iter().map(|i| spec(&routes[*i])).collect();
        let mut out: HashMap<usize, Result<(), NetlinkError>> = HashMap::new();
        let mut stale = false;
        let added = self
            .routes
            .add_routes_via_nexthop_excl(&hop_routes, ROUTE_PROTO);
        for ((i, (_, id)), r) in through.iter().zip(&hop_routes).zip(added) {
            match (&r, guard.as_mut()) {
                (Ok(()), Some(hops)) => *hops.uses.entry(*id).or_insert(0) += 1,
                // A nexthop gone behind our back (its device went down): read them again.
                (Err(e), _) if !e.is_exists() && e.errno() != Some(nix::libc::ENOBUFS) => {
                    stale = true
                }
                _ => {}
            }
            out.insert(*i, r);
        }
        for (i, r) in plain
            .iter()
            .zip(self.routes.add_routes_excl(&specs, ROUTE_PROTO))
        {
            out.insert(*i, r);
        }
        if let Some(hops) = guard.as_mut() {
            self.drop_unused(hops, via.values().copied().collect::<HashSet<_>>());
        }
        if stale {
            *guard = None;
        }
        free.iter()
            .map(|i| out.remove(i).unwrap_or(Ok(())))
            .collect()
    }
}

impl NodeNet for HostNodeNet {
    fn our_routes(&self) -> Result<Vec<PodRoute>, NodeNetError> {
        let (routes, hops) = self.read().map_err(NodeNetError::of(Op::ListRoutes))?;
        *self.hops.lock().unwrap_or_else(|p| p.into_inner()) = Some(hops);
        Ok(routes)
    }

    fn add_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        free_for(route, self.routes.route_to(route.dst.network(), true))?;
        let op = NodeNetError::of(Op::AddRoute(route.clone()));
        self.add_free(std::slice::from_ref(route), &[0])
            .pop()
            .unwrap_or(Ok(()))
            .map_err(op)
    }

    /// [`NodeNet::add_route`]'s check and add for each route, each pipelined: first every
    /// lookup, then the missing nexthops, then every add. (Two routes of the batch to one
    /// destination are both checked before either is added; the kernel's `NLM_F_EXCL`
    /// refuses the second.)
    fn add_routes(&self, routes: &[PodRoute]) -> Vec<Result<(), NodeNetError>> {
        let firsts: Vec<IpAddr> = routes.iter().map(|r| r.dst.network()).collect();
        let held = self.routes.routes_to(&firsts, true);
        let mut out: Vec<Result<(), NodeNetError>> = Vec::with_capacity(routes.len());
        let mut free = Vec::new();
        for (i, (route, held)) in routes.iter().zip(held).enumerate() {
            out.push(free_for(route, held));
            if out[i].is_ok() {
                free.push(i);
            }
        }
        let added = self.add_free(routes, &free);
        let mut lost = Vec::new();
        for (i, r) in free.into_iter().zip(added) {
            match r {
                Err(e) if e.errno() == Some(nix::libc::ENOBUFS) => lost.push(i),
                r => out[i] = r.map_err(NodeNetError::of(Op::AddRoute(routes[i].clone()))),
            }
        }
        if !lost.is_empty() {
            // Answers lost to an overrun: the routes found ours now were added, the others
            // are added one by one.
            let ours: HashSet<PodRoute> =
                self.our_routes().unwrap_or_default().into_iter().collect();
            for i in lost {
                out[i] = if ours.contains(&routes[i]) {
                    Ok(())
                } else {
                    self.add_route(&routes[i])
                };
            }
        }
        out
    }

    fn replace_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let op = NodeNetError::of(Op::ReplaceRoute(route.clone()));
        let mut guard = self.hops();
        let id = match guard.as_mut() {
            Some(hops) if hops.supported => self
                .nexthops_for(hops, &[route.gateway])
                .get(&route.gateway)
                .copied(),
            _ => None,
        };
        let done = match id {
            Some(id) => self
                .routes
                .replace_route_via_nexthop(route.dst, id, ROUTE_PROTO),
            None => self.routes.replace_route(&spec(route), ROUTE_PROTO),
        };
        // The replaced route's nexthop may be unused now: the next read deletes it.
        *guard = None;
        done.map_err(op)
    }

    /// Through our nexthop for the gateway if there is one, else as a plain `via` route
    /// (an earlier version's, or one the kernel had no nexthop for).
    fn del_route(&self, route: &PodRoute) -> Result<(), NodeNetError> {
        let op = NodeNetError::of(Op::DeleteRoute(route.clone()));
        let mut guard = self.hops();
        if let Some(hops) = guard.as_mut()
            && let Some(&id) = hops.by_gateway.get(&route.gateway)
        {
            match self
                .routes
                .del_route_via_nexthop(route.dst, id, ROUTE_PROTO)
            {
                Ok(()) => {
                    if let Some(n) = hops.uses.get_mut(&id) {
                        *n = n.saturating_sub(1);
                    }
                    self.drop_unused(hops, [id]);
                    return Ok(());
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(op(e)),
            }
        }
        drop(guard);
        self.routes
            .del_route_of(&spec(route), ROUTE_PROTO)
            .map_err(op)
    }

    fn on_link(&self, addr: IpAddr) -> Result<bool, NodeNetError> {
        on_link_of(addr, self.routes.route_to(addr, false))
    }

    fn on_link_many(&self, addrs: &[IpAddr]) -> Vec<Result<bool, NodeNetError>> {
        let routes = self.routes.routes_to(addrs, false);
        addrs
            .iter()
            .zip(routes)
            .map(|(a, r)| on_link_of(*a, r))
            .collect()
    }

    fn local_addrs(&self) -> Result<Vec<IpAddr>, NodeNetError> {
        Ok(self
            .routes
            .addresses(None)
            .map_err(NodeNetError::of(Op::ListAddresses))?
            .into_iter()
            .map(|a| a.addr.ip())
            .collect())
    }

    fn apply_firewall(&self, policy: &NodePolicy) -> Result<(), NodeNetError> {
        if policy.v4.is_some() || policy.v6.is_some() {
            self.warn_if_legacy_iptables();
        }
        self.with_nft(Op::ApplyFirewall, |nf| {
            let msgs = firewall::apply_batch(nf, policy)?;
            nf.batch(&msgs)
        })
    }

    fn update_firewall(&self, from: &NodePolicy, to: &NodePolicy) -> Result<(), NodeNetError> {
        let Some(deltas) = firewall_delta::set_deltas(from, to) else {
            return self.apply_firewall(to);
        };
        let msgs = firewall_delta::batch(&deltas);
        if msgs.is_empty() {
            return Ok(());
        }
        self.with_nft(Op::ApplyFirewall, |nf| nf.batch(&msgs))
    }

    fn firewall_matches(&self, policy: &NodePolicy) -> Result<bool, NodeNetError> {
        self.with_nft(Op::ReadFirewall, |nf| firewall::matches(nf, policy))
    }

    fn remove_firewall(&self) -> Result<(), NodeNetError> {
        // A kernel without nfnetlink or nf_tables holds nothing of ours: absent is success.
        match self.nft(&Op::RemoveFirewall) {
            Err(e) if e.errno() == Some(nix::libc::EPROTONOSUPPORT) => return Ok(()),
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        self.with_nft(Op::RemoveFirewall, |nf| {
            let msgs = firewall::apply_batch(nf, &NodePolicy::default())?;
            match nf.batch(&msgs) {
                Err(NftError::NoNfTables { .. }) => Ok(()),
                other => other,
            }
        })
    }

    fn enable_forwarding(&self, v4: bool, v6: bool) -> Result<(), NodeNetError> {
        let op = NodeNetError::of(Op::EnableForwarding);
        self.run_here(|| forwarding::enable(&self.routes, v4, v6))
            .map_err(op)?
            .map_err(|e| {
                let cause = match e {
                    forwarding::ForwardingError::Netlink(n) => Cause::from(n),
                    forwarding::ForwardingError::Sysctl(s) => Cause::from(s),
                };
                NodeNetError::new(Op::EnableForwarding, cause)
            })
    }

    fn ensure_vxlan(&self, spec: &VxlanSpec) -> Result<(), NodeNetError> {
        overlay_host::ensure_vxlan(&self.routes, spec)
    }

    fn remove_vxlan(&self) -> Result<(), NodeNetError> {
        overlay_host::remove_vxlan(&self.routes)
    }

    fn overlay_peers(&self) -> Result<Vec<OverlayPeer>, NodeNetError> {
        overlay_host::overlay_peers(&self.routes)
    }

    fn add_overlay_peer(&self, peer: &OverlayPeer) -> Result<(), NodeNetError> {
        overlay_host::add_overlay_peer(&self.routes, peer)
    }

    fn del_overlay_peer(&self, peer: &OverlayPeer) -> Result<(), NodeNetError> {
        overlay_host::del_overlay_peer(&self.routes, peer)
    }

    fn default_route_mtu(&self) -> Result<Option<u32>, NodeNetError> {
        mtu::default_route_mtu(&self.routes)
    }

    fn underlay_mtu(&self, addr: IpAddr) -> Result<Option<u32>, NodeNetError> {
        mtu::underlay_mtu(&self.routes, addr)
    }

    fn watch(&self, notify: Notify) -> Result<Watch, NodeNetError> {
        let io = NodeNetError::of::<std::io::Error>;
        let (mut sockets, nft_err) = self
            .run_here(Sockets::open)
            .map_err(NodeNetError::of(Op::Watch))?
            .map_err(io(Op::Watch))?;
        let nft_pid = match nft_err {
            // No nf_tables here: nothing of ours to watch there.
            Some(_) => None,
            None => self
                .with_nft(Op::Watch, |nf| Ok(nf.port_id()))
                .ok()
                .flatten(),
        };
        if let Some(pid) = nft_pid {
            // Best effort: without it our own notifications are skipped in userspace.
            let _ = sockets.ignore_nft_from(pid);
        }
        *self.quiet.lock().unwrap_or_else(|p| p.into_inner()) = sockets.quiet();
        // After subscribing: a link changed meanwhile is told by its notification. (Also
        // the request that binds our route socket, if nothing did yet: its port id is
        // the kernel's to give at the first send.)
        let links = self.routes.links().map_err(NodeNetError::of(Op::Watch))?;
        let filter = Filter {
            route_pid: self.routes.port_id().filter(|p| *p != 0),
            nft_pid,
            vxlan_index: links
                .iter()
                .find(|l| l.name == VXLAN_DEVICE)
                .map(|l| l.index),
            up: links
                .iter()
                .filter(|l| l.admin_up && l.master.is_none())
                .map(|l| l.index)
                .collect(),
            downed: Default::default(),
        };
        let (stop, stopped) = std::os::unix::net::UnixStream::pair().map_err(io(Op::Watch))?;
        let thread = std::thread::Builder::new()
            .name("kernel-watch".into())
            .spawn(move || watch_host::run(sockets, stopped, filter, notify))
            .map_err(io(Op::Watch))?;
        Ok(Watch::new(stop, thread))
    }
}
