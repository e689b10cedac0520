//! [`PolicyNet`] in memory: the table's sets and chains as a `Program`, changed all or
//! nothing with the kernel's refusals (an element deleted that is not there, a set or
//! chain missing, a rule or map entry referring to what is not there), and packets run
//! through it with `netpol::eval`, so agent tests assert decisions without root.

use std::collections::BTreeSet;
use std::net::IpAddr;

use netpol::conntrack::CtEntry;
use netpol::diff::{self, Changes};
use netpol::eval::{EvalError, Packet};
use netpol::program::{Elem, Program};

use super::fake::{FakeNodeNet, FakeState};
use super::{BridgeNf, NodeNetError, Op, PolicyNet, Refusal};
use crate::policy;

/// The kernel's part of `p`: sets and chains.
fn held(p: &Program) -> Program {
    Program {
        sets: p.sets.clone(),
        chains: p.chains.clone(),
        ..Program::default()
    }
}

/// What the kernel would refuse in `p`: a rule or map entry referring to a set or chain
/// that is not there, or a set used for what its kind cannot match.
fn check(op: &Op, p: &Program) -> Result<(), NodeNetError> {
    policy::replace_batch(p).map_err(NodeNetError::of(op.clone()))?;
    let targets = p
        .sets
        .values()
        .flat_map(|s| &s.elems)
        .filter_map(|e| match e {
            Elem::Jump(_, c) | Elem::PortJump(.., c) => Some(c),
            _ => None,
        });
    let jumps = p
        .chains
        .values()
        .flat_map(|c| &c.rules)
        .filter_map(|r| match &r.verdict {
            netpol::program::Verdict::Jump(c) => Some(c),
            _ => None,
        });
    for c in targets.chain(jumps) {
        if !p.chains.contains_key(c) {
            return Err(missing(op, "chain", c));
        }
    }
    Ok(())
}

/// What the kernel answers (ENOENT) for a change that refers to what is not there.
fn missing(op: &Op, what: &'static str, name: &str) -> NodeNetError {
    let name = name.to_string();
    NodeNetError::new(op.clone(), Refusal::Missing { what, name })
}

/// Whether `changes` fit `p` as the kernel requires: what is deleted is there, elements
/// go to sets that are (or are added), a set kept keeps its kind.
fn fits(op: &Op, p: &Program, ch: &Changes) -> Result<(), NodeNetError> {
    let missing = |what, name: &str| missing(op, what, name);
    for (name, kind) in &ch.add_sets {
        if p.sets.get(name).is_some_and(|s| s.kind != *kind) {
            let refused = Refusal::SetKind(name.clone());
            return Err(NodeNetError::new(op.clone(), refused));
        }
    }
    let added: BTreeSet<&String> = ch.add_sets.iter().map(|(n, _)| n).collect();
    for (name, _) in &ch.add_elems {
        if !p.sets.contains_key(name) && !added.contains(name) {
            return Err(missing("set", name));
        }
    }
    for (name, e) in &ch.del_elems {
        if !p.sets.get(name).is_some_and(|s| s.elems.contains(e)) {
            return Err(missing("element of set", &format!("{name}: {e:?}")));
        }
    }
    for name in &ch.del_chains {
        if !p.chains.contains_key(name) {
            return Err(missing("chain", name));
        }
    }
    for name in &ch.del_sets {
        if !p.sets.contains_key(name) {
            return Err(missing("set", name));
        }
    }
    Ok(())
}

impl FakeNodeNet {
    fn policy_op(
        &self,
        name: &'static str,
        op: Op,
        f: impl FnOnce(&mut FakeState) -> Result<(), NodeNetError>,
    ) -> Result<(), NodeNetError> {
        self.with(|s| {
            if s.fail.contains(name) {
                return Err(NodeNetError::new(op, Refusal::Injected));
            }
            f(s)?;
            s.log.push(name.to_string());
            Ok(())
        })
    }

    /// A read of the state (not logged), unless a test made `name` fail.
    fn read_op<T>(
        &self,
        name: &'static str,
        op: Op,
        f: impl FnOnce(&FakeState) -> T,
    ) -> Result<T, NodeNetError> {
        self.with(|s| {
            if s.fail.contains(name) {
                return Err(NodeNetError::new(op, Refusal::Injected));
            }
            Ok(f(s))
        })
    }

