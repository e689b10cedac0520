//! ADD: the mappings to the container's addresses (one batch per family), then
//! `route_localnet` for `127.0.0.1:hostPort`; prevResult passed on unchanged. A failure
//! removes whatever of this attachment was made.

use std::net::IpAddr;

use hostnet::firewall::portmap::PortMaps;
use hostnet::kernel::PortMapper;
use ipnetwork::IpNetwork;
use libcni::skel::CmdArgs;
use libcni::{CniResult, Error};

use crate::config::PortmapConf;
use crate::error::{PortmapError, firewall};

pub fn add(k: &impl PortMapper, args: &CmdArgs) -> Result<CniResult, PortmapError> {
    let conf = PortmapConf::load(&args.stdin_data)?;
    let Some(prev) = conf.common.prev_result.as_ref() else {
        return Err(Error::invalid_config("must be called as chained plugin").into());
    };
    let result = CniResult::parse_at(prev, args.version)?;
    if conf.mappings.is_empty() {
        return Ok(result);
    }
    let ips = conf.container_ips(args.version, &args.ifname)?;
    if ips.is_empty() {
        return Ok(result);
    }
    let maps = port_maps(&conf, args);
    let backend = conf.backend(k)?;
    // Automatic: iptables, nftables when iptables failed and is unusable (probed only then).
    let used = k
        .map_ports(backend, &maps, &ips)
        .map_err(firewall("unable to set up port mappings"))?;
    // After the rules, so new packets take them; failures are informative only.
    for ip in &ips {
        if let Err(e) = k.delete_udp_flows(&conf.mappings, ip.is_ipv6()) {
            libcni::log!("portmap: failed to delete stale UDP conntrack entries for {ip}: {e}");
        }
    }
    if let Err(e) = localnet(k, &conf, &ips) {
        let _ = k.unmap_ports(Some(used), maps.network, maps.container_id);
        return Err(e);
    }
    Ok(result)
}

/// The reference sets `route_localnet` for an IPv4 container when it masquerades.
fn localnet(
    k: &impl PortMapper,
    conf: &PortmapConf,
    ips: &[IpNetwork],
) -> Result<(), PortmapError> {
    if !conf.snat {
        return Ok(());
    }
    for ip in ips {
        if let IpAddr::V4(v4) = ip.ip() {
            k.route_localnet(v4)?;
        }
    }
    Ok(())
}

pub fn port_maps<'a>(conf: &'a PortmapConf, args: &'a CmdArgs) -> PortMaps<'a> {
    PortMaps {
        network: &conf.common.name,
        container_id: &args.container_id,
        mappings: &conf.mappings,
        snat: conf.snat,
        masq_all: conf.masq_all,
        mark: conf.mark.clone(),
        conditions_v4: &conf.conditions_v4,
        conditions_v6: &conf.conditions_v6,
    }
}
