//! Results of every spec version, held in one canonical (1.1.0-shaped) model and rendered
//! to or parsed from the JSON shape of any version, with Go's conversion rules:
//! - 1.x <-> 0.3.x/0.4.0: `ips[].version` added/dropped; interface `mtu/socketPath/pciID` dropped going down;
//! - down to 0.1.0/0.2.0: first IPv4 and first IPv6 only, routes split by family (dst and gw only),
//!   interfaces dropped, and no IP at all is `cannot convert: no valid IP addresses`;
//! - `dns` is omitted when empty for 1.x and always present (`{}`) below.

use crate::error::{Error, code};
use crate::gojson;
use crate::version::Version;
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::net::IpAddr;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CniResult {
    pub cni_version: String,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Interface {
    pub name: String,
    pub mac: String,
    pub mtu: u32,
    pub sandbox: String,
    pub socket_path: String,
    pub pci_id: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IpConfig {
    /// Index into `interfaces`.
    pub interface: Option<usize>,
    /// Host address with the subnet's prefix, e.g. `10.1.0.5/16`.
    pub address: IpNetwork,
    pub gateway: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub dst: IpNetwork,
    pub gw: Option<IpAddr>,
    pub mtu: u32,
    pub advmss: u32,
    pub priority: u32,
    pub table: Option<i64>,
    pub scope: Option<i64>,
}

impl Route {
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: 0,
            advmss: 0,
            priority: 0,
            table: None,
            scope: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        *self == Dns::default()
    }
}

/// The three JSON shapes the spec has had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    V020,
    V040,
    V100,
}

fn shape_of(version: &str) -> Result<Shape, Error> {
    match version {
        "" | "0.1.0" | "0.2.0" => Ok(Shape::V020),
        "0.3.0" | "0.3.1" | "0.4.0" => Ok(Shape::V040),
        "1.0.0" | "1.1.0" => Ok(Shape::V100),
        other => {
            // Parse to tell a malformed version from an unknown one.
            Version::parse(other)?;
            Err(Error::new(
                code::INCOMPATIBLE_CNI_VERSION,
                format!("unsupported CNI result version {other:?}"),
            ))
        }
    }
}

fn decode_err(e: impl std::fmt::Display) -> Error {
    Error::decoding(format!("failed to decode result: {e}"))
}

impl CniResult {
    /// Parses a result in the shape its own `cniVersion` names; a result without one is read
    /// at `default_version` (how libcni treats plugin output and `prevResult`).
    pub fn parse(value: &Value, default_version: &str) -> Result<CniResult, Error> {
        let obj = value
            .as_object()
            .ok_or_else(|| decode_err("result is not a JSON object"))?;
        let version = match gojson::map_field(obj, "cniVersion").and_then(Value::as_str) {
            Some(v) if !v.is_empty() => v.to_string(),
            _ => default_version.to_string(),
        };
        let mut r = match shape_of(&version)? {
            Shape::V020 => parse_020(obj)?,
            Shape::V040 | Shape::V100 => parse_ips_form(obj)?,
        };
        r.cni_version = version;
        Ok(r)
    }

    pub fn parse_bytes(bytes: &[u8], default_version: &str) -> Result<CniResult, Error> {
        let v: Value = gojson::from_slice(bytes).map_err(decode_err)?;
        CniResult::parse(&v, default_version)
    }

    /// The result's JSON in the shape of `version`, with `cniVersion` set to it.
    pub fn to_value(&self, version: &str) -> Result<Value, Error> {
        match shape_of(version)? {
            Shape::V020 => self.render_020(version),
            s => Ok(self.render_ips_form(version, s == Shape::V100)),
        }
    }

    /// What a plugin prints: pretty JSON (4 spaces) at the version the config asked for.
    pub fn to_json(&self, version: &str) -> Result<String, Error> {
        Ok(super::to_pretty_json(&self.to_value(version)?))
    }

    /// [`parse`](Self::parse) with the default version typed (skel's `CmdArgs::version`).
    pub fn parse_at(value: &Value, default_version: Version) -> Result<CniResult, Error> {
        CniResult::parse(value, &default_version.to_string())
    }

    /// [`to_value`](Self::to_value) at a typed version.
    pub fn to_value_at(&self, version: Version) -> Result<Value, Error> {
        self.to_value(&version.to_string())
    }

