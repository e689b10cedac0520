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
mod kernel;
mod rollback;
mod vlan;

#[cfg(test)]
mod tests;

use kernel::Real;
use libcni::skel::{CmdArgs, Plugin};
use libcni::{CniResult, Error};

// Each verb returns a `BridgeError`; `?` here turns it into the CNI error the runtime
// reads (`impl From<BridgeError> for libcni::Error`, the one mapping).

pub struct Bridge;

impl Plugin for Bridge {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        Ok(add::add(&Real, args)?.result)
    }
    /// ADD renders its result inside its rollback scope; skel prints that string.
    fn add_json(&self, args: &CmdArgs) -> Result<String, Error> {
        Ok(add::add(&Real, args)?.json)
    }
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(del::del(&Real, args)?)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(check::check(&Real, args)?)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(gc::status(&Real, args)?)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(gc::gc(&Real, args)?)
    }
}
