//! Stale UDP conntrack entries of a new mapping's host port: a UDP flow that reached the
//! port before the mapping existed (or while it led to a pod now gone) keeps its entry,
//! and so its old destination, for as long as packets keep coming. The reference deletes
//! them after setting the rules (`DeleteConntrackEntriesForDstPort`), best effort; so do
//! we, through the `conntrack` tool (conntrack-tools, which kube-proxy needs on every node).

use super::{PortMapping, Protocol};
use crate::firewall::error::{FirewallError, Result};
use crate::firewall::exec;

/// Deletes the UDP entries whose original destination port is a UDP mapping's host port,
/// in `v6`'s family. Without the tool nothing is done (`Ok`).
pub fn delete_udp_entries(mappings: &[PortMapping], v6: bool) -> Result<()> {
    let family = if v6 { "ipv6" } else { "ipv4" };
    let mut ports: Vec<u16> = (mappings.iter())
        .filter(|m| m.protocol == Protocol::Udp)
        .map(|m| m.host_port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    for port in ports {
        let port = port.to_string();
        let args = ["-D", "-p", "udp", "--orig-port-dst", &port, "-f", family];
        match exec::run("conntrack", &args, None) {
            Err(e) if e.is_tool_missing() => return Ok(()),
            // It exits 1 when there was nothing to delete.
            Err(FirewallError::Failed { stderr, .. }) if stderr.contains("0 flow entries") => {}
            other => other.map(drop)?,
        }
    }
    Ok(())
}
