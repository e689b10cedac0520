//! Routes: list (all tables) and add with the Go `RouteAddEcmp` semantics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use rtnetlink::packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Netlink, NetlinkError};

/// `RT_TABLE_MAIN`.
pub const MAIN_TABLE: u32 = 254;

/// Address family selector for [`Netlink::routes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    fn netlink(self) -> AddressFamily {
        match self {
            IpFamily::V4 => AddressFamily::Inet,
            IpFamily::V6 => AddressFamily::Inet6,
        }
    }
}

/// A unicast route as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination; `0.0.0.0/0` or `::/0` for a default route.
    pub dst: IpNetwork,
    pub gateway: Option<IpAddr>,
    pub oif: Option<u32>,
    pub table: u32,
    /// `RT_SCOPE_*`: 0 universe, 253 link, 254 host.
    pub scope: u8,
    /// Metric (`RTA_PRIORITY`).
    pub priority: Option<u32>,
    /// Gateways of the next hops of a multipath (ECMP) route; empty otherwise.
    pub multipath_gateways: Vec<IpAddr>,
    /// The nexthop object it goes through (`RTA_NH_ID`); its gateway is then reported
    /// only while `nexthop_compat_mode` is on.
    pub nh_id: Option<u32>,
}

/// What to add: `ip route add DST [via GW] [dev OIF] [metric P] [table T] [scope S]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    pub dst: IpNetwork,
    pub gateway: Option<IpAddr>,
    pub oif: Option<u32>,
    pub priority: Option<u32>,
    /// Default: main (254).
    pub table: Option<u32>,
    /// Default: universe (0), as the Go netlink library sends.
    pub scope: Option<u8>,
}

fn ip_of(addr: &RouteAddress) -> Option<IpAddr> {
    match addr {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn unspecified(family: AddressFamily) -> Option<IpAddr> {
    match family {
        AddressFamily::Inet => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        AddressFamily::Inet6 => Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        _ => None,
    }
}

impl Route {
    fn from_message(msg: &RouteMessage) -> Option<Route> {
        let h = &msg.header;
        let mut dst_ip = unspecified(h.address_family)?;
        let mut route = Route {
            dst: IpNetwork::new(dst_ip, 0).ok()?,
            gateway: None,
            oif: None,
            table: u32::from(h.table),
            scope: h.scope.into(),
            priority: None,
            multipath_gateways: Vec::new(),
            nh_id: None,
        };
        for attr in &msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => dst_ip = ip_of(a)?,
                RouteAttribute::Gateway(a) => route.gateway = ip_of(a),
                RouteAttribute::Oif(i) => route.oif = Some(*i),
                RouteAttribute::Table(t) => route.table = *t,
                RouteAttribute::Priority(p) => route.priority = Some(*p),
                RouteAttribute::NhId(id) => route.nh_id = Some(*id),
                RouteAttribute::MultiPath(hops) => {
                    for hop in hops {
                        route
                            .multipath_gateways
                            .extend(hop.attributes.iter().find_map(|a| match a {
                                RouteAttribute::Gateway(g) => ip_of(g),
                                _ => None,
                            }));
                    }
                }
                _ => {}
            }
        }
        route.dst = IpNetwork::new(dst_ip, h.destination_prefix_length).ok()?;
        Some(route)
    }
}

pub(super) fn route_message(spec: &RouteSpec) -> RouteMessage {
    let table = spec.table.unwrap_or(MAIN_TABLE);
    let mut msg = RouteMessage::default();
    msg.header = RouteHeader {
        address_family: match spec.dst {
            IpNetwork::V4(_) => AddressFamily::Inet,
            IpNetwork::V6(_) => AddressFamily::Inet6,
        },
        destination_prefix_length: spec.dst.prefix(),
        // Tables above 255 only fit in RTA_TABLE; the header then says RT_TABLE_UNSPEC.
        table: u8::try_from(table).unwrap_or(0),
        // RTPROT_BOOT, what the Go netlink library sends.
        protocol: RouteProtocol::Boot,
        scope: spec.scope.map_or(RouteScope::Universe, RouteScope::from),
        kind: RouteType::Unicast,
        ..RouteHeader::default()
    };
    if spec.dst.prefix() > 0 {
        msg.attributes
            .push(RouteAttribute::Destination(spec.dst.network().into()));
    }
    if let Some(gw) = spec.gateway {
        msg.attributes.push(RouteAttribute::Gateway(gw.into()));
    }
    if let Some(oif) = spec.oif {
        msg.attributes.push(RouteAttribute::Oif(oif));
    }
    if let Some(p) = spec.priority {
        msg.attributes.push(RouteAttribute::Priority(p));
    }
    msg.attributes.push(RouteAttribute::Table(table));
    msg
}

