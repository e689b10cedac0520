//! The bridge plugin's configuration: the reference's fields, defaults, validation and
//! messages. Everything is checked here, before the plugin touches the node.

use hostnet::firewall::{Attachment, Backend};
use libcni::gojson;
use libcni::invoke::Delegate;
use libcni::skel::CmdArgs;
use libcni::types::{Dns, NetConf as CommonConf};
use libcni::{Error, args};
use serde::Deserialize;
use serde_json::{Map, Value};

pub const DEFAULT_BRIDGE: &str = "cni0";

#[derive(Debug, Clone, PartialEq)]
pub struct BridgeConf {
    pub common: CommonConf,
    pub bridge: String,
    pub is_gateway: bool,
    pub is_default_gateway: bool,
    pub force_address: bool,
    pub ip_masq: bool,
    /// `None`: pick the backend the node supports (iptables unless only nftables works).
    pub ip_masq_backend: Option<Backend>,
    pub mtu: Option<u32>,
    pub hairpin_mode: bool,
    pub promisc_mode: bool,
    pub vlan: u16,
    /// Sorted, deduplicated trunk VLAN IDs.
    pub vlan_trunk: Vec<u16>,
    pub preserve_default_vlan: bool,
    pub enable_dad: bool,
    pub macspoofchk: bool,
    pub disable_container_interface: bool,
    pub port_isolation: bool,
    /// Container MAC from runtimeConfig.mac > args.cni.mac > CNI_ARGS MAC.
    pub mac: Option<[u8; 6]>,
}

/// The raw JSON form; validated into [`BridgeConf`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    bridge: Option<String>,
    #[serde(default)]
    is_gateway: bool,
    #[serde(default)]
    is_default_gateway: bool,
    #[serde(default)]
    force_address: bool,
    #[serde(default)]
    ip_masq: bool,
    #[serde(default)]
    ip_masq_backend: Option<String>,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    hairpin_mode: bool,
    #[serde(default)]
    promisc_mode: bool,
    #[serde(default)]
    vlan: i64,
    #[serde(default)]
    vlan_trunk: Option<Vec<VlanTrunk>>,
    #[serde(default)]
    preserve_default_vlan: bool,
    #[serde(default, rename = "enabledad")]
    enable_dad: bool,
    #[serde(default, rename = "macspoofchk")]
    macspoofchk: bool,
    #[serde(default)]
    disable_container_interface: bool,
    #[serde(default)]
    port_isolation: bool,
    #[serde(default)]
    args: Option<RawArgs>,
    #[serde(default)]
    runtime_config: Option<RawMac>,
}

/// `args.cni` and `runtimeConfig` as the reference types them (a wrong type is refused).
#[derive(Deserialize)]
struct RawArgs {
    #[serde(default)]
    cni: Option<RawMac>,
}

#[derive(Deserialize)]
struct RawMac {
    #[serde(default)]
    mac: Option<String>,
}

#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct VlanTrunk {
    #[serde(rename = "minID")]
    min_id: Option<i64>,
    #[serde(rename = "maxID")]
    max_id: Option<i64>,
    id: Option<i64>,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::invalid_config(msg)
}

/// How mistakes in the config are met. ADD and CHECK refuse every one. DEL and GC must
/// tear down what an earlier ADD made, maybe under an earlier, valid version of the
/// file: they refuse only mistakes in what they need (the network name, the IPAM type,
/// the bridge name) and note the rest, reading the field as absent.
struct Mistakes {
    tolerate: bool,
    ignored: Vec<Error>,
}

impl Mistakes {
    fn tolerate<T>(&mut self, checked: Result<T, Error>, absent: T) -> Result<T, Error> {
        match checked {
            Err(e) if self.tolerate => {
                self.ignored.push(e);
                Ok(absent)
            }
            other => other,
        }
    }
}

impl BridgeConf {
    /// Parses and validates stdin plus CNI_ARGS (ADD, CHECK, STATUS).
    pub fn load(stdin: &[u8], cni_args: &str) -> Result<BridgeConf, Error> {
        let mut strict = Mistakes {
            tolerate: false,
            ignored: Vec::new(),
        };
        BridgeConf::read(stdin, cni_args, &mut strict)
    }

    /// For DEL and GC (`verb`): like [`BridgeConf::load`], but a mistake in a field
    /// teardown does not need is said on stderr and the field read as absent.
    pub fn load_for_teardown(
        stdin: &[u8],
        cni_args: &str,
        verb: &str,
    ) -> Result<BridgeConf, Error> {
        let (conf, ignored) = BridgeConf::read_tolerant(stdin, cni_args)?;
        for e in ignored {
            libcni::log!(
                "bridge: {verb}: ignoring a config mistake {verb} does not depend on: {}",
                e.msg
            );
        }
        Ok(conf)
    }

