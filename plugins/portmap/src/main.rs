//! The `portmap` binary: skel runs the plugin.

fn main() {
    libcni::skel::plugin_main(
        &portmap::Portmap,
        &format!("CNI portmap plugin v{}", env!("CARGO_PKG_VERSION")),
    );
}
