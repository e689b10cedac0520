//! DEL: release every address of the attachment. Unknown attachments, a store that was
//! never created and a missing netns are all success. Only the store location of the
//! config is validated: a DEL carrying a config that broke since ADD still frees the
//! leases (a pod could never be torn down otherwise).

use crate::error::HostLocalError;
use crate::store::{Attachment, Store};
use libcni::skel::CmdArgs;

pub fn run(args: &CmdArgs) -> Result<(), HostLocalError> {
    let store_at = super::load_store_location(args)?;
    let att = Attachment::new(&args.container_id, &args.ifname);
    if let Some(mut store) = super::open_store(&store_at, false)? {
        store.release(&att)?;
    }
    Ok(())
}
