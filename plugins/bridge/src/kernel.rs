//! The seam between the bridge's verbs and the node: netlink in the host and container
//! namespaces ([`Links`]), namespaces, sysctls, the firewall and IPAM delegation
//! ([`Kernel`]). [`Real`] hands each call to `hostnet`, `sysproc::netns` and
//! `libcni::invoke`; the unit tests drive the verbs through a recording fake
//! (`kernel/fake.rs`), so rollback order, DEL's tolerance and CHECK's decisions are
//! tested without root. The verbs take `&dyn Kernel` (shared by DEL's concurrent steps,
//! hence `Sync`).

use hostnet::firewall::iptables::Prestarted;
use hostnet::firewall::{self, Attachment, Backend, FirewallError, spoofcheck};
use hostnet::netlink::{Address, IpFamily, Link, Netlink, NetlinkError, Route, RouteSpec};
use hostnet::sysctl::{self, SysctlError};
use ipnetwork::IpNetwork;
use libcni::invoke::Delegate;
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;
use sysproc::netns::{Netns, NetnsError};

#[cfg(test)]
pub mod fake;

/// An open network namespace (the container's, opened once per call and shared with
/// skel, or the plugin's own). Holding it keeps the namespace alive.
#[derive(Debug)]
pub enum Sandbox {
    Real(Arc<Netns>),
    /// The fake's namespaces are names.
    #[cfg(test)]
    Fake(String),
}

impl Sandbox {
    /// The namespace itself; the fake's are only names.
    fn netns(&self) -> Option<&Netns> {
        match self {
            Sandbox::Real(netns) => Some(netns),
            #[cfg(test)]
            Sandbox::Fake(_) => None,
        }
    }

    /// The namespace, for the calls that need a real one.
    fn real(&self) -> Result<&Netns, NetlinkError> {
        self.netns().ok_or_else(|| NetlinkError::Os {
            op: "use a namespace that is only a name".into(),
            source: io::Error::from_raw_os_error(9), // EBADF
        })
    }

    /// The path it was opened by (the fake's: its name).
    #[cfg(test)]
    pub fn name(&self) -> &str {
        match self {
            Sandbox::Real(netns) => netns.path().to_str().unwrap_or_default(),
            Sandbox::Fake(name) => name,
        }
    }
}

/// One sysctl for [`Kernel::sysctls_in`]: the path components under `/proc/sys` (an
/// interface name may hold dots) and the value; a failure of one not `required` is
/// ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysctl<'a> {
    pub name: Vec<&'a str>,
    pub value: &'a str,
    pub required: bool,
}

/// The node as the bridge's verbs see it (all but netlink connections, [`Links`]).
pub trait Kernel: Sync {
    /// A netlink connection in the plugin's (host) namespace.
    fn host(&self) -> Result<Box<dyn Links>, NetlinkError>;
    /// The call's CNI_NETNS (Go `GetNS`: it must be a namespace file), opened once per
    /// call ([`CmdArgs::open_netns`]).
    fn open_netns(&self, args: &CmdArgs) -> Result<Sandbox, NetnsError>;
    /// The plugin's own namespace.
    fn own_netns(&self) -> Result<Sandbox, NetnsError>;
    /// A netlink connection inside `ns`.
    fn links_in(&self, ns: &Sandbox) -> Result<Box<dyn Links>, NetlinkError>;
    /// Writes `settings` inside `ns` in one trip, in order, up to the first failure of a
    /// required one (its index and error).
    fn sysctls_in(
        &self,
        ns: &Sandbox,
        settings: &[Sysctl],
    ) -> Result<Result<(), (usize, SysctlError)>, NetnsError>;
    /// Writes a sysctl of the host namespace unless it holds `value` already.
    fn host_sysctl(&self, name: &[&str], value: &str) -> Result<(), SysctlError>;

    /// The masquerade's tool started before the addresses are known (`None`: not started;
    /// [`Kernel::setup_ipmasq`] then starts its own).
    fn prestart_ipmasq(&self, backend: Option<Backend>) -> Option<Prestarted>;
    fn setup_ipmasq(
        &self,
        backend: Option<Backend>,
        att: &Attachment,
        ips: &[IpNetwork],
        pre: Option<Prestarted>,
    ) -> Result<(), FirewallError>;
    fn check_ipmasq(
        &self,
        backend: Option<Backend>,
        att: &Attachment,
        ips: &[IpNetwork],
    ) -> Result<bool, FirewallError>;
    fn teardown_ipmasq(&self, att: &Attachment, ips: &[IpNetwork]) -> Result<(), FirewallError>;
    fn gc_ipmasq(&self, network: &str, valid: &[(&str, &str)]) -> Result<(), FirewallError>;
    fn setup_spoofcheck(
        &self,
        container_id: &str,
        ifname: &str,
        host_veth: &str,
        mac: &str,
    ) -> Result<(), FirewallError>;
    fn check_spoofcheck(
        &self,
        container_id: &str,
        ifname: &str,
        host_veth: &str,
        mac: &str,
    ) -> Result<bool, FirewallError>;
    fn teardown_spoofcheck(&self, container_id: &str, ifname: &str) -> Result<(), FirewallError>;
    fn gc_spoofcheck(&self, valid: &[(&str, &str)]) -> Result<(), FirewallError>;

