//! The portmap plugin's configuration: the reference's (v1.9) fields, defaults and
//! messages, and `runtimeConfig.portMappings` validated before the node is touched. Keys
//! are matched as Go matches them (`libcni::gojson`: `"HostPort"` fills `hostPort`).

use std::net::IpAddr;

use hostnet::firewall::Backend;
use hostnet::firewall::portmap::{MarkChain, PortMapping, Protocol};
use hostnet::kernel::PortMapper;
use ipnetwork::IpNetwork;
use libcni::Error;
use libcni::gojson;
use libcni::types::{CniResult, NetConf};
use libcni::version::Version;
use serde::Deserialize;

/// Kubernetes uses bits 14 and 15, Calico 20-31.
pub const DEFAULT_MARK_BIT: u8 = 13;

#[derive(Debug, Clone, PartialEq)]
pub struct PortmapConf {
    pub common: NetConf,
    /// `None`: automatic (iptables, unless only nftables works here).
    pub backend: Option<Backend>,
    pub snat: bool,
    pub masq_all: bool,
    pub mark: MarkChain,
    pub conditions_v4: Vec<String>,
    pub conditions_v6: Vec<String>,
    pub mappings: Vec<PortMapping>,
    /// Options only one backend understands, named as in the config.
    backend_options: Vec<(Backend, &'static str)>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    snat: Option<bool>,
    #[serde(default, rename = "conditionsV4")]
    conditions_v4: Option<Vec<String>>,
    #[serde(default, rename = "conditionsV6")]
    conditions_v6: Option<Vec<String>>,
    #[serde(default)]
    masq_all: bool,
    #[serde(default)]
    mark_masq_bit: Option<i64>,
    #[serde(default)]
    external_set_mark_chain: Option<String>,
    #[serde(default)]
    runtime_config: Option<RawRuntime>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRuntime {
    #[serde(default)]
    port_mappings: Option<Vec<RawMapping>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMapping {
    #[serde(default)]
    host_port: i64,
    #[serde(default)]
    container_port: i64,
    #[serde(default)]
    protocol: String,
    #[serde(default, rename = "hostIP")]
    host_ip: String,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::invalid_config(msg)
}

impl PortmapConf {
    /// Parses and validates stdin. Every mistake is refused (code 7, naming the field).
    pub fn load(stdin: &[u8]) -> Result<PortmapConf, Error> {
        let (common, raw) = gojson::with_document(stdin, |doc| {
            let common = NetConf::from_document(doc.clone(), stdin)?;
            let raw = gojson::from_value::<Raw>(doc)
                .map_err(|e| invalid(format!("failed to parse network configuration: {e}")))?;
            Ok::<_, Error>((common, raw))
        })
        .map_err(|e| Error::decoding(format!("failed to load netconf: {e}")))??;
        let backend = match raw.backend.as_deref() {
            None => None,
            Some("iptables") => Some(Backend::IpTables),
            Some("nftables") => Some(Backend::NfTables),
            Some(other) => {
                return Err(invalid(format!(
                    "unrecognized backend {}",
                    sysproc::goquote::quote(other)
                )));
            }
        };
        let mark = match (raw.mark_masq_bit, raw.external_set_mark_chain.clone()) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "Cannot specify externalSetMarkChain and markMasqBit",
                ));
            }
            (_, Some(chain)) => MarkChain::External(chain),
            (bit, None) => match bit.unwrap_or(DEFAULT_MARK_BIT.into()) {
                bit @ 0..=31 => MarkChain::Own { bit: bit as u8 },
                _ => return Err(invalid("MasqMarkBit must be between 0 and 31")),
            },
        };
        let mut backend_options = Vec::new();
        if raw.external_set_mark_chain.is_some() {
            backend_options.push((Backend::IpTables, "externalSetMarkChain"));
        }
        for (name, conditions) in [
            ("conditionsV4", &raw.conditions_v4),
            ("conditionsV6", &raw.conditions_v6),
        ] {
            if let Some(b) = backend_of_conditions(conditions.as_deref().unwrap_or_default()) {
                backend_options.push((b, name));
            }
        }
        let raw_mappings = raw.runtime_config.and_then(|r| r.port_mappings);
        let mappings = (raw_mappings.unwrap_or_default().iter().enumerate())
            .map(|(i, m)| mapping(i, m))
            .collect::<Result<_, _>>()?;
        let conf = PortmapConf {
            common,
            backend,
            snat: raw.snat.unwrap_or(true),
            masq_all: raw.masq_all,
            mark,
            conditions_v4: raw.conditions_v4.unwrap_or_default(),
            conditions_v6: raw.conditions_v6.unwrap_or_default(),
            mappings,
            backend_options,
        };
        if let Some(b) = conf.backend {
            conf.options_fit(b)?;
        }
        Ok(conf)
    }

    /// The backend to use: the configured one; else, when the config has options of one
    /// backend only, the automatic choice probed now (refused if they do not fit it, as
    /// Go's `validateBackend`); else `None`: iptables first, nftables if iptables turns out
    /// unusable (no probe on the common path).
    pub fn backend(&self, k: &impl PortMapper) -> Result<Option<Backend>, Error> {
        if self.backend.is_some() || self.backend_options.is_empty() {
            return Ok(self.backend);
        }
        let chosen = k.automatic_backend();
        self.options_fit(chosen)?;
        Ok(Some(chosen))
    }

    fn options_fit(&self, backend: Backend) -> Result<(), Error> {
        let wrong: Vec<&str> = (self.backend_options.iter())
            .filter(|(b, _)| *b != backend)
            .map(|(_, name)| *name)
            .collect();
        match wrong.first() {
            None => Ok(()),
            Some(_) => {
                let other = match backend {
                    Backend::IpTables => Backend::NfTables,
                    Backend::NfTables => Backend::IpTables,
                };
                Err(invalid(format!(
                    "{} backend was requested but configuration contains {}-specific options [{}]",
                    backend.as_str(),
                    other.as_str(),
                    wrong.join(" ")
                )))
            }
        }
    }

    /// The container's addresses the mappings lead to, at most one per family, chosen as
    /// the reference chooses: the first of each family in prevResult, skipping addresses
    /// of interfaces that are not `ifname` in the sandbox.
    pub fn container_ips(&self, version: Version, ifname: &str) -> Result<Vec<IpNetwork>, Error> {
        let Some(prev) = self.common.prev_result.as_ref() else {
            return Ok(Vec::new());
        };
        let prev = CniResult::parse_at(prev, version)
            .map_err(|e| Error::decoding(format!("could not parse prevResult: {}", e.msg)))?;
        let mut chosen: Vec<IpNetwork> = Vec::new();
        for ip in &prev.ips {
            if chosen.iter().any(|c| c.is_ipv4() == ip.address.is_ipv4()) {
                continue;
            }
            let elsewhere = ip
                .interface
                .and_then(|i| prev.interfaces.get(i))
                .is_some_and(|i| i.name != ifname || i.sandbox.is_empty());
            if !elsewhere {
                chosen.push(ip.address);
            }
        }
        Ok(chosen)
    }
}

