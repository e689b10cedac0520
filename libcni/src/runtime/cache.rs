//! The result cache, in Go libcni's format so either side reads the other's files:
//! `<cacheDir>/results/<network>-<containerID>-<ifname>`, dir 0700, file 0600, holding
//! `{"kind":"cniCacheV1","containerId":..,"config":"<base64>","ifName":..,"networkName":..,
//! "netns":..,"cniArgs":[[k,v]],"capabilityArgs":{..},"result":{..}}` (the last four omitted
//! when empty), written compact with Go's key order and escaping.
//!
//! Unlike Go, entries follow [`crate::file`]'s rules: written whole (temp file, fsync,
//! rename: never through a symlink), read only when a regular file (never through a
//! symlink, never waiting on a FIFO, at most [`MAX_ENTRY`] bytes); DEL removes whatever
//! is in an entry's place.

use super::RuntimeConf;
use super::gojson;
use crate::file::{self, Links, MAX_CONFIG, ReadError};
use crate::types::CniResult;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

pub const KIND_V1: &str = "cniCacheV1";

/// The largest entry read: room for a config of [`MAX_CONFIG`] (base64) and its result.
pub const MAX_ENTRY: u64 = 4 * MAX_CONFIG;

/// Go libcni's default cache directory.
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(
        "cache file path requires network name ({network:?}), container ID ({container_id:?}), and interface name ({ifname:?})"
    )]
    MissingKey {
        network: String,
        container_id: String,
        ifname: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An entry that is not a regular file, or too large (Go hangs on a FIFO and reads
    /// `/dev/zero` without end).
    #[error("{}: {source}", path.display())]
    Entry { path: PathBuf, source: ReadError },
    #[error("{}: is a symlink, not a directory of the cache's own", path.display())]
    LinkedDir { path: PathBuf },
    #[error("failed to unmarshal cached network {network:?} config: {source}")]
    Decode {
        network: String,
        #[source]
        source: crate::gojson::Error,
    },
    #[error("read cached network {network:?} config has wrong kind: {kind}")]
    WrongKind { network: String, kind: String },
    #[error("failed to convert cached result to config version {version:?}: {source}")]
    Convert {
        version: String,
        source: crate::Error,
    },
    #[error("{0}")]
    Result(crate::Error),
}

/// One cache file's content (Go `cachedInfo`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CachedInfo {
    #[serde(default)]
    pub kind: String,
    #[serde(rename = "containerId", default)]
    pub container_id: String,
    /// The network configuration list's bytes.
    #[serde(default, deserialize_with = "base64_bytes")]
    pub config: Vec<u8>,
    #[serde(rename = "ifName", default)]
    pub ifname: String,
    #[serde(rename = "networkName", default)]
    pub network_name: String,
    #[serde(default)]
    pub netns: String,
    #[serde(rename = "cniArgs", default)]
    pub cni_args: Option<Vec<(String, String)>>,
    #[serde(rename = "capabilityArgs", default)]
    pub capability_args: Option<Map<String, Value>>,
    #[serde(default)]
    pub result: Option<Map<String, Value>>,
}

fn base64_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    match s {
        None => Ok(vec![]),
        Some(s) => STANDARD.decode(s).map_err(serde::de::Error::custom),
    }
}

