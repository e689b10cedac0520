//! `cni-rs-agent --once` and `--uninstall` against the stub API server: the conflist per
//! address family, waiting for a podCIDR, errors with what to fix, idempotence.

mod support;

use std::os::unix::fs::MetadataExt;
use std::process::Stdio;

use serde_json::json;
use support::{Node, fake_binary, stderr};

fn ranges_and_routes(node: &Node) -> (serde_json::Value, serde_json::Value) {
    let conf = node.conflist();
    assert_eq!(conf["cniVersion"], "1.0.0");
    assert_eq!(conf["name"], "cni-rs");
    let bridge = &conf["plugins"][0];
    assert_eq!(conf["plugins"].as_array().unwrap().len(), 2);
    assert_eq!(
        conf["plugins"][1]["type"], "portmap",
        "hostPorts: chained after the bridge"
    );
    assert_eq!(
        conf["plugins"][1]["capabilities"],
        json!({"portMappings": true})
    );
    assert_eq!(bridge["type"], "bridge");
    assert_eq!(bridge["bridge"], "cni0");
    assert_eq!(bridge["isGateway"], true);
    assert_eq!(bridge["ipMasq"], false, "the agent masquerades at the node");
    assert_eq!(bridge["mtu"], 1400);
    assert_eq!(bridge["ipam"]["type"], "host-local");
    (
        bridge["ipam"]["ranges"].clone(),
        bridge["ipam"]["routes"].clone(),
    )
}

#[test]
fn ipv4_only_node() {
    let node = Node::new(&["10.244.3.0/24"]);
    node.once_ok();
    assert_eq!(
        ranges_and_routes(&node),
        (
            json!([[{"subnet": "10.244.3.0/24"}]]),
            json!([{"dst": "0.0.0.0/0"}])
        )
    );
    assert_eq!(node.names("bin"), ["bridge", "host-local", "loopback"]);
    for name in node.names("bin") {
        let path = node.dir.join("bin").join(&name);
        assert_eq!(std::fs::read(&path).unwrap(), fake_binary(&name, 1));
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o755);
    }
    assert_eq!(
        std::fs::metadata(node.conflist_path()).unwrap().mode() & 0o7777,
        0o644
    );
    assert_eq!(node.names("net.d"), ["10-cni-rs.conflist"]);
}

#[test]
fn ipv6_only_node() {
    let node = Node::new(&["fd00:10:244:3::/64"]);
    node.once_ok();
    assert_eq!(
        ranges_and_routes(&node),
        (
            json!([[{"subnet": "fd00:10:244:3::/64"}]]),
            json!([{"dst": "::/0"}])
        )
    );
}

#[test]
fn dual_stack_node_ipv6_first() {
    let node = Node::new(&["fd00:10:244:3::/64", "10.244.3.0/24"]);
    node.once_ok();
    assert_eq!(
        ranges_and_routes(&node),
        (
            json!([[{"subnet": "fd00:10:244:3::/64"}], [{"subnet": "10.244.3.0/24"}]]),
            json!([{"dst": "::/0"}, {"dst": "0.0.0.0/0"}])
        )
    );
}

#[test]
fn node_with_only_the_legacy_pod_cidr_field() {
    let node = Node::new(&["10.244.7.0/24"]);
    node.api.set(|b| b.legacy_pod_cidr_only = true);
    node.once_ok();
    assert_eq!(
        ranges_and_routes(&node).0,
        json!([[{"subnet": "10.244.7.0/24"}]])
    );
}

