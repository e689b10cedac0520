//! libcni: the CNI protocol (types, versions, errors, skel, invoke, netns) and the
//! runtime side (conflist loading, list operations, result cache).

// The library has no unsafe code; one test sets an env var (unsafe since edition 2024)
// and says so with an `allow`.
#![cfg_attr(not(test), forbid(unsafe_code))]
#![cfg_attr(test, deny(unsafe_code))]

pub mod args;
pub mod error;
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
