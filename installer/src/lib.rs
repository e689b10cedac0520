//! cni-install: the DaemonSet container that puts the cni-rs plugins and this node's
//! conflist onto the host, and the node agent that routes between the nodes' pods. A
//! library beside the binary so tests run the agent in-process on a fake kernel.

// Unsafe code only where it is allowed by name: the signal syscalls in `signals`.
#![deny(unsafe_code)]

pub mod agent;
pub mod api;
mod atomic;
mod backoff;
mod binaries;
pub mod config;
mod conflist;
pub mod desired;
pub mod health;
mod leases;
pub mod nodes;
mod podcidr;
pub mod reconcile;
pub mod run;
#[allow(unsafe_code)]
pub mod signals;
pub mod watcher;

/// One line per action on stderr.
pub fn log(msg: &str) {
    eprintln!("cni-install: {msg}");
}