#[test]
fn in_cluster_address_with_an_ipv6_service_host() {
    let node = Node::listening_on("[::1]:0", &["10.244.3.0/24"]);
    let out = node
        .cmd()
        .env_remove("CNI_RS_API_SERVER")
        .env("KUBERNETES_SERVICE_HOST", "::1")
        .env("KUBERNETES_SERVICE_PORT", node.api.addr.port().to_string())
        .args(["--once", "--wait", "5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(node.api.requests(), 1);
    assert_eq!(
        ranges_and_routes(&node).0,
        json!([[{"subnet": "10.244.3.0/24"}]])
    );
}

#[test]
fn settings_flags_and_env_reach_the_conflist() {
    let node = Node::new(&["10.244.3.0/24"]);
    let out = node
        .cmd()
        .args([
            "--once",
            "--bridge",
            "kube0",
            "--mtu",
            "9000",
            "--conf-name",
            "05-pods.conflist",
        ])
        .env("CNI_RS_CNI_VERSION", "0.4.0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let conf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(node.dir.join("net.d/05-pods.conflist")).unwrap())
            .unwrap();
    assert_eq!(conf["cniVersion"], "0.4.0");
    assert_eq!(conf["plugins"][0]["bridge"], "kube0");
    assert_eq!(conf["plugins"][0]["mtu"], 9000);
}

#[test]
fn rerun_writes_nothing() {
    let node = Node::new(&["10.244.3.0/24", "fd00:10:244:3::/64"]);
    node.once_ok();
    let stamp = |node: &Node| -> Vec<(String, u64, i64, i64)> {
        [
            "bin/bridge",
            "bin/host-local",
            "bin/loopback",
            "net.d/10-cni-rs.conflist",
        ]
        .iter()
        .map(|p| {
            let m = std::fs::metadata(node.dir.join(p)).unwrap();
            (p.to_string(), m.ino(), m.mtime(), m.mtime_nsec())
        })
        .collect()
    };
    let before = stamp(&node);
    let out = node.once_ok();
    assert_eq!(stamp(&node), before);
    assert_eq!(node.names("bin"), ["bridge", "host-local", "loopback"]);
    assert_eq!(node.names("net.d"), ["10-cni-rs.conflist"]);
    // No "installed"/"wrote" line: nothing was done.
    let log = stderr(&out);
    assert!(
        !log.contains("installed") && !log.contains("wrote"),
        "{log}"
    );
}

#[test]
fn a_changed_binary_is_replaced_other_files_are_left_alone() {
    let node = Node::new(&["10.244.3.0/24"]);
    std::fs::write(node.dir.join("bin/macvlan"), "other vendor").unwrap();
    std::fs::write(node.dir.join("net.d/99-other.conflist"), "{}").unwrap();
    std::fs::write(node.dir.join("net.d/05-first.conf"), "{}").unwrap();
    let out = node.once_ok();
    assert!(
        stderr(&out).contains("warning: 05-first.conf sorts before 10-cni-rs.conflist"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("99-other"), "{}", stderr(&out));
    std::fs::write(node.dir.join("src/bridge"), fake_binary("bridge", 2)).unwrap();
    let out = node.once_ok();
    assert!(stderr(&out).contains("installed"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(node.dir.join("bin/bridge")).unwrap(),
        fake_binary("bridge", 2)
    );
    assert_eq!(
        std::fs::read(node.dir.join("bin/macvlan")).unwrap(),
        b"other vendor"
    );
    assert_eq!(
        std::fs::read(node.dir.join("net.d/99-other.conflist")).unwrap(),
        b"{}"
    );
}

#[test]
fn waits_for_the_pod_cidr_then_installs() {
    let node = Node::new(&[]);
    let child = node
        .cmd()
        .args(["--once", "--wait", "120"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Asked at least twice and still nothing written: no subnet was made up.
    support::eventually("two API requests", || node.api.requests() >= 2);
    assert!(node.names("net.d").is_empty() && node.names("bin").is_empty());
    node.api.set(|b| b.pod_cidrs = vec!["10.244.9.0/24".into()]);
    let out = child.wait_with_output().unwrap();
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("node node-1 has no spec.podCIDR(s) yet"),
        "{log}"
    );
    assert_eq!(
        ranges_and_routes(&node).0,
        json!([[{"subnet": "10.244.9.0/24"}]])
    );
}

#[test]
fn gives_up_after_wait_when_no_pod_cidr_comes() {
    let node = Node::new(&[]);
    let out = node.once(2, &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("gave up after --wait 2s: node node-1 has no spec.podCIDR(s) yet")
    );
    assert!(node.names("net.d").is_empty() && node.names("bin").is_empty());
}

/// A failing `--once` that retried, said what to fix and wrote nothing.
fn assert_retried_failure(node: &Node, wants: &[&str]) {
    let out = node.once(3, &[]);
    let log = stderr(&out);
    assert!(!out.status.success(), "{log}");
    for want in wants {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    assert!(log.matches("(retrying)").count() >= 2, "no retries:\n{log}");
    assert!(log.contains("gave up after --wait 3s"), "{log}");
    assert!(node.names("net.d").is_empty() && node.names("bin").is_empty());
}

#[test]
fn unauthorized_token_is_retried_and_explained() {
    let node = Node::new(&["10.244.3.0/24"]);
    std::fs::write(node.dir.join("sa/token"), "not-the-token").unwrap();
    assert_retried_failure(&node, &["401 Unauthorized", "rejects the token in"]);
    assert!(node.api.unauthorized() >= 2);
}

#[test]
fn forbidden_is_retried_and_names_the_missing_permission() {
    let node = Node::new(&["10.244.3.0/24"]);
    node.api.set(|b| b.forbidden = true);
    assert_retried_failure(
        &node,
        &[
            "403 Forbidden",
            "the ServiceAccount needs get, list and watch on nodes",
            "cannot get resource",
        ],
    );
    assert!(node.api.requests() >= 2);
}

#[test]
fn unreachable_api_server_is_retried_and_explained() {
    let node = Node::new(&["10.244.3.0/24"]);
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out_url = format!("https://127.0.0.1:{port}");
    let out = node
        .cmd()
        .args(["--once", "--wait", "3", "--api-server", &out_url])
        .output()
        .unwrap();
    let log = stderr(&out);
    assert!(!out.status.success(), "{log}");
    assert!(log.contains("cannot reach the API server"), "{log}");
    assert!(log.matches("(retrying)").count() >= 2, "{log}");
    assert!(node.names("net.d").is_empty() && node.names("bin").is_empty());
    assert_eq!(node.api.requests(), 0);
}

#[test]
fn bad_ca_is_retried_and_explained() {
    let node = Node::new(&["10.244.3.0/24"]);
    std::fs::write(
        node.dir.join("sa/ca.crt"),
        support::apiserver::other_ca_pem(),
    )
    .unwrap();
    assert_retried_failure(&node, &["TLS", "must chain to the CA in", "ca.crt"]);
    // The token never went to a server we could not authenticate.
    assert_eq!(node.api.requests(), 0);
}

#[test]
fn wrong_node_name_is_explained() {
    let node = Node::new(&["10.244.3.0/24"]);
    let out = node
        .cmd()
        .args(["--once", "--wait", "1", "--node-name", "node-2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no node named \"node-2\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn malformed_pod_cidr_fails_at_once_and_writes_nothing() {
    for (cidrs, want) in [
        (
            vec!["10.244.3.5/24"],
            "spec.podCIDRs \"10.244.3.5/24\" is not a network address",
        ),
        (
            vec!["10.244.3.0/33"],
            "spec.podCIDRs \"10.244.3.0/33\" is not a CIDR",
        ),
        (
            vec!["10.1.0.0/24", "10.2.0.0/24"],
            "two ranges of the same family",
        ),
    ] {
        let node = Node::new(&[]);
        node.api
            .set(|b| b.pod_cidrs = cidrs.iter().map(|s| s.to_string()).collect());
        let out = node.once(60, &[]);
        assert!(!out.status.success());
        assert!(stderr(&out).contains(want), "{}", stderr(&out));
        assert_eq!(
            node.api.requests(),
            1,
            "a malformed podCIDR is not retried by --once"
        );
        assert!(node.names("net.d").is_empty() && node.names("bin").is_empty());
    }
}

#[test]
fn missing_settings_are_named() {
    let node = Node::new(&["10.244.3.0/24"]);
    let out = node
        .cmd()
        .args(["--once", "--node-name", ""])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("NODE_NAME is not set"),
        "{}",
        stderr(&out)
    );
    let out = node
        .cmd()
        .args(["--once", "--node-name", "../x"])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("is not a Kubernetes node name"),
        "{}",
        stderr(&out)
    );
    // No --api-server and no in-cluster variables.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cni-rs-agent"))
        .env_clear()
        .args(["--once", "--node-name", "n"])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("KUBERNETES_SERVICE_HOST is not set"),
        "{}",
        stderr(&out)
    );
    let out = node
        .cmd()
        .arg("--once")
        .arg("--source-dir")
        .arg(node.dir.join("sa/none"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("source dir"), "{}", stderr(&out));
    assert!(node.names("net.d").is_empty() && node.names("bin").is_empty());
}

#[test]
fn help_documents_every_flag_with_its_environment_variable() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cni-rs-agent"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for (flag, env) in [
        ("--once", "CNI_RS_ONCE"),
        ("--uninstall", "CNI_RS_UNINSTALL"),
        ("--source-dir", "CNI_RS_SOURCE_DIR"),
        ("--bin-dir", "CNI_RS_BIN_DIR"),
        ("--conf-dir", "CNI_RS_CONF_DIR"),
        ("--conf-name", "CNI_RS_CONF_NAME"),
        ("--node-name", "NODE_NAME"),
        ("--api-server", "CNI_RS_API_SERVER"),
        ("--token-file", "CNI_RS_TOKEN_FILE"),
        ("--ca-file", "CNI_RS_CA_FILE"),
        ("--cni-version", "CNI_RS_CNI_VERSION"),
        ("--bridge", "CNI_RS_BRIDGE"),
        ("--mtu", "CNI_RS_MTU"),
        ("--interval", "CNI_RS_INTERVAL"),
        ("--wait", "CNI_RS_WAIT"),
    ] {
        assert!(
            help.contains(flag) && help.contains(&format!("[env: {env}")),
            "{flag}/{env} in:\n{help}"
        );
    }
}
