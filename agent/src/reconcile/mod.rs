//! Makes the kernel hold the desired state: our routes compared with `our_routes()` and
//! our overlay peers with `overlay_peers()`, only the difference applied (also what changed
//! while the agent was down), the firewall table applied only when it does not match (after
//! a pass it trusts, only its changed set elements), forwarding on. One failure does not stop the other changes; each is reported.
//!
//! What a pass leaves is kept ([`Applied`]) and trusted by the next one, so an event costs
//! the changes it makes and no dump of thousands of routes; the agent's periodic re-check
//! and any failure forget it, and the next pass reads the kernel again (drift, someone
//! else's changes).
//!
//! Order: unwanted direct routes, then the VXLAN device and unwanted overlay peers, then new
//! direct routes, then new overlay peers. A pod range moving between a direct route and the
//! overlay is so freed by one kind before the other claims it (the kernel holds one route
//! per destination: the second would fail with EEXIST).

use std::collections::{BTreeMap, BTreeSet};

use hostnet::node::{Drift, NodeNet, NodeNetError, NodePolicy, OverlayPeer, PodRoute, VxlanSpec};
use ipnetwork::IpNetwork;

/// The part of the desired state a failed operation leaves not in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Direct routes (listing ours, or one route).
    Routes,
    /// The overlay (its device, listing its peers, or one peer).
    Overlay,
    Firewall,
    Forwarding,
}

/// One failed operation of a reconcile: the kernel's error names the operation and what
/// it was about (the route, the peer).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ReconcileError {
    pub part: Part,
    pub error: NodeNetError,
}

impl ReconcileError {
    /// Whether this failure leaves a wanted route or overlay peer missing (not ready, and
    /// the next pass reads the kernel again).
    pub fn in_routing(&self) -> bool {
        matches!(self.part, Part::Routes | Part::Overlay)
    }
}

/// Our overlay device cannot be made: another VXLAN device holds our VNI and port
/// ([`NodeNetError::is_in_use`]; the error names it). Said with what to do about it.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0}; delete it if nothing uses it any more (flannel's, left behind by a migration), or \
     give every node the same other --vxlan-vni or --vxlan-port; not ready until then"
)]
pub struct OverlayBlocked(pub NodeNetError);

/// The overlay part of the desired state.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Overlay {
    /// The device, kept with no peers too: it is this node's receive side, and a peer may
    /// send through it whatever this node thinks of that peer. None: removed (with every
    /// entry on it).
    pub spec: Option<VxlanSpec>,
    pub peers: BTreeSet<OverlayPeer>,
}

/// What one reconcile did and found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub added: usize,
    pub replaced: usize,
    pub deleted: usize,
    /// One line per change made (`route add 10.244.2.0/24 via 192.168.0.3`).
    pub changes: Vec<String>,
    /// Wanted routes whose destination a route of someone else holds (left alone).
    pub foreign: Vec<IpNetwork>,
    /// Our routes in the kernel afterwards, as far as this reconcile knows.
    pub routes: usize,
    /// Our overlay peers in the kernel afterwards, as far as this reconcile knows.
    pub overlay_peers: usize,
    pub firewall_applied: bool,
    pub firewall_ok: bool,
    /// Every failed operation.
    pub errors: Vec<ReconcileError>,
    /// Why the overlay device cannot be made: another VXLAN device holds our VNI and port.
    /// Stays so until someone acts, so logged once (not with `errors`), and not ready.
    pub overlay_blocked: Option<OverlayBlocked>,
    /// Non-fatal findings (a foreign route in the way).
    pub warnings: Vec<String>,
}

impl Outcome {
    /// Every wanted route and the firewall are in place (ready).
    pub fn routes_ok(&self) -> bool {
        !self.errors.iter().any(ReconcileError::in_routing)
            && self.foreign.is_empty()
            && self.overlay_blocked.is_none()
    }

    fn failed(&mut self, part: Part, error: NodeNetError) {
        self.errors.push(ReconcileError { part, error });
    }
}

/// Which forwarding switches are already on, so each is written once.
#[derive(Debug, Default)]
pub struct Forwarding {
    pub v4: bool,
    pub v6: bool,
}

