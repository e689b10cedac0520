//! ADD: one address per range set, routes from the config, DNS from `resolvConf`.

use crate::allocator;
use crate::dns;
use crate::store::Attachment;
use libcni::skel::CmdArgs;
use libcni::types::Dns;
use libcni::{CniResult, Error};

pub fn run(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = super::load(args)?;
    // Everything that can be refused is refused before the store is touched.
    let dns = match &conf.resolv_conf {
        Some(path) => dns::read(path).map_err(|e| {
            Error::invalid_config(format!("failed to read resolvConf {}: {e}", path.display()))
        })?,
        None => Dns::default(),
    };
    let att = Attachment::new(&args.container_id, &args.ifname);
    let mut store = super::open_store(&conf.store, true)?
        .ok_or_else(|| Error::internal("store directory vanished"))?;
    let ips = allocator::allocate(&mut store, &conf.ranges, &att, &conf.requested)?;
    drop(store);
    Ok(CniResult {
        cni_version: conf.cni_version,
        interfaces: vec![],
        ips,
        routes: conf.routes,
        dns,
    })
}
