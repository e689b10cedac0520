//! Objects -> one node's `Program`, a pure function. Only this node's pods are policed
//! here (each agent enforces for its own pods); remote pods appear only as set elements.
//!
//! Shape (see README.md for the nft text):
//! - per policy and direction that selects a local pod, a chain `pol-<id>-in|eg` whose
//!   rules accept what the policy's rules allow: one nft rule per alternative of peer
//!   (`peer-<id>-pods4|6`, a hash set of the selected pods' addresses, shared by every
//!   rule naming the same peers, see `members::peer_set`; `…-block4|6`, an interval
//!   set of the ipBlocks minus except) and of port (`…-ports`, `l4proto . dport` ranges;
//!   `…-named4|6`, `daddr . l4proto . dport` where the named ports resolve);
//! - per distinct list of policies selecting a local pod, a selection chain
//!   `sel-<id>-in|eg`: a jump to each policy chain (through a port map when several
//!   admit only some ports, see `selection`), then drop;
//! - the dispatch verdict maps `ingress-pods4|6`/`egress-pods4|6`: local isolated pod
//!   address -> its selection chain.
//!
//! So a remote pod starting, ending or relabelled changes set elements only (one per
//! set it belongs to; `update::pod_event` does it in place); a local pod changes dispatch
//! and set elements, plus one selection chain when its list of policies is new here.

use std::collections::{BTreeMap, BTreeSet};

use crate::addr::Family;
use crate::build;
use crate::cluster::{Cluster, Pod};
use crate::program::*;
use crate::selection;
use crate::validate::{Direction, Policy};

pub fn tag(dir: Direction) -> &'static str {
    match dir {
        Direction::Ingress => "in",
        Direction::Egress => "eg",
    }
}

pub fn policy_chain(p: &Policy, dir: Direction) -> String {
    format!("pol-{}-{}", short_id(&p.key()), tag(dir))
}

/// The program for the pods on `node`. An address two pods claim is seen as only its
/// owner's (`Cluster::with_owners`).
pub fn compile(c: &Cluster, node: &str) -> Program {
    let owned = c.with_owners();
    let c = &owned;
    let mut prog = base_program();
    prog.local = c.node_addrs(node).iter().copied().collect();
    prog.refused = c.refused.clone();
    let local: Vec<&Pod> = c
        .pods
        .iter()
        .filter(|p| &*p.node == node && p.policed() && !p.ips.is_empty())
        .collect();
    for dir in [Direction::Ingress, Direction::Egress] {
        let mut targets: BTreeMap<usize, Vec<&Pod>> = BTreeMap::new();
        for pod in &local {
            let selecting: Vec<usize> = (0..c.policies.len())
                .filter(|&i| selects(&c.policies[i], dir, pod))
                .collect();
            if selecting.is_empty() {
                continue;
            }
            let pols: Vec<&Policy> = selecting.iter().map(|&i| &c.policies[i]).collect();
            let chain = selection::name(&pols, dir);
            if !prog.chains.contains_key(&chain) {
                let sel = selection::objects(&chain, &pols, dir);
                prog.chains.extend(sel.chains);
                prog.sets.extend(sel.sets);
            }
            for &ip in &pod.ips {
                let map = dispatch_map(dir == Direction::Egress, Family::of(ip));
                let elems = &mut prog.sets.get_mut(&map).expect("dispatch maps exist").elems;
                elems.insert(Elem::Jump(ip, chain.clone()));
            }
            for i in selecting {
                targets.entry(i).or_default().push(pod);
            }
        }
        for (i, pods) in targets {
            build::policy(
                &mut prog,
                &BTreeMap::new(),
                c,
                &c.policies[i],
                dir,
                &mut None,
            );
            build::named_sets(&mut prog, c, &c.policies[i], dir, &pods);
        }
    }
    prog
}

/// Whether `p` polices `pod` in `dir`.
pub fn selects(p: &Policy, dir: Direction, pod: &Pod) -> bool {
    *p.namespace == *pod.namespace && p.rules(dir).is_some() && p.pod_selector.matches(&pod.labels)
}

/// The program with no pod policed: the base chains and empty dispatch maps.
pub fn base_program() -> Program {
    let mut prog = Program::default();
    for (name, hook, field, egress) in [
        (EGRESS_CHAIN, Hook::ForwardEgress, Field::Saddr, true),
        (INGRESS_CHAIN, Hook::ForwardIngress, Field::Daddr, false),
    ] {
        // Neighbour discovery is untracked (no `established`), and with br_netfilter it
        // crosses forward between two pods of the bridge: without it an isolated pod
        // could not resolve its IPv6 neighbours.
        let mut rules = vec![
            Rule {
                matches: vec![Match::Established],
                verdict: Verdict::Accept,
            },
            Rule {
                matches: vec![Match::NeighbourDiscovery],
                verdict: Verdict::Accept,
            },
        ];
        for f in Family::BOTH {
            let map = dispatch_map(egress, f);
            let set = Set {
                kind: SetKind::Dispatch(f),
                elems: BTreeSet::new(),
            };
            prog.sets.insert(map.clone(), set);
            rules.push(Rule {
                matches: vec![],
                verdict: Verdict::Map(field, map),
            });
        }
        prog.chains.insert(
            name.to_string(),
            Chain {
                hook: Some(hook),
                rules,
            },
        );
    }
    prog
}
