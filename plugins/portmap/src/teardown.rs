//! DEL and GC. DEL removes the attachment's rules by name (chain hash, container ID): no
//! prevResult, netns or container address is needed, and a config that broke after ADD
//! does not stop it. Both backends are cleaned (the attachment may have been made under
//! another config).

use std::collections::BTreeSet;

use hostnet::kernel::PortMapper;
use libcni::skel::CmdArgs;
use libcni::types::NetConf;

use crate::config::PortmapConf;
use crate::error::{PortmapError, firewall};

pub fn del(k: &impl PortMapper, args: &CmdArgs) -> Result<(), PortmapError> {
    // The network name is needed to find the rules; the rest of the config is not.
    let common = NetConf::parse(&args.stdin_data)?;
    match PortmapConf::load(&args.stdin_data) {
        // As the reference: an attachment without mappings has no rules (GC finds any).
        Ok(conf) if conf.mappings.is_empty() => return Ok(()),
        Ok(_) => {}
        Err(e) => libcni::log!(
            "portmap: DEL: removing the rules despite a config mistake: {}",
            e.msg
        ),
    }
    k.unmap_ports(None, &common.name, &args.container_id)
        .map_err(firewall("could not remove port mappings"))
}

/// Removes the iptables mappings of this network's attachments not in
/// `cni.dev/valid-attachments` (a `null` list is an empty one; without the key nothing
/// goes).
pub fn gc(k: &impl PortMapper, args: &CmdArgs) -> Result<(), PortmapError> {
    let common = NetConf::parse(&args.stdin_data)?;
    let Some(list) = common.gc_attachments() else {
        return Ok(());
    };
    let valid: BTreeSet<&str> = list.iter().map(|a| a.container_id.as_str()).collect();
    let valid: Vec<&str> = valid.into_iter().collect();
    k.collect_port_maps(&common.name, &valid)
        .map_err(firewall("could not collect port mappings"))
}
