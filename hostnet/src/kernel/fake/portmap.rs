//! [`PortMapper`] of the fake: an attachment's mappings are one rule per address,
//! `"portmap <backend> <network> <container id> <address> <mappings>"`, and a backend in
//! [`State::unusable`] fails every call (its tool is missing). Logged as `"fw: ..."`;
//! probes as `"fw: probe <backend>"`, so a test sees when the automatic choice probed.

use std::net::Ipv4Addr;

use ipnetwork::IpNetwork;

use super::{FakeKernel, HOST, State, denied, fw_err};
use crate::firewall::portmap::{LocalnetError, PortMapping, PortMaps};
use crate::firewall::{Backend, FirewallError};
use crate::kernel::PortMapper;

fn mappings_text(mappings: &[PortMapping]) -> String {
    let one = |m: &PortMapping| {
        let on = m.host_ip.map_or(String::new(), |ip| format!("@{ip}"));
        let p = m.protocol.as_str();
        format!("{p}{on}:{}->{}", m.host_port, m.container_port)
    };
    mappings.iter().map(one).collect::<Vec<_>>().join(",")
}

fn rule(backend: Backend, maps: &PortMaps, ip: &IpNetwork) -> String {
    let (b, net, id) = (backend.as_str(), maps.network, maps.container_id);
    format!(
        "portmap {b} {net} {id} {} {}",
        ip.ip(),
        mappings_text(maps.mappings)
    )
}

/// `(backend, network, container id)` of a portmap rule.
fn owner(rule: &str) -> Option<(&str, &str, &str)> {
    let mut words = rule.split(' ');
    (words.next() == Some("portmap")).then_some(())?;
    Some((words.next()?, words.next()?, words.next()?))
}

impl FakeKernel {
    /// A portmap call with `backend`: fails when asked to or when the backend is unusable,
    /// else `f` changes the rules and the call is logged.
    fn port_call<T>(
        &self,
        backend: Backend,
        entry: String,
        f: impl FnOnce(&mut State) -> T,
    ) -> Result<T, FirewallError> {
        let mut st = self.state();
        let entry = format!("fw: {entry}");
        if st.fails(&entry) || st.unusable.contains(&backend) {
            return Err(fw_err(entry));
        }
        let out = f(&mut st);
        st.log.push(entry);
        Ok(out)
    }

    /// Makes `backend`'s tool missing on the node.
    pub fn make_unusable(&self, backend: Backend) {
        self.state().unusable.insert(backend);
    }
}

impl PortMapper for FakeKernel {
    fn add_port_maps(
        &self,
        backend: Backend,
        maps: &PortMaps,
        ips: &[IpNetwork],
    ) -> Result<(), FirewallError> {
        let (b, net, id) = (backend.as_str(), maps.network, maps.container_id);
        self.port_call(backend, format!("portmap add {b} {net} {id}"), |st| {
            st.rules
                .retain(|r| owner(r) != Some((backend.as_str(), net, id)));
            st.rules
                .extend(ips.iter().map(|ip| rule(backend, maps, ip)));
        })
    }

    fn port_maps_present(
        &self,
        backend: Backend,
        maps: &PortMaps,
        ips: &[IpNetwork],
    ) -> Result<bool, FirewallError> {
        let (b, net, id) = (backend.as_str(), maps.network, maps.container_id);
        self.port_call(backend, format!("portmap check {b} {net} {id}"), |st| {
            ips.iter()
                .all(|ip| st.rules.contains(&rule(backend, maps, ip)))
        })
    }

    /// nftables rules are named by container ID alone: any network's go, as on a node.
    fn remove_port_maps(
        &self,
        backend: Backend,
        network: &str,
        container_id: &str,
    ) -> Result<(), FirewallError> {
        let b = backend.as_str();
        let entry = format!("portmap remove {b} {network} {container_id}");
        self.port_call(backend, entry, |st| {
            st.rules.retain(|r| match owner(r) {
                Some((rb, _, id)) if backend == Backend::NfTables => (rb, id) != (b, container_id),
                Some(o) => o != (b, network, container_id),
                None => true,
            });
        })
    }

    fn gc_port_maps(&self, network: &str, valid: &[&str]) -> Result<(), FirewallError> {
        let b = Backend::IpTables;
        self.port_call(b, format!("portmap gc {network}"), |st| {
            st.rules.retain(|r| match owner(r) {
                Some((rb, net, id)) => rb != b.as_str() || net != network || valid.contains(&id),
                None => true,
            });
        })
    }

    fn tool_usable(&self, backend: Backend) -> bool {
        let mut st = self.state();
        st.log.push(format!("fw: probe {}", backend.as_str()));
        !st.unusable.contains(&backend)
    }

    fn delete_udp_flows(&self, mappings: &[PortMapping], v6: bool) -> Result<(), FirewallError> {
        let mut st = self.state();
        let family = if v6 { "ipv6" } else { "ipv4" };
        let entry = format!(
            "fw: conntrack delete udp {family} {}",
            mappings_text(mappings)
        );
        if st.fails(&entry) {
            return Err(fw_err(entry));
        }
        st.log.push(entry);
        Ok(())
    }

    fn route_localnet(&self, ip: Ipv4Addr) -> Result<(), LocalnetError> {
        let mut st = self.state();
        let entry = format!("{HOST}: route_localnet to {ip}");
        if st.fails(&entry) {
            return Err(denied("net.ipv4.conf.cni0.route_localnet").into());
        }
        st.log.push(entry);
        Ok(())
    }
}
