//! IPAM delegation, the one piece of the bridge's work that is not kernel work: the IPAM
//! plugin named by the config runs as a child ([`IpamPlugin`], through `libcni::invoke`).
//! The verb tests put a stand-in in its place (`tests/ipam.rs`).

use libcni::invoke::Delegate;
use libcni::types::CniResult;

/// The IPAM plugin of an attachment (`Sync`: DEL releases the IP on a thread of its own).
pub trait Ipam: Sync {
    /// IPAM ADD: reserves the attachment's addresses.
    fn add(&self, ipam: &Delegate) -> Result<CniResult, libcni::Error>;
    /// An IPAM verb without a result: DEL, CHECK, STATUS, GC.
    fn run(&self, ipam: &Delegate, verb: &str) -> Result<(), libcni::Error>;
}

/// The IPAM plugin found in CNI_PATH, run as a child that dies with the bridge.
pub struct IpamPlugin;

impl Ipam for IpamPlugin {
    fn add(&self, ipam: &Delegate) -> Result<CniResult, libcni::Error> {
        ipam.add()
    }

    fn run(&self, ipam: &Delegate, verb: &str) -> Result<(), libcni::Error> {
        ipam.run(verb)
    }
}
