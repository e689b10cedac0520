//! The objects policy enforcement reads, normalized once: pods with parsed addresses and
//! named ports, namespaces with their effective labels, policies checked (refused ones
//! replaced by their deny-all stand-ins, the errors kept for logs and metrics).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::addr::Family;
use crate::model;
use crate::select::{Labels, namespace_labels};
use crate::validate::{Policy, PolicyError, Protocol, Rule};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pod {
    pub namespace: Arc<str>,
    pub name: String,
    /// Shared with every pod of the same labels ([`shared_labels`]).
    pub labels: Arc<Labels>,
    pub node: Arc<str>,
    /// Its traffic is the node's: never policed as a pod, never a selector's peer.
    pub host_network: bool,
    /// At most one per family, in the API's order.
    pub ips: Vec<IpAddr>,
    /// `(name, protocol, port)` of every named container port.
    pub named_ports: Arc<[NamedPort]>,
    /// `metadata.creationTimestamp` as sent (empty when absent: the oldest).
    pub created: Arc<str>,
}

/// The one copy of a value that pods share: a ReplicaSet's pods have the same labels and
/// ports, a namespace's pods its name, a node's pods the node's, so 150,000 pods hold a
/// few thousand label sets, not 150,000 (~700 bytes each). Policies share their rules
/// the same way. Values none holds any more are dropped when the table has doubled since
/// the last sweep.
struct Table<T: ?Sized> {
    values: Option<HashSet<Arc<T>>>,
    sweep_at: usize,
}

impl<T: ?Sized + Hash + Eq> Table<T> {
    const fn new() -> Table<T> {
        Table {
            values: None,
            sweep_at: 0,
        }
    }

    fn share(table: &Mutex<Table<T>>, value: &T, own: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let mut table = table.lock().unwrap_or_else(|p| p.into_inner());
        let Table { values, sweep_at } = &mut *table;
        let values = values.get_or_insert_with(HashSet::new);
        if let Some(one) = values.get(value) {
            return one.clone();
        }
        if values.len() >= *sweep_at {
            values.retain(|v| Arc::strong_count(v) > 1);
            *sweep_at = (2 * values.len()).max(1024);
        }
        let one = own();
        values.insert(one.clone());
        one
    }
}

/// The shared copy of a pod's `labels`.
pub fn shared_labels(labels: &Labels) -> Arc<Labels> {
    static LABELS: Mutex<Table<Labels>> = Mutex::new(Table::new());
    Table::share(&LABELS, labels, || Arc::new(labels.clone()))
}

/// The shared copy of a pod's namespace, node or creation time.
pub fn shared_str(text: &str) -> Arc<str> {
    static TEXTS: Mutex<Table<str>> = Mutex::new(Table::new());
    Table::share(&TEXTS, text, || Arc::from(text))
}

/// `(name, protocol, port)` of a container port.
pub type NamedPort = (String, Protocol, u16);

/// The shared copy of a pod's named ports.
pub fn shared_ports(ports: &[NamedPort]) -> Arc<[NamedPort]> {
    static PORTS: Mutex<Table<[NamedPort]>> = Mutex::new(Table::new());
    Table::share(&PORTS, ports, || Arc::from(ports))
}

/// The shared copy of a policy's rules of one direction: a policy made from one template
/// in many namespaces (a default deny, DNS allowed, the monitoring namespace let in)
/// has the same rules in each; 10,000 checked policies held ~29 MB, ~3 KB each.
pub fn shared_rules(rules: &[Rule]) -> Arc<[Rule]> {
    static RULES: Mutex<Table<[Rule]>> = Mutex::new(Table::new());
    Table::share(&RULES, rules, || Arc::from(rules))
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
        let named_ports: Vec<NamedPort> = p
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
            namespace: shared_str(&p.metadata.namespace),
            name: p.metadata.name.clone(),
            labels: shared_labels(&p.metadata.labels),
            node: shared_str(&p.spec.node_name),
            host_network: p.spec.host_network,
            ips,
            named_ports: shared_ports(&named_ports),
            created: shared_str(&p.metadata.creation_timestamp),
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
            .find(|p| &*p.namespace == namespace && p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(test: &str, v: &str) -> Labels {
        [(format!("shared-test-{test}"), v.to_string())]
            .into_iter()
            .collect()
    }

    fn pod(name: &str, app: &str) -> Pod {
        let object: model::Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": "shared-ns", "labels": { "app": app },
                          "creationTimestamp": "2026-12-01T00:00:00Z" },
            "spec": { "nodeName": "shared-node", "containers": [
                { "ports": [{ "name": "http", "containerPort": 80 }] }] },
            "status": { "podIPs": [{ "ip": "10.1.1.1" }] }
        }))
        .unwrap();
        Pod::from_object(&object)
    }

    #[test]
    fn pods_share_equal_labels_ports_and_names_and_unheld_copies_go() {
        let (a, b, c) = (pod("a", "web"), pod("b", "web"), pod("c", "db"));
        assert!(Arc::ptr_eq(&a.labels, &b.labels) && !Arc::ptr_eq(&a.labels, &c.labels));
        assert_eq!(a.labels["app"], "web");
        for (x, y) in [
            (&a.namespace, &c.namespace),
            (&a.node, &c.node),
            (&a.created, &c.created),
        ] {
            assert!(Arc::ptr_eq(x, y), "{x} not shared");
        }
        assert!(Arc::ptr_eq(&a.named_ports, &c.named_ports));
        assert_eq!(a.named_port("http", Protocol::Tcp), Some(80));
        // Dropped by every pod: the table lets it go at a sweep (one per doubling).
        let one = shared_labels(&labels("sweep", "kept"));
        let gone = Arc::downgrade(&shared_labels(&labels("sweep", "dropped")));
        for i in 0..4096 {
            drop(shared_labels(&labels("sweep", &i.to_string())));
        }
        assert!(
            gone.upgrade().is_none(),
            "a set no pod holds stays in the table"
        );
        assert!(Arc::ptr_eq(&one, &shared_labels(&labels("sweep", "kept"))));
    }

    #[test]
    fn policies_of_one_template_share_their_rules() {
        let policy = |ns: &str, port: u16| {
            let np: model::NetworkPolicy = serde_json::from_value(serde_json::json!({
                "metadata": { "namespace": ns, "name": "allow" },
                "spec": { "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                    "ingress": [{ "from": [{ "podSelector": { "matchLabels": { "shared-test": "rules" } } }],
                                  "ports": [{ "port": port }] }] }
            }))
            .unwrap();
            Policy::from_object(&np).unwrap()
        };
        let (x, y, other) = (policy("x", 80), policy("y", 80), policy("x", 81));
        let ingress = |p: &Policy| p.ingress.clone().unwrap();
        assert!(Arc::ptr_eq(&ingress(&x), &ingress(&y)));
        assert!(!Arc::ptr_eq(&ingress(&x), &ingress(&other)));
        assert_eq!(ingress(&other)[0].ports.as_ref().unwrap().len(), 1);
        assert!(Arc::ptr_eq(
            &x.egress.clone().unwrap(),
            &y.egress.clone().unwrap()
        ));
    }
}
