//! Loading network configuration lists from a directory, as Go `libcni/conf.go` does:
//! `.conflist` files first (sorted; a malformed one aborts), then `.conf`/`.json` files
//! upgraded to a one-plugin list; `cniVersions` selection; `disableCheck`/`disableGC`/
//! `loadOnlyInlinedPlugins` as bool or "true"/"false"; plugins from `<dir>/<name>/*.conf`.
//!
//! Unlike Go, a file that is not a regular file (a FIFO, on which Go waits forever; a
//! device such as `/dev/zero`, which Go reads without end) or is larger than
//! [`MAX_CONFIG`] is skipped by the directory loaders, with a line on stderr naming it and
//! why. A regular file that cannot be read or parsed still aborts loading, as in Go.

use super::gojson;
use crate::file::{self, Links, MAX_CONFIG, ReadError};
use crate::types::NetConf;
use crate::version;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    #[error("no net configurations found in {}", dir.display())]
    NoConfigsFound { dir: PathBuf },
    #[error("no net configuration with name \"{name}\" in {}", dir.display())]
    NotFound { dir: PathBuf, name: String },
    #[error("error reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file loaders skip: not a regular file, or larger than [`MAX_CONFIG`].
    #[error("error reading {}: {source}", path.display())]
    Unusable { path: PathBuf, source: ReadError },
    /// A plugin object that does not decode.
    #[error("error parsing configuration: {0}")]
    Plugin(#[source] crate::gojson::Error),
    /// A list that does not decode.
    #[error("error parsing configuration list: {0}")]
    List(#[source] crate::gojson::Error),
    #[error("error parsing configuration list: invalid cniVersions entry: {0}")]
    CniVersions(#[source] crate::Error),
    /// Plugin `index` of a list's `plugins`.
    #[error("failed to parse plugin config {index}: {source}")]
    PluginInList {
        index: usize,
        #[source]
        source: Box<ConfError>,
    },
    #[error("failed to read plugin config files in {}: {source}", dir.display())]
    PluginDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Malformed content; the message is Go's text.
    #[error("{0}")]
    Invalid(String),
}

/// One plugin of a list: its common fields and the whole object as written.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    pub network: NetConf,
    pub raw: Map<String, Value>,
}

impl PluginConfig {
    /// Go `NetworkPluginConfFromBytes`: any JSON object with a non-empty `type`.
    pub fn from_bytes(bytes: &[u8]) -> Result<PluginConfig, ConfError> {
        let raw: Map<String, Value> =
            crate::gojson::from_slice(bytes).map_err(ConfError::Plugin)?;
        PluginConfig::from_map(raw)
    }

    fn from_map(raw: Map<String, Value>) -> Result<PluginConfig, ConfError> {
        let network: NetConf =
            crate::gojson::from_value(Value::Object(raw.clone())).map_err(ConfError::Plugin)?;
        if network.plugin_type.is_empty() {
            return Err(ConfError::Invalid(
                "error parsing configuration: missing 'type'".into(),
            ));
        }
        Ok(PluginConfig { network, raw })
    }

    /// Go `pluginDescription`: `type="bridge"`, plus ` name="x"` when the object has a name.
    pub fn description(&self) -> String {
        let mut out = format!("type={:?}", self.network.plugin_type);
        if !self.network.name.is_empty() {
            out += &format!(" name={:?}", self.network.name);
        }
        out
    }
}

/// A network configuration list (Go `NetworkConfigList`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    pub name: String,
    /// The selected version (highest of `cniVersion` and usable `cniVersions`).
    pub cni_version: String,
    pub disable_check: bool,
    pub disable_gc: bool,
    pub load_only_inlined_plugins: bool,
    pub plugins: Vec<PluginConfig>,
    /// The list's bytes as loaded; stored base64 in the result cache.
    pub bytes: Vec<u8>,
}

/// The keys of a list that [`NetworkConfigList::from_bytes`] reads.
const LIST_KEYS: &[&str] = &[
    "name",
    "cniVersion",
    "cniVersions",
    "disableCheck",
    "disableGC",
    "loadOnlyInlinedPlugins",
    "plugins",
];

