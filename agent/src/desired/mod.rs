//! What this node should hold, from the full Node list: a route to every other node's pod
//! ranges via that node's InternalIP of the family, or (`--mode`) the VXLAN overlay to
//! that node, and the node firewall policy. A pure function of the list and of what the
//! kernel says about this node (its addresses, which addresses are on-link), so every
//! decision is a unit test.
//!
//! Bad or hostile Node data changes nothing it should not: a node whose data is refused is
//! skipped (no route, and its ranges are not trusted as pod ranges), with a warning that
//! names it and the field; every other node is still served.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hostnet::node::{FamilyPolicy, NodePolicy, OverlayPeer, PodRoute};
use ipnetwork::IpNetwork;

use crate::config::Mode;
use crate::kube::nodes::NodeInfo;

mod incremental;
pub use incremental::Incremental;

/// Settings that shape the desired state (`--cluster-cidr`, `--no-masquerade-cidr`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// When given for a family: every pod range of that family must lie inside one.
    pub cluster_cidrs: Vec<IpNetwork>,
    /// Destinations never masqueraded, beside every node's pod ranges.
    pub no_masquerade: Vec<IpNetwork>,
    /// Which peers get a direct route and which the overlay.
    pub mode: Mode,
    /// The bridge this node's pods are on (`--bridge`).
    pub bridge: String,
}

/// What the kernel says about this node.
pub struct Local<'a> {
    /// Every address on this node's interfaces.
    pub addrs: &'a [IpAddr],
    /// Whether an address is directly reachable (its route has no gateway).
    pub on_link: &'a mut dyn FnMut(IpAddr) -> bool,
}

#[derive(Debug, Default, PartialEq)]
pub struct Desired {
    /// This node's pod ranges (empty: none yet, or refused: see `own_error`).
    pub own_cidrs: Vec<IpNetwork>,
    /// Why this node's own ranges cannot be used (missing from the list, malformed).
    pub own_error: Option<String>,
    pub routes: BTreeSet<PodRoute>,
    /// Peers reached through the VXLAN overlay (their ranges have no direct route).
    pub overlay: BTreeSet<OverlayPeer>,
    /// This node's underlay address for the overlay (see [`underlay`]) in `--mode auto` and
    /// `vxlan`, peers or none: the device is this node's receive side, and a peer may send
    /// through it while this node reaches that peer directly (on-link is each side's own
    /// view: multi-homed nodes, a `--mode` change rolled out node by node).
    pub underlay: Option<IpAddr>,
    pub policy: NodePolicy,
    /// One line per refused node, field or route.
    pub warnings: Vec<String>,
    /// This node's own Node was missing or refused, and its last good one stands in
    /// (`desired_keeping`).
    pub kept_own: bool,
    /// The routes that may differ from those of the previous update of the same
    /// [`Incremental`] (an event's few; None: unknown, computed whole). A pass that left
    /// the previous routes in place compares only these.
    pub routes_changed: Option<Vec<PodRoute>>,
}

/// A node whose data passed the checks that need only the node itself.
struct Candidate<'a> {
    name: &'a str,
    created: &'a str,
    field: &'static str,
    cidrs: &'a [IpNetwork],
    /// The InternalIPs a route or the overlay uses: the first of each family. The others
    /// are not judged (providers list every interface address, a shared VIP included).
    ips: [Option<IpAddr>; 2],
}

/// The first InternalIP of each family, in API order: the only ones routes and the overlay
/// use.
fn used_ips(ips: &[IpAddr]) -> [Option<IpAddr>; 2] {
    let first = |v4: bool| ips.iter().copied().find(|ip| ip.is_ipv4() == v4);
    [first(true), first(false)]
}

/// An address as one ordered number per family (IPv4 before IPv6).
fn key(ip: IpAddr) -> (u8, u128) {
    match ip {
        IpAddr::V4(a) => (4, u128::from(u32::from(a))),
        IpAddr::V6(a) => (6, u128::from(a)),
    }
}

