//! The runtime side of CNI, after Go `libcni`: load a network configuration list, run
//! ADD/DEL/CHECK/STATUS/GC over its plugins, keep the result cache.
//!
//! ```no_run
//! use libcni::runtime::{CniConfig, RuntimeConf, load_network_conf};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let list = load_network_conf("/etc/cni/net.d".as_ref(), "mynet")?;
//! let cni = CniConfig::new(vec!["/opt/cni/bin".into()]);
//! let rt = RuntimeConf {
//!     container_id: "c1".into(),
//!     netns: "/run/netns/c1".into(),
//!     ifname: "eth0".into(),
//!     ..Default::default()
//! };
//! let result = cni.add_network_list(&list, &rt)?;
//! println!("{}", result.to_json(&result.cni_version)?);
//! cni.del_network_list(&list, &rt)?;
//! # Ok(()) }
//! ```

mod cache;
mod conf;
mod error;
mod ops;

use crate::gojson::encode as gojson;

pub use cache::{Cache, CacheError, CachedInfo, DEFAULT_CACHE_DIR, KIND_V1, NetworkAttachment};
pub use conf::{
    ConfError, NetworkConfigList, PluginConfig, conf_files, load_conf, load_network_conf,
};
pub use error::RuntimeError;
pub use gojson::{marshal as go_marshal, marshal_indent as go_marshal_indent};

use serde_json::{Map, Value};
use std::path::PathBuf;

/// The arguments of one attachment (Go `RuntimeConf`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeConf {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// CNI_ARGS pairs, joined as `K=V;K2=V2`.
    pub args: Vec<(String, String)>,
    /// Capability arguments; each plugin gets those its `capabilities` enable, as
    /// `runtimeConfig`.
    pub capability_args: Map<String, Value>,
}

/// Where plugins are found and results are cached (Go `CNIConfig`).
#[derive(Debug, Clone)]
pub struct CniConfig {
    /// Plugin search directories (CNI_PATH).
    pub path: Vec<PathBuf>,
    pub cache: Cache,
}

impl CniConfig {
    /// Caches in [`DEFAULT_CACHE_DIR`], like Go `NewCNIConfig`.
    pub fn new(path: Vec<PathBuf>) -> CniConfig {
        CniConfig::with_cache_dir(path, DEFAULT_CACHE_DIR)
    }

    /// Go `NewCNIConfigWithCacheDir`.
    pub fn with_cache_dir(path: Vec<PathBuf>, cache_dir: impl Into<PathBuf>) -> CniConfig {
        CniConfig {
            path,
            cache: Cache::new(cache_dir),
        }
    }
}
