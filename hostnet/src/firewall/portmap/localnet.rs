//! `route_localnet` on the interface that routes a container, so `127.0.0.1:hostPort`
//! on the node reaches the pod (the reference's `getRoutableHostIF` +
//! `enableLocalnetRouting`).

use std::net::{IpAddr, Ipv4Addr};

use crate::netlink::{IpFamily, MAIN_TABLE, Netlink, NetlinkError};
use crate::sysctl::{self, SysctlError};

#[derive(Debug, thiserror::Error)]
pub enum LocalnetError {
    #[error("could not find the interface routing {ip}: {source}")]
    Route {
        ip: Ipv4Addr,
        #[source]
        source: NetlinkError,
    },
    #[error("unable to enable route_localnet: {0}")]
    Sysctl(#[from] SysctlError),
}

/// Sets `route_localnet` on the interface of the main table's most specific route to
/// `container` (the bridge), so a connection to `127.0.0.1:hostPort`, DNATed to the pod,
/// may leave with its loopback source (then masqueraded). Nothing when no route leads
/// there, as in the reference. Returns the interface set.
pub fn enable_route_localnet(container: Ipv4Addr) -> Result<Option<String>, LocalnetError> {
    let route = |source| LocalnetError::Route {
        ip: container,
        source,
    };
    let nl = Netlink::current().map_err(route)?;
    let best = nl
        .routes(IpFamily::V4)
        .map_err(route)?
        .into_iter()
        .filter(|r| r.table == MAIN_TABLE && r.dst.contains(IpAddr::V4(container)))
        .filter_map(|r| Some((r.dst.prefix(), r.oif?)))
        .max_by_key(|(prefix, _)| *prefix);
    let Some((_, oif)) = best else {
        return Ok(None);
    };
    let name = nl.link_by_index(oif).map_err(route)?.name;
    sysctl::ensure_path(
        &sysctl::path(&["net", "ipv4", "conf", &name, "route_localnet"])?,
        "1",
    )?;
    Ok(Some(name))
}
