//! NetworkPolicy enforcement as the node agent asks the kernel for it: one table of
//! ours, `inet cni-rs-netpol`, made from a [`netpol`] `Program` and changed by its
//! `Changes`, each in one nf_tables transaction. [`HostNodeNet`] writes it over netlink
//! (see [`crate::policy`]); `FakeNodeNet` (feature `fake`) holds the program and runs
//! packets through it with `netpol::eval`.
//!
//! Conntrack is not flushed: a connection allowed before a change that denies it goes
//! on (`ct state established,related accept` comes first) until conntrack forgets it.

use netpol::diff::Changes;
use netpol::program::Program;

use super::{HostNodeNet, NodeNetError, Op};
use crate::nftnl::NftError;
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
}

impl PolicyNet for HostNodeNet {
    fn replace_policy(&self, program: &Program) -> Result<(), NodeNetError> {
        self.with_nft(Op::ReplacePolicy, |nf| {
            nf.batch(&policy::replace_batch(program)?)
        })
    }

    fn apply_policy(&self, changes: &Changes) -> Result<(), NodeNetError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.with_nft(Op::ApplyPolicy, |nf| {
            let referred = policy::sets_referred(changes);
            let held = if referred.is_empty() {
                policy::Kinds::new()
            } else {
                policy::held_kinds(nf, &referred)?
            };
            nf.batch(&policy::changes_batch(changes, &held)?)
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
        let held = self.read_policy()?;
        Ok(held.is_some_and(|h| policy::same_tables(&h, program)))
    }

    fn read_policy(&self) -> Result<Option<Program>, NodeNetError> {
        self.with_nft(Op::ReadPolicy, policy::read)
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
}