fn list_err(msg: impl std::fmt::Display) -> ConfError {
    ConfError::Invalid(format!("error parsing configuration list: {msg}"))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

impl NetworkConfigList {
    /// Go `NetworkConfFromBytes`. A list without `plugins` is accepted here (plugins may come
    /// from `<dir>/<name>/*.conf`); [`NetworkConfigList::from_file`] requires at least one.
    pub fn from_bytes(bytes: &[u8]) -> Result<NetworkConfigList, ConfError> {
        // Only the keys read here are built (Go builds the whole document).
        let raw = crate::gojson::pick_keys(bytes, LIST_KEYS).map_err(ConfError::List)?;
        let name = match raw.get("name") {
            None => return Err(list_err("no name")),
            Some(Value::String(s)) => s.clone(),
            Some(v) => return Err(list_err(format!("invalid name type {}", type_name(v)))),
        };
        let cni_version = match raw.get("cniVersion") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(list_err(format!(
                    "invalid cniVersion type {}",
                    type_name(v)
                )));
            }
        };
        let cni_version = match raw.get("cniVersions") {
            None => cni_version,
            Some(v) => select_version(&cni_version, v)?,
        };
        let read_bool = |key: &str| -> Result<bool, ConfError> {
            match raw.get(key) {
                None => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(Value::String(s)) => match s.to_lowercase().as_str() {
                    "true" => Ok(true),
                    "false" => Ok(false),
                    s => Err(list_err(format!("invalid value {s:?} for {key}"))),
                },
                Some(v) => Err(list_err(format!("invalid type {} for {key}", type_name(v)))),
            }
        };
        let mut list = NetworkConfigList {
            name,
            cni_version,
            disable_check: read_bool("disableCheck")?,
            disable_gc: read_bool("disableGC")?,
            load_only_inlined_plugins: read_bool("loadOnlyInlinedPlugins")?,
            plugins: vec![],
            bytes: bytes.to_vec(),
        };
        let plugins = match raw.get("plugins") {
            None if list.load_only_inlined_plugins => {
                return Err(list_err(
                    "`loadOnlyInlinedPlugins` is true, and no 'plugins' key",
                ));
            }
            None => return Ok(list),
            Some(Value::Array(a)) => a,
            Some(v) => return Err(list_err(format!("invalid 'plugins' type {}", type_name(v)))),
        };
        if plugins.is_empty() {
            return Err(list_err("no plugins in list"));
        }
        for (i, p) in plugins.iter().enumerate() {
            let parsed = match p {
                Value::Object(m) => PluginConfig::from_map(m.clone()),
                v => Err(ConfError::Invalid(format!(
                    "error parsing configuration: expected an object, got {}",
                    type_name(v)
                ))),
            };
            list.plugins
                .push(parsed.map_err(|e| ConfError::PluginInList {
                    index: i,
                    source: Box::new(e),
                })?);
        }
        Ok(list)
    }

    /// Go `NetworkConfFromFile`: the list plus, unless `loadOnlyInlinedPlugins`, the plugin
    /// objects of `<dir>/<name>/*.conf` appended after the inlined ones.
    pub fn from_file(path: &Path) -> Result<NetworkConfigList, ConfError> {
        let bytes = read(path)?;
        let mut list = NetworkConfigList::from_bytes(&bytes)?;
        if !list.load_only_inlined_plugins {
            let dir = path.parent().unwrap_or(Path::new("")).join(&list.name);
            let files = conf_files(&dir, &[".conf"]).map_err(|source| ConfError::PluginDir {
                dir: dir.clone(),
                source,
            })?;
            for file in files {
                let Some(bytes) = skip_unusable(read(&file))? else {
                    continue;
                };
                list.plugins.push(PluginConfig::from_bytes(&bytes)?);
            }
        }
        if list.plugins.is_empty() {
            return Err(ConfError::Invalid("no plugin configs found".into()));
        }
        Ok(list)
    }

    /// Go `ConfListFromConf`: a single-plugin config as a list of one, with the bytes Go
    /// generates for it (so the cache's `config` is the same).
    pub fn from_plugin_conf(plugin: &PluginConfig) -> Result<NetworkConfigList, ConfError> {
        let list = json!({
            "name": plugin.network.name,
            "cniVersion": plugin.network.cni_version,
            "plugins": [Value::Object(plugin.raw.clone())],
        });
        NetworkConfigList::from_bytes(gojson::marshal(&gojson::sorted(&list)).as_bytes())
    }
}

