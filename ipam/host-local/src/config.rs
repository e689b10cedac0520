//! The host-local config: parsed from the whole network config (IPAM plugins get all of
//! it) plus CNI_ARGS, and validated completely before anything touches the disk.

use crate::ip;
use crate::range::RawRange;
use crate::range_set::{RangeSet, RangeSetError};
use libcni::gojson;
use libcni::types::Route;
use libcni::version::Version;
use serde::Deserialize;
use serde_json::Value;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};

/// Where the reference keeps its stores.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

#[derive(Debug, Clone, PartialEq)]
pub struct IpamConfig {
    pub store: StoreLocation,
    /// The config's version (skel's, parsed once).
    pub version: Version,
    /// Order: `runtimeConfig.ipRanges`, the legacy single range, `ranges`.
    pub ranges: Vec<RangeSet>,
    pub routes: Vec<Route>,
    pub resolv_conf: Option<PathBuf>,
    /// Requested IPs in the reference's order: CNI_ARGS `IP`, `args.cni.ips`, `runtimeConfig.ips`.
    pub requested: Vec<IpAddr>,
}

/// A config host-local refuses; messages are the reference's. Mapped to CNI codes in
/// [`crate::error`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] gojson::Error),
    #[error("IPAM config missing 'ipam' key")]
    MissingIpam,
    #[error("{}", .0.msg)]
    Args(libcni::Error),
    #[error("cannot understand ip: {0}")]
    BadIp(String),
    #[error("no IP ranges specified")]
    NoRanges,
    #[error("invalid range set {0}: {1}")]
    RangeSet(usize, RangeSetError),
    #[error("CNI version {0} does not support more than 1 address per family")]
    TooManyPerFamily(String),
    #[error("range set {0} overlaps with {1}")]
    SetsOverlap(usize, usize),
    #[error("invalid route in ipam.routes: {}", .0.msg)]
    BadRoute(#[source] libcni::Error),
    #[error("dataDir {0:?} must be an absolute path without '..' components")]
    BadDataDir(String),
    #[error("network name {0:?} cannot name a directory inside dataDir")]
    BadName(String),
}

#[derive(Deserialize)]
struct RawNet {
    #[serde(default)]
    name: String,
    #[serde(rename = "cniVersion", default)]
    cni_version: String,
    #[serde(default)]
    ipam: Option<RawIpam>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawRuntimeConfig>,
    #[serde(default)]
    args: Option<RawArgs>,
}

/// Go embeds the legacy single range's fields in the `ipam` object; they are spelled out
/// (not flattened) so that Go's key matching applies to them too.
#[derive(Deserialize)]
struct RawIpam {
    #[serde(default)]
    subnet: Option<String>,
    #[serde(rename = "rangeStart", default)]
    range_start: Option<String>,
    #[serde(rename = "rangeEnd", default)]
    range_end: Option<String>,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    routes: Option<Vec<Value>>,
    #[serde(rename = "dataDir", default)]
    data_dir: Option<String>,
    #[serde(rename = "resolvConf", default)]
    resolv_conf: Option<String>,
    #[serde(default)]
    ranges: Option<Vec<Option<Vec<RawRange>>>>,
}

#[derive(Deserialize)]
struct RawRuntimeConfig {
    #[serde(rename = "ipRanges", default)]
    ip_ranges: Option<Vec<Option<Vec<RawRange>>>>,
    #[serde(default)]
    ips: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawArgs {
    #[serde(default)]
    cni: Option<RawCniArgs>,
}

#[derive(Deserialize)]
struct RawCniArgs {
    #[serde(default)]
    ips: Option<Vec<String>>,
}

/// Where a network's leases live: all that DEL and GC need of the config.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreLocation {
    /// The network name: the store directory is `<data_dir>/<name>`.
    pub name: String,
    pub data_dir: PathBuf,
}

impl StoreLocation {
    fn new(name: String, data_dir: Option<&str>) -> Result<StoreLocation, ConfigError> {
        let data_dir = self::data_dir(data_dir)?;
        if !is_single_component(&name) {
            return Err(ConfigError::BadName(name));
        }
        Ok(StoreLocation { name, data_dir })
    }
}

/// The store location alone, for DEL and GC: they must work with a config that broke
/// after ADD (ranges, routes, gateway...), since releasing leases needs none of that.
pub fn load_store_location(stdin: &[u8]) -> Result<StoreLocation, ConfigError> {
    #[derive(Deserialize)]
    struct Net {
        #[serde(default)]
        name: String,
        #[serde(default)]
        ipam: Option<Ipam>,
    }
    #[derive(Deserialize)]
    struct Ipam {
        #[serde(rename = "dataDir", default)]
        data_dir: Option<String>,
    }
    let net: Net = gojson::from_slice(stdin).map_err(ConfigError::Decode)?;
    let ipam = net.ipam.ok_or(ConfigError::MissingIpam)?;
    StoreLocation::new(net.name, ipam.data_dir.as_deref())
}