    /// IPAM ADD through the delegated plugin.
    fn ipam_add(&self, ipam: &Delegate) -> Result<CniResult, libcni::Error>;
    /// An IPAM verb without a result: DEL, CHECK, STATUS, GC.
    fn ipam_run(&self, ipam: &Delegate, verb: &str) -> Result<(), libcni::Error>;
}

/// One netlink connection, bound to one namespace (`hostnet::netlink::Netlink`'s calls
/// that the bridge makes).
pub trait Links {
    fn link_by_name(&self, name: &str) -> Result<Option<Link>, NetlinkError>;
    fn link_by_index(&self, index: u32) -> Result<Link, NetlinkError>;
    fn create_bridge(&self, name: &str, mtu: Option<u32>) -> Result<(), NetlinkError>;
    /// A veth pair: `name` here, `peer` (with `peer_mac`) born in `peer_ns`.
    fn create_veth(
        &self,
        name: &str,
        peer: &str,
        mtu: Option<u32>,
        peer_mac: Option<[u8; 6]>,
        peer_ns: &Sandbox,
    ) -> Result<(), NetlinkError>;
    fn set_up(&self, index: u32) -> Result<(), NetlinkError>;
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
    fn settle_addresses(&self, index: u32, timeout: Duration) -> Result<(), NetlinkError>;
    fn routes(&self, family: IpFamily) -> Result<Vec<Route>, NetlinkError>;
    fn add_route(&self, spec: &RouteSpec) -> Result<(), NetlinkError>;
    /// The id this namespace gives `ns` (`None`: it has none).
    fn netns_id(&self, ns: &Sandbox) -> Result<Option<i32>, NetlinkError>;
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

/// The node itself.
pub struct Real;

impl Kernel for Real {
    fn host(&self) -> Result<Box<dyn Links>, NetlinkError> {
        Ok(Box::new(Netlink::current()?))
    }

    fn open_netns(&self, args: &CmdArgs) -> Result<Sandbox, NetnsError> {
        args.open_netns().map(Sandbox::Real)
    }

    fn own_netns(&self) -> Result<Sandbox, NetnsError> {
        Netns::current().map(|ns| Sandbox::Real(Arc::new(ns)))
    }

    fn links_in(&self, ns: &Sandbox) -> Result<Box<dyn Links>, NetlinkError> {
        Ok(Box::new(Netlink::in_netns(ns.real()?)?))
    }

    fn sysctls_in(
        &self,
        ns: &Sandbox,
        settings: &[Sysctl],
    ) -> Result<Result<(), (usize, SysctlError)>, NetnsError> {
        let Some(netns) = ns.netns() else {
            return Ok(Err((
                0,
                SysctlError::Io {
                    path: "/proc/sys".into(),
                    source: io::Error::from_raw_os_error(9), // EBADF
                },
            )));
        };
        netns.run(|| {
            for (i, s) in settings.iter().enumerate() {
                let written = sysctl::path(&s.name).and_then(|p| sysctl::ensure_path(&p, s.value));
                if let (Err(e), true) = (written, s.required) {
                    return Err((i, e));
                }
            }
            Ok(())
        })
    }

    fn host_sysctl(&self, name: &[&str], value: &str) -> Result<(), SysctlError> {
        sysctl::ensure_path(&sysctl::path(name)?, value).map(drop)
    }

    fn prestart_ipmasq(&self, backend: Option<Backend>) -> Option<Prestarted> {
        firewall::prestart_ipmasq(backend)
    }

    fn setup_ipmasq(
        &self,
        backend: Option<Backend>,
        att: &Attachment,
        ips: &[IpNetwork],
        pre: Option<Prestarted>,
    ) -> Result<(), FirewallError> {
        firewall::setup_ipmasq_with(backend, att, ips, pre).map(drop)
    }

    fn check_ipmasq(
        &self,
        backend: Option<Backend>,
        att: &Attachment,
        ips: &[IpNetwork],
    ) -> Result<bool, FirewallError> {
        firewall::check_ipmasq(backend, att, ips)
    }

    fn teardown_ipmasq(&self, att: &Attachment, ips: &[IpNetwork]) -> Result<(), FirewallError> {
        firewall::teardown_ipmasq(att, ips)
    }

