//! A selection chain: what the local pods selected by exactly one list of policies (for
//! one direction) may receive or send, the union of those policies, else drop.
//!
//! A new connection's first packet would walk every policy's chain before the drop. So
//! when two or more of the policies admit only some ports, the chain first looks the
//! packet's `l4proto . dport` up in a port map (`<chain>-ports`: disjoint port ranges
//! -> the chain of the one policy whose ports cover the range, or a chain
//! `<chain>-<id>` jumping to each of several); only then the policies with a rule for
//! any port (no `ports`, or a named port, resolved per pod) are tried one by one. A
//! policy chain only accepts, so skipping one whose ports cannot admit the packet
//! changes no verdict: the cost of a connection follows the policies that could allow
//! its port, not all of them.
//!
//! Every object of a selection chain is named after it (`<chain>` or `<chain>-…`), so the
//! chain's objects are found and replaced together ([`owned`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::compile::{policy_chain, tag};
use crate::program::{Chain, Elem, Rule, Set, SetKind, Verdict, short_id};
use crate::validate::{Direction, Policy, PortMatch};

/// Fewer port-restricted policies than this are tried one by one: a map saves nothing
/// when at most one chain would be walked for any port.
const MIN_DISPATCHED: usize = 2;
/// At most this many jumps in the shared chains per dispatched policy (many ranges nested
/// in one another would otherwise list most policies again for each range); beyond it
/// the policies are tried one by one.
const JUMPS_PER_POLICY: usize = 8;

/// A selection chain's kernel objects: the chain itself first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub chains: Vec<(String, Chain)>,
    pub sets: Vec<(String, Set)>,
}

/// The name of the selection chain of exactly these policies (in `namespace/name` order).
pub fn name(pols: &[&Policy], dir: Direction) -> String {
    let keys: Vec<String> = pols.iter().map(|p| p.key()).collect();
    format!("sel-{}-{}", short_id(&keys.join("\n")), tag(dir))
}

