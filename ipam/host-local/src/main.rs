//! host-local: the CNI IPAM plugin that hands out addresses from ranges and keeps its
//! leases as files, store-compatible with the reference Go plugin.

mod allocator;
mod config;
mod dns;
mod ip;
mod range;
mod range_set;
mod store;
mod verbs;

fn main() {
    libcni::skel::plugin_main(&verbs::HostLocal, "CNI host-local plugin (Rust)");
}
