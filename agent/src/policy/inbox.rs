//! Where the Pod, Namespace and NetworkPolicy watches leave what they read for the
//! enforcement loop: per object, only its latest state (a burst of events for one pod is
//! one change), unchanged objects dropped (a Pod's status heartbeat changes nothing
//! NetworkPolicy reads), and whether each kind has been listed once. The objects
//! themselves live in the engine, not here: the inbox keeps a key and a fingerprint per
//! object, to tell a re-list's deletions and unchanged objects. The first pod list goes to
//! the loop as it is read (`Stream`): the engine indexes its pods while the rest is parsed.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hostnet::node::NodeNetError;
use netpol::cluster::Pod;
use netpol::conntrack::CtEntry;
use netpol::model::Namespace;
use netpol::validate::Checked;

use crate::kube::collection::{Namespaces, NetworkPolicies, Pods, WatchEvent};
use crate::kube::watcher::Cache;

/// Far beyond Kubernetes' tested 150,000 pods; more is refused (and re-listed after a
/// backoff) rather than grown without bound.
pub const MAX_PODS: usize = 1_000_000;
pub const MAX_NAMESPACES: usize = 100_000;
pub const MAX_POLICIES: usize = 100_000;
/// The first pod list's pods go to the loop in batches of this many as they are read.
const STREAM_BATCH: usize = 4096;

/// `namespace/name` (a Namespace: its name).
pub type Key = String;

/// One kind's changes since the loop last took them.
pub struct Kind<T> {
    /// Fingerprints of every object the API holds, as last seen.
    known: HashMap<Key, u64>,
    /// Per changed object: its new state, or None: deleted.
    pub pending: HashMap<Key, Option<T>>,
    pub listed: bool,
    /// An object the API already had changed (not only added or deleted) since the loop
    /// last took: a change that may deny what was allowed.
    updated: bool,
    max: usize,
}

impl<T: Fingerprint> Kind<T> {
    fn new(max: usize) -> Kind<T> {
        Kind {
            known: HashMap::new(),
            pending: HashMap::new(),
            listed: false,
            updated: false,
            max,
        }
    }

    /// A full list: every object not in it is deleted, every changed one pending.
    fn replace(
        &mut self,
        items: impl ExactSizeIterator<Item = (Key, T)>,
        what: &str,
    ) -> Result<bool, String> {
        if items.len() > self.max {
            return Err(format!("the {what} list has more than {} items", self.max));
        }
        let mut changed = !self.listed;
        if !self.listed {
            // All of the first list is pending: no growth by doubling (150,000 pods).
            self.pending.reserve(items.len());
        }
        let mut now = HashMap::with_capacity(items.len());
        for (key, object) in items {
            let print = object.fingerprint();
            if self.known.get(&key) != Some(&print) {
                self.updated |= self.known.contains_key(&key);
                self.pending.insert(key.clone(), Some(object));
                changed = true;
            }
            now.insert(key, print);
        }
        for gone in self.known.keys().filter(|k| !now.contains_key(*k)) {
            self.pending.insert(gone.clone(), None);
            changed = true;
        }
        self.known = now;
        self.listed = true;
        Ok(changed)
    }

    fn applied(&mut self, key: Key, object: T, what: &str) -> Result<bool, String> {
        let print = object.fingerprint();
        if self.known.get(&key) == Some(&print) {
            return Ok(false);
        }
        if !self.known.contains_key(&key) && self.known.len() >= self.max {
            return Err(format!("more than {} {what}s", self.max));
        }
        self.updated |= self.known.insert(key.clone(), print).is_some();
        self.pending.insert(key, Some(object));
        Ok(true)
    }

    /// The first list, its objects taken as they were read (`Stream`): their fingerprints.
    fn streamed(&mut self, known: HashMap<Key, u64>) -> bool {
        self.known = known;
        self.listed = true;
        true
    }

    fn deleted(&mut self, key: Key) -> bool {
        if self.known.remove(&key).is_none() {
            return false;
        }
        self.pending.insert(key, None);
        true
    }

    fn count(&self) -> usize {
        self.known.len()
    }
}

/// The first pod list while it is read: its pods go to the loop as they come (the engine
/// indexes them while the rest is parsed), not into `pending` once the list is whole.
#[derive(Default)]
struct Stream {
    /// Read, not taken yet.
    pods: Vec<Pod>,
    /// The fingerprint of every pod read so far: the list's `known` once it is whole.
    known: HashMap<Key, u64>,
    /// Failed lists so far: what the loop took of an earlier one is void.
    epoch: u64,
}

