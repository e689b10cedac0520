//! The long-lived, incremental form of `compile`: the cluster view with its indexes and
//! the node's current `Program`, kept equal to `compile` of the same objects (a generated
//! test checks it after every event). Each event returns the `Changes` for the kernel,
//! exactly what `diff` of the programs before and after would give, computed from the
//! objects the event touches:
//! - a pod: the sets whose sources its old or new version belongs to (a scan of the
//!   node's active policies' rules, not of the pods), and for a pod of this node its
//!   dispatch, selection chain and the policies it starts or stops being selected by;
//! - a namespace's labels: the pods of that namespace against the same rules;
//! - a policy: that policy's chains and sets (rebuilt from the indexes: pods by
//!   namespace, namespaces by selector) and the local pods of its namespace.

mod claims;
mod local;
mod names;
mod pods;
mod tx;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use crate::build;
use crate::cluster::Pod;
use crate::compile::base_program;
use crate::diff::Changes;
use crate::members::{Source, View, egress_named_members, peer_members};
use crate::model;
use crate::program::{Elem, Program, Set};
use crate::select::{Labels, namespace_labels};
use crate::validate::{Checked, Direction, Namespaces, Peer, Policy, PolicyError, Rule};
use local::Local;
use tx::Tx;

/// A policy's identity: namespace, name (this order is the order `compile` lists them).
pub(crate) type Key = (String, String);

/// A pod as seen: `pod.ips` only the addresses it owns; `claimed` all it reports.
struct Entry {
    pod: Pod,
    claimed: Vec<IpAddr>,
}

/// The cluster, indexed.
#[derive(Default)]
pub(crate) struct State {
    ids: names::Names,
    /// By id; `None`: a free slot (in `free`). Boxed: the slots double as pods come, and
    /// 150,000 slots of a whole entry doubled are 45 MB, of a pointer 1.2 MB.
    pods: Vec<Option<Box<Entry>>>,
    free: Vec<u32>,
    /// Policed pods by namespace: the candidates of a selector peer.
    by_ns: HashMap<Arc<str>, BTreeSet<u32>>,
    /// Policed pods claiming each address (usually one).
    claims: claims::Claims,
    /// Namespaces we have an object for, with their labels as selectors see them.
    namespaces: BTreeMap<String, Labels>,
    policies: BTreeMap<Key, Policy>,
    refused: BTreeMap<String, PolicyError>,
}

impl State {
    fn pod(&self, id: u32) -> &Pod {
        &self.pods[id as usize].as_ref().expect("live id").pod
    }

    fn policy_of(&self, key: &str) -> Option<&Policy> {
        let (ns, name) = key.split_once('/')?;
        self.policies.get(&(ns.to_string(), name.to_string()))
    }

    /// What `pod` puts into the set `src` describes (`members::members`, indexed).
    fn source_members(&self, src: &Source, pod: &Pod) -> Vec<Elem> {
        let (key, r, f) = match src {
            Source::PeerPods {
                namespace,
                peers,
                family,
            } => return peer_members(self, namespace, peers, *family, pod),
            Source::EgressNamed {
                policy,
                rule,
                family,
            } => (policy, *rule, *family),
        };
        let Some(p) = self.policy_of(key) else {
            return vec![];
        };
        match p.egress.as_deref().and_then(|rs| rs.get(r)) {
            Some(rule) => egress_named_members(self, p, rule, f, pod),
            None => vec![],
        }
    }
}

impl View for State {
    fn namespace_labels(&self, ns: &str) -> Cow<'_, Labels> {
        match self.namespaces.get(ns) {
            Some(l) => Cow::Borrowed(l),
            None => Cow::Owned(namespace_labels(ns, &Labels::new())),
        }
    }

    fn candidates(&self, p: &Policy, rule: &Rule, f: &mut dyn FnMut(&Pod)) {
        match &rule.peers {
            Some(peers) if peers.iter().all(|x| matches!(x, Peer::Pods { .. })) => {
                self.peer_candidates(&p.namespace, peers, f)
            }
            // Every peer, or an ipBlock (an egress named port resolves on any pod in it).
            _ => self.pods.iter().flatten().for_each(|e| f(&e.pod)),
        }
    }

    fn peer_candidates(&self, policy_ns: &str, peers: &[Peer], f: &mut dyn FnMut(&Pod)) {
        let mut spaces: BTreeSet<&str> = BTreeSet::new();
        for peer in peers {
            match peer {
                Peer::Pods {
                    namespaces: Namespaces::Own,
                    ..
                } => {
                    spaces.insert(policy_ns);
                }
                Peer::Pods {
                    namespaces: Namespaces::Matching(s),
                    ..
                } => spaces.extend(
                    self.by_ns
                        .keys()
                        .filter(|ns| s.matches(&View::namespace_labels(self, ns)))
                        .map(|ns| &**ns),
                ),
                Peer::Block { .. } => {}
            }
        }
        for ns in spaces {
            for &id in self.by_ns.get(ns).into_iter().flatten() {
                f(self.pod(id));
            }
        }
    }
}

