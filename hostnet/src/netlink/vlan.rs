//! Bridge VLAN messages. This development kernel has no bridge
//! `vlan_filtering`, so the messages are unit-tested byte for byte and the
//! sending methods are untested against a kernel.

use rtnetlink::packet_route::link::{
    AfSpecBridge, BridgeFlag, BridgeVlanInfo, BridgeVlanInfoFlags, InfoBridge, InfoData, InfoKind,
    LinkAttribute, LinkExtentMask, LinkInfo, LinkMessage,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Netlink, NetlinkError};

/// The body of `bridge vlan add|del dev PORT vid VID [pvid] [untagged] master`:
/// family AF_BRIDGE, `IFLA_AF_SPEC { IFLA_BRIDGE_FLAGS = BRIDGE_FLAGS_MASTER,
/// IFLA_BRIDGE_VLAN_INFO { flags, vid } }`. Sent as RTM_SETLINK to add and
/// RTM_DELLINK to delete, as iproute2 and Go's `BridgeVlanAdd/Del` do.
pub(super) fn bridge_vlan_message(port: u32, vid: u16, pvid: bool, untagged: bool) -> LinkMessage {
    let mut flags = BridgeVlanInfoFlags::empty();
    if pvid {
        flags |= BridgeVlanInfoFlags::Pvid;
    }
    if untagged {
        flags |= BridgeVlanInfoFlags::Untagged;
    }
    let mut msg = LinkMessage::default();
    msg.header.interface_family = AddressFamily::Bridge;
    msg.header.index = port;
    msg.attributes.push(LinkAttribute::AfSpecBridge(vec![
        AfSpecBridge::Flags(BridgeFlag::Controller),
        AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid }),
    ]));
    msg
}

/// The body of `ip link set BRIDGE type bridge vlan_filtering 0|1`, to be
/// sent as RTM_NEWLINK (the kernel ignores link-kind data in RTM_SETLINK).
pub(super) fn vlan_filtering_message(bridge: u32, on: bool) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = bridge;
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Bridge),
        LinkInfo::Data(InfoData::Bridge(vec![InfoBridge::VlanFiltering(on)])),
    ]));
    msg
}

/// One VLAN of a bridge port, as `bridge vlan show` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortVlan {
    pub vid: u16,
    pub pvid: bool,
    pub untagged: bool,
}

/// The body of the `bridge vlan show` dump request: AF_BRIDGE with
/// `IFLA_EXT_MASK = RTEXT_FILTER_BRVLAN` (one entry per VID, no ranges).
pub(super) fn bridge_vlan_dump_message() -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.interface_family = AddressFamily::Bridge;
    msg.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::Brvlan]));
    msg
}

pub(super) fn port_vlans(msg: &LinkMessage) -> impl Iterator<Item = PortVlan> + '_ {
    msg.attributes
        .iter()
        .filter_map(|a| match a {
            LinkAttribute::AfSpecBridge(spec) => Some(spec),
            _ => None,
        })
        .flatten()
        .filter_map(|s| match s {
            AfSpecBridge::VlanInfo(v) => Some(PortVlan {
                vid: v.vid,
                pvid: v.flags.contains(BridgeVlanInfoFlags::Pvid),
                untagged: v.flags.contains(BridgeVlanInfoFlags::Untagged),
            }),
            _ => None,
        })
}

impl Netlink {
    /// The VLANs of bridge port `port` (`bridge vlan show dev PORT`); what
    /// Go's `removeDefaultVlan` deletes. On a kernel without bridge VLAN
    /// support, as here, the list is empty.
    pub fn bridge_vlans(&self, port: u32) -> Result<Vec<PortVlan>, NetlinkError> {
        let ports = self.dump(
            &|| format!("list VLANs of bridge port {port}"),
            RouteNetlinkMessage::GetLink(bridge_vlan_dump_message()),
            |m| match m {
                RouteNetlinkMessage::NewLink(l) if l.header.index == port => Some(l),
                _ => None,
            },
        )?;
        Ok(ports.iter().flat_map(port_vlans).collect())
    }

    /// `bridge vlan add dev PORT vid VID [pvid] [untagged] master`.
    /// Not exercised against a kernel here (no vlan_filtering support).
    pub fn bridge_vlan_add(
        &self,
        port: u32,
        vid: u16,
        pvid: bool,
        untagged: bool,
    ) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("add VLAN {vid} to bridge port {port}"),
            RouteNetlinkMessage::SetLink(bridge_vlan_message(port, vid, pvid, untagged)),
            0,
        )
    }

    /// `bridge vlan del dev PORT vid VID master`.
    /// Not exercised against a kernel here (no vlan_filtering support).
    pub fn bridge_vlan_del(&self, port: u32, vid: u16) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("delete VLAN {vid} from bridge port {port}"),
            RouteNetlinkMessage::DelLink(bridge_vlan_message(port, vid, false, false)),
            0,
        )
    }

    /// `ip link set BRIDGE type bridge vlan_filtering 0|1`.
    /// Not exercised against a kernel here: this kernel answers EOPNOTSUPP.
    pub fn set_vlan_filtering(&self, bridge: u32, on: bool) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("set vlan_filtering on bridge {bridge}"),
            RouteNetlinkMessage::NewLink(vlan_filtering_message(bridge, on)),
            0,
        )
    }
}