/// What changed, taken at once by the loop.
pub struct Changes {
    /// Boxed: the first list's 150,000 pending pods in a map's slots of their own size
    /// were a 40 MB table held whole until the engine had taken the last of them.
    pub pods: Kind<Box<Pod>>,
    pub namespaces: Kind<Namespace>,
    pub policies: Kind<Checked>,
    stream: Stream,
    /// When the oldest change not yet taken arrived (the API-to-kernel latency's start).
    pub since: Option<Instant>,
    /// Something changed since the loop last took (a first list, even an empty one).
    dirty: bool,
    /// Someone else changed our table in the kernel: compare it with the program.
    recheck: bool,
    conntrack: Option<Result<Vec<CtEntry>, NodeNetError>>,
}

impl Changes {
    /// Every kind has been listed once: the cluster is known.
    pub fn synced(&self) -> bool {
        self.pods.listed && self.namespaces.listed && self.policies.listed
    }

    fn empty() -> Changes {
        Changes {
            pods: Kind::new(MAX_PODS),
            namespaces: Kind::new(MAX_NAMESPACES),
            policies: Kind::new(MAX_POLICIES),
            stream: Stream::default(),
            since: None,
            dirty: false,
            recheck: false,
            conntrack: None,
        }
    }
}

pub struct Inbox {
    state: Mutex<Changes>,
    changed: Condvar,
}

impl Default for Inbox {
    fn default() -> Inbox {
        Inbox {
            state: Mutex::new(Changes::empty()),
            changed: Condvar::new(),
        }
    }
}

/// What [`Inbox::take`] hands out: the pending changes (the fingerprints stay behind).
pub struct Batch {
    pub pods: HashMap<Key, Option<Box<Pod>>>,
    pub namespaces: HashMap<Key, Option<Namespace>>,
    pub policies: HashMap<Key, Option<Checked>>,
    pub synced: bool,
    pub since: Option<Instant>,
    /// The kernel told of someone else's change to our table.
    pub recheck: bool,
    /// A pod the API already had changed: what it was allowed may now be denied.
    pub pods_updated: bool,
    /// Objects the API holds, per kind (pods, namespaces, policies).
    pub counts: (usize, usize, usize),
    /// A conntrack dump the loop asked for (`dumps`), to be judged.
    pub conntrack: Option<Result<Vec<CtEntry>, NodeNetError>>,
    /// Pods of the first pod list, read since the last take (before `synced` too), and the
    /// list they belong to: a new `stream_epoch` voids the pods taken before.
    pub streamed: Vec<Pod>,
    pub stream_epoch: u64,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty() && self.namespaces.is_empty() && self.policies.is_empty()
    }
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Changes> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits up to `timeout` for changes; takes whatever is pending (maybe nothing), once
    /// every kind has been listed.
    pub fn take(&self, timeout: Duration) -> Batch {
        let end = Instant::now() + timeout;
        let mut s = self.lock();
        while !s.dirty {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        s.dirty = false;
        let streamed = std::mem::take(&mut s.stream.pods);
        let stream_epoch = s.stream.epoch;
        if !s.synced() {
            // Kept until every kind is listed: the first programming sees them all.
            return Batch {
                pods: HashMap::new(),
                namespaces: HashMap::new(),
                policies: HashMap::new(),
                synced: false,
                since: None,
                recheck: false,
                pods_updated: false,
                counts: (s.pods.count(), s.namespaces.count(), s.policies.count()),
                conntrack: None,
                streamed,
                stream_epoch,
            };
        }
        Batch {
            pods: std::mem::take(&mut s.pods.pending),
            namespaces: std::mem::take(&mut s.namespaces.pending),
            policies: std::mem::take(&mut s.policies.pending),
            synced: s.synced(),
            since: s.since.take(),
            recheck: std::mem::take(&mut s.recheck),
            pods_updated: std::mem::take(&mut s.pods.updated),
            counts: (s.pods.count(), s.namespaces.count(), s.policies.count()),
            conntrack: s.conntrack.take(),
            streamed,
            stream_epoch,
        }
    }

    /// A conntrack dump made (a newer one replaces one not taken yet).
    pub fn conntrack_dumped(&self, entries: Result<Vec<CtEntry>, NodeNetError>) {
        let mut s = self.lock();
        s.conntrack = Some(entries);
        s.dirty = true;
        self.changed.notify_all();
    }

    /// The kernel's notification that someone else changed our table (or that
    /// notifications were lost): the loop compares the table with the program at once.
    pub fn kernel_changed(&self) {
        let mut s = self.lock();
        s.recheck = true;
        s.dirty = true;
        self.changed.notify_all();
    }

    /// Runs `f` on the state and wakes the loop if it says something changed.
    fn update(&self, f: impl FnOnce(&mut Changes) -> Result<bool, String>) -> Result<(), String> {
        let mut s = self.lock();
        let changed = f(&mut s)?;
        if changed {
            s.dirty = true;
            s.since.get_or_insert_with(Instant::now);
            self.changed.notify_all();
        }
        Ok(())
    }
}