/// `detectBackendOfConditions`: iptables arguments start with `-`, nft expressions never.
fn backend_of_conditions(conditions: &[String]) -> Option<Backend> {
    match conditions.first().map(String::as_str) {
        None | Some("") => None,
        Some(first) if first.starts_with('-') => Some(Backend::IpTables),
        Some(_) => Some(Backend::NfTables),
    }
}

fn port(value: i64, what: &str, i: usize, field: &str) -> Result<u16, Error> {
    match u16::try_from(value) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(invalid(format!(
            "Invalid {what} port number: {value} (runtimeConfig.portMappings[{i}].{field} \
             must be between 1 and 65535)"
        ))),
    }
}

fn mapping(i: usize, m: &RawMapping) -> Result<PortMapping, Error> {
    let container_port = port(m.container_port, "container", i, "containerPort")?;
    let host_port = port(m.host_port, "host", i, "hostPort")?;
    let protocol = Protocol::parse(&m.protocol).ok_or_else(|| {
        invalid(format!(
            "unknown protocol {:?} in runtimeConfig.portMappings[{i}].protocol \
             (must be tcp, udp or sctp)",
            m.protocol
        ))
    })?;
    let host_ip = match m.host_ip.as_str() {
        "" => None,
        s => {
            let ip: IpAddr = s.parse().map_err(|_| {
                invalid(format!(
                    "invalid runtimeConfig.portMappings[{i}].hostIP {s:?}: not an IP address"
                ))
            })?;
            // Go reads an IPv4-mapped IPv6 address as IPv4.
            Some(match ip {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                v4 => v4,
            })
        }
    };
    Ok(PortMapping {
        host_port,
        container_port,
        protocol,
        host_ip,
    })
}

#[cfg(test)]
mod tests;
