//! [`NodeNet`] on the real kernel: rtnetlink for routes and addresses, nf_tables over
//! netlink for the firewall table (no `nft` binary: the agent's image is `FROM scratch`),
//! `/proc/sys` for forwarding.

use std::net::IpAddr;

use super::{NodeNet, NodeNetError, NodePolicy, PodRoute};

/// The kernel of the namespace this was opened in.
#[derive(Debug)]
pub struct HostNodeNet {
    _private: (),
}

impl HostNodeNet {
    /// The calling thread's network namespace (the host's, in the DaemonSet).
    pub fn current() -> Result<HostNodeNet, NodeNetError> {
        Err(unimplemented_op("open"))
    }
}

fn unimplemented_op(op: &str) -> NodeNetError {
    NodeNetError {
        op: op.to_string(),
        reason: "not implemented yet".to_string(),
        errno: None,
    }
}

impl NodeNet for HostNodeNet {
    fn our_routes(&self) -> Result<Vec<PodRoute>, NodeNetError> {
        Err(unimplemented_op("list routes"))
    }
    fn add_route(&self, _: &PodRoute) -> Result<(), NodeNetError> {
        Err(unimplemented_op("add route"))
    }
    fn replace_route(&self, _: &PodRoute) -> Result<(), NodeNetError> {
        Err(unimplemented_op("replace route"))
    }
    fn del_route(&self, _: &PodRoute) -> Result<(), NodeNetError> {
        Err(unimplemented_op("delete route"))
    }
    fn on_link(&self, _: IpAddr) -> Result<bool, NodeNetError> {
        Err(unimplemented_op("route get"))
    }
    fn local_addrs(&self) -> Result<Vec<IpAddr>, NodeNetError> {
        Err(unimplemented_op("list addresses"))
    }
    fn apply_firewall(&self, _: &NodePolicy) -> Result<(), NodeNetError> {
        Err(unimplemented_op("apply firewall"))
    }
    fn firewall_matches(&self, _: &NodePolicy) -> Result<bool, NodeNetError> {
        Err(unimplemented_op("read firewall"))
    }
    fn remove_firewall(&self) -> Result<(), NodeNetError> {
        Err(unimplemented_op("remove firewall"))
    }
    fn enable_forwarding(&self, _: bool, _: bool) -> Result<(), NodeNetError> {
        Err(unimplemented_op("enable forwarding"))
    }
}
