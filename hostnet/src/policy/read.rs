//! Our table as the kernel holds it, read back as a `Program` (its sets and chains): what
//! a restart diffs against, and what readiness compares with the wanted program.

use std::collections::BTreeMap;

use netpol::program::{Chain, Hook, Program, Set};

use super::rules::{self, Kinds};
use super::{FAMILY, TABLE, elems};
use crate::nftnl::{self, Attrs, NfSocket, NftError};

/// NF_INET_FORWARD.
const HOOK_FORWARD: u32 = 2;

fn table_attr() -> Attrs {
    let mut a = Attrs::new();
    a.str(1, TABLE);
    a
}

/// `Ok(None)` for ENOENT: the table (or the set asked for) is not there.
fn absent_ok<T>(r: Result<T, NftError>) -> Result<Option<T>, NftError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The kinds of our table's sets among `names`, as the kernel defines them (a set we
/// did not make is left out, so a rule referring to it fails to encode).
pub fn held_kinds(nf: &mut NfSocket, names: &[String]) -> Result<Kinds, NftError> {
    let what = format!("list sets of inet {TABLE}");
    let answers = nf.dump(nftnl::NFT_MSG_GETSET, FAMILY as u8, &table_attr(), &what);
    let Some(answers) = absent_ok(answers)? else {
        return Ok(Kinds::new());
    };
    Ok(answers
        .iter()
        .filter_map(nftnl::parse_set)
        .filter(|(t, s)| t == TABLE && names.contains(&s.name))
        .filter_map(|(_, s)| Some((s.name.clone(), elems::kind_of(&s)?)))
        .collect())
}

fn hook_of(h: &nftnl::ListedHook) -> Option<Hook> {
    if h.hooknum != HOOK_FORWARD || h.kind != "filter" || !h.policy_accept {
        return None;
    }
    match h.priority {
        -1 => Some(Hook::ForwardEgress),
        0 => Some(Hook::ForwardIngress),
        _ => None,
    }
}

/// Our table's sets (with elements) and chains (with rules). `Ok(None)` when it holds
/// something we never make (a set, chain, element or rule of another shape): only a
/// replace makes such a table ours again. An absent table reads as an empty program.
pub fn read(nf: &mut NfSocket) -> Result<Option<Program>, NftError> {
    let mut p = Program::default();
    let listed = each_set(nf, |name, set| {
        p.sets.insert(name, set);
        true
    })?;
    if listed.is_none() {
        return Ok(None);
    }
    let Some(chains) = chains(nf, &super::kinds(&p))? else {
        return Ok(None);
    };
    p.chains = chains;
    Ok(Some(p))
}

/// Whether our table holds exactly `want`'s sets (with elements) and chains (with hooks
/// and rules). Read one set at a time and dropped after its comparison: the whole table
/// read back was a second copy of its 220,000 elements (150,000 pods) at the agent's
/// memory peak, right after the first programming.
pub fn matches(nf: &mut NfSocket, want: &Program) -> Result<bool, NftError> {
    let mut seen = 0;
    let same = each_set(nf, |name, set| {
        seen += 1;
        want.sets.get(&name) == Some(&set)
    })?;
    if same != Some(true) || seen != want.sets.len() {
        return Ok(false);
    }
    // Every set is as wanted, so their kinds are the wanted program's.
    Ok(chains(nf, &super::kinds(want))?.is_some_and(|c| c == want.chains))
}

/// Each set of our table with its elements, to `each` until it returns false:
/// `Some(false)` then, `Some(true)` when all were seen (none: the table is absent),
/// `None` at a set or element we never make.
fn each_set(
    nf: &mut NfSocket,
    mut each: impl FnMut(String, Set) -> bool,
) -> Result<Option<bool>, NftError> {
    let what = format!("list sets of inet {TABLE}");
    let sets = nf.dump(nftnl::NFT_MSG_GETSET, FAMILY as u8, &table_attr(), &what);
    let Some(sets) = absent_ok(sets)? else {
        return Ok(Some(true));
    };
    for answer in &sets {
        let Some((table, spec)) = nftnl::parse_set(answer) else {
            return Ok(None);
        };
        if table != TABLE {
            continue;
        }
        let Some(kind) = elems::kind_of(&spec) else {
            return Ok(None);
        };
        let what = format!("list set inet {TABLE} {}", spec.name);
        let sel = nftnl::selector(TABLE, 2, &spec.name);
        let listed = nf.dump(nftnl::NFT_MSG_GETSETELEM, FAMILY as u8, &sel, &what)?;
        let mut held = Vec::new();
        for a in &listed {
            let Some(e) = nftnl::parse_elems(a) else {
                return Ok(None);
            };
            held.extend(e);
        }
        drop(listed);
        let Some(elems) = elems::from_kernel(kind, held) else {
            return Ok(None);
        };
        if !each(spec.name, Set { kind, elems }) {
            return Ok(Some(false));
        }
    }
    Ok(Some(true))
}

/// Our table's chains with their rules, decoded with the table's set `kinds`; `None` at
/// a hook or rule we never make. An absent table has none.
fn chains(nf: &mut NfSocket, kinds: &Kinds) -> Result<Option<BTreeMap<String, Chain>>, NftError> {
    let mut out = BTreeMap::new();
    // Chain dumps are not filtered by table in the kernel: every inet chain comes back.
    let what = format!("list chains of inet {TABLE}");
    let chains = nf.dump(nftnl::NFT_MSG_GETCHAIN, FAMILY as u8, &table_attr(), &what);
    let Some(chains) = absent_ok(chains)? else {
        return Ok(Some(out));
    };
    for c in chains.iter().filter_map(nftnl::parse_chain) {
        if c.table != TABLE {
            continue;
        }
        let hook = match &c.hook {
            None => None,
            Some(h) => match hook_of(h) {
                Some(h) => Some(h),
                None => return Ok(None),
            },
        };
        out.insert(
            c.name,
            Chain {
                hook,
                rules: vec![],
            },
        );
    }

    let what = format!("list rules of inet {TABLE}");
    let listed = nf.dump(nftnl::NFT_MSG_GETRULE, FAMILY as u8, &table_attr(), &what);
    let Some(listed) = absent_ok(listed)? else {
        return Ok(Some(out));
    };
    let mut by_chain: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for answer in &listed {
        let Some((chain, Some(exprs))) = nftnl::parse_rule_exprs(answer) else {
            return Ok(None);
        };
        let Some(rule) = rules::decode(&exprs, kinds) else {
            return Ok(None);
        };
        by_chain.entry(chain).or_default().push(rule);
    }
    for (chain, rules) in by_chain {
        let Some(c) = out.get_mut(&chain) else {
            return Ok(None);
        };
        c.rules = rules;
    }
    Ok(Some(out))
}