/// Our VXLAN device (None: none) and the peers on it.
type OverlayState = (Option<VxlanSpec>, BTreeSet<OverlayPeer>);

/// What the kernel held after the last pass, as far as this agent knows.
#[derive(Debug, Default)]
pub struct Applied {
    pub forwarding: Forwarding,
    /// Our routes (None: read them from the kernel).
    routes: Option<BTreeSet<PodRoute>>,
    /// `routes` are exactly the routes the last pass wanted (none refused by a foreign
    /// route in the way): the next pass may compare only the wanted routes that changed.
    routes_as_wanted: bool,
    /// Our device and overlay peers (None: read them from the kernel).
    overlay: Option<OverlayState>,
    /// The policy our firewall table matched (None: compare with the kernel).
    firewall: Option<NodePolicy>,
}

impl Applied {
    /// The next pass reads routes, overlay and firewall from the kernel again.
    pub fn forget(&mut self) {
        self.routes = None;
        self.overlay = None;
        self.firewall = None;
    }

    /// The next pass reads again what someone else changed (everything when the kernel's
    /// notifications were lost), and trusts the rest.
    pub fn forget_drift(&mut self, drift: &Drift) {
        if drift.lost {
            return self.forget();
        }
        if drift.routes {
            self.routes = None;
        }
        if drift.overlay {
            self.overlay = None;
        }
        if drift.firewall {
            self.firewall = None;
        }
    }
}

/// Applies `routes`, `overlay` and `policy` to `net`.
pub fn reconcile(
    net: &dyn NodeNet,
    routes: &BTreeSet<PodRoute>,
    overlay: &Overlay,
    policy: &NodePolicy,
    applied: &mut Applied,
) -> Outcome {
    reconcile_changed(net, routes, None, overlay, policy, applied)
}

/// [`reconcile`], told which wanted routes may differ from those of the last pass
/// (`changed`, [`crate::desired::Desired::routes_changed`]): when the last pass left exactly
/// the routes it wanted, only those are compared, not the 10,000 of a large cluster.
pub fn reconcile_changed(
    net: &dyn NodeNet,
    routes: &BTreeSet<PodRoute>,
    changed: Option<&[PodRoute]>,
    overlay: &Overlay,
    policy: &NodePolicy,
    applied: &mut Applied,
) -> Outcome {
    let mut out = Outcome::default();
    let changed = changed.filter(|_| applied.routes_as_wanted && applied.routes.is_some());
    let current = match applied.routes.take() {
        Some(known) => Some(known),
        None => net
            .our_routes()
            .map(|r| r.into_iter().collect())
            .map_err(|e| out.failed(Part::Routes, e))
            .ok(),
    };
    let failed = out.errors.len();
    let mut current = current.map(|mut c| {
        let plan = del_routes(net, &mut c, routes, changed, &mut out);
        (c, plan)
    });
    let mut peers = del_peers(net, overlay, applied.overlay.take(), &mut out);
    if let Some((current, (new, replaces))) = &mut current {
        add_routes(net, current, std::mem::take(new), replaces, &mut out);
        out.routes = current.len();
    }
    if let Some((_, have)) = &mut peers {
        add_peers(net, have, &overlay.peers, &mut out);
        out.overlay_peers = have.len();
    }
    // Known only when nothing failed; otherwise the next pass reads the kernel.
    let clean = !out.errors[failed..].iter().any(ReconcileError::in_routing);
    if clean {
        // After a clean pass ours are a subset of the wanted: equal in number, equal.
        applied.routes_as_wanted = current
            .as_ref()
            .is_some_and(|(c, _)| c.len() == routes.len());
        applied.routes = current.map(|(c, _)| c);
        applied.overlay = peers;
    }
    firewall(net, policy, applied, &mut out);
    let forwarding = &mut applied.forwarding;
    let (v4, v6) = (
        policy.v4.is_some() && !forwarding.v4,
        policy.v6.is_some() && !forwarding.v6,
    );
    if v4 || v6 {
        match net.enable_forwarding(v4, v6) {
            Ok(()) => {
                forwarding.v4 |= v4;
                forwarding.v6 |= v6;
            }
            Err(e) => out.failed(Part::Forwarding, e),
        }
    }
    out
}

