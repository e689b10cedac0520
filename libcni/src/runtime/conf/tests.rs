use super::*;
use testkit::TempDir;

/// A config directory for one test.
struct Dir(TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(TempDir::new("libcni-conf"))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn write(&self, name: &str, content: &str) -> &Dir {
        let p = self.0.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
        self
    }
}

fn types(list: &NetworkConfigList) -> Vec<&str> {
    list.plugins
        .iter()
        .map(|p| p.network.plugin_type.as_str())
        .collect()
}

#[test]
fn conflist_preferred_over_same_name_conf_and_sorted() {
    let d = Dir::new();
    d.write(
        "10-a.conf",
        r#"{"cniVersion":"1.0.0","name":"net","type":"from-conf"}"#,
    )
    .write(
        "20-b.conflist",
        r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"second"}]}"#,
    )
    .write(
        "10-a.conflist",
        r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"first"}]}"#,
    );
    let list = load_network_conf(d.path(), "net").unwrap();
    assert_eq!(types(&list), ["first"]);
    assert_eq!(
        list.bytes,
        std::fs::read(d.0.join("10-a.conflist")).unwrap()
    );
}

#[test]
fn conf_and_json_upgraded_to_a_list_with_go_bytes() {
    let d = Dir::new();
    d.write(
        "5-x.json",
        r#"{"cniVersion":"0.4.0","name":"other","type":"ptp"}"#,
    )
    .write(
        "10-net.conf",
        r#"{"type":"bridge","name":"net","cniVersion":"0.4.0","bridge":"<br>"}"#,
    );
    let list = load_network_conf(d.path(), "net").unwrap();
    assert_eq!(list.name, "net");
    assert_eq!(list.cni_version, "0.4.0");
    assert_eq!(types(&list), ["bridge"]);
    // What Go's ConfListFromConf marshals: sorted keys, HTML-escaped.
    assert_eq!(
        String::from_utf8(list.bytes).unwrap(),
        r#"{"cniVersion":"0.4.0","name":"net","plugins":[{"bridge":"\u003cbr\u003e","cniVersion":"0.4.0","name":"net","type":"bridge"}]}"#
    );
    assert_eq!(
        load_network_conf(d.path(), "other").unwrap().plugins[0]
            .network
            .plugin_type,
        "ptp"
    );
}

#[test]
fn no_configs_and_not_found_errors() {
    let d = Dir::new();
    let e = load_network_conf(d.path(), "net").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("no net configurations found in {}", d.path().display())
    );
    let missing = d.0.join("nope");
    assert!(matches!(
        load_network_conf(&missing, "net").unwrap_err(),
        ConfError::NoConfigsFound { .. }
    ));
    // Lists exist but none with that name, no .conf: "not found".
    d.write("a.conflist", r#"{"name":"x","plugins":[{"type":"p"}]}"#);
    let e = load_network_conf(d.path(), "net").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "no net configuration with name \"net\" in {}",
            d.path().display()
        )
    );
    d.write("b.conf", r#"{"name":"y","type":"p"}"#);
    assert!(matches!(
        load_network_conf(d.path(), "net").unwrap_err(),
        ConfError::NotFound { .. }
    ));
}

#[test]
fn nested_dirs_and_other_extensions_ignored() {
    let d = Dir::new();
    d.write(
        "sub.conflist/x.conflist",
        r#"{"name":"net","plugins":[{"type":"p"}]}"#,
    )
    .write(
        "net.conflist.bak",
        r#"{"name":"net","plugins":[{"type":"p"}]}"#,
    );
    assert!(matches!(
        load_network_conf(d.path(), "net").unwrap_err(),
        ConfError::NoConfigsFound { .. }
    ));
    d.write(
        ".conflist",
        r#"{"name":"net","plugins":[{"type":"hidden"}]}"#,
    );
    assert_eq!(
        types(&load_network_conf(d.path(), "net").unwrap()),
        ["hidden"]
    );
}

