//! CHECK (the attachment's rules are there) and STATUS (the backend's tool works).

use hostnet::firewall::Backend;
use hostnet::kernel::PortMapper;
use libcni::Error;
use libcni::skel::CmdArgs;

use crate::add::port_maps;
use crate::config::PortmapConf;
use crate::error::{PortmapError, firewall};

pub fn check(k: &impl PortMapper, args: &CmdArgs) -> Result<(), PortmapError> {
    let conf = PortmapConf::load(&args.stdin_data)?;
    if conf.common.prev_result.is_none() {
        return Err(Error::invalid_config("Required prevResult missing").into());
    }
    if conf.mappings.is_empty() {
        return Ok(());
    }
    let ips = conf.container_ips(args.version, &args.ifname)?;
    let (backend, there) = k
        .check_ports(conf.backend(k)?, &port_maps(&conf, args), &ips)
        .map_err(firewall("could not check port mappings"))?;
    match there {
        true => Ok(()),
        false => Err(PortmapError::Missing {
            container_id: args.container_id.clone(),
            backend: backend.as_str(),
        }),
    }
}

/// Ready when the configured backend's tool (automatic: either tool) works here.
pub fn status(k: &impl PortMapper, args: &CmdArgs) -> Result<(), PortmapError> {
    let conf = PortmapConf::load(&args.stdin_data)?;
    if k.ports_usable(conf.backend) {
        return Ok(());
    }
    Err(PortmapError::Unavailable(match conf.backend {
        Some(Backend::IpTables) => "iptables",
        Some(Backend::NfTables) => "nftables",
        None => "neither iptables nor nftables",
    }))
}