impl Netlink {
    /// Unicast routes of `family` in every table (main, local's unicast
    /// entries, custom tables). Broadcast/local/multicast entries are left out.
    pub fn routes(&self, family: IpFamily) -> Result<Vec<Route>, NetlinkError> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = family.netlink();
        self.dump(
            &|| "list routes".into(),
            RouteNetlinkMessage::GetRoute(msg),
            |m| match m {
                RouteNetlinkMessage::NewRoute(r) if r.header.kind == RouteType::Unicast => {
                    Route::from_message(&r)
                }
                _ => None,
            },
        )
    }

    /// [`Self::routes`] made by `protocol` only (`ip route show proto P table all`;
    /// `RTPROT_*`: 9 ra, or a daemon's own number).
    pub fn routes_of_protocol(
        &self,
        family: IpFamily,
        protocol: u8,
    ) -> Result<Vec<Route>, NetlinkError> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = family.netlink();
        self.dump(
            &|| format!("list routes of protocol {protocol}"),
            RouteNetlinkMessage::GetRoute(msg),
            |m| match m {
                RouteNetlinkMessage::NewRoute(r)
                    if r.header.kind == RouteType::Unicast
                        && u8::from(r.header.protocol) == protocol =>
                {
                    Route::from_message(&r)
                }
                _ => None,
            },
        )
    }

    /// Adds a route with `NLM_F_CREATE` and without `NLM_F_EXCL`, as Go's
    /// `netlink.RouteAddEcmp` does: a route with the same destination and a
    /// different gateway is added next to the existing one (IPv6 merges them
    /// into one multipath route), while an identical route gives EEXIST
    /// ([`NetlinkError::is_exists`]).
    pub fn add_route(&self, spec: &RouteSpec) -> Result<(), NetlinkError> {
        let op = || {
            let mut s = format!("add route {}", spec.dst);
            if let Some(gw) = spec.gateway {
                s.push_str(&format!(" via {gw}"));
            }
            s
        };
        self.ack(
            &op,
            RouteNetlinkMessage::NewRoute(route_message(spec)),
            NLM_F_CREATE,
        )
    }

    /// Adds a main-table route `dst via gateway proto PROTOCOL` that must be new
    /// (`NLM_F_EXCL`: EEXIST when a route with the same destination and metric exists).
    pub fn add_route_excl(&self, spec: &RouteSpec, protocol: u8) -> Result<(), NetlinkError> {
        self.change_with_protocol("add route", spec, protocol, NLM_F_CREATE | NLM_F_EXCL)
    }

    /// `ip route replace`: the route with this destination and metric becomes `spec`.
    pub fn replace_route(&self, spec: &RouteSpec, protocol: u8) -> Result<(), NetlinkError> {
        self.change_with_protocol(
            "replace route",
            spec,
            protocol,
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes the route matching `spec` made by `protocol` only (the kernel compares
    /// the protocol too); ESRCH if there is none.
    pub fn del_route_of(&self, spec: &RouteSpec, protocol: u8) -> Result<(), NetlinkError> {
        self.change_with_protocol("delete route", spec, protocol, 0)
    }

    fn change_with_protocol(
        &self,
        what: &str,
        spec: &RouteSpec,
        protocol: u8,
        flags: u16,
    ) -> Result<(), NetlinkError> {
        let op = || match spec.gateway {
            Some(gw) => format!("{what} {} via {gw}", spec.dst),
            None => format!("{what} {}", spec.dst),
        };
        let mut msg = route_message(spec);
        msg.header.protocol = RouteProtocol::from(protocol);
        let msg = if flags == 0 {
            RouteNetlinkMessage::DelRoute(msg)
        } else {
            RouteNetlinkMessage::NewRoute(msg)
        };
        self.ack(&op, msg, flags)
    }

    /// `ip route get ADDR`: the route the kernel would use to reach `addr`
    /// (ENETUNREACH when none). With `fib_match`, the table entry that matched
    /// (`ip route get fibmatch`: its own destination prefix) rather than the resolved path.
    pub fn route_to(&self, addr: IpAddr, fib_match: bool) -> Result<Route, NetlinkError> {
        let op = || format!("get route to {addr}");
        let answers = self.request(&op, route_get(addr, fib_match), 0)?;
        route_of(answers, &op)
    }

    /// [`Self::route_to`] for each of `addrs`, pipelined; the answers in order. A lookup
    /// whose answer was lost (a receive-buffer overrun) is asked again on its own.
    pub fn routes_to(&self, addrs: &[IpAddr], fib_match: bool) -> Vec<Result<Route, NetlinkError>> {
        let op = |i: usize| format!("get route to {}", addrs[i]);
        let msgs = addrs.iter().map(|a| route_get(*a, fib_match)).collect();
        self.request_many(&op, msgs, 0)
            .into_iter()
            .enumerate()
            .map(|(i, r)| match r {
                Err(e) if e.errno() == Some(nix::libc::ENOBUFS) => {
                    self.route_to(addrs[i], fib_match)
                }
                r => r.and_then(|answers| route_of(answers, &|| op(i))),
            })
            .collect()
    }

    /// [`Self::add_route_excl`] for each of `specs`, pipelined; the results in order.
    /// ENOBUFS: the answer was lost (a receive-buffer overrun), the route may be in place.
    pub fn add_routes_excl(
        &self,
        specs: &[RouteSpec],
        protocol: u8,
    ) -> Vec<Result<(), NetlinkError>> {
        let op = |i: usize| match specs[i].gateway {
            Some(gw) => format!("add route {} via {gw}", specs[i].dst),
            None => format!("add route {}", specs[i].dst),
        };
        let msgs = specs
            .iter()
            .map(|spec| {
                let mut msg = route_message(spec);
                msg.header.protocol = RouteProtocol::from(protocol);
                RouteNetlinkMessage::NewRoute(msg)
            })
            .collect();
        self.request_many(&op, msgs, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)
            .into_iter()
            .map(|r| r.map(drop))
            .collect()
    }

    /// [`Self::add_routes_excl`] for main-table routes `dst nhid ID`, pipelined.
    pub fn add_routes_via_nexthop_excl(
        &self,
        routes: &[(IpNetwork, u32)],
        protocol: u8,
    ) -> Vec<Result<(), NetlinkError>> {
        let op = |i: usize| format!("add route {} nhid {}", routes[i].0, routes[i].1);
        let msgs = routes
            .iter()
            .map(|(dst, id)| RouteNetlinkMessage::NewRoute(nexthop_route(*dst, *id, protocol)))
            .collect();
        self.request_many(&op, msgs, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)
            .into_iter()
            .map(|r| r.map(drop))
            .collect()
    }

    /// `ip route replace DST nhid ID proto PROTOCOL` in the main table.
    pub fn replace_route_via_nexthop(
        &self,
        dst: IpNetwork,
        id: u32,
        protocol: u8,
    ) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("replace route {dst} nhid {id}"),
            RouteNetlinkMessage::NewRoute(nexthop_route(dst, id, protocol)),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes the main-table route `dst nhid ID` made by `protocol` (ESRCH if none).
    pub fn del_route_via_nexthop(
        &self,
        dst: IpNetwork,
        id: u32,
        protocol: u8,
    ) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("delete route {dst} nhid {id}"),
            RouteNetlinkMessage::DelRoute(nexthop_route(dst, id, protocol)),
            0,
        )
    }

    /// Deletes the route matching `spec` (ESRCH, [`NetlinkError::is_not_found`], if none).
    pub fn del_route(&self, spec: &RouteSpec) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("delete route {}", spec.dst),
            RouteNetlinkMessage::DelRoute(route_message(spec)),
            0,
        )
    }
}