/// The first and last address of a range, as [`key`]s.
fn span(net: &IpNetwork) -> ((u8, u128), u128) {
    let (fam, start) = key(net.network());
    let bits = if fam == 4 { 32 } else { 128 };
    let host = bits - u32::from(net.prefix());
    let last = if host == 128 {
        u128::MAX
    } else {
        start | ((1u128 << host) - 1)
    };
    ((fam, start), last)
}

fn family_matches(net: &IpNetwork, ip: &IpAddr) -> bool {
    net.is_ipv4() == ip.is_ipv4()
}

/// The desired state for node `me` from every Node (owned, or shared with the watcher), in
/// its phases: each node checked on its own, the survivors against this node, against each
/// other (overlapping ranges) and for pod addresses; then a route or the overlay per peer
/// range, and the firewall policy over every trusted range.
pub fn desired<N: Borrow<NodeInfo>>(
    me: &str,
    nodes: &[N],
    local: Local,
    opts: &Options,
) -> Desired {
    let mut out = Desired::default();
    let local_addrs: BTreeSet<IpAddr> = local.addrs.iter().copied().collect();
    let (own, candidates) = check_each(me, nodes, opts, &local_addrs, &mut out);
    let own_cidrs: Vec<IpNetwork> = own.as_ref().map(|o| o.cidrs.to_vec()).unwrap_or_default();

    let mut refused = against_this_node(&candidates, &own_cidrs, &local_addrs, local.on_link);
    // Against each other: the older node keeps a range two claim.
    let trusted = overlapping(&candidates, &mut refused);
    pod_addresses(&candidates, &trusted, &own_cidrs, &mut refused);
    for (i, why) in &refused {
        let name = candidates[*i].name;
        out.warnings
            .push(format!("node {name}: {why}; node skipped"));
    }

    let (underlay, mut no_overlay) = match opts.mode {
        Mode::HostGw => (None, None),
        _ if own.is_none() => (None, None), // own_error says why
        _ => match underlay(me, nodes, &local_addrs) {
            Ok(u) => (Some(u), None),
            Err(e) => (None, Some(e)),
        },
    };
    if opts.mode == Mode::Vxlan
        && let Some(e) = no_overlay.take()
    {
        out.warnings.push(e);
    }
    let mut paths = Paths {
        mode: opts.mode,
        underlay,
        no_overlay,
        on_link: local.on_link,
        // Collected, then built in one go (a sorted bulk build, not 10,000 inserts).
        routes: Vec::with_capacity(2 * candidates.len()),
        warnings: &mut out.warnings,
    };
    // The pod ranges every node trusts: this node's and those of every node served.
    let mut pod_ranges: Vec<IpNetwork> = own_cidrs.clone();
    for (i, c) in candidates.iter().enumerate() {
        if refused.contains_key(&i) {
            continue;
        }
        pod_ranges.extend(c.cidrs.iter().copied());
        if let Some(peer) = paths.route_or_overlay(c) {
            out.overlay.insert(peer);
        }
    }
    out.routes = paths.routes.into_iter().collect();
    out.underlay = underlay;
    out.policy = policy(&own_cidrs, &pod_ranges, opts);
    out.own_cidrs = own_cidrs;
    out
}

