//! The objects policy enforcement reads, normalized once: pods with parsed addresses and
//! named ports, namespaces with their effective labels, policies checked (refused ones
//! replaced by their deny-all stand-ins, the errors kept for logs and metrics).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::addr::Family;
use crate::model;
use crate::select::{Labels, namespace_labels};
use crate::validate::{Policy, PolicyError, Protocol};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    /// Shared with every pod of the same labels ([`shared_labels`]).
    pub labels: Arc<Labels>,
    pub node: String,
    /// Its traffic is the node's: never policed as a pod, never a selector's peer.
    pub host_network: bool,
    /// At most one per family, in the API's order.
    pub ips: Vec<IpAddr>,
    /// `(name, protocol, port)` of every named container port.
    pub named_ports: Vec<(String, Protocol, u16)>,
    /// `metadata.creationTimestamp` as sent (empty when absent: the oldest).
    pub created: String,
}

/// The one copy of `labels` that pods with these labels share: a ReplicaSet's pods have the
/// same, so 150,000 pods hold a few thousand label sets, not 150,000 (~700 bytes each).
/// Sets no pod holds any more are dropped when the table has doubled since the last sweep.
pub fn shared_labels(labels: &Labels) -> Arc<Labels> {
    static SHARED: Mutex<Shared> = Mutex::new(Shared {
        sets: None,
        sweep_at: 0,
    });
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    let Shared { sets, sweep_at } = &mut *shared;
    let sets = sets.get_or_insert_with(HashSet::new);
    if let Some(one) = sets.get(labels) {
        return one.clone();
    }
    if sets.len() >= *sweep_at {
        sets.retain(|s| Arc::strong_count(s) > 1);
        *sweep_at = (2 * sets.len()).max(1024);
    }
    let one = Arc::new(labels.clone());
    sets.insert(one.clone());
    one
}

struct Shared {
    sets: Option<HashSet<Arc<Labels>>>,
    sweep_at: usize,
}

impl Pod {
    pub fn from_object(p: &model::Pod) -> Pod {
        let mut ips: Vec<IpAddr> = Vec::new();
        let listed = p.status.pod_ips.iter().map(|i| i.ip.as_str());
        let texts: Vec<&str> = if p.status.pod_ips.is_empty() {
            vec![p.status.pod_ip.as_str()]
        } else {
            listed.collect()
        };
        // A finished pod's address may already be another pod's.
        let finished = matches!(p.status.phase.as_str(), "Succeeded" | "Failed");
        for ip in texts.into_iter().filter_map(|t| t.parse::<IpAddr>().ok()) {
            if !finished && !ips.iter().any(|i| Family::of(*i) == Family::of(ip)) {
                ips.push(ip);
            }
        }
        let named_ports = p
            .spec
            .containers
            .iter()
            .flat_map(|c| &c.ports)
            .filter(|cp| !cp.name.is_empty())
            .filter_map(|cp| {
                let proto = Protocol::parse(cp.protocol.as_deref())?;
                let port = u16::try_from(cp.container_port).ok().filter(|&n| n != 0)?;
                Some((cp.name.clone(), proto, port))
            })
            .collect();
        Pod {
            namespace: p.metadata.namespace.clone(),
            name: p.metadata.name.clone(),
            labels: shared_labels(&p.metadata.labels),
            node: p.spec.node_name.clone(),
            host_network: p.spec.host_network,
            ips,
            named_ports,
            created: p.metadata.creation_timestamp.clone(),
        }
    }

    pub fn ip(&self, family: Family) -> Option<IpAddr> {
        self.ips.iter().copied().find(|i| Family::of(*i) == family)
    }

    /// A named port of this pod with that protocol (names are unique in a pod).
    pub fn named_port(&self, name: &str, proto: Protocol) -> Option<u16> {
        self.named_ports
            .iter()
            .find(|(n, p, _)| n == name && *p == proto)
            .map(|x| x.2)
    }