/// The firewall as `policy`: nothing when the last pass left it so; from what the last
/// pass left, only the changed set elements (a Node came or went); else compared with the
/// kernel and, when it differs, made anew. An element update that fails (someone changed
/// the table) falls back to the comparison.
fn firewall(net: &dyn NodeNet, policy: &NodePolicy, applied: &mut Applied, out: &mut Outcome) {
    let known = applied.firewall.take();
    if known.as_ref() == Some(policy) {
        out.firewall_ok = true;
        applied.firewall = known;
        return;
    }
    if let Some(from) = &known {
        match net.update_firewall(from, policy) {
            Ok(()) => {
                out.firewall_applied = true;
                out.firewall_ok = true;
            }
            Err(e) => out
                .warnings
                .push(format!("{e}: comparing the firewall with the kernel")),
        }
    }
    if !out.firewall_ok {
        match net.firewall_matches(policy) {
            Ok(true) => out.firewall_ok = true,
            Ok(false) => match net.apply_firewall(policy) {
                Ok(()) => {
                    out.firewall_applied = true;
                    out.firewall_ok = true;
                }
                Err(e) => out.failed(Part::Firewall, e),
            },
            Err(e) => out.failed(Part::Firewall, e),
        }
    }
    if out.firewall_ok {
        applied.firewall = Some(policy.clone());
    }
}

/// Deletes our routes that are not wanted, except those a wanted route to the same
/// destination replaces (a changed gateway: one message, in `add_routes`). Returns the
/// plan for `add_routes`: the wanted routes not ours yet, and the route of ours each
/// replaces, by destination (the first of ours there). `changed`: the only routes that
/// can differ between `current` and `wanted` (None: compare all).
fn del_routes(
    net: &dyn NodeNet,
    current: &mut BTreeSet<PodRoute>,
    wanted: &BTreeSet<PodRoute>,
    changed: Option<&[PodRoute]>,
    out: &mut Outcome,
) -> (Vec<PodRoute>, BTreeMap<IpNetwork, PodRoute>) {
    let (gone, new): (BTreeSet<PodRoute>, Vec<PodRoute>) = match changed {
        Some(named) => {
            let gone = named
                .iter()
                .filter(|r| current.contains(r) && !wanted.contains(r))
                .cloned()
                .collect();
            // Sorted and each once, as the difference below gives them.
            let new: BTreeSet<PodRoute> = named
                .iter()
                .filter(|r| wanted.contains(r) && !current.contains(r))
                .cloned()
                .collect();
            (gone, new.into_iter().collect())
        }
        None => (
            current.difference(wanted).cloned().collect(),
            // The wanted routes not ours yet (deleting unwanted ones cannot change them).
            wanted.difference(current).cloned().collect(),
        ),
    };
    let mut replaces: BTreeMap<IpNetwork, PodRoute> = BTreeMap::new();
    for w in &new {
        if let Some(old) = PodRoute::first_to(&gone, &w.dst) {
            replaces.insert(w.dst, old.clone());
        }
    }
    for r in gone.iter().filter(|r| replaces.get(&r.dst) != Some(r)) {
        match net.del_route(r) {
            Ok(()) => {
                out.deleted += 1;
                out.changes
                    .push(format!("route del {} via {}", r.dst, r.gateway));
                current.remove(r);
            }
            Err(e) if e.is_not_found() => {
                current.remove(r);
            }
            Err(e) => out.failed(Part::Routes, e),
        }
    }
    (new, replaces)
}

/// Adds `new` (wanted routes not ours yet), or replaces ours to their destination.
fn add_routes(
    net: &dyn NodeNet,
    current: &mut BTreeSet<PodRoute>,
    new: Vec<PodRoute>,
    replaces: &BTreeMap<IpNetwork, PodRoute>,
    out: &mut Outcome,
) {
    let (changed, plain): (Vec<PodRoute>, Vec<PodRoute>) =
        new.into_iter().partition(|w| replaces.contains_key(&w.dst));
    for w in changed {
        let old = &replaces[&w.dst];
        match net.replace_route(&w) {
            Ok(()) => {
                out.replaced += 1;
                out.changes
                    .push(format!("route replace {} via {}", w.dst, w.gateway));
                current.remove(old);
                current.insert(w);
            }
            Err(e) => out.failed(Part::Routes, e),
        }
    }
    // The plain adds in one batch (pipelined on the real kernel).
    let results = net.add_routes(&plain);
    for (w, r) in plain.into_iter().zip(results) {
        match r {
            Ok(()) => {
                out.added += 1;
                out.changes
                    .push(format!("route add {} via {}", w.dst, w.gateway));
                current.insert(w);
            }
            Err(e) if e.is_exists() => {
                out.foreign.push(w.dst);
                out.warnings.push(format!(
                    "a route to {} that is not ours is in the way: left alone, no route \
                     via {}",
                    w.dst, w.gateway
                ));
            }
            Err(e) => out.failed(Part::Routes, e),
        }
    }
}