/// One node's policy state, kept up to date event by event.
pub struct Engine {
    node: String,
    st: State,
    local: Local,
    prog: Program,
    /// `Some` after `fill_later`: the new peer sets made empty, to be filled by `fill`.
    unfilled: Option<BTreeSet<String>>,
}

impl Engine {
    /// No objects yet: the base chains and empty dispatch maps.
    pub fn new(node: &str, node_addrs: &[IpAddr]) -> Engine {
        let mut prog = base_program();
        prog.local = node_addrs.iter().copied().collect();
        Engine {
            node: node.to_string(),
            st: State::default(),
            local: Local::default(),
            prog,
            unfilled: None,
        }
    }

    /// From now on an event's new shared peer sets come empty in its changes, their
    /// elements in those of `fill`. In between the program allows less than the policies,
    /// never more (those sets are matched by accept rules alone): the agent writes an
    /// event's changes, so a pod is isolated at once, then the fill, which at a
    /// namespaceSelector over many namespaces is tens of thousands of addresses.
    pub fn fill_later(&mut self) {
        self.unfilled.get_or_insert_default();
    }

    /// The elements of the peer sets made empty since the last call; with them the
    /// program is again `compile`'s.
    pub fn fill(&mut self) -> Changes {
        let names = self
            .unfilled
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let mut tx = Tx::new(&mut self.prog);
        for name in names {
            let (
                Some(set),
                Some(Source::PeerPods {
                    namespace,
                    peers,
                    family,
                }),
            ) = (tx.prog.sets.get(&name), tx.prog.sources.get(&name))
            else {
                continue;
            };
            let full = Set {
                kind: set.kind,
                elems: build::peer_addresses(&self.st, namespace, peers, *family),
            };
            tx.put_set(&name, Some(full));
        }
        tx.finish()
    }

    /// Loads a whole cluster (the first full programming): namespaces, then pods, then
    /// policies, so each policy's sets are built once from the indexes (pods added before
    /// are indexed already). No changes are
    /// returned: the program goes to the kernel whole (at 150,000 pods the difference
    /// from the empty program was 220,000 elements copied once more, at the peak).
    pub fn load(
        &mut self,
        namespaces: &[model::Namespace],
        pods: impl IntoIterator<Item = Pod>,
        policies: impl IntoIterator<Item = Checked>,
    ) {
        for ns in namespaces {
            self.set_namespace(ns);
        }
        self.add_pods(pods);
        for p in policies {
            self.set_checked(p);
        }
    }

    /// Pods before any policy: only indexed. `load`'s, and the agent's first pod list as
    /// it is read, before the rest of the cluster is (then `load` adds the namespaces,
    /// any other pods and the policies: the program is the same).
    pub fn add_pods(&mut self, pods: impl IntoIterator<Item = Pod>) {
        let pods = pods.into_iter();
        // Exact capacity: growth by doubling would leave up to half of it unused. The
        // upper bound: the agent's pods come flattened out of Options (lower bound 0).
        let n = match pods.size_hint() {
            (_, Some(most)) => most,
            (least, None) => least,
        };
        self.st.pods.reserve(n);
        self.st.ids.reserve(n);
        self.st.claims.reserve(n);
        for p in pods {
            self.set_pod(p);
        }
    }

    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// The node's own addresses (`Program.local`): they change, e.g. the bridge's gateway
    /// address appears with the node's first pod.
    pub fn set_local(&mut self, addrs: impl IntoIterator<Item = IpAddr>) {
        self.prog.local = addrs.into_iter().collect();
    }

    /// A pod added or changed (`Pod::from_object` of the API's object).
    pub fn set_pod(&mut self, pod: Pod) -> Changes {
        let key = (pod.namespace.to_string(), pod.name.clone());
        self.pod_event(key, Some(pod))
    }

    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> Changes {
        self.pod_event((namespace.to_string(), name.to_string()), None)
    }

    /// A namespace added or its labels changed.
    pub fn set_namespace(&mut self, ns: &model::Namespace) -> Changes {
        let name = &ns.metadata.name;
        let labels = namespace_labels(name, &ns.metadata.labels);
        self.namespace_event(name, Some(labels))
    }

