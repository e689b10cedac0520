//! A recording fake of the node for the plugins' unit tests: namespaces are names, links,
//! addresses and routes live in memory, firewall rules are strings. Every change is logged
//! in order (`"<ns>: <call> <args>"`, `"fw: ..."`), and any call can be made to fail
//! ([`FakeKernel::fail`]) by a prefix of its log line. A test's own stand-ins (the bridge's
//! IPAM plugin) log and fail through the same list ([`FakeKernel::outside_call`]).

use super::{Firewall, Kernel, Links, MasqueradeReady, Sysctl};
use crate::firewall::{Attachment, Backend, FirewallError};
use crate::netlink::{Address, IpFamily, Link, NetlinkError, Route, RouteSpec};
use crate::sysctl::SysctlError;
use ipnetwork::IpNetwork;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use sysproc::netns::{NetnsError, OpenOnce};

mod portmap;

/// The plugin's own namespace.
pub const HOST: &str = "host";

const EEXIST: i32 = 17;
const ENODEV: i32 = 19;
const EPERM: i32 = 1;

/// The fake node; clones share it.
#[derive(Clone, Default)]
pub struct FakeKernel {
    state: Arc<Mutex<State>>,
}

/// A namespace of the fake: its name (a container's: the CNI_NETNS path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeNetns(pub String);

#[derive(Debug, Default)]
pub struct State {
    /// Every change, in order.
    pub log: Vec<String>,
    /// Calls to fail (prefixes of their log lines), each as often as it is listed.
    failing: Vec<String>,
    /// The namespaces that exist, by name: [`HOST`] and the containers'.
    pub namespaces: BTreeMap<String, Ns>,
    next_index: u32,
    /// "ipmasq <network> <container id> <ifname>", "spoofcheck <container id> <ifname>" and
    /// "portmap <backend> <network> <container id> <address> <mappings>".
    pub rules: BTreeSet<String>,
    /// The firewall backends whose tool is missing here (every call with them fails).
    pub unusable: BTreeSet<Backend>,
    /// "<ns>: <sysctl name>" -> value.
    pub sysctls: BTreeMap<String, String>,
}

/// A listed failure no call matched means a test exercised nothing: the call was renamed
/// or never made.
impl Drop for State {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert!(
                self.failing.is_empty(),
                "failures listed but never met: {:?}",
                self.failing
            );
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Ns {
    /// How other namespaces name this one (`IFLA_LINK_NETNSID`).
    pub id: i32,
    pub links: Vec<Link>,
    pub addrs: Vec<Address>,
    pub routes: Vec<Route>,
}

impl FakeKernel {
    /// A node with only its own namespace.
    pub fn new() -> FakeKernel {
        let fake = FakeKernel::default();
        fake.add_netns(HOST);
        fake
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add_netns(&self, name: &str) {
        let mut st = self.state();
        let id = st.namespaces.len() as i32;
        st.namespaces.insert(
            name.to_string(),
            Ns {
                id,
                ..Ns::default()
            },
        );
    }

    /// The namespace vanishes (with its links' veth peers, as the kernel does).
    pub fn remove_netns(&self, name: &str) {
        let mut st = self.state();
        if let Some(ns) = st.namespaces.remove(name) {
            for link in ns.links {
                if let Some(peer) = link.peer_index {
                    st.remove_link(peer);
                }
            }
        }
    }

    /// The next call whose log line starts with `prefix` fails (EPERM).
    pub fn fail(&self, prefix: &str) {
        self.state().failing.push(prefix.to_string());
    }

    /// A call of something beside the kernel (`entry`, e.g. `ipam: ADD`): `false` when a
    /// listed failure takes it, else it is logged and `true`.
    pub fn outside_call(&self, entry: &str) -> bool {
        let mut st = self.state();
        if st.fails(entry) {
            return false;
        }
        st.log.push(entry.to_string());
        true
    }

    /// The log since the last call, emptied.
    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut self.state().log)
    }

    pub fn link(&self, ns: &str, name: &str) -> Option<Link> {
        self.state()
            .namespaces
            .get(ns)?
            .links
            .iter()
            .find(|l| l.name == name)
            .cloned()
    }

