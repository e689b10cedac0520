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
mod ipam;
mod ipam_result;
mod rollback;
mod status;
mod vlan;

#[cfg(test)]
mod tests;

use hostnet::kernel::HostKernel;
use ipam::IpamPlugin;
use libcni::Error;
use libcni::skel::{CmdArgs, Plugin};

// Each verb returns a `BridgeError`; `?` here turns it into the CNI error the runtime
// reads (`impl From<BridgeError> for libcni::Error`, the one mapping).

pub struct Bridge;

impl Plugin for Bridge {
    /// ADD renders its result inside its rollback scope; skel prints that string.
    fn add(&self, args: &CmdArgs) -> Result<String, Error> {
        Ok(add::add(&HostKernel, &IpamPlugin, args)?)
    }
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(del::del(&HostKernel, &IpamPlugin, args)?)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(check::check(&HostKernel, &IpamPlugin, args)?)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(status::status(&HostKernel, &IpamPlugin, args)?)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(gc::gc(&HostKernel, &IpamPlugin, args)?)
    }
}