    /// Whether the table in place lets `p` (a new connection's first packet) through this
    /// node, as the kernel's forward hook decides; no table passes everything. Traffic to
    /// or from the node's own addresses never meets the forward hook.
    pub fn policy_passes(&self, p: &Packet) -> Result<bool, EvalError> {
        self.with(|s| {
            let Some(held) = &s.netpol else {
                return Ok(true);
            };
            let local: BTreeSet<IpAddr> = s.local.iter().copied().collect();
            let prog = Program {
                local,
                ..held.clone()
            };
            prog.passes(p)
        })
    }
}

impl PolicyNet for FakeNodeNet {
    fn replace_policy(&self, program: &Program) -> Result<(), NodeNetError> {
        self.policy_op("replace_policy", Op::ReplacePolicy, |s| {
            check(&Op::ReplacePolicy, program)?;
            s.netpol = Some(held(program));
            s.netpol_room = program
                .sets
                .iter()
                .map(|(name, set)| (name.clone(), policy::room(set)))
                .filter(|(_, room)| *room != 0)
                .collect();
            Ok(())
        })
    }

    fn apply_policy(&self, changes: &Changes) -> Result<(), NodeNetError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.policy_op("apply_policy", Op::ApplyPolicy, |s| {
            let op = Op::ApplyPolicy;
            let mut p = s.netpol.clone().unwrap_or_default();
            fits(&op, &p, changes)?;
            diff::apply(&mut p, changes);
            check(&op, &p)?;
            // A set that goes takes its room along (one made by a difference is
            // unbounded); a full one refuses more.
            let mut room = s.netpol_room.clone();
            room.retain(|name, _| p.sets.contains_key(name));
            for (name, room) in &room {
                if p.sets
                    .get(name)
                    .is_some_and(|set| set.elems.len() > *room as usize)
                {
                    let refused = Refusal::Errno(nix::libc::ENFILE);
                    return Err(NodeNetError::new(op, refused));
                }
            }
            s.netpol = Some(p);
            s.netpol_room = room;
            Ok(())
        })
    }

    fn remove_policy(&self) -> Result<(), NodeNetError> {
        self.policy_op("remove_policy", Op::RemovePolicy, |s| {
            s.netpol = None;
            s.netpol_room.clear();
            Ok(())
        })
    }

    fn policy_matches(&self, program: &Program) -> Result<bool, NodeNetError> {
        Ok(self.with(|s| {
            let held = s.netpol.clone().unwrap_or_default();
            policy::same_tables(&held, program)
        }))
    }

    fn read_policy(&self) -> Result<Option<Program>, NodeNetError> {
        Ok(Some(self.with(|s| s.netpol.clone().unwrap_or_default())))
    }

    fn conntrack(&self) -> Result<Vec<CtEntry>, NodeNetError> {
        self.read_op("conntrack", Op::ListConntrack, |s| s.conntrack.clone())
    }

    fn forget_connections(&self, entries: &[CtEntry]) -> Result<usize, NodeNetError> {
        let mut deleted = 0;
        self.policy_op("forget_connections", Op::ForgetConnections, |s| {
            // As the kernel: found by original tuple and zone, spared if the id differs.
            for e in entries {
                let at = s.conntrack.iter().position(|c| {
                    c.orig == e.orig && c.zone == e.zone && e.id.is_none_or(|id| c.id == Some(id))
                });
                if let Some(at) = at {
                    s.conntrack.remove(at);
                    deleted += 1;
                }
            }
            Ok(())
        })?;
        Ok(deleted)
    }

    fn bridge_netfilter(&self) -> Result<BridgeNf, NodeNetError> {
        self.read_op("bridge_netfilter", Op::ReadBridgeNetfilter, |s| s.bridge_nf)
    }

    fn enable_bridge_netfilter(&self) -> Result<(), NodeNetError> {
        self.policy_op("enable_bridge_netfilter", Op::EnableBridgeNetfilter, |s| {
            if !s.bridge_nf.loaded {
                return Err(NodeNetError::new(
                    Op::EnableBridgeNetfilter,
                    Refusal::NoBridgeNetfilter,
                ));
            }
            s.bridge_nf.call_iptables = true;
            s.bridge_nf.call_ip6tables = true;
            Ok(())
        })
    }
}
