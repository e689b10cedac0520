//! CHECK: the attachment must hold at least one address (like the reference, which
//! attachment's addresses they are is not compared with prevResult).

use crate::error::HostLocalError;
use crate::store::{Attachment, Store};
use libcni::skel::CmdArgs;

pub fn run(args: &CmdArgs) -> Result<(), HostLocalError> {
    let conf = super::load(args)?;
    let att = Attachment::new(&args.container_id, &args.ifname);
    let found = match super::open_store(&conf.store, false)? {
        Some(mut store) => !store.ips_of(&att)?.is_empty(),
        None => false,
    };
    if !found {
        return Err(HostLocalError::NotFound {
            container_id: args.container_id.clone(),
        });
    }
    Ok(())
}