    /// A loopback device `lo` in `ns`, down, holding `addrs` (the kernel gives a new
    /// namespace's `lo` 127.0.0.1/8 and ::1/128 as it comes up).
    pub fn add_loopback(&self, ns: &str, addrs: &[&str]) {
        let mut st = self.state();
        let mut lo = st.new_link("lo", "loopback", Some([0; 6]), Some(65536));
        lo.kind = None;
        let index = lo.index;
        let ns = st.namespaces.get_mut(ns).expect("no such namespace");
        ns.links.push(lo);
        for addr in addrs {
            ns.addrs.push(Address {
                index,
                addr: addr.parse().expect("an address with its prefix"),
                tentative: false,
                dadfailed: false,
                scope: 254,
                broadcast: None,
            });
        }
    }

    /// Changes a link as the kernel or an admin would behind the plugin's back.
    pub fn edit_link(&self, ns: &str, name: &str, edit: impl FnOnce(&mut Link)) {
        let mut st = self.state();
        let link = st
            .namespaces
            .get_mut(ns)
            .and_then(|ns| ns.links.iter_mut().find(|l| l.name == name));
        edit(link.expect("no such link"));
    }

    fn links(&self, ns: &str) -> FakeLinks {
        FakeLinks {
            state: Arc::clone(&self.state),
            ns: ns.to_string(),
        }
    }
}

impl State {
    /// Takes a listed failure matching `entry`, if any.
    fn fails(&mut self, entry: &str) -> bool {
        match self
            .failing
            .iter()
            .position(|p| entry.starts_with(p.as_str()))
        {
            Some(i) => {
                self.failing.remove(i);
                true
            }
            None => false,
        }
    }

    /// Fails `entry` if asked to, else logs it when it is a change.
    fn call(&mut self, entry: String, change: bool) -> Result<(), NetlinkError> {
        if self.fails(&entry) {
            return Err(NetlinkError::Os {
                op: entry,
                source: io::Error::from_raw_os_error(EPERM),
            });
        }
        if change {
            self.log.push(entry);
        }
        Ok(())
    }

    fn find(&self, index: u32) -> Option<(&str, &Link)> {
        self.namespaces.iter().find_map(|(name, ns)| {
            ns.links
                .iter()
                .find(|l| l.index == index)
                .map(|l| (name.as_str(), l))
        })
    }

    fn remove_link(&mut self, index: u32) {
        for ns in self.namespaces.values_mut() {
            ns.links.retain(|l| l.index != index);
            ns.addrs.retain(|a| a.index != index);
            ns.routes.retain(|r| r.oif != Some(index));
        }
    }

    fn new_link(&mut self, name: &str, kind: &str, mac: Option<[u8; 6]>, mtu: Option<u32>) -> Link {
        self.next_index += 1;
        let index = self.next_index + 10;
        Link {
            index,
            name: name.to_string(),
            kind: Some(kind.to_string()),
            mac: Some(mac.unwrap_or([0x02, 0, 0, 0, 0, index as u8])),
            mtu: mtu.unwrap_or(1500),
            admin_up: false,
            oper_up: false,
            oper_state: "down".into(),
            master: None,
            peer_index: None,
            peer_netns_id: None,
            promisc: false,
            hairpin: None,
            isolated: None,
        }
    }
}

fn nl_err(op: String, errno: i32) -> NetlinkError {
    NetlinkError::Os {
        op,
        source: io::Error::from_raw_os_error(errno),
    }
}

/// A netlink connection of the fake, in one of its namespaces.
pub struct FakeLinks {
    state: Arc<Mutex<State>>,
    ns: String,
}

impl FakeLinks {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on this namespace's state after the failure check and the log.
    fn change<T>(
        &self,
        call: String,
        f: impl FnOnce(&mut State, &str) -> Result<T, NetlinkError>,
    ) -> Result<T, NetlinkError> {
        let mut st = self.state();
        let entry = format!("{}: {call}", self.ns);
        if st.fails(&entry) {
            return Err(nl_err(entry, EPERM));
        }
        if !st.namespaces.contains_key(&self.ns) {
            return Err(nl_err(entry, 22));
        }
        let out = f(&mut st, &self.ns)?;
        st.log.push(entry);
        Ok(out)
    }