/// A main-table route to `dst` through nexthop object `id`, made by `protocol`.
fn nexthop_route(dst: IpNetwork, id: u32, protocol: u8) -> RouteMessage {
    let spec = RouteSpec {
        dst,
        gateway: None,
        oif: None,
        priority: None,
        table: Some(MAIN_TABLE),
        scope: None,
    };
    let mut msg = route_message(&spec);
    msg.header.protocol = RouteProtocol::from(protocol);
    msg.attributes.push(RouteAttribute::NhId(id));
    msg
}

/// The `RTM_GETROUTE` of [`Netlink::route_to`].
fn route_get(addr: IpAddr, fib_match: bool) -> RouteNetlinkMessage {
    let mut msg = RouteMessage::default();
    msg.header.address_family = match addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    msg.header.destination_prefix_length = if addr.is_ipv4() { 32 } else { 128 };
    if fib_match {
        msg.header.flags = RouteFlags::FibMatch;
    }
    msg.attributes
        .push(RouteAttribute::Destination(addr.into()));
    RouteNetlinkMessage::GetRoute(msg)
}

/// The route in an answer to [`route_get`].
fn route_of(
    answers: Vec<RouteNetlinkMessage>,
    op: &dyn Fn() -> String,
) -> Result<Route, NetlinkError> {
    answers
        .into_iter()
        .find_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => Route::from_message(&r),
            _ => None,
        })
        .ok_or_else(|| NetlinkError::unexpected(op(), "no route in the answer"))
}
