//! Host-side kernel work: the bridge, its gateway addresses and the host end of the veth.

use crate::config::BridgeConf;
use crate::error::{BridgeError, During, Source};
use crate::gateway::Gateways;
use hostnet::kernel::{Kernel, Links};
use hostnet::netlink::{IpFamily, Link};
use ipnetwork::IpNetwork;
use libcni::types::{CniResult, Interface};
use std::net::IpAddr;
use sysproc::step;

/// Creates the bridge if needed (a concurrent creator winning the race is fine), checks
/// that an existing link of that name is a bridge, and brings it up. Errors carry the
/// reference's `failed to create bridge "<name>": ` prefix.
pub fn ensure_bridge<K: Kernel>(
    k: &K,
    nl: &dyn Links,
    conf: &BridgeConf,
) -> Result<Link, BridgeError> {
    create_or_reuse_bridge(k, nl, conf).map_err(|e| BridgeError::CreateBridge {
        name: conf.bridge.clone(),
        source: Box::new(e),
    })
}

fn create_or_reuse_bridge<K: Kernel>(
    k: &K,
    nl: &dyn Links,
    conf: &BridgeConf,
) -> Result<Link, BridgeError> {
    let name = &conf.bridge;
    // Look first: on every ADD but a node's first the bridge exists, and one request does.
    let (br, created) = match nl
        .link_by_name(name)
        .during(|| format!("could not lookup {name:?}"))?
    {
        Some(link) => (link, false),
        None => {
            let created = match nl.create_bridge(name, conf.mtu) {
                Ok(()) => true,
                // A concurrent ADD created it first.
                Err(e) if e.is_exists() => false,
                Err(e) => {
                    return Err(e.at(format!("could not add {name:?}")));
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
            .during(|| "could not set bridge's mac")?;
    }
    if created && conf.vlan_filtering() {
        nl.set_vlan_filtering(br.index, true)
            .during(|| format!("failed to set vlan_filtering on {name:?}"))?;
    }
    if conf.promisc_mode && !br.promisc {
        nl.set_promisc(br.index, true)
            .during(|| format!("could not set promiscuous mode on {name:?}"))?;
    }
    // We own the routes of this interface. Errors are ignored as in the reference (no IPv6).
    let _ = k.host_sysctl(&["net", "ipv6", "conf", name, "accept_ra"], "0");
    if !br.admin_up {
        nl.set_up(br.index)
            .during(|| format!("failed to set {name:?} up"))?;
    }
    Ok(br)
}

/// The link named `name`; its absence is an error in Go's words: `<verb> "<name>": Link not found`.
pub fn link_named(nl: &dyn Links, name: &str, verb: &'static str) -> Result<Link, BridgeError> {
    let op = || format!("{verb} {name:?}");
    nl.link_by_name(name)
        .map_err(|e| e.at(op()))?
        .ok_or_else(|| BridgeError::LinkNotFound {
            verb,
            name: name.to_string(),
        })
}

/// The veths among a result's host-side interfaces (not the bridge) that still exist,
/// looked up one at a time as the caller walks.
pub fn result_veths<'a>(
    nl: &'a dyn Links,
    result: &'a CniResult,
    bridge: &'a str,
) -> impl Iterator<Item = Result<(&'a Interface, Link), BridgeError>> + 'a {
    result
        .interfaces
        .iter()
        .filter(move |i| i.sandbox.is_empty() && i.name != bridge)
        .filter_map(|entry| match nl.link_by_name(&entry.name) {
            Ok(Some(link)) if link.kind.as_deref() == Some("veth") => Some(Ok((entry, link))),
            Ok(_) => None,
            Err(e) => Some(Err(
                e.at(format!("failed to lookup {name:?}", name = entry.name))
            )),
        })
}

/// The link named `name`, which must be a bridge.
pub fn bridge_by_name(nl: &dyn Links, name: &str) -> Result<Link, BridgeError> {
    let link = link_named(nl, name, "could not lookup")?;
    require_bridge(&link)?;
    Ok(link)
}

fn require_bridge(link: &Link) -> Result<(), BridgeError> {
    if link.kind.as_deref() != Some("bridge") {
        return Err(BridgeError::NotABridge {
            name: link.name.clone(),
        });
    }
    Ok(())
}

/// Puts every gateway on `link` (the bridge or its VLAN interface) and turns forwarding on
/// for each family that has one. When an address was added, pins the link's MAC to its
/// current value (or it follows the lowest port MAC as ports churn) and returns the link
/// as read for that. Errors carry the reference's `failed to set bridge addr: ` prefix.
pub fn ensure_gateways<K: Kernel>(
    k: &K,
    nl: &dyn Links,
    link: &Link,
    gateways: &Gateways,
    force_address: bool,
) -> Result<Option<Link>, BridgeError> {
    let set_addr = |e: BridgeError| BridgeError::SetBridgeAddr(Box::new(e));
    if gateways.v4.is_empty() && gateways.v6.is_empty() {
        return Ok(None);
    }
    // One dump of both families, kept current as gateways are added and replaced.
    let mut present: Vec<IpNetwork> = nl
        .addresses(Some(link.index))
        .during(|| "could not get list of IP addresses")
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
            enable_forwarding(k, family)?;
            step::point("bridge.forwarding")?;
        }
    }
    if !added {
        return Ok(None);
    }
    let now = nl
        .link_by_index(link.index)
        .during(|| "could not lookup bridge")
        .map_err(set_addr)?;
    if let Some(mac) = now.mac {
        nl.set_mac(link.index, mac)
            .during(|| "could not set bridge's mac")
            .map_err(set_addr)?;
    }
    Ok(Some(now))
}

/// Puts `gw` on the bridge (Go `ensureAddr`), usable at once (no DAD): nothing to do when
/// present; another IPv4 address, or an overlapping IPv6 one, is an error unless
/// `force_address` replaces it. `present` is the bridge's addresses, updated here.
/// Returns whether `gw` was added.
fn ensure_gateway_addr(
    nl: &dyn Links,
    br: &Link,
    present: &mut Vec<IpNetwork>,
    gw: IpNetwork,
    force_address: bool,
) -> Result<bool, BridgeError> {
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
                return Err(BridgeError::AddressConflict {
                    link: br.name.clone(),
                    gw,
                });
            }
            nl.del_address(br.index, a)
                .during(|| format!("could not remove IP address from {link:?}", link = br.name))?;
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
            return Err(e.at(format!(
                "could not add IP address to {link:?}",
                link = br.name
            )));
        }
    }
    present.push(gw);
    Ok(true)
}

