//! Makes the kernel hold the desired state: our routes compared with `our_routes()` and
//! only the difference applied (also what changed while the agent was down), the firewall
//! table applied only when it does not match, forwarding on. One failure does not stop the
//! other changes; each is reported.
//!
//! What a pass leaves is kept ([`Applied`]) and trusted by the next one, so an event costs
//! the changes it makes and no dump of thousands of routes; the agent's periodic re-check
//! and any failure forget it, and the next pass reads the kernel again (drift, someone
//! else's changes).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use hostnet::node::{NodeNet, NodePolicy, PodRoute};
use ipnetwork::IpNetwork;

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
        self.errors.iter().all(|e| !e.starts_with("route")) && self.foreign.is_empty()
    }
}

/// Which forwarding switches are already on, so each is written once.
#[derive(Debug, Default)]
pub struct Forwarding {
    pub v4: bool,
    pub v6: bool,
}

/// What the kernel held after the last pass, as far as this agent knows.
#[derive(Debug, Default)]
pub struct Applied {
    pub forwarding: Forwarding,
    /// Our routes (None: read them from the kernel).
    routes: Option<BTreeSet<PodRoute>>,
    /// The policy our firewall table matched (None: compare with the kernel).
    firewall: Option<NodePolicy>,
}

impl Applied {
    /// The next pass reads routes and firewall from the kernel again.
    pub fn forget(&mut self) {
        self.routes = None;
        self.firewall = None;
    }
}

/// Applies `routes` and `policy` to `net`.
pub fn reconcile(
    net: &dyn NodeNet,
    routes: &BTreeSet<PodRoute>,
    policy: &NodePolicy,
    applied: &mut Applied,
) -> Outcome {
    let mut out = Outcome::default();
    let current = match applied.routes.take() {
        Some(known) => Ok(known),
        None => net.our_routes().map(|r| r.into_iter().collect()),
    };
    match current {
        Ok(current) => applied.routes = apply_routes(net, current, routes, &mut out),
        Err(e) => out.errors.push(format!("routes: {e}")),
    }
    if applied.firewall.as_ref() == Some(policy) {
        out.firewall_ok = true;
    } else {
        applied.firewall = None;
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
        if out.firewall_ok {
            applied.firewall = Some(policy.clone());
        }
    }
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
            Err(e) => out.errors.push(format!("forwarding: {e}")),
        }
    }
    out
}

/// Makes our routes `wanted`, from `current`: deletes first (a destination freed for
/// another kind of route), then replaces (a changed gateway: one message) and adds. Our
/// routes afterwards, or None when an operation failed (unknown: read them again).
fn apply_routes(
    net: &dyn NodeNet,
    mut current: BTreeSet<PodRoute>,
    wanted: &BTreeSet<PodRoute>,
    out: &mut Outcome,
) -> Option<BTreeSet<PodRoute>> {
    let gone: BTreeSet<PodRoute> = current.difference(wanted).cloned().collect();
    let new: Vec<&PodRoute> = wanted.iter().filter(|w| !current.contains(w)).collect();
    // A new route whose destination one of ours holds replaces that one (the first: routes
    // order by destination, then gateway).
    let mut replaces: BTreeMap<IpNetwork, PodRoute> = BTreeMap::new();
    for w in &new {
        let first = PodRoute {
            dst: w.dst,
            gateway: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        if let Some(old) = gone.range(first..).next().filter(|g| g.dst == w.dst) {
            replaces.insert(w.dst, old.clone());
        }
    }
    let failed = out.errors.len();
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
            Err(e) => out
                .errors
                .push(format!("route {} via {}: {e}", r.dst, r.gateway)),
        }
    }
    for w in new {
        if let Some(old) = replaces.get(&w.dst) {
            match net.replace_route(w) {
                Ok(()) => {
                    out.replaced += 1;
                    out.changes
                        .push(format!("route replace {} via {}", w.dst, w.gateway));
                    current.remove(old);
                    current.insert(w.clone());
                }
                Err(e) => out
                    .errors
                    .push(format!("route {} via {}: {e}", w.dst, w.gateway)),
            }
            continue;
        }
        match net.add_route(w) {
            Ok(()) => {
                out.added += 1;
                out.changes
                    .push(format!("route add {} via {}", w.dst, w.gateway));
                current.insert(w.clone());
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
        }
    }
    out.routes = current.len();
    (out.errors.len() == failed).then_some(current)
}

#[cfg(test)]
mod tests;
