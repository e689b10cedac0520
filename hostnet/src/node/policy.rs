//! NetworkPolicy enforcement as the node agent asks the kernel for it: one table of
//! ours, `inet cni-rs-netpol`, made from a [`netpol`] `Program` and changed by its
//! `Changes`, each in one nf_tables transaction. [`HostNodeNet`] writes it over netlink
//! (see [`crate::policy`]); `FakeNodeNet` (feature `fake`) holds the program and runs
//! packets through it with `netpol::eval`.
//!
//! A connection allowed before a change that denies it goes on (`ct state
//! established,related accept` comes first) until its conntrack entry goes: the agent
//! lists the entries ([`PolicyNet::conntrack`]), asks `netpol::eval::denied` which the
//! new program drops, and deletes only those ([`PolicyNet::forget_connections`]); the
//! others keep their state (a Service connection its DNAT). A TCP packet of the deleted
//! connection from its far end (a retransmission, data pushed) is taken by conntrack for
//! a new connection in that direction (`nf_conntrack_tcp_loose`, on by default) and
//! judged so: where that direction is allowed (an ingress-only isolated server answering
//! its client) the connection comes back.

use netpol::conntrack::CtEntry;
use netpol::diff::Changes;
use netpol::program::Program;

use super::bridge_nf::{self, BridgeNf};
use super::{HostNodeNet, NodeNetError, Op, Refusal};
use crate::nftnl::{NftError, ctnetlink};
use crate::policy;

pub trait PolicyNet {
    /// Makes our table exactly `program` in one transaction, whatever it held (nothing,
    /// an older version, a half-foreign table): deleted and made anew. For the first
    /// program after start, when [`PolicyNet::read_policy`] has nothing usable.
    fn replace_policy(&self, program: &Program) -> Result<(), NodeNetError>;
    /// Applies `changes` (`netpol::diff` of the program the kernel holds and the one
    /// wanted) in one transaction: a pod event is set elements only, a policy change
    /// sets, chains and rules as well. Changes that do not fit what the kernel holds
    /// (an element deleted that is not there, a set missing) fail whole, changing
    /// nothing: [`PolicyNet::replace_policy`] then.
    fn apply_policy(&self, changes: &Changes) -> Result<(), NodeNetError>;
    /// Removes our table; absent (or a kernel without nf_tables) is success.
    fn remove_policy(&self) -> Result<(), NodeNetError>;
    /// Whether the kernel holds exactly `program`'s sets (with elements) and chains (with
    /// hooks and rules) as our table (readiness, drift).
    fn policy_matches(&self, program: &Program) -> Result<bool, NodeNetError>;
    /// What our table holds, as a program's sets and chains (empty when absent); `None`
    /// when it holds something we never make. A restart diffs this against its first
    /// compile.
    fn read_policy(&self) -> Result<Option<Program>, NodeNetError>;
    /// Every conntrack entry of the node (both families) of TCP, UDP, SCTP, UDP-Lite,
    /// ICMP and ICMPv6, with both tuples.
    fn conntrack(&self) -> Result<Vec<CtEntry>, NodeNetError>;
    /// Deletes these entries (by original tuple, zone and id: a newer connection that
    /// took the tuple is spared). One already gone is success. The count deleted.
    fn forget_connections(&self, entries: &[CtEntry]) -> Result<usize, NodeNetError>;
    /// Whether bridged pod traffic reaches the forward hook: br_netfilter loaded and
    /// `net.bridge.bridge-nf-call-iptables` / `-ip6tables` (per network namespace).
    fn bridge_netfilter(&self) -> Result<BridgeNf, NodeNetError>;
    /// Sets both sysctls to 1. Without br_netfilter loaded: [`Refusal::NoBridgeNetfilter`]
    /// (the agent cannot load a module; it says so loudly).
    fn enable_bridge_netfilter(&self) -> Result<(), NodeNetError>;
}

impl PolicyNet for HostNodeNet {
    fn replace_policy(&self, program: &Program) -> Result<(), NodeNetError> {
        let elems = program.sets.values().map(|s| s.elems.len()).sum();
        let msgs = policy::replace_batch(program).map_err(NodeNetError::of(Op::ReplacePolicy))?;
        self.with_nft(Op::ReplacePolicy, |nf| {
            self.quiet_batch(nf, elems, |nf| nf.batch(&msgs))
        })
    }