#[test]
fn malformed_earlier_file_aborts() {
    let d = Dir::new();
    d.write("1.conflist", "{not json")
        .write("2.conflist", r#"{"name":"net","plugins":[{"type":"p"}]}"#);
    let e = load_network_conf(d.path(), "net").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("error parsing configuration list:"),
        "{e}"
    );
    let d = Dir::new();
    d.write("1.conf", r#"{"name":"net"}"#);
    assert_eq!(
        load_network_conf(d.path(), "net").unwrap_err().to_string(),
        "error parsing configuration: missing 'type'"
    );
}

#[test]
fn list_parse_errors() {
    let cases = [
        (
            r#"{"plugins":[{"type":"p"}]}"#,
            "error parsing configuration list: no name",
        ),
        (
            r#"{"name":1}"#,
            "error parsing configuration list: invalid name type float64",
        ),
        (
            r#"{"name":"n","cniVersion":1}"#,
            "error parsing configuration list: invalid cniVersion type float64",
        ),
        (
            r#"{"name":"n","plugins":[]}"#,
            "error parsing configuration list: no plugins in list",
        ),
        (
            r#"{"name":"n","plugins":{}}"#,
            "error parsing configuration list: invalid 'plugins' type map[string]interface {}",
        ),
        (
            r#"{"name":"n","plugins":[{"type":"p"},{"x":1}]}"#,
            "failed to parse plugin config 1: error parsing configuration: missing 'type'",
        ),
        (
            r#"{"name":"n","disableCheck":"maybe","plugins":[{"type":"p"}]}"#,
            "error parsing configuration list: invalid value \"maybe\" for disableCheck",
        ),
        (
            r#"{"name":"n","disableGC":1,"plugins":[{"type":"p"}]}"#,
            "error parsing configuration list: invalid type float64 for disableGC",
        ),
        (
            r#"{"name":"n","loadOnlyInlinedPlugins":true}"#,
            "error parsing configuration list: `loadOnlyInlinedPlugins` is true, and no 'plugins' key",
        ),
        (
            r#"{"name":"n","cniVersions":"1.0.0"}"#,
            "error parsing configuration list: invalid type for cniVersions: string",
        ),
        (
            r#"{"name":"n","cniVersions":[1]}"#,
            "error parsing configuration list: invalid type for cniVersions index 0: float64",
        ),
    ];
    for (input, want) in cases {
        let e = NetworkConfigList::from_bytes(input.as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), want, "{input}");
    }
    assert!(NetworkConfigList::from_bytes(br#"{"name":"n","cniVersions":["1.0.f"]}"#).is_err());
}

#[test]
fn disable_flags_bool_or_string() {
    for (v, want) in [
        ("true", true),
        ("\"True\"", true),
        ("\"FALSE\"", false),
        ("false", false),
    ] {
        let s = format!(
            r#"{{"name":"n","disableCheck":{v},"disableGC":{v},"plugins":[{{"type":"p"}}]}}"#
        );
        let l = NetworkConfigList::from_bytes(s.as_bytes()).unwrap();
        assert_eq!((l.disable_check, l.disable_gc), (want, want), "{v}");
    }
    let l = NetworkConfigList::from_bytes(br#"{"name":"n","plugins":[{"type":"p"}]}"#).unwrap();
    assert!(!l.disable_check && !l.disable_gc && !l.load_only_inlined_plugins);
}

#[test]
fn version_selection() {
    let sel = |s: &str| {
        NetworkConfigList::from_bytes(s.as_bytes())
            .unwrap()
            .cni_version
    };
    assert_eq!(
        sel(r#"{"name":"n","cniVersions":["1.1.0","0.4.0","1.0.0"]}"#),
        "1.1.0"
    );
    assert_eq!(
        sel(r#"{"name":"n","cniVersions":["99.0.0","1.1.0","1.0.0"]}"#),
        "1.1.0"
    );
    assert_eq!(sel(r#"{"name":"n","cniVersion":"1.2.3"}"#), "1.2.3");
    assert_eq!(
        sel(r#"{"name":"n","cniVersion":"1.0.0","cniVersions":["0.1.0","0.4.0"]}"#),
        "1.0.0"
    );
    assert_eq!(sel(r#"{"name":"n","cniVersions":[]}"#), "");
    // Nothing usable in the list: Go keeps cniVersion.
    assert_eq!(
        sel(r#"{"name":"n","cniVersion":"1.0.0","cniVersions":["2.0.0"]}"#),
        "1.0.0"
    );
}

#[test]
fn load_only_inlined_plugins_matrix() {
    let d = Dir::new();
    d.write("net/1-extra.conf", r#"{"type":"extra1"}"#)
        .write("net/2-extra.conf", r#"{"type":"extra2"}"#)
        .write("net/ignored.json", r#"{"type":"json"}"#);
    let file = d.0.join("a.conflist");
    let load = |content: &str| {
        std::fs::write(&file, content).unwrap();
        NetworkConfigList::from_file(&file)
    };
    // default false: inlined first, then <dir>/<name>/*.conf in order
    let l = load(r#"{"name":"net","plugins":[{"type":"inline"}]}"#).unwrap();
    assert_eq!(types(&l), ["inline", "extra1", "extra2"]);
    // explicit false, no plugins key: only the directory
    let l = load(r#"{"name":"net","loadOnlyInlinedPlugins":false}"#).unwrap();
    assert_eq!(types(&l), ["extra1", "extra2"]);
    // no plugins key at all: only the directory
    let l = load(r#"{"name":"net"}"#).unwrap();
    assert_eq!(types(&l), ["extra1", "extra2"]);
    // true: only inlined
    let l = load(r#"{"name":"net","loadOnlyInlinedPlugins":true,"plugins":[{"type":"inline"}]}"#)
        .unwrap();
    assert_eq!(types(&l), ["inline"]);
    // true without plugins: error
    assert!(load(r#"{"name":"net","loadOnlyInlinedPlugins":true}"#).is_err());
    // another network name: its directory does not exist, so no plugins at all
    assert_eq!(
        load(r#"{"name":"other"}"#).unwrap_err().to_string(),
        "no plugin configs found"
    );
    // a broken plugin file in the directory is an error
    d.write("net/3-bad.conf", r#"{"name":"x"}"#);
    assert!(load(r#"{"name":"net","plugins":[{"type":"inline"}]}"#).is_err());
}

#[test]
fn plugin_description_like_go() {
    let p = PluginConfig::from_bytes(br#"{"type":"bridge"}"#).unwrap();
    assert_eq!(p.description(), r#"type="bridge""#);
    let p = PluginConfig::from_bytes(br#"{"type":"bridge","name":"b"}"#).unwrap();
    assert_eq!(p.description(), r#"type="bridge" name="b""#);
}

/// Go waits forever on a FIFO named `*.conflist` and reads a link to /dev/zero without
/// end; here both, an oversized file and the like among a list's plugin files are skipped
/// (each said on stderr) and loading goes on.
#[test]
fn fifos_devices_and_oversized_files_are_skipped() {
    let d = Dir::new();
    let fifo =
        |p: &Path| nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    fifo(&d.path().join("1.conflist"));
    std::os::unix::fs::symlink("/dev/zero", d.path().join("2.conflist")).unwrap();
    let big = format!(
        r#"{{"name":"net","plugins":[{{"type":"big"}}],"x":"{}"}}"#,
        " ".repeat(MAX_CONFIG as usize)
    );
    d.write("3.conflist", &big)
        .write("4.conflist", r#"{"name":"net","plugins":[{"type":"p"}]}"#)
        .write("net/2.conf", r#"{"type":"q"}"#);
    fifo(&d.path().join("net/1.conf"));
    assert_eq!(
        types(&load_network_conf(d.path(), "net").unwrap()),
        ["p", "q"]
    );

    let e = NetworkConfigList::from_file(&d.path().join("1.conflist")).unwrap_err();
    let path = d.path().join("1.conflist");
    assert_eq!(
        e.to_string(),
        format!(
            "error reading {}: is a FIFO, not a regular file",
            path.display()
        )
    );
    let e = NetworkConfigList::from_file(&d.path().join("3.conflist")).unwrap_err();
    assert!(
        e.to_string().ends_with("is larger than 16 MiB (the limit)"),
        "{e}"
    );

    // The old single-plugin files too.
    let d = Dir::new();
    fifo(&d.path().join("1.conf"));
    d.write("2.conf", r#"{"name":"net","type":"p"}"#);
    assert_eq!(types(&load_network_conf(d.path(), "net").unwrap()), ["p"]);
}
