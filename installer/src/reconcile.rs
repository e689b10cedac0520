//! Makes the kernel hold the desired state: our routes compared with `our_routes()` and
//! our overlay peers with `overlay_peers()`, only the difference applied (also what changed
//! while the agent was down), the firewall table applied only when it does not match,
//! forwarding on. One failure does not stop the other changes; each is reported.
//!
//! Order: unwanted direct routes, then the VXLAN device and unwanted overlay peers, then new
//! direct routes, then new overlay peers. A pod range moving between a direct route and the
//! overlay is so freed by one kind before the other claims it (the kernel holds one route
//! per destination: the second would fail with EEXIST).

use std::collections::{BTreeMap, BTreeSet};

use hostnet::node::{NodeNet, NodePolicy, OverlayPeer, PodRoute, VxlanSpec};
use ipnetwork::IpNetwork;

/// The overlay part of the desired state.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Overlay {
    /// The device. None, or no peers: no peer needs the overlay and the device is removed
    /// (with every entry on it): nothing of ours stays that nothing uses, and making it
    /// again when a peer needs it is one netlink call.
    pub spec: Option<VxlanSpec>,
    pub peers: BTreeSet<OverlayPeer>,
}

/// What one reconcile did and found.
#[derive(Debug, Default, PartialEq)]
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
    /// Every failed operation, one line each.
    pub errors: Vec<String>,
    /// Non-fatal findings (a foreign route in the way).
    pub warnings: Vec<String>,
}

impl Outcome {
    /// Every wanted route and the firewall are in place (ready).
    pub fn routes_ok(&self) -> bool {
        self.errors
            .iter()
            .all(|e| !e.starts_with("route") && !e.starts_with("overlay"))
            && self.foreign.is_empty()
    }
}

/// Which forwarding switches are already on, so each is written once.
#[derive(Debug, Default)]
pub struct Forwarding {
    pub v4: bool,
    pub v6: bool,
}

/// Applies `routes`, `overlay` and `policy` to `net`.
pub fn reconcile(
    net: &dyn NodeNet,
    routes: &BTreeSet<PodRoute>,
    overlay: &Overlay,
    policy: &NodePolicy,
    forwarding: &mut Forwarding,
) -> Outcome {
    let mut out = Outcome::default();
    let current = net
        .our_routes()
        .map_err(|e| out.errors.push(format!("routes: {e}")))
        .ok();
    if let Some(current) = &current {
        del_routes(net, current, routes, &mut out);
    }
    let have_peers = del_peers(net, overlay, &mut out);
    if let Some(current) = &current {
        add_routes(net, current, routes, &mut out);
    }
    if let Some(have) = have_peers {
        add_peers(net, &have, &overlay.peers, &mut out);
    }
    match net.firewall_matches(policy) {
        Ok(true) => out.firewall_ok = true,
        Ok(false) => match net.apply_firewall(policy) {
            Ok(()) => {
                out.firewall_applied = true;
                out.firewall_ok = true;
            }
            Err(e) => out.errors.push(format!("firewall: {e}")),
        },
        Err(e) => out.errors.push(format!("firewall: {e}")),
    }
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
            Err(e) => out.errors.push(format!("forwarding: {e}")),
        }
    }
    out
}

/// Ours by destination, and the wanted ones by destination.
fn index<'a>(
    current: &'a [PodRoute],
    wanted: &'a BTreeSet<PodRoute>,
) -> (
    BTreeMap<IpNetwork, Vec<&'a PodRoute>>,
    BTreeMap<IpNetwork, &'a PodRoute>,
) {
    let mut have: BTreeMap<IpNetwork, Vec<&PodRoute>> = BTreeMap::new();
    for r in current {
        have.entry(r.dst).or_default().push(r);
    }
    (have, wanted.iter().map(|r| (r.dst, r)).collect())
}

fn del_routes(
    net: &dyn NodeNet,
    current: &[PodRoute],
    wanted: &BTreeSet<PodRoute>,
    out: &mut Outcome,
) {
    let (have, wanted_by_dst) = index(current, wanted);
    let mut routes = current.len();
    // Gone: ours, for a destination no longer wanted (or a second route of ours to a
    // wanted one that is not the wanted gateway).
    for r in current {
        let keep = match wanted_by_dst.get(&r.dst) {
            None => false,
            Some(w) => **w == *r || (!have[&r.dst].contains(w) && have[&r.dst][0] == r),
        };
        if keep {
            continue;
        }
        match net.del_route(r) {
            Ok(()) => {
                out.deleted += 1;
                out.changes
                    .push(format!("route del {} via {}", r.dst, r.gateway));
                routes -= 1;
            }
            Err(e) if e.is_not_found() => routes -= 1,
            Err(e) => out
                .errors
                .push(format!("route {} via {}: {e}", r.dst, r.gateway)),
        }
    }
    out.routes = routes;
}

