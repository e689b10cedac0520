//! The pods of this node and what policing them takes: per pod and direction the list of
//! policies selecting it (its selection chain, shared by pods with the same list, and
//! its dispatch elements), per policy and direction the local pods it selects (its
//! targets: a policy's chain and sets exist while it has one).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::ops::Bound;
use std::sync::Arc;

use super::tx::Tx;
use super::{Key, State};
use crate::addr::Family;
use crate::build::{self, Fill};
use crate::cluster::Pod;
use crate::compile::{policy_chain, selects, tag};
use crate::members::named_ports;
use crate::program::{Chain, Elem, Match, Program, dispatch_map, short_id};
use crate::selection::{self, Selection};
use crate::validate::{Direction, Policy};

const DIRS: [Direction; 2] = [Direction::Ingress, Direction::Egress];

fn d(dir: Direction) -> usize {
    match dir {
        Direction::Ingress => 0,
        Direction::Egress => 1,
    }
}

/// A local pod as policed now.
#[derive(PartialEq, Eq)]
struct Policed {
    ips: Vec<IpAddr>,
    /// Per direction: the policies selecting it, in `compile`'s order, and their
    /// selection chain (`None`: not isolated that way).
    sel: [(Vec<Key>, Option<String>); 2],
}

struct SelChain {
    keys: Vec<Key>,
    users: usize,
}

#[derive(Default)]
pub(crate) struct Local {
    pods: HashMap<u32, Policed>,
    by_ns: HashMap<Arc<str>, BTreeSet<u32>>,
    targets: BTreeMap<(Key, Direction), BTreeSet<u32>>,
    /// The policies whose chain and sets are in the program.
    active: BTreeSet<(Key, Direction)>,
    chains: HashMap<String, SelChain>,
    /// Shared peer sets a removed policy chain referred to: removed at the end of the
    /// event if no chain refers to them then (a policy rewritten keeps its sets).
    orphans: BTreeSet<String>,
}

impl Local {
    pub fn in_namespace(&self, ns: &str) -> Vec<u32> {
        self.by_ns.get(ns).into_iter().flatten().copied().collect()
    }

    /// Pod `id` is now `now` (`None`: gone or not this node's). Records in `dirty` the
    /// policies whose targets or whose targets' named ports may have changed.
    pub fn refresh(
        &mut self,
        st: &State,
        tx: &mut Tx,
        id: u32,
        now: Option<&Pod>,
        dirty: &mut BTreeSet<(Key, Direction)>,
    ) {
        let new = now
            .filter(|p| p.policed() && !p.ips.is_empty())
            .map(|p| policed(st, p));
        let old = self.pods.remove(&id);
        if let Some(ns) = now.map(|p| &p.namespace) {
            let set = self.by_ns.entry(ns.clone()).or_default();
            if new.is_some() {
                set.insert(id);
            } else {
                set.remove(&id);
            }
        }
        if new.is_none() {
            self.by_ns.retain(|_, s| {
                s.remove(&id);
                !s.is_empty()
            });
        }
        for dir in DIRS {
            let none = (Vec::new(), None);
            let (ok, oc) = old.as_ref().map_or(&none, |o| &o.sel[d(dir)]);
            let (nk, nc) = new.as_ref().map_or(&none, |n| &n.sel[d(dir)]);
            let oips = old.as_ref().map_or(&[][..], |o| &o.ips[..]);
            let nips = new.as_ref().map_or(&[][..], |n| &n.ips[..]);
            if (oips, oc) != (nips, nc) {
                for (ip, c) in oc.iter().flat_map(|c| oips.iter().map(move |ip| (ip, c))) {
                    tx.remove(&map(dir, *ip), &Elem::Jump(*ip, c.clone()));
                }
                if let Some(c) = nc {
                    self.acquire(st, tx, dir, c, nk);
                    for ip in nips {
                        tx.insert(&map(dir, *ip), Elem::Jump(*ip, c.clone()));
                    }
                }
                if let Some(c) = oc {
                    self.release(tx, c);
                }
            }
            for k in ok {
                self.untarget(k, dir, id);
                dirty.insert((k.clone(), dir));
            }
            for k in nk {
                let t = self.targets.entry((k.clone(), dir)).or_default();
                t.insert(id);
                dirty.insert((k.clone(), dir));
            }
        }
        if let Some(n) = new {
            self.pods.insert(id, n);
        }
    }