impl CachedInfo {
    /// The file's bytes, exactly as Go's `json.Marshal(&cachedInfo)` writes them.
    pub fn to_go_json(&self) -> String {
        let mut m = Map::new();
        m.insert("kind".into(), json!(self.kind));
        m.insert("containerId".into(), json!(self.container_id));
        m.insert("config".into(), json!(STANDARD.encode(&self.config)));
        m.insert("ifName".into(), json!(self.ifname));
        m.insert("networkName".into(), json!(self.network_name));
        if !self.netns.is_empty() {
            m.insert("netns".into(), json!(self.netns));
        }
        if let Some(args) = self.cni_args.as_ref().filter(|a| !a.is_empty()) {
            let pairs: Vec<Value> = args.iter().map(|(k, v)| json!([k, v])).collect();
            m.insert("cniArgs".into(), Value::Array(pairs));
        }
        // Go keeps these two as maps, so their keys come out sorted.
        if let Some(caps) = self.capability_args.as_ref().filter(|c| !c.is_empty()) {
            m.insert(
                "capabilityArgs".into(),
                gojson::sorted(&Value::Object(caps.clone())),
            );
        }
        if let Some(result) = self.result.as_ref().filter(|r| !r.is_empty()) {
            m.insert(
                "result".into(),
                gojson::sorted(&Value::Object(result.clone())),
            );
        }
        gojson::marshal(&Value::Object(m))
    }
}

/// A cached attachment (Go `NetworkAttachment`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkAttachment {
    pub container_id: String,
    pub network: String,
    pub ifname: String,
    pub config: Vec<u8>,
    pub netns: String,
    pub cni_args: Vec<(String, String)>,
    pub capability_args: Map<String, Value>,
}

