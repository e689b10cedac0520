//! Pod ids by namespace and name, without a second copy of the names: the index holds a
//! 64-bit hash of the pair, the pod entry the names it is checked against. A pair whose
//! hash another pair holds already (a chance of 6 in 10^10 at 150,000 pods) is kept by
//! its names beside. At 150,000 pods a map keyed by both Strings was ~23 MB; this ~4 MB.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

pub(crate) struct Names {
    by_hash: HashMap<u64, u32>,
    collided: HashMap<(String, String), u32>,
    hash: fn(&str, &str) -> u64,
}

impl Default for Names {
    fn default() -> Names {
        Names::with_hash(pair_hash)
    }
}

fn pair_hash(ns: &str, name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (ns, name).hash(&mut h);
    h.finish()
}

impl Names {
    fn with_hash(hash: fn(&str, &str) -> u64) -> Names {
        Names {
            by_hash: HashMap::new(),
            collided: HashMap::new(),
            hash,
        }
    }

    pub fn reserve(&mut self, n: usize) {
        self.by_hash.reserve(n);
    }

    /// The id of `(ns, name)`; `names_of` gives a live id's pair.
    pub fn get<'a>(
        &self,
        ns: &str,
        name: &str,
        names_of: impl Fn(u32) -> (&'a str, &'a str),
    ) -> Option<u32> {
        match self.by_hash.get(&(self.hash)(ns, name)) {
            Some(&id) if names_of(id) == (ns, name) => Some(id),
            _ if self.collided.is_empty() => None,
            _ => self
                .collided
                .get(&(ns.to_string(), name.to_string()))
                .copied(),
        }
    }

    /// Records a pair that has no id yet.
    pub fn insert(&mut self, ns: &str, name: &str, id: u32) {
        let h = (self.hash)(ns, name);
        if let std::collections::hash_map::Entry::Vacant(v) = self.by_hash.entry(h) {
            v.insert(id);
        } else {
            self.collided.insert((ns.to_string(), name.to_string()), id);
        }
    }

    /// Forgets the pair of `id`.
    pub fn remove(&mut self, ns: &str, name: &str, id: u32) {
        let h = (self.hash)(ns, name);
        if self.by_hash.get(&h) == Some(&id) {
            self.by_hash.remove(&h);
        } else {
            self.collided.remove(&(ns.to_string(), name.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_sharing_a_hash_are_told_apart_by_their_names() {
        // Every pair hashes alike: the first by hash, the others by name.
        let mut n = Names::with_hash(|_, _| 7);
        let pairs = [("a", "p"), ("a", "q"), ("b", "p")];
        let names_of = |id: u32| pairs[id as usize];
        for (id, (ns, name)) in pairs.iter().enumerate() {
            assert_eq!(n.get(ns, name, names_of), None);
            n.insert(ns, name, id as u32);
        }
        for (id, (ns, name)) in pairs.iter().enumerate() {
            assert_eq!(n.get(ns, name, names_of), Some(id as u32));
        }
        assert_eq!(n.get("c", "p", names_of), None);
        // The one held by hash goes: the others are still found, and it is not.
        n.remove("a", "p", 0);
        assert_eq!(n.get("a", "p", names_of), None);
        assert_eq!(n.get("a", "q", names_of), Some(1));
        assert_eq!(n.get("b", "p", names_of), Some(2));
        n.remove("b", "p", 2);
        assert_eq!(n.get("b", "p", names_of), None);
        assert_eq!(n.get("a", "q", names_of), Some(1));
    }

    #[test]
    fn distinct_pairs_are_found_by_hash_alone() {
        let mut n = Names::default();
        let pairs: Vec<(String, String)> = (0..1000)
            .map(|i| (format!("ns{}", i % 7), format!("pod{i}")))
            .collect();
        let names_of = |id: u32| {
            let (a, b) = &pairs[id as usize];
            (a.as_str(), b.as_str())
        };
        for (id, (ns, name)) in pairs.iter().enumerate() {
            n.insert(ns, name, id as u32);
        }
        assert!(n.collided.is_empty());
        for (id, (ns, name)) in pairs.iter().enumerate() {
            assert_eq!(n.get(ns, name, names_of), Some(id as u32));
        }
    }
}
