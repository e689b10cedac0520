//! One policy's objects for one direction: its chain and the sets its rules match on
//! (`compile` makes them for every policy selecting a local pod, the engine for the one
//! policy an event touches). Membership is read through `members::View`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::addr::{Family, RangeSet};
use crate::cluster::Pod;
use crate::compile::policy_chain;
use crate::members::{
    Source, View, egress_named_members, in_namespace, named_ports, peer_set, picks_in,
};
use crate::program::*;
use crate::validate::{Direction, Peer, Policy, PortMatch, Rule as PolicyRule};

/// When the elements of a new shared peer set are made: at once (`None`: `compile`), or
/// by the caller later, the set made empty and its name recorded here (the engine for the
/// agent: a pod's isolation reaches the kernel before tens of thousands of its peers'
/// addresses).
pub type Fill<'a> = Option<&'a mut BTreeSet<String>>;

/// The addresses of family `f` of the pods selector peers `peers` (of a policy in
/// `policy_ns`) pick, over the view's candidates (`Source::PeerPods`'s elements).
/// Collected, then built sorted at once (inserting 40,000 addresses one by one into a
/// tree was a third of a large peer set's time).
pub fn peer_addresses<V: View + ?Sized>(
    c: &V,
    policy_ns: &str,
    peers: &[Peer],
    f: Family,
) -> BTreeSet<Elem> {
    let mut out = Vec::new();
    // The candidates come namespace by namespace: which peers pick from a namespace is
    // decided once per namespace, not per pod.
    let mut here: Option<(Arc<str>, Vec<&Peer>)> = None;
    c.peer_candidates(policy_ns, peers, &mut |pod| {
        let (Some(ip), true) = (pod.ip(f), pod.policed()) else {
            return;
        };
        let ns = &pod.namespace;
        if here
            .as_ref()
            .is_none_or(|(n, _)| !Arc::ptr_eq(n, ns) && n != ns)
        {
            let ps = peers.iter().filter(|x| in_namespace(c, policy_ns, x, ns));
            here = Some((ns.clone(), ps.collect()));
        }
        let (_, ps) = here.as_ref().expect("just set");
        if ps.iter().any(|x| picks_in(x, pod)) {
            out.push(Elem::Addr(ip));
        }
    });
    out.into_iter().collect()
}

/// The chain of one policy's rules for `dir`, and their sets; a shared peer set that
/// `prog` or `held` (the program a scratch `prog` goes into) already has is not rebuilt,
/// a new one is filled as `fill` says.
pub fn policy<V: View + ?Sized>(
    prog: &mut Program,
    held: &BTreeMap<String, Set>,
    c: &V,
    p: &Policy,
    dir: Direction,
    fill: &mut Fill,
) {
    let rules = p.rules(dir).unwrap_or_default();
    if rules.is_empty() {
        return;
    }
    let chain = policy_chain(p, dir);
    let mut out = Vec::new();
    for (r, rule) in rules.iter().enumerate() {
        let base = format!("{chain}{r}");
        let peers = peer_matches(prog, held, c, p, dir, rule, &base, fill);
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
/// (hash, follows pods, shared by the rules with the same peers) and its ipBlocks' set
/// (intervals, follows the policy).
#[allow(clippy::too_many_arguments)] // the policy's rule, where its sets go, how to fill them
fn peer_matches<V: View + ?Sized>(
    prog: &mut Program,
    held: &BTreeMap<String, Set>,
    c: &V,
    p: &Policy,
    dir: Direction,
    rule: &PolicyRule,
    base: &str,
    fill: &mut Fill,
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
            // Shared with every rule of the same peers: built by the first.
            let (name, src) = peer_set(&p.namespace, peers, f);
            if !prog.sets.contains_key(&name) && !held.contains_key(&name) {
                let elems = match fill {
                    None => peer_addresses(c, &p.namespace, peers, f),
                    Some(names) => {
                        names.insert(name.clone());
                        BTreeSet::new()
                    }
                };
                let kind = SetKind::Addrs(f);
                prog.sets.insert(name.clone(), Set { kind, elems });
                prog.sources.insert(name.clone(), src);
            }
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
pub fn named_sets<V: View + ?Sized>(
    prog: &mut Program,
    c: &V,
    p: &Policy,
    dir: Direction,
    targets: &[&Pod],
) {
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
                    let mut elems = Vec::new();
                    c.candidates(p, rule, &mut |pod| {
                        elems.extend(egress_named_members(c, p, rule, f, pod));
                    });
                    set.elems = elems.into_iter().collect();
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