/// What tells two states of an object apart, kept instead of the object.
pub trait Fingerprint {
    fn fingerprint(&self) -> u64;
}

/// Hashed field by field: its `Debug` text was a sixth of the first programming at
/// 150,000 pods (a string of ~600 bytes made and dropped per pod).
impl Fingerprint for Pod {
    fn fingerprint(&self) -> u64 {
        hash_of(self)
    }
}

impl<T: Fingerprint> Fingerprint for Box<T> {
    fn fingerprint(&self) -> u64 {
        (**self).fingerprint()
    }
}

/// Namespaces and checked policies (thousands, not 150,000): their `Debug` text, as
/// their types derive no `Hash`.
impl Fingerprint for Namespace {
    fn fingerprint(&self) -> u64 {
        hash_of(&format!("{self:?}"))
    }
}

impl Fingerprint for Checked {
    fn fingerprint(&self) -> u64 {
        hash_of(&format!("{self:?}"))
    }
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn namespaced(namespace: &str, name: &str) -> Key {
    format!("{namespace}/{name}")
}

impl Cache<Pods> for Inbox {
    fn replace(&self, items: Vec<Pod>) -> Result<(), String> {
        // Keyed as they go in: no second list of 150,000 pods beside the first.
        let items = items
            .into_iter()
            .map(|p| (namespaced(&p.namespace, &p.name), Box::new(p)));
        self.update(|s| {
            // The first list, read into the stream (nothing came back as `items`).
            if !s.stream.known.is_empty() {
                return Ok(s.pods.streamed(std::mem::take(&mut s.stream.known)));
            }
            s.pods.replace(items, "pod")
        })
    }

    /// The first list's pods go to the loop as they are read; a re-list's come back (it is
    /// compared with what is known once whole).
    fn listed(&self, pod: Pod) -> Result<Option<Pod>, String> {
        let mut s = self.lock();
        if s.pods.listed {
            return Ok(Some(pod));
        }
        let key = namespaced(&pod.namespace, &pod.name);
        let max = s.pods.max;
        let stream = &mut s.stream;
        if !stream.known.contains_key(&key) && stream.known.len() >= max {
            return Err(format!("the pod list has more than {max} items"));
        }
        let print = pod.fingerprint();
        stream.known.insert(key, print);
        stream.pods.push(pod);
        if stream.pods.len() >= STREAM_BATCH {
            s.dirty = true;
            self.changed.notify_all();
        }
        Ok(None)
    }

    fn list_failed(&self) {
        let mut s = self.lock();
        let stream = &mut s.stream;
        if stream.known.is_empty() {
            return;
        }
        stream.known.clear();
        stream.pods.clear();
        stream.epoch += 1;
        s.dirty = true;
        self.changed.notify_all();
    }

    fn apply(&self, event: WatchEvent<Pod>) -> Result<(), String> {
        self.update(|s| match event {
            WatchEvent::Applied(p, _) => {
                let key = namespaced(&p.namespace, &p.name);
                s.pods.applied(key, Box::new(p), "pod")
            }
            WatchEvent::Deleted(p, _) => Ok(s.pods.deleted(namespaced(&p.namespace, &p.name))),
            WatchEvent::Bookmark(_) | WatchEvent::Error { .. } => Ok(false),
        })
    }
}

impl Cache<Namespaces> for Inbox {
    fn replace(&self, items: Vec<Namespace>) -> Result<(), String> {
        let items = items.into_iter().map(|n| (n.metadata.name.clone(), n));
        self.update(|s| s.namespaces.replace(items, "namespace"))
    }

    fn apply(&self, event: WatchEvent<Namespace>) -> Result<(), String> {
        self.update(|s| match event {
            WatchEvent::Applied(n, _) => {
                let key = n.metadata.name.clone();
                s.namespaces.applied(key, n, "namespace")
            }
            WatchEvent::Deleted(n, _) => Ok(s.namespaces.deleted(n.metadata.name)),
            WatchEvent::Bookmark(_) | WatchEvent::Error { .. } => Ok(false),
        })
    }
}

/// A checked policy's key (a refused one's stand-in has its namespace and name).
fn policy_key(checked: &Checked) -> Key {
    let p = match checked {
        Ok(p) => p,
        Err(refused) => &refused.stand_in,
    };
    namespaced(&p.namespace, &p.name)
}

impl Cache<NetworkPolicies> for Inbox {
    fn replace(&self, items: Vec<Checked>) -> Result<(), String> {
        let items = items.into_iter().map(|p| (policy_key(&p), p));
        self.update(|s| s.policies.replace(items, "networkpolicy"))
    }

