//! What a plugin asks of the kernel for one attachment: the host and container namespaces,
//! a netlink connection in either ([`Links`]), sysctls, and the attachment's firewall rules
//! ([`Firewall`], stated as intent); for portmap, its port mappings ([`PortMapper`]). The
//! plugins' verbs are written against [`Kernel`] (portmap's against [`PortMapper`]);
//! [`HostKernel`] is the node itself, [`fake::FakeKernel`] (feature `fake`) keeps links,
//! addresses, routes, sysctls and rules in memory and logs every change, so the plugins'
//! decisions (rollback order, DEL's tolerance, CHECK) are tested without root.

use std::fmt::Debug;

use ipnetwork::IpNetwork;
use sysproc::netns::{NetnsError, OpenOnce};

use crate::firewall::{Attachment, Backend, FirewallError, iptables};
use crate::netlink::{Address, IpFamily, Link, NetlinkError, Route, RouteSpec};
use crate::sysctl::SysctlError;

#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod host;
mod portmap;

pub use host::HostKernel;
pub use portmap::PortMapper;

/// One sysctl for [`Kernel::sysctls_in`]: the path components under `/proc/sys` (an
/// interface name may hold dots) and the value; a failure of one not `required` is
/// ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysctl<'a> {
    pub name: Vec<&'a str>,
    pub value: &'a str,
    pub required: bool,
}

/// The node as a plugin's verbs see it (`Sync`: DEL runs its steps on scoped threads).
pub trait Kernel: Firewall + Sync {
    /// An open network namespace as this kernel holds it (the node's: an open nsfs file;
    /// holding it keeps the namespace alive).
    type Netns: Debug + Send + Sync;
    /// A netlink connection in one namespace.
    type Conn: Links;

    /// A netlink connection in the plugin's (host) namespace.
    fn host(&self) -> Result<Self::Conn, NetlinkError>;
    /// The namespace at `path` (Go `GetNS`: it must be a namespace file), opened at most
    /// once through `once` (CNI_NETNS: shared with skel's own-netns check).
    fn open_netns(&self, path: &str, once: &OpenOnce) -> Result<Self::Netns, NetnsError>;
    /// The plugin's own namespace.
    fn own_netns(&self) -> Result<Self::Netns, NetnsError>;
    /// A netlink connection inside `ns`.
    fn links_in(&self, ns: &Self::Netns) -> Result<Self::Conn, NetlinkError>;
    /// A veth pair: `name` in `on`'s namespace, `peer` (with `peer_mac`) born in `peer_ns`.
    #[allow(clippy::too_many_arguments)] // the pair's two names, two places, MTU and MAC
    fn create_veth(
        &self,
        on: &Self::Conn,
        name: &str,
        peer: &str,
        mtu: Option<u32>,
        peer_mac: Option<[u8; 6]>,
        peer_ns: &Self::Netns,
    ) -> Result<(), NetlinkError>;
    /// The id `on`'s namespace gives `ns` (`None`: it has none).
    fn netns_id(&self, on: &Self::Conn, ns: &Self::Netns) -> Result<Option<i32>, NetlinkError>;
    /// Writes `settings` inside `ns` in one trip, in order, up to the first failure of a
    /// required one (its index and error).
    fn sysctls_in(
        &self,
        ns: &Self::Netns,
        settings: &[Sysctl],
    ) -> Result<Result<(), (usize, SysctlError)>, NetnsError>;
    /// Writes a sysctl of the host namespace unless it holds `value` already.
    fn host_sysctl(&self, name: &[&str], value: &str) -> Result<(), SysctlError>;
}

/// What a coming [`Firewall::masquerade`] may use that was readied before the addresses
/// were known (an `iptables-restore` started while IPAM runs). Dropped unused, it costs
/// nothing more.
#[derive(Default)]
pub struct MasqueradeReady(pub(crate) Option<iptables::Prestarted>);

