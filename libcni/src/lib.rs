//! libcni: the CNI protocol (types, versions, errors, skel, invoke) and the runtime side
//! (conflist loading, list operations, result cache). Namespaces, threads, the child tie
//! and step points live beneath it, in `sysproc`.

// No unsafe code but the `allow`ed: one test that sets an env var.
#![deny(unsafe_code)]

pub mod args;
pub mod error;
pub mod file;
pub mod gojson;
pub mod invoke;
pub mod runtime;
pub mod skel;
pub mod types;
pub mod version;

pub use error::Error;
pub use types::CniResult;