    fn apply(&self, event: WatchEvent<Checked>) -> Result<(), String> {
        self.update(|s| match event {
            WatchEvent::Applied(p, _) => s.policies.applied(policy_key(&p), p, "networkpolicy"),
            WatchEvent::Deleted(p, _) => Ok(s.policies.deleted(policy_key(&p))),
            WatchEvent::Bookmark(_) | WatchEvent::Error { .. } => Ok(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, label: &str) -> Pod {
        let object: netpol::model::Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": "x", "labels": { "pod": label } },
            "spec": { "nodeName": "n1" },
            "status": { "podIPs": [{ "ip": "10.1.1.1" }] }
        }))
        .unwrap();
        Pod::from_object(&object)
    }

    fn list_all(inbox: &Inbox, pods: Vec<Pod>) {
        Cache::<Pods>::replace(inbox, pods).unwrap();
        Cache::<Namespaces>::replace(inbox, vec![]).unwrap();
        Cache::<NetworkPolicies>::replace(inbox, vec![]).unwrap();
    }

    #[test]
    fn nothing_is_handed_out_before_every_kind_is_listed() {
        let inbox = Inbox::default();
        Cache::<Pods>::replace(&inbox, vec![pod("a", "a")]).unwrap();
        let batch = inbox.take(Duration::ZERO);
        assert!(!batch.synced && batch.is_empty());
        Cache::<Namespaces>::replace(&inbox, vec![]).unwrap();
        Cache::<NetworkPolicies>::replace(&inbox, vec![]).unwrap();
        let batch = inbox.take(Duration::ZERO);
        assert!(batch.synced);
        assert_eq!(batch.pods.len(), 1, "the pod listed first was kept");
    }

    #[test]
    fn events_coalesce_per_object_and_unchanged_objects_are_dropped() {
        let inbox = Inbox::default();
        list_all(&inbox, vec![pod("a", "a")]);
        let _ = inbox.take(Duration::ZERO);
        // A status heartbeat: nothing NetworkPolicy reads changed.
        Cache::<Pods>::apply(&inbox, WatchEvent::Applied(pod("a", "a"), "2".into())).unwrap();
        assert!(inbox.take(Duration::ZERO).is_empty());
        for label in ["b", "c", "d"] {
            Cache::<Pods>::apply(&inbox, WatchEvent::Applied(pod("a", label), "3".into())).unwrap();
        }
        let batch = inbox.take(Duration::ZERO);
        assert_eq!(batch.pods.len(), 1);
        assert_eq!(batch.pods["x/a"].as_ref().unwrap().labels["pod"], "d");
        assert!(batch.since.is_some());
    }

    #[test]
    fn the_first_pod_list_goes_out_as_it_is_read_and_a_failed_one_is_void() {
        let inbox = Inbox::default();
        let listed = |p| Cache::<Pods>::listed(&inbox, p).unwrap();
        assert!(listed(pod("a", "a")).is_none());
        // Not synced yet: the pods read so far go out, nothing else.
        let batch = inbox.take(Duration::ZERO);
        assert!(!batch.synced && batch.is_empty());
        assert_eq!((batch.streamed.len(), batch.stream_epoch), (1, 0));
        Cache::<Pods>::list_failed(&inbox);
        assert!(listed(pod("b", "b")).is_none());
        Cache::<Pods>::replace(&inbox, vec![]).unwrap();
        Cache::<Namespaces>::replace(&inbox, vec![]).unwrap();
        Cache::<NetworkPolicies>::replace(&inbox, vec![]).unwrap();
        let batch = inbox.take(Duration::ZERO);
        assert!(batch.synced && batch.pods.is_empty());
        let names: Vec<_> = batch.streamed.iter().map(|p| p.name.as_str()).collect();
        assert_eq!((names, batch.stream_epoch), (vec!["b"], 1));
        assert_eq!(batch.counts.0, 1, "a, of the failed list, is not known");
        // A re-list comes back whole and is compared with what the stream left known.
        assert!(listed(pod("b", "b")).is_some());
        Cache::<Pods>::replace(&inbox, vec![pod("b", "b")]).unwrap();
        let batch = inbox.take(Duration::ZERO);
        assert!(batch.is_empty() && batch.streamed.is_empty());
    }

    #[test]
    fn a_relist_deletes_what_is_gone_and_passes_only_what_changed() {
        let inbox = Inbox::default();
        list_all(&inbox, vec![pod("a", "a"), pod("b", "b")]);
        let _ = inbox.take(Duration::ZERO);
        Cache::<Pods>::replace(&inbox, vec![pod("a", "a"), pod("c", "c")]).unwrap();
        let batch = inbox.take(Duration::ZERO);
        let mut keys: Vec<_> = batch
            .pods
            .iter()
            .map(|(k, v)| (k.clone(), v.is_some()))
            .collect();
        keys.sort();
        assert_eq!(keys, [("x/b".into(), false), ("x/c".into(), true)]);
        assert_eq!(batch.counts.0, 2);
    }
}