    fn gc_ipmasq(&self, network: &str, valid: &[(&str, &str)]) -> Result<(), FirewallError> {
        firewall::gc_ipmasq(network, valid)
    }

    fn setup_spoofcheck(
        &self,
        container_id: &str,
        ifname: &str,
        host_veth: &str,
        mac: &str,
    ) -> Result<(), FirewallError> {
        spoofcheck::setup(container_id, ifname, host_veth, mac)
    }

    fn check_spoofcheck(
        &self,
        container_id: &str,
        ifname: &str,
        host_veth: &str,
        mac: &str,
    ) -> Result<bool, FirewallError> {
        spoofcheck::check(container_id, ifname, host_veth, mac)
    }

    fn teardown_spoofcheck(&self, container_id: &str, ifname: &str) -> Result<(), FirewallError> {
        spoofcheck::teardown(container_id, ifname)
    }

    fn gc_spoofcheck(&self, valid: &[(&str, &str)]) -> Result<(), FirewallError> {
        spoofcheck::gc(valid)
    }

    fn ipam_add(&self, ipam: &Delegate) -> Result<CniResult, libcni::Error> {
        ipam.add()
    }

    fn ipam_run(&self, ipam: &Delegate, verb: &str) -> Result<(), libcni::Error> {
        ipam.run(verb)
    }
}

impl Links for Netlink {
    fn link_by_name(&self, name: &str) -> Result<Option<Link>, NetlinkError> {
        Netlink::link_by_name(self, name)
    }
    fn link_by_index(&self, index: u32) -> Result<Link, NetlinkError> {
        Netlink::link_by_index(self, index)
    }
    fn create_bridge(&self, name: &str, mtu: Option<u32>) -> Result<(), NetlinkError> {
        Netlink::create_bridge(self, name, mtu)
    }
    fn create_veth(
        &self,
        name: &str,
        peer: &str,
        mtu: Option<u32>,
        peer_mac: Option<[u8; 6]>,
        peer_ns: &Sandbox,
    ) -> Result<(), NetlinkError> {
        Netlink::create_veth(self, name, peer, mtu, peer_mac, peer_ns.real()?.as_fd())
    }
    fn set_up(&self, index: u32) -> Result<(), NetlinkError> {
        Netlink::set_up(self, index)
    }
    fn set_promisc(&self, index: u32, on: bool) -> Result<(), NetlinkError> {
        Netlink::set_promisc(self, index, on)
    }
    fn set_master(&self, index: u32, master: u32) -> Result<(), NetlinkError> {
        Netlink::set_master(self, index, master)
    }
    fn set_mac(&self, index: u32, mac: [u8; 6]) -> Result<(), NetlinkError> {
        Netlink::set_mac(self, index, mac)
    }
    fn set_port_options(
        &self,
        index: u32,
        hairpin: Option<bool>,
        isolated: Option<bool>,
    ) -> Result<(), NetlinkError> {
        Netlink::set_port_options(self, index, hairpin, isolated)
    }
    fn delete_link(&self, index: u32) -> Result<(), NetlinkError> {
        Netlink::delete_link(self, index)
    }
    fn wait_oper_up(&self, index: u32) -> Result<Link, NetlinkError> {
        Netlink::wait_oper_up(self, index)
    }
    fn addresses(&self, index: Option<u32>) -> Result<Vec<Address>, NetlinkError> {
        Netlink::addresses(self, index)
    }
    fn add_address(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        Netlink::add_address(self, index, addr)
    }
    fn add_address_nodad(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        Netlink::add_address_nodad(self, index, addr)
    }
    fn del_address(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        Netlink::del_address(self, index, addr)
    }
    fn settle_addresses(&self, index: u32, timeout: Duration) -> Result<(), NetlinkError> {
        Netlink::settle_addresses(self, index, timeout)
    }
    fn routes(&self, family: IpFamily) -> Result<Vec<Route>, NetlinkError> {
        Netlink::routes(self, family)
    }
    fn add_route(&self, spec: &RouteSpec) -> Result<(), NetlinkError> {
        Netlink::add_route(self, spec)
    }
    fn netns_id(&self, ns: &Sandbox) -> Result<Option<i32>, NetlinkError> {
        Netlink::netns_id(self, ns.real()?.as_fd())
    }
    fn bridge_vlan_add(
        &self,
        port: u32,
        vid: u16,
        pvid: bool,
        untagged: bool,
    ) -> Result<(), NetlinkError> {
        Netlink::bridge_vlan_add(self, port, vid, pvid, untagged)
    }
    fn bridge_vlan_del(&self, port: u32, vid: u16) -> Result<(), NetlinkError> {
        Netlink::bridge_vlan_del(self, port, vid)
    }
    fn set_vlan_filtering(&self, bridge: u32, on: bool) -> Result<(), NetlinkError> {
        Netlink::set_vlan_filtering(self, bridge, on)
    }
}
