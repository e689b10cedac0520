//! CHECK: the kernel must still match the ADD result (reference checks), plus what the
//! reference skips: the port's master and hairpin mode, masquerade rules and the spoof check.
//! In L2 mode there is no IPAM to ask (the reference calls IPAM CHECK with no type and fails).

use crate::config::{BridgeConf, mac_string};
use crate::fail::{Context, fail};
use crate::host;
use hostnet::firewall::{self, spoofcheck};
use hostnet::netlink::{IpFamily, Link, Netlink};
use libcni::Error;
use libcni::netns::Netns;
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface};
use std::os::fd::AsFd;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = BridgeConf::load_for_setup(&args.stdin_data, &args.args)?;
    let netns = Netns::open(&args.netns)
        .map_err(|e| fail(format!("failed to open netns {:?}", args.netns), e))?;
    if conf.is_layer3() {
        conf.ipam(args).run("CHECK")?;
    }
    let prev = conf
        .common
        .prev_result
        .as_ref()
        .ok_or_else(|| Error::internal("Required prevResult missing"))?;
    let result = CniResult::parse(prev, &args.config_version)?;

    let br_entry = result.interfaces.iter().find(|i| i.name == conf.bridge);
    let ctr_entry = result
        .interfaces
        .iter()
        .find(|i| i.name == args.ifname && i.sandbox == args.netns);
    let host = Netlink::current().context("failed to open netlink socket")?;
    let br = check_bridge(&host, &conf, br_entry)?;
    let ctr_entry = ctr_entry.ok_or_else(|| {
        Error::internal(format!(
            "Sandbox in prevResult doesn't match configured netns: {}",
            args.netns
        ))
    })?;

    let ctr = Netlink::in_netns(netns.as_fd())
        .context("failed to open netlink socket in the container")?;
    let ctr_link = check_container_iface(&ctr, ctr_entry)?;
    let host_veth = find_host_veth(&host, &result, &br, &ctr_link)?;
    if host_veth.hairpin != Some(conf.hairpin_mode) {
        return Err(Error::internal(format!(
            "bridge port {} hairpin mode is {:?}, config wants {}",
            host_veth.name, host_veth.hairpin, conf.hairpin_mode
        )));
    }
    if conf.macspoofchk {
        let ok = spoofcheck::check(
            &args.container_id,
            &args.ifname,
            &host_veth.name,
            &ctr_entry.mac,
        )
        .context("failed to read mac spoof check rules")?;
        if !ok {
            return Err(Error::internal(format!(
                "mac spoof check rules for {} are missing",
                host_veth.name
            )));
        }
    }
    if conf.is_layer3() {
        check_addresses(&ctr, &ctr_link, &result)?;
        check_routes(&ctr, &result)?;
        if conf.ip_masq {
            let att = conf.attachment(args);
            let ips: Vec<_> = result.ips.iter().map(|ip| ip.address).collect();
            let ok = firewall::check_ipmasq(conf.ip_masq_backend, &att, &ips)
                .context("failed to read masquerade rules")?;
            if !ok {
                return Err(Error::internal(format!(
                    "masquerade rules for {:?} are missing",
                    args.container_id
                )));
            }
        }
    }
    Ok(())
}

fn check_bridge(
    host: &Netlink,
    conf: &BridgeConf,
    entry: Option<&Interface>,
) -> Result<Link, Error> {
    let Some(entry) = entry else {
        return Err(Error::internal(format!(
            "CNI created bridge {} in host namespace was not found",
            conf.bridge
        )));
    };
    let link = host
        .link_by_name(&entry.name)
        .context("failed to look up the bridge")?
        .ok_or_else(|| Error::internal(format!("Interface name {} not found", entry.name)))?;
    if link.kind.as_deref() != Some("bridge") {
        return Err(Error::internal(format!(
            "Interface {} does not have link type of bridge",
            entry.name
        )));
    }
    if !mac_matches(entry, &link) {
        return Err(Error::internal(format!(
            "Bridge interface {} Mac doesn't match: {}",
            entry.name, entry.mac
        )));
    }
    if link.promisc != conf.promisc_mode {
        return Err(Error::internal(format!(
            "Bridge interface {} configured Promisc Mode {} doesn't match current state: {}",
            entry.name, conf.promisc_mode, link.promisc
        )));
    }
    Ok(link)
}

fn check_container_iface(ctr: &Netlink, entry: &Interface) -> Result<Link, Error> {
    let link = ctr
        .link_by_name(&entry.name)
        .context("failed to look up the container interface")?
        .ok_or_else(|| {
            Error::internal(format!(
                "CNI created interface in container {} not found",
                entry.name
            ))
        })?;
    if link.kind.as_deref() != Some("veth") {
        return Err(Error::internal(format!(
            "Error: Container interface {} not of type veth",
            entry.name
        )));
    }
    if !mac_matches(entry, &link) {
        return Err(Error::internal(format!(
            "Interface {} Mac {} doesn't match container Mac: {}",
            entry.name,
            entry.mac,
            mac_string(link.mac)
        )));
    }
    Ok(link)
}

/// The host veth of the result whose peer is the container interface; it must be a port
/// of the bridge.
fn find_host_veth(
    host: &Netlink,
    result: &CniResult,
    br: &Link,
    ctr: &Link,
) -> Result<Link, Error> {
    for veth in host::result_veths(host, result, &br.name) {
        let (entry, link) = veth?;
        if Some(link.index) != ctr.peer_index || link.peer_index != Some(ctr.index) {
            continue;
        }
        if link.master != Some(br.index) {
            return Err(Error::internal(format!(
                "veth {} is not a port of bridge {}",
                link.name, br.name
            )));
        }
        if !mac_matches(entry, &link) {
            return Err(Error::internal(format!(
                "Interface {} Mac doesn't match: {} not found",
                entry.name, entry.mac
            )));
        }
        return Ok(link);
    }
    Err(Error::internal(format!(
        "CNI veth created for bridge {} was not found",
        br.name
    )))
}

/// The result records no MAC, or the link's.
fn mac_matches(entry: &Interface, link: &Link) -> bool {
    entry.mac.is_empty() || mac_string(link.mac) == entry.mac
}

fn check_addresses(ctr: &Netlink, link: &Link, result: &CniResult) -> Result<(), Error> {
    let present = ctr
        .addresses(Some(link.index))
        .context("failed to list container addresses")?;
    for ip in &result.ips {
        if !present.iter().any(|a| a.addr == ip.address) {
            return Err(Error::internal(format!(
                "Failed to match addr {} on interface {}",
                ip.address, link.name
            )));
        }
    }
    Ok(())
}

fn check_routes(ctr: &Netlink, result: &CniResult) -> Result<(), Error> {
    let mut routes = ctr
        .routes(IpFamily::V4)
        .context("failed to list container routes")?;
    routes.extend(
        ctr.routes(IpFamily::V6)
            .context("failed to list container routes")?,
    );
    for want in &result.routes {
        let found = routes.iter().any(|r| {
            r.dst == want.dst
                && want
                    .gw
                    .is_none_or(|gw| r.gateway == Some(gw) || r.multipath_gateways.contains(&gw))
        });
        if !found {
            let gw = want.gw.map(|g| format!(" via {g}")).unwrap_or_default();
            return Err(Error::internal(format!(
                "Expected route {}{gw} not found in the container",
                want.dst
            )));
        }
    }
    Ok(())
}
