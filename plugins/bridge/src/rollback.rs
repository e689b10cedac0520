//! What a failed ADD undoes: the spoof check and masquerade rules, the veth pair, then
//! the IP reservation (the link goes before the IP, so the IP is never in use twice).

use crate::config::BridgeConf;
use crate::ipam::Ipam;
use hostnet::kernel::{Kernel, Links};
use ipnetwork::IpNetwork;
use libcni::skel::CmdArgs;

#[derive(Default)]
pub struct Rollback {
    /// The host end's name, known from the moment the pair exists (a failure looking it up
    /// must still remove it).
    pub host_veth: Option<String>,
    pub spoofcheck: bool,
    pub ipam: bool,
    pub ipmasq: Vec<IpNetwork>,
}

impl Rollback {
    /// Best effort: every step runs, failures are logged to stderr.
    pub fn run<K: Kernel>(
        self,
        k: &K,
        ipam: &dyn Ipam,
        host: &dyn Links,
        conf: &BridgeConf,
        args: &CmdArgs,
    ) {
        let log =
            |what: &str, e: &dyn std::fmt::Display| libcni::log!("bridge: rollback: {what}: {e}");
        if !self.ipmasq.is_empty() {
            let att = conf.attachment(args);
            if let Err(e) = k.unmasquerade(&att, &self.ipmasq) {
                log("remove masquerade rules", &e);
            }
        }
        if self.spoofcheck
            && let Err(e) = k.remove_spoof_check(&args.container_id, &args.ifname)
        {
            log("remove mac spoof check", &e);
        }
        if let Some(name) = self.host_veth {
            let deleted = host
                .link_by_name(&name)
                .and_then(|link| link.map_or(Ok(()), |l| host.delete_link(l.index)));
            match deleted {
                Err(e) if !e.is_no_device() => log("delete veth", &e),
                _ => {}
            }
        }
        if self.ipam
            && let Err(e) = ipam.run(&conf.ipam(args), "DEL")
        {
            log("release IP", &e);
        }
    }
}
