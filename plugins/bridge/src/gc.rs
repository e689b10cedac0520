//! GC and STATUS, which the reference never implemented for the bridge.

use crate::config::BridgeConf;
use hostnet::firewall::{self, spoofcheck};
use hostnet::netlink::Netlink;
use libcni::Error;
use libcni::error::code;
use libcni::skel::CmdArgs;

/// Removes the masquerade rules (both backends) and spoof-check chains of attachments of
/// this network that are not in `cni.dev/valid-attachments`, then forwards GC to the IPAM
/// plugin. Without the key nothing is removed here (the IPAM plugin decides for itself).
/// Every step runs; the first error is returned.
pub fn gc(args: &CmdArgs) -> Result<(), Error> {
    let conf = BridgeConf::load_for_teardown(&args.stdin_data, &args.args, "GC")?;
    let mut errors = Vec::new();
    if let Some(valid) = conf.common.gc_attachments()? {
        let valid: Vec<(&str, &str)> = valid
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        if let Err(e) = firewall::gc_ipmasq(conf.name(), &valid) {
            errors.push(crate::fail::firewall_fail(
                "failed to collect masquerade rules",
                e,
            ));
        }
        // Spoof-check rules carry no network name: only those whose host veth is gone go.
        if let Err(e) = spoofcheck::gc(&valid) {
            errors.push(crate::fail::firewall_fail(
                "failed to collect mac spoof check rules",
                e,
            ));
        }
    }
    if conf.is_layer3() {
        let ipam = conf.ipam(args);
        if let Err(e) = ipam.run("GC") {
            errors.push(e);
        }
    }
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Ready unless the IPAM plugin says otherwise or the bridge name is taken by a link that
/// is not a bridge (ADD would fail).
pub fn status(args: &CmdArgs) -> Result<(), Error> {
    let conf = BridgeConf::load(&args.stdin_data, &args.args)?;
    let nl = Netlink::current().map_err(|e| {
        Error::new(
            code::PLUGIN_NOT_AVAILABLE,
            format!("netlink unavailable: {e}"),
        )
    })?;
    match nl.link_by_name(&conf.bridge) {
        Ok(Some(link)) if link.kind.as_deref() != Some("bridge") => {
            return Err(Error::new(
                code::PLUGIN_NOT_AVAILABLE,
                format!("{:?} already exists but is not a bridge", conf.bridge),
            ));
        }
        Ok(_) => {}
        Err(e) => {
            return Err(Error::new(
                code::PLUGIN_NOT_AVAILABLE,
                format!("could not lookup {:?}: {e}", conf.bridge),
            ));
        }
    }
    if conf.is_layer3() {
        conf.ipam(args).run("STATUS")?;
    }
    Ok(())
}
