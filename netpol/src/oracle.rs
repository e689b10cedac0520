//! The semantics of networking.k8s.io/v1 NetworkPolicy, written plainly from the API
//! reference and the concepts page, with no regard for how it is enforced. This is the
//! truth table the compiled program (and later the kernel) is checked against.
//!
//! - A pod is isolated for a direction when some policy in its namespace selects it and
//!   has that direction in its `policyTypes`; then a connection in that direction is
//!   allowed when some rule of some such policy allows it (a union), else it is not.
//!   A pod no policy selects for a direction is not isolated in it.
//! - A connection from pod A to pod B needs A's egress and B's ingress to allow it.
//! - A rule with no peers allows every peer; with no ports, every port and protocol.
//! - A peer `podSelector` alone picks pods of the policy's namespace; `namespaceSelector`
//!   alone, every pod of the matching namespaces; both, pods matching both. `ipBlock`
//!   matches the peer's address (pod or not) in `cidr` and in no `except`.
//! - A numeric port (`endPort`: a range) matches the destination port. A named port is
//!   resolved on the destination pod: the selected pod for ingress, the peer for egress;
//!   a destination that is not a pod, or has no such port, does not match it.
//! - hostNetwork pods are not policed and are not pods to selectors: their traffic is
//!   the node's (matched by ipBlock only). A pod and its own node may always talk; a
//!   pod's traffic to itself never leaves it. Replies are not new connections (not
//!   asked here: every flow is the first packet of a connection).

use std::net::IpAddr;

use crate::addr::Family;
use crate::cluster::{Cluster, Pod};
use crate::validate::{Direction, Namespaces, Peer, PortMatch, Rule};

/// One end of a connection: a pod, or an address that is no pod's.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint<'a> {
    Pod(&'a Pod),
    Outside(IpAddr),
}

impl Endpoint<'_> {
    pub fn ip(&self, family: Family) -> Option<IpAddr> {
        match self {
            Endpoint::Pod(p) => p.ip(family),
            Endpoint::Outside(ip) => (Family::of(*ip) == family).then_some(*ip),
        }
    }

    fn policed_pod(&self) -> Option<&Pod> {
        match self {
            Endpoint::Pod(p) if p.policed() => Some(p),
            _ => None,
        }
    }
}

/// Whether a new connection of IP protocol `proto` to `port` from `src` to `dst` over
/// `family` is allowed; `None` when an end has no address of that family.
pub fn allowed(
    c: &Cluster,
    src: Endpoint,
    dst: Endpoint,
    family: Family,
    proto: u8,
    port: u16,
) -> Option<bool> {
    let (sip, dip) = (src.ip(family)?, dst.ip(family)?);
    if sip == dip {
        return Some(true);
    }
    let (spod, dpod) = (src.policed_pod(), dst.policed_pod());
    let own_node =
        |p: Option<&Pod>, other: IpAddr| p.is_some_and(|p| c.node_addrs(&p.node).contains(&other));
    if own_node(spod, dip) || own_node(dpod, sip) {
        return Some(true);
    }
    let egress = spod.is_none_or(|p| allows(c, p, Direction::Egress, (dpod, dip), proto, port));
    let ingress = dpod.is_none_or(|p| allows(c, p, Direction::Ingress, (spod, sip), proto, port));
    Some(egress && ingress)
}

/// Whether `target`'s policies for `dir` allow the connection with `peer` (the other end).
fn allows(
    c: &Cluster,
    target: &Pod,
    dir: Direction,
    peer: (Option<&Pod>, IpAddr),
    proto: u8,
    port: u16,
) -> bool {
    let mut isolated = false;
    for policy in &c.policies {
        if *policy.namespace != *target.namespace || !policy.pod_selector.matches(&target.labels) {
            continue;
        }
        let Some(rules) = policy.rules(dir) else {
            continue;
        };
        isolated = true;
        let port_pod = match dir {
            Direction::Ingress => Some(target),
            Direction::Egress => peer.0,
        };
        if rules.iter().any(|r| {
            peer_matches(c, &policy.namespace, r, peer) && port_matches(r, port_pod, proto, port)
        }) {
            return true;
        }
    }
    !isolated
}

fn peer_matches(c: &Cluster, policy_ns: &str, rule: &Rule, peer: (Option<&Pod>, IpAddr)) -> bool {
    let Some(peers) = &rule.peers else {
        return true;
    };
    peers.iter().any(|p| match p {
        Peer::Block { cidr, except } => {
            cidr.contains(peer.1) && !except.iter().any(|e| e.contains(peer.1))
        }
        Peer::Pods { namespaces, pods } => peer.0.is_some_and(|pod| {
            let ns_ok = match namespaces {
                Namespaces::Own => &*pod.namespace == policy_ns,
                Namespaces::Matching(s) => s.matches(&c.namespace_labels(&pod.namespace)),
            };
            ns_ok && pods.matches(&pod.labels)
        }),
    })
}

fn port_matches(rule: &Rule, port_pod: Option<&Pod>, proto: u8, port: u16) -> bool {
    let Some(ports) = &rule.ports else {
        return true;
    };
    ports.iter().any(|p| {
        p.protocol.number() == proto
            && match &p.port {
                PortMatch::Any => true,
                PortMatch::Range(a, b) => (*a..=*b).contains(&port),
                PortMatch::Named(n) => {
                    port_pod.and_then(|pod| pod.named_port(n, p.protocol)) == Some(port)
                }
            }
    })
}
