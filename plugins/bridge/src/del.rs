//! DEL: best effort and idempotent. The container link goes first (it collects the
//! addresses whose masquerade rules must go), then the IP reservation, then the firewall
//! rules. A missing, empty or broken netns, a missing link or a missing IPAM record is
//! not an error; `prevResult` supplies the IPs (and the host veth, which outlives an
//! unreachable but living netns) when the container side is gone. A host veth is deleted
//! on prevResult's word only when it provably is this attachment's ([`owned_by_us`]).

use crate::config::{BridgeConf, parse_mac};
use crate::fail::Context;
use hostnet::firewall::{self, spoofcheck};
use hostnet::netlink::{Link, Netlink};
use ipnetwork::IpNetwork;
use libcni::netns::{Netns, NetnsError};
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface};
use libcni::{Error, step};
use std::os::fd::AsFd;

/// What DEL found of the container side.
enum ContainerSide {
    /// The container interface was deleted (its veth peer with it); these were its
    /// global addresses.
    Deleted(Vec<IpNetwork>),
    /// The namespace is there but holds no such interface.
    NoLink(Netns),
    /// No namespace given, or it is gone, or the path is not a namespace.
    Unreachable,
}

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    let conf = BridgeConf::load_for_teardown(&args.stdin_data, &args.args, "DEL")?;
    let prev = prev_result(&conf, &args.config_version);
    let mut ips: Vec<IpNetwork> = prev
        .iter()
        .flat_map(|r| &r.ips)
        .map(|ip| ip.address)
        .collect();
    match delete_container_link(args)? {
        ContainerSide::Deleted(addrs) => {
            for ip in addrs {
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
        }
        ContainerSide::NoLink(ns) => delete_host_veths(&conf, prev.as_ref(), Some(&ns))?,
        ContainerSide::Unreachable => delete_host_veths(&conf, prev.as_ref(), None)?,
    }
    step::point("bridge.links-deleted")?;

    let mut errors = Vec::new();
    if conf.is_layer3() {
        let ipam = conf.ipam(args);
        if let Err(e) = ipam.run("DEL") {
            errors.push(e);
        }
        step::point("bridge.ipam-released")?;
    }
    if conf.macspoofchk
        && let Err(e) = spoofcheck::teardown(&args.container_id, &args.ifname)
    {
        errors.push(crate::fail::firewall_fail(
            "failed to remove mac spoof check",
            e,
        ));
    }
    if conf.macspoofchk {
        step::point("bridge.spoofcheck-removed")?;
    }
    if conf.is_layer3() && conf.ip_masq {
        let att = conf.attachment(args);
        if let Err(e) = firewall::teardown_ipmasq(&att, &ips) {
            errors.push(crate::fail::firewall_fail(
                "failed to remove IP masquerading",
                e,
            ));
        }
        step::point("bridge.ipmasq-removed")?;
    }
    // The first error is returned so the runtime retries; everything else was still done.
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Deletes the container interface and returns its global addresses.
fn delete_container_link(args: &CmdArgs) -> Result<ContainerSide, Error> {
    if args.netns.is_empty() {
        return Ok(ContainerSide::Unreachable);
    }
    let netns = match Netns::open(&args.netns) {
        Ok(ns) => ns,
        Err(e @ (NetnsError::NotExist(_) | NetnsError::NotNetns { .. })) => {
            libcni::log!("bridge: DEL: container namespace is gone ({e}); cleaning up the rest");
            return Ok(ContainerSide::Unreachable);
        }
        Err(e) => {
            return Err(crate::fail::fail(
                format!("failed to open netns {:?}", args.netns),
                e,
            ));
        }
    };
    let nl = Netlink::in_netns(netns.as_fd())
        .context("failed to open netlink socket in the container")?;
    let Some(link) = nl
        .link_by_name(&args.ifname)
        .context(format!("failed to lookup {:?}", args.ifname))?
    else {
        return Ok(ContainerSide::NoLink(netns));
    };
    let addrs = nl
        .addresses(Some(link.index))
        .context(format!("failed to get IP addresses for {:?}", args.ifname))?;
    match nl.delete_link(link.index) {
        Err(e) if !e.is_no_device() => {
            return Err(crate::fail::fail(
                format!("failed to delete {:?}", args.ifname),
                e,
            ));
        }
        _ => {}
    }
    Ok(ContainerSide::Deleted(
        addrs
            .into_iter()
            .map(|a| a.addr)
            .filter(is_global_unicast)
            .collect(),
    ))
}

/// The container end could not be reached, but its namespace may still be alive (empty
/// CNI_NETNS, a path that is no netns): delete the host ends recorded in prevResult that
/// are still veth ports of our bridge and provably this attachment's. A dead namespace
/// took the pair with it already.
fn delete_host_veths(
    conf: &BridgeConf,
    prev: Option<&CniResult>,
    named_ns: Option<&Netns>,
) -> Result<(), Error> {
    let Some(prev) = prev else {
        return Ok(());
    };
    let host = Netlink::current().context("failed to open netlink socket")?;
    let Some(br) = host
        .link_by_name(&conf.bridge)
        .context(format!("failed to lookup {:?}", conf.bridge))?
    else {
        return Ok(());
    };
    for veth in crate::host::result_veths(&host, prev, &conf.bridge) {
        let (entry, link) = veth?;
        if link.master != Some(br.index) {
            continue;
        }
        if let Err(why) = owned_by_us(&host, entry, &link, named_ns) {
            libcni::log!("bridge: DEL: leaving {:?} alone: {why}", entry.name);
            continue;
        }
        match host.delete_link(link.index) {
            Err(e) if !e.is_no_device() => {
                return Err(crate::fail::fail(
                    format!("failed to delete {:?}", entry.name),
                    e,
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A cached prevResult can be stale and veth names are reused, so a host veth is this
/// attachment's only when its MAC is the one the result recorded (the kernel gives every
/// veth a random MAC) and, when this DEL names a living namespace, its peer lives there.
fn owned_by_us(
    host: &Netlink,
    entry: &Interface,
    link: &Link,
    named_ns: Option<&Netns>,
) -> Result<(), String> {
    let recorded = parse_mac(&entry.mac).ok_or("prevResult records no MAC for it")?;
    if link.mac != Some(recorded) {
        return Err(format!(
            "its MAC is not {} as prevResult recorded",
            entry.mac
        ));
    }
    if let Some(ns) = named_ns {
        let ns_id = host
            .netns_id(ns.as_fd())
            .map_err(|e| format!("cannot tell where its peer lives: {e}"))?;
        if ns_id.is_none() || link.peer_netns_id != ns_id {
            return Err("its peer is not in the container's namespace".into());
        }
    }
    Ok(())
}

fn is_global_unicast(a: &IpNetwork) -> bool {
    match a.ip() {
        std::net::IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4.is_broadcast())
        }
        std::net::IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unspecified()
                || v6.is_unicast_link_local())
        }
    }
}

/// What the runtime recorded for this attachment, if it sent a usable prevResult.
fn prev_result(conf: &BridgeConf, config_version: &str) -> Option<CniResult> {
    let prev = conf.common.prev_result.as_ref()?;
    CniResult::parse(prev, config_version)
        .map_err(|e| libcni::log!("bridge: DEL: ignoring unreadable prevResult: {e}"))
        .ok()
}