    fn apply_policy(&self, changes: &Changes) -> Result<(), NodeNetError> {
        if changes.is_empty() {
            return Ok(());
        }
        let elems = changes.add_elems.len() + changes.del_elems.len();
        self.with_nft(Op::ApplyPolicy, |nf| {
            let referred = policy::sets_referred(changes);
            let held = if referred.is_empty() {
                policy::Kinds::new()
            } else {
                policy::held_kinds(nf, &referred)?
            };
            let msgs = policy::changes_batch(changes, &held)?;
            self.quiet_batch(nf, elems, |nf| nf.batch(&msgs))
        })
    }

    fn remove_policy(&self) -> Result<(), NodeNetError> {
        match self.nft(&Op::RemovePolicy) {
            Err(e) if e.errno() == Some(nix::libc::EPROTONOSUPPORT) => return Ok(()),
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        self.with_nft(Op::RemovePolicy, |nf| {
            match nf.batch(&policy::remove_batch()) {
                Err(NftError::NoNfTables { .. }) => Ok(()),
                other => other,
            }
        })
    }

    fn policy_matches(&self, program: &Program) -> Result<bool, NodeNetError> {
        self.with_nft(Op::ReadPolicy, |nf| policy::matches(nf, program))
    }

    fn read_policy(&self) -> Result<Option<Program>, NodeNetError> {
        self.with_nft(Op::ReadPolicy, policy::read)
    }

    fn conntrack(&self) -> Result<Vec<CtEntry>, NodeNetError> {
        self.with_nft(Op::ListConntrack, ctnetlink::list)
    }

    fn forget_connections(&self, entries: &[CtEntry]) -> Result<usize, NodeNetError> {
        if entries.is_empty() {
            return Ok(0);
        }
        self.with_nft(Op::ForgetConnections, |nf| ctnetlink::forget(nf, entries))
    }

    fn bridge_netfilter(&self) -> Result<BridgeNf, NodeNetError> {
        let op = Op::ReadBridgeNetfilter;
        self.run_here(bridge_nf::read)
            .map_err(NodeNetError::of(op.clone()))?
            .map_err(NodeNetError::of(op))
    }

    fn enable_bridge_netfilter(&self) -> Result<(), NodeNetError> {
        let op = Op::EnableBridgeNetfilter;
        if !self.bridge_netfilter()?.loaded {
            return Err(NodeNetError::new(op, Refusal::NoBridgeNetfilter));
        }
        self.run_here(bridge_nf::enable)
            .map_err(NodeNetError::of(op.clone()))?
            .map_err(NodeNetError::of(op))
    }
}

/// One kernel (or fake) shared by the agent's loops and a test that looks at it.
impl<T: PolicyNet + ?Sized> PolicyNet for std::sync::Arc<T> {
    fn replace_policy(&self, program: &Program) -> Result<(), NodeNetError> {
        (**self).replace_policy(program)
    }
    fn apply_policy(&self, changes: &Changes) -> Result<(), NodeNetError> {
        (**self).apply_policy(changes)
    }
    fn remove_policy(&self) -> Result<(), NodeNetError> {
        (**self).remove_policy()
    }
    fn policy_matches(&self, program: &Program) -> Result<bool, NodeNetError> {
        (**self).policy_matches(program)
    }
    fn read_policy(&self) -> Result<Option<Program>, NodeNetError> {
        (**self).read_policy()
    }
    fn conntrack(&self) -> Result<Vec<CtEntry>, NodeNetError> {
        (**self).conntrack()
    }
    fn forget_connections(&self, entries: &[CtEntry]) -> Result<usize, NodeNetError> {
        (**self).forget_connections(entries)
    }
    fn bridge_netfilter(&self) -> Result<BridgeNf, NodeNetError> {
        (**self).bridge_netfilter()
    }
    fn enable_bridge_netfilter(&self) -> Result<(), NodeNetError> {
        (**self).enable_bridge_netfilter()
    }
}