    /// The config and the mistakes it tolerated.
    pub fn read_tolerant(stdin: &[u8], cni_args: &str) -> Result<(BridgeConf, Vec<Error>), Error> {
        let mut lenient = Mistakes {
            tolerate: true,
            ignored: Vec::new(),
        };
        let conf = BridgeConf::read(stdin, cni_args, &mut lenient)?;
        Ok((conf, lenient.ignored))
    }

    fn read(stdin: &[u8], cni_args: &str, m: &mut Mistakes) -> Result<BridgeConf, Error> {
        // One parse of stdin for the common fields and ours (on a sized thread when deep).
        let (common, raw) = gojson::with_document(stdin, |doc| {
            let common = CommonConf::from_document(doc.clone(), stdin)?;
            Ok::<_, Error>((common, decode_raw(doc, m)?))
        })
        .map_err(|e| Error::decoding(format!("failed to load netconf: {e}")))??;
        let vlan = m.tolerate(
            if (0..=4094).contains(&raw.vlan) {
                Ok(raw.vlan as u16)
            } else {
                Err(invalid(format!(
                    "invalid VLAN ID {} (must be between 0 and 4094)",
                    raw.vlan
                )))
            },
            0,
        )?;
        let mtu = m.tolerate(
            match raw.mtu {
                0 => Ok(None),
                m if (68..=65535).contains(&m) => Ok(Some(m as u32)),
                m => Err(invalid(format!(
                    "invalid mtu {m} (must be between 68 and 65535)"
                ))),
            },
            None,
        )?;
        let ip_masq_backend = m.tolerate(
            // The message is the Go plugin's, made by the firewall's error type.
            Backend::from_config(raw.ip_masq_backend.as_deref())
                .map_err(|e| invalid(e.to_string())),
            None,
        )?;
        let conf = BridgeConf {
            mac: m.tolerate(container_mac(&raw, cni_args), None)?,
            bridge: match raw.bridge.as_deref() {
                None => DEFAULT_BRIDGE.to_string(),
                // The reference's ADD fails creating a link without a name; its DEL succeeds.
                Some("") => m.tolerate(
                    Err(invalid("invalid bridge name \"\": interface name is empty")),
                    DEFAULT_BRIDGE.to_string(),
                )?,
                Some(name) => name.to_string(),
            },
            is_gateway: raw.is_gateway || raw.is_default_gateway,
            is_default_gateway: raw.is_default_gateway,
            force_address: raw.force_address,
            ip_masq: raw.ip_masq,
            ip_masq_backend,
            mtu,
            hairpin_mode: raw.hairpin_mode,
            promisc_mode: raw.promisc_mode,
            vlan,
            vlan_trunk: m.tolerate(collect_vlan_trunk(raw.vlan_trunk.as_deref()), vec![])?,
            preserve_default_vlan: raw.preserve_default_vlan,
            enable_dad: raw.enable_dad,
            macspoofchk: raw.macspoofchk,
            disable_container_interface: raw.disable_container_interface,
            port_isolation: raw.port_isolation,
            common,
        };
        libcni::skel::validate_ifname(&conf.bridge)
            .map_err(|e| invalid(format!("invalid bridge name {:?}: {}", conf.bridge, e.msg)))?;
        if conf.disable_container_interface && conf.is_layer3() {
            m.tolerate(
                Err(invalid(
                    "cannot use IPAM when DisableContainerInterface flag is set",
                )),
                (),
            )?;
        }
        if conf.hairpin_mode && conf.promisc_mode {
            m.tolerate(
                Err(invalid(
                    "cannot set hairpin mode and promiscuous mode at the same time",
                )),
                (),
            )?;
        }
        Ok(conf)
    }

    /// L3 mode: an IPAM plugin hands out addresses. Without `ipam.type` the bridge is pure L2.
    pub fn is_layer3(&self) -> bool {
        !self.common.ipam_type().is_empty()
    }

    pub fn vlan_filtering(&self) -> bool {
        self.vlan != 0 || !self.vlan_trunk.is_empty()
    }

    pub fn name(&self) -> &str {
        &self.common.name
    }

    /// The IPAM plugin, run with this call's config and CNI_PATH.
    pub fn ipam<'a>(&'a self, args: &'a CmdArgs) -> Delegate<'a> {
        Delegate {
            plugin_type: self.common.ipam_type(),
            cni_path: &args.path,
            netconf: &args.stdin_data,
        }
    }

    /// The key of this attachment's masquerade rules.
    pub fn attachment<'a>(&'a self, args: &'a CmdArgs) -> Attachment<'a> {
        Attachment {
            network: self.name(),
            container_id: &args.container_id,
            ifname: &args.ifname,
        }
    }

