//! NetworkPolicy in the kernel: a [`netpol`] `Program` (one node's desired table) or
//! its `Changes` as nf_tables messages for one batch, and the table read back from the
//! kernel as a `Program`. Nothing here decides policy; `netpol` does.
//!
//! Within a batch the order is: sets, chains, elements removed, elements added, chains'
//! rules rewritten (flush, then add), chains removed (all flushed), sets removed, chains
//! deleted. Elements go out
//! before they come in (not as `Changes` lists them): a range or a map entry that
//! changes is the old one removed and a new one with the same start or key added, which
//! the kernel refuses while the old one is there. The kernel applies the batch as one
//! transaction, so no packet sees a half-written state in either order.

mod elems;
mod read;
mod rules;

use netpol::diff::{Changes, diff};
use netpol::program::{self, Hook, Program, SetKind};

use crate::nftnl::{self, BaseChain, Family, Msg, NftError};

pub use elems::{kind_of, set_spec};
pub use read::{held_kinds, matches, read};
pub use rules::Kinds;

/// `table inet cni-rs-netpol`.
pub const TABLE: &str = program::TABLE;
const FAMILY: Family = Family::Inet;

fn base_chain(hook: Hook) -> BaseChain {
    BaseChain {
        kind: "filter",
        hook: nftnl::Hook::Forward,
        // `priority filter - 1` and `priority filter`: egress is decided first.
        priority: match hook {
            Hook::ForwardEgress => -1,
            Hook::ForwardIngress => 0,
        },
    }
}

/// Pushes the messages for `elems` of consecutive runs of one set.
fn elem_msgs(out: &mut Vec<Msg>, elems: &[(String, program::Elem)], add: bool) {
    let mut i = 0;
    while i < elems.len() {
        let set = &elems[i].0;
        let run = elems[i..].iter().take_while(|(s, _)| s == set).count();
        set_elem_msgs(out, set, elems[i..i + run].iter().map(|(_, e)| e), add);
        i += run;
    }
}

/// Pushes the messages for `elems` of the set `set`.
fn set_elem_msgs<'a>(
    out: &mut Vec<Msg>,
    set: &str,
    elems: impl Iterator<Item = &'a program::Elem>,
    add: bool,
) {
    let kernel: Vec<_> = elems.flat_map(elems::to_kernel).collect();
    if !kernel.is_empty() {
        out.extend(nftnl::set_elems(FAMILY, TABLE, set, &kernel, add));
    }
}

