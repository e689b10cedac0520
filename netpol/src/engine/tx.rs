//! One event's edits of the program, recorded as they are made so the kernel changes come
//! out without comparing whole programs: per touched set its net element delta (or, when
//! the set was replaced or removed, its state before), per touched chain its state before.
//! `finish` yields exactly what `diff::diff` of the programs before and after would.

use std::collections::{BTreeMap, BTreeSet};

use crate::diff::Changes;
use crate::program::{Chain, Elem, Program, Set};

enum SetLog {
    /// The set existed before and still does: elements added and removed since.
    Delta {
        add: BTreeSet<Elem>,
        del: BTreeSet<Elem>,
    },
    /// The set as it was before (`None`: it did not exist).
    Whole(Option<Set>),
}

pub(crate) struct Tx<'p> {
    pub prog: &'p mut Program,
    sets: BTreeMap<String, SetLog>,
    chains: BTreeMap<String, Option<Chain>>,
}

impl<'p> Tx<'p> {
    pub fn new(prog: &'p mut Program) -> Tx<'p> {
        Tx {
            prog,
            sets: BTreeMap::new(),
            chains: BTreeMap::new(),
        }
    }

    /// Adds an element to an existing set (none: a bug, ignored like the kernel would not).
    pub fn insert(&mut self, set: &str, e: Elem) {
        let Some(s) = self.prog.sets.get_mut(set) else {
            debug_assert!(false, "no set {set}");
            return;
        };
        if !s.elems.insert(e.clone()) {
            return;
        }
        if let SetLog::Delta { add, del } = delta(&mut self.sets, set)
            && !del.remove(&e)
        {
            add.insert(e);
        }
    }

    pub fn remove(&mut self, set: &str, e: &Elem) {
        let Some(s) = self.prog.sets.get_mut(set) else {
            return;
        };
        if !s.elems.remove(e) {
            return;
        }
        if let SetLog::Delta { add, del } = delta(&mut self.sets, set)
            && !add.remove(e)
        {
            del.insert(e.clone());
        }
    }

    /// Sets `name` to `set` (`None`: removes it, and where its elements came from).
    pub fn put_set(&mut self, name: &str, set: Option<Set>) {
        let old = match set {
            Some(s) => self.prog.sets.insert(name.to_string(), s),
            None => {
                self.prog.sources.remove(name);
                self.prog.sets.remove(name)
            }
        };
        match self.sets.get_mut(name) {
            None => {
                self.sets.insert(name.to_string(), SetLog::Whole(old));
            }
            Some(SetLog::Whole(_)) => {}
            Some(log @ SetLog::Delta { .. }) => {
                // The state before: the one replaced, with the delta undone.
                let SetLog::Delta { add, del } = std::mem::replace(log, SetLog::Whole(None)) else {
                    unreachable!()
                };
                let mut before = old.expect("a set with a delta exists");
                before.elems.retain(|e| !add.contains(e));
                before.elems.extend(del);
                *log = SetLog::Whole(Some(before));
            }
        }
    }

    /// Sets `name` to `chain` (`None`: removes it).
    pub fn put_chain(&mut self, name: &str, chain: Option<Chain>) {
        let old = match chain {
            Some(c) => self.prog.chains.insert(name.to_string(), c),
            None => self.prog.chains.remove(name),
        };
        self.chains.entry(name.to_string()).or_insert(old);
    }

    pub fn finish(self) -> Changes {
        let mut ch = Changes::default();
        for (name, log) in self.sets {
            let now = self.prog.sets.get(&name);
            let (before, now) = match (log, now) {
                (SetLog::Delta { add, del }, _) => {
                    ch.add_elems
                        .extend(add.into_iter().map(|e| (name.clone(), e)));
                    ch.del_elems
                        .extend(del.into_iter().map(|e| (name.clone(), e)));
                    continue;
                }
                (SetLog::Whole(before), now) => (before, now),
            };
            match (before, now) {
                (None, None) => {}
                (Some(_), None) => ch.del_sets.push(name),
                (before, Some(now)) => {
                    if before.is_none() {
                        ch.add_sets.push((name.clone(), now.kind));
                    }
                    let had = before.map(|b| b.elems).unwrap_or_default();
                    let added = now.elems.difference(&had).cloned();
                    ch.add_elems.extend(added.map(|e| (name.clone(), e)));
                    let removed = had.difference(&now.elems).cloned();
                    ch.del_elems.extend(removed.map(|e| (name.clone(), e)));
                }
            }
        }
        for (name, before) in self.chains {
            match (before, self.prog.chains.get(&name)) {
                (None, None) => {}
                (Some(_), None) => ch.del_chains.push(name),
                (before, Some(now)) => {
                    if before.as_ref().is_none_or(|b| b.rules != now.rules) {
                        ch.write_rules.push((name.clone(), now.rules.clone()));
                    }
                    if before.is_none() {
                        ch.add_chains.push((name, now.hook));
                    }
                }
            }
        }
        ch
    }
}

fn delta<'a>(logs: &'a mut BTreeMap<String, SetLog>, set: &str) -> &'a mut SetLog {
    if !logs.contains_key(set) {
        let log = SetLog::Delta {
            add: BTreeSet::new(),
            del: BTreeSet::new(),
        };
        logs.insert(set.to_string(), log);
    }
    logs.get_mut(set).expect("just inserted")
}
