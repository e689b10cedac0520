//! The difference between two programs, as the kernel is to be changed: sets and chains
//! added or removed, set elements added or removed, chains whose rules are rewritten.
//! Applied in one nf_tables transaction, in the field order below: objects are created
//! before anything refers to them and removed after nothing does.

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
