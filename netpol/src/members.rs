//! Where the elements of the sets that follow remote pods come from, one pod at a time.
//! The full compile and the incremental update (`update`) both use these functions, so a
//! pod event changes exactly the elements a full compile would.

use std::borrow::Cow;

use crate::addr::Family;
use crate::cluster::{Cluster, Pod};
use crate::program::{Elem, short_id};
use crate::select::Labels;
use crate::validate::{Namespaces, Peer, Policy, PortMatch, Rule};

/// What set membership reads of the cluster: a `Cluster` (every pod, the plain way) or
/// the incremental engine's indexed state.
pub trait View {
    /// A namespace's labels as selectors see them.
    fn namespace_labels(&self, ns: &str) -> Cow<'_, Labels>;
    /// Calls `f` on every pod `rule` of `policy` can pick or name a port of (more is
    /// fine: the caller decides membership).
    fn candidates(&self, policy: &Policy, rule: &Rule, f: &mut dyn FnMut(&Pod));
    /// Calls `f` on every pod selector peers `peers` (of a policy in `policy_ns`) can
    /// pick (more is fine).
    fn peer_candidates(&self, policy_ns: &str, peers: &[Peer], f: &mut dyn FnMut(&Pod));
}

impl View for Cluster {
    fn namespace_labels(&self, ns: &str) -> Cow<'_, Labels> {
        match self.namespaces.get(ns) {
            Some(l) => Cow::Borrowed(l),
            None => Cow::Owned(Cluster::namespace_labels(self, ns)),
        }
    }

    fn candidates(&self, _: &Policy, _: &Rule, f: &mut dyn FnMut(&Pod)) {
        self.pods.iter().for_each(f);
    }

    fn peer_candidates(&self, _: &str, _: &[Peer], f: &mut dyn FnMut(&Pod)) {
        self.pods.iter().for_each(f);
    }
}

/// A set whose elements follow pods anywhere in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The addresses of the pods selector peers pick: one set for every rule with the
    /// same peers (`namespace`: the policies' own, which a peer without a
    /// namespaceSelector means; empty when no peer needs it), see `peer_set`.
    PeerPods {
        namespace: String,
        peers: Vec<Peer>,
        family: Family,
    },
    /// `(address, proto, port)` where an egress rule's named ports resolve, on its peers.
    EgressNamed {
        policy: String,
        rule: usize,
        family: Family,
    },
}

/// Whether a rule's selector peers pick `pod` (a hostNetwork pod is never picked).
pub fn picks<V: View + ?Sized>(c: &V, policy_ns: &str, peers: &[Peer], pod: &Pod) -> bool {
    pod.policed()
        && peers
            .iter()
            .any(|peer| in_namespace(c, policy_ns, peer, &pod.namespace) && picks_in(peer, pod))
}

/// Whether `peer` (of a policy in `policy_ns`) picks pods of namespace `ns` at all.
pub fn in_namespace<V: View + ?Sized>(c: &V, policy_ns: &str, peer: &Peer, ns: &str) -> bool {
    match peer {
        Peer::Block { .. } => false,
        Peer::Pods { namespaces, .. } => match namespaces {
            Namespaces::Own => ns == policy_ns,
            Namespaces::Matching(s) => s.matches(&c.namespace_labels(ns)),
        },
    }
}

/// Whether `peer` picks `pod` among the pods of a namespace it picks from.
pub fn picks_in(peer: &Peer, pod: &Pod) -> bool {
    matches!(peer, Peer::Pods { pods, .. } if pods.matches(&pod.labels))
}

fn in_blocks(peers: &[Peer], pod: &Pod, f: Family) -> bool {
    pod.ip(f).is_some_and(|ip| {
        peers.iter().any(|peer| match peer {
            Peer::Block { cidr, except } => {
                cidr.contains(ip) && !except.iter().any(|e| e.contains(ip))
            }
            Peer::Pods { .. } => false,
        })
    })
}

/// The `(address, proto, port)` elements of `pod` for a rule's named ports.
pub fn named_ports(pod: &Pod, rule: &Rule, f: Family) -> Vec<Elem> {
    let Some(ip) = pod.ip(f) else { return vec![] };
    let mut out = vec![];
    for pt in rule.ports.iter().flatten() {
        if let PortMatch::Named(n) = &pt.port
            && let Some(port) = pod.named_port(n, pt.protocol)
        {
            out.push(Elem::AddrProtoPort(ip, pt.protocol.number(), port));
        }
    }
    out
}

fn policy<'c>(c: &'c Cluster, key: &str) -> Option<&'c Policy> {
    let (ns, name) = key.split_once('/')?;
    let i = c
        .policies
        .binary_search_by(|p| (p.namespace.as_str(), p.name.as_str()).cmp(&(ns, name)))
        .ok()?;
    Some(&c.policies[i])
}

/// The name and source of the set of the pods `peers` (a rule's, of a policy in
/// `namespace`) pick in family `f`: named after what decides its elements, so rules
/// of many policies with the same peers share one set.
pub fn peer_set(namespace: &str, peers: &[Peer], f: Family) -> (String, Source) {
    let peers: Vec<Peer> = peers
        .iter()
        .filter(|x| matches!(x, Peer::Pods { .. }))
        .cloned()
        .collect();
    let own = peers.iter().any(|x| {
        matches!(
            x,
            Peer::Pods {
                namespaces: Namespaces::Own,
                ..
            }
        )
    });
    let namespace = if own { namespace } else { "" }.to_string();
    let id = short_id(&format!("{namespace}\n{peers:?}"));
    let name = format!("peer-{id}-pods{}", f.suffix());
    let src = Source::PeerPods {
        namespace,
        peers,
        family: f,
    };
    (name, src)
}

/// What `pod` puts into a `PeerPods` set.
pub fn peer_members<V: View + ?Sized>(
    c: &V,
    namespace: &str,
    peers: &[Peer],
    f: Family,
    pod: &Pod,
) -> Vec<Elem> {
    if !picks(c, namespace, peers, pod) {
        return vec![];
    }
    pod.ip(f).map(Elem::Addr).into_iter().collect()
}

/// What `pod` puts into the set `src` describes.
pub fn members(c: &Cluster, src: &Source, pod: &Pod) -> Vec<Elem> {
    match src {
        Source::PeerPods {
            namespace,
            peers,
            family,
        } => peer_members(c, namespace, peers, *family, pod),
        Source::EgressNamed {
            policy: key,
            rule,
            family,
        } => {
            let Some(p) = policy(c, key) else {
                return vec![];
            };
            let Some(rule) = p.egress.as_deref().and_then(|rs| rs.get(*rule)) else {
                return vec![];
            };
            egress_named_members(c, p, rule, *family, pod)
        }
    }
}

/// What `pod` puts into the named-port set of egress `rule` of `p` (`members` with the
/// policy and rule at hand).
pub fn egress_named_members<V: View + ?Sized>(
    c: &V,
    p: &Policy,
    rule: &Rule,
    f: Family,
    pod: &Pod,
) -> Vec<Elem> {
    if !pod.policed() {
        return vec![];
    }
    match &rule.peers {
        None => named_ports(pod, rule, f),
        Some(peers) if picks(c, &p.namespace, peers, pod) || in_blocks(peers, pod, f) => {
            named_ports(pod, rule, f)
        }
        Some(_) => vec![],
    }
}
