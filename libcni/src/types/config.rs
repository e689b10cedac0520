//! The fields every plugin config shares (Go `types.PluginConf`). Plugins parse their own
//! fields from the same bytes (through [`crate::gojson`], like this).

use super::result::Dns;
use crate::gojson;
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
    /// Always an object (Go: `map[string]interface{}`).
    #[serde(
        rename = "prevResult",
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub prev_result: Option<Value>,
    /// GC's list of attachments to keep; `null` is read as `[]`. See
    /// [`NetConf::gc_attachments`].
    #[serde(
        rename = "cni.dev/valid-attachments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub valid_attachments: Option<Vec<GcAttachment>>,
    /// The same list under the name libcni v1.2.0 used (Go libcni sends both keys).
    #[serde(
        rename = "cni.dev/attachments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_attachments: Option<Vec<GcAttachment>>,
}

const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";
const LEGACY_ATTACHMENTS: &str = "cni.dev/attachments";

/// The `ipam` object; only `type` is common, the rest belongs to the IPAM plugin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpamConf {
    #[serde(rename = "type", default)]
    pub plugin_type: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(rename = "ifname")]
    pub ifname: String,
}

fn object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Ok(Option::<Map<String, Value>>::deserialize(d)?.map(Value::Object))
}

fn contains_ignore_ascii_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

fn decoding(e: gojson::Error) -> crate::Error {
    crate::Error::decoding(format!("failed to load netconf: {e}"))
}

impl NetConf {
    /// Parses the common fields (building nothing else); the message matches Go skel's
    /// decode error.
    pub fn parse(bytes: &[u8]) -> Result<NetConf, crate::Error> {
        let conf = gojson::from_slice(bytes).map_err(decoding)?;
        Ok(NetConf::with_null_lists(conf, bytes))
    }

    /// [`parse`](Self::parse) for a document already parsed from `bytes` (by
    /// [`gojson::with_document`]), for a plugin that decodes its own fields from the same
    /// parse.
    pub fn from_document(doc: Value, bytes: &[u8]) -> Result<NetConf, crate::Error> {
        let conf = gojson::from_value(doc).map_err(decoding)?;
        Ok(NetConf::with_null_lists(conf, bytes))
    }

    /// Struct decoding drops nulls, so a null GC list is looked for in `bytes` (only when
    /// the key can be there; a key spelled with escapes is then read as absent: GC
    /// releases nothing, the safe side). For a slice Go's null sets it to nil: the last
    /// key (any case) decides.
    fn with_null_lists(mut conf: NetConf, bytes: &[u8]) -> NetConf {
        if contains_ignore_ascii_case(bytes, b"attachments") {
            if gojson::last_field_is_null(bytes, VALID_ATTACHMENTS) {
                conf.valid_attachments = Some(Vec::new());
            }
            if gojson::last_field_is_null(bytes, LEGACY_ATTACHMENTS) {
                conf.legacy_attachments = Some(Vec::new());
            }
        }
        conf
    }

    /// What GC must keep: `cni.dev/valid-attachments`, else `cni.dev/attachments` (its name
    /// in libcni v1.2.0). `null` is the empty list: Go's libcni encodes a runtime's empty
    /// (nil) list that way, and CRI-O sends it on a node with no pod. `None` when neither key
    /// is there: no runtime speaking GC sends that, so GC then releases nothing rather than
    /// everything.
    pub fn gc_attachments(&self) -> Option<&[GcAttachment]> {
        self.valid_attachments
            .as_deref()
            .or(self.legacy_attachments.as_deref())
    }

    /// The IPAM plugin type, empty when there is none (L2 mode for the bridge).
    pub fn ipam_type(&self) -> &str {
        self.ipam.as_ref().map_or("", |i| i.plugin_type.as_str())
    }

    /// A value of `runtimeConfig`, when the runtime sent it (keys matched as Go matches a
    /// struct field: exactly or case-insensitively, the last one wins).
    pub fn runtime_config_value(&self, key: &str) -> Option<&Value> {
        gojson::field(self.runtime_config.as_ref()?, key)
    }

