//! Objects -> one node's `Program`, a pure function. Only this node's pods are policed
//! here (each agent enforces for its own pods); remote pods appear only as set elements.
//!
//! Shape (see README.md for the nft text):
//! - per policy and direction that selects a local pod, a chain `pol-<id>-in|eg` whose
//!   rules accept what the policy's rules allow: one nft rule per alternative of peer
//!   (`…-pods4|6`, a hash set of the selected pods' addresses; `…-block4|6`, an interval
//!   set of the ipBlocks minus except) and of port (`…-ports`, `l4proto . dport` ranges;
//!   `…-named4|6`, `daddr . l4proto . dport` where the named ports resolve);
//! - per distinct list of policies selecting a local pod, a selection chain
//!   `sel-<id>-in|eg`: a jump to each policy chain, then drop;
//! - the dispatch verdict maps `ingress-pods4|6`/`egress-pods4|6`: local isolated pod
//!   address -> its selection chain.
//!
//! So a remote pod starting, ending or relabelled changes set elements only (one per
//! set it belongs to; `update::pod_event` does it in place); a local pod changes dispatch
//! and set elements, plus one selection chain when its list of policies is new here.

use std::collections::{BTreeMap, BTreeSet};

use crate::addr::{Family, RangeSet};
use crate::cluster::{Cluster, Pod};
use crate::members::{Source, named_ports, rule_members};
use crate::program::*;
use crate::validate::{Direction, Peer, Policy, PortMatch, Rule as PolicyRule};

fn tag(dir: Direction) -> &'static str {
    match dir {
        Direction::Ingress => "in",
        Direction::Egress => "eg",
    }
}

pub fn policy_chain(p: &Policy, dir: Direction) -> String {
    format!("pol-{}-{}", short_id(&p.key()), tag(dir))
}

/// The program for the pods on `node`.
pub fn compile(c: &Cluster, node: &str) -> Program {
    let mut prog = Program {
        local: c.node_addrs(node).iter().copied().collect(),
        refused: c.refused.clone(),
        ..Program::default()
    };
    base_chains(&mut prog);
    let local: Vec<&Pod> = c
        .pods
        .iter()
        .filter(|p| p.node == node && p.policed() && !p.ips.is_empty())
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
            let chain = selection_chain(&mut prog, c, dir, &selecting);
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
            policy(&mut prog, c, &c.policies[i], dir);
            named_sets(&mut prog, c, &c.policies[i], dir, &pods);
        }
    }
    prog
}

fn selects(p: &Policy, dir: Direction, pod: &Pod) -> bool {
    p.namespace == pod.namespace && p.rules(dir).is_some() && p.pod_selector.matches(&pod.labels)
}

