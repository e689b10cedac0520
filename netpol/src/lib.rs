//! Kubernetes NetworkPolicy for the node agent: the pure part. See README.md.
//!
//! `model` (the API's JSON) -> `validate` (what can be enforced exactly; the rest is
//! refused, its pods isolated) and `select` (label selectors) -> `cluster` (normalized
//! objects) -> `oracle` (the semantics, plainly: the test truth table) and `compile`
//! (one node's nftables-shaped `program`) -> `diff` (what to change in the kernel) and
//! `eval` (the program run on one packet, as nftables would). `engine` is the long-lived
//! form of `compile` for the agent: events in, the kernel's `Changes` out, its program
//! always equal to `compile` of the same objects.

pub mod addr;
pub mod build;
pub mod cluster;
pub mod compile;
pub mod conntrack;
pub mod diff;
pub mod engine;
pub mod eval;
pub mod members;
pub mod model;
pub mod oracle;
pub mod program;
pub mod select;
pub mod selection;
pub mod update;
pub mod validate;
