//! CNI spec versions: parsing, comparison, the supported list, config version
//! selection and the VERSION answer.

use crate::error::{Error, code};
use std::cmp::Ordering;
use std::fmt;

/// The spec version this suite implements.
pub const CURRENT: &str = "1.1.0";

/// Every spec version our plugins speak (Go `version.All`).
pub const SUPPORTED: &[&str] = &[
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

/// A parsed `major.minor.micro` version. Missing parts are zero, as in Go's `ParseVersion`;
/// the empty string means 0.1.0 (a config without `cniVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u64, pub u64, pub u64);

/// What a config without `cniVersion` reads as.
impl Default for Version {
    fn default() -> Version {
        Version(0, 1, 0)
    }
}

impl Version {
    /// The first version whose results carry `ips` (not `ip4`/`ip6`), and that allows
    /// more than one address per family.
    pub const V0_3_0: Version = Version(0, 3, 0);
    /// The first version with CHECK and the cached `prevResult` on DEL.
    pub const V0_4_0: Version = Version(0, 4, 0);
    /// The first version with STATUS and GC.
    pub const V1_1_0: Version = Version(1, 1, 0);

    pub fn parse(s: &str) -> Result<Version, Error> {
        if s.is_empty() {
            return Ok(Version(0, 1, 0));
        }
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() > 3 {
            return Err(decoding(format!("invalid version {s:?}: too many parts")));
        }
        let num = |i: usize, what: &str| -> Result<u64, Error> {
            match parts.get(i) {
                None => Ok(0),
                Some(p) => p.parse::<u64>().map_err(|e| {
                    decoding(format!("failed to convert {what} version part {p:?}: {e}"))
                }),
            }
        };
        Ok(Version(
            num(0, "major")?,
            num(1, "minor")?,
            num(2, "micro")?,
        ))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

fn decoding(msg: String) -> Error {
    Error::new(code::DECODING_FAILURE, msg)
}

/// `a >= b` for two version strings.
pub fn at_least(a: &str, b: &str) -> Result<bool, Error> {
    Ok(Version::parse(a)?.cmp(&Version::parse(b)?) != Ordering::Less)
}

/// Whether the plugin side speaks this exact version string (Go's reconciler is exact membership).
pub fn is_supported(v: &str) -> bool {
    SUPPORTED.contains(&v)
}

/// The version a runtime uses for a config: the highest of `cniVersion` and `cniVersions`,
/// ignoring `cniVersions` entries newer than [`CURRENT`]. `cniVersion` alone is used verbatim.
pub fn select_config_version(cni_version: &str, cni_versions: &[String]) -> Result<String, Error> {
    if cni_versions.is_empty() {
        return Ok(cni_version.to_string());
    }
    let current = Version::parse(CURRENT)?;
    let mut best: Option<(Version, String)> = None;
    let candidates = cni_versions
        .iter()
        .map(String::as_str)
        .chain((!cni_version.is_empty()).then_some(cni_version));
    for s in candidates {
        let v = Version::parse(s)?;
        if v > current {
            continue;
        }
        if best.as_ref().is_none_or(|(b, _)| v > *b) {
            best = Some((v, s.to_string()));
        }
    }
    Ok(best.map(|(_, s)| s).unwrap_or_default())
}

/// The VERSION answer, compact with a trailing newline as Go's `json.Encoder` writes it.
pub fn version_json() -> String {
    let v = serde_json::json!({ "cniVersion": CURRENT, "supportedVersions": SUPPORTED });
    format!("{v}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_and_compares() {
        assert_eq!(Version::parse("").unwrap(), Version(0, 1, 0));
        assert_eq!(Version::parse("1").unwrap(), Version(1, 0, 0));
        assert_eq!(Version::parse("0.3").unwrap(), Version(0, 3, 0));
        assert!(
            Version::parse("1.0.0.0")
                .unwrap_err()
                .msg
                .contains("too many parts")
        );
        assert!(Version::parse("1.0.f").unwrap_err().msg.contains("micro"));
        assert!(Version::parse("x").unwrap_err().msg.contains("major"));
        assert!(at_least("1.0.0", "0.4.0").unwrap());
        assert!(at_least("0.4.0", "0.4.0").unwrap());
        assert!(!at_least("0.3.1", "0.4.0").unwrap());
        assert!(!at_least("", "0.2.0").unwrap());
        assert!(at_least("0.10.0", "0.9.0").unwrap());
    }

    #[test]
    fn supported_is_exact_membership() {
        assert!(is_supported("0.3.1"));
        assert!(!is_supported("0.3"));
        assert!(!is_supported("1.2.0"));
    }

    #[test]
    fn supported_versions_print_as_written() {
        // Results carry `CmdArgs::version` printed: it must spell the config's version.
        for v in SUPPORTED {
            assert_eq!(Version::parse(v).unwrap().to_string(), *v);
        }
        assert_eq!(Version::parse("").unwrap().to_string(), "0.1.0");
    }

    #[test]
    fn selects_config_version_like_libcni() {
        assert_eq!(
            select_config_version("", &vs(&["1.1.0", "0.4.0", "1.0.0"])).unwrap(),
            "1.1.0"
        );
        assert_eq!(
            select_config_version("", &vs(&["99.0.0", "1.1.0", "1.0.0"])).unwrap(),
            "1.1.0"
        );
        assert!(select_config_version("", &vs(&["1.0.f"])).is_err());
        assert_eq!(select_config_version("1.2.3", &[]).unwrap(), "1.2.3");
        assert_eq!(
            select_config_version("1.0.0", &vs(&["0.1.0", "0.4.0"])).unwrap(),
            "1.0.0"
        );
        assert_eq!(select_config_version("", &[]).unwrap(), "");
        assert_eq!(select_config_version("", &vs(&["2.0.0"])).unwrap(), "");
    }

    #[test]
    fn version_output() {
        assert_eq!(
            version_json(),
            "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n"
        );
    }
}
