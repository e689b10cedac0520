//! ADD: one address per range set, routes from the config, DNS from `resolvConf`.

use crate::allocator;
use crate::dns;
use crate::error::HostLocalError;
use crate::store::Attachment;
use libcni::CniResult;
use libcni::skel::CmdArgs;
use libcni::types::Dns;

pub fn run(args: &CmdArgs) -> Result<CniResult, HostLocalError> {
    let conf = super::load(args)?;
    // Everything that can be refused is refused before the store is touched.
    let dns = match &conf.resolv_conf {
        Some(path) => dns::read(path).map_err(|source| HostLocalError::ResolvConf {
            path: path.clone(),
            source,
        })?,
        None => Dns::default(),
    };
    let att = Attachment::new(&args.container_id, &args.ifname);
    let mut store = super::open_store(&conf.store, true)?.ok_or(HostLocalError::StoreVanished)?;
    let ips = allocator::allocate(&mut store, &conf.ranges, &att, &conf.requested)?;
    drop(store);
    Ok(CniResult {
        cni_version: conf.version.to_string(),
        interfaces: vec![],
        ips,
        routes: conf.routes,
        dns,
    })
}
