//! ADD: `lo` up, then the result the reference prints. That result is a 1.0.0-shaped
//! result labeled with the config's version at *every* version (Go builds a 1.0.0 result
//! object, sets its `cniVersion` to the config's and prints it unconverted), or, in a
//! chain, the `prevResult` passed through at the config's version. `dns` is always there.
//! A config without a version (absent, `null` or `""`) is the exception: Go converts its
//! result to the real 0.1.0 shape (`ip4`, `ip6`), labeled 0.1.0.

use crate::lo;
use hostnet::kernel::Kernel;
use libcni::skel::CmdArgs;
use libcni::types::{Interface, IpConfig, NetConf};
use libcni::{CniResult, Error};

/// The shape of the result the reference builds itself.
const OWN_RESULT_SHAPE: &str = "1.0.0";
/// ... and the one it prints for a config that names no version.
const UNVERSIONED_SHAPE: &str = "0.1.0";

pub fn add<K: Kernel>(k: &K, args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = NetConf::parse(&args.stdin_data)?;
    // Read before touching the node, as the reference does.
    let prev =
        match &conf.prev_result {
            Some(prev) => Some(CniResult::parse_at(prev, args.version).map_err(|e| {
                Error::new(e.code, format!("failed to parse prevResult: {}", e.msg))
            })?),
            None => None,
        };
    let addrs = lo::bring_up(k, args)?;
    if let Some(mut prev) = prev {
        prev.cni_version = args.version.to_string();
        return Ok(prev);
    }
    let shape = if conf.cni_version.is_empty() {
        UNVERSIONED_SHAPE
    } else {
        OWN_RESULT_SHAPE
    };
    Ok(CniResult {
        cni_version: shape.into(),
        interfaces: vec![Interface {
            name: "lo".into(),
            mac: "00:00:00:00:00:00".into(),
            sandbox: args.netns.clone(),
            ..Default::default()
        }],
        ips: [addrs.v4, addrs.v6]
            .into_iter()
            .flatten()
            .map(|address| IpConfig {
                interface: Some(0),
                address,
                gateway: None,
            })
            .collect(),
        ..Default::default()
    })
}

/// `result` in the shape of its own version, labeled with the config's version, with `dns`.
pub fn result_json(result: &CniResult, config_version: &str) -> Result<String, Error> {
    let mut value = result.to_value(&result.cni_version)?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("cniVersion".into(), config_version.into());
        obj.entry("dns").or_insert_with(|| serde_json::json!({}));
    }
    Ok(libcni::types::to_pretty_json(&value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn own_result() -> CniResult {
        CniResult {
            cni_version: OWN_RESULT_SHAPE.into(),
            interfaces: vec![Interface {
                name: "lo".into(),
                mac: "00:00:00:00:00:00".into(),
                sandbox: "/run/netns/x".into(),
                ..Default::default()
            }],
            ips: ["127.0.0.1/8", "::1/128"]
                .iter()
                .map(|a| IpConfig {
                    interface: Some(0),
                    address: a.parse().unwrap(),
                    gateway: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn own_result_keeps_the_1_0_0_shape_at_every_version() {
        for version in ["0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            let out: Value =
                serde_json::from_str(&result_json(&own_result(), version).unwrap()).unwrap();
            assert_eq!(
                out,
                json!({"cniVersion": version,
                       "interfaces": [{"name": "lo", "mac": "00:00:00:00:00:00",
                                       "sandbox": "/run/netns/x"}],
                       "ips": [{"interface": 0, "address": "127.0.0.1/8"},
                               {"interface": 0, "address": "::1/128"}],
                       "dns": {}}),
                "{version}"
            );
        }
    }

    #[test]
    fn passed_through_result_takes_the_config_shape() {
        let prev = CniResult::parse(
            &json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}}),
            "0.2.0",
        )
        .unwrap();
        let out = result_json(&prev, "0.2.0").unwrap();
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            out,
            json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}, "dns": {}})
        );
    }
}
