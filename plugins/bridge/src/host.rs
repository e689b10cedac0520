//! Host-side kernel work: the bridge, its gateway addresses and the host end of the veth.

use crate::config::BridgeConf;
use crate::fail::{Context, fail};
use crate::gateway::Gateways;
use hostnet::netlink::{IpFamily, Link, Netlink};
use hostnet::sysctl;
use ipnetwork::IpNetwork;
use libcni::types::{CniResult, Interface};
use libcni::{Error, step};
use std::net::IpAddr;

/// Creates the bridge if needed (a concurrent creator winning the race is fine), checks
/// that an existing link of that name is a bridge, and brings it up. Errors carry the
/// reference's `failed to create bridge "<name>": ` prefix.
pub fn ensure_bridge(nl: &Netlink, conf: &BridgeConf) -> Result<Link, Error> {
    create_or_reuse_bridge(nl, conf).map_err(|mut e| {
        e.msg = format!("failed to create bridge {:?}: {}", conf.bridge, e.msg);
        e
    })
}

fn create_or_reuse_bridge(nl: &Netlink, conf: &BridgeConf) -> Result<Link, Error> {
    let name = &conf.bridge;
    // Look first: on every ADD but a node's first the bridge exists, and one request does.
    let (br, created) = match nl
        .link_by_name(name)
        .context(format!("could not lookup {name:?}"))?
    {
        Some(link) => (link, false),
        None => {
            let created = match nl.create_bridge(name, conf.mtu) {
                Ok(()) => true,
                // A concurrent ADD created it first.
                Err(e) if e.is_exists() => false,
                Err(e) => {
                    return Err(fail(format!("could not add {name:?}"), e));
                }
            };
            (link_named(nl, name, "could not lookup")?, created)
        }
    };
    require_bridge(&br)?;
    // Pin the bridge's own random MAC now: a bridge with an unset MAC takes the lowest MAC
    // of its ports, so it would change as containers come and go.
    if let (true, Some(mac)) = (created, br.mac) {
        nl.set_mac(br.index, mac)
            .context("could not set bridge's mac")?;
    }
    if created && conf.vlan_filtering() {
        nl.set_vlan_filtering(br.index, true)
            .context(format!("failed to set vlan_filtering on {name:?}"))?;
    }
    if conf.promisc_mode && !br.promisc {
        nl.set_promisc(br.index, true)
            .context(format!("could not set promiscuous mode on {name:?}"))?;
    }
    // We own the routes of this interface. Errors are ignored as in the reference (no IPv6).
    if let Ok(path) = sysctl::path(&["net", "ipv6", "conf", name, "accept_ra"]) {
        let _ = sysctl::ensure_path(&path, "0");
    }
    if !br.admin_up {
        nl.set_up(br.index)
            .context(format!("failed to set {name:?} up"))?;
    }
    Ok(br)
}

/// The link named `name`; its absence is an error in Go's words: `<verb> "<name>": Link not found`.
pub fn link_named(nl: &Netlink, name: &str, verb: &str) -> Result<Link, Error> {
    nl.link_by_name(name)
        .context(format!("{verb} {name:?}"))?
        .ok_or_else(|| Error::internal(format!("{verb} {name:?}: Link not found")))
}

