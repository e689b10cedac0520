//! Which gateway addresses go on the bridge and which default routes the container gets
//! (Go `calcGateways`), computed from the IPAM result before anything is configured.

use crate::config::BridgeConf;
use crate::error::BridgeError;
use ipnetwork::IpNetwork;
use libcni::types::{CniResult, Route};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Index of the container interface in the result (`[bridge, host veth, container]`).
pub const CONTAINER_IFACE_INDEX: usize = 2;

/// Gateway addresses (`gw/prefix`) per family, to be put on the bridge.
#[derive(Debug, Default, PartialEq)]
pub struct Gateways {
    pub v4: Vec<IpNetwork>,
    pub v6: Vec<IpNetwork>,
}

/// Points every IP at the container interface, fills in missing gateways (network + 1) when
/// the bridge is a gateway, and adds a default route per family for `isDefaultGateway` unless
/// the IPAM already gave one with a gateway. `result` passed [`crate::ipam_result::check`].
pub fn calc_gateways(result: &mut CniResult, conf: &BridgeConf) -> Result<Gateways, BridgeError> {
    let mut gws = Gateways::default();
    let (mut default_v4, mut default_v6) = (false, false);
    for i in 0..result.ips.len() {
        let ip = &mut result.ips[i];
        ip.interface = Some(CONTAINER_IFACE_INDEX);
        if ip.gateway.is_none() && conf.is_gateway {
            ip.gateway =
                Some(first_host(&ip.address).ok_or(BridgeError::NoGatewayAfter(ip.address))?);
        }
        let (address, gateway) = (ip.address, ip.gateway);
        let v4 = address.is_ipv4();
        if conf.is_default_gateway {
            let default_dst = default_route_dst(v4);
            let found = if v4 { &mut default_v4 } else { &mut default_v6 };
            *found |= result
                .routes
                .iter()
                .any(|r| r.gw.is_some() && r.dst == default_dst);
            if !*found {
                result.routes.push(Route::new(default_dst, gateway));
                *found = true;
            }
        }
        if let (true, Some(gw)) = (conf.is_gateway, gateway) {
            let net = IpNetwork::new(gw, address.prefix())
                .map_err(|_| BridgeError::GatewayMisfit { gw, address })?;
            if v4 {
                gws.v4.push(net)
            } else {
                gws.v6.push(net)
            }
        }
    }
    Ok(gws)
}

pub fn default_route_dst(v4: bool) -> IpNetwork {
    let any = if v4 {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    IpNetwork::new(any, 0).expect("prefix 0 is valid")
}

/// The network address + 1 (Go `calcGatewayIP`); none after the last address.
fn first_host(addr: &IpNetwork) -> Option<IpAddr> {
    Some(match addr.network() {
        IpAddr::V4(n) => IpAddr::V4(Ipv4Addr::from(u32::from(n).checked_add(1)?)),
        IpAddr::V6(n) => IpAddr::V6(Ipv6Addr::from(u128::from(n).checked_add(1)?)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::types::IpConfig;

    fn conf(json: &str) -> BridgeConf {
        BridgeConf::load(json.as_bytes(), "").unwrap()
    }

    fn result(ips: &[(&str, Option<&str>)], routes: &[(&str, Option<&str>)]) -> CniResult {
        CniResult {
            ips: ips
                .iter()
                .map(|(a, g)| IpConfig {
                    interface: None,
                    address: a.parse().unwrap(),
                    gateway: g.map(|g| g.parse().unwrap()),
                })
                .collect(),
            routes: routes
                .iter()
                .map(|(d, g)| Route::new(d.parse().unwrap(), g.map(|g| g.parse().unwrap())))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn default_gateway_dual_stack() {
        let c = conf(r#"{"name":"n","isDefaultGateway":true,"ipam":{"type":"host-local"}}"#);
        let mut r = result(
            &[
                ("10.1.2.2/24", None),
                ("2001:db8::2/64", Some("2001:db8::1")),
            ],
            &[],
        );
        let g = calc_gateways(&mut r, &c).unwrap();
        assert_eq!(g.v4, vec!["10.1.2.1/24".parse::<IpNetwork>().unwrap()]);
        assert_eq!(g.v6, vec!["2001:db8::1/64".parse::<IpNetwork>().unwrap()]);
        assert!(r.ips.iter().all(|i| i.interface == Some(2)));
        assert_eq!(r.ips[0].gateway.unwrap().to_string(), "10.1.2.1");
        let routes: Vec<String> = r
            .routes
            .iter()
            .map(|r| format!("{} {:?}", r.dst, r.gw))
            .collect();
        assert_eq!(
            routes,
            vec!["0.0.0.0/0 Some(10.1.2.1)", "::/0 Some(2001:db8::1)"]
        );
    }

    #[test]
    fn existing_default_route_with_gateway_is_kept() {
        let c = conf(r#"{"name":"n","isDefaultGateway":true,"ipam":{"type":"host-local"}}"#);
        let mut r = result(
            &[("10.1.2.2/24", None), ("10.2.2.2/24", None)],
            &[("0.0.0.0/0", Some("10.1.2.99"))],
        );
        calc_gateways(&mut r, &c).unwrap();
        assert_eq!(r.routes.len(), 1);
        // A gateway-less default route does not count (the reference adds its own).
        let mut r = result(&[("10.1.2.2/24", None)], &[("0.0.0.0/0", None)]);
        calc_gateways(&mut r, &c).unwrap();
        assert_eq!(r.routes.len(), 2);
    }

    #[test]
    fn one_default_route_per_family_for_several_ips() {
        let c = conf(r#"{"name":"n","isDefaultGateway":true,"ipam":{"type":"host-local"}}"#);
        let mut r = result(&[("10.1.2.2/24", None), ("10.2.2.2/16", None)], &[]);
        let g = calc_gateways(&mut r, &c).unwrap();
        assert_eq!(r.routes.len(), 1);
        assert_eq!(g.v4.len(), 2);
        assert_eq!(g.v4[1].to_string(), "10.2.0.1/16");
    }

    #[test]
    fn no_gateway_after_the_last_address_is_an_error() {
        let c = conf(r#"{"name":"n","isGateway":true,"ipam":{"type":"host-local"}}"#);
        let mut r = result(&[("255.255.255.255/32", None)], &[]);
        let e = calc_gateways(&mut r, &c).unwrap_err();
        assert_eq!(e.to_string(), "no gateway address after 255.255.255.255/32");
        // What check() would have refused; calc_gateways must not panic on it either.
        let mut r = result(&[("fd00::2/64", Some("10.0.0.1"))], &[]);
        let e = calc_gateways(&mut r, &c).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gateway 10.0.0.1 does not fit address fd00::2/64"
        );
    }

    #[test]
    fn no_gateway_without_is_gateway() {
        let c = conf(r#"{"name":"n","ipam":{"type":"host-local"}}"#);
        let mut r = result(&[("10.1.2.2/24", None)], &[]);
        assert_eq!(calc_gateways(&mut r, &c).unwrap(), Gateways::default());
        assert_eq!(r.ips[0].gateway, None);
        assert!(r.routes.is_empty());
    }
}