    fn read<T>(&self, call: String, f: impl FnOnce(&Ns) -> T) -> Result<T, NetlinkError> {
        let mut st = self.state();
        let entry = format!("{}: {call}", self.ns);
        st.call(entry.clone(), false)?;
        st.namespaces
            .get(&self.ns)
            .map(f)
            .ok_or_else(|| nl_err(entry, 22))
    }

    fn name_of(&self, index: u32) -> String {
        let st = self.state();
        st.find(index)
            .map_or_else(|| index.to_string(), |(_, l)| l.name.clone())
    }

    fn edit(&self, call: &str, index: u32, f: impl FnOnce(&mut Link)) -> Result<(), NetlinkError> {
        let name = self.name_of(index);
        self.change(format!("{call} {name}"), |st, ns| {
            let link = st
                .namespaces
                .get_mut(ns)
                .and_then(|n| n.links.iter_mut().find(|l| l.index == index));
            let link = link.ok_or_else(|| nl_err(format!("{call} {index}"), ENODEV))?;
            f(link);
            Ok(())
        })
    }
}

impl FakeLinks {
    fn create_veth(
        &self,
        name: &str,
        peer: &str,
        mtu: Option<u32>,
        peer_mac: Option<[u8; 6]>,
        peer_ns: &FakeNetns,
    ) -> Result<(), NetlinkError> {
        let peer_ns = peer_ns.0.clone();
        self.change(format!("create_veth {name} {peer}@{peer_ns}"), |st, ns| {
            let taken = |st: &State, ns: &str, n: &str| {
                st.namespaces
                    .get(ns)
                    .is_some_and(|ns| ns.links.iter().any(|l| l.name == n))
            };
            if !st.namespaces.contains_key(&peer_ns) {
                return Err(nl_err(format!("create {name}"), 2));
            }
            if taken(st, ns, name) || taken(st, &peer_ns, peer) {
                return Err(nl_err(format!("create {name}"), EEXIST));
            }
            let mut here = st.new_link(name, "veth", None, mtu);
            let mut there = st.new_link(peer, "veth", peer_mac, mtu);
            here.peer_index = Some(there.index);
            there.peer_index = Some(here.index);
            if peer_ns != ns {
                here.peer_netns_id = Some(st.namespaces[&peer_ns].id);
                there.peer_netns_id = Some(st.namespaces[ns].id);
            }
            st.namespaces.get_mut(ns).unwrap().links.push(here);
            st.namespaces.get_mut(&peer_ns).unwrap().links.push(there);
            Ok(())
        })
    }

    fn netns_id(&self, other: &FakeNetns) -> Result<Option<i32>, NetlinkError> {
        let other = other.0.clone();
        let here = self.ns.clone();
        self.read(format!("netns_id {other}"), |_| ())?;
        let st = self.state();
        Ok((other != here)
            .then(|| st.namespaces.get(&other).map(|n| n.id))
            .flatten())
    }
}

impl Links for FakeLinks {
    fn link_by_name(&self, name: &str) -> Result<Option<Link>, NetlinkError> {
        self.read(format!("link_by_name {name}"), |ns| {
            ns.links.iter().find(|l| l.name == name).cloned()
        })
    }

    fn link_by_index(&self, index: u32) -> Result<Link, NetlinkError> {
        self.read(format!("link_by_index {index}"), |ns| {
            ns.links.iter().find(|l| l.index == index).cloned()
        })?
        .ok_or_else(|| nl_err(format!("link {index}"), ENODEV))
    }

    fn create_bridge(&self, name: &str, mtu: Option<u32>) -> Result<(), NetlinkError> {
        self.change(format!("create_bridge {name}"), |st, ns| {
            if st.namespaces[ns].links.iter().any(|l| l.name == name) {
                return Err(nl_err(format!("create {name}"), EEXIST));
            }
            let link = st.new_link(name, "bridge", None, mtu);
            st.namespaces.get_mut(ns).unwrap().links.push(link);
            Ok(())
        })
    }

    fn set_up(&self, index: u32) -> Result<(), NetlinkError> {
        self.edit("set_up", index, |l| {
            l.admin_up = true;
            l.oper_up = true;
            l.oper_state = "up".into();
        })
    }

