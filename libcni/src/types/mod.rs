//! Wire types: network configuration and results of every spec version.

mod config;
mod result;

pub use config::{GcAttachment, IpamConf, NetConf};
pub use result::{CniResult, Dns, Interface, IpConfig, Route};

use serde::Serialize;

/// JSON pretty-printed with four spaces, as Go's `json.MarshalIndent(v, "", "    ")`.
pub fn to_pretty_json<T: Serialize + ?Sized>(v: &T) -> String {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    // Serializing plain data into a Vec cannot fail.
    v.serialize(&mut ser).expect("serialize to memory");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Parses a CIDR the way Go's `net.ParseCIDR` does: a `/` with a valid prefix is required
/// (ipnetwork alone would accept a bare IP as /32). Host bits are kept.
pub fn parse_cidr(s: &str) -> Result<ipnetwork::IpNetwork, String> {
    let (ip, prefix) = s
        .split_once('/')
        .ok_or_else(|| format!("invalid CIDR address: {s}"))?;
    let ip: std::net::IpAddr = ip
        .parse()
        .map_err(|_| format!("invalid CIDR address: {s}"))?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| {
            prefix.bytes().all(|b| b.is_ascii_digit()) && *p <= if ip.is_ipv4() { 32 } else { 128 }
        })
        .ok_or_else(|| format!("invalid CIDR address: {s}"))?;
    ipnetwork::IpNetwork::new(ip, prefix).map_err(|_| format!("invalid CIDR address: {s}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parsing_is_strict() {
        assert_eq!(
            parse_cidr("10.1.2.3/24").unwrap().to_string(),
            "10.1.2.3/24"
        );
        assert_eq!(
            parse_cidr("2001:db8::5/64").unwrap().to_string(),
            "2001:db8::5/64"
        );
        for bad in [
            "10.1.2.3",
            "10.1.2.3/33",
            "10.1.2.3/",
            "10.1.2.3/+4",
            "x/24",
            "10.1.2.3/255.255.255.0",
            "::1/129",
        ] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
    }
}