/// libcni's selection, plus Go's detail that `cniVersion` stays when no entry is usable.
fn select_version(cni_version: &str, versions: &Value) -> Result<String, ConfError> {
    let Value::Array(items) = versions else {
        return Err(list_err(format!(
            "invalid type for cniVersions: {}",
            type_name(versions)
        )));
    };
    let mut list = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        match v {
            Value::String(s) => list.push(s.clone()),
            v => {
                return Err(list_err(format!(
                    "invalid type for cniVersions index {i}: {}",
                    type_name(v)
                )));
            }
        }
    }
    let selected =
        version::select_config_version(cni_version, &list).map_err(ConfError::CniVersions)?;
    Ok(if selected.is_empty() {
        cni_version.to_string()
    } else {
        selected
    })
}

/// A config file's bytes: a regular file (an operator's symlink to one is fine), opened
/// without waiting on a FIFO, at most [`MAX_CONFIG`] bytes.
fn read(path: &Path) -> Result<Vec<u8>, ConfError> {
    file::read_regular(path, Links::Follow, MAX_CONFIG).map_err(|e| match e {
        ReadError::Io(source) => ConfError::Read {
            path: path.to_path_buf(),
            source,
        },
        source => ConfError::Unusable {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// `None`, said on stderr, for a file the loaders skip ([`ConfError::Unusable`]).
fn skip_unusable<T>(r: Result<T, ConfError>) -> Result<Option<T>, ConfError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(ConfError::Unusable { path, source }) => {
            crate::log!("cni: skipping {}: {source}", path.display());
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Go `filepath.Ext`: the suffix from the last dot of the file name (".conf" for ".conf").
fn go_ext(name: &str) -> &str {
    name.rfind('.').map_or("", |i| &name[i..])
}

/// Go `ConfFiles`: files (not directories) of `dir` with one of `exts`, sorted by name.
/// A missing directory has none.
pub fn conf_files(dir: &Path, exts: &[&str]) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if exts.contains(&go_ext(name)) {
            files.push(dir.join(name));
        }
    }
    files.sort();
    Ok(files)
}

fn dir_err(dir: &Path, e: std::io::Error) -> ConfError {
    ConfError::Read {
        path: dir.to_path_buf(),
        source: e,
    }
}

/// Go `LoadConf`: the first `.conf`/`.json` (sorted) whose `name` matches.
pub fn load_conf(dir: &Path, name: &str) -> Result<PluginConfig, ConfError> {
    let files = conf_files(dir, &[".conf", ".json"]).map_err(|e| dir_err(dir, e))?;
    if files.is_empty() {
        return Err(ConfError::NoConfigsFound {
            dir: dir.to_path_buf(),
        });
    }
    for file in files {
        let Some(bytes) = skip_unusable(read(&file))? else {
            continue;
        };
        let conf = PluginConfig::from_bytes(&bytes)?;
        if conf.network.name == name {
            return Ok(conf);
        }
    }
    Err(ConfError::NotFound {
        dir: dir.to_path_buf(),
        name: name.to_string(),
    })
}

/// Go `LoadNetworkConf` (= `LoadConfList`): the network `name` from `dir`.
pub fn load_network_conf(dir: &Path, name: &str) -> Result<NetworkConfigList, ConfError> {
    let lists = conf_files(dir, &[".conflist"]).map_err(|e| dir_err(dir, e))?;
    for file in &lists {
        let Some(list) = skip_unusable(NetworkConfigList::from_file(file))? else {
            continue;
        };
        if list.name == name {
            return Ok(list);
        }
    }
    match load_conf(dir, name) {
        Ok(conf) => NetworkConfigList::from_plugin_conf(&conf),
        // Lists exist, just none by that name: say "not found", not "no configs".
        Err(ConfError::NoConfigsFound { .. }) if !lists.is_empty() => Err(ConfError::NotFound {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        }),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
