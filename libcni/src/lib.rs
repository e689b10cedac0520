//! libcni: the CNI protocol (types, versions, errors, skel, invoke, netns) and the
//! runtime side (conflist loading, list operations, result cache).

// No unsafe code but the `allow`ed: the pre_exec hook that ties a delegated plugin to
// its caller (`invoke/tie.rs`) and one test that sets an env var.
#![deny(unsafe_code)]

pub mod args;
pub mod error;
pub mod file;
pub mod gojson;
pub mod goquote;
pub mod invoke;
pub mod netns;
pub mod runtime;
pub mod skel;
pub mod step;
pub mod task;
pub mod types;
pub mod version;

pub use error::Error;
pub use types::CniResult;
