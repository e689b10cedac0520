//! cnitool end to end against logging shell-script plugins (no root needed): arguments,
//! environment, container ID, output, cache files and errors.

use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testkit::TempDir;

const SCRIPT: &str = r#"#!/bin/sh
d="@DIR@"
n=$(ls "$d/calls" | wc -l)
n=$(printf '%04d' "$n")
cat > "$d/calls/$n.stdin"
env | grep '^CNI_' > "$d/calls/$n.env"
if [ -f "$d/@NAME@.$CNI_COMMAND.error" ]; then
    cat "$d/@NAME@.$CNI_COMMAND.error"
    exit 1
fi
if [ "$CNI_COMMAND" = ADD ]; then
    echo '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}]}'
fi
if [ "$CNI_COMMAND" = VERSION ]; then
    echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}'
fi
"#;

struct Env {
    dir: TempDir,
}

impl Env {
    fn new() -> Env {
        let dir = TempDir::new("cnitool-cli");
        for sub in ["bin", "calls", "cache", "net.d", "work/netns"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let script = SCRIPT
            .replace("@DIR@", &dir.path().display().to_string())
            .replace("@NAME@", "fake");
        let plugin = dir.join("bin/fake");
        std::fs::write(&plugin, script).unwrap();
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            dir.join("net.d/10-net.conflist"),
            r#"{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"fake","capabilities":{"mac":true}}]}"#,
        )
        .unwrap();
        Env { dir }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cnitool"));
        c.args(args)
            .current_dir(self.dir.join("work"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("NETCONFPATH", self.dir.join("net.d"))
            .env("CNI_PATH", self.dir.join("bin"))
            .env("CNI_CACHE_DIR", self.dir.join("cache"));
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn calls(&self) -> Vec<(String, Value)> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.join("calls"))
            .unwrap()
            .filter_map(|e| {
                let n = e.unwrap().file_name().into_string().unwrap();
                n.strip_suffix(".env").map(String::from)
            })
            .collect();
        names.sort();
        names
            .iter()
            .map(|n| {
                let env = std::fs::read_to_string(self.dir.join(format!("calls/{n}.env"))).unwrap();
                let stdin = std::fs::read(self.dir.join(format!("calls/{n}.stdin"))).unwrap();
                (env, serde_json::from_slice(&stdin).unwrap_or(Value::Null))
            })
            .collect()
    }

    fn fail(&self, command: &str, code: u32, msg: &str) {
        std::fs::write(
            self.dir.join(format!("fake.{command}.error")),
            json!({"code": code, "msg": msg}).to_string(),
        )
        .unwrap();
    }

    fn cache_file(&self, name: &str) -> PathBuf {
        self.dir.join("cache/results").join(name)
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn id_of(netns: &Path) -> String {
    // Same derivation as the Go cnitool, computed independently with sha512sum.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("printf %s '{}' | sha512sum", netns.display()))
        .output()
        .unwrap();
    format!("cnitool-{}", &stdout(&out)[..20])
}

#[test]
fn add_check_del_like_the_go_cnitool() {
    let env = Env::new();
    // A relative netns path is made absolute against the working directory.
    let abs = env.dir.join("work/netns/testing");
    let id = id_of(&abs);
    let out = env.run(&["add", "net", "netns/testing"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Go's result.Print(): 4-space indent, no trailing newline (stdout is a pipe here).
    assert_eq!(
        stdout(&out),
        "{\n    \"cniVersion\": \"1.0.0\",\n    \"ips\": [\n        {\n            \"address\": \"10.0.0.2/24\",\n            \"gateway\": \"10.0.0.1\"\n        }\n    ]\n}"
    );
    let calls = env.calls();
    let (e, stdin) = &calls[0];
    assert!(e.contains(&format!("CNI_CONTAINERID={id}\n")), "{e}");
    assert!(e.contains(&format!("CNI_NETNS={}\n", abs.display())), "{e}");
    assert!(e.contains("CNI_IFNAME=eth0\n"), "{e}");
    assert_eq!(stdin["name"], "net");
    let cache = env.cache_file(&format!("net-{id}-eth0"));
    let cached: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    assert_eq!(cached["containerId"], id);
    assert_eq!(cached["netns"], abs.display().to_string());

    let out = env.run(&["check", "net", &abs.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        env.calls()[1].1["prevResult"]["ips"][0]["address"],
        "10.0.0.2/24"
    );

    let out = env.run(&["del", "net", "netns/testing"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!cache.exists());
}

#[test]
fn compact_output_ifname_and_args() {
    let env = Env::new();
    let out = env
        .cmd(&["add", "--compact", "net", "/run/netns/a"])
        .env("CNI_IFNAME", "net1")
        .env("CNI_ARGS", "IgnoreUnknown=1;IP=10.0.0.9")
        .env("CAP_ARGS", r#"{"mac":"02:00:00:00:00:07","ips":["x"]}"#)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.0.0.2/24\",\"gateway\":\"10.0.0.1\"}]}\n"
    );
    let (e, stdin) = &env.calls()[0];
    assert!(e.contains("CNI_IFNAME=net1\n"), "{e}");
    assert!(e.contains("CNI_ARGS=IgnoreUnknown=1;IP=10.0.0.9\n"), "{e}");
    assert!(
        e.contains("CNI_CONTAINERID=cnitool-a145bc1ace582bff43bd\n"),
        "{e}"
    );
    assert_eq!(stdin["runtimeConfig"], json!({"mac": "02:00:00:00:00:07"}));
    assert!(
        env.cache_file("net-cnitool-a145bc1ace582bff43bd-net1")
            .exists()
    );
    // -i wins over CNI_IFNAME.
    let out = env
        .cmd(&["del", "-i", "net2", "net", "/run/netns/a"])
        .env("CNI_IFNAME", "net1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(env.calls()[1].0.contains("CNI_IFNAME=net2\n"));
}

#[test]
fn errors_go_to_stderr_with_a_failing_exit() {
    let env = Env::new();
    let out = env.run(&["add", "nope", "/run/netns/a"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        format!(
            "Error: no net configuration with name \"nope\" in {}\n",
            env.dir.join("net.d").display()
        )
    );

    env.fail("ADD", 7, "bad config");
    let out = env.run(&["add", "net", "/run/netns/a"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "Error: plugin type=\"fake\" failed (add): bad config\n"
    );

    let out = env
        .cmd(&["del", "net", "/run/netns/a"])
        .env("CNI_ARGS", "novalue")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("invalid CNI_ARGS pair \"novalue\""));

    // Missing arguments: usage, non-zero.
    let out = env.run(&["add", "net"]);
    assert!(!out.status.success());
}

#[test]
fn failed_del_and_check_report_the_plugin_error_and_keep_the_cache() {
    let env = Env::new();
    assert!(env.run(&["add", "net", "/run/netns/a"]).status.success());
    let cache = env.cache_file("net-cnitool-a145bc1ace582bff43bd-eth0");
    env.fail("DEL", 11, "busy");
    let out = env.run(&["del", "net", "/run/netns/a"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "Error: plugin type=\"fake\" failed (delete): busy\n"
    );
    // Kept, so a retried DEL still gets prevResult.
    assert!(cache.exists());
    // CHECK returns the plugin's error unwrapped, like Go.
    env.fail("CHECK", 7, "mismatch");
    let out = env.run(&["check", "net", "/run/netns/a"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), "Error: mismatch\n");
}

#[test]
fn malformed_valid_attachment_runs_nothing() {
    let env = Env::new();
    for bad in ["nocolon", ":eth0", "c1:"] {
        let out = env.run(&["gc", "net", "--valid", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert_eq!(
            stderr(&out),
            format!("Error: invalid --valid {bad:?}: want CONTAINERID:IFNAME\n")
        );
    }
    assert!(env.calls().is_empty());
}

#[test]
fn validate_prints_capabilities_or_the_unsupported_version() {
    let env = Env::new();
    let out = env.run(&["validate", "net"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "mac\n");
    std::fs::write(
        env.dir.join("net.d/10-net.conflist"),
        r#"{"cniVersion":"0.4.0","name":"net","plugins":[{"type":"fake"}]}"#,
    )
    .unwrap();
    let out = env.run(&["validate", "net"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "Error: [plugin fake does not support config version \"0.4.0\"]\n"
    );
}

#[test]
fn status_passes_the_plugin_error_through() {
    let env = Env::new();
    let out = env.run(&["status", "net", "/run/netns/a"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // netns is optional for status and gc.
    env.fail("STATUS", 50, "no IPs left");
    let out = env.run(&["status", "net"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), "Error: no IPs left\n");
}

#[test]
fn gc_deletes_cached_attachments_then_sends_gc() {
    let env = Env::new();
    for ns in ["/run/netns/a", "/var/run/netns/testing"] {
        assert!(env.run(&["add", "net", ns]).status.success());
    }
    let out = env.run(&[
        "gc",
        "net",
        "/run/netns/a",
        "--valid",
        "cnitool-a145bc1ace582bff43bd:eth0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let calls = env.calls();
    let commands: Vec<&str> = calls
        .iter()
        .map(|(e, _)| {
            e.lines()
                .find_map(|l| l.strip_prefix("CNI_COMMAND="))
                .unwrap()
        })
        .collect();
    assert_eq!(commands, ["ADD", "ADD", "DEL", "GC"]);
    assert!(
        calls[2]
            .0
            .contains("CNI_CONTAINERID=cnitool-77383ca0a0715733ca6f\n")
    );
    assert_eq!(
        calls[3].1["cni.dev/valid-attachments"],
        json!([{"containerID": "cnitool-a145bc1ace582bff43bd", "ifname": "eth0"}])
    );
    assert!(
        env.cache_file("net-cnitool-a145bc1ace582bff43bd-eth0")
            .exists()
    );
    // Without --valid (the Go cnitool's only mode) everything goes.
    assert!(env.run(&["gc", "net", "/run/netns/a"]).status.success());
    assert!(
        !env.cache_file("net-cnitool-a145bc1ace582bff43bd-eth0")
            .exists()
    );
    let last = env.calls().last().unwrap().1.clone();
    assert!(last.get("cni.dev/valid-attachments").is_none());
}

#[test]
fn help_per_command_names_the_environment() {
    let env = Env::new();
    for cmd in ["add", "check", "del", "gc", "status", "validate"] {
        let out = env.run(&[cmd, "--help"]);
        assert!(out.status.success());
        let text = stdout(&out);
        for var in ["NETCONFPATH", "CNI_PATH", "CAP_ARGS", "CNI_CACHE_DIR"] {
            assert!(text.contains(var), "{cmd} --help lacks {var}");
        }
    }
}

fn base64_of(path: &Path) -> String {
    let out = Command::new("base64")
        .arg("-w0")
        .arg(path)
        .output()
        .unwrap();
    stdout(&out)
}

#[test]
fn cache_file_is_what_go_libcni_writes() {
    let env = Env::new();
    let out = env
        .cmd(&["add", "net", "/var/run/netns/testing"])
        .env("CNI_ARGS", "IgnoreUnknown=1;A=<b>")
        .env(
            "CAP_ARGS",
            r#"{"mac":"02:00:00:00:00:07","b":{"y":1,"x":2.0}}"#,
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // Built by hand from Go's rules: struct order at the top, base64 config, sorted map
    // keys, HTML-escaped strings, float64 numbers, compact, no newline.
    let want = format!(
        concat!(
            r#"{{"kind":"cniCacheV1","containerId":"cnitool-77383ca0a0715733ca6f","config":"{}","#,
            r#""ifName":"eth0","networkName":"net","netns":"/var/run/netns/testing","#,
            r#""cniArgs":[["IgnoreUnknown","1"],["A","\u003cb\u003e"]],"#,
            r#""capabilityArgs":{{"b":{{"x":2,"y":1}},"mac":"02:00:00:00:00:07"}},"#,
            r#""result":{{"cniVersion":"1.0.0","ips":[{{"address":"10.0.0.2/24","gateway":"10.0.0.1"}}]}}}}"#
        ),
        base64_of(&env.dir.join("net.d/10-net.conflist"))
    );
    let got =
        std::fs::read_to_string(env.cache_file("net-cnitool-77383ca0a0715733ca6f-eth0")).unwrap();
    assert_eq!(got, want);
}

#[test]
fn del_reads_a_cache_file_go_wrote_and_a_legacy_one() {
    let env = Env::new();
    std::fs::create_dir_all(env.dir.join("cache/results")).unwrap();
    let file = env.cache_file("net-cnitool-77383ca0a0715733ca6f-eth0");
    // As Go libcni writes it (keys of the maps sorted), for a 0.4.0 result.
    std::fs::write(
        &file,
        concat!(
            r#"{"kind":"cniCacheV1","containerId":"cnitool-77383ca0a0715733ca6f","config":"e30=","#,
            r#""ifName":"eth0","networkName":"net","netns":"/var/run/netns/testing","#,
            r#""cniArgs":[["K","V"]],"#,
            r#""result":{"cniVersion":"0.4.0","dns":{},"ips":[{"address":"10.1.0.5/16","gateway":"10.1.0.1","version":"4"}]}}"#
        ),
    )
    .unwrap();
    let out = env.run(&["del", "net", "/var/run/netns/testing"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let prev = &env.calls()[0].1["prevResult"];
    // Converted to the config's version (1.1.0) before use.
    assert_eq!(prev["cniVersion"], "1.1.0");
    assert_eq!(prev["ips"][0]["address"], "10.1.0.5/16");
    assert!(!file.exists());

    // Legacy cache: the file is just the result.
    std::fs::write(
        &file,
        r#"{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.1.0.6/16"}],"dns":{}}"#,
    )
    .unwrap();
    assert!(
        env.run(&["del", "net", "/var/run/netns/testing"])
            .status
            .success()
    );
    assert_eq!(
        env.calls()[1].1["prevResult"]["ips"][0]["address"],
        "10.1.0.6/16"
    );
}

/// A FIFO and a link to /dev/zero named `*.conflist` before ours: every verb still
/// finds the network (Go's cnitool hangs on the FIFO) and stderr names each skipped file
/// and why.
#[test]
fn unreadable_conflists_are_skipped_with_a_reason() {
    let env = Env::new();
    let netd = env.dir.join("net.d");
    let fifo = netd.join("00-fifo.conflist");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    std::os::unix::fs::symlink("/dev/zero", netd.join("01-zero.conflist")).unwrap();
    let out = env.run(&["add", "net", "/run/netns/a"]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (name, why) in [
        ("00-fifo.conflist", "is a FIFO, not a regular file"),
        (
            "01-zero.conflist",
            "is a character device, not a regular file",
        ),
    ] {
        let line = format!("cni: skipping {}: {why}", netd.join(name).display());
        assert!(stderr.contains(&line), "{stderr}");
    }
    assert!(env.run(&["del", "net", "/run/netns/a"]).status.success());
}
