//! The portmap plugin's seam: one attachment's port mappings, stated per backend by the
//! implementation ([`super::HostKernel`]: the tools; [`super::fake::FakeKernel`]: memory),
//! and the decisions made on top of them once, here, for both: the automatic backend
//! choice, removal from both backends, which failures count.

use std::net::Ipv4Addr;

use ipnetwork::IpNetwork;

use crate::firewall::backend::{self, automatic, counted};
use crate::firewall::portmap::{LocalnetError, PortMapping, PortMaps};
use crate::firewall::{Backend, FirewallError};

type Result<T> = std::result::Result<T, FirewallError>;

/// One attachment's port mappings on the node (`Sync`: removal runs both backends at once).
pub trait PortMapper: Sync {
    /// Installs `maps` to `ips` (one address per family) with `backend`, replacing the
    /// attachment's earlier rules; on a failure nothing of the attachment is left.
    fn add_port_maps(&self, backend: Backend, maps: &PortMaps, ips: &[IpNetwork]) -> Result<()>;
    /// Whether every rule [`PortMapper::add_port_maps`] installs is there.
    fn port_maps_present(
        &self,
        backend: Backend,
        maps: &PortMaps,
        ips: &[IpNetwork],
    ) -> Result<bool>;
    /// Removes the attachment's rules of `backend`, found by name; absent is success.
    fn remove_port_maps(&self, backend: Backend, network: &str, container_id: &str) -> Result<()>;
    /// Removes the iptables rules of `network`'s attachments not in `valid` (the nftables
    /// rules do not name their network: GC cannot tell them apart).
    fn gc_port_maps(&self, network: &str, valid: &[&str]) -> Result<()>;
    /// Whether `backend`'s tool works here (a probe: one process).
    fn tool_usable(&self, backend: Backend) -> bool;
    /// Deletes the stale UDP conntrack entries of the mappings' host ports in a family.
    fn delete_udp_flows(&self, mappings: &[PortMapping], v6: bool) -> Result<()>;
    /// Lets `127.0.0.1:hostPort` reach the container at `ip` (`route_localnet` on the
    /// interface routing it).
    fn route_localnet(&self, ip: Ipv4Addr) -> std::result::Result<(), LocalnetError>;

    /// The backend of automatic mode when it must be known before any attempt.
    fn automatic_backend(&self) -> Backend {
        automatic(|b| self.tool_usable(b))
    }

    /// ADD: [`PortMapper::add_port_maps`] with `backend` or, automatic, iptables and then
    /// nftables if iptables failed and is unusable. Returns the backend used.
    fn map_ports(
        &self,
        backend: Option<Backend>,
        maps: &PortMaps,
        ips: &[IpNetwork],
    ) -> Result<Backend> {
        backend::auto(
            |b| self.tool_usable(b),
            backend,
            |b| self.add_port_maps(b, maps, ips).map(|()| b),
        )
    }

    /// CHECK: whether the rules are there, with `backend` or the automatic choice (which
    /// is returned, for the message).
    fn check_ports(
        &self,
        backend: Option<Backend>,
        maps: &PortMaps,
        ips: &[IpNetwork],
    ) -> Result<(Backend, bool)> {
        let b = backend.unwrap_or_else(|| self.automatic_backend());
        self.port_maps_present(b, maps, ips)
            .map(|present| (b, present))
    }

    /// DEL: removes the attachment's rules of `backend`, or of both at once when `None`
    /// (it may have been made under another config). A failure counts only when its
    /// backend's tool is usable here.
    fn unmap_ports(
        &self,
        backend: Option<Backend>,
        network: &str,
        container_id: &str,
    ) -> Result<()> {
        let one = |b| {
            counted(self.remove_port_maps(b, network, container_id), || {
                self.tool_usable(b)
            })
        };
        match backend {
            Some(b) => one(b),
            None => {
                let (ipt, nft) = std::thread::scope(|s| {
                    let nft = sysproc::task::start(s, || one(Backend::NfTables));
                    (one(Backend::IpTables), nft.join())
                });
                FirewallError::collect([ipt, nft].into_iter().filter_map(Result::err).collect())
            }
        }
    }

    /// GC: [`PortMapper::gc_port_maps`], a failure counting only when iptables is usable.
    fn collect_port_maps(&self, network: &str, valid: &[&str]) -> Result<()> {
        counted(self.gc_port_maps(network, valid), || {
            self.tool_usable(Backend::IpTables)
        })
    }

    /// STATUS: whether `backend`'s tool works (`None`: either one).
    fn ports_usable(&self, backend: Option<Backend>) -> bool {
        match backend {
            Some(b) => self.tool_usable(b),
            None => self.tool_usable(Backend::IpTables) || self.tool_usable(Backend::NfTables),
        }
    }
}
