//! VXLAN devices, their forwarding (FDB) and neighbour entries, and on-link routes through
//! them: what an overlay between nodes is made of (`ip link add type vxlan`, `bridge fdb`,
//! `ip neigh`, `ip route ... onlink`).

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVxlan, LinkAttribute, LinkInfo, LinkMessage,
};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::{RouteFlags, RouteProtocol};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

use super::route::route_message;
use super::{Netlink, NetlinkError, RouteSpec};

/// The parameters of a VXLAN device that matter to an overlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanParams {
    pub vni: u32,
    /// UDP destination port.
    pub port: u16,
    /// Source address of the encapsulated packets (the node's underlay address).
    pub local: IpAddr,
    pub learning: bool,
}

/// One FDB entry of a VXLAN device: frames to `mac` go to the VTEP at `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FdbEntry {
    pub mac: [u8; 6],
    pub dst: IpAddr,
}

/// One neighbour (ARP / NDP) entry of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NeighbourEntry {
    pub ip: IpAddr,
    pub mac: [u8; 6],
    /// `NUD_PERMANENT`: set by hand, never expires or probes.
    pub permanent: bool,
}

fn vxlan_data(p: &VxlanParams) -> Vec<InfoVxlan> {
    let local = match p.local {
        IpAddr::V4(a) => InfoVxlan::Local(a),
        IpAddr::V6(a) => InfoVxlan::Local6(a),
    };
    vec![
        InfoVxlan::Id(p.vni),
        local,
        InfoVxlan::Port(p.port),
        InfoVxlan::Learning(p.learning),
    ]
}

/// The VXLAN parameters in a link message, when it is a VXLAN device.
fn params_of(msg: &LinkMessage) -> Option<VxlanParams> {
    let data = msg.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            LinkInfo::Data(InfoData::Vxlan(d)) => Some(d),
            _ => None,
        }),
        _ => None,
    })?;
    let (mut vni, mut port, mut local, mut learning) = (None, None, None, false);
    for d in data {
        match d {
            InfoVxlan::Id(v) => vni = Some(*v),
            InfoVxlan::Port(p) => port = Some(*p),
            InfoVxlan::Local(a) => local = Some(IpAddr::V4(*a)),
            InfoVxlan::Local6(a) => local = Some(IpAddr::V6(*a)),
            InfoVxlan::Learning(l) => learning = *l,
            _ => {}
        }
    }
    Some(VxlanParams {
        vni: vni?,
        port: port?,
        local: local?,
        learning,
    })
}

/// A VXLAN device of this namespace, whoever made it: what decides whether the kernel lets
/// another one have a VNI and port (one device per VNI, port and family).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanDevice {
    pub index: u32,
    pub name: String,
    pub vni: u32,
    pub port: u16,
    /// Over IPv6 (a `local` or `group` of that family); IPv4 otherwise.
    pub ipv6: bool,
}

fn device_of(msg: &LinkMessage) -> Option<VxlanDevice> {
    let mut name = None;
    let mut data = None;
    for a in &msg.attributes {
        match a {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::LinkInfo(infos) => {
                data = infos.iter().find_map(|i| match i {
                    LinkInfo::Data(InfoData::Vxlan(d)) => Some(d),
                    _ => None,
                })
            }
            _ => {}
        }
    }
    let (mut vni, mut port, mut ipv6) = (None, None, false);
    for d in data? {
        match d {
            InfoVxlan::Id(v) => vni = Some(*v),
            InfoVxlan::Port(p) => port = Some(*p),
            InfoVxlan::Local6(_) | InfoVxlan::Group6(_) => ipv6 = true,
            _ => {}
        }
    }
    Some(VxlanDevice {
        index: msg.header.index,
        name: name?,
        vni: vni?,
        // The kernel's default when none was given.
        port: port.unwrap_or(8472),
        ipv6,
    })
}

fn mac_of(bytes: &[u8]) -> Option<[u8; 6]> {
    <[u8; 6]>::try_from(bytes).ok()
}

