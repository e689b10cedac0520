//! NetworkPolicy enforced on this node: the Pod, Namespace and NetworkPolicy watches fill
//! the [`inbox`]; [`enforce`] turns it into this node's `netpol` program and writes it
//! into the kernel through `hostnet`'s `PolicyNet`. See netpol/README.md for the
//! semantics and the table's layout.

pub mod dumps;
pub mod enforce;
pub mod inbox;

use std::net::IpAddr;

use hostnet::node::{NodeNetError, PolicyNet};

/// The kernel as the NetworkPolicy loop uses it, owned by that loop's thread.
pub struct PolicyKernel {
    pub net: Box<dyn PolicyNet + Send>,
    /// This node's own addresses now: connections to and from them never meet the
    /// forward hook, so their conntrack entries are never judged.
    pub local_addrs: Box<dyn Fn() -> Result<Vec<IpAddr>, NodeNetError> + Send>,
    /// The conntrack dump, made on the dump thread (`dumps`): on a socket of its own, so
    /// that it does not hold up `net`'s writes.
    pub conntrack: dumps::Dump,
}