    /// Whether this pod keeps an address `other` claims too. Two policed pods with one
    /// address is a stale status (a deleted pod's address already reused): the newer pod
    /// (later `creationTimestamp`) is the likely holder; a tie goes to the first by
    /// namespace/name. The other pod is seen without that address, everywhere.
    pub fn owns_against(&self, other: &Pod) -> bool {
        fn rank(p: &Pod) -> (std::cmp::Reverse<&str>, &str, &str) {
            (std::cmp::Reverse(&p.created), &p.namespace, &p.name)
        }
        rank(self) <= rank(other)
    }

    /// Whether policies apply to it and selectors see it.
    pub fn policed(&self) -> bool {
        !self.host_network
    }
}

#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Namespace name -> its labels as selectors see them.
    pub namespaces: BTreeMap<String, Labels>,
    pub pods: Vec<Pod>,
    /// Sorted by `namespace/name`; refused policies appear as their stand-ins.
    pub policies: Vec<Policy>,
    pub refused: Vec<PolicyError>,
    /// Node name -> the node's own addresses (traffic between a pod and these is allowed).
    pub nodes: BTreeMap<String, Vec<IpAddr>>,
}

impl Cluster {
    pub fn new(
        namespaces: &[model::Namespace],
        pods: &[model::Pod],
        policies: &[model::NetworkPolicy],
        nodes: BTreeMap<String, Vec<IpAddr>>,
    ) -> Cluster {
        let mut c = Cluster {
            nodes,
            ..Cluster::default()
        };
        for ns in namespaces {
            let name = &ns.metadata.name;
            c.namespaces
                .insert(name.clone(), namespace_labels(name, &ns.metadata.labels));
        }
        c.pods = pods.iter().map(Pod::from_object).collect();
        for np in policies {
            match Policy::from_object(np) {
                Ok(p) => c.policies.push(p),
                Err(r) => {
                    c.policies.push(r.stand_in);
                    c.refused.push(r.error);
                }
            }
        }
        c.policies
            .sort_by_key(|p| (p.namespace.clone(), p.name.clone()));
        c.refused.sort_by(|a, b| a.policy.cmp(&b.policy));
        c
    }

    /// A namespace's labels; one we have no object for still carries its name label.
    pub fn namespace_labels(&self, ns: &str) -> Labels {
        self.namespaces
            .get(ns)
            .cloned()
            .unwrap_or_else(|| namespace_labels(ns, &Labels::new()))
    }

    pub fn node_addrs(&self, node: &str) -> &[IpAddr] {
        self.nodes.get(node).map(Vec::as_slice).unwrap_or_default()
    }

    /// The cluster as policies see it: each address claimed by two policed pods kept by
    /// one (`Pod::owns_against`), removed from the others.
    pub fn with_owners(&self) -> Cluster {
        let mut owner: HashMap<IpAddr, usize> = HashMap::new();
        for (i, p) in self.pods.iter().enumerate().filter(|(_, p)| p.policed()) {
            for ip in &p.ips {
                let o = owner.entry(*ip).or_insert(i);
                if p.owns_against(&self.pods[*o]) {
                    *o = i;
                }
            }
        }
        let mut c = self.clone();
        for (i, p) in c.pods.iter_mut().enumerate().filter(|(_, p)| p.policed()) {
            p.ips.retain(|ip| owner[ip] == i);
        }
        c
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods
            .iter()
            .find(|p| p.namespace == namespace && p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(test: &str, v: &str) -> Labels {
        [(format!("shared-labels-test-{test}"), v.to_string())]
            .into_iter()
            .collect()
    }

    #[test]
    fn pods_with_the_same_labels_share_one_copy_and_unheld_copies_go() {
        let a = shared_labels(&labels("share", "x"));
        let b = shared_labels(&labels("share", "x"));
        let c = shared_labels(&labels("share", "y"));
        assert!(Arc::ptr_eq(&a, &b) && !Arc::ptr_eq(&a, &c));
        assert_eq!(*a, labels("share", "x"));
        // Dropped by every pod: the table lets it go at a sweep (one per doubling).
        let gone = Arc::downgrade(&c);
        drop(c);
        for i in 0..4096 {
            drop(shared_labels(&labels("sweep", &i.to_string())));
        }
        assert!(
            gone.upgrade().is_none(),
            "a set no pod holds stays in the table"
        );
        assert!(Arc::ptr_eq(&a, &shared_labels(&labels("share", "x"))));
    }
}