/// The cache directory and the files in it.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn results_dir(&self) -> PathBuf {
        self.dir.join("results")
    }

    /// `<dir>/results/<network>-<containerID>-<ifname>`.
    pub fn file_path(&self, network: &str, rt: &RuntimeConf) -> Result<PathBuf, CacheError> {
        if network.is_empty() || rt.container_id.is_empty() || rt.ifname.is_empty() {
            return Err(CacheError::MissingKey {
                network: network.into(),
                container_id: rt.container_id.clone(),
                ifname: rt.ifname.clone(),
            });
        }
        Ok(self
            .results_dir()
            .join(format!("{network}-{}-{}", rt.container_id, rt.ifname)))
    }

    /// Stores the final ADD result with what is needed to DEL later.
    pub fn add(
        &self,
        result: &CniResult,
        config: &[u8],
        network: &str,
        rt: &RuntimeConf,
    ) -> Result<(), CacheError> {
        let rendered = result
            .to_value(&result.cni_version)
            .map_err(CacheError::Result)?;
        self.add_rendered(&rendered, config, network, rt)
    }

    /// [`add`](Self::add) for a result already rendered at its own version.
    pub fn add_rendered(
        &self,
        result: &Value,
        config: &[u8],
        network: &str,
        rt: &RuntimeConf,
    ) -> Result<(), CacheError> {
        let result = match result {
            Value::Object(m) => m.clone(),
            _ => Map::new(),
        };
        let info = CachedInfo {
            kind: KIND_V1.into(),
            container_id: rt.container_id.clone(),
            config: config.to_vec(),
            ifname: rt.ifname.clone(),
            network_name: network.into(),
            netns: rt.netns.clone(),
            cni_args: Some(rt.args.clone()),
            capability_args: Some(rt.capability_args.clone()),
            result: Some(result),
        };
        let path = self.file_path(network, rt)?;
        let io = |source| CacheError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(io)?;
            // The results directory itself is never a link out of the cache dir.
            if std::fs::symlink_metadata(parent).map_err(io)?.is_symlink() {
                return Err(CacheError::LinkedDir {
                    path: parent.to_path_buf(),
                });
            }
        }
        file::write_atomic(&path, info.to_go_json().as_bytes(), 0o600).map_err(io)
    }

    /// Removes the entry, whatever is in its place (a file, a symlink but not its target,
    /// a FIFO, an empty directory), and a temp file a killed write left; a missing one is
    /// fine (DEL may repeat).
    pub fn remove(&self, network: &str, rt: &RuntimeConf) -> Result<(), CacheError> {
        let path = self.file_path(network, rt)?;
        let _ = file::remove_entry(&file::temp_path(&path));
        file::remove_entry(&path).map_err(|source| CacheError::Io { path, source })
    }

    /// The entry's bytes; `None` when there is none or it cannot be read (like Go). An
    /// entry that is not a regular file or is too large is an error.
    fn read(&self, network: &str, rt: &RuntimeConf) -> Result<Option<Vec<u8>>, CacheError> {
        let path = self.file_path(network, rt)?;
        match file::read_regular(&path, Links::Refuse, MAX_ENTRY) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(ReadError::Io(_)) => Ok(None),
            Err(source) => Err(CacheError::Entry { path, source }),
        }
    }

    /// The cached result converted to `version` (Go `getCachedResult`): `None` when there is
    /// no file; a file that is not a v1 entry is read as a bare (legacy) result.
    pub fn result(
        &self,
        network: &str,
        version: &str,
        rt: &RuntimeConf,
    ) -> Result<Option<CniResult>, CacheError> {
        let Some(bytes) = self.read(network, rt)? else {
            return Ok(None);
        };
        let raw = match crate::gojson::from_slice::<CachedInfo>(&bytes) {
            Ok(info) if info.kind == KIND_V1 => match info.result {
                Some(r) => Value::Object(r),
                None => return Ok(None),
            },
            _ => crate::gojson::from_slice::<Value>(&bytes).map_err(|e| {
                CacheError::Result(crate::Error::decoding(format!(
                    "failed to decode cached result: {e}"
                )))
            })?,
        };
        // A result without cniVersion is 0.1.0 (Go `create.DecodeVersion`).
        let result = CniResult::parse(&raw, "0.1.0").map_err(CacheError::Result)?;
        result
            .convert_to(version)
            .map(Some)
            .map_err(|source| CacheError::Convert {
                version: version.into(),
                source,
            })
    }

    /// The cached config bytes and `rt` with the cached args and capability args
    /// (Go `getCachedConfig`); `None` when there is no file.
    pub fn config(
        &self,
        network: &str,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>, CacheError> {
        let Some(bytes) = self.read(network, rt)? else {
            return Ok(None);
        };
        let info: CachedInfo =
            crate::gojson::from_slice(&bytes).map_err(|source| CacheError::Decode {
                network: network.into(),
                source,
            })?;
        if info.kind != KIND_V1 {
            return Err(CacheError::WrongKind {
                network: network.into(),
                kind: info.kind,
            });
        }
        let mut new_rt = rt.clone();
        if let Some(args) = info.cni_args {
            new_rt.args = args;
        }
        new_rt.capability_args = info.capability_args.unwrap_or_default();
        Ok(Some((info.config, new_rt)))
    }

    /// Go `GetCachedAttachments`: every valid v1 entry, by file name order, optionally only
    /// those of one container.
    pub fn attachments(
        &self,
        container_id: Option<&str>,
    ) -> std::io::Result<Vec<NetworkAttachment>> {
        let dir = self.results_dir();
        let mut names: Vec<String> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            if let Some(id) = container_id.filter(|id| !id.is_empty()) {
                let part = format!("-{id}-");
                match name.find(&part) {
                    Some(pos) if pos > 0 && pos + part.len() < name.len() => {}
                    _ => continue,
                }
            }
            if name.starts_with('.') && name.ends_with(".tmp") {
                continue; // a write that never finished (see [`file::write_atomic`])
            }
            let Ok(bytes) = file::read_regular(&dir.join(&name), Links::Refuse, MAX_ENTRY) else {
                continue;
            };
            let Ok(info) = crate::gojson::from_slice::<CachedInfo>(&bytes) else {
                continue;
            };
            if info.kind != KIND_V1
                || container_id.is_some_and(|id| !id.is_empty() && id != info.container_id)
                || info.ifname.is_empty()
                || info.network_name.is_empty()
            {
                continue;
            }
            out.push(NetworkAttachment {
                container_id: info.container_id,
                network: info.network_name,
                ifname: info.ifname,
                config: info.config,
                netns: info.netns,
                cni_args: info.cni_args.unwrap_or_default(),
                capability_args: info.capability_args.unwrap_or_default(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
