//! The MTUs the agent reads: the default route's interface's (the conflist's default MTU)
//! and the overlay's underlay interface's.

use std::net::IpAddr;

use super::{NodeNetError, Op};
use crate::netlink::{IpFamily, MAIN_TABLE, Netlink, NetlinkError, Route};

fn err(op: &Op) -> impl FnOnce(NetlinkError) -> NodeNetError {
    NodeNetError::of(op.clone())
}

/// MTU of the interface holding the IPv4 default route, else the IPv6 one; None when the
/// node has no default route.
pub(super) fn default_route_mtu(nl: &Netlink) -> Result<Option<u32>, NodeNetError> {
    let op = &Op::DefaultRouteMtu;
    for fam in [IpFamily::V4, IpFamily::V6] {
        if let Some(oif) = default_oif(&nl.routes(fam).map_err(err(op))?) {
            return Ok(Some(nl.link_by_index(oif).map_err(err(op))?.mtu));
        }
    }
    Ok(None)
}

/// MTU of the interface holding `addr`, else of the default route's interface.
pub(super) fn underlay_mtu(nl: &Netlink, addr: IpAddr) -> Result<Option<u32>, NodeNetError> {
    let op = &Op::UnderlayMtu(addr);
    let index = nl
        .addresses(None)
        .map_err(err(op))?
        .into_iter()
        .find(|a| a.addr.ip() == addr)
        .map(|a| a.index);
    match index {
        Some(i) => Ok(Some(nl.link_by_index(i).map_err(err(op))?.mtu)),
        None => default_route_mtu(nl),
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
            nh_id: None,
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
