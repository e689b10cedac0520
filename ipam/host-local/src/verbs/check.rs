//! CHECK: the attachment must hold at least one address (like the reference, which
//! attachment's addresses they are is not compared with prevResult).

use crate::store::{Attachment, Store};
use libcni::Error;
use libcni::skel::CmdArgs;

pub fn run(args: &CmdArgs) -> Result<(), Error> {
    let conf = super::load(args)?;
    let att = Attachment::new(&args.container_id, &args.ifname);
    let found = match super::open_store(&conf.store, false)? {
        Some(mut store) => !store.ips_of(&att)?.is_empty(),
        None => false,
    };
    if !found {
        return Err(Error::internal(format!(
            "host-local: Failed to find address added by container {}",
            args.container_id
        )));
    }
    Ok(())
}
