//! DEL: release every address of the attachment. Unknown attachments, a store that was
//! never created and a missing netns are all success.

use crate::store::{Attachment, Store};
use libcni::Error;
use libcni::skel::CmdArgs;

pub fn run(args: &CmdArgs) -> Result<(), Error> {
    let conf = super::load(args)?;
    let att = Attachment::new(&args.container_id, &args.ifname);
    if let Some(mut store) = super::open_store(&conf, false)? {
        store.release(&att)?;
    }
    Ok(())
}
