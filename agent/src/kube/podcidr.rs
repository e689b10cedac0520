//! A Node object's pod ranges: `spec.podCIDRs`, or `spec.podCIDR` when only that is set
//! (the rule is `nodes::Spec`'s), each checked as a node's pod range.

use ipnetwork::IpNetwork;

/// A node's pod ranges: each a network address with a prefix length a node can use, at
/// most one per family. The error names `field` and the value.
pub fn parse_ranges(field: &str, cidrs: &[String]) -> Result<Vec<IpNetwork>, String> {
    let nets = cidrs
        .iter()
        .filter(|c| !c.is_empty())
        .map(|c| parse_one(field, c))
        .collect::<Result<Vec<_>, _>>()?;
    match nets.as_slice() {
        [] | [_] => Ok(nets),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(nets),
        [_, _] => Err(format!(
            "{field} {cidrs:?}: two ranges of the same family (at most one IPv4 and one IPv6)"
        )),
        _ => Err(format!("{field} {cidrs:?}: more than two ranges")),
    }
}

fn parse_one(field: &str, cidr: &str) -> Result<IpNetwork, String> {
    let net = match parse_network(cidr) {
        Ok(net) if net.prefix() != 0 => net,
        Ok(_) | Err(NotANetwork::HostBits { prefix: 0 }) => {
            return Err(format!(
                "{field} {cidr:?} is a default route, not a node's pod range"
            ));
        }
        Err(why) => return Err(format!("{field} {cidr:?} {why}")),
    };
    // host-local needs a gateway and at least one address beside network/broadcast.
    let max = if net.is_ipv4() { 30 } else { 126 };
    if net.prefix() > max {
        return Err(format!(
            "{field} {cidr:?} is too small for pods (prefix longer than /{max})"
        ));
    }
    Ok(net)
}

/// Why a value is not a network address with its prefix length; shown after the value.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum NotANetwork {
    #[error("is not a CIDR: no prefix length")]
    NoPrefix,
    #[error("is not a CIDR: not an address, '/' and a prefix length of its family")]
    Syntax,
    #[error("is not a network address (host bits set)")]
    HostBits { prefix: u8 },
}

/// A network address with its prefix length (`10.244.0.0/16`), read as Go's
/// `net.ParseCIDR` reads it (libcni's `parse_cidr`: a bare address, a netmask or a signed
/// prefix is not one), as the API server validates `podCIDRs` and as `--cluster-cidr` is
/// given.
pub fn parse_network(cidr: &str) -> Result<IpNetwork, NotANetwork> {
    if !cidr.contains('/') {
        return Err(NotANetwork::NoPrefix);
    }
    let net = libcni::types::parse_cidr(cidr).map_err(|_| NotANetwork::Syntax)?;
    if net.ip() != net.network() {
        return Err(NotANetwork::HostBits {
            prefix: net.prefix(),
        });
    }
    Ok(net)
}

/// `10.244.1.0/24,fd00:1::/64`
pub fn show(cidrs: &[IpNetwork]) -> String {
    let cidrs: Vec<String> = cidrs.iter().map(|c| c.to_string()).collect();
    cidrs.join(",")
}
