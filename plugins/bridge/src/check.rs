//! CHECK: the kernel must still match the ADD result (reference checks), plus what the
//! reference skips: the port's master and hairpin mode, masquerade rules and the spoof check.
//! In L2 mode there is no IPAM to ask (the reference calls IPAM CHECK with no type and fails).

use crate::config::{BridgeConf, mac_string};
use crate::error::{BridgeError, During};
use crate::host;
use crate::ipam::Ipam;
use hostnet::kernel::{Kernel, Links};
use hostnet::netlink::{IpFamily, Link};
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface};

pub fn check<K: Kernel>(k: &K, ipam: &dyn Ipam, args: &CmdArgs) -> Result<(), BridgeError> {
    let conf = BridgeConf::load(&args.stdin_data, &args.args)?;
    let netns = k
        .open_netns(&args.netns, &args.opened_netns)
        .during(|| format!("failed to open netns {path:?}", path = args.netns))?;
    if conf.is_layer3() {
        ipam.run(&conf.ipam(args), "CHECK")?;
    }
    let prev = conf
        .common
        .prev_result
        .as_ref()
        .ok_or(BridgeError::PrevResultMissing)?;
    let result = CniResult::parse_at(prev, args.version)?;

    let br_entry = result.interfaces.iter().find(|i| i.name == conf.bridge);
    let ctr_entry = result
        .interfaces
        .iter()
        .find(|i| i.name == args.ifname && i.sandbox == args.netns);
    let host = k.host().during(|| "failed to open netlink socket")?;
    let br = check_bridge(&host, &conf, br_entry)?;
    let ctr_entry = ctr_entry.ok_or_else(|| BridgeError::SandboxMismatch {
        netns: args.netns.clone(),
    })?;

    let ctr = k
        .links_in(&netns)
        .during(|| "failed to open netlink socket in the container")?;
    let ctr_link = check_container_iface(&ctr, ctr_entry)?;
    let host_veth = find_host_veth(&host, &result, &br, &ctr_link)?;
    if host_veth.hairpin != Some(conf.hairpin_mode) {
        return Err(BridgeError::Hairpin {
            port: host_veth.name,
            is: host_veth.hairpin,
            want: conf.hairpin_mode,
        });
    }
    if conf.macspoofchk {
        let ok = k
            .spoof_check_present(
                &args.container_id,
                &args.ifname,
                &host_veth.name,
                &ctr_entry.mac,
            )
            .during(|| "failed to read mac spoof check rules")?;
        if !ok {
            return Err(BridgeError::SpoofCheckMissing {
                port: host_veth.name,
            });
        }
    }
    if conf.is_layer3() {
        check_addresses(&ctr, &ctr_link, &result)?;
        check_routes(&ctr, &result)?;
        if conf.ip_masq {
            let att = conf.attachment(args);
            let ips: Vec<_> = result.ips.iter().map(|ip| ip.address).collect();
            let ok = k
                .masquerade_present(conf.ip_masq_backend, &att, &ips)
                .during(|| "failed to read masquerade rules")?;
            if !ok {
                return Err(BridgeError::IpMasqMissing {
                    container_id: args.container_id.clone(),
                });
            }
        }
    }
    Ok(())
}

fn check_bridge(
    host: &dyn Links,
    conf: &BridgeConf,
    entry: Option<&Interface>,
) -> Result<Link, BridgeError> {
    let Some(entry) = entry else {
        return Err(BridgeError::BridgeNotInResult {
            bridge: conf.bridge.clone(),
        });
    };
    let link = host
        .link_by_name(&entry.name)
        .during(|| "failed to look up the bridge")?
        .ok_or_else(|| BridgeError::InterfaceNotFound {
            name: entry.name.clone(),
        })?;
    if link.kind.as_deref() != Some("bridge") {
        return Err(BridgeError::NotBridgeType {
            name: entry.name.clone(),
        });
    }
    if !mac_matches(entry, &link) {
        return Err(BridgeError::BridgeMac {
            name: entry.name.clone(),
            mac: entry.mac.clone(),
        });
    }
    if link.promisc != conf.promisc_mode {
        return Err(BridgeError::BridgePromisc {
            name: entry.name.clone(),
            want: conf.promisc_mode,
            is: link.promisc,
        });
    }
    Ok(link)
}

fn check_container_iface(ctr: &dyn Links, entry: &Interface) -> Result<Link, BridgeError> {
    let link = ctr
        .link_by_name(&entry.name)
        .during(|| "failed to look up the container interface")?
        .ok_or_else(|| BridgeError::ContainerIfaceNotFound {
            name: entry.name.clone(),
        })?;
    if link.kind.as_deref() != Some("veth") {
        return Err(BridgeError::ContainerNotVeth {
            name: entry.name.clone(),
        });
    }
    if !mac_matches(entry, &link) {
        return Err(BridgeError::ContainerMac {
            name: entry.name.clone(),
            want: entry.mac.clone(),
            is: mac_string(link.mac),
        });
    }
    Ok(link)
}

/// The host veth of the result whose peer is the container interface; it must be a port
/// of the bridge.
fn find_host_veth(
    host: &dyn Links,
    result: &CniResult,
    br: &Link,
    ctr: &Link,
) -> Result<Link, BridgeError> {
    for veth in host::result_veths(host, result, &br.name) {
        let (entry, link) = veth?;
        if Some(link.index) != ctr.peer_index || link.peer_index != Some(ctr.index) {
            continue;
        }
        if link.master != Some(br.index) {
            return Err(BridgeError::NotAPort {
                veth: link.name,
                bridge: br.name.clone(),
            });
        }
        if !mac_matches(entry, &link) {
            return Err(BridgeError::VethMac {
                name: entry.name.clone(),
                mac: entry.mac.clone(),
            });
        }
        return Ok(link);
    }
    Err(BridgeError::VethNotFound {
        bridge: br.name.clone(),
    })
}

/// The result records no MAC, or the link's.
fn mac_matches(entry: &Interface, link: &Link) -> bool {
    entry.mac.is_empty() || mac_string(link.mac) == entry.mac
}

fn check_addresses(ctr: &dyn Links, link: &Link, result: &CniResult) -> Result<(), BridgeError> {
    let present = ctr
        .addresses(Some(link.index))
        .during(|| "failed to list container addresses")?;
    for ip in &result.ips {
        if !present.iter().any(|a| a.addr == ip.address) {
            return Err(BridgeError::AddrMissing {
                addr: ip.address,
                ifname: link.name.clone(),
            });
        }
    }
    Ok(())
}

fn check_routes(ctr: &dyn Links, result: &CniResult) -> Result<(), BridgeError> {
    let mut routes = ctr
        .routes(IpFamily::V4)
        .during(|| "failed to list container routes")?;
    routes.extend(
        ctr.routes(IpFamily::V6)
            .during(|| "failed to list container routes")?,
    );
    for want in &result.routes {
        let found = routes.iter().any(|r| {
            r.dst == want.dst
                && want
                    .gw
                    .is_none_or(|gw| r.gateway == Some(gw) || r.multipath_gateways.contains(&gw))
        });
        if !found {
            return Err(BridgeError::RouteMissing {
                dst: want.dst,
                gw: want.gw,
            });
        }
    }
    Ok(())
}