/// Parses and validates; `cni_args` is the raw CNI_ARGS string, `version` the config's
/// `cniVersion` as skel parsed it.
pub fn load(stdin: &[u8], cni_args: &str, version: Version) -> Result<IpamConfig, ConfigError> {
    let net: RawNet = gojson::from_slice(stdin).map_err(ConfigError::Decode)?;
    let ipam = net.ipam.ok_or(ConfigError::MissingIpam)?;
    let requested = requested_ips(cni_args, &net.args, &net.runtime_config)?;

    let sets_of = |v: Option<Vec<Option<Vec<RawRange>>>>| -> Vec<Vec<RawRange>> {
        v.unwrap_or_default()
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect()
    };
    let mut raw_sets = sets_of(net.runtime_config.and_then(|r| r.ip_ranges));
    if ipam.subnet.as_deref().is_some_and(|s| !s.is_empty()) {
        raw_sets.push(vec![RawRange {
            subnet: ipam.subnet,
            range_start: ipam.range_start,
            range_end: ipam.range_end,
            gateway: ipam.gateway,
        }]);
    }
    raw_sets.extend(sets_of(ipam.ranges));
    if raw_sets.is_empty() {
        return Err(ConfigError::NoRanges);
    }
    let ranges = raw_sets
        .iter()
        .enumerate()
        .map(|(i, raw)| RangeSet::canonicalize(raw).map_err(|e| ConfigError::RangeSet(i, e)))
        .collect::<Result<Vec<_>, _>>()?;

    let v4 = ranges.iter().filter(|s| s.is_ipv4()).count();
    if (v4 > 1 || ranges.len() - v4 > 1) && version < Version::V0_3_0 {
        // The version as written: the reference prints it so.
        return Err(ConfigError::TooManyPerFamily(net.cni_version));
    }
    for (i, a) in ranges.iter().enumerate() {
        if let Some(j) = ranges[i + 1..].iter().position(|b| a.overlaps(b)) {
            return Err(ConfigError::SetsOverlap(i, i + j + 1));
        }
    }

    let routes = ipam
        .routes
        .unwrap_or_default()
        .iter()
        .map(|r| Route::parse(r).map_err(ConfigError::BadRoute))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IpamConfig {
        store: StoreLocation::new(net.name, ipam.data_dir.as_deref())?,
        version,
        ranges,
        routes,
        resolv_conf: ipam
            .resolv_conf
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        requested,
    })
}

fn requested_ips(
    cni_args: &str,
    args: &Option<RawArgs>,
    runtime: &Option<RawRuntimeConfig>,
) -> Result<Vec<IpAddr>, ConfigError> {
    let env = libcni::args::load(cni_args, &["IP"]).map_err(ConfigError::Args)?;
    let mut texts: Vec<&str> = libcni::args::get(&env, "IP")
        .filter(|s| !s.is_empty())
        .into_iter()
        .collect();
    if let Some(ips) = args.as_ref().and_then(|a| a.cni.as_ref()?.ips.as_ref()) {
        texts.extend(ips.iter().map(String::as_str));
    }
    if let Some(ips) = runtime.as_ref().and_then(|r| r.ips.as_ref()) {
        texts.extend(ips.iter().map(String::as_str));
    }
    let mut out: Vec<IpAddr> = Vec::with_capacity(texts.len());
    for t in texts {
        let ip = ip::parse_maybe_prefixed(t).ok_or_else(|| ConfigError::BadIp(t.to_string()))?;
        // The reference keys requests by address, so a repeat is one request.
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    Ok(out)
}

/// The store root: absolute and without `..`, so `<dataDir>/<network>` cannot point
/// anywhere an operator did not name explicitly.
fn data_dir(given: Option<&str>) -> Result<PathBuf, ConfigError> {
    let dir = match given {
        None | Some("") => return Ok(PathBuf::from(DEFAULT_DATA_DIR)),
        Some(d) => Path::new(d),
    };
    if !dir.is_absolute() || dir.components().any(|c| c == Component::ParentDir) {
        return Err(ConfigError::BadDataDir(dir.display().to_string()));
    }
    Ok(dir.to_path_buf())
}

/// A name that joins onto dataDir as exactly one directory below it.
fn is_single_component(name: &str) -> bool {
    let mut parts = Path::new(name).components();
    matches!(parts.next(), Some(Component::Normal(n)) if n == name) && parts.next().is_none()
}

#[cfg(test)]
mod tests;
