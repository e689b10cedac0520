//! The list operations (Go `AddNetworkList`, `DelNetworkList`, `CheckNetworkList`,
//! `GetStatusNetworkList`, `GCNetworkList`, `ValidateNetworkList`) and what each plugin
//! gets on stdin and in its environment.

use super::conf::{NetworkConfigList, PluginConfig};
use super::error::RuntimeError;
use super::{CacheError, CniConfig, RuntimeConf, gojson};
use crate::error::{Error, code};
use crate::invoke::{exec_plugin, exec_plugin_with_result, find_in_path};
use crate::skel::{validate_container_id, validate_ifname};
use crate::types::{CniResult, GcAttachment};
use crate::version;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::PathBuf;

/// Keys whose values Go injects as structs: their field order is kept, not sorted.
const STRUCT_KEYS: &[&str] = &[
    "prevResult",
    "cni.dev/valid-attachments",
    "cni.dev/attachments",
];

impl CniConfig {
    /// Runs ADD on every plugin in order, each getting the previous one's result as
    /// `prevResult`; caches and returns the last result.
    pub fn add_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<CniResult, RuntimeError> {
        self.add_network_list_rendered(list, rt)
            .map(|(result, _)| result)
    }

    /// [`add_network_list`](Self::add_network_list), also returning the last result's
    /// JSON at its own version: rendered once, for the cache and the caller's output.
    pub fn add_network_list_rendered(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(CniResult, Value), RuntimeError> {
        let mut result: Option<CniResult> = None;
        for plugin in &list.plugins {
            let r = self
                .add_one(list, plugin, result.as_ref(), rt)
                .map_err(|source| RuntimeError::Plugin {
                    plugin: plugin.description(),
                    verb: "add",
                    source,
                })?;
            result = Some(r);
        }
        let result = result.ok_or_else(|| {
            RuntimeError::Cni(Error::invalid_config(format!(
                "network {:?} has no plugins",
                list.name
            )))
        })?;
        let cached = result
            .to_value(&result.cni_version)
            .map_err(CacheError::Result)
            .and_then(|rendered| {
                self.cache
                    .add_rendered(&rendered, &list.bytes, &list.name, rt)
                    .map(|()| rendered)
            });
        match cached {
            Ok(rendered) => Ok((result, rendered)),
            // What the plugins made would leak (no later DEL finds a cached result, and a
            // runtime may never DEL a failed ADD): undone first, as a plugin undoes a
            // failed ADD, with the result as prevResult (as DEL would read it from the cache).
            Err(source) => {
                let prev = result.convert_to(&list.cni_version).ok();
                let undo = self.del_plugins(list, prev.as_ref(), rt).err();
                let _ = self.cache.remove(&list.name, rt);
                Err(RuntimeError::CacheWrite {
                    network: list.name.clone(),
                    source,
                    undo: undo.map(Box::new),
                })
            }
        }
    }

    fn add_one(
        &self,
        list: &NetworkConfigList,
        plugin: &PluginConfig,
        prev: Option<&CniResult>,
        rt: &RuntimeConf,
    ) -> Result<CniResult, Error> {
        let path = self.find(plugin)?;
        validate_container_id(&rt.container_id)?;
        crate::skel::validate_network_name(&list.name)?;
        validate_ifname(&rt.ifname)?;
        let stdin = request_config(list, plugin, prev, rt)?;
        exec_plugin_with_result(&path, &stdin, &self.env("ADD", Some(rt)).as_refs())
    }

    /// Runs DEL on every plugin in reverse order with the cached result as `prevResult`
    /// (config >= 0.4.0); removes the cache entry when all succeeded. A cache entry that
    /// cannot be read is removed first and DEL goes on without `prevResult`.
    pub fn del_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), RuntimeError> {
        let mut cached = None;
        if version::at_least(&list.cni_version, "0.4.0")? {
            match self.cache.result(&list.name, &list.cni_version, rt) {
                Ok(r) => cached = r,
                Err(_) => {
                    let _ = self.cache.remove(&list.name, rt);
                }
            }
        }
        self.del_plugins(list, cached.as_ref(), rt)?;
        // Go removes it only when a result was cached; removing it always also clears
        // entries of configs older than 0.4.0, which Go leaves behind forever.
        if let Err(e) = self.cache.remove(&list.name, rt) {
            crate::log!(
                "cni: DEL of {}: cannot remove the cached result: {e}",
                list.name
            );
        }
        Ok(())
    }