fn ip_of(addr: &NeighbourAddress) -> Option<IpAddr> {
    match addr {
        NeighbourAddress::Inet(a) => Some(IpAddr::V4(*a)),
        NeighbourAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        // AF_BRIDGE (FDB) entries carry the VTEP address unparsed.
        NeighbourAddress::Other(v) => match v.len() {
            4 => <[u8; 4]>::try_from(v.as_slice()).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(v.as_slice()).ok().map(IpAddr::from),
            _ => None,
        },
        _ => None,
    }
}

fn neighbour_parts(msg: &NeighbourMessage) -> (Option<IpAddr>, Option<[u8; 6]>) {
    let mut out = (None, None);
    for a in &msg.attributes {
        match a {
            NeighbourAttribute::Destination(d) => out.0 = ip_of(d),
            NeighbourAttribute::LinkLayerAddress(l) => out.1 = mac_of(l),
            _ => {}
        }
    }
    out
}

/// `bridge fdb ... dev IFINDEX self permanent dst DST`.
fn fdb_message(ifindex: u32, entry: &FdbEntry) -> NeighbourMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Bridge;
    msg.header.ifindex = ifindex;
    msg.header.state = NeighbourState::Permanent;
    msg.header.flags = NeighbourFlags::Own;
    msg.attributes
        .push(NeighbourAttribute::LinkLayerAddress(entry.mac.to_vec()));
    msg.attributes
        .push(NeighbourAttribute::Destination(entry.dst.into()));
    msg
}

/// `ip neigh ... IP lladdr MAC dev IFINDEX nud permanent`.
fn neighbour_message(ifindex: u32, ip: IpAddr, mac: [u8; 6]) -> NeighbourMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    msg.header.ifindex = ifindex;
    msg.header.state = NeighbourState::Permanent;
    msg.attributes
        .push(NeighbourAttribute::Destination(ip.into()));
    msg.attributes
        .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    msg
}

fn onlink_route(dst: IpNetwork, gateway: IpAddr, oif: u32, protocol: u8) -> RouteNetlinkMessage {
    let mut msg = route_message(&RouteSpec {
        dst,
        gateway: Some(gateway),
        oif: Some(oif),
        priority: None,
        table: None,
        scope: None,
    });
    msg.header.protocol = RouteProtocol::from(protocol);
    msg.header.flags = RouteFlags::Onlink;
    RouteNetlinkMessage::NewRoute(msg)
}

