//! The README's two commands install what they need: `scripts/packages.sh` asks apt-get
//! for exactly the packages whose tools are missing, says why, and names them clearly
//! where it cannot install. Run with a PATH that holds only what each case provides and
//! a stand-in apt-get that records its calls.

use std::path::Path;
use std::process::{Command, Output};

use cni_tests::TempDir;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// A PATH directory holding `tools` (stand-ins that do nothing) and, when `apt` is set,
/// an apt-get that appends its arguments to `apt.log`.
fn fake_path(tools: &[&str], apt: bool) -> TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("pkgpath");
    let mut scripts: Vec<(String, String)> = tools
        .iter()
        .map(|t| (t.to_string(), "exit 0".to_string()))
        .collect();
    if apt {
        let log = dir.join("apt.log");
        scripts.push((
            "apt-get".into(),
            format!("echo \"$@\" >> {}", log.display()),
        ));
    }
    for (name, body) in scripts {
        let path = dir.join(&name);
        std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // What packages.sh itself runs besides the tools it looks for.
    std::os::unix::fs::symlink("/usr/bin/id", dir.join("id")).unwrap();
    dir
}

fn run(path: &TempDir, go_plugins: &Path, function: &str) -> Output {
    run_with(
        path,
        go_plugins,
        Path::new("/nonexistent/busybox"),
        function,
    )
}

fn run_with(path: &TempDir, go_plugins: &Path, busybox: &Path, function: &str) -> Output {
    Command::new("/bin/bash")
        .args([
            "-c",
            &format!("source {REPO}/scripts/packages.sh && {function}"),
        ])
        .env_clear()
        .env("PATH", path.path())
        .env("CNI_RS_GO_PLUGINS", go_plugins)
        .env("CNI_RS_BUSYBOX", busybox)
        .output()
        .unwrap()
}

fn apt_calls(path: &TempDir) -> Vec<String> {
    std::fs::read_to_string(path.join("apt.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn installs_only_the_missing_packages_and_says_why() {
    let go = TempDir::new("nogo");
    let path = fake_path(&["ip", "ping"], true);
    let out = run(&path, go.path(), "need_test_packages");
    assert_installs(
        &path,
        &out,
        "iptables nftables conntrack containernetworking-plugins make",
        "the tests",
    );
}

/// As root, one apt-get run installed exactly `wanted`, saying `why`; otherwise nothing ran
/// and the error names them.
fn assert_installs(path: &TempDir, out: &Output, wanted: &str, why: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if is_root() {
        assert!(out.status.success(), "{stderr}");
        assert_eq!(
            apt_calls(path),
            ["update -q".to_string(), format!("install -y -q {wanted}")]
        );
        assert!(
            stderr.contains(&format!("installing {wanted} ({why})")),
            "{stderr}"
        );
    } else {
        assert!(!out.status.success());
        assert!(apt_calls(path).is_empty());
        assert!(stderr.contains(wanted), "{stderr}");
    }
}

#[test]
fn the_demo_needs_less_than_the_tests() {
    let go = TempDir::new("nogo");
    let path = fake_path(&["ip", "ping", "iptables"], true);
    let out = run(&path, go.path(), "need_demo_packages");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        apt_calls(&path).is_empty(),
        "nothing missing, nothing installed"
    );
    assert!(out.stderr.is_empty());
}

#[test]
fn nothing_is_installed_when_everything_is_there() {
    let go = TempDir::new("go");
    std::fs::write(go.join("bridge"), "").unwrap();
    let tools = [
        "ip",
        "ping",
        "iptables",
        "iptables-restore",
        "nft",
        "conntrack",
        "make",
    ];
    let path = fake_path(&tools, true);
    let out = run(&path, go.path(), "need_test_packages");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(apt_calls(&path).is_empty());
}

#[test]
fn without_apt_get_the_error_names_the_packages() {
    let go = TempDir::new("go");
    std::fs::write(go.join("bridge"), "").unwrap();
    let path = fake_path(&["ip", "iptables", "iptables-restore"], false);
    let out = run(&path, go.path(), "need_test_packages");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "missing packages for the tests (Debian names): iputils-ping nftables conntrack"
        ),
        "{stderr}"
    );
}

#[test]
fn the_runtime_tests_install_their_runtimes() {
    let go = TempDir::new("go");
    std::fs::write(go.join("bridge"), "").unwrap();
    let path = fake_path(&["ip", "iptables-save", "nft", "runc"], true);
    let out = run(&path, go.path(), "need_runtime_packages");
    assert_installs(
        &path,
        &out,
        "podman containerd jq busybox-static",
        "the runtime tests",
    );

    // With all of them there, nothing is installed.
    let tools = [
        "ip",
        "iptables-save",
        "nft",
        "runc",
        "podman",
        "containerd",
        "ctr",
        "jq",
    ];
    let path = fake_path(&tools, true);
    let busybox = go.join("bridge");
    let out = run_with(&path, go.path(), &busybox, "need_runtime_packages");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(apt_calls(&path).is_empty());
}
