//! Makes the kernel hold the desired state: our routes compared with `our_routes()` and
//! only the difference applied (also what changed while the agent was down), the firewall
//! table applied only when it does not match, forwarding on. One failure does not stop the
//! other changes; each is reported.

use std::collections::{BTreeMap, BTreeSet};

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

/// Applies `routes` and `policy` to `net`.
pub fn reconcile(
    net: &dyn NodeNet,
    routes: &BTreeSet<PodRoute>,
    policy: &NodePolicy,
    forwarding: &mut Forwarding,
) -> Outcome {
    let mut out = Outcome::default();
    match net.our_routes() {
        Ok(current) => apply_routes(net, &current, routes, &mut out),
        Err(e) => out.errors.push(format!("routes: {e}")),
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

fn apply_routes(
    net: &dyn NodeNet,
    current: &[PodRoute],
    wanted: &BTreeSet<PodRoute>,
    out: &mut Outcome,
) {
    let mut have: BTreeMap<IpNetwork, Vec<&PodRoute>> = BTreeMap::new();
    for r in current {
        have.entry(r.dst).or_default().push(r);
    }
    let wanted_by_dst: BTreeMap<IpNetwork, &PodRoute> = wanted.iter().map(|r| (r.dst, r)).collect();
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
                    routes += 1;
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
    out.routes = routes;
}

#[cfg(test)]
mod tests;