/// Checks of each node on its own: its ranges parse and lie inside `--cluster-cidr`, its
/// InternalIPs parse and are not this node's. Returns this node (when usable; `own_error`
/// says why not) and the other nodes with ranges that passed, warning for each refused.
fn check_each<'a, N: Borrow<NodeInfo>>(
    me: &str,
    nodes: &'a [N],
    opts: &Options,
    local_addrs: &BTreeSet<IpAddr>,
    out: &mut Desired,
) -> (Option<Candidate<'a>>, Vec<Candidate<'a>>) {
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut own: Option<Candidate> = None;
    for node in nodes {
        let node: &NodeInfo = node.borrow();
        let is_me = node.name == me;
        let mut refuse = |msg: String| {
            if is_me {
                out.own_error = Some(format!("node {me}: {msg}"));
            } else {
                out.warnings
                    .push(format!("node {}: {msg}; node skipped", node.name));
            }
        };
        let cidrs = match &node.ranges {
            Ok(c) => c.as_slice(),
            Err(e) => {
                refuse(e.to_string());
                continue;
            }
        };
        if let Some(net) = cidrs
            .iter()
            .find(|n| outside_cluster(n, &opts.cluster_cidrs))
        {
            refuse(format!(
                "{} {net} is outside every --cluster-cidr of its family",
                node.pod_cidrs_field
            ));
            continue;
        }
        if is_me {
            own = Some(Candidate {
                name: &node.name,
                created: &node.created,
                field: node.pod_cidrs_field,
                cidrs,
                ips: [None, None],
            });
            continue;
        }
        let ips = used_ips(node.ips.as_deref().unwrap_or_default());
        let bad = match &node.ips {
            Err(e) => Some(e.clone()),
            Ok(_) => ips
                .iter()
                .flatten()
                .find(|ip| local_addrs.contains(ip))
                .map(|ip| format!("status.addresses InternalIP {ip} is an address of this node")),
        };
        if let Some(msg) = bad {
            refuse(msg);
            continue;
        }
        if cidrs.is_empty() {
            continue; // no range yet: nothing to route, nothing to warn about
        }
        candidates.push(Candidate {
            name: &node.name,
            created: &node.created,
            field: node.pod_cidrs_field,
            cidrs,
            ips,
        });
    }
    if own.is_none() && out.own_error.is_none() {
        out.own_error = Some(format!("node {me} is not in the API server's node list"));
    }
    (own, candidates)
}

/// Checks against this node: a range overlapping its pod ranges, holding one of its
/// addresses (or its own node's InternalIP), or overlapping a network connected to it.
/// Returns why each refused candidate (by index) is.
fn against_this_node(
    candidates: &[Candidate],
    own_cidrs: &[IpNetwork],
    local_addrs: &BTreeSet<IpAddr>,
    on_link: &mut dyn FnMut(IpAddr) -> bool,
) -> BTreeMap<usize, String> {
    let mut refused: BTreeMap<usize, String> = BTreeMap::new();
    let local_keys: Vec<(u8, u128)> = {
        let mut v: Vec<_> = local_addrs.iter().copied().map(key).collect();
        v.sort_unstable();
        v
    };
    let holds = |keys: &[(u8, u128)], net: &IpNetwork| {
        let ((fam, start), last) = span(net);
        let first = keys.partition_point(|k| *k < (fam, start));
        keys.get(first).is_some_and(|k| k.0 == fam && k.1 <= last)
    };
    for (i, c) in candidates.iter().enumerate() {
        let why = c.cidrs.iter().find_map(|net| {
            if let Some(o) = own_cidrs
                .iter()
                .find(|o| o.contains(net.network()) || net.contains(o.network()))
            {
                return Some(format!(
                    "{} {net} overlaps this node's pod range {o}",
                    c.field
                ));
            }
            if holds(&local_keys, net) || c.ips.iter().flatten().any(|ip| holds(&[key(*ip)], net)) {
                return Some(format!("{} {net} contains a node address", c.field));
            }
            on_link(net.network()).then(|| {
                format!(
                    "{} {net} overlaps a network connected to this node",
                    c.field
                )
            })
        });
        if let Some(why) = why {
            refused.insert(i, why);
        }
    }
    refused
}