    fn untarget(&mut self, k: &Key, dir: Direction, id: u32) {
        let gone = self.targets.get_mut(&(k.clone(), dir)).is_some_and(|t| {
            t.remove(&id);
            t.is_empty()
        });
        if gone {
            self.targets.remove(&(k.clone(), dir));
        }
    }

    fn acquire(&mut self, st: &State, tx: &mut Tx, dir: Direction, chain: &str, keys: &[Key]) {
        let sc = self.chains.entry(chain.to_string()).or_insert(SelChain {
            keys: keys.to_vec(),
            users: 0,
        });
        sc.users += 1;
        if sc.users == 1 {
            let sel = selection::objects(chain, &pols(st, keys), dir);
            put_selection(tx, chain, sel);
        }
    }

    fn release(&mut self, tx: &mut Tx, chain: &str) {
        let Some(sc) = self.chains.get_mut(chain) else {
            return;
        };
        sc.users -= 1;
        if sc.users == 0 {
            self.chains.remove(chain);
            put_selection(tx, chain, Selection::default());
        }
    }

    /// A policy changed: the selection chains listing it get its new rules' jumps.
    pub fn rewrite_chains_of(&self, st: &State, tx: &mut Tx, key: &Key) {
        for (name, sc) in &self.chains {
            if sc.keys.contains(key) {
                let dir = if name.ends_with("-eg") {
                    Direction::Egress
                } else {
                    Direction::Ingress
                };
                let sel = selection::objects(name, &pols(st, &sc.keys), dir);
                put_selection(tx, name, sel);
            }
        }
    }

    /// Brings the policies in `dirty` in line with their targets: built when they get
    /// their first, removed with their last, ingress named ports refilled otherwise.
    pub fn settle(
        &mut self,
        st: &State,
        tx: &mut Tx,
        dirty: BTreeSet<(Key, Direction)>,
        fill: &mut Fill,
    ) {
        for (key, dir) in dirty {
            let targets: Vec<&Pod> = self
                .targets
                .get(&(key.clone(), dir))
                .into_iter()
                .flatten()
                .map(|&id| st.pod(id))
                .collect();
            let active = self.active.contains(&(key.clone(), dir));
            let Some(p) = st.policies.get(&key).filter(|_| !targets.is_empty()) else {
                deactivate(self, tx, &key, dir);
                continue;
            };
            if !active {
                let mut scratch = Program::default();
                build::policy(&mut scratch, &tx.prog.sets, st, p, dir, fill);
                build::named_sets(&mut scratch, st, p, dir, &targets);
                for (name, set) in scratch.sets {
                    tx.put_set(&name, Some(set));
                }
                for (name, chain) in scratch.chains {
                    tx.put_chain(&name, Some(chain));
                }
                tx.prog.sources.extend(scratch.sources);
                self.active.insert((key, dir));
            } else if dir == Direction::Ingress {
                refill_named(tx, p, &targets);
            }
        }
        self.sweep(tx);
    }

    /// Removes the orphaned shared sets no chain refers to.
    fn sweep(&mut self, tx: &mut Tx) {
        if self.orphans.is_empty() {
            return;
        }
        let used: BTreeSet<&String> = tx.prog.chains.values().flat_map(set_refs).collect();
        let unused: Vec<String> = std::mem::take(&mut self.orphans)
            .into_iter()
            .filter(|n| !used.contains(n))
            .collect();
        for name in unused {
            if tx.prog.sets.contains_key(&name) {
                tx.put_set(&name, None);
            }
        }
    }
}

/// Makes the objects of selection chain `chain` exactly `sel` (none: removes them).
fn put_selection(tx: &mut Tx, chain: &str, sel: Selection) {
    let old_chains = owned(&tx.prog.chains, chain);
    let old_sets = owned(&tx.prog.sets, chain);
    for name in old_chains {
        if !sel.chains.iter().any(|(n, _)| *n == name) {
            tx.put_chain(&name, None);
        }
    }
    for name in old_sets {
        if !sel.sets.iter().any(|(n, _)| *n == name) {
            tx.put_set(&name, None);
        }
    }
    for (name, c) in sel.chains {
        tx.put_chain(&name, Some(c));
    }
    for (name, set) in sel.sets {
        tx.put_set(&name, Some(set));
    }
}