/// Turns on forwarding for the family (written only when not already 1).
fn enable_forwarding<K: Kernel>(k: &K, family: IpFamily) -> Result<(), BridgeError> {
    let name: &[&str] = match family {
        IpFamily::V4 => &["net", "ipv4", "ip_forward"],
        IpFamily::V6 => &["net", "ipv6", "conf", "all", "forwarding"],
    };
    k.host_sysctl(name, "1")
        .during(|| "failed to enable forwarding")
}

/// A random host veth name, `veth` + 8 hex digits (Go `RandomVethName`).
pub fn random_veth_name() -> Result<String, BridgeError> {
    use std::io::Read;
    let mut bytes = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .during(|| "failed to generate random veth name")?;
    Ok(format!(
        "veth{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// The VLAN gateway interface `<bridge>.<vlan>` (Go `ensureVlanInterface`): one end of a
/// veth pair in the host whose other end is a port of the bridge in that VLAN.
pub fn ensure_vlan_interface<K: Kernel>(
    k: &K,
    nl: &K::Conn,
    br: &Link,
    conf: &BridgeConf,
) -> Result<Link, BridgeError> {
    let name = format!("{}.{}", br.name, conf.vlan);
    let find = || format!("failed to find interface {name:?}");
    if let Some(link) = nl.link_by_name(&name).during(find)? {
        return Ok(link);
    }
    let own = k.own_netns().during(|| "failed to find host namespace")?;
    let port_name = random_veth_name()?;
    match k.create_veth(nl, &port_name, &name, Some(br.mtu), None, &own) {
        Ok(()) => {}
        // A concurrent ADD created it first: use theirs (they configure its port).
        Err(e) if e.is_exists() => {
            if let Some(link) = nl.link_by_name(&name).during(find)? {
                return Ok(link);
            }
            return Err(e.at(format!("failed to create vlan gateway {name:?}")));
        }
        Err(e) => return Err(e.at(format!("failed to create vlan gateway {name:?}"))),
    }
    let port = link_named(nl, &port_name, "failed to lookup")?;
    let gw = link_named(nl, &name, "failed to lookup")?;
    nl.set_master(port.index, br.index).during(|| {
        format!(
            "failed to connect {port_name:?} to bridge {bridge}",
            bridge = br.name
        )
    })?;
    let access_only = BridgeConf {
        vlan_trunk: Vec::new(),
        ..conf.clone()
    };
    crate::vlan::configure_port(nl, port.index, &access_only)
        .during(|| format!("failed to setup vlan tag on {port_name:?}"))?;
    nl.set_up(port.index)
        .during(|| format!("failed to up {port_name:?}"))?;
    nl.set_up(gw.index)
        .during(|| format!("failed to up {name:?}"))?;
    Ok(gw)
}
