//! The `host-local` binary: skel runs the plugin.

#![forbid(unsafe_code)]

fn main() {
    libcni::skel::plugin_main(&host_local::HostLocal, "CNI host-local plugin (Rust)");
}