    /// `args.cni.<key>`, the optional metadata convention (keys matched as above).
    pub fn args_cni_value(&self, key: &str) -> Option<&Value> {
        gojson::field(gojson::field(self.args.as_ref()?, "cni")?, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_common_fields_as_go_does() {
        let c = NetConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"bridge","bridge":"cni0",
                "ipam":{"type":"host-local","subnet":"10.0.0.0/24"},
                "runtimeConfig":{"mac":"02:00:00:00:00:01"},"args":{"cni":{"ips":["10.0.0.9"]}}}"#,
        )
        .unwrap();
        assert_eq!(c.ipam_type(), "host-local");
        assert_eq!(c.runtime_config_value("mac").unwrap(), "02:00:00:00:00:01");
        assert_eq!(c.args_cni_value("ips").unwrap()[0], "10.0.0.9");
        assert_eq!(c.valid_attachments, None);
        assert_eq!(c.gc_attachments(), None);
        // Go field names, as containerd's CRI sends them.
        let c = NetConf::parse(
            br#"{"CNIVersion":"1.0.0","Name":"n","Type":"bridge","IPAM":{"Type":"host-local"},
                "RuntimeConfig":{"MAC":"x"},"Args":{"CNI":{"Mac":"y"}}}"#,
        )
        .unwrap();
        assert_eq!((c.name.as_str(), c.plugin_type.as_str()), ("n", "bridge"));
        assert_eq!(c.ipam_type(), "host-local");
        assert_eq!(c.runtime_config_value("mac").unwrap(), "x");
        assert_eq!(c.args_cni_value("mac").unwrap(), "y");
    }

    #[test]
    fn prev_result_must_be_an_object() {
        let err = NetConf::parse(br#"{"name":"n","prevResult":"x"}"#).unwrap_err();
        assert_eq!(err.code, crate::error::code::DECODING_FAILURE);
        assert!(
            err.msg
                .starts_with("failed to load netconf: prevResult: invalid type"),
            "{}",
            err.msg
        );
        let c = NetConf::parse(br#"{"name":"n","prevResult":null}"#).unwrap();
        assert_eq!(c.prev_result, None);
    }

    #[test]
    fn gc_lists_absent_null_and_given() {
        let parse = |s: &str| NetConf::parse(s.as_bytes()).unwrap();
        let want = [GcAttachment {
            container_id: "a".into(),
            ifname: "eth0".into(),
        }];
        let list = r#"[{"containerID":"a","ifname":"eth0"}]"#;
        assert_eq!(parse(r#"{"name":"n"}"#).gc_attachments(), None);
        for key in [VALID_ATTACHMENTS, LEGACY_ATTACHMENTS] {
            let c = parse(&format!(r#"{{"name":"n","{key}":null}}"#));
            assert_eq!(c.gc_attachments(), Some(&[][..]), "{key}: null");
            let c = parse(&format!(r#"{{"name":"n","{key}":[]}}"#));
            assert_eq!(c.gc_attachments(), Some(&[][..]), "{key}: []");
            let c = parse(&format!(r#"{{"name":"n","{key}":{list}}}"#));
            assert_eq!(c.gc_attachments(), Some(&want[..]), "{key}: list");
        }
        // As Go libcni sends them: both keys, null
        let c =
            parse(r#"{"name":"n","cni.dev/valid-attachments":null,"cni.dev/attachments":null}"#);
        assert_eq!(c.gc_attachments(), Some(&[][..]));
        // The spec's key wins over the legacy one, whatever it holds.
        let c = parse(&format!(
            r#"{{"name":"n","cni.dev/valid-attachments":{list},"cni.dev/attachments":null}}"#
        ));
        assert_eq!(c.gc_attachments(), Some(&want[..]));
        let c = parse(&format!(
            r#"{{"name":"n","cni.dev/valid-attachments":null,"cni.dev/attachments":{list}}}"#
        ));
        assert_eq!(c.gc_attachments(), Some(&[][..]));
        // A later null key (any case) sets the list to nil, as in Go.
        let c = parse(&format!(
            r#"{{"name":"n","cni.dev/valid-attachments":{list},"CNI.dev/Valid-Attachments":null}}"#
        ));
        assert_eq!(c.gc_attachments(), Some(&[][..]));
        assert_eq!(c.ipam_type(), "");
    }
}