    /// DEL on every plugin in reverse order, `prev` as `prevResult` (config >= 0.4.0).
    fn del_plugins(
        &self,
        list: &NetworkConfigList,
        prev: Option<&CniResult>,
        rt: &RuntimeConf,
    ) -> Result<(), RuntimeError> {
        let prev = prev.filter(|_| version::at_least(&list.cni_version, "0.4.0").unwrap_or(false));
        for plugin in list.plugins.iter().rev() {
            self.run_one("DEL", list, plugin, prev, rt)
                .map_err(|source| RuntimeError::Plugin {
                    plugin: plugin.description(),
                    verb: "delete",
                    source,
                })?;
        }
        Ok(())
    }

    /// Runs CHECK on every plugin in order with the cached result as `prevResult`; a
    /// plugin's error is returned as is.
    pub fn check_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), RuntimeError> {
        if !version::at_least(&list.cni_version, "0.4.0")? {
            return Err(RuntimeError::CheckNotSupported(list.cni_version.clone()));
        }
        if list.disable_check {
            return Ok(());
        }
        let cached = self
            .cache
            .result(&list.name, &list.cni_version, rt)
            .map_err(|source| RuntimeError::CacheRead {
                network: list.name.clone(),
                source,
            })?;
        for plugin in &list.plugins {
            self.run_one("CHECK", list, plugin, cached.as_ref(), rt)?;
        }
        Ok(())
    }

    fn run_one(
        &self,
        command: &str,
        list: &NetworkConfigList,
        plugin: &PluginConfig,
        prev: Option<&CniResult>,
        rt: &RuntimeConf,
    ) -> Result<(), Error> {
        let path = self.find(plugin)?;
        let stdin = request_config(list, plugin, prev, rt)?;
        exec_plugin(&path, &stdin, &self.env(command, Some(rt)).as_refs()).map(|_| ())
    }

    /// STATUS on every plugin in order (config >= 1.1.0, else ready). The first error is
    /// returned unwrapped, so codes 50 and 51 reach the caller.
    pub fn get_status_network_list(&self, list: &NetworkConfigList) -> Result<(), RuntimeError> {
        if !version::at_least(&list.cni_version, "1.1.0").unwrap_or(false) {
            return Ok(());
        }
        for plugin in &list.plugins {
            self.run_no_attachment("STATUS", list, plugin, None)?;
        }
        Ok(())
    }

    /// GC: DEL every cached attachment of this network that is not in `valid` (all of
    /// them when `valid` is `None`), then, for config >= 1.1.0, GC on every plugin with
    /// `cni.dev/valid-attachments` (and the legacy `cni.dev/attachments`) when `valid` is
    /// given. Carries on after errors and returns them all. Nothing when `disableGC`.
    pub fn gc_network_list(
        &self,
        list: &NetworkConfigList,
        valid: Option<&[GcAttachment]>,
    ) -> Result<(), RuntimeError> {
        if list.disable_gc {
            return Ok(());
        }
        let mut errs = Vec::new();
        let keep: BTreeSet<&GcAttachment> = valid.unwrap_or_default().iter().collect();
        // Go gives up silently when the cache cannot be listed, plugin GC included; a
        // missing cache only means there is nothing to DEL, and plugins still get GC.
        match self.cache.attachments(None) {
            Ok(attachments) => {
                for a in attachments.into_iter().filter(|a| a.network == list.name) {
                    let id = GcAttachment {
                        container_id: a.container_id.clone(),
                        ifname: a.ifname.clone(),
                    };
                    if keep.contains(&id) {
                        continue;
                    }
                    let rt = RuntimeConf {
                        container_id: a.container_id,
                        netns: a.netns,
                        ifname: a.ifname,
                        args: a.cni_args,
                        capability_args: a.capability_args,
                    };
                    if let Err(e) = self.del_network_list(list, &rt) {
                        errs.push(RuntimeError::GcStale {
                            container_id: rt.container_id,
                            ifname: rt.ifname,
                            source: Box::new(e),
                        });
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(source) => errs.push(RuntimeError::GcList {
                dir: self.cache.results_dir().display().to_string(),
                source,
            }),
        }
        if version::at_least(&list.cni_version, "1.1.0").unwrap_or(false) {
            let valid_json = valid.map(|v| serde_json::to_value(v).unwrap_or(json!([])));
            for plugin in &list.plugins {
                if let Err(source) = self.run_no_attachment("GC", list, plugin, valid_json.as_ref())
                {
                    errs.push(RuntimeError::GcPlugin {
                        plugin: plugin.network.plugin_type.clone(),
                        source,
                    });
                }
            }
        }
        match errs.len() {
            0 => Ok(()),
            1 => Err(errs.remove(0)),
            _ => Err(RuntimeError::Many(errs)),
        }
    }

    /// STATUS or GC: no attachment, so empty CNI_CONTAINERID/NETNS/IFNAME/ARGS.
    fn run_no_attachment(
        &self,
        command: &str,
        list: &NetworkConfigList,
        plugin: &PluginConfig,
        valid: Option<&Value>,
    ) -> Result<(), Error> {
        let path = self.find(plugin)?;
        let mut conf = plugin.raw.clone();
        conf.insert("name".into(), json!(list.name));
        conf.insert("cniVersion".into(), json!(list.cni_version));
        if let Some(v) = valid {
            conf.insert("cni.dev/valid-attachments".into(), v.clone());
            conf.insert("cni.dev/attachments".into(), v.clone());
        }
        let stdin = gojson::marshal(&gojson::sorted_except(&conf, STRUCT_KEYS));
        exec_plugin(&path, stdin.as_bytes(), &self.env(command, None).as_refs()).map(|_| ())
    }

    /// Every plugin is found and supports the list's version; returns the capabilities the
    /// list enables (sorted). Errors are collected (Go `ValidateNetworkList`).
    pub fn validate_network_list(
        &self,
        list: &NetworkConfigList,
    ) -> Result<Vec<String>, RuntimeError> {
        let mut errs = Vec::new();
        let mut caps = BTreeSet::new();
        for plugin in &list.plugins {
            if let Err(e) = self.validate_plugin(&plugin.network.plugin_type, &list.cni_version) {
                errs.push(e);
            }
            caps.extend(
                plugin
                    .network
                    .capabilities
                    .iter()
                    .filter(|(_, on)| **on)
                    .map(|(c, _)| c.clone()),
            );
        }
        if !errs.is_empty() {
            return Err(RuntimeError::Validate(errs));
        }
        Ok(caps.into_iter().collect())
    }

    fn validate_plugin(&self, plugin_type: &str, version: &str) -> Result<(), RuntimeError> {
        let expected = if version.is_empty() { "0.1.0" } else { version };
        let supported = self.get_version_info(plugin_type)?;
        if supported.iter().any(|v| v == expected) {
            return Ok(());
        }
        Err(RuntimeError::UnsupportedVersion {
            plugin: plugin_type.into(),
            version: expected.into(),
        })
    }

    /// The versions a plugin supports, from its VERSION answer (Go `GetVersionInfo`). A
    /// plugin that does not know VERSION supports 0.1.0 only.
    pub fn get_version_info(&self, plugin_type: &str) -> Result<Vec<String>, Error> {
        let path = find_in_path(plugin_type, &self.path)?;
        let env = [
            ("CNI_COMMAND", "VERSION"),
            ("CNI_CONTAINERID", ""),
            ("CNI_NETNS", "dummy"),
            ("CNI_ARGS", ""),
            ("CNI_IFNAME", "dummy"),
            ("CNI_PATH", "dummy"),
        ];
        let stdin = format!("{{\"cniVersion\":{:?}}}", version::CURRENT);
        let out = match exec_plugin(&path, stdin.as_bytes(), &env) {
            Ok(out) => out,
            Err(e) if e.msg == "unknown CNI_COMMAND: VERSION" => return Ok(vec!["0.1.0".into()]),
            Err(e) => return Err(e),
        };
        decode_version_info(&out)
    }

    /// The cached ADD result, converted to the list's version (Go
    /// `GetNetworkListCachedResult`).
    pub fn get_network_list_cached_result(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<CniResult>, RuntimeError> {
        self.cache
            .result(&list.name, &list.cni_version, rt)
            .map_err(|source| RuntimeError::CacheRead {
                network: list.name.clone(),
                source,
            })
    }

    /// The cached config bytes and `rt` refilled with the cached args (Go
    /// `GetNetworkListCachedConfig`).
    pub fn get_network_list_cached_config(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>, RuntimeError> {
        self.cache
            .config(&list.name, rt)
            .map_err(|source| RuntimeError::CacheRead {
                network: list.name.clone(),
                source,
            })
    }

    fn find(&self, plugin: &PluginConfig) -> Result<PathBuf, Error> {
        find_in_path(&plugin.network.plugin_type, &self.path)
    }

    /// The CNI_* variables of every call; those that do not apply are empty.
    fn env(&self, command: &str, rt: Option<&RuntimeConf>) -> Env {
        let path: Vec<String> = self.path.iter().map(|p| p.display().to_string()).collect();
        let (id, netns, ifname, args) = match rt {
            Some(rt) => (
                rt.container_id.clone(),
                rt.netns.clone(),
                rt.ifname.clone(),
                join_args(&rt.args),
            ),
            None => Default::default(),
        };
        Env(vec![
            ("CNI_COMMAND", command.to_string()),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", netns),
            ("CNI_ARGS", args),
            ("CNI_IFNAME", ifname),
            ("CNI_PATH", path.join(":")),
        ])
    }
}

struct Env(Vec<(&'static str, String)>);

impl Env {
    fn as_refs(&self) -> Vec<(&str, &str)> {
        self.0.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }
}

/// `K=V;K2=V2`.
pub(super) fn join_args(args: &[(String, String)]) -> String {
    args.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// What a plugin gets on stdin for ADD/DEL/CHECK (Go `buildOneConfig`): its own object
/// with the list's `name` and `cniVersion`, `prevResult` when there is one, and
/// `runtimeConfig` with the capability args it advertises (only when there are some).
/// Written as Go writes it, keys sorted, so the bytes match Go libcni's.
fn request_config(
    list: &NetworkConfigList,
    plugin: &PluginConfig,
    prev: Option<&CniResult>,
    rt: &RuntimeConf,
) -> Result<Vec<u8>, Error> {
    let mut conf = plugin.raw.clone();
    conf.insert("name".into(), json!(list.name));
    conf.insert("cniVersion".into(), json!(list.cni_version));
    if let Some(prev) = prev {
        conf.insert("prevResult".into(), prev.to_value(&prev.cni_version)?);
    }
    let runtime_config: Map<String, Value> = plugin
        .network
        .capabilities
        .iter()
        .filter(|(_, on)| **on)
        .filter_map(|(cap, _)| Some((cap.clone(), rt.capability_args.get(cap)?.clone())))
        .collect();
    if !runtime_config.is_empty() {
        conf.insert("runtimeConfig".into(), Value::Object(runtime_config));
    }
    Ok(gojson::marshal(&gojson::sorted_except(&conf, STRUCT_KEYS)).into_bytes())
}

/// Go `version.PluginDecoder.Decode`.
fn decode_version_info(out: &[u8]) -> Result<Vec<String>, Error> {
    #[derive(serde::Deserialize)]
    struct Info {
        #[serde(rename = "cniVersion", default)]
        cni_version: String,
        #[serde(rename = "supportedVersions", default)]
        supported: Vec<String>,
    }
    let info: Info = crate::gojson::from_slice(out)
        .map_err(|e| Error::decoding(format!("decoding version info: {e}")))?;
    if info.cni_version.is_empty() {
        return Err(Error::decoding(
            "decoding version info: missing field cniVersion",
        ));
    }
    if info.supported.is_empty() {
        if info.cni_version == "0.2.0" {
            return Ok(vec!["0.1.0".into(), "0.2.0".into()]);
        }
        return Err(Error::new(
            code::DECODING_FAILURE,
            "decoding version info: missing field supportedVersions",
        ));
    }
    Ok(info.supported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_config_sorts_and_injects() {
        let list = NetworkConfigList::from_bytes(
            br#"{"cniVersion":"1.0.0","name":"net","plugins":[
                {"type":"p","capabilities":{"mac":true,"ips":false,"portMappings":true},"z":1,"a":{"y":1,"b":2}}]}"#,
        )
        .unwrap();
        let rt = RuntimeConf {
            capability_args: serde_json::from_str(
                r#"{"mac":"02:00:00:00:00:01","ips":["10.0.0.1"]}"#,
            )
            .unwrap(),
            ..Default::default()
        };
        let out = request_config(&list, &list.plugins[0], None, &rt).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":{"b":2,"y":1},"capabilities":{"ips":false,"mac":true,"portMappings":true},"cniVersion":"1.0.0","name":"net","runtimeConfig":{"mac":"02:00:00:00:00:01"},"type":"p","z":1}"#
        );
        let none = RuntimeConf::default();
        let out = request_config(&list, &list.plugins[0], None, &none).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("runtimeConfig"));
    }

    #[test]
    fn network_name_and_version_info() {
        assert_eq!(crate::skel::validate_network_name("").unwrap_err().code, 7);
        assert_eq!(
            crate::skel::validate_network_name("a/b").unwrap_err().code,
            7
        );
        crate::skel::validate_network_name("my-net_1.x").unwrap();
        assert_eq!(
            decode_version_info(br#"{"cniVersion":"0.2.0"}"#).unwrap(),
            ["0.1.0", "0.2.0"]
        );
        assert!(decode_version_info(br#"{"cniVersion":"0.3.0"}"#).is_err());
        assert_eq!(
            decode_version_info(br#"{"cniVersion":"1.1.0","supportedVersions":["1.0.0"]}"#)
                .unwrap(),
            ["1.0.0"]
        );
    }
}