/// Refuses a candidate not refused yet whose InternalIP lies in a pod range that survived
/// (`trusted`, disjoint and by start) or in this node's: it is a pod's address.
fn pod_addresses(
    candidates: &[Candidate],
    trusted: &[Span],
    own_cidrs: &[IpNetwork],
    refused: &mut BTreeMap<usize, String>,
) {
    let pod_address = |ip: &IpAddr| {
        let k = key(*ip);
        let at = trusted.partition_point(|r| r.start <= k);
        (at > 0 && trusted[at - 1].start.0 == k.0 && trusted[at - 1].last >= k.1)
            || own_cidrs.iter().any(|o| o.contains(*ip))
    };
    for (i, c) in candidates.iter().enumerate() {
        if refused.contains_key(&i) {
            continue;
        }
        if let Some(ip) = c.ips.iter().flatten().find(|ip| pod_address(ip)) {
            refused.insert(
                i,
                format!("status.addresses InternalIP {ip} is a pod address"),
            );
        }
    }
}

/// How each trusted peer's ranges are reached: a direct route, else the overlay.
struct Paths<'a, 'w> {
    mode: Mode,
    /// This node's end of the overlay; None: no overlay.
    underlay: Option<IpAddr>,
    /// Why this node cannot have the overlay: said once, when a peer needs it.
    no_overlay: Option<String>,
    on_link: &'a mut dyn FnMut(IpAddr) -> bool,
    routes: Vec<PodRoute>,
    warnings: &'w mut Vec<String>,
}

impl Paths<'_, '_> {
    /// A direct route to each of `c`'s ranges whose gateway (its InternalIP of the range's
    /// family) is on-link, unless `--mode vxlan`; the others through the overlay, when
    /// both ends have one (the peer overlay returned), else a warning per range.
    fn route_or_overlay(&mut self, c: &Candidate) -> Option<OverlayPeer> {
        // The peer's end of the overlay: its InternalIP of our underlay's family.
        let peer_underlay = self.underlay.and_then(|u| {
            c.ips
                .iter()
                .flatten()
                .find(|ip| ip.is_ipv4() == u.is_ipv4())
        });
        let mut overlay = Vec::new();
        for net in c.cidrs {
            let gw = c.ips.iter().flatten().find(|ip| family_matches(net, ip));
            if self.mode != Mode::Vxlan
                && let Some(gw) = gw.filter(|gw| (self.on_link)(**gw))
            {
                self.routes.push(PodRoute {
                    dst: *net,
                    gateway: *gw,
                });
                continue;
            }
            if peer_underlay.is_some() {
                // Either pod family rides on our underlay's family.
                overlay.push(*net);
                continue;
            }
            if let Some(e) = self.no_overlay.take() {
                self.warnings.push(e);
            }
            self.warnings.push(no_path(c.name, net, gw, self.underlay));
        }
        match (peer_underlay, overlay.is_empty()) {
            (Some(ip), false) => Some(OverlayPeer::new(*ip, overlay)),
            _ => None,
        }
    }
}

/// Why node `name`'s range `net` gets no route: `gw` its InternalIP of that family (not
/// on-link, or missing), `underlay` this node's end of the overlay.
fn no_path(name: &str, net: &IpNetwork, gw: Option<&IpAddr>, underlay: Option<IpAddr>) -> String {
    let fam = |v4: bool| if v4 { "IPv4" } else { "IPv6" };
    match (gw, underlay) {
        (_, Some(u)) => format!(
            "node {name}: no {} InternalIP in status.addresses for the overlay (this node's \
             underlay address is {u}); no route to its {net}",
            fam(u.is_ipv4())
        ),
        (None, None) => format!(
            "node {name}: no {} InternalIP in status.addresses; no route to its {net}",
            fam(net.is_ipv4())
        ),
        (Some(gw), None) => format!(
            "node {name}: InternalIP {gw} is not directly reachable from this node (its route \
             has a gateway); no route to its {net}"
        ),
    }
}

