//! The CNI bridge plugin: a drop-in replacement for the reference Go plugin. A library
//! (the binary is `main.rs`) so the fuzz targets can reach the config parser.

mod add;
mod check;
pub mod config;
mod container;
mod del;
mod fail;
mod gateway;
mod gc;
mod host;
mod ipam_result;
mod rollback;
mod vlan;

use libcni::skel::{CmdArgs, Plugin};
use libcni::{CniResult, Error};

pub struct Bridge;

impl Plugin for Bridge {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        del::del(args)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        gc::status(args)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        gc::gc(args)
    }
}