impl Netlink {
    /// `ip link add NAME mtu MTU address MAC type vxlan id VNI local LOCAL dstport PORT
    /// [no]learning`; EEXIST if the name is taken. The device is left down.
    pub fn create_vxlan(
        &self,
        name: &str,
        params: &VxlanParams,
        mtu: u32,
        mac: [u8; 6],
    ) -> Result<(), NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        msg.attributes.push(LinkAttribute::Mtu(mtu));
        msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Vxlan),
            LinkInfo::Data(InfoData::Vxlan(vxlan_data(params))),
        ]));
        self.ack(
            &|| format!("create vxlan {name:?}"),
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// The VXLAN parameters of link `index`; `None` when it is not a VXLAN device.
    pub fn vxlan_params(&self, index: u32) -> Result<Option<VxlanParams>, NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        let op = || format!("get link {index}");
        let answers = self.request(&op, RouteNetlinkMessage::GetLink(msg), 0)?;
        Ok(answers.iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => params_of(l),
            _ => None,
        }))
    }

    /// Every VXLAN device of this namespace (`ip -d link show type vxlan`).
    pub fn vxlan_devices(&self) -> Result<Vec<VxlanDevice>, NetlinkError> {
        self.dump(
            &|| "list links".into(),
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            |m| match m {
                RouteNetlinkMessage::NewLink(l) => device_of(&l),
                _ => None,
            },
        )
    }

    /// `bridge fdb show dev IFINDEX`: the entries with a remote VTEP address.
    pub fn fdb_entries(&self, ifindex: u32) -> Result<Vec<FdbEntry>, NetlinkError> {
        let mut msg = NeighbourMessage::default();
        msg.header.family = AddressFamily::Bridge;
        self.dump(
            &|| format!("list FDB entries of link {ifindex}"),
            RouteNetlinkMessage::GetNeighbour(msg),
            |m| match m {
                RouteNetlinkMessage::NewNeighbour(n) if n.header.ifindex == ifindex => {
                    match neighbour_parts(&n) {
                        (Some(dst), Some(mac)) => Some(FdbEntry { mac, dst }),
                        _ => None,
                    }
                }
                _ => None,
            },
        )
    }

    /// `bridge fdb replace MAC dev IFINDEX self permanent dst DST`.
    pub fn replace_fdb(&self, ifindex: u32, entry: &FdbEntry) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("replace FDB entry for {} on link {ifindex}", entry.dst),
            RouteNetlinkMessage::NewNeighbour(fdb_message(ifindex, entry)),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// `bridge fdb del MAC dev IFINDEX self dst DST`; ENOENT if absent.
    pub fn del_fdb(&self, ifindex: u32, entry: &FdbEntry) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("delete FDB entry for {} on link {ifindex}", entry.dst),
            RouteNetlinkMessage::DelNeighbour(fdb_message(ifindex, entry)),
            0,
        )
    }

    /// `ip neigh show dev IFINDEX`, both families.
    pub fn neighbours(&self, ifindex: u32) -> Result<Vec<NeighbourEntry>, NetlinkError> {
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut msg = NeighbourMessage::default();
            msg.header.family = family;
            out.extend(self.dump(
                &|| format!("list neighbours of link {ifindex}"),
                RouteNetlinkMessage::GetNeighbour(msg),
                |m| match m {
                    RouteNetlinkMessage::NewNeighbour(n) if n.header.ifindex == ifindex => {
                        match neighbour_parts(&n) {
                            (Some(ip), Some(mac)) => Some(NeighbourEntry {
                                ip,
                                mac,
                                permanent: n.header.state == NeighbourState::Permanent,
                            }),
                            _ => None,
                        }
                    }
                    _ => None,
                },
            )?);
        }
        Ok(out)
    }

    /// `ip neigh replace IP lladdr MAC dev IFINDEX nud permanent`.
    pub fn replace_neighbour(
        &self,
        ifindex: u32,
        ip: IpAddr,
        mac: [u8; 6],
    ) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("replace neighbour {ip} on link {ifindex}"),
            RouteNetlinkMessage::NewNeighbour(neighbour_message(ifindex, ip, mac)),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// `ip neigh del IP dev IFINDEX`; ENOENT if absent.
    pub fn del_neighbour(&self, ifindex: u32, ip: IpAddr) -> Result<(), NetlinkError> {
        let mut msg = neighbour_message(ifindex, ip, [0; 6]);
        msg.attributes
            .retain(|a| !matches!(a, NeighbourAttribute::LinkLayerAddress(_)));
        self.ack(
            &|| format!("delete neighbour {ip} on link {ifindex}"),
            RouteNetlinkMessage::DelNeighbour(msg),
            0,
        )
    }

    /// `ip route add DST via GW dev OIF onlink proto PROTOCOL`, which must be new
    /// (`NLM_F_EXCL`); with `replace`, `ip route replace` instead.
    pub fn set_onlink_route(
        &self,
        dst: IpNetwork,
        gateway: IpAddr,
        oif: u32,
        protocol: u8,
        replace: bool,
    ) -> Result<(), NetlinkError> {
        let flags = if replace {
            NLM_F_CREATE | NLM_F_REPLACE
        } else {
            NLM_F_CREATE | NLM_F_EXCL
        };
        self.ack(
            &|| format!("add route {dst} via {gateway} dev {oif} onlink"),
            onlink_route(dst, gateway, oif, protocol),
            flags,
        )
    }

    /// Deletes the route `DST via GW dev OIF proto PROTOCOL`; ESRCH if there is none.
    pub fn del_onlink_route(
        &self,
        dst: IpNetwork,
        gateway: IpAddr,
        oif: u32,
        protocol: u8,
    ) -> Result<(), NetlinkError> {
        let RouteNetlinkMessage::NewRoute(msg) = onlink_route(dst, gateway, oif, protocol) else {
            return Err(NetlinkError::unexpected("delete route", "not a route"));
        };
        self.ack(
            &|| format!("delete route {dst} via {gateway} dev {oif}"),
            RouteNetlinkMessage::DelRoute(msg),
            0,
        )
    }
}
