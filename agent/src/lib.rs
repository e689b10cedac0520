//! cni-rs-agent: the DaemonSet's node agent. It puts the cni-rs plugins and this node's
//! conflist onto the host, routes between the nodes' pods (direct routes or the VXLAN
//! overlay), masquerades what leaves the cluster and enforces NetworkPolicy. A library
//! beside the binary so tests run the agent in-process on a fake kernel.
//!
//! Its rooms, with the arrows one way (`control` uses all the others; none uses
//! `control`):
//! - `kube`: Kubernetes objects in (the API client, list + watch, the Node model);
//! - `desired`: the state this node should hold, a pure function of the Nodes;
//! - `reconcile`: only the difference applied, through `hostnet::node::NodeNet`;
//! - `files`: the node's files (plugin binaries, conflist, leases, atomic installs);
//! - `policy`: NetworkPolicy: the Pod, Namespace and NetworkPolicy watches into an
//!   inbox, the `netpol` engine, the difference written through `hostnet`'s `PolicyNet`;
//! - `serve`: `/readyz`, `/healthz`, `/metrics` and the metrics they show;
//! - `control`: the modes (`--once`, the agent, `--uninstall`), the agent's loop, signals.

// Unsafe code only where it is allowed by name: the signal syscalls in `control::signals`,
// the allocator's options in `alloc`.
#![deny(unsafe_code)]

mod alloc;
mod backoff;
pub mod config;
pub mod control;
pub mod desired;
pub mod error;
pub mod files;
pub mod kube;
pub mod policy;
pub mod reconcile;
pub mod serve;

/// One line per action on stderr.
pub fn log(msg: &str) {
    eprintln!("cni-rs-agent: {msg}");
}
