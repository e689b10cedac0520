//! What the Go cnitool reads from its environment, parsed the same way.

use serde_json::{Map, Value};
use std::path::PathBuf;

pub const DEFAULT_NETCONFPATH: &str = "/etc/cni/net.d";

/// The environment cnitool reads (a function, so tests need not touch the process env).
pub struct Settings {
    /// NETCONFPATH, default `/etc/cni/net.d`.
    pub netconf_path: PathBuf,
    /// CNI_PATH split on `:` (empty entries dropped).
    pub cni_path: Vec<PathBuf>,
    /// CNI_ARGS pairs.
    pub args: Vec<(String, String)>,
    /// CAP_ARGS, a JSON object.
    pub capability_args: Map<String, Value>,
    /// CNI_IFNAME when set and not empty.
    pub ifname: Option<String>,
    /// CNI_CACHE_DIR (ours; Go's cnitool always uses /var/lib/cni).
    pub cache_dir: Option<PathBuf>,
}

impl Settings {
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let non_empty = |k: &str| get(k).filter(|v| !v.is_empty());
        Ok(Settings {
            netconf_path: non_empty("NETCONFPATH")
                .unwrap_or_else(|| DEFAULT_NETCONFPATH.into())
                .into(),
            cni_path: get("CNI_PATH")
                .unwrap_or_default()
                .split(':')
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .collect(),
            args: match non_empty("CNI_ARGS") {
                Some(a) => parse_args(&a)?,
                None => vec![],
            },
            capability_args: match non_empty("CAP_ARGS") {
                Some(c) => parse_cap_args(&c)?,
                None => Map::new(),
            },
            ifname: non_empty("CNI_IFNAME"),
            cache_dir: non_empty("CNI_CACHE_DIR").map(PathBuf::from),
        })
    }
}

/// The Go cnitool's `parseArgs`: `K=V;K2=V2`, every pair with a non-empty key and value.
pub fn parse_args(args: &str) -> Result<Vec<(String, String)>, String> {
    args.split(';')
        .map(|pair| match libcni::args::split_pair(pair) {
            Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!("invalid CNI_ARGS pair {pair:?}")),
        })
        .collect()
}

fn parse_cap_args(s: &str) -> Result<Map<String, Value>, String> {
    match libcni::gojson::from_slice::<Value>(s.as_bytes()) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err("invalid CAP_ARGS: not a JSON object".into()),
        Err(e) => Err(format!("invalid CAP_ARGS: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_env(|k| env.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.netconf_path, PathBuf::from("/etc/cni/net.d"));
        assert!(s.cni_path.is_empty() && s.args.is_empty() && s.capability_args.is_empty());
        assert_eq!(s.ifname, None);
        assert_eq!(s.cache_dir, None);
        assert_eq!(settings(&[("CNI_IFNAME", "")]).unwrap().ifname, None);
    }

    #[test]
    fn reads_everything() {
        let s = settings(&[
            ("NETCONFPATH", "/tmp/net.d"),
            ("CNI_PATH", "/a::/b"),
            ("CNI_ARGS", "IgnoreUnknown=1;IP=10.0.0.5"),
            ("CAP_ARGS", r#"{"mac":"02:00:00:00:00:01"}"#),
            ("CNI_IFNAME", "net1"),
            ("CNI_CACHE_DIR", "/tmp/cache"),
        ])
        .unwrap();
        assert_eq!(s.netconf_path, PathBuf::from("/tmp/net.d"));
        assert_eq!(s.cni_path, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(s.args[1], ("IP".to_string(), "10.0.0.5".to_string()));
        assert_eq!(s.capability_args["mac"], "02:00:00:00:00:01");
        assert_eq!(s.ifname.as_deref(), Some("net1"));
        assert_eq!(s.cache_dir, Some(PathBuf::from("/tmp/cache")));
    }

    #[test]
    fn strict_args_and_cap_args() {
        for bad in ["K", "K=", "=V", "K=V;", "K=V=W"] {
            assert!(parse_args(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_args("K=V;x").unwrap_err(),
            "invalid CNI_ARGS pair \"x\""
        );
        assert!(settings(&[("CAP_ARGS", "[1]")]).is_err());
        assert!(settings(&[("CAP_ARGS", "{")]).is_err());
    }
}
