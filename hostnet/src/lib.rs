//! Linux kernel work shared by the plugins and the tests. Nothing else in the
//! workspace talks netlink, writes sysctls or runs firewall tools.

#![forbid(unsafe_code)]

pub mod firewall;
pub mod kernel;
pub mod netlink;
pub mod nftnl;
pub mod node;
pub mod policy;
pub mod sysctl;

#[cfg(test)]
mod testnet;