    fn set_down(&self, index: u32) -> Result<(), NetlinkError> {
        self.edit("set_down", index, |l| {
            l.admin_up = false;
            l.oper_up = false;
            l.oper_state = "down".into();
        })
    }

    fn set_promisc(&self, index: u32, on: bool) -> Result<(), NetlinkError> {
        self.edit("set_promisc", index, |l| l.promisc = on)
    }

    fn set_master(&self, index: u32, master: u32) -> Result<(), NetlinkError> {
        let bridge = self.name_of(master);
        self.edit(&format!("set_master {bridge}"), index, |l| {
            l.master = Some(master);
            l.hairpin = Some(false);
            l.isolated = Some(false);
        })
    }

    fn set_mac(&self, index: u32, mac: [u8; 6]) -> Result<(), NetlinkError> {
        self.edit("set_mac", index, |l| l.mac = Some(mac))
    }

    fn set_port_options(
        &self,
        index: u32,
        hairpin: Option<bool>,
        isolated: Option<bool>,
    ) -> Result<(), NetlinkError> {
        self.edit("set_port_options", index, |l| {
            l.hairpin = hairpin.or(l.hairpin);
            l.isolated = isolated.or(l.isolated);
        })
    }

    fn delete_link(&self, index: u32) -> Result<(), NetlinkError> {
        let name = self.name_of(index);
        self.change(format!("delete_link {name}"), |st, ns| {
            let link = st.namespaces[ns]
                .links
                .iter()
                .find(|l| l.index == index)
                .cloned();
            let link = link.ok_or_else(|| nl_err(format!("delete {index}"), ENODEV))?;
            st.remove_link(index);
            if let Some(peer) = link.peer_index {
                st.remove_link(peer);
            }
            Ok(())
        })
    }

    fn wait_oper_up(&self, index: u32) -> Result<Link, NetlinkError> {
        let link = self.link_by_index(index)?;
        if link.oper_up {
            Ok(link)
        } else {
            Err(NetlinkError::Timeout {
                op: format!("wait for {} to be up", link.name),
                state: link.oper_state,
            })
        }
    }

    fn addresses(&self, index: Option<u32>) -> Result<Vec<Address>, NetlinkError> {
        self.read(format!("addresses {index:?}"), |ns| {
            ns.addrs
                .iter()
                .filter(|a| index.is_none_or(|i| a.index == i))
                .cloned()
                .collect()
        })
    }

    fn add_address(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        let name = self.name_of(index);
        self.change(format!("add_address {name} {addr}"), |st, ns| {
            let ns = st.namespaces.get_mut(ns).unwrap();
            if ns.addrs.iter().any(|a| a.index == index && a.addr == addr) {
                return Err(nl_err(format!("add {addr}"), EEXIST));
            }
            ns.addrs.push(Address {
                index,
                addr,
                tentative: false,
                dadfailed: false,
                scope: 0,
                broadcast: None,
            });
            Ok(())
        })
    }

    fn add_address_nodad(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        self.add_address(index, addr)
    }

    fn del_address(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        let name = self.name_of(index);
        self.change(format!("del_address {name} {addr}"), |st, ns| {
            let ns = st.namespaces.get_mut(ns).unwrap();
            ns.addrs.retain(|a| !(a.index == index && a.addr == addr));
            Ok(())
        })
    }

    fn settle_addresses(&self, index: u32, _timeout: Duration) -> Result<(), NetlinkError> {
        self.read(format!("settle_addresses {index}"), |_| ())
    }

    fn routes(&self, family: IpFamily) -> Result<Vec<Route>, NetlinkError> {
        self.read(format!("routes {family:?}"), |ns| {
            ns.routes
                .iter()
                .filter(|r| r.dst.is_ipv4() == matches!(family, IpFamily::V4))
                .cloned()
                .collect()
        })
    }

    fn add_route(&self, spec: &RouteSpec) -> Result<(), NetlinkError> {
        let via = spec
            .gateway
            .map(|g| format!(" via {g}"))
            .unwrap_or_default();
        self.change(format!("add_route {}{via}", spec.dst), |st, ns| {
            let ns = st.namespaces.get_mut(ns).unwrap();
            if ns
                .routes
                .iter()
                .any(|r| r.dst == spec.dst && r.table == spec.table.unwrap_or(254))
            {
                return Err(nl_err(format!("add route {}", spec.dst), EEXIST));
            }
            ns.routes.push(Route {
                dst: spec.dst,
                gateway: spec.gateway,
                oif: spec.oif,
                table: spec.table.unwrap_or(254),
                scope: spec.scope.unwrap_or(0),
                priority: spec.priority,
                multipath_gateways: Vec::new(),
                nh_id: None,
            });
            Ok(())
        })
    }