/// [`desired`], keeping this node's last good Node through an API glitch. When its Node is
/// missing from the list (deleted, or absent from a re-list), refused, or has no pod
/// ranges (re-created, not assigned yet), the state is computed with `last_good` in its
/// place, so its pods keep their masquerade, forwarding and overlay; a warning says so.
/// A valid Node of this node replaces `last_good`, also with other ranges or addresses
/// (a real change applies at once). Without `last_good` (nothing valid seen since the
/// agent started) there is nothing to keep: as [`desired`].
pub fn desired_keeping<N: Borrow<NodeInfo> + Clone>(
    me: &str,
    nodes: &[N],
    local: Local,
    opts: &Options,
    last_good: &mut Option<N>,
) -> Desired {
    let listed = desired(
        me,
        nodes,
        Local {
            addrs: local.addrs,
            on_link: &mut *local.on_link,
        },
        opts,
    );
    if listed.own_error.is_none() && !listed.own_cidrs.is_empty() {
        *last_good = nodes
            .iter()
            .find(|n| Borrow::<NodeInfo>::borrow(*n).name == me)
            .cloned();
        return listed;
    }
    let Some(kept) = last_good.as_ref() else {
        return listed;
    };
    let why = listed
        .own_error
        .unwrap_or_else(|| format!("node {me}: no podCIDRs in its Node"));
    let mut with_kept: Vec<N> = nodes
        .iter()
        .filter(|n| Borrow::<NodeInfo>::borrow(*n).name != me)
        .cloned()
        .collect();
    with_kept.push(kept.clone());
    let mut d = desired(me, &with_kept, local, opts);
    let k: &NodeInfo = kept.borrow();
    let ips: Vec<String> = k
        .ips
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|ip| ip.to_string())
        .collect();
    let ranges: Vec<String> = d.own_cidrs.iter().map(|n| n.to_string()).collect();
    d.warnings.insert(
        0,
        format!(
            "{why}; keeping its last good state (pod ranges {}, InternalIPs {}) until a \
             valid Node of it arrives",
            ranges.join(","),
            ips.join(",")
        ),
    );
    d.kept_own = true;
    d
}

/// This node's underlay address for the overlay: the first of its InternalIPs (kubelet
/// lists the cluster's primary family first, so every node picks the same family), which
/// must be an address of this node (the device sends from it). One device, one family:
/// pods of both families ride on it, and a peer is reached at its InternalIP of that family.
fn underlay<N: Borrow<NodeInfo>>(
    me: &str,
    nodes: &[N],
    local: &BTreeSet<IpAddr>,
) -> Result<IpAddr, String> {
    let no = |why: String| format!("node {me}: {why}; no overlay to peers that are not on-link");
    let node: &NodeInfo = nodes
        .iter()
        .map(|n| n.borrow())
        .find(|n| n.name == me)
        .ok_or_else(|| no("not in the node list".into()))?;
    let ip = *node
        .ips
        .as_ref()
        .map_err(|e| no(e.clone()))?
        .first()
        .ok_or_else(|| no("no InternalIP in status.addresses".into()))?;
    if !local.contains(&ip) {
        return Err(no(format!(
            "status.addresses InternalIP {ip} is not an address of this node"
        )));
    }
    Ok(ip)
}

fn outside_cluster(net: &IpNetwork, cluster: &[IpNetwork]) -> bool {
    let same_family: Vec<&IpNetwork> = cluster
        .iter()
        .filter(|c| c.is_ipv4() == net.is_ipv4())
        .collect();
    !same_family.is_empty()
        && !same_family
            .iter()
            .any(|c| c.prefix() <= net.prefix() && c.contains(net.network()))
}

/// One pod range of candidate `owner`.
#[derive(Clone, Copy)]
struct Span {
    start: (u8, u128),
    last: u128,
    owner: usize,
    net: IpNetwork,
}