    /// [`to_json`](Self::to_json) at a typed version.
    pub fn to_json_at(&self, version: Version) -> Result<String, Error> {
        self.to_json(&version.to_string())
    }

    /// This result converted to `version` (a round trip through that version's shape, so
    /// anything the shape cannot hold is dropped as Go's converters drop it).
    pub fn convert_to(&self, version: &str) -> Result<CniResult, Error> {
        CniResult::parse(&self.to_value(version)?, version)
    }

    fn render_ips_form(&self, version: &str, v1: bool) -> Value {
        let mut m = Map::new();
        m.insert("cniVersion".into(), json!(version));
        if !self.interfaces.is_empty() {
            let ifs = self.interfaces.iter().map(|i| i.render(v1)).collect();
            m.insert("interfaces".into(), Value::Array(ifs));
        }
        if !self.ips.is_empty() {
            m.insert(
                "ips".into(),
                Value::Array(self.ips.iter().map(|i| i.render(v1)).collect()),
            );
        }
        if !self.routes.is_empty() {
            m.insert(
                "routes".into(),
                Value::Array(self.routes.iter().map(Route::render).collect()),
            );
        }
        if !v1 || !self.dns.is_empty() {
            m.insert("dns".into(), json!(self.dns));
        }
        Value::Object(m)
    }

    fn render_020(&self, version: &str) -> Result<Value, Error> {
        let v4 = self.ips.iter().find(|i| i.address.is_ipv4());
        let v6 = self.ips.iter().find(|i| i.address.is_ipv6());
        if v4.is_none() && v6.is_none() {
            return Err(Error::internal("cannot convert: no valid IP addresses"));
        }
        let family = |ip: &IpConfig| {
            let mut m = Map::new();
            m.insert("ip".into(), json!(ip.address.to_string()));
            if let Some(gw) = ip.gateway {
                m.insert("gateway".into(), json!(gw.to_string()));
            }
            let routes: Vec<Value> = self
                .routes
                .iter()
                .filter(|r| r.dst.is_ipv4() == ip.address.is_ipv4())
                .map(|r| Route::new(r.dst, r.gw).render())
                .collect();
            if !routes.is_empty() {
                m.insert("routes".into(), Value::Array(routes));
            }
            Value::Object(m)
        };
        let mut m = Map::new();
        m.insert("cniVersion".into(), json!(version));
        if let Some(ip) = v4 {
            m.insert("ip4".into(), family(ip));
        }
        if let Some(ip) = v6 {
            m.insert("ip6".into(), family(ip));
        }
        m.insert("dns".into(), json!(self.dns));
        Ok(Value::Object(m))
    }
}

impl Interface {
    fn render(&self, v1: bool) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        if !self.mac.is_empty() {
            m.insert("mac".into(), json!(self.mac));
        }
        if v1 && self.mtu != 0 {
            m.insert("mtu".into(), json!(self.mtu));
        }
        if !self.sandbox.is_empty() {
            m.insert("sandbox".into(), json!(self.sandbox));
        }
        if v1 && !self.socket_path.is_empty() {
            m.insert("socketPath".into(), json!(self.socket_path));
        }
        if v1 && !self.pci_id.is_empty() {
            m.insert("pciID".into(), json!(self.pci_id));
        }
        Value::Object(m)
    }

    fn parse(v: &Value) -> Result<Interface, Error> {
        Ok(Interface {
            name: str_field(v, "name")?,
            mac: str_field(v, "mac")?,
            mtu: u32_field(v, "mtu")?,
            sandbox: str_field(v, "sandbox")?,
            socket_path: str_field(v, "socketPath")?,
            pci_id: str_field(v, "pciID")?,
        })
    }
}

impl IpConfig {
    fn render(&self, v1: bool) -> Value {
        let mut m = Map::new();
        if !v1 {
            m.insert(
                "version".into(),
                json!(if self.address.is_ipv4() { "4" } else { "6" }),
            );
        }
        if let Some(i) = self.interface {
            m.insert("interface".into(), json!(i));
        }
        m.insert("address".into(), json!(self.address.to_string()));
        if let Some(gw) = self.gateway {
            m.insert("gateway".into(), json!(gw.to_string()));
        }
        Value::Object(m)
    }

