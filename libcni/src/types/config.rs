//! The fields every plugin config shares (Go `types.PluginConf`). Plugins parse their own
//! fields from the same bytes; unknown keys are kept in `extra` so nothing is lost.

use super::result::Dns;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetConf {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub plugin_type: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capabilities: BTreeMap<String, bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<IpamConf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    #[serde(
        rename = "runtimeConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime_config: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(
        rename = "prevResult",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub prev_result: Option<Value>,
    /// `None`: the key is absent (GC must release nothing); `Some(empty)`: also for JSON null.
    #[serde(
        rename = "cni.dev/valid-attachments",
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub valid_attachments: Option<Vec<GcAttachment>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `ipam` object; only `type` is common, the rest belongs to the IPAM plugin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpamConf {
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(rename = "ifname")]
    pub ifname: String,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<GcAttachment>>, D::Error> {
    let v: Option<Vec<GcAttachment>> = Option::deserialize(d)?;
    Ok(Some(v.unwrap_or_default()))
}

impl NetConf {
    /// Parses the common fields; the message matches Go skel's decode error.
    pub fn parse(bytes: &[u8]) -> Result<NetConf, crate::Error> {
        serde_json::from_slice(bytes)
            .map_err(|e| crate::Error::decoding(format!("failed to load netconf: {e}")))
    }

    /// The IPAM plugin type, empty when there is none (L2 mode for the bridge).
    pub fn ipam_type(&self) -> &str {
        self.ipam.as_ref().map_or("", |i| i.plugin_type.as_str())
    }

    /// A value of `runtimeConfig`, when the runtime sent it.
    pub fn runtime_config_value(&self, key: &str) -> Option<&Value> {
        self.runtime_config.as_ref()?.get(key)
    }

    /// `args.cni.<key>`, the optional metadata convention.
    pub fn args_cni_value(&self, key: &str) -> Option<&Value> {
        self.args.as_ref()?.get("cni")?.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_unknown_keys_and_reads_common_ones() {
        let c = NetConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"bridge","bridge":"cni0",
                "ipam":{"type":"host-local","subnet":"10.0.0.0/24"},
                "runtimeConfig":{"mac":"02:00:00:00:00:01"},"args":{"cni":{"ips":["10.0.0.9"]}}}"#,
        )
        .unwrap();
        assert_eq!(c.ipam_type(), "host-local");
        assert_eq!(c.extra["bridge"], "cni0");
        assert_eq!(c.ipam.as_ref().unwrap().extra["subnet"], "10.0.0.0/24");
        assert_eq!(c.runtime_config_value("mac").unwrap(), "02:00:00:00:00:01");
        assert_eq!(c.args_cni_value("ips").unwrap()[0], "10.0.0.9");
        assert_eq!(c.valid_attachments, None);
        let back = serde_json::to_value(&c).unwrap();
        assert_eq!(back["bridge"], "cni0");
        assert_eq!(back["ipam"]["subnet"], "10.0.0.0/24");
    }

    #[test]
    fn valid_attachments_absent_null_and_list() {
        let c = NetConf::parse(br#"{"name":"n","cni.dev/valid-attachments":null}"#).unwrap();
        assert_eq!(c.valid_attachments, Some(vec![]));
        let c = NetConf::parse(
            br#"{"name":"n","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert_eq!(
            c.valid_attachments,
            Some(vec![GcAttachment {
                container_id: "a".into(),
                ifname: "eth0".into()
            }])
        );
        assert_eq!(c.ipam_type(), "");
    }
}