/// The names of sets `changes`' rules refer to that it does not add itself.
pub fn sets_referred(changes: &Changes) -> Vec<String> {
    let added = |n: &String| changes.add_sets.iter().any(|(a, _)| a == n);
    let mut out: Vec<String> = changes
        .write_rules
        .iter()
        .flat_map(|(_, rules)| rules)
        .flat_map(|r| {
            let m = r.matches.iter().filter_map(|m| match m {
                program::Match::AddrIn(_, s)
                | program::Match::ProtoPortIn(s)
                | program::Match::DaddrProtoPortIn(s) => Some(s.clone()),
                program::Match::Established | program::Match::NeighbourDiscovery => None,
            });
            let v = match &r.verdict {
                program::Verdict::Map(_, s) | program::Verdict::PortMap(s) => Some(s.clone()),
                _ => None,
            };
            m.chain(v).collect::<Vec<_>>()
        })
        .filter(|n| !added(n))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The batch that makes `changes`; `held` has the kinds of the sets the kernel holds
/// already that its rules refer to ([`sets_referred`]). The table is created if absent.
pub fn changes_batch(changes: &Changes, held: &Kinds) -> Result<Vec<Msg>, NftError> {
    batch_with(
        changes,
        held,
        |_| 0,
        |out| {
            elem_msgs(out, &changes.del_elems, false);
            elem_msgs(out, &changes.add_elems, true);
        },
    )
}

/// [`changes_batch`] with the element messages `elems` pushes where elements go, and
/// each new set made with `room` (`nftnl::add_set`).
fn batch_with(
    changes: &Changes,
    held: &Kinds,
    room: impl Fn(&str) -> u32,
    elems: impl FnOnce(&mut Vec<Msg>),
) -> Result<Vec<Msg>, NftError> {
    let mut kinds = held.clone();
    kinds.extend(changes.add_sets.iter().cloned());
    let mut out = vec![nftnl::new_table(FAMILY, TABLE)];
    for (i, (name, kind)) in changes.add_sets.iter().enumerate() {
        let id = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let spec = set_spec(name, *kind);
        out.push(nftnl::add_set(FAMILY, TABLE, &spec, id, room(name)));
    }
    for (name, hook) in &changes.add_chains {
        out.push(match hook {
            Some(h) => nftnl::new_base_chain(FAMILY, TABLE, name, base_chain(*h)),
            None => nftnl::add_chain(FAMILY, TABLE, name),
        });
    }
    elems(&mut out);
    for (chain, rules) in &changes.write_rules {
        let new = changes.add_chains.iter().any(|(c, _)| c == chain);
        if !new {
            out.push(nftnl::flush_chain(FAMILY, TABLE, chain));
        }
        for r in rules {
            let exprs = rules::encode(r, chain, &kinds)?;
            out.push(nftnl::new_rule(FAMILY, TABLE, chain, &exprs, None, true));
        }
    }
    // A chain jumped to cannot go (EBUSY) while a chain that jumps to it, deleted
    // later in the batch, still holds its rules, or while a map that goes too still
    // holds an element jumping to it: every chain is flushed first, then the sets go
    // (a rule of a flushed chain no longer refers to them), then the chains.
    for chain in &changes.del_chains {
        out.push(nftnl::flush_chain(FAMILY, TABLE, chain));
    }
    for set in &changes.del_sets {
        out.push(nftnl::del_set(FAMILY, TABLE, set));
    }
    for chain in &changes.del_chains {
        out.push(nftnl::del_chain(FAMILY, TABLE, chain));
    }
    Ok(out)
}

/// The batch that makes our table exactly `program`, whatever it held: deleted (if
/// there) and made anew, in one transaction.
pub fn replace_batch(program: &Program) -> Result<Vec<Msg>, NftError> {
    // The difference of its sets and chains without their elements (220,000 at 150,000
    // pods, each copied with its set's name); the elements are read from the program.
    let skeleton = Program {
        sets: program
            .sets
            .iter()
            .map(|(n, s)| {
                (
                    n.clone(),
                    program::Set {
                        kind: s.kind,
                        elems: Default::default(),
                    },
                )
            })
            .collect(),
        chains: program.chains.clone(),
        ..Program::default()
    };
    let bare = diff(&Program::default(), &skeleton);
    let room = |name: &str| program.sets.get(name).map_or(0, room);
    let mut out = remove_batch();
    out.extend(batch_with(&bare, &Kinds::new(), room, |out| {
        out.extend(all_elem_msgs(program));
    })?);
    Ok(out)
}

/// Past this many elements, a whole table's element messages are encoded on two threads.
const SPLIT_ENCODE: usize = 16_384;

/// The messages adding every set's elements, in the sets' order: at 150,000 pods
/// (220,000 elements) their encoding held the first programming on one thread while
/// the node's other core was idle, so the sets are split in two halves by elements.
fn all_elem_msgs(program: &Program) -> Vec<Msg> {
    let sets: Vec<_> = program.sets.iter().collect();
    let encode = |sets: &[(&String, &program::Set)]| {
        let mut out = Vec::new();
        for (name, set) in sets {
            set_elem_msgs(&mut out, name, set.elems.iter(), true);
        }
        out
    };
    let total: usize = sets.iter().map(|(_, s)| s.elems.len()).sum();
    if total < SPLIT_ENCODE {
        return encode(&sets);
    }
    let mut seen = 0;
    let half = sets
        .iter()
        .position(|(_, s)| {
            seen += s.elems.len();
            seen >= total / 2
        })
        .map_or(sets.len(), |i| i + 1);
    let (first, second) = sets.split_at(half);
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("encode-elems".into())
            .spawn_scoped(scope, || encode(second));
        let mut out = encode(first);
        match helper {
            Ok(h) => out.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
            // No thread to be had: this one does it all.
            Err(_) => out.extend(encode(second)),
        }
        out
    })
}

/// The room (`nftnl::add_set`) a set of addresses is made with when the whole table is
/// written: half as much again as it holds, at least 256 more. A set that outgrows it is
/// refused (`ENFILE`) and the table written again, with room for what it then holds; a
/// set made by a difference has no bound (it is filled after it is made). Sets of other
/// kinds (intervals, concatenations, maps) are not hash sets: 0, unbounded.
pub fn room(set: &program::Set) -> u32 {
    match set.kind {
        SetKind::Addrs(_) => {
            let n = set.elems.len();
            u32::try_from(n + n / 2 + 256).unwrap_or(u32::MAX)
        }
        _ => 0,
    }
}

/// The batch that removes our table (also when it is absent: it is made first).
pub fn remove_batch() -> Vec<Msg> {
    vec![
        nftnl::new_table(FAMILY, TABLE),
        nftnl::del_table(FAMILY, TABLE),
    ]
}

/// The kinds of `program`'s sets.
pub fn kinds(program: &Program) -> Kinds {
    program
        .sets
        .iter()
        .map(|(n, s)| (n.clone(), s.kind))
        .collect()
}

/// Whether `held` (read back) is `want` as far as the kernel holds it: sets with their
/// elements, chains with their hooks and rules.
pub fn same_tables(held: &Program, want: &Program) -> bool {
    held.sets == want.sets && held.chains == want.chains
}