/// The veths among a result's host-side interfaces (not the bridge) that still exist,
/// looked up one at a time as the caller walks.
pub fn result_veths<'a>(
    nl: &'a Netlink,
    result: &'a CniResult,
    bridge: &'a str,
) -> impl Iterator<Item = Result<(&'a Interface, Link), Error>> + 'a {
    result
        .interfaces
        .iter()
        .filter(move |i| i.sandbox.is_empty() && i.name != bridge)
        .filter_map(|entry| match nl.link_by_name(&entry.name) {
            Ok(Some(link)) if link.kind.as_deref() == Some("veth") => Some(Ok((entry, link))),
            Ok(_) => None,
            Err(e) => Some(Err(fail(format!("failed to lookup {:?}", entry.name), e))),
        })
}

/// The link named `name`, which must be a bridge.
pub fn bridge_by_name(nl: &Netlink, name: &str) -> Result<Link, Error> {
    let link = link_named(nl, name, "could not lookup")?;
    require_bridge(&link)?;
    Ok(link)
}

fn require_bridge(link: &Link) -> Result<(), Error> {
    if link.kind.as_deref() != Some("bridge") {
        return Err(Error::internal(format!(
            "{:?} already exists but is not a bridge",
            link.name
        )));
    }
    Ok(())
}

/// Puts every gateway on `link` (the bridge or its VLAN interface) and turns forwarding on
/// for each family that has one. When an address was added, pins the link's MAC to its
/// current value (or it follows the lowest port MAC as ports churn) and returns the link
/// as read for that. Errors carry the reference's `failed to set bridge addr: ` prefix.
pub fn ensure_gateways(
    nl: &Netlink,
    link: &Link,
    gateways: &Gateways,
    force_address: bool,
) -> Result<Option<Link>, Error> {
    let set_addr = |e: Error| Error::internal(format!("failed to set bridge addr: {}", e.msg));
    if gateways.v4.is_empty() && gateways.v6.is_empty() {
        return Ok(None);
    }
    // One dump of both families, kept current as gateways are added and replaced.
    let mut present: Vec<IpNetwork> = nl
        .addresses(Some(link.index))
        .context("could not get list of IP addresses")
        .map_err(set_addr)?
        .into_iter()
        .map(|a| a.addr)
        .collect();
    let mut added = false;
    for (family, gws) in [(IpFamily::V4, &gateways.v4), (IpFamily::V6, &gateways.v6)] {
        for gw in gws {
            added |= ensure_gateway_addr(nl, link, &mut present, *gw, force_address)
                .map_err(set_addr)?;
        }
        step::point("bridge.gateway-addresses")?;
        if !gws.is_empty() {
            enable_forwarding(family)?;
            step::point("bridge.forwarding")?;
        }
    }
    if !added {
        return Ok(None);
    }
    let now = nl
        .link_by_index(link.index)
        .context("could not lookup bridge")
        .map_err(set_addr)?;
    if let Some(mac) = now.mac {
        nl.set_mac(link.index, mac)
            .context("could not set bridge's mac")
            .map_err(set_addr)?;
    }
    Ok(Some(now))
}

/// Puts `gw` on the bridge (Go `ensureAddr`), usable at once (no DAD): nothing to do when
/// present; another IPv4 address, or an overlapping IPv6 one, is an error unless
/// `force_address` replaces it. `present` is the bridge's addresses, updated here.
/// Returns whether `gw` was added.
fn ensure_gateway_addr(
    nl: &Netlink,
    br: &Link,
    present: &mut Vec<IpNetwork>,
    gw: IpNetwork,
    force_address: bool,
) -> Result<bool, Error> {
    let family_matches = |a: &IpNetwork| a.is_ipv4() == gw.is_ipv4();
    // In the bridge's order, as the reference: a conflict before `gw` itself still counts.
    for a in present.clone().into_iter().filter(family_matches) {
        if a == gw {
            return Ok(false);
        }
        // IPv6 link-local addresses never conflict with a gateway.
        if matches!(a.ip(), IpAddr::V6(v6) if v6.is_unicast_link_local()) {
            continue;
        }
        if gw.is_ipv4() || a.contains(gw.ip()) || gw.contains(a.ip()) {
            if !force_address {
                return Err(Error::internal(format!(
                    "{:?} already has an IP address different from {gw}",
                    br.name
                )));
            }
            nl.del_address(br.index, a)
                .context(format!("could not remove IP address from {:?}", br.name))?;
            present.retain(|p| *p != a);
        }
    }
    // Without DAD: the reference's address stays tentative for 1-2 s after ADD returns, so
    // the container cannot reach its IPv6 gateway yet. IFA_F_NODAD (rather than
    // accept_dad=0 on the bridge) acts on this address only, at the moment it is added,
    // and changes no setting of a bridge someone else may have created. The gateway
    // address is ours by construction (IPAM ranges exclude it): DAD would guard nothing.
    match nl.add_address_nodad(br.index, gw) {
        Ok(()) => {}
        Err(e) if e.is_exists() => {}
        Err(e) => {
            return Err(fail(
                format!("could not add IP address to {:?}", br.name),
                e,
            ));
        }
    }
    present.push(gw);
    Ok(true)
}

/// Turns on forwarding for the family (written only when not already 1).
fn enable_forwarding(family: IpFamily) -> Result<(), Error> {
    let name = match family {
        IpFamily::V4 => "net.ipv4.ip_forward",
        IpFamily::V6 => "net.ipv6.conf.all.forwarding",
    };
    sysctl::ensure(name, "1")
        .map(drop)
        .context("failed to enable forwarding")
}

/// A random host veth name, `veth` + 8 hex digits (Go `RandomVethName`).
pub fn random_veth_name() -> Result<String, Error> {
    use std::io::Read;
    let mut bytes = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("failed to generate random veth name")?;
    Ok(format!(
        "veth{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// The VLAN gateway interface `<bridge>.<vlan>` (Go `ensureVlanInterface`): one end of a
/// veth pair in the host whose other end is a port of the bridge in that VLAN.
pub fn ensure_vlan_interface(nl: &Netlink, br: &Link, conf: &BridgeConf) -> Result<Link, Error> {
    let name = format!("{}.{}", br.name, conf.vlan);
    if let Some(link) = nl
        .link_by_name(&name)
        .context(format!("failed to find interface {name:?}"))?
    {
        return Ok(link);
    }
    let own = libcni::netns::Netns::current().context("failed to find host namespace")?;
    let port_name = random_veth_name()?;
    use std::os::fd::AsFd;
    match nl.create_veth(&port_name, &name, Some(br.mtu), None, own.as_fd()) {
        Ok(()) => {}
        // A concurrent ADD created it first: use theirs (they configure its port).
        Err(e) if e.is_exists() => {
            if let Some(link) = nl
                .link_by_name(&name)
                .context(format!("failed to find interface {name:?}"))?
            {
                return Ok(link);
            }
            return Err(fail(format!("failed to create vlan gateway {name:?}"), e));
        }
        Err(e) => return Err(fail(format!("failed to create vlan gateway {name:?}"), e)),
    }
    let port = link_named(nl, &port_name, "failed to lookup")?;
    let gw = link_named(nl, &name, "failed to lookup")?;
    nl.set_master(port.index, br.index).context(format!(
        "failed to connect {port_name:?} to bridge {}",
        br.name
    ))?;
    let access_only = BridgeConf {
        vlan_trunk: Vec::new(),
        ..conf.clone()
    };
    crate::vlan::configure_port(nl, port.index, &access_only)
        .context(format!("failed to setup vlan tag on {port_name:?}"))?;
    nl.set_up(port.index)
        .context(format!("failed to up {port_name:?}"))?;
    nl.set_up(gw.index)
        .context(format!("failed to up {name:?}"))?;
    Ok(gw)
}