    fn bridge_vlan_add(
        &self,
        port: u32,
        vid: u16,
        pvid: bool,
        untagged: bool,
    ) -> Result<(), NetlinkError> {
        self.edit(
            &format!("bridge_vlan_add {vid} {pvid} {untagged}"),
            port,
            |_| (),
        )
    }

    fn bridge_vlan_del(&self, port: u32, vid: u16) -> Result<(), NetlinkError> {
        self.edit(&format!("bridge_vlan_del {vid}"), port, |_| ())
    }

    fn set_vlan_filtering(&self, bridge: u32, on: bool) -> Result<(), NetlinkError> {
        self.edit(&format!("set_vlan_filtering {on}"), bridge, |_| ())
    }
}

fn fw_err(entry: String) -> FirewallError {
    FirewallError::Spawn {
        command: entry,
        source: io::Error::from_raw_os_error(EPERM),
    }
}

impl FakeKernel {
    /// A firewall call: fails if asked to, else changes the rules and is logged.
    fn firewall<T>(
        &self,
        entry: String,
        f: impl FnOnce(&mut BTreeSet<String>) -> T,
    ) -> Result<T, FirewallError> {
        let mut st = self.state();
        let entry = format!("fw: {entry}");
        if st.fails(&entry) {
            return Err(fw_err(entry));
        }
        let out = f(&mut st.rules);
        st.log.push(entry);
        Ok(out)
    }
}

fn ipmasq_rule(att: &Attachment) -> String {
    format!("ipmasq {} {} {}", att.network, att.container_id, att.ifname)
}

fn spoofcheck_rule(container_id: &str, ifname: &str) -> String {
    format!("spoofcheck {container_id} {ifname}")
}

impl Kernel for FakeKernel {
    type Netns = FakeNetns;
    type Conn = FakeLinks;

    fn host(&self) -> Result<FakeLinks, NetlinkError> {
        self.state().call(format!("{HOST}: open"), false)?;
        Ok(self.links(HOST))
    }

    fn open_netns(&self, path: &str, _once: &OpenOnce) -> Result<FakeNetns, NetnsError> {
        if self.state().namespaces.contains_key(path) {
            Ok(FakeNetns(path.to_string()))
        } else {
            Err(NetnsError::NotExist(path.into()))
        }
    }

    fn own_netns(&self) -> Result<FakeNetns, NetnsError> {
        Ok(FakeNetns(HOST.to_string()))
    }

    fn links_in(&self, ns: &FakeNetns) -> Result<FakeLinks, NetlinkError> {
        self.state().call(format!("{}: open", ns.0), false)?;
        Ok(self.links(&ns.0))
    }

    fn create_veth(
        &self,
        on: &FakeLinks,
        name: &str,
        peer: &str,
        mtu: Option<u32>,
        peer_mac: Option<[u8; 6]>,
        peer_ns: &FakeNetns,
    ) -> Result<(), NetlinkError> {
        on.create_veth(name, peer, mtu, peer_mac, peer_ns)
    }

    fn netns_id(&self, on: &FakeLinks, ns: &FakeNetns) -> Result<Option<i32>, NetlinkError> {
        on.netns_id(ns)
    }

    fn sysctls_in(
        &self,
        ns: &FakeNetns,
        settings: &[Sysctl],
    ) -> Result<Result<(), (usize, SysctlError)>, NetnsError> {
        let mut st = self.state();
        for (i, s) in settings.iter().enumerate() {
            let name = s.name.join(".");
            let entry = format!("{}: sysctl {name}={}", ns.0, s.value);
            if st.fails(&entry) {
                if s.required {
                    return Ok(Err((i, denied(&name))));
                }
                continue;
            }
            st.sysctls
                .insert(format!("{}: {name}", ns.0), s.value.to_string());
            st.log.push(entry);
        }
        Ok(Ok(()))
    }