/// Whether `object` (a chain's or a set's name) belongs to the selection chain `chain`.
pub fn owned(chain: &str, object: &str) -> bool {
    object
        .strip_prefix(chain)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// The objects of selection chain `chain` for these policies.
pub fn objects(chain: &str, pols: &[&Policy], dir: Direction) -> Selection {
    let live: Vec<&Policy> = pols
        .iter()
        .copied()
        .filter(|p| p.rules(dir).is_some_and(|r| !r.is_empty()))
        .collect();
    let ranged: Vec<Ranged> = live
        .iter()
        .enumerate()
        .filter_map(|(i, p)| port_ranges(p, dir).map(|r| (i, r)))
        .collect();
    let mut sel = Selection::default();
    let mut rules = Vec::new();
    let dispatched = (ranged.len() >= MIN_DISPATCHED)
        .then(|| segments(&ranged))
        .flatten();
    let mut tried: Vec<&Policy> = live.clone();
    if let Some(segs) = dispatched {
        let map = format!("{chain}-ports");
        let mut elems = BTreeSet::new();
        let mut shared: BTreeMap<String, Chain> = BTreeMap::new();
        for (proto, a, b, list) in segs {
            let target = match list.as_slice() {
                [one] => policy_chain(live[*one], dir),
                many => {
                    let keys: Vec<String> = many.iter().map(|&i| live[i].key()).collect();
                    let name = format!("{chain}-{}", short_id(&keys.join("\n")));
                    let jumps = many.iter().map(|&i| live[i]);
                    shared.entry(name.clone()).or_insert_with(|| Chain {
                        hook: None,
                        rules: jumps.map(|p| jump(p, dir)).collect(),
                    });
                    name
                }
            };
            elems.insert(Elem::PortJump(proto, a, b, target));
        }
        let kind = SetKind::PortDispatch;
        sel.sets.push((map.clone(), Set { kind, elems }));
        sel.chains.extend(shared);
        rules.push(Rule {
            matches: vec![],
            verdict: Verdict::PortMap(map),
        });
        let dispatched: BTreeSet<usize> = ranged.iter().map(|(i, _)| *i).collect();
        tried = (0..live.len())
            .filter(|i| !dispatched.contains(i))
            .map(|i| live[i])
            .collect();
    }
    rules.extend(tried.iter().map(|p| jump(p, dir)));
    rules.push(Rule {
        matches: vec![],
        verdict: Verdict::Drop,
    });
    let main = Chain { hook: None, rules };
    sel.chains.insert(0, (chain.to_string(), main));
    sel
}

fn jump(p: &Policy, dir: Direction) -> Rule {
    Rule {
        matches: vec![],
        verdict: Verdict::Jump(policy_chain(p, dir)),
    }
}

/// The `(protocol, first, last)` ranges every rule of `p` for `dir` admits; `None` when
/// a rule admits any port (no `ports`) or a named one (it resolves per pod).
fn port_ranges(p: &Policy, dir: Direction) -> Option<Vec<PortRange>> {
    let mut out = Vec::new();
    for rule in p.rules(dir)? {
        for pt in rule.ports.as_ref()? {
            let (a, b) = match pt.port {
                PortMatch::Any => (0, u16::MAX),
                PortMatch::Range(a, b) => (a, b),
                PortMatch::Named(_) => return None,
            };
            out.push((pt.protocol.number(), a, b));
        }
    }
    Some(out)
}

/// `(protocol, first, last)`, inclusive.
type PortRange = (u8, u16, u16);
/// A policy (its index) and the port ranges its rules admit.
type Ranged = (usize, Vec<PortRange>);
type Segment = (u8, u16, u16, Vec<usize>);

/// The disjoint `(protocol, first, last)` ranges the policies' ranges cut the ports
/// into, each with the policies (indexes, ascending) whose ranges cover it; adjacent
/// ranges with the same policies merged. `None` past the jump bound.
fn segments(ranged: &[Ranged]) -> Option<Vec<Segment>> {
    // Per protocol: at each boundary, the policies whose ranges start (+1) or end (-1).
    let mut bounds: BTreeMap<(u8, u32), Vec<(usize, i32)>> = BTreeMap::new();
    for (i, ranges) in ranged {
        for &(proto, a, b) in ranges {
            bounds.entry((proto, a.into())).or_default().push((*i, 1));
            let end = u32::from(b) + 1;
            bounds.entry((proto, end)).or_default().push((*i, -1));
        }
    }
    let limit = JUMPS_PER_POLICY * ranged.len();
    let mut jumps = 0;
    let mut out: Vec<Segment> = Vec::new();
    let mut active: BTreeMap<usize, i32> = BTreeMap::new();
    let points: Vec<_> = bounds.into_iter().collect();
    for (n, ((proto, at), events)) in points.iter().enumerate() {
        for &(i, d) in events {
            let c = active.entry(i).or_default();
            *c += d;
            if *c == 0 {
                active.remove(&i);
            }
        }
        if active.is_empty() {
            continue;
        }
        // The next boundary of the same protocol ends this range (one always follows:
        // every start has its end).
        let next = points[n + 1..].iter().find(|((p, _), _)| p == proto);
        let Some(((_, to), _)) = next else { continue };
        let (a, b) = (*at as u16, (*to - 1) as u16);
        let list: Vec<usize> = active.keys().copied().collect();
        match out.last_mut() {
            Some((p, _, end, l)) if p == proto && u32::from(*end) + 1 == *at && *l == list => {
                *end = b
            }
            _ => {
                if list.len() > 1 {
                    jumps += list.len();
                }
                out.push((*proto, a, b, list));
            }
        }
        if jumps > limit {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_ranges_cut_into_disjoint_segments() {
        let ranged = vec![
            (0, vec![(6, 80, 90)]),
            (1, vec![(6, 85, 100), (17, 53, 53)]),
            (2, vec![(6, 91, 95)]),
        ];
        let segs = segments(&ranged).unwrap();
        assert_eq!(
            segs,
            vec![
                (6, 80, 84, vec![0]),
                (6, 85, 90, vec![0, 1]),
                (6, 91, 95, vec![1, 2]),
                (6, 96, 100, vec![1]),
                (17, 53, 53, vec![1]),
            ]
        );
    }

    #[test]
    fn the_whole_port_range_and_touching_ranges_of_one_policy() {
        let ranged = vec![
            (0, vec![(6, 0, 65535)]),
            (1, vec![(6, 10, 19), (6, 20, 29)]),
        ];
        let segs = segments(&ranged).unwrap();
        assert_eq!(
            segs,
            vec![
                (6, 0, 9, vec![0]),
                (6, 10, 29, vec![0, 1]),
                (6, 30, 65535, vec![0]),
            ]
        );
    }

    #[test]
    fn nested_ranges_past_the_bound_are_not_dispatched() {
        let ranged: Vec<_> = (0..100).map(|i| (i, vec![(6, i as u16, 1000)])).collect();
        assert_eq!(segments(&ranged), None);
    }

    #[test]
    fn owned_objects_are_the_chain_and_its_dashed_names() {
        assert!(owned("sel-ab-in", "sel-ab-in"));
        assert!(owned("sel-ab-in", "sel-ab-in-ports"));
        assert!(!owned("sel-ab-in", "sel-ab-inx"));
        assert!(!owned("sel-ab-in", "sel-ab-eg"));
    }
}
