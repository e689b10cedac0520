//! The `host-local` binary: skel runs the plugin.

fn main() {
    libcni::skel::plugin_main(&host_local::HostLocal, "CNI host-local plugin (Rust)");
}