fn add_routes(
    net: &dyn NodeNet,
    current: &[PodRoute],
    wanted: &BTreeSet<PodRoute>,
    out: &mut Outcome,
) {
    let (have, _) = index(current, wanted);
    for w in wanted {
        match have.get(&w.dst) {
            Some(h) if h.contains(&w) => {}
            Some(_) => match net.replace_route(w) {
                Ok(()) => {
                    out.replaced += 1;
                    out.changes
                        .push(format!("route replace {} via {}", w.dst, w.gateway));
                }
                Err(e) => out
                    .errors
                    .push(format!("route {} via {}: {e}", w.dst, w.gateway)),
            },
            None => match net.add_route(w) {
                Ok(()) => {
                    out.added += 1;
                    out.changes
                        .push(format!("route add {} via {}", w.dst, w.gateway));
                    out.routes += 1;
                }
                Err(e) if e.is_exists() => {
                    out.foreign.push(w.dst);
                    out.warnings.push(format!(
                        "a route to {} that is not ours is in the way: left alone, no route \
                         via {}",
                        w.dst, w.gateway
                    ));
                }
                Err(e) => out
                    .errors
                    .push(format!("route {} via {}: {e}", w.dst, w.gateway)),
            },
        }
    }
}

/// `10.244.3.0/24,fd00:10:244:3::/64 via 192.168.20.21`
fn show_peer(p: &OverlayPeer) -> String {
    format!("{} via {}", crate::run::show(&p.pod_cidrs), p.node_ip)
}

/// The device as wanted, and the peers it holds that are not wanted deleted (a changed peer
/// too: `add_peers` makes it anew). Returns the peers left, None when the device is not
/// wanted (removed) or not usable.
fn del_peers(net: &dyn NodeNet, overlay: &Overlay, out: &mut Outcome) -> Option<Vec<OverlayPeer>> {
    let spec = match &overlay.spec {
        Some(spec) if !overlay.peers.is_empty() => spec,
        _ => {
            // Listed first only to say so when something goes.
            let had = net.overlay_peers().map(|p| p.len()).unwrap_or(0);
            match net.remove_vxlan() {
                Ok(()) if had > 0 => out.changes.push(format!(
                    "overlay device removed, with its {had} peer(s): no peer needs it"
                )),
                Ok(()) => {}
                Err(e) => out.errors.push(format!("overlay device: {e}")),
            }
            return None;
        }
    };
    // A device with other parameters is made anew, without its entries: list after.
    if let Err(e) = net.ensure_vxlan(spec) {
        out.errors.push(format!("overlay device: {e}"));
        return None;
    }
    let current = match net.overlay_peers() {
        Ok(p) => p,
        Err(e) => {
            out.errors.push(format!("overlay peers: {e}"));
            return None;
        }
    };
    let mut have = Vec::new();
    for p in current {
        if overlay.peers.contains(&p) {
            have.push(p);
            continue;
        }
        match net.del_overlay_peer(&p) {
            Ok(()) => out.changes.push(format!("overlay del {}", show_peer(&p))),
            Err(e) => {
                out.errors
                    .push(format!("overlay peer {}: {e}", show_peer(&p)));
                have.push(p);
            }
        }
    }
    out.overlay_peers = have.len();
    Some(have)
}

fn add_peers(
    net: &dyn NodeNet,
    have: &[OverlayPeer],
    wanted: &BTreeSet<OverlayPeer>,
    out: &mut Outcome,
) {
    for p in wanted.iter().filter(|p| !have.contains(p)) {
        match net.add_overlay_peer(p) {
            Ok(()) => {
                out.changes.push(format!("overlay add {}", show_peer(p)));
                out.overlay_peers += 1;
            }
            Err(e) if e.is_exists() => {
                out.foreign.extend(p.pod_cidrs.iter().copied());
                out.warnings.push(format!(
                    "a route to one of {} that is not an overlay route of ours is in the \
                     way: left alone, no overlay to {}",
                    crate::run::show(&p.pod_cidrs),
                    p.node_ip
                ));
            }
            Err(e) => out
                .errors
                .push(format!("overlay peer {}: {e}", show_peer(p))),
        }
    }
}

#[cfg(test)]
mod tests;