    /// The config's own `dns`, when any field is set (it then replaces the IPAM's).
    pub fn dns_override(&self) -> Option<&Dns> {
        self.common.dns.as_ref().filter(|d| !d.is_empty())
    }
}

/// The plugin's own fields. Tolerating mistakes, a field of the wrong type is dropped
/// (and noted) instead of failing the whole document, except `bridge`, which teardown
/// needs; a dropped `ipMasq` or `macspoofchk` reads as on, so their (name-addressed,
/// this attachment's only) teardown runs rather than leaking what an earlier ADD made.
fn decode_raw(doc: Value, m: &mut Mistakes) -> Result<Raw, Error> {
    let decode_err = |e: gojson::Error| invalid(format!("failed to load netconf: {e}"));
    if !m.tolerate {
        return gojson::from_value::<Raw>(doc).map_err(decode_err);
    }
    // Kept for the field-by-field pass below, needed only when the whole fails.
    let whole = match gojson::from_value::<Raw>(doc.clone()) {
        Ok(raw) => return Ok(raw),
        Err(e) => decode_err(e),
    };
    let Ok(fields) = gojson::from_value::<Map<String, Value>>(doc) else {
        return Err(whole);
    };
    let mut kept = Map::new();
    let mut dropped = Vec::new();
    for (key, value) in fields {
        let alone = Value::Object(Map::from_iter([(key.clone(), value.clone())]));
        match gojson::from_value::<Raw>(alone) {
            Ok(_) => {
                kept.insert(key, value);
            }
            Err(e) if key.eq_ignore_ascii_case("bridge") => return Err(decode_err(e)),
            Err(e) => {
                m.ignored.push(decode_err(e));
                dropped.push(key);
            }
        }
    }
    let mut raw: Raw = gojson::from_value(Value::Object(kept)).map_err(decode_err)?;
    let was_dropped = |name: &str| dropped.iter().any(|k| k.eq_ignore_ascii_case(name));
    raw.ip_masq |= was_dropped("ipMasq");
    raw.macspoofchk |= was_dropped("macspoofchk");
    Ok(raw)
}

fn container_mac(raw: &Raw, cni_args: &str) -> Result<Option<[u8; 6]>, Error> {
    let from_runtime = raw
        .runtime_config
        .as_ref()
        .and_then(|r| r.mac.as_deref())
        .filter(|s| !s.is_empty());
    let from_args = raw
        .args
        .as_ref()
        .and_then(|a| a.cni.as_ref()?.mac.as_deref())
        .filter(|s| !s.is_empty());
    let env_args = args::load(cni_args, &["MAC"])?;
    let from_env = args::get(&env_args, "MAC").filter(|s| !s.is_empty());
    let (source, text) = match (from_runtime, from_args, from_env) {
        (Some(m), _, _) => ("runtimeConfig.mac", m),
        (None, Some(m), _) => ("args.cni.mac", m),
        (None, None, Some(m)) => ("CNI_ARGS MAC", m),
        (None, None, None) => return Ok(None),
    };
    parse_mac(text)
        .map(Some)
        .ok_or_else(|| invalid(format!("invalid MAC address {text:?} in {source}")))
}

/// A 48-bit MAC in `aa:bb:cc:dd:ee:ff` or `aa-bb-...` form.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(parts) {
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    Some(mac)
}

pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A link's MAC as results spell it; empty when the link has none.
pub fn mac_string(mac: Option<[u8; 6]>) -> String {
    mac.map(|m| format_mac(&m)).unwrap_or_default()
}

/// Go `collectVlanTrunk`: ranges and single IDs, each 1..4094, deduplicated and sorted.
fn collect_vlan_trunk(trunk: Option<&[VlanTrunk]>) -> Result<Vec<u16>, Error> {
    let valid = |v: i64| (1..=4094).contains(&v);
    let mut vids = std::collections::BTreeSet::new();
    for item in trunk.unwrap_or_default() {
        match (item.min_id, item.max_id) {
            (Some(min), Some(max)) => {
                if !valid(min) {
                    return Err(invalid("incorrect trunk minID parameter"));
                }
                if !valid(max) {
                    return Err(invalid("incorrect trunk maxID parameter"));
                }
                if max < min {
                    return Err(invalid("minID is greater than maxID in trunk parameter"));
                }
                vids.extend((min..=max).map(|v| v as u16));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "minID and maxID should be configured simultaneously, minID is missing",
                ));
            }
            (Some(_), None) => {
                return Err(invalid(
                    "minID and maxID should be configured simultaneously, maxID is missing",
                ));
            }
            (None, None) => {}
        }
        if let Some(id) = item.id {
            if !valid(id) {
                return Err(invalid("incorrect trunk id parameter"));
            }
            vids.insert(id as u16);
        }
    }
    Ok(vids.into_iter().collect())
}

#[cfg(test)]
mod tests;
