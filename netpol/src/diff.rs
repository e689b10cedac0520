//! The difference between two programs, as the kernel is to be changed: sets and chains
//! added or removed, set elements added or removed, chains whose rules are rewritten.
//! Applied in one nf_tables transaction, in the field order below: objects are created
//! before anything refers to them and removed after nothing does.

use std::collections::{BTreeMap, BTreeSet};

use crate::program::{Chain, Elem, Hook, Program, Rule, Set, SetKind};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub add_sets: Vec<(String, SetKind)>,
    /// Created empty; their rules follow in `write_rules`.
    pub add_chains: Vec<(String, Option<Hook>)>,
    pub add_elems: Vec<(String, Elem)>,
    /// Chains (new or changed) whose rules become these: flush, then add.
    pub write_rules: Vec<(String, Vec<Rule>)>,
    /// Elements of sets that stay (a removed set goes with its elements).
    pub del_elems: Vec<(String, Elem)>,
    pub del_chains: Vec<String>,
    pub del_sets: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

impl Changes {
    /// Splits off the elements of the new allow-list sets (`SetKind::only_allows`) of
    /// more than `large` elements, to follow in a transaction of their own: this part
    /// creates those sets empty and writes the rules naming them, so between the two the
    /// node allows less than the policies, never more. A node's first pod selected by a
    /// policy whose peers are whole namespaces is isolated at once, not after the kernel
    /// took tens of thousands of its peers' addresses (~3 µs each). `None`: nothing to split.
    pub fn split_large_allows(&mut self, large: usize) -> Option<Changes> {
        let mut counts: BTreeMap<&str, usize> = self
            .add_sets
            .iter()
            .filter(|(_, kind)| kind.only_allows())
            .map(|(name, _)| (name.as_str(), 0))
            .collect();
        for (name, _) in &self.add_elems {
            if let Some(n) = counts.get_mut(name.as_str()) {
                *n += 1;
            }
        }
        let later: BTreeSet<String> = counts
            .into_iter()
            .filter(|&(_, n)| n > large)
            .map(|(name, _)| name.to_string())
            .collect();
        if later.is_empty() {
            return None;
        }
        let (wait, now) = std::mem::take(&mut self.add_elems)
            .into_iter()
            .partition(|(name, _)| later.contains(name));
        self.add_elems = now;
        Some(Changes {
            add_elems: wait,
            ..Changes::default()
        })
    }
}

/// What turns `old` into `new`. Set and chain names carry their kind and hook (they are
/// derived from identity and purpose), so a name kept is an object kept.
pub fn diff(old: &Program, new: &Program) -> Changes {
    let mut ch = Changes::default();
    for (name, set) in &new.sets {
        let before = old.sets.get(name);
        debug_assert!(
            before.is_none_or(|b| b.kind == set.kind),
            "set {name} changed kind"
        );
        if before.is_none() {
            ch.add_sets.push((name.clone(), set.kind));
        }
        let had = before.map(|b| &b.elems);
        for e in &set.elems {
            if !had.is_some_and(|h| h.contains(e)) {
                ch.add_elems.push((name.clone(), e.clone()));
            }
        }
        for e in had.into_iter().flatten().filter(|e| !set.elems.contains(e)) {
            ch.del_elems.push((name.clone(), e.clone()));
        }
    }
    for (name, chain) in &new.chains {
        let before = old.chains.get(name);
        debug_assert!(
            before.is_none_or(|b| b.hook == chain.hook),
            "chain {name} changed hook"
        );
        if before.is_none() {
            ch.add_chains.push((name.clone(), chain.hook));
        }
        if before.is_none_or(|b| b.rules != chain.rules) {
            ch.write_rules.push((name.clone(), chain.rules.clone()));
        }
    }
    ch.del_chains = old
        .chains
        .keys()
        .filter(|n| !new.chains.contains_key(*n))
        .cloned()
        .collect();
    ch.del_sets = old
        .sets
        .keys()
        .filter(|n| !new.sets.contains_key(*n))
        .cloned()
        .collect();
    ch
}

/// `changes` applied to `prog`, the way the kernel applies the transaction (the fake of
/// the later kernel session does the same).
pub fn apply(prog: &mut Program, changes: &Changes) {
    for (name, kind) in &changes.add_sets {
        prog.sets.insert(
            name.clone(),
            Set {
                kind: *kind,
                elems: Default::default(),
            },
        );
    }
    for (name, hook) in &changes.add_chains {
        prog.chains.insert(
            name.clone(),
            Chain {
                hook: *hook,
                rules: vec![],
            },
        );
    }
    for (name, e) in &changes.add_elems {
        if let Some(s) = prog.sets.get_mut(name) {
            s.elems.insert(e.clone());
        }
    }
    for (name, rules) in &changes.write_rules {
        if let Some(c) = prog.chains.get_mut(name) {
            c.rules = rules.clone();
        }
    }
    for (name, e) in &changes.del_elems {
        if let Some(s) = prog.sets.get_mut(name) {
            s.elems.remove(e);
        }
    }
    for name in &changes.del_chains {
        prog.chains.remove(name);
    }
    for name in &changes.del_sets {
        prog.sets.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Family;

    fn set(kind: SetKind, n: u8) -> Set {
        let elems = (0..n)
            .map(|i| {
                let ip = std::net::Ipv4Addr::new(10, 0, 0, i).into();
                match kind {
                    SetKind::Dispatch(_) => Elem::Jump(ip, "sel".into()),
                    _ => Elem::Addr(ip),
                }
            })
            .collect();
        Set { kind, elems }
    }

    #[test]
    fn only_large_new_allow_lists_wait_and_the_two_parts_make_the_whole() {
        let addrs = SetKind::Addrs(Family::V4);
        let mut old = Program::default();
        old.sets.insert("kept".into(), set(addrs, 1));
        let mut new = old.clone();
        new.sets.insert("kept".into(), set(addrs, 9));
        new.sets.insert("peers".into(), set(addrs, 9));
        new.sets.insert("few".into(), set(addrs, 3));
        new.sets
            .insert("dispatch".into(), set(SetKind::Dispatch(Family::V4), 9));
        let mut first = diff(&old, &new);
        let later = first.split_large_allows(3).expect("a large new allow list");
        let names: BTreeSet<&str> = later.add_elems.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, BTreeSet::from(["peers"]));
        assert_eq!(later.add_elems.len(), 9);
        let mut held = old.clone();
        apply(&mut held, &first);
        assert!(held.sets["peers"].elems.is_empty(), "created empty");
        assert_eq!(
            held.sets["dispatch"], new.sets["dispatch"],
            "isolation never waits"
        );
        assert_eq!(held.sets["few"], new.sets["few"]);
        apply(&mut held, &later);
        assert_eq!(held, new);
        assert_eq!(first.split_large_allows(3), None, "nothing left to split");
    }
}
