//! host-local: the CNI IPAM plugin that hands out addresses from ranges and keeps its
//! leases as files, store-compatible with the reference Go plugin. A library (the binary is `main.rs`) so
//! the fuzz targets can reach the config parser and the store's file formats.

#![forbid(unsafe_code)]

mod allocator;
pub mod config;
mod dns;
pub mod error;
mod ip;
mod range;
mod range_set;
pub mod store;
mod verbs;

pub use error::HostLocalError;
pub use verbs::HostLocal;
