//! What the bridge accepts from its IPAM plugin, checked before anything is configured from
//! it: any IPAM plugin may answer anything, and a bad answer must come back as an error
//! naming the field (after rollback), never reach the kernel half-done or a panic.
//! Code 999, as the reference, which fails on the same answers later (in the kernel).

use crate::error::{BridgeError, IpOrNet, Unusable};
use ipnetwork::IpNetwork;
use libcni::types::CniResult;
use std::net::IpAddr;

/// Refuses what no container can use: no IP, an address with prefix length 0 (every
/// address on-link; with isGateway a `/0` gateway route on the host bridge) or one that is
/// not unicast, a gateway of another family than its address or route destination. An IPv4
/// gateway spelled as an IPv4-mapped IPv6 address is taken as the IPv4 address (Go's
/// `net.IP` makes no difference).
pub fn check(result: &mut CniResult) -> Result<(), BridgeError> {
    if result.ips.is_empty() {
        return Err(BridgeError::MissingIpConfig);
    }
    for (i, ip) in result.ips.iter_mut().enumerate() {
        let field = |name: &str| format!("ips[{i}].{name}");
        let address = IpOrNet::Net(ip.address);
        if let Some(why) = unusable(ip.address.ip()) {
            return Err(bad(field("address"), address, why));
        }
        if ip.address.prefix() == 0 {
            return Err(bad(field("address"), address, Unusable::PrefixZero));
        }
        if let Some(gw) = &mut ip.gateway {
            *gw = same_family(*gw, &ip.address).ok_or_else(|| {
                let why = Unusable::FamilyOf(ip.address);
                bad(field("gateway"), IpOrNet::Ip(*gw), why)
            })?;
            if let Some(why) = unusable(*gw) {
                return Err(bad(field("gateway"), IpOrNet::Ip(*gw), why));
            }
        }
    }
    for (i, route) in result.routes.iter_mut().enumerate() {
        if let Some(gw) = &mut route.gw {
            *gw = same_family(*gw, &route.dst).ok_or_else(|| {
                let why = Unusable::FamilyOfRoute {
                    index: i,
                    dst: route.dst,
                };
                bad(format!("routes[{i}].gw"), IpOrNet::Ip(*gw), why)
            })?;
        }
    }
    Ok(())
}

fn bad(field: String, value: IpOrNet, why: Unusable) -> BridgeError {
    BridgeError::InvalidIpamResult { field, value, why }
}

/// `ip` in the family of `net`, if it is (an IPv4-mapped address counts as IPv4).
fn same_family(ip: IpAddr, net: &IpNetwork) -> Option<IpAddr> {
    let ip = match (ip, net) {
        (IpAddr::V6(v6), IpNetwork::V4(_)) => v6.to_ipv4_mapped().map(IpAddr::V4)?,
        _ => ip,
    };
    (ip.is_ipv4() == net.is_ipv4()).then_some(ip)
}

/// Why `ip` cannot be a container's address or its gateway (which goes on the host's
/// bridge), if it cannot.
fn unusable(ip: IpAddr) -> Option<Unusable> {
    let mapped = matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some());
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    Some(if ip.is_unspecified() {
        Unusable::Unspecified
    } else if ip.is_multicast() {
        Unusable::Multicast
    } else if broadcast {
        Unusable::Broadcast
    } else if ip.is_loopback() {
        Unusable::Loopback
    } else if mapped {
        Unusable::Ipv4Mapped
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(json: &str) -> CniResult {
        CniResult::parse_bytes(json.as_bytes(), "1.0.0").unwrap()
    }

    fn msg(json: &str) -> String {
        let e = libcni::Error::from(check(&mut result(json)).unwrap_err());
        assert_eq!(e.code, 999);
        e.msg
    }

    #[test]
    fn gateway_of_another_family_is_refused() {
        assert_eq!(
            msg(r#"{"ips":[{"address":"fd00::2/64","gateway":"10.0.0.1"}]}"#),
            "invalid IPAM result: ips[0].gateway 10.0.0.1 is not in the address family of fd00::2/64"
        );
        assert_eq!(
            msg(
                r#"{"ips":[{"address":"10.0.0.2/24"},{"address":"10.1.0.2/24","gateway":"fd00::1"}]}"#
            ),
            "invalid IPAM result: ips[1].gateway fd00::1 is not in the address family of 10.1.0.2/24"
        );
        assert_eq!(
            msg(
                r#"{"ips":[{"address":"10.0.0.2/24"}],"routes":[{"dst":"10.9.0.0/16"},{"dst":"0.0.0.0/0","gw":"fd00::1"}]}"#
            ),
            "invalid IPAM result: routes[1].gw fd00::1 is not in the address family of routes[1].dst 0.0.0.0/0"
        );
    }

    #[test]
    fn addresses_must_be_usable() {
        for (json, what) in [
            (
                r#"{"ips":[{"address":"0.0.0.0/24"}]}"#,
                "ips[0].address 0.0.0.0/24 is the unspecified address",
            ),
            (
                r#"{"ips":[{"address":"::/64"}]}"#,
                "ips[0].address ::/64 is the unspecified address",
            ),
            (
                r#"{"ips":[{"address":"224.0.0.1/24"}]}"#,
                "ips[0].address 224.0.0.1/24 is a multicast address",
            ),
            (
                r#"{"ips":[{"address":"ff02::1/64"}]}"#,
                "ips[0].address ff02::1/64 is a multicast address",
            ),
            (
                r#"{"ips":[{"address":"255.255.255.255/32"}]}"#,
                "ips[0].address 255.255.255.255/32 is the broadcast address",
            ),
            (
                r#"{"ips":[{"address":"127.0.0.5/8"}]}"#,
                "ips[0].address 127.0.0.5/8 is a loopback address",
            ),
            (
                r#"{"ips":[{"address":"::ffff:10.1.2.5/120"}]}"#,
                "ips[0].address ::ffff:10.1.2.5/120 is an IPv4-mapped IPv6 address",
            ),
            (
                r#"{"ips":[{"address":"10.1.2.5/0"}]}"#,
                "ips[0].address 10.1.2.5/0 has prefix length 0",
            ),
            (
                r#"{"ips":[{"address":"fd00::5/0"}]}"#,
                "ips[0].address fd00::5/0 has prefix length 0",
            ),
            (
                r#"{"ips":[{"address":"10.0.0.2/24","gateway":"0.0.0.0"}]}"#,
                "ips[0].gateway 0.0.0.0 is the unspecified address",
            ),
            (
                r#"{"ips":[{"address":"fd00::2/64","gateway":"::1"}]}"#,
                "ips[0].gateway ::1 is a loopback address",
            ),
        ] {
            assert_eq!(msg(json), format!("invalid IPAM result: {what}"));
        }
        assert_eq!(
            msg(r#"{"ips":[]}"#),
            "IPAM plugin returned missing IP config"
        );
    }

    #[test]
    fn sane_results_pass_and_mapped_gateways_become_ipv4() {
        let mut r = result(
            r#"{"ips":[{"address":"10.0.0.2/24","gateway":"::ffff:10.0.0.1"},
                       {"address":"fd00::2/64","gateway":"fd00::1"}],
                "routes":[{"dst":"0.0.0.0/0","gw":"::ffff:10.0.0.254"},{"dst":"fd01::/64"}]}"#,
        );
        check(&mut r).unwrap();
        assert_eq!(r.ips[0].gateway, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(r.ips[1].gateway, Some("fd00::1".parse().unwrap()));
        assert_eq!(r.routes[0].gw, Some("10.0.0.254".parse().unwrap()));
    }
}