    /// A namespace removed: selectors see only its name label (its pods go by their own
    /// events).
    pub fn remove_namespace(&mut self, name: &str) -> Changes {
        self.namespace_event(name, None)
    }

    pub fn set_policy(&mut self, np: &model::NetworkPolicy) -> Changes {
        self.set_checked(Policy::from_object(np))
    }

    /// A policy checked already (the agent checks each as it is decoded, so the first
    /// list never holds 10,000 decoded policies beside their checked forms).
    pub fn set_checked(&mut self, checked: Checked) -> Changes {
        let (p, err) = match checked {
            Ok(p) => (p, None),
            Err(r) => (r.stand_in, Some(r.error)),
        };
        let key = (p.namespace.clone(), p.name.clone());
        self.policy_event(key, Some((p, err)))
    }

    pub fn remove_policy(&mut self, namespace: &str, name: &str) -> Changes {
        self.policy_event((namespace.to_string(), name.to_string()), None)
    }

    fn namespace_event(&mut self, name: &str, labels: Option<Labels>) -> Changes {
        let new = labels
            .clone()
            .unwrap_or_else(|| namespace_labels(name, &Labels::new()));
        if *View::namespace_labels(&self.st, name) == new {
            match labels {
                Some(l) => self.st.namespaces.insert(name.to_string(), l),
                None => self.st.namespaces.remove(name),
            };
            return Changes::default();
        }
        // Only sets of rules with a namespace selector depend on namespace labels.
        let sources: Vec<(&String, &Source)> = self
            .prog
            .sources
            .iter()
            .filter(|(_, src)| namespace_dependent(&self.st, src))
            .collect();
        let ids: Vec<u32> = self
            .st
            .by_ns
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        let elems = |st: &State| -> Vec<Vec<Elem>> {
            let pods = ids.iter().map(|&id| st.pod(id));
            pods.flat_map(|p| sources.iter().map(|(_, s)| st.source_members(s, p)))
                .collect()
        };
        let before = elems(&self.st);
        match labels {
            Some(l) => self.st.namespaces.insert(name.to_string(), l),
            None => self.st.namespaces.remove(name),
        };
        let after = elems(&self.st);
        let names: Vec<String> = sources.iter().map(|(n, _)| (*n).clone()).collect();
        let mut tx = Tx::new(&mut self.prog);
        let per_pod = names.len().max(1);
        for (i, (b, a)) in before.iter().zip(&after).enumerate() {
            let set = &names[i % per_pod];
            b.iter()
                .filter(|e| !a.contains(e))
                .for_each(|e| tx.remove(set, e));
            a.iter()
                .filter(|e| !b.contains(e))
                .for_each(|e| tx.insert(set, e.clone()));
        }
        tx.finish()
    }

    fn policy_event(&mut self, key: Key, new: Option<(Policy, Option<PolicyError>)>) -> Changes {
        let name = format!("{}/{}", key.0, key.1);
        let mut tx = Tx::new(&mut self.prog);
        for dir in [Direction::Ingress, Direction::Egress] {
            local::deactivate(&mut self.local, &mut tx, &key, dir);
        }
        self.st.refused.remove(&name);
        match new {
            Some((p, err)) => {
                self.st.policies.insert(key.clone(), p);
                if let Some(e) = err {
                    self.st.refused.insert(name, e);
                }
            }
            None => {
                self.st.policies.remove(&key);
            }
        }
        tx.prog.refused = self.st.refused.values().cloned().collect();
        let mut dirty = BTreeSet::new();
        for dir in [Direction::Ingress, Direction::Egress] {
            dirty.insert((key.clone(), dir));
        }
        let ids: Vec<u32> = self.local.in_namespace(&key.0);
        for id in ids {
            let pod = self.st.pod(id);
            self.local
                .refresh(&self.st, &mut tx, id, Some(pod), &mut dirty);
        }
        self.local.rewrite_chains_of(&self.st, &mut tx, &key);
        self.local
            .settle(&self.st, &mut tx, dirty, &mut self.unfilled.as_mut());
        tx.finish()
    }
}

/// Whether a source's peers include a namespace selector.
fn namespace_dependent(st: &State, src: &Source) -> bool {
    let peers = match src {
        Source::PeerPods { peers, .. } => Some(peers),
        Source::EgressNamed { policy, rule, .. } => st
            .policy_of(policy)
            .and_then(|p| p.egress.as_deref())
            .and_then(|rs| rs.get(*rule))
            .and_then(|r| r.peers.as_ref()),
    };
    peers.is_some_and(|peers| {
        peers.iter().any(|x| {
            matches!(
                x,
                Peer::Pods {
                    namespaces: Namespaces::Matching(_),
                    ..
                }
            )
        })
    })
}