fn base_chains(prog: &mut Program) {
    for (name, hook, field, egress) in [
        (EGRESS_CHAIN, Hook::ForwardEgress, Field::Saddr, true),
        (INGRESS_CHAIN, Hook::ForwardIngress, Field::Daddr, false),
    ] {
        let mut rules = vec![Rule {
            matches: vec![Match::Established],
            verdict: Verdict::Accept,
        }];
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
}

/// The chain for pods selected by exactly these policies: try each, else drop.
fn selection_chain(prog: &mut Program, c: &Cluster, dir: Direction, pols: &[usize]) -> String {
    let keys: Vec<String> = pols.iter().map(|&i| c.policies[i].key()).collect();
    let name = format!("sel-{}-{}", short_id(&keys.join("\n")), tag(dir));
    prog.chains.entry(name.clone()).or_insert_with(|| {
        let mut rules: Vec<Rule> = pols
            .iter()
            .map(|&i| &c.policies[i])
            .filter(|p| p.rules(dir).is_some_and(|r| !r.is_empty()))
            .map(|p| Rule {
                matches: vec![],
                verdict: Verdict::Jump(policy_chain(p, dir)),
            })
            .collect();
        rules.push(Rule {
            matches: vec![],
            verdict: Verdict::Drop,
        });
        Chain { hook: None, rules }
    });
    name
}

/// The chain of one policy's rules for `dir`, and their sets.
fn policy(prog: &mut Program, c: &Cluster, p: &Policy, dir: Direction) {
    let rules = p.rules(dir).unwrap_or_default();
    if rules.is_empty() {
        return;
    }
    let chain = policy_chain(p, dir);
    let mut out = Vec::new();
    for (r, rule) in rules.iter().enumerate() {
        let base = format!("{chain}{r}");
        let peers = peer_matches(prog, c, p, dir, r, rule, &base);
        let ports = port_matches(prog, rule, &base);
        // One nft rule per alternative of peer and of port (a k8s rule is an OR of its
        // peers and of its ports); an address set only meets its own family.
        for (pf, pm) in &peers {
            for (qf, qm) in &ports {
                if pf.is_some() && qf.is_some() && pf != qf {
                    continue;
                }
                let matches = pm.iter().chain(qm).cloned().collect();
                out.push(Rule {
                    matches,
                    verdict: Verdict::Accept,
                });
            }
        }
    }
    prog.chains.insert(
        chain,
        Chain {
            hook: None,
            rules: out,
        },
    );
}

type Alternative = (Option<Family>, Option<Match>);

/// The peer alternatives of a rule: any peer, or per family its selected pods' set
/// (hash, follows pods) and its ipBlocks' set (intervals, follows the policy).
fn peer_matches(
    prog: &mut Program,
    c: &Cluster,
    p: &Policy,
    dir: Direction,
    r: usize,
    rule: &PolicyRule,
    base: &str,
) -> Vec<Alternative> {
    let Some(peers) = &rule.peers else {
        return vec![(None, None)];
    };
    let field = match dir {
        Direction::Ingress => Field::Saddr,
        Direction::Egress => Field::Daddr,
    };
    let mut out = vec![];
    for f in Family::BOTH {
        if peers.iter().any(|x| matches!(x, Peer::Pods { .. })) {
            let name = format!("{base}-pods{}", f.suffix());
            let src = Source::PeerPods {
                policy: p.key(),
                dir,
                rule: r,
                family: f,
            };
            let elems = c
                .pods
                .iter()
                .flat_map(|pod| rule_members(c, p, rule, false, f, pod))
                .collect();
            prog.sets.insert(
                name.clone(),
                Set {
                    kind: SetKind::Addrs(f),
                    elems,
                },
            );
            prog.sources.insert(name.clone(), src);
            out.push((Some(f), Some(Match::AddrIn(field, name))));
        }
        let mut blocks = RangeSet::new(f);
        for x in peers {
            if let Peer::Block { cidr, except } = x {
                blocks.add_net_except(*cidr, except);
            }
        }
        let ranges = blocks.into_ranges();
        // A family no block of the rule covers gets no set and no rule.
        if !ranges.is_empty() {
            let name = format!("{base}-block{}", f.suffix());
            let elems = ranges.into_iter().map(Elem::Range).collect();
            prog.sets.insert(
                name.clone(),
                Set {
                    kind: SetKind::Ranges(f),
                    elems,
                },
            );
            out.push((Some(f), Some(Match::AddrIn(field, name))));
        }
    }
    out
}

/// The port alternatives of a rule: any port and protocol, the numeric ports' set, and
/// per family the set of where its named ports resolve.
fn port_matches(prog: &mut Program, rule: &PolicyRule, base: &str) -> Vec<Alternative> {
    let Some(ports) = &rule.ports else {
        return vec![(None, None)];
    };
    let mut out = vec![];
    let numeric: Vec<Elem> = ports
        .iter()
        .filter_map(|pt| match pt.port {
            PortMatch::Any => Some(Elem::ProtoPorts(pt.protocol.number(), 0, u16::MAX)),
            PortMatch::Range(a, b) => Some(Elem::ProtoPorts(pt.protocol.number(), a, b)),
            PortMatch::Named(_) => None,
        })
        .collect();
    if !numeric.is_empty() {
        let name = format!("{base}-ports");
        let set = Set {
            kind: SetKind::ProtoPorts,
            elems: merge_ports(numeric),
        };
        prog.sets.insert(name.clone(), set);
        out.push((None, Some(Match::ProtoPortIn(name))));
    }
    if ports
        .iter()
        .any(|pt| matches!(pt.port, PortMatch::Named(_)))
    {
        for f in Family::BOTH {
            let name = format!("{base}-named{}", f.suffix());
            let set = Set {
                kind: SetKind::AddrProtoPorts(f),
                elems: BTreeSet::new(),
            };
            prog.sets.insert(name.clone(), set);
            out.push((Some(f), Some(Match::DaddrProtoPortIn(name))));
        }
    }
    out
}

/// Fills the named-port sets: ingress from the local pods the policy selects, egress
/// from every pod (`members`), recorded as a source so remote pod events update it.
fn named_sets(prog: &mut Program, c: &Cluster, p: &Policy, dir: Direction, targets: &[&Pod]) {
    let Some(rules) = p.rules(dir) else { return };
    let chain = policy_chain(p, dir);
    for (r, rule) in rules.iter().enumerate() {
        for f in Family::BOTH {
            let name = format!("{chain}{r}-named{}", f.suffix());
            let Some(set) = prog.sets.get_mut(&name) else {
                continue;
            };
            match dir {
                Direction::Ingress => {
                    set.elems = targets
                        .iter()
                        .flat_map(|t| named_ports(t, rule, f))
                        .collect();
                }
                Direction::Egress => {
                    let src = Source::EgressNamed {
                        policy: p.key(),
                        rule: r,
                        family: f,
                    };
                    set.elems = c
                        .pods
                        .iter()
                        .flat_map(|pod| rule_members(c, p, rule, true, f, pod))
                        .collect();
                    prog.sources.insert(name, src);
                }
            }
        }
    }
}

/// Port ranges of one protocol merged where they overlap or touch (the kernel refuses
/// overlapping intervals in a set).
fn merge_ports(mut elems: Vec<Elem>) -> BTreeSet<Elem> {
    elems.sort();
    let mut out: Vec<(u8, u16, u16)> = Vec::new();
    for e in elems {
        let Elem::ProtoPorts(p, a, b) = e else {
            continue;
        };
        match out.last_mut() {
            Some((lp, _, end)) if *lp == p && a <= end.saturating_add(1) => *end = (*end).max(b),
            _ => out.push((p, a, b)),
        }
    }
    out.into_iter()
        .map(|(p, a, b)| Elem::ProtoPorts(p, a, b))
        .collect()
}
