//! The CNI portmap plugin (a pod's `hostPort`): a drop-in replacement for the reference Go
//! plugin, chained after the plugin that gives the pod its address. A library (the binary
//! is `main.rs`) so the fuzz targets can reach the config parser.

mod add;
mod check;
pub mod config;
mod error;
mod teardown;

#[cfg(test)]
mod tests;

use hostnet::kernel::HostKernel;
use libcni::skel::{CmdArgs, Plugin};
use libcni::{CniResult, Error};

pub struct Portmap;

impl Plugin for Portmap {
    fn add(&self, args: &CmdArgs) -> Result<String, Error> {
        let result: CniResult = add::add(&HostKernel, args)?;
        result.to_json_at(args.version)
    }
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(teardown::del(&HostKernel, args)?)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(check::check(&HostKernel, args)?)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(check::status(&HostKernel, args)?)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(teardown::gc(&HostKernel, args)?)
    }
}
