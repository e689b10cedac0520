//! Objects -> one node's `Program`, a pure function. Only this node's pods are policed
//! here (each agent enforces for its own pods); remote pods appear only as set elements.
//!
//! Shape (see the crate docs for the nft text):
//! - per policy and direction that selects a local pod, a chain `pol-<id>-in|eg` whose
//!   rules accept what the policy's rules allow, each rule matching through sets:
//!   `…-peer4|6` (interval set: matched pods' addresses and ipBlocks minus except),
//!   `…-ports` (`l4proto . dport` ranges) and `…-named4|6` (`daddr . l4proto . dport` of
//!   the pods a named port resolves on);
//! - per distinct list of policies selecting a local pod, a selection chain
//!   `sel-<id>-in|eg`: a jump to each policy chain, then drop;
//! - the dispatch verdict maps `ingress-pods4|6`/`egress-pods4|6`: local isolated pod
//!   address -> its selection chain.
//!
//! So a remote pod starting, ending or relabelled changes set elements only; a local pod
//! changes dispatch and set elements, plus one selection chain when its list of
//! policies is new on this node.

use std::collections::{BTreeMap, BTreeSet};

use crate::addr::{Family, RangeSet};
use crate::cluster::{Cluster, Pod};
use crate::program::*;
use crate::validate::{Direction, Namespaces, Peer, Policy, PortMatch, Rule as PolicyRule};

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
            policy(&mut prog, c, &c.policies[i], dir, &pods);
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

/// The chain of one policy's rules for `dir`, and their sets; `targets`: the local pods
/// it selects (where ingress named ports resolve).
fn policy(prog: &mut Program, c: &Cluster, p: &Policy, dir: Direction, targets: &[&Pod]) {
    let rules = p.rules(dir).unwrap_or_default();
    if rules.is_empty() {
        return;
    }
    let chain = policy_chain(p, dir);
    let mut out = Vec::new();
    for (r, rule) in rules.iter().enumerate() {
        let base = format!("{chain}{r}");
        let field = match dir {
            Direction::Ingress => Field::Saddr,
            Direction::Egress => Field::Daddr,
        };
        let mut peers: Option<BTreeMap<Family, (String, RangeSet)>> = None;
        if let Some(list) = &rule.peers {
            let sets = Family::BOTH.map(|f| {
                (
                    f,
                    (
                        format!("{base}-peer{}", f.suffix()),
                        peer_set(c, p, list, f),
                    ),
                )
            });
            peers = Some(sets.into_iter().collect());
        }
        let peer_match = |f: Family| -> Vec<Match> {
            peers
                .as_ref()
                .map(|m| vec![Match::AddrIn(field, m[&f].0.clone())])
                .unwrap_or_default()
        };
        let accept = |matches| Rule {
            matches,
            verdict: Verdict::Accept,
        };
        match &rule.ports {
            None if peers.is_none() => out.push(accept(vec![])),
            None => out.extend(Family::BOTH.map(|f| accept(peer_match(f)))),
            Some(ports) => {
                let numeric: Vec<Elem> = ports
                    .iter()
                    .filter_map(|pt| match pt.port {
                        PortMatch::Any => Some(Elem::ProtoPorts(pt.protocol.number(), 0, u16::MAX)),
                        PortMatch::Range(a, b) => {
                            Some(Elem::ProtoPorts(pt.protocol.number(), a, b))
                        }
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
                    let port = Match::ProtoPortIn(name);
                    match peers {
                        None => out.push(accept(vec![port])),
                        Some(_) => out.extend(Family::BOTH.map(|f| {
                            let mut m = peer_match(f);
                            m.push(port.clone());
                            accept(m)
                        })),
                    }
                }
                if ports
                    .iter()
                    .any(|pt| matches!(pt.port, PortMatch::Named(_)))
                {
                    for f in Family::BOTH {
                        let name = format!("{base}-named{}", f.suffix());
                        let elems = named_elems(c, p, dir, rule, targets, f);
                        prog.sets.insert(
                            name.clone(),
                            Set {
                                kind: SetKind::AddrProtoPorts(f),
                                elems,
                            },
                        );
                        let mut m = peer_match(f);
                        m.push(Match::DaddrProtoPortIn(name));
                        out.push(accept(m));
                    }
                }
            }
        }
        for (f, (name, set)) in peers.into_iter().flatten() {
            let elems = set.into_ranges().into_iter().map(Elem::Range).collect();
            prog.sets.insert(
                name,
                Set {
                    kind: SetKind::Addrs(f),
                    elems,
                },
            );
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

/// Whether a pod is picked by one of a rule's selector peers.
fn pod_peer(c: &Cluster, policy_ns: &str, peers: &[Peer], pod: &Pod) -> bool {
    pod.policed()
        && peers.iter().any(|peer| match peer {
            Peer::Block { .. } => false,
            Peer::Pods { namespaces, pods } => {
                let ns_ok = match namespaces {
                    Namespaces::Own => pod.namespace == policy_ns,
                    Namespaces::Matching(s) => s.matches(&c.namespace_labels(&pod.namespace)),
                };
                ns_ok && pods.matches(&pod.labels)
            }
        })
}

fn peer_set(c: &Cluster, p: &Policy, peers: &[Peer], f: Family) -> RangeSet {
    let mut set = RangeSet::new(f);
    for peer in peers {
        if let Peer::Block { cidr, except } = peer {
            set.add_net_except(*cidr, except);
        }
    }
    for pod in c
        .pods
        .iter()
        .filter(|pod| pod_peer(c, &p.namespace, peers, pod))
    {
        if let Some(ip) = pod.ip(f) {
            set.add_ip(ip);
        }
    }
    set
}

/// `(address, proto, port)` of the pods a rule's named ports resolve on: for ingress the
/// local pods the policy selects, for egress every pod the rule's peers include.
fn named_elems(
    c: &Cluster,
    p: &Policy,
    dir: Direction,
    rule: &PolicyRule,
    targets: &[&Pod],
    f: Family,
) -> BTreeSet<Elem> {
    let pods: Vec<&Pod> = match (dir, &rule.peers) {
        (Direction::Ingress, _) => targets.to_vec(),
        (Direction::Egress, None) => c.pods.iter().filter(|x| x.policed()).collect(),
        (Direction::Egress, Some(peers)) => {
            let ranges = peer_set(c, p, peers, f).into_ranges();
            c.pods
                .iter()
                .filter(|x| x.policed())
                .filter(|x| {
                    x.ip(f)
                        .is_some_and(|ip| ranges.iter().any(|r| r.contains(ip)))
                })
                .collect()
        }
    };
    let mut elems = BTreeSet::new();
    for pod in pods {
        let Some(ip) = pod.ip(f) else { continue };
        for pt in rule.ports.iter().flatten() {
            if let PortMatch::Named(n) = &pt.port
                && let Some(port) = pod.named_port(n, pt.protocol)
            {
                elems.insert(Elem::AddrProtoPort(ip, pt.protocol.number(), port));
            }
        }
    }
    elems
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
