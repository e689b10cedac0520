//! The node itself: [`HostKernel`] hands each call to `netlink`, `sysctl`, `firewall` and
//! `sysproc::netns`.

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use ipnetwork::IpNetwork;
use sysproc::netns::{Netns, NetnsError, OpenOnce};

use super::{Firewall, Kernel, Links, MasqueradeReady, PortMapper, Sysctl};
use crate::firewall::portmap::{self, LocalnetError, PortMapping, PortMaps};
use crate::firewall::{self, Attachment, Backend, FirewallError, backend, spoofcheck};
use crate::netlink::{Address, IpFamily, Link, Netlink, NetlinkError, Route, RouteSpec};
use crate::sysctl::{self, SysctlError};

/// The node's kernel, in the namespaces of the calling thread and the ones it opens.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostKernel;

impl Kernel for HostKernel {
    type Netns = Arc<Netns>;
    type Conn = Netlink;

    fn host(&self) -> Result<Netlink, NetlinkError> {
        Netlink::current()
    }

    fn open_netns(&self, path: &str, once: &OpenOnce) -> Result<Arc<Netns>, NetnsError> {
        once.open(path)
    }

    fn own_netns(&self) -> Result<Arc<Netns>, NetnsError> {
        Netns::current().map(Arc::new)
    }

    fn links_in(&self, ns: &Arc<Netns>) -> Result<Netlink, NetlinkError> {
        Netlink::in_netns(ns)
    }

    fn create_veth(
        &self,
        on: &Netlink,
        name: &str,
        peer: &str,
        mtu: Option<u32>,
        peer_mac: Option<[u8; 6]>,
        peer_ns: &Arc<Netns>,
    ) -> Result<(), NetlinkError> {
        on.create_veth(name, peer, mtu, peer_mac, peer_ns.as_fd())
    }

    fn netns_id(&self, on: &Netlink, ns: &Arc<Netns>) -> Result<Option<i32>, NetlinkError> {
        on.netns_id(ns.as_fd())
    }

    fn sysctls_in(
        &self,
        ns: &Arc<Netns>,
        settings: &[Sysctl],
    ) -> Result<Result<(), (usize, SysctlError)>, NetnsError> {
        ns.run(|| {
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
}

impl Firewall for HostKernel {
    fn prepare_masquerade(&self, backend: Option<Backend>) -> MasqueradeReady {
        MasqueradeReady(firewall::prestart_ipmasq(backend))
    }

    fn masquerade(
        &self,
        backend: Option<Backend>,
        att: &Attachment,
        ips: &[IpNetwork],
        ready: MasqueradeReady,
    ) -> Result<(), FirewallError> {
        firewall::setup_ipmasq_with(backend, att, ips, ready.0).map(drop)
    }

    fn masquerade_present(
        &self,
        backend: Option<Backend>,
        att: &Attachment,
        ips: &[IpNetwork],
    ) -> Result<bool, FirewallError> {
        firewall::check_ipmasq(backend, att, ips)
    }

    fn unmasquerade(&self, att: &Attachment, ips: &[IpNetwork]) -> Result<(), FirewallError> {
        firewall::teardown_ipmasq(att, ips)
    }

    fn collect_masquerades(
        &self,
        network: &str,
        valid: &[(&str, &str)],
    ) -> Result<(), FirewallError> {
        firewall::gc_ipmasq(network, valid)
    }

    fn spoof_check(
        &self,
        container_id: &str,
        ifname: &str,
        host_veth: &str,
        mac: &str,
    ) -> Result<(), FirewallError> {
        spoofcheck::setup(container_id, ifname, host_veth, mac)
    }

    fn spoof_check_present(
        &self,
        container_id: &str,
        ifname: &str,
        host_veth: &str,
        mac: &str,
    ) -> Result<bool, FirewallError> {
        spoofcheck::check(container_id, ifname, host_veth, mac)
    }

    fn remove_spoof_check(&self, container_id: &str, ifname: &str) -> Result<(), FirewallError> {
        spoofcheck::teardown(container_id, ifname)
    }

    fn collect_spoof_checks(&self, valid: &[(&str, &str)]) -> Result<(), FirewallError> {
        spoofcheck::gc(valid)
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
    fn set_up(&self, index: u32) -> Result<(), NetlinkError> {
        Netlink::set_up(self, index)
    }
    fn set_down(&self, index: u32) -> Result<(), NetlinkError> {
        Netlink::set_down(self, index)
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

impl PortMapper for HostKernel {
    fn add_port_maps(
        &self,
        backend: Backend,
        maps: &PortMaps,
        ips: &[IpNetwork],
    ) -> Result<(), FirewallError> {
        portmap::add(backend, maps, ips)
    }

    fn port_maps_present(
        &self,
        backend: Backend,
        maps: &PortMaps,
        ips: &[IpNetwork],
    ) -> Result<bool, FirewallError> {
        portmap::check(backend, maps, ips)
    }

    fn remove_port_maps(
        &self,
        backend: Backend,
        network: &str,
        container_id: &str,
    ) -> Result<(), FirewallError> {
        portmap::remove(backend, network, container_id)
    }

    fn gc_port_maps(&self, network: &str, valid: &[&str]) -> Result<(), FirewallError> {
        portmap::gc(network, valid)
    }

    fn tool_usable(&self, b: Backend) -> bool {
        backend::usable(b)
    }

    fn delete_udp_flows(&self, mappings: &[PortMapping], v6: bool) -> Result<(), FirewallError> {
        portmap::delete_udp_entries(mappings, v6)
    }

    fn route_localnet(&self, ip: Ipv4Addr) -> Result<(), LocalnetError> {
        portmap::enable_route_localnet(ip).map(drop)
    }
}
