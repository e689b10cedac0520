use super::*;
use crate::types::CniResult;
use std::cell::RefCell;
use std::collections::HashMap;

/// Records which verb ran with which args; ADD returns one IPv4 address.
#[derive(Default)]
struct Recorder {
    calls: RefCell<Vec<(String, CmdArgs)>>,
    fail_with: Option<Error>,
}

impl Recorder {
    fn record(&self, verb: &str, args: &CmdArgs) -> Result<(), Error> {
        self.calls.borrow_mut().push((verb.into(), args.clone()));
        self.fail_with.clone().map_or(Ok(()), Err)
    }
}

impl Plugin for Recorder {
    fn add(&self, args: &CmdArgs) -> Result<String, Error> {
        self.record("ADD", args)?;
        CniResult {
            ips: vec![crate::types::IpConfig {
                interface: None,
                address: "10.0.0.2/24".parse().unwrap(),
                gateway: None,
            }],
            ..Default::default()
        }
        .to_json_at(args.version)
    }
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        self.record("DEL", args)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        self.record("CHECK", args)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        self.record("STATUS", args)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        self.record("GC", args)
    }
}

struct Outcome {
    status: i32,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn error(&self) -> Error {
        assert_eq!(self.status, 1, "expected failure, stdout: {}", self.stdout);
        serde_json::from_str(&self.stdout).expect("error JSON")
    }
}

