use super::*;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use testkit::TempDir;

/// A directory of small shell-script plugins, removed on drop.
struct PluginDir(TempDir);

impl PluginDir {
    fn new(tag: &str) -> PluginDir {
        PluginDir(TempDir::new(&format!("libcni-invoke-{tag}")))
    }

    fn path(&self) -> PathBuf {
        self.0.path().to_path_buf()
    }

    fn plugin(&self, name: &str, script: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

#[test]
fn find_in_path_rules() {
    let d = PluginDir::new("find");
    let other = PluginDir::new("find-other");
    d.plugin("p", "true");
    std::fs::create_dir(other.0.join("p")).unwrap(); // a directory is not a plugin
    let found = find_in_path("p", &[other.path(), d.path()]).unwrap();
    assert_eq!(found, d.0.join("p"));
    assert_eq!(
        find_in_path("", &[d.path()]).unwrap_err().msg,
        "no plugin name provided"
    );
    assert!(
        find_in_path("../p", &[d.path()])
            .unwrap_err()
            .msg
            .starts_with("invalid plugin name")
    );
    assert_eq!(find_in_path("p", &[]).unwrap_err().msg, "no paths provided");
    let e = find_in_path("missing", &[d.path()]).unwrap_err();
    assert_eq!(
        e.msg,
        format!(
            "failed to find plugin \"missing\" in path [{}]",
            d.path().display()
        )
    );
}

#[test]
fn passes_env_and_stdin_and_returns_result() {
    let d = PluginDir::new("result");
    // Echoes stdin's cniVersion-less result and proves it saw the env.
    let p = d.plugin(
        "p",
        r#"read -r line; [ "$CNI_COMMAND" = ADD ] || exit 3
echo '{"ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}]}'"#,
    );
    let r = exec_plugin_with_result(
        &p,
        b"{\"cniVersion\":\"0.4.0\",\"name\":\"n\"}\n",
        &[("CNI_COMMAND", "ADD")],
    )
    .unwrap();
    assert_eq!(r.cni_version, "0.4.0");
    assert_eq!(r.ips[0].gateway.unwrap().to_string(), "10.0.0.1");
}

#[test]
fn returns_plugin_error_json_unchanged() {
    let d = PluginDir::new("errjson");
    let p = d.plugin(
        "p",
        r#"echo '{"code":11,"msg":"try later","details":"busy"}'; exit 1"#,
    );
    let e = exec_plugin(&p, b"{}", &[]).unwrap_err();
    assert_eq!(e, Error::new(11, "try later").with_details("busy"));
}

#[test]
fn clear_errors_for_empty_and_garbage_output() {
    let d = PluginDir::new("garbage");
    let silent = d.plugin("silent", "exit 2");
    assert_eq!(
        exec_plugin(&silent, b"{}", &[]).unwrap_err().msg,
        "netplugin failed with no error message: exit status: 2"
    );
    let talks = d.plugin("talks", "echo oops >&2; exit 1");
    assert_eq!(
        exec_plugin(&talks, b"{}", &[]).unwrap_err().msg,
        "netplugin failed: \"oops\": exit status: 1"
    );
    let garbage = d.plugin("garbage", "echo 'not json'; exit 1");
    assert!(
        exec_plugin(&garbage, b"{}", &[])
            .unwrap_err()
            .msg
            .starts_with(
                "netplugin failed but error parsing its diagnostic message \"not json\\n\""
            )
    );
    let empty_ok = d.plugin("empty", "exit 0");
    assert_eq!(
        exec_plugin_with_result(&empty_ok, b"{}", &[])
            .unwrap_err()
            .code,
        6
    );
    let bad_ok = d.plugin("bad", "echo '{\"ips\":7}'");
    assert!(
        exec_plugin_with_result(&bad_ok, br#"{"cniVersion":"1.0.0"}"#, &[])
            .unwrap_err()
            .msg
            .contains("invalid result")
    );
}

#[test]
fn missing_plugin_binary() {
    let e = exec_plugin(Path::new("/nonexistent/plugin"), b"{}", &[]).unwrap_err();
    assert!(
        e.msg.starts_with("failed to execute /nonexistent/plugin"),
        "{}",
        e.msg
    );
}

#[test]
#[allow(unsafe_code)]
fn delegate_overrides_only_the_command() {
    let d = PluginDir::new("delegate");
    d.plugin(
        "ipam",
        r#"[ "$CNI_COMMAND" = DEL ] && [ "$DELEGATE_MARK" = kept ] || exit 5"#,
    );
    // The child inherits our environment: set a marker only for this process's children.
    // SAFETY: tests in this module do not read DELEGATE_MARK concurrently.
    unsafe { std::env::set_var("DELEGATE_MARK", "kept") };
    let path = d.path().display().to_string();
    let del = Delegate {
        plugin_type: "ipam",
        cni_path: &path,
        netconf: b"{}",
    };
    del.run("DEL").unwrap();
    assert!(del.run("CHECK").is_err());
    let missing = Delegate {
        plugin_type: "nope",
        cni_path: &path,
        netconf: b"{}",
    };
    assert!(
        missing
            .run("DEL")
            .unwrap_err()
            .msg
            .starts_with("failed to find plugin \"nope\"")
    );
}

#[test]
fn retries_while_the_binary_is_being_written() {
    use std::io::Write as _;
    let d = PluginDir::new("busy");
    let path = d.0.join("p");
    // A plugin file still open for writing cannot be executed (ETXTBSY), as while an
    // installer replaces it in place.
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(&path)
        .unwrap();
    writer
        .write_all(b"#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\"}'\n")
        .unwrap();
    // The writer finishes only once an exec has failed with "text file busy".
    let mut writer = Some(writer);
    let mut busy = 0;
    let out = exec_plugin_waiting(&path, b"{}", &[], Tie::Free, &mut || {
        busy += 1;
        drop(writer.take());
    })
    .unwrap();
    assert_eq!(busy, 1, "one exec found the file busy");
    assert_eq!(
        String::from_utf8(out).unwrap().trim(),
        r#"{"cniVersion":"1.0.0"}"#
    );
}

/// Runs `f` on a thread and returns what it returns. A watchdog, not a speed assertion: it
/// fails the test only when the run has not finished after 60 s, that is when it hangs.
fn unless_it_hangs<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    use std::sync::mpsc::RecvTimeoutError;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("the plugin run hangs"),
        Err(RecvTimeoutError::Disconnected) => panic!("the plugin run panicked"),
    }
}

const MIB: usize = 1 << 20;

#[test]
fn a_plugin_printing_much_before_reading_a_large_stdin_completes() {
    let d = PluginDir::new("bigio");
    // More than a pipe buffer out on both streams before reading any of stdin: writing
    // all of stdin first would deadlock with it.
    let p = d.plugin(
        "p",
        "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2; wc -c | tr -d ' '",
    );
    let out = unless_it_hangs(move || run_once(&p, &[b' '; MIB], &[], Tie::Free).unwrap());
    assert!(out.status.success());
    assert_eq!(out.stderr.len(), MIB);
    assert_eq!(out.stdout.len(), MIB + "1048576\n".len());
    assert!(
        out.stdout.ends_with(b"\x001048576\n"),
        "it read all of stdin"
    );
}

#[test]
fn output_up_to_the_limit_is_kept() {
    let d = PluginDir::new("atlimit");
    let p = d.plugin("p", &format!("head -c {MAX_CONFIG} /dev/zero"));
    let out = run_once(&p, b"{}", &[], Tie::Free).unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout.len() as u64, MAX_CONFIG);
}

