//! The bodies of the fuzz targets, shared by `fuzz/` (cargo-fuzz, nightly) and the replay
//! test that runs every checked-in input on stable (`tests/tests/fuzz_inputs.rs`). Each
//! body feeds arbitrary bytes to one parser and checks what must hold for any input: no
//! panic, and our own output reads back.

use libcni::CniResult;
use libcni::skel::{CmdArgs, Io, Plugin};
use libcni::version::SUPPORTED;
use libcni::{Error, args, runtime, types};

/// A target's body: any bytes in, a panic when something that must hold does not.
pub type Target = fn(&[u8]);

/// Every target: (name, body). The names are the `fuzz/fuzz_targets/<name>.rs` files and
/// the directories under `fuzz/seeds/` and `fuzz/regressions/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("result", result),
    ("netconf", netconf),
    ("cni_args", cni_args),
    ("conflist", conflist),
    ("skel", skel),
    ("bridge_config", bridge_config),
    ("host_local_config", host_local_config),
    ("host_local_store", host_local_store),
    ("portmap_config", portmap_config),
];

/// A result of any version, read at every default version, rendered at every version;
/// what we render reads back at that version.
pub fn result(data: &[u8]) {
    for default in SUPPORTED {
        let Ok(r) = CniResult::parse_bytes(data, default) else {
            continue;
        };
        for v in SUPPORTED {
            if let Ok(json) = r.to_json(v) {
                CniResult::parse_bytes(json.as_bytes(), v).unwrap_or_else(|e| {
                    panic!("our {v} rendering does not read back: {e}\n{json}")
                });
                let _ = r.convert_to(v);
            }
        }
    }
}

/// The fields every plugin reads from its config.
pub fn netconf(data: &[u8]) {
    if let Ok(c) = types::NetConf::parse(data) {
        let _ = c.ipam_type();
        let _ = c.runtime_config_value("mac");
        let _ = c.args_cni_value("ips");
        let _ = serde_json::to_vec(&c);
    }
}

/// CNI_ARGS as the env carries it.
pub fn cni_args(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = args::parse_pairs(s);
    if let Ok(v) = args::load(s, &["IP", "MAC", "K8S_POD_NAME"]) {
        let _ = args::get(&v, "IP");
    }
}

/// A conflist or a single plugin config, as a runtime loads them from /etc/cni/net.d.
pub fn conflist(data: &[u8]) {
    if let Ok(list) = runtime::NetworkConfigList::from_bytes(data) {
        let _ = format!("{list:?}");
    }
    if let Ok(plugin) = runtime::PluginConfig::from_bytes(data) {
        let _ = plugin.description();
        let _ = runtime::NetworkConfigList::from_plugin_conf(&plugin);
    }
}

/// A whole plugin call through skel: the first line holds the env (`KEY=VALUE` pairs
/// separated by `;`, CNI_NETNS never set, so no file is opened), the rest is stdin. The
/// plugin answers ADD with the stdin's `prevResult` when it has one.
pub fn skel(data: &[u8]) {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let env_line = String::from_utf8_lossy(&data[..split]).into_owned();
    let mut stdin = data.get(split + 1..).unwrap_or_default();
    let getenv = |k: &str| -> Option<String> {
        if k == "CNI_NETNS" {
            return None;
        }
        env_line
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.to_string())
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = libcni::skel::run(
        &Echo,
        "fuzz",
        Io {
            getenv: &getenv,
            stdin: &mut stdin,
            stdout: &mut out,
            stderr: &mut err,
        },
    );
    if status != 0 {
        let e: Error = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("error output is no CNI error ({e}): {out:?}"));
        assert_ne!(e.code, 0);
    }
}

/// The first line and the rest: CNI_ARGS and stdin, for the plugins' config parsers.
fn args_and_stdin(data: &[u8]) -> (String, &[u8]) {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let args = String::from_utf8_lossy(&data[..split]).into_owned();
    (args, data.get(split + 1..).unwrap_or_default())
}

/// The bridge's config, strict (ADD) and tolerant (DEL): whatever ADD accepts, DEL
/// accepts the same way, tolerating nothing.
pub fn bridge_config(data: &[u8]) {
    let (args, stdin) = args_and_stdin(data);
    let strict = bridge::config::BridgeConf::load(stdin, &args);
    let tolerant = bridge::config::BridgeConf::read_tolerant(stdin, &args);
    if let Ok(conf) = strict {
        let (same, ignored) = tolerant.expect("DEL reads what ADD reads");
        assert_eq!(same, conf);
        assert!(ignored.is_empty(), "{ignored:?}");
    }
}

/// portmap's config: whatever it accepts holds only valid mappings, and the container
/// addresses it picks from prevResult are of distinct families.
pub fn portmap_config(data: &[u8]) {
    let Ok(conf) = portmap::config::PortmapConf::load(data) else {
        return;
    };
    assert!(
        (conf.mappings.iter()).all(|m| m.host_port > 0 && m.container_port > 0),
        "{:?}",
        conf.mappings
    );
    for version in SUPPORTED {
        let Ok(version) = libcni::version::Version::parse(version) else {
            continue;
        };
        if let Ok(ips) = conf.container_ips(version, "eth0") {
            assert!(ips.len() <= 2 && !(ips.len() == 2 && ips[0].is_ipv4() == ips[1].is_ipv4()));
        }
    }
}

/// host-local's config: whatever ADD accepts, DEL finds the same store.
pub fn host_local_config(data: &[u8]) {
    let (args, stdin) = args_and_stdin(data);
    // The version skel would hand the verb.
    let version = libcni::types::NetConf::parse(stdin)
        .ok()
        .and_then(|n| libcni::version::Version::parse(&n.cni_version).ok())
        .unwrap_or_default();
    let full = host_local::config::load(stdin, &args, version);
    let location = host_local::config::load_store_location(stdin);
    if let Ok(conf) = full {
        assert_eq!(location.expect("DEL reads what ADD reads"), conf.store);
    }
}

/// The store's files as another writer (or a corruption) may leave them: a lease file's
/// content and the index.
pub fn host_local_store(data: &[u8]) {
    let _ = host_local::store::Holder::parse(data);
    if let Some((_, entries)) = host_local::store::index::decode(data) {
        let _ = entries.len();
    }
}

struct Echo;

impl Plugin for Echo {
    fn add(&self, args: &CmdArgs) -> Result<String, Error> {
        let conf = types::NetConf::parse(&args.stdin_data)?;
        match conf.prev_result {
            Some(prev) => CniResult::parse_at(&prev, args.version)?,
            None => CniResult::default(),
        }
        .to_json_at(args.version)
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
