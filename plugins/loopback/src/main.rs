//! The CNI loopback plugin: brings `lo` up in the container. containerd's CRI plugin runs
//! it for every pod, beside the pod network. A drop-in replacement for the reference Go
//! plugin: same results, same errors; CNI_IFNAME is ignored (it is always `lo`).

#![forbid(unsafe_code)]

mod add;
mod lo;
#[cfg(test)]
mod tests;

use hostnet::kernel::HostKernel;
use libcni::Error;
use libcni::skel::{CmdArgs, Plugin, plugin_main};

struct Loopback;

impl Plugin for Loopback {
    fn add(&self, args: &CmdArgs) -> Result<String, Error> {
        add::result_json(&add::add(&HostKernel, args)?, &args.version.to_string())
    }
    /// Fails like the reference when the namespace cannot be opened or `lo` is down.
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        Ok(lo::check(&HostKernel, args)?)
    }
    /// Never an error (`lo::del`).
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        lo::del(&HostKernel, args);
        Ok(())
    }
    fn status(&self, _: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }
    /// No state outside the container, so nothing to collect.
    fn gc(&self, _: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {
    plugin_main(
        &Loopback,
        &format!("CNI loopback plugin v{}", env!("CARGO_PKG_VERSION")),
    );
}