/// One attachment's firewall rules: the masquerade of its addresses and the MAC spoof
/// check of its host veth. Which tool runs (iptables-restore, nft) and when it starts is
/// the implementation's business.
pub trait Firewall: Sync {
    /// Readies a coming [`Firewall::masquerade`] with `backend` (`None`: automatic).
    fn prepare_masquerade(&self, backend: Option<Backend>) -> MasqueradeReady;
    /// Masquerades traffic from `ips` leaving the attachment's network.
    fn masquerade(
        &self,
        backend: Option<Backend>,
        att: &Attachment,
        ips: &[IpNetwork],
        ready: MasqueradeReady,
    ) -> Result<(), FirewallError>;
    /// Whether the masquerade of `ips` is in place.
    fn masquerade_present(
        &self,
        backend: Option<Backend>,
        att: &Attachment,
        ips: &[IpNetwork],
    ) -> Result<bool, FirewallError>;
    /// Removes the attachment's masquerade (with either backend); absent is success.
    fn unmasquerade(&self, att: &Attachment, ips: &[IpNetwork]) -> Result<(), FirewallError>;
    /// Removes the masquerade of every attachment of `network` not in `valid`
    /// (container id, ifname).
    fn collect_masquerades(
        &self,
        network: &str,
        valid: &[(&str, &str)],
    ) -> Result<(), FirewallError>;
    /// Drops frames from `host_veth` whose source MAC is not `mac`.
    fn spoof_check(
        &self,
        container_id: &str,
        ifname: &str,
        host_veth: &str,
        mac: &str,
    ) -> Result<(), FirewallError>;
    /// Whether the spoof check is in place.
    fn spoof_check_present(
        &self,
        container_id: &str,
        ifname: &str,
        host_veth: &str,
        mac: &str,
    ) -> Result<bool, FirewallError>;
    /// Removes the attachment's spoof check; absent is success.
    fn remove_spoof_check(&self, container_id: &str, ifname: &str) -> Result<(), FirewallError>;
    /// Removes the spoof check of every attachment not in `valid` (container id, ifname).
    fn collect_spoof_checks(&self, valid: &[(&str, &str)]) -> Result<(), FirewallError>;
}

/// One netlink connection, bound to one namespace (the calls that stay in it; the two that
/// name another namespace are [`Kernel::create_veth`] and [`Kernel::netns_id`]).
pub trait Links {
    fn link_by_name(&self, name: &str) -> Result<Option<Link>, NetlinkError>;
    fn link_by_index(&self, index: u32) -> Result<Link, NetlinkError>;
    fn create_bridge(&self, name: &str, mtu: Option<u32>) -> Result<(), NetlinkError>;
    fn set_up(&self, index: u32) -> Result<(), NetlinkError>;
    fn set_down(&self, index: u32) -> Result<(), NetlinkError>;
    fn set_promisc(&self, index: u32, on: bool) -> Result<(), NetlinkError>;
    fn set_master(&self, index: u32, master: u32) -> Result<(), NetlinkError>;
    fn set_mac(&self, index: u32, mac: [u8; 6]) -> Result<(), NetlinkError>;
    fn set_port_options(
        &self,
        index: u32,
        hairpin: Option<bool>,
        isolated: Option<bool>,
    ) -> Result<(), NetlinkError>;
    fn delete_link(&self, index: u32) -> Result<(), NetlinkError>;
    fn wait_oper_up(&self, index: u32) -> Result<Link, NetlinkError>;
    fn addresses(&self, index: Option<u32>) -> Result<Vec<Address>, NetlinkError>;
    fn add_address(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError>;
    fn add_address_nodad(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError>;
    fn del_address(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError>;
    fn settle_addresses(
        &self,
        index: u32,
        timeout: std::time::Duration,
    ) -> Result<(), NetlinkError>;
    fn routes(&self, family: IpFamily) -> Result<Vec<Route>, NetlinkError>;
    fn add_route(&self, spec: &RouteSpec) -> Result<(), NetlinkError>;
    fn bridge_vlan_add(
        &self,
        port: u32,
        vid: u16,
        pvid: bool,
        untagged: bool,
    ) -> Result<(), NetlinkError>;
    fn bridge_vlan_del(&self, port: u32, vid: u16) -> Result<(), NetlinkError>;
    fn set_vlan_filtering(&self, bridge: u32, on: bool) -> Result<(), NetlinkError>;
}
