//! The CNI bridge plugin: a drop-in replacement for the reference Go plugin. A library
//! (the binary is `main.rs`) so the fuzz targets can reach the config parser.

mod add;
mod check;
pub mod config;
mod container;
mod del;
mod error;
mod gateway;
mod gc;
mod host;
mod ipam_result;
mod rollback;
mod vlan;

use libcni::skel::{CmdArgs, Plugin};
use libcni::{CniResult, Error};

// Each verb returns a `BridgeError`; `?` here turns it into the CNI error the runtime
// reads (`impl From<BridgeError> for libcni::Error`, the one mapping).

pub struct Bridge;

impl Plugin for Bridge {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        Ok(add::add(args)?)
    }
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(del::del(args)?)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(check::check(args)?)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(gc::status(args)?)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(gc::gc(args)?)
    }
}