/// The names in `objects` of selection chain `chain`'s objects.
fn owned<V>(objects: &BTreeMap<String, V>, chain: &str) -> Vec<String> {
    objects
        .range::<str, _>((Bound::Included(chain), Bound::Unbounded))
        .map(|(n, _)| n)
        .take_while(|n| n.starts_with(chain))
        .filter(|n| selection::owned(chain, n))
        .cloned()
        .collect()
}

/// Removes a policy's chain and sets for `dir`, if it has them.
pub fn deactivate(local: &mut Local, tx: &mut Tx, key: &Key, dir: Direction) {
    if !local.active.remove(&(key.clone(), dir)) {
        return;
    }
    let chain = format!(
        "pol-{}-{}",
        short_id(&format!("{}/{}", key.0, key.1)),
        tag(dir)
    );
    let sets: Vec<String> = tx
        .prog
        .sets
        .range(chain.clone()..)
        .map(|(n, _)| n)
        .take_while(|n| n.starts_with(&chain))
        .cloned()
        .collect();
    for name in sets {
        tx.put_set(&name, None);
    }
    // A shared peer set goes with the last chain referring to it (`Local::sweep`).
    if let Some(c) = tx.prog.chains.get(&chain) {
        local.orphans.extend(set_refs(c).cloned());
    }
    tx.put_chain(&chain, None);
}

/// The sets a chain's rules match addresses against.
fn set_refs(c: &Chain) -> impl Iterator<Item = &String> {
    c.rules
        .iter()
        .flat_map(|r| &r.matches)
        .filter_map(|m| match m {
            Match::AddrIn(_, set) => Some(set),
            _ => None,
        })
}

/// An ingress policy's named-port sets, from its local targets.
fn refill_named(tx: &mut Tx, p: &Policy, targets: &[&Pod]) {
    let chain = policy_chain(p, Direction::Ingress);
    let rules = p.rules(Direction::Ingress).unwrap_or_default();
    for (r, rule) in rules.iter().enumerate() {
        for f in Family::BOTH {
            let name = format!("{chain}{r}-named{}", f.suffix());
            let Some(set) = tx.prog.sets.get(&name) else {
                continue;
            };
            let want: BTreeSet<Elem> = targets
                .iter()
                .flat_map(|t| named_ports(t, rule, f))
                .collect();
            let gone: Vec<Elem> = set.elems.difference(&want).cloned().collect();
            let new: Vec<Elem> = want.difference(&set.elems).cloned().collect();
            gone.iter().for_each(|e| tx.remove(&name, e));
            new.into_iter().for_each(|e| tx.insert(&name, e));
        }
    }
}

fn map(dir: Direction, ip: IpAddr) -> String {
    dispatch_map(dir == Direction::Egress, Family::of(ip))
}

fn pols<'s>(st: &'s State, keys: &[Key]) -> Vec<&'s Policy> {
    keys.iter().filter_map(|k| st.policies.get(k)).collect()
}

/// How `pod` (this node's, policed, with an address) is policed by the current policies.
fn policed(st: &State, pod: &Pod) -> Policed {
    let ns: &str = &pod.namespace;
    let in_ns = st
        .policies
        .range((ns.to_string(), String::new())..)
        .take_while(|((n, _), _)| n == ns);
    let mut sel: [(Vec<Key>, Option<String>); 2] = Default::default();
    for (k, p) in in_ns {
        for dir in DIRS {
            if selects(p, dir, pod) {
                sel[d(dir)].0.push(k.clone());
            }
        }
    }
    for dir in DIRS {
        let s = &mut sel[d(dir)];
        if !s.0.is_empty() {
            s.1 = Some(selection::name(&pols(st, &s.0), dir));
        }
    }
    Policed {
        ips: pod.ips.clone(),
        sel,
    }
}
