//! The CNI verbs, one module each; [`HostLocal`] hands them to skel.

mod add;
mod check;
mod del;
mod gc;
mod status;

use crate::config::{self, IpamConfig, StoreLocation};
use crate::store::disk::DiskStore;
use libcni::Error;
use libcni::skel::{CmdArgs, Plugin};

pub struct HostLocal;

impl Plugin for HostLocal {
    fn add(&self, args: &CmdArgs) -> Result<libcni::CniResult, Error> {
        add::run(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        del::run(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::run(args)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        status::run(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        gc::run(args)
    }
}

fn load(args: &CmdArgs) -> Result<IpamConfig, Error> {
    Ok(config::load(&args.stdin_data, &args.args)?)
}

/// DEL and GC validate only where the store is (see [`config::load_store_location`]).
fn load_store_location(args: &CmdArgs) -> Result<StoreLocation, Error> {
    Ok(config::load_store_location(&args.stdin_data)?)
}

/// The network's store, locked; None when it was never created (and `create` is false).
fn open_store(at: &StoreLocation, create: bool) -> Result<Option<DiskStore>, Error> {
    Ok(DiskStore::open(&at.data_dir, &at.name, create)?)
}
