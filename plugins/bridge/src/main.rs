//! The `bridge` binary: skel runs the plugin.

fn main() {
    libcni::skel::plugin_main(
        &bridge::Bridge,
        &format!("CNI bridge plugin v{}", env!("CARGO_PKG_VERSION")),
    );
}
