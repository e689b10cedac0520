//! Privileged tests against the real kernel, each in its own network namespace.

mod facade;
mod interop;
mod iptables;
mod nftables;
mod spoofcheck;
mod support;