    fn host_sysctl(&self, name: &[&str], value: &str) -> Result<(), SysctlError> {
        let mut st = self.state();
        let name = name.join(".");
        let entry = format!("{HOST}: sysctl {name}={value}");
        if st.fails(&entry) {
            return Err(denied(&name));
        }
        st.sysctls
            .insert(format!("{HOST}: {name}"), value.to_string());
        st.log.push(entry);
        Ok(())
    }
}

impl Firewall for FakeKernel {
    /// Logged; the fake readies nothing (its `masquerade` needs nothing).
    fn prepare_masquerade(&self, _backend: Option<Backend>) -> MasqueradeReady {
        self.state().log.push("fw: prestart ipmasq".into());
        MasqueradeReady::default()
    }

    fn masquerade(
        &self,
        _backend: Option<Backend>,
        att: &Attachment,
        _ips: &[IpNetwork],
        _ready: MasqueradeReady,
    ) -> Result<(), FirewallError> {
        let rule = ipmasq_rule(att);
        self.firewall(format!("setup {rule}"), |rules| {
            rules.insert(rule);
        })
    }

    fn masquerade_present(
        &self,
        _backend: Option<Backend>,
        att: &Attachment,
        _ips: &[IpNetwork],
    ) -> Result<bool, FirewallError> {
        let rule = ipmasq_rule(att);
        let mut st = self.state();
        let entry = format!("fw: check {rule}");
        if st.fails(&entry) {
            return Err(fw_err(entry));
        }
        Ok(st.rules.contains(&rule))
    }

    fn unmasquerade(&self, att: &Attachment, _ips: &[IpNetwork]) -> Result<(), FirewallError> {
        let rule = ipmasq_rule(att);
        self.firewall(format!("teardown {rule}"), |rules| {
            rules.remove(&rule);
        })
    }

    fn collect_masquerades(
        &self,
        network: &str,
        valid: &[(&str, &str)],
    ) -> Result<(), FirewallError> {
        self.firewall(format!("gc ipmasq {network}"), |rules| {
            rules.retain(|r| {
                let mut words = r.split(' ');
                let (kind, net, id, ifname) =
                    (words.next(), words.next(), words.next(), words.next());
                kind != Some("ipmasq")
                    || net != Some(network)
                    || valid
                        .iter()
                        .any(|(c, i)| Some(*c) == id && Some(*i) == ifname)
            });
        })
    }

    fn spoof_check(
        &self,
        container_id: &str,
        ifname: &str,
        _host_veth: &str,
        _mac: &str,
    ) -> Result<(), FirewallError> {
        let rule = spoofcheck_rule(container_id, ifname);
        self.firewall(format!("setup {rule}"), |rules| {
            rules.insert(rule);
        })
    }

    fn spoof_check_present(
        &self,
        container_id: &str,
        ifname: &str,
        _host_veth: &str,
        _mac: &str,
    ) -> Result<bool, FirewallError> {
        let rule = spoofcheck_rule(container_id, ifname);
        let mut st = self.state();
        let entry = format!("fw: check {rule}");
        if st.fails(&entry) {
            return Err(fw_err(entry));
        }
        Ok(st.rules.contains(&rule))
    }

    fn remove_spoof_check(&self, container_id: &str, ifname: &str) -> Result<(), FirewallError> {
        let rule = spoofcheck_rule(container_id, ifname);
        self.firewall(format!("teardown {rule}"), |rules| {
            rules.remove(&rule);
        })
    }

    fn collect_spoof_checks(&self, valid: &[(&str, &str)]) -> Result<(), FirewallError> {
        self.firewall("gc spoofcheck".into(), |rules| {
            rules.retain(|r| {
                let mut words = r.split(' ');
                let (kind, id, ifname) = (words.next(), words.next(), words.next());
                kind != Some("spoofcheck")
                    || valid
                        .iter()
                        .any(|(c, i)| Some(*c) == id && Some(*i) == ifname)
            });
        })
    }
}

/// A sysctl write the fake was told to refuse (EPERM).
fn denied(dotted: &str) -> SysctlError {
    SysctlError::Io {
        path: format!("/proc/sys/{}", dotted.replace('.', "/")).into(),
        source: io::Error::from_raw_os_error(EPERM),
    }
}
