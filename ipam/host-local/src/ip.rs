//! Address arithmetic shared by ranges and the allocator: both families as integers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address as an integer (IPv4 in the low 32 bits).
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4) as u128,
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Back from [`to_u128`], in the family of `like`.
pub fn from_u128(v: u128, like: IpAddr) -> IpAddr {
    match like {
        // Truncation is intended: IPv4 arithmetic wraps at 32 bits like Go's NextIP.
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(v as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

/// The next address, wrapping at the end of the family.
pub fn next(ip: IpAddr) -> IpAddr {
    from_u128(to_u128(ip).wrapping_add(1), ip)
}

/// IPv4-mapped IPv6 becomes IPv4, as Go's `To4()` canonicalisation does.
pub fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// `ip` or `ip/prefix` (requested IPs may carry a prefix, which is dropped). With a `/`
/// it is a CIDR as Go's `net.ParseCIDR` reads it, like the reference's `ip.ParseIP`.
pub fn parse_maybe_prefixed(s: &str) -> Option<IpAddr> {
    let addr = if s.contains('/') {
        libcni::types::parse_cidr(s).ok()?.ip()
    } else {
        s.parse().ok()?
    };
    Some(canonical(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_and_parsing() {
        let ip: IpAddr = "10.0.0.255".parse().unwrap();
        assert_eq!(next(ip).to_string(), "10.0.1.0");
        assert_eq!(
            next("255.255.255.255".parse().unwrap()).to_string(),
            "0.0.0.0"
        );
        assert_eq!(
            next("2001:db8::ffff".parse().unwrap()).to_string(),
            "2001:db8::1:0"
        );
        assert_eq!(
            parse_maybe_prefixed("10.1.2.11/24").unwrap().to_string(),
            "10.1.2.11"
        );
        assert_eq!(
            parse_maybe_prefixed("::ffff:10.1.2.3").unwrap().to_string(),
            "10.1.2.3"
        );
        assert_eq!(
            parse_maybe_prefixed("2001:db8::5/64").unwrap().to_string(),
            "2001:db8::5"
        );
        assert!(parse_maybe_prefixed("10.1.2.3/33").is_none());
        // ParseCIDR takes digits only
        assert!(parse_maybe_prefixed("10.1.2.3/+4").is_none());
        assert!(parse_maybe_prefixed("10.1.2").is_none());
        assert!(parse_maybe_prefixed("").is_none());
    }
}
