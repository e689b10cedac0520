//! One range of a range set: a subnet, the inclusive slice of it we hand out, and its
//! gateway (never handed out). Defaults and error texts follow the reference.

use crate::ip;
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;

/// A range as written in the config (all fields still text).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RawRange {
    #[serde(default)]
    pub subnet: Option<String>,
    #[serde(rename = "rangeStart", default)]
    pub range_start: Option<String>,
    #[serde(rename = "rangeEnd", default)]
    pub range_end: Option<String>,
    #[serde(default)]
    pub gateway: Option<String>,
}

/// A validated range with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// Network address and prefix (no host bits).
    pub subnet: IpNetwork,
    pub start: IpAddr,
    pub end: IpAddr,
    pub gateway: IpAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("IP <nil> not v4 nor v6")]
    MissingSubnet,
    #[error("invalid CIDR address: {0}")]
    BadSubnet(String),
    #[error("invalid IP address: {0}")]
    BadIp(String),
    #[error("Network {0} too small to allocate from")]
    TooSmall(String),
    #[error("IPNet IP and Mask version mismatch")]
    FamilyMismatch,
    #[error(
        "Network has host bits set. For a subnet mask of length {prefix} the network address is {network}"
    )]
    HostBits { prefix: u8, network: IpAddr },
    #[error("RangeStart {0} not in network {1}")]
    StartOutside(IpAddr, String),
    #[error("RangeEnd {0} not in network {1}")]
    EndOutside(IpAddr, String),
}

/// An optional IP field: absent, null and "" all mean "use the default" (Go's net.IP).
fn opt_ip(v: &Option<String>) -> Result<Option<IpAddr>, RangeError> {
    match v.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse::<IpAddr>()
            .map(|a| Some(ip::canonical(a)))
            .map_err(|_| RangeError::BadIp(s.to_string())),
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// Go's `Range.Contains` while the range is being built: bounds that are still unset are
/// not checked.
fn within(subnet: IpNetwork, start: Option<IpAddr>, end: Option<IpAddr>, a: IpAddr) -> bool {
    let n = ip::to_u128(a);
    same_family(a, subnet.ip())
        && subnet.contains(a)
        && start.is_none_or(|s| !same_family(s, a) || n >= ip::to_u128(s))
        && end.is_none_or(|e| !same_family(e, a) || n <= ip::to_u128(e))
}

impl RawRange {
    pub fn canonicalize(&self) -> Result<Range, RangeError> {
        let text = match self.subnet.as_deref() {
            None | Some("") => return Err(RangeError::MissingSubnet),
            Some(s) => s,
        };
        let given =
            libcni::types::parse_cidr(text).map_err(|_| RangeError::BadSubnet(text.to_string()))?;
        let addr = ip::canonical(given.ip());
        let prefix = given.prefix();
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        // A v4-mapped v6 subnet has a v6 prefix for a v4 address.
        if given.ip().is_ipv6() && addr.is_ipv4() {
            return Err(RangeError::FamilyMismatch);
        }
        let shown = format!("{addr}/{prefix}");
        if prefix > bits - 2 {
            return Err(RangeError::TooSmall(shown));
        }
        let subnet = IpNetwork::new(given.network(), prefix)
            .map_err(|_| RangeError::BadSubnet(text.to_string()))?;
        if subnet.ip() != addr {
            return Err(RangeError::HostBits {
                prefix,
                network: subnet.ip(),
            });
        }
        let gateway = opt_ip(&self.gateway)?.unwrap_or_else(|| ip::next(addr));
        let raw_end = opt_ip(&self.range_end)?;
        let start = match opt_ip(&self.range_start)? {
            Some(s) if !within(subnet, None, raw_end, s) => {
                return Err(RangeError::StartOutside(s, shown));
            }
            Some(s) => s,
            None => ip::next(addr),
        };
        let end = match raw_end {
            Some(e) if !within(subnet, Some(start), None, e) => {
                return Err(RangeError::EndOutside(e, shown));
            }
            Some(e) => e,
            // An explicit IPv4 start at the broadcast address lies past the default end.
            // The reference accepts it and its walk then leaves the subnet; we refuse it
            // as the start-after-end it is.
            None if ip::to_u128(start) > ip::to_u128(last_ip(subnet)) => {
                return Err(RangeError::StartOutside(start, shown));
            }
            None => last_ip(subnet),
        };
        Ok(Range {
            subnet,
            start,
            end,
            gateway,
        })
    }
}

/// The last address of a subnet; for IPv4 the broadcast address is excluded.
fn last_ip(subnet: IpNetwork) -> IpAddr {
    let last = subnet.broadcast();
    match last {
        IpAddr::V4(_) => ip::from_u128(ip::to_u128(last) - 1, last),
        IpAddr::V6(_) => last,
    }
}

impl Range {
    /// Whether `a` lies in this range (same family, in the subnet, within start..=end).
    pub fn contains(&self, a: IpAddr) -> bool {
        within(self.subnet, Some(self.start), Some(self.end), a)
    }

    pub fn overlaps(&self, other: &Range) -> bool {
        same_family(self.start, other.start)
            && (self.contains(other.start)
                || self.contains(other.end)
                || other.contains(self.start)
                || other.contains(self.end))
    }

    /// How many addresses this range can hand out (the gateway is never handed out).
    pub fn capacity(&self) -> u128 {
        let (s, e) = (ip::to_u128(self.start), ip::to_u128(self.end));
        if e < s {
            return 0;
        }
        let span = (e - s).saturating_add(1);
        span - u128::from(self.contains(self.gateway))
    }

    pub fn is_ipv4(&self) -> bool {
        self.start.is_ipv4()
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

#[cfg(test)]
mod tests;
