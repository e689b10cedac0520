//! The CNI verbs, one module each; [`HostLocal`] hands them to skel. Each verb returns a
//! [`HostLocalError`]; it becomes a CNI error in one place ([`crate::error`]).

mod add;
mod check;
mod del;
mod gc;
mod status;

use crate::config::{self, IpamConfig, StoreLocation};
use crate::error::HostLocalError;
use crate::store::disk::DiskStore;
use libcni::Error;
use libcni::skel::{CmdArgs, Plugin};

pub struct HostLocal;

impl Plugin for HostLocal {
    fn add(&self, args: &CmdArgs) -> Result<String, Error> {
        add::run(args)?.to_json_at(args.version)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(del::run(args)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(check::run(args)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        status::run(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        gc::run(args)
    }
}

fn load(args: &CmdArgs) -> Result<IpamConfig, HostLocalError> {
    Ok(config::load(&args.stdin_data, &args.args, args.version)?)
}

/// DEL and GC validate only where the store is (see [`config::load_store_location`]).
fn load_store_location(args: &CmdArgs) -> Result<StoreLocation, HostLocalError> {
    Ok(config::load_store_location(&args.stdin_data)?)
}

/// The network's store, locked; None when it was never created (and `create` is false).
fn open_store(at: &StoreLocation, create: bool) -> Result<Option<DiskStore>, HostLocalError> {
    Ok(DiskStore::open(&at.data_dir, &at.name, create)?)
}