fn full_env(command: &str) -> HashMap<String, String> {
    [
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", "some-container-id"),
        ("CNI_NETNS", "/some/netns/path"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "some;extra;args"),
        ("CNI_PATH", "/some/cni/path:/other"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

const CONF_1_1: &str = r#"{"cniVersion":"1.1.0","name":"net","type":"x"}"#;

fn call(plugin: &dyn Plugin, env: &HashMap<String, String>, stdin: &str) -> Outcome {
    let getenv = |k: &str| env.get(k).cloned();
    let mut input = stdin.as_bytes();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = run(
        plugin,
        "CNI test plugin v1",
        Io {
            getenv: &getenv,
            stdin: &mut input,
            stdout: &mut out,
            stderr: &mut err,
        },
    );
    Outcome {
        status,
        stdout: String::from_utf8(out).unwrap(),
        stderr: String::from_utf8(err).unwrap(),
    }
}

#[test]
fn add_passes_every_variable_and_prints_result_at_config_version() {
    let p = Recorder::default();
    let o = call(
        &p,
        &full_env("ADD"),
        r#"{"cniVersion":"0.4.0","name":"net"}"#,
    );
    assert_eq!(o.status, 0, "{}", o.stdout);
    let calls = p.calls.borrow();
    let (verb, args) = &calls[0];
    assert_eq!(verb, "ADD");
    assert_eq!(args.container_id, "some-container-id");
    assert_eq!(args.netns, "/some/netns/path");
    assert_eq!(args.ifname, "eth0");
    assert_eq!(args.args, "some;extra;args");
    assert_eq!(args.path, "/some/cni/path:/other");
    assert_eq!(crate::invoke::split_cni_path(&args.path).len(), 2);
    assert_eq!(args.version, Version(0, 4, 0));
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["cniVersion"], "0.4.0");
    assert_eq!(v["ips"][0]["version"], "4");
    assert!(o.stdout.starts_with("{\n    \"cniVersion\""));
}

#[test]
fn required_variables_per_verb() {
    // (verb, variable, required?)
    let table = [
        (
            "ADD",
            ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
            [true, true, true, true],
        ),
        (
            "CHECK",
            ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
            [true, true, true, true],
        ),
        (
            "DEL",
            ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
            [true, false, true, true],
        ),
        (
            "STATUS",
            ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
            [false, false, false, true],
        ),
        (
            "GC",
            ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
            [false, false, false, true],
        ),
    ];
    for (verb, vars, required) in table {
        for (var, req) in vars.iter().zip(required) {
            for how in ["unset", "empty"] {
                let mut env = full_env(verb);
                if how == "unset" {
                    env.remove(*var);
                } else {
                    env.insert(var.to_string(), String::new());
                }
                let p = Recorder::default();
                let o = call(&p, &env, CONF_1_1);
                if req {
                    let e = o.error();
                    assert_eq!(e.code, 4, "{verb} {var}");
                    assert_eq!(e.msg, format!("required env variables [{var}] missing"));
                    assert!(p.calls.borrow().is_empty());
                } else {
                    assert_eq!(o.status, 0, "{verb} without {var}: {}", o.stdout);
                    assert_eq!(p.calls.borrow()[0].0, verb);
                }
            }
        }
    }
}

#[test]
fn reports_all_missing_variables_at_once() {
    let mut env = full_env("ADD");
    env.remove("CNI_NETNS");
    env.remove("CNI_IFNAME");
    env.remove("CNI_PATH");
    let e = call(&Recorder::default(), &env, CONF_1_1).error();
    assert_eq!(
        e.msg,
        "required env variables [CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
    );
}

#[test]
fn cni_args_is_optional_everywhere() {
    for verb in ["ADD", "DEL", "CHECK", "STATUS", "GC"] {
        let mut env = full_env(verb);
        env.remove("CNI_ARGS");
        assert_eq!(
            call(&Recorder::default(), &env, CONF_1_1).status,
            0,
            "{verb}"
        );
    }
}

#[test]
fn empty_command_prints_about_text() {
    let mut env = full_env("");
    env.remove("CNI_COMMAND");
    let p = Recorder::default();
    let o = call(&p, &env, CONF_1_1);
    assert_eq!(o.status, 0);
    assert_eq!(o.stdout, "");
    assert_eq!(
        o.stderr,
        "CNI test plugin v1\nCNI protocol versions supported: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n"
    );
    assert!(p.calls.borrow().is_empty());
}

#[test]
fn unknown_command_is_code_4() {
    let e = call(&Recorder::default(), &full_env("NOPE"), CONF_1_1).error();
    assert_eq!((e.code, e.msg.as_str()), (4, "unknown CNI_COMMAND: NOPE"));
}

#[test]
fn version_ignores_stdin_and_needs_nothing_else() {
    let env: HashMap<String, String> = [("CNI_COMMAND".to_string(), "VERSION".to_string())].into();
    let o = call(&Recorder::default(), &env, "this is not json");
    assert_eq!(o.status, 0);
    assert_eq!(o.stdout, crate::version::version_json());
}

#[test]
fn config_name_rules() {
    let e = call(&Recorder::default(), &full_env("ADD"), "{not json").error();
    assert_eq!(e.code, 6);
    assert!(e.msg.starts_with("error unmarshall network config: "));
    let e = call(
        &Recorder::default(),
        &full_env("ADD"),
        r#"{"cniVersion":"1.0.0"}"#,
    )
    .error();
    assert_eq!((e.code, e.msg.as_str()), (7, "missing network name"));
    let e = call(
        &Recorder::default(),
        &full_env("DEL"),
        r#"{"name":"bad/name"}"#,
    )
    .error();
    assert_eq!(
        (e.code, e.msg.as_str(), e.details.as_str()),
        (7, "invalid characters found in network name", "bad/name")
    );
}

#[test]
fn container_id_rules() {
    for (id, code, msg) in [
        ("-leading-dash", 4, "invalid characters in containerID"),
        ("has space", 4, "invalid characters in containerID"),
        ("semi;colon", 4, "invalid characters in containerID"),
    ] {
        let mut env = full_env("ADD");
        env.insert("CNI_CONTAINERID".into(), id.into());
        let e = call(&Recorder::default(), &env, CONF_1_1).error();
        assert_eq!(
            (e.code, e.msg.as_str(), e.details.as_str()),
            (code, msg, id)
        );
    }
    assert_eq!(validate_container_id("").unwrap_err().code, 3);
    assert!(validate_container_id("a_b.c-D9").is_ok());
}

#[test]
fn ifname_rules() {
    let cases = [
        ("", Some("interface name is empty")),
        ("0123456789abcdef", Some("interface name is too long")),
        ("0123456789abcde", None),
        (".", Some("interface name is . or ..")),
        ("..", Some("interface name is . or ..")),
        (
            "a/b",
            Some("interface name contains / or : or whitespace characters"),
        ),
        (
            "a:b",
            Some("interface name contains / or : or whitespace characters"),
        ),
        (
            "a b",
            Some("interface name contains / or : or whitespace characters"),
        ),
        (
            "a\tb",
            Some("interface name contains / or : or whitespace characters"),
        ),
        ("eth0.100", None),
    ];
    for (name, want) in cases {
        match (validate_ifname(name), want) {
            (Ok(()), None) => {}
            (Err(e), Some(msg)) => assert_eq!((e.code, e.msg.as_str()), (4, msg), "{name:?}"),
            (got, _) => panic!("{name:?}: {got:?}"),
        }
    }
    let mut env = full_env("CHECK");
    env.insert("CNI_IFNAME".into(), "a:b".into());
    assert_eq!(call(&Recorder::default(), &env, CONF_1_1).error().code, 4);
}

#[test]
fn version_gates() {
    let conf = |v: &str| format!(r#"{{"cniVersion":"{v}","name":"n"}}"#);
    for (verb, v, ok, msg) in [
        (
            "CHECK",
            "0.3.1",
            false,
            "config version does not allow CHECK",
        ),
        ("CHECK", "0.4.0", true, ""),
        (
            "STATUS",
            "1.0.0",
            false,
            "config version does not allow STATUS",
        ),
        ("STATUS", "1.1.0", true, ""),
        ("GC", "1.0.0", false, "config version does not allow GC"),
        ("GC", "1.1.0", true, ""),
        ("GC", "1.2.0", false, "plugin version does not allow GC"),
        ("ADD", "0.1.0", true, ""),
        ("DEL", "1.1.0", true, ""),
        ("ADD", "9.9.9", false, "incompatible CNI versions"),
        ("ADD", "0.3", false, "incompatible CNI versions"),
    ] {
        let p = Recorder::default();
        let o = call(&p, &full_env(verb), &conf(v));
        if ok {
            assert_eq!(o.status, 0, "{verb} {v}: {}", o.stdout);
        } else {
            let e = o.error();
            assert_eq!((e.code, e.msg.as_str()), (1, msg), "{verb} {v}");
            assert!(p.calls.borrow().is_empty());
        }
    }
    let e = call(&Recorder::default(), &full_env("ADD"), &conf("9.9.9")).error();
    assert_eq!(
        e.details,
        r#"config is "9.9.9", plugin supports ["0.1.0" "0.2.0" "0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]"#
    );
    // A config without cniVersion is 0.1.0: CHECK is refused.
    let e = call(&Recorder::default(), &full_env("CHECK"), r#"{"name":"n"}"#).error();
    assert_eq!(e.msg, "config version does not allow CHECK");
    let e = call(
        &Recorder::default(),
        &full_env("ADD"),
        r#"{"name":"n","cniVersion":"1.x"}"#,
    )
    .error();
    assert_eq!(e.code, 1);
}

#[test]
fn plugin_errors_are_printed_as_is() {
    let p = Recorder {
        fail_with: Some(Error::new(50, "no IPs left").with_details("range full")),
        ..Default::default()
    };
    let o = call(&p, &full_env("STATUS"), CONF_1_1);
    assert_eq!(o.status, 1);
    assert_eq!(
        o.stdout,
        "{\n    \"code\": 50,\n    \"msg\": \"no IPs left\",\n    \"details\": \"range full\"\n}\n"
    );
}

#[test]
fn l2_result_cannot_be_printed_at_0_2() {
    struct NoIp;
    impl Plugin for NoIp {
        fn add(&self, args: &CmdArgs) -> Result<String, Error> {
            CniResult::default().to_json_at(args.version)
        }
        fn del(&self, _: &CmdArgs) -> Result<(), Error> {
            Ok(())
        }
        fn check(&self, _: &CmdArgs) -> Result<(), Error> {
            Ok(())
        }
        fn status(&self, _: &CmdArgs) -> Result<(), Error> {
            Ok(())
        }
        fn gc(&self, _: &CmdArgs) -> Result<(), Error> {
            Ok(())
        }
    }
    let o = call(
        &NoIp,
        &full_env("ADD"),
        r#"{"cniVersion":"0.2.0","name":"n"}"#,
    );
    assert_eq!(o.status, 1);
    assert!(o.stdout.contains("cannot convert: no valid IP addresses"));
}

#[test]
fn refuses_the_plugins_own_netns_unless_overridden() {
    let mut env = full_env("ADD");
    env.insert("CNI_NETNS".into(), "/proc/self/ns/net".into());
    let p = Recorder::default();
    let e = call(&p, &env, CONF_1_1).error();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (
            8,
            "plugin's netns and netns from CNI_NETNS should not be the same"
        )
    );
    assert!(p.calls.borrow().is_empty());
    // DEL and CHECK are refused the same way.
    for verb in ["DEL", "CHECK"] {
        env.insert("CNI_COMMAND".into(), verb.into());
        assert_eq!(call(&Recorder::default(), &env, CONF_1_1).error().code, 8);
    }
    env.insert("CNI_NETNS_OVERRIDE".into(), "true".into());
    assert_eq!(call(&Recorder::default(), &env, CONF_1_1).status, 0);
    // A path that exists but is not our netns is left to the plugin.
    env.remove("CNI_NETNS_OVERRIDE");
    let exe = std::env::current_exe().unwrap();
    env.insert("CNI_NETNS".into(), exe.display().to_string());
    assert_eq!(call(&Recorder::default(), &env, CONF_1_1).status, 0);
}

#[test]
fn the_verb_gets_the_netns_skel_opened() {
    for verb in ["ADD", "DEL", "CHECK"] {
        let p = Recorder::default();
        // Missing: skel's own-netns check tried it; the verb gets that outcome, not a new one.
        assert_eq!(call(&p, &full_env(verb), CONF_1_1).status, 0);
        let (_, args) = &p.calls.borrow()[0];
        assert!(args.opened_netns.is_opened(), "{verb}");
        let e = args.open_netns().unwrap_err();
        assert!(
            matches!(e, sysproc::netns::NetnsError::NotExist(_)),
            "{e:?}"
        );
    }
    // Not checked, so not opened before the verb asks.
    let mut env = full_env("ADD");
    env.insert("CNI_NETNS_OVERRIDE".into(), "1".into());
    let p = Recorder::default();
    assert_eq!(call(&p, &env, CONF_1_1).status, 0);
    assert!(!p.calls.borrow()[0].1.opened_netns.is_opened());
    // STATUS and GC never open it.
    for verb in ["STATUS", "GC"] {
        let p = Recorder::default();
        assert_eq!(call(&p, &full_env(verb), CONF_1_1).status, 0, "{verb}");
        assert!(!p.calls.borrow()[0].1.opened_netns.is_opened(), "{verb}");
    }
}

#[test]
fn add_prints_what_the_plugin_renders() {
    struct OwnShape;
    impl Plugin for OwnShape {
        fn add(&self, args: &CmdArgs) -> Result<String, Error> {
            Ok(format!("rendered at {}", args.version))
        }
        fn del(&self, _: &CmdArgs) -> Result<(), Error> {
            Ok(())
        }
        fn check(&self, _: &CmdArgs) -> Result<(), Error> {
            Ok(())
        }
        fn status(&self, _: &CmdArgs) -> Result<(), Error> {
            Ok(())
        }
        fn gc(&self, _: &CmdArgs) -> Result<(), Error> {
            Ok(())
        }
    }
    let o = call(
        &OwnShape,
        &full_env("ADD"),
        r#"{"cniVersion":"0.2.0","name":"n"}"#,
    );
    assert_eq!((o.status, o.stdout.as_str()), (0, "rendered at 0.2.0"));
}

#[test]
fn a_panic_is_reported_as_internal_error_json() {
    let at = Location::caller();
    let e = panic_error(Some("index out of bounds"), Some(at));
    let json: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
    assert_eq!(json["code"], 999);
    assert_eq!(json["msg"], "internal error: index out of bounds");
    assert_eq!(
        json["details"],
        format!("panicked at {}:{}:{}", at.file(), at.line(), at.column())
    );
    let e = panic_error(None, None);
    assert_eq!(
        (e.code, e.msg.as_str(), e.details.as_str()),
        (999, "internal error: panic with a non-string payload", "")
    );
}

/// stdin without end (`/dev/zero`): refused after 16 MiB with code 7, nothing called.
/// Go reads until memory runs out.
#[test]
fn stdin_is_read_at_most_16_mib() {
    let p = Recorder::default();
    let getenv = |k: &str| full_env("ADD").get(k).cloned();
    let mut zeros = std::io::repeat(b' ');
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = run(
        &p,
        "CNI test plugin v1",
        Io {
            getenv: &getenv,
            stdin: &mut zeros,
            stdout: &mut out,
            stderr: &mut err,
        },
    );
    assert_eq!(status, 1);
    let e: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(e["code"], 7, "{e}");
    assert_eq!(
        e["msg"],
        "error reading from stdin: the network configuration is larger than 16 MiB (the limit)"
    );
    assert!(p.calls.borrow().is_empty());
}
