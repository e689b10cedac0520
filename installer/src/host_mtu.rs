//! The MTU of the host's default-route interface (the conflist's default MTU), read over
//! netlink (with `hostNetwork: true` this container's network namespace is the host's).

use std::net::IpAddr;

use hostnet::netlink::{IpFamily, MAIN_TABLE, Netlink, Route};

/// MTU of the interface holding the IPv4 default route, else the IPv6 one; None when the
/// host has no default route or netlink fails (the bridge plugin then uses its own default).
pub fn default_route_mtu() -> Option<u32> {
    let nl = Netlink::current().ok()?;
    let oif = [IpFamily::V4, IpFamily::V6]
        .into_iter()
        .find_map(|fam| default_oif(&nl.routes(fam).ok()?))?;
    Some(nl.link_by_index(oif).ok()?.mtu)
}

/// MTU of the interface holding `addr` (the overlay's underlay interface), else of the
/// default-route interface; None when netlink cannot tell.
pub fn underlay_mtu(addr: IpAddr) -> Option<u32> {
    let nl = Netlink::current().ok()?;
    let index = nl
        .addresses(None)
        .ok()?
        .into_iter()
        .find(|a| a.addr.ip() == addr)
        .map(|a| a.index);
    match index {
        Some(i) => Some(nl.link_by_index(i).ok()?.mtu),
        None => default_route_mtu(),
    }
}

/// The interface of the main table's default route with the lowest metric.
fn default_oif(routes: &[Route]) -> Option<u32> {
    routes
        .iter()
        .filter(|r| r.table == MAIN_TABLE && r.dst.prefix() == 0)
        .filter_map(|r| Some((r.priority.unwrap_or(0), r.oif?)))
        .min()
        .map(|(_, oif)| oif)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(dst: &str, table: u32, metric: Option<u32>, oif: Option<u32>) -> Route {
        Route {
            dst: dst.parse().unwrap(),
            gateway: None,
            oif,
            table,
            scope: 0,
            priority: metric,
            multipath_gateways: vec![],
        }
    }

    #[test]
    fn picks_the_lowest_metric_default_route_of_the_main_table() {
        let routes = [
            route("0.0.0.0/0", MAIN_TABLE, Some(600), Some(3)),
            route("0.0.0.0/0", MAIN_TABLE, Some(100), Some(2)),
            route("0.0.0.0/0", 100, Some(1), Some(9)),
            route("10.0.0.0/8", MAIN_TABLE, Some(0), Some(5)),
        ];
        assert_eq!(default_oif(&routes), Some(2));
        assert_eq!(default_oif(&routes[2..]), None);
    }

    #[test]
    fn a_multipath_default_without_one_interface_is_skipped() {
        assert_eq!(default_oif(&[route("::/0", MAIN_TABLE, None, None)]), None);
    }
}
