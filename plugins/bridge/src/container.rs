//! Container-side kernel work: sysctls, addresses and routes of the container interface
//! (Go `ipam.ConfigureIface` plus the bridge plugin's DAD and arp_notify settings).

use crate::error::{BridgeError, During, Source, via};
use hostnet::kernel::{Kernel, Links, Sysctl};
use hostnet::netlink::RouteSpec;
use libcni::types::CniResult;
use std::net::IpAddr;
use std::time::Duration;
use sysproc::step;

/// How long IPv6 addresses may stay tentative before ADD fails.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes the container's sysctls in one trip into the namespace.
pub fn set_sysctls<K: Kernel>(
    k: &K,
    netns: &K::Netns,
    ifname: &str,
    enable_dad: bool,
    has_ipv6: bool,
) -> Result<(), BridgeError> {
    let mut settings: Vec<(Vec<&str>, &str)> = Vec::new();
    if enable_dad {
        settings.push((vec!["net", "ipv6", "conf", ifname, "enhanced_dad"], "1"));
        settings.push((vec!["net", "ipv6", "conf", ifname, "accept_dad"], "1"));
    } else {
        settings.push((vec!["net", "ipv6", "conf", ifname, "accept_dad"], "0"));
    }
    settings.push((vec!["net", "ipv4", "conf", ifname, "arp_notify"], "1"));
    if has_ipv6 {
        // IPv6 may be disabled in a fresh namespace; the address needs it on.
        settings.push((vec!["net", "ipv6", "conf", "lo", "disable_ipv6"], "0"));
        settings.push((vec!["net", "ipv6", "conf", ifname, "disable_ipv6"], "0"));
        settings.push((
            vec!["net", "ipv6", "conf", ifname, "keep_addr_on_down"],
            "1",
        ));
    }
    let settings: Vec<Sysctl> = settings
        .into_iter()
        .map(|(name, value)| Sysctl {
            // The DAD knobs are best effort, as in the reference (kernels without IPv6).
            required: name.last().is_some_and(|c| *c == "disable_ipv6"),
            name,
            value,
        })
        .collect();
    k.sysctls_in(netns, &settings)
        .during(|| "failed to enter the container namespace")?
        .map_err(|(i, e)| {
            let name = settings.get(i).map(|s| s.name.join("."));
            e.at(format!(
                "failed to set {name}",
                name = name.unwrap_or_default()
            ))
        })
}

/// Adds the result's addresses and routes to the container interface and brings it up.
pub fn configure_iface(
    nl: &dyn Links,
    ifindex: u32,
    ifname: &str,
    result: &CniResult,
) -> Result<(), BridgeError> {
    let mut gw_v4: Option<IpAddr> = None;
    let mut gw_v6: Option<IpAddr> = None;
    for ip in &result.ips {
        nl.add_address(ifindex, ip.address).during(|| {
            format!(
                "failed to add IP addr {addr} to {ifname:?}",
                addr = ip.address
            )
        })?;
        let slot = if ip.address.is_ipv4() {
            &mut gw_v4
        } else {
            &mut gw_v6
        };
        if slot.is_none() {
            *slot = ip.gateway;
        }
    }
    step::point("bridge.container-addresses")?;
    nl.set_up(ifindex)
        .during(|| format!("failed to set {ifname:?} UP"))?;
    // With DAD off this returns at once; with `enabledad` it waits for DAD to finish.
    if result.ips.iter().any(|ip| ip.address.is_ipv6()) {
        nl.settle_addresses(ifindex, SETTLE_TIMEOUT)
            .during(|| format!("failed while waiting for addresses to settle on {ifname:?}"))?;
    }
    let mut added: Vec<RouteSpec> = Vec::new();
    for route in &result.routes {
        let gateway = route.gw.or(if route.dst.is_ipv4() { gw_v4 } else { gw_v6 });
        let spec = RouteSpec {
            dst: route.dst,
            gateway,
            oif: Some(ifindex),
            priority: (route.priority != 0).then_some(route.priority),
            table: route.table.and_then(|t| u32::try_from(t).ok()),
            scope: route.scope.and_then(|s| u8::try_from(s).ok()),
        };
        // The same route twice (an IPAM default route plus isDefaultGateway's) is added once.
        if added.contains(&spec) {
            continue;
        }
        match nl.add_route(&spec) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => {
                return Err(e.at(format!(
                    "failed to add route '{dst}{} dev {ifname}'",
                    via(&gateway),
                    dst = route.dst
                )));
            }
        }
        added.push(spec);
    }
    step::point("bridge.routes")?;
    Ok(())
}
