//! GC, which the reference never implemented for the bridge.

use crate::config::BridgeConf;
use crate::error::{BridgeError, During};
use crate::ipam::Ipam;
use hostnet::kernel::Kernel;
use libcni::skel::CmdArgs;

/// Removes the masquerade rules (both backends) and spoof-check chains of attachments of
/// this network that are not in `cni.dev/valid-attachments` (`null` is the empty list, see
/// [`libcni::types::NetConf::gc_attachments`]), then forwards GC to the IPAM plugin.
/// Without the key nothing is removed here (the IPAM plugin decides for itself).
/// Every step runs; every failure is returned ([`BridgeError::all`]).
pub fn gc<K: Kernel>(k: &K, ipam: &dyn Ipam, args: &CmdArgs) -> Result<(), BridgeError> {
    let conf = BridgeConf::load_for_teardown(&args.stdin_data, &args.args, "GC")?;
    let mut results = Vec::new();
    if let Some(valid) = conf.common.gc_attachments() {
        let valid: Vec<(&str, &str)> = valid
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        results.push(
            k.collect_masquerades(conf.name(), &valid)
                .during(|| "failed to collect masquerade rules"),
        );
        // Spoof-check rules carry no network name: only those whose host veth is gone go.
        results.push(
            k.collect_spoof_checks(&valid)
                .during(|| "failed to collect mac spoof check rules"),
        );
    }
    if conf.is_layer3() {
        results.push(ipam.run(&conf.ipam(args), "GC").map_err(BridgeError::from));
    }
    BridgeError::all(results)
}