/// The pid a plugin wrote to `pid` is gone: the plugin was killed and reaped (a zombie
/// would still be in /proc).
fn assert_gone(d: &PluginDir) {
    let pid = std::fs::read_to_string(d.0.join("pid")).unwrap();
    let proc = PathBuf::from(format!("/proc/{}", pid.trim()));
    assert!(!proc.exists(), "plugin {} still there", pid.trim());
}

/// A plugin printing without end on `stream` is killed at the limit with a clear error.
fn endless_output_is_cut(stream: &str, redirect: &str) {
    let d = PluginDir::new(&format!("endless-{stream}"));
    let pid = d.0.join("pid");
    let p = d.plugin(
        "p",
        &format!("echo $$ > {}; exec yes {redirect}", pid.display()),
    );
    let p2 = p.clone();
    let e = unless_it_hangs(move || exec_plugin(&p2, b"{}", &[]).unwrap_err());
    assert_eq!(
        e,
        Error::internal(format!(
            "plugin {} printed more than 16 MiB on {stream} (the limit) and was killed",
            p.display()
        ))
    );
    assert_gone(&d);
}

#[test]
fn a_plugin_printing_endlessly_on_stdout_is_killed() {
    endless_output_is_cut("stdout", "");
}

#[test]
fn a_plugin_printing_endlessly_on_stderr_is_killed() {
    endless_output_is_cut("stderr", ">&2");
}

#[test]
fn a_process_left_holding_the_pipes_does_not_hold_up_the_kill() {
    let d = PluginDir::new("endless-bg");
    let (pid, bg) = (d.0.join("pid"), d.0.join("bg"));
    // The background sleep holds stdout and stderr open and prints nothing.
    let p = d.plugin(
        "p",
        &format!(
            "sleep 600 & echo $! > {}; echo $$ > {}; exec yes",
            bg.display(),
            pid.display()
        ),
    );
    let e = unless_it_hangs(move || exec_plugin(&p, b"{}", &[]).unwrap_err());
    let bg: i32 = std::fs::read_to_string(&bg)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(bg),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(e.msg.contains("printed more than 16 MiB on stdout"), "{e}");
    assert_gone(&d);
}

#[test]
fn a_plugin_exiting_without_reading_a_large_stdin_reports_its_error() {
    let d = PluginDir::new("noread");
    let p = d.plugin("p", r#"echo '{"code":11,"msg":"try later"}'; exit 1"#);
    let e = unless_it_hangs(move || exec_plugin(&p, &[b' '; MIB], &[]).unwrap_err());
    assert_eq!(e, Error::new(11, "try later"));
}