/// Refuses every candidate not refused yet with a range that overlaps a range of an older
/// one (`metadata.creationTimestamp`, then name): the node that had a range first keeps it,
/// whatever a later Node claims. Returns the ranges of the others, disjoint, by start.
fn overlapping(candidates: &[Candidate], refused: &mut BTreeMap<usize, String>) -> Vec<Span> {
    let mut spans: Vec<Span> = candidates
        .iter()
        .enumerate()
        .filter(|(i, _)| !refused.contains_key(i))
        .flat_map(|(i, c)| {
            c.cidrs.iter().map(move |net| {
                let (start, last) = span(net);
                Span {
                    start,
                    last,
                    owner: i,
                    net: *net,
                }
            })
        })
        .collect();
    spans.sort_unstable_by_key(|s| (s.start, std::cmp::Reverse(s.last)));
    // The nodes with a range that overlaps another: CIDRs are nested or disjoint, so a
    // range starting inside the one reaching furthest so far overlaps it.
    let mut involved: BTreeSet<usize> = BTreeSet::new();
    let mut open: Option<&Span> = None;
    for s in &spans {
        match open.filter(|o| o.start.0 == s.start.0 && s.start.1 <= o.last) {
            Some(o) => {
                involved.extend([o.owner, s.owner]);
            }
            None => open = Some(s),
        }
    }
    if !involved.is_empty() {
        // Only those can lose: oldest first, each keeps its ranges unless one overlaps a
        // range an older one kept.
        let mut theirs: BTreeMap<usize, Vec<Span>> = BTreeMap::new();
        for s in spans.iter().filter(|s| involved.contains(&s.owner)) {
            theirs.entry(s.owner).or_default().push(*s);
        }
        let mut order: Vec<usize> = involved.into_iter().collect();
        order.sort_unstable_by_key(|i| (candidates[*i].created, candidates[*i].name));
        // Kept ranges are disjoint: only the nearest on either side can overlap.
        let mut kept: BTreeMap<(u8, u128), Span> = BTreeMap::new();
        for i in order {
            let c = &candidates[i];
            let mine = theirs.remove(&i).unwrap_or_default();
            let clash = mine.iter().find_map(|s| {
                let before = kept.range(..=s.start).next_back().map(|(_, k)| k);
                let after = kept.range(s.start..).next().map(|(_, k)| k);
                before
                    .filter(|k| k.start.0 == s.start.0 && k.last >= s.start.1)
                    .or(after.filter(|k| k.start.0 == s.start.0 && k.start.1 <= s.last))
                    .map(|k| (s.net, k))
            });
            match clash {
                Some((net, k)) => {
                    let why = format!(
                        "{} {net} overlaps node {}'s {}, which keeps it (older, or first \
                         by name)",
                        c.field, candidates[k.owner].name, k.net
                    );
                    refused.insert(i, why);
                }
                None => kept.extend(mine.into_iter().map(|s| (s.start, s))),
            }
        }
        spans.retain(|s| !refused.contains_key(&s.owner));
    }
    spans
}

/// The firewall policy: per family of this node's ranges, masquerade from them to
/// anywhere outside every trusted pod range, `--cluster-cidr` and `--no-masquerade-cidr`.
fn policy(own: &[IpNetwork], pod_ranges: &[IpNetwork], opts: &Options) -> NodePolicy {
    let family = |v4: bool| -> Option<FamilyPolicy> {
        let pod_cidrs: Vec<IpNetwork> = own.iter().filter(|n| n.is_ipv4() == v4).copied().collect();
        if pod_cidrs.is_empty() {
            return None;
        }
        let set: BTreeSet<IpNetwork> = pod_ranges
            .iter()
            .chain(&opts.cluster_cidrs)
            .chain(&opts.no_masquerade)
            .filter(|n| n.is_ipv4() == v4)
            .copied()
            .collect();
        Some(FamilyPolicy {
            pod_cidrs,
            no_masquerade: set.into_iter().collect(),
        })
    };
    NodePolicy {
        v4: family(true),
        v6: family(false),
        pods_on: opts.bridge.clone(),
    }
}

#[cfg(test)]
mod tests;
