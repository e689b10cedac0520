//! GC and STATUS, which the reference never implemented for the bridge.

use crate::config::BridgeConf;
use crate::error::{BridgeError, During, Op};
use crate::kernel::Kernel;
use libcni::skel::CmdArgs;

/// Removes the masquerade rules (both backends) and spoof-check chains of attachments of
/// this network that are not in `cni.dev/valid-attachments` (`null` is the empty list, see
/// [`libcni::types::NetConf::gc_attachments`]), then forwards GC to the IPAM plugin.
/// Without the key nothing is removed here (the IPAM plugin decides for itself).
/// Every step runs; every failure is returned ([`BridgeError::all`]).
pub fn gc(k: &dyn Kernel, args: &CmdArgs) -> Result<(), BridgeError> {
    let conf = BridgeConf::load_for_teardown(&args.stdin_data, &args.args, "GC")?;
    let mut results = Vec::new();
    if let Some(valid) = conf.common.gc_attachments() {
        let valid: Vec<(&str, &str)> = valid
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        results.push(k.gc_ipmasq(conf.name(), &valid).during(Op::GcIpMasq));
        // Spoof-check rules carry no network name: only those whose host veth is gone go.
        results.push(k.gc_spoofcheck(&valid).during(Op::GcSpoofCheck));
    }
    if conf.is_layer3() {
        results.push(
            k.ipam_run(&conf.ipam(args), "GC")
                .map_err(BridgeError::from),
        );
    }
    BridgeError::all(results)
}

/// Ready unless the IPAM plugin says otherwise or the bridge name is taken by a link that
/// is not a bridge (ADD would fail).
pub fn status(k: &dyn Kernel, args: &CmdArgs) -> Result<(), BridgeError> {
    let conf = BridgeConf::load(&args.stdin_data, &args.args)?;
    let nl = k
        .host()
        .during(Op::NetlinkUnavailable)
        .map_err(BridgeError::unavailable)?;
    let link = nl
        .link_by_name(&conf.bridge)
        .during(Op::Lookup {
            verb: "could not lookup",
            name: conf.bridge.clone(),
        })
        .map_err(BridgeError::unavailable)?;
    if let Some(link) = link
        && link.kind.as_deref() != Some("bridge")
    {
        let e = BridgeError::NotABridge {
            name: conf.bridge.clone(),
        };
        return Err(e.unavailable());
    }
    if conf.is_layer3() {
        k.ipam_run(&conf.ipam(args), "STATUS")?;
    }
    Ok(())
}