/// `10.244.3.0/24,fd00:10:244:3::/64 via 192.168.20.21`
fn show_peer(p: &OverlayPeer) -> String {
    format!(
        "{} via {}",
        crate::kube::podcidr::show(&p.pod_cidrs),
        p.node_ip
    )
}

/// The device as wanted, and the peers it holds that are not wanted deleted (a changed peer
/// too: `add_peers` makes it anew). `known`: what the last pass left (None: read the
/// kernel). Returns the device and the peers left, None when unknown after a failure.
fn del_peers(
    net: &dyn NodeNet,
    overlay: &Overlay,
    known: Option<OverlayState>,
    out: &mut Outcome,
) -> Option<OverlayState> {
    let spec = match &overlay.spec {
        Some(spec) => *spec,
        None => {
            let had = match &known {
                Some((None, _)) => return known, // no device, none wanted
                Some((Some(_), peers)) => peers.len(),
                // Listed first only to say so when something goes.
                None => net.overlay_peers().map(|p| p.len()).unwrap_or(0),
            };
            return match net.remove_vxlan() {
                Ok(()) => {
                    if had > 0 {
                        out.changes.push(format!(
                            "overlay device removed, with its {had} peer(s): no overlay in \
                             this mode"
                        ));
                    }
                    Some((None, BTreeSet::new()))
                }
                Err(e) => {
                    out.failed(Part::Overlay, e);
                    None
                }
            };
        }
    };
    let current = match known {
        Some((Some(have), peers)) if have == spec => peers,
        _ => {
            // A device with other parameters is made anew, without its entries: list after.
            match net.ensure_vxlan(&spec) {
                Ok(()) => {}
                Err(e) if e.is_in_use() => {
                    out.overlay_blocked = Some(OverlayBlocked(e));
                    return None;
                }
                Err(e) => {
                    out.failed(Part::Overlay, e);
                    return None;
                }
            }
            match net.overlay_peers() {
                Ok(p) => p.into_iter().collect(),
                Err(e) => {
                    out.failed(Part::Overlay, e);
                    return None;
                }
            }
        }
    };
    let mut have = BTreeSet::new();
    for p in current {
        if overlay.peers.contains(&p) {
            have.insert(p);
            continue;
        }
        match net.del_overlay_peer(&p) {
            Ok(()) => out.changes.push(format!("overlay del {}", show_peer(&p))),
            Err(e) => {
                out.failed(Part::Overlay, e);
                have.insert(p);
            }
        }
    }
    Some((Some(spec), have))
}

fn add_peers(
    net: &dyn NodeNet,
    have: &mut BTreeSet<OverlayPeer>,
    wanted: &BTreeSet<OverlayPeer>,
    out: &mut Outcome,
) {
    let new: Vec<&OverlayPeer> = wanted.difference(have).collect();
    let mut added = Vec::new();
    for p in new {
        match net.add_overlay_peer(p) {
            Ok(()) => {
                out.changes.push(format!("overlay add {}", show_peer(p)));
                added.push(p.clone());
            }
            Err(e) if e.is_exists() => {
                out.foreign.extend(p.pod_cidrs.iter().copied());
                out.warnings.push(format!(
                    "a route to one of {} that is not an overlay route of ours is in the \
                     way: left alone, no overlay to {}",
                    crate::kube::podcidr::show(&p.pod_cidrs),
                    p.node_ip
                ));
            }
            Err(e) => out.failed(Part::Overlay, e),
        }
    }
    have.extend(added);
}

#[cfg(test)]
mod tests;
