//! The node's files: the plugin binaries, the conflist, host-local's leases after a
//! reboot, all written atomically.

pub(crate) mod atomic;
pub(crate) mod binaries;
pub(crate) mod conflist;
mod installer;
pub(crate) mod leases;

pub use installer::{FilesError, Installer};
