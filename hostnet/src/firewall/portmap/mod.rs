//! Port mappings (the `portmap` plugin: a pod's `hostPort`), rule for rule what the Go
//! plugin (containernetworking/plugins `plugins/meta/portmap`, v1.9) makes, in its two
//! backends: iptables (`CNI-HOSTPORT-DNAT`, a `CNI-DN-<hash>` chain per attachment, the
//! masquerade mark chains) and nftables (tables `ip`/`ip6 cni_hostport`, rules named by the
//! container ID). A node moves between the Go plugin and ours with nothing leaked.
//!
//! Each family is written in one batch (one `iptables-restore`, one `nft` transaction)
//! after one read, so a family's mappings appear whole or not at all.
//!
//! The plugin reaches these through [`crate::kernel::PortMapper`] (one backend per call
//! here; the automatic choice and the two-backend removal are the trait's).

mod conntrack;
mod iptables;
mod localnet;
mod nftables;
mod rules;

pub(crate) use conntrack::delete_udp_entries;
pub use localnet::LocalnetError;
pub(crate) use localnet::enable_route_localnet;

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::Backend;
use super::error::{FirewallError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// `tcp`, `udp` or `sctp`, in any case (iptables reads `-p` case-insensitively).
    pub fn parse(s: &str) -> Option<Protocol> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            "sctp" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One `runtimeConfig.portMappings` entry, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    /// `None`: every local address. An unspecified address (`0.0.0.0`, `::`) means the same
    /// but still limits the mapping to its family, as in the reference.
    pub host_ip: Option<IpAddr>,
}

impl PortMapping {
    /// Whether the mapping applies to a container address of `v6`'s family, and the
    /// destination it is limited to (Go: a `hostIP` of the other family is skipped).
    fn destination(&self, v6: bool) -> Option<Option<IpAddr>> {
        match self.host_ip {
            None => Some(None),
            Some(ip) if ip.is_ipv6() != v6 => None,
            Some(ip) if ip.is_unspecified() => Some(None),
            Some(ip) => Some(Some(ip)),
        }
    }
}

/// Where the iptables backend marks hairpin and localhost connections for masquerading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkChain {
    /// `CNI-HOSTPORT-SETMARK`, setting this bit (0..=31), masqueraded by `CNI-HOSTPORT-MASQ`.
    Own { bit: u8 },
    /// A chain someone else (kube-proxy's `KUBE-MARK-MASQ`) keeps.
    External(String),
}

/// What one attachment's mappings need, besides the container address.
#[derive(Debug, Clone)]
pub struct PortMaps<'a> {
    pub network: &'a str,
    pub container_id: &'a str,
    pub mappings: &'a [PortMapping],
    /// Masquerade hairpin and localhost connections (`snat`).
    pub snat: bool,
    /// Mark every connection to a mapped port, not only hairpin (`masqAll`, iptables).
    pub masq_all: bool,
    pub mark: MarkChain,
    /// Extra matches for the entry rules (iptables arguments or nft expressions).
    pub conditions_v4: &'a [String],
    pub conditions_v6: &'a [String],
}

impl PortMaps<'_> {
    fn conditions(&self, v6: bool) -> &[String] {
        match v6 {
            true => self.conditions_v6,
            false => self.conditions_v4,
        }
    }
}

/// Installs the mappings to `ips` (at most one address per family: the container's), one
/// batch per family, the families at once. Rules this attachment had are replaced. On a
/// failure nothing of this attachment is left.
pub(crate) fn add(backend: Backend, maps: &PortMaps, ips: &[IpNetwork]) -> Result<()> {
    validate(backend, maps, ips)?;
    let result = per_family(ips, |ip| match backend {
        Backend::IpTables => iptables::add(maps, ip),
        Backend::NfTables => nftables::add(maps, ip),
    });
    if result.is_err() {
        let _ = remove(backend, maps.network, maps.container_id);
    }
    result
}

/// What the config gives for the scripts (conditions, a chain name, the comment) is
/// checked for every family before any is written.
fn validate(backend: Backend, maps: &PortMaps, ips: &[IpNetwork]) -> Result<()> {
    for ip in ips {
        match backend {
            Backend::IpTables => iptables::validate(maps, ip.is_ipv6())?,
            Backend::NfTables => nftables::validate(maps, ip.is_ipv6())?,
        }
    }
    Ok(())
}

/// Whether every rule [`add`] installs for `ips` is present.
pub(crate) fn check(backend: Backend, maps: &PortMaps, ips: &[IpNetwork]) -> Result<bool> {
    let mut all = true;
    for ip in ips {
        all &= match backend {
            Backend::IpTables => iptables::check(maps, ip)?,
            Backend::NfTables => nftables::check(maps, ip)?,
        };
    }
    Ok(all)
}

/// Removes the attachment's mappings, found by name (no addresses or mappings needed),
/// from both families of `backend`.
pub(crate) fn remove(backend: Backend, network: &str, container_id: &str) -> Result<()> {
    match backend {
        Backend::IpTables => iptables::remove(network, container_id),
        Backend::NfTables => nftables::remove(container_id),
    }
}

/// CNI GC: removes the iptables mappings of `network` whose container is not in `valid`.
/// The nftables rules are named by container ID only, not by network, so GC of one
/// network cannot tell another network's rules from stale ones there: they are kept.
pub(crate) fn gc(network: &str, valid: &[&str]) -> Result<()> {
    iptables::gc(network, valid)
}

/// `op` for each address (one per family), the families at once; every failure returned.
fn per_family(ips: &[IpNetwork], op: impl Fn(&IpNetwork) -> Result<()> + Sync) -> Result<()> {
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let op = &op;
        let started: Vec<_> = ips
            .iter()
            .map(|ip| sysproc::task::start(s, move || op(ip)))
            .collect();
        started
            .into_iter()
            .map(sysproc::task::Started::join)
            .collect()
    });
    FirewallError::collect(results.into_iter().filter_map(Result::err).collect())
}

#[cfg(test)]
mod tests;