    fn parse(v: &Value, address_key: &str) -> Result<IpConfig, Error> {
        let interface = match gojson::field(v, "interface") {
            None => None,
            Some(i) => Some(
                i.as_u64()
                    .ok_or_else(|| decode_err("ips[].interface is not an index"))?
                    as usize,
            ),
        };
        Ok(IpConfig {
            interface,
            address: cidr_field(v, address_key)?,
            gateway: ip_field(v, "gateway")?,
        })
    }
}

impl Route {
    fn render(&self) -> Value {
        let mut m = Map::new();
        m.insert("dst".into(), json!(self.dst.to_string()));
        if let Some(gw) = self.gw {
            m.insert("gw".into(), json!(gw.to_string()));
        }
        for (k, v) in [
            ("mtu", self.mtu),
            ("advmss", self.advmss),
            ("priority", self.priority),
        ] {
            if v != 0 {
                m.insert(k.into(), json!(v));
            }
        }
        if let Some(t) = self.table {
            m.insert("table".into(), json!(t));
        }
        if let Some(s) = self.scope {
            m.insert("scope".into(), json!(s));
        }
        Value::Object(m)
    }

    pub fn parse(v: &Value) -> Result<Route, Error> {
        Ok(Route {
            dst: cidr_field(v, "dst")?,
            gw: ip_field(v, "gw")?,
            mtu: u32_field(v, "mtu")?,
            advmss: u32_field(v, "advmss")?,
            priority: u32_field(v, "priority")?,
            table: gojson::field(v, "table").and_then(Value::as_i64),
            scope: gojson::field(v, "scope").and_then(Value::as_i64),
        })
    }
}

fn parse_ips_form(obj: &Map<String, Value>) -> Result<CniResult, Error> {
    let list = |key: &str| -> Result<&[Value], Error> {
        match gojson::map_field(obj, key) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(decode_err(format!("{key} is not a list"))),
        }
    };
    Ok(CniResult {
        cni_version: String::new(),
        interfaces: list("interfaces")?
            .iter()
            .map(Interface::parse)
            .collect::<Result<_, _>>()?,
        ips: list("ips")?
            .iter()
            .map(|v| IpConfig::parse(v, "address"))
            .collect::<Result<_, _>>()?,
        routes: list("routes")?
            .iter()
            .map(Route::parse)
            .collect::<Result<_, _>>()?,
        dns: parse_dns(obj)?,
    })
}

fn parse_020(obj: &Map<String, Value>) -> Result<CniResult, Error> {
    let mut r = CniResult {
        dns: parse_dns(obj)?,
        ..Default::default()
    };
    for key in ["ip4", "ip6"] {
        let Some(fam) = gojson::map_field(obj, key) else {
            continue;
        };
        r.ips.push(IpConfig::parse(fam, "ip")?);
        if let Some(Value::Array(routes)) = gojson::field(fam, "routes") {
            for route in routes {
                r.routes.push(Route::parse(route)?);
            }
        }
    }
    Ok(r)
}

fn parse_dns(obj: &Map<String, Value>) -> Result<Dns, Error> {
    match gojson::map_field(obj, "dns") {
        None => Ok(Dns::default()),
        Some(v) => gojson::from_value(v.clone()).map_err(decode_err),
    }
}

fn str_field(v: &Value, key: &str) -> Result<String, Error> {
    match gojson::field(v, key) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(decode_err(format!("{key} is not a string"))),
    }
}

fn u32_field(v: &Value, key: &str) -> Result<u32, Error> {
    match gojson::field(v, key) {
        None => Ok(0),
        Some(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| decode_err(format!("{key} is not a number"))),
    }
}

fn ip_field(v: &Value, key: &str) -> Result<Option<IpAddr>, Error> {
    match str_field(v, key)?.as_str() {
        "" => Ok(None),
        s => s
            .parse()
            .map(Some)
            .map_err(|_| decode_err(format!("invalid IP address {s:?} in {key}"))),
    }
}

fn cidr_field(v: &Value, key: &str) -> Result<IpNetwork, Error> {
    super::parse_cidr(&str_field(v, key)?).map_err(decode_err)
}

#[cfg(test)]
mod tests;
