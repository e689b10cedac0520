//! STATUS, which the reference never implemented for the bridge.

use crate::config::BridgeConf;
use crate::error::{BridgeError, During};
use crate::ipam::Ipam;
use hostnet::kernel::{Kernel, Links};
use libcni::skel::CmdArgs;

/// Ready unless the IPAM plugin says otherwise or the bridge name is taken by a link that
/// is not a bridge (ADD would fail).
pub fn status<K: Kernel>(k: &K, ipam: &dyn Ipam, args: &CmdArgs) -> Result<(), BridgeError> {
    let conf = BridgeConf::load(&args.stdin_data, &args.args)?;
    let nl = k
        .host()
        .during(|| "netlink unavailable")
        .map_err(BridgeError::unavailable)?;
    let link = nl
        .link_by_name(&conf.bridge)
        .during(|| format!("could not lookup {name:?}", name = conf.bridge))
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
        ipam.run(&conf.ipam(args), "STATUS")?;
    }
    Ok(())
}
