//! skel's panic hook, seen from the runtime side: a plugin that panics still answers with
//! a CNI error JSON on stdout and a failing exit status.

use cni_tests::{PluginRun, bin_path};

#[test]
fn a_panicking_plugin_prints_an_error_json() {
    let out = PluginRun::new(bin_path("panicking-plugin"))
        .command("DEL")
        .container_id("c1")
        .ifname("eth0")
        .netns("")
        .cni_path(["/nonexistent"])
        .stdin(r#"{"cniVersion":"1.1.0","name":"n","type":"panicking-plugin"}"#)
        .run();
    let error = out.assert_failure();
    assert_eq!(error["code"], 999, "{error}");
    assert_eq!(error["msg"], "internal error: DEL went wrong");
    let details = error["details"].as_str().unwrap();
    assert!(
        details.starts_with("panicked at tests/src/bin/panicking-plugin.rs:"),
        "{details}"
    );
    // The default hook still explains the panic on stderr.
    assert!(String::from_utf8_lossy(&out.stderr).contains("DEL went wrong"));
}
