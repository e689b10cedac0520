//! Byte-level tests of the VLAN messages against what iproute2 sends.

use rtnetlink::packet_core::{NLM_F_ACK, NLM_F_REQUEST, NetlinkMessage};
use rtnetlink::packet_route::RouteNetlinkMessage;

use super::vlan::{bridge_vlan_dump_message, bridge_vlan_message, vlan_filtering_message};

fn wire(msg: RouteNetlinkMessage) -> Vec<u8> {
    let mut m = NetlinkMessage::from(msg);
    m.header.flags = NLM_F_REQUEST | NLM_F_ACK;
    m.header.sequence_number = 1;
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

fn nlmsghdr(len: u32, kind: u16) -> Vec<u8> {
    let mut v = len.to_ne_bytes().to_vec();
    v.extend(kind.to_ne_bytes());
    v.extend((NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    v.extend(1u32.to_ne_bytes()); // sequence
    v.extend(0u32.to_ne_bytes()); // port id
    v
}

/// `struct ifinfomsg` with zero type, flags and change mask.
fn ifinfomsg(family: u8, index: u32) -> Vec<u8> {
    let mut v = vec![family, 0, 0, 0];
    v.extend(index.to_ne_bytes());
    v.extend([0; 8]);
    v
}

fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
    v.extend(kind.to_ne_bytes());
    v.extend(payload);
    v.resize(v.len().next_multiple_of(4), 0);
    v
}

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_SETLINK: u16 = 19;
const AF_BRIDGE: u8 = 7;
const IFLA_LINKINFO: u16 = 18;
const IFLA_AF_SPEC: u16 = 26;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_BR_VLAN_FILTERING: u16 = 7;
const IFLA_BRIDGE_FLAGS: u16 = 0;
const IFLA_BRIDGE_VLAN_INFO: u16 = 2;
const BRIDGE_FLAGS_MASTER: u16 = 1;
const BRIDGE_VLAN_INFO_PVID: u16 = 2;
const BRIDGE_VLAN_INFO_UNTAGGED: u16 = 4;

fn vlan_body(port: u32, flags: u16, vid: u16) -> Vec<u8> {
    let mut info = flags.to_ne_bytes().to_vec();
    info.extend(vid.to_ne_bytes());
    let mut spec = nla(IFLA_BRIDGE_FLAGS, &BRIDGE_FLAGS_MASTER.to_ne_bytes());
    spec.extend(nla(IFLA_BRIDGE_VLAN_INFO, &info));
    let mut body = ifinfomsg(AF_BRIDGE, port);
    body.extend(nla(IFLA_AF_SPEC, &spec));
    body
}

fn with_header(kind: u16, body: Vec<u8>) -> Vec<u8> {
    let mut v = nlmsghdr(16 + body.len() as u32, kind);
    v.extend(body);
    v
}

#[test]
fn bridge_vlan_add_pvid_untagged_master() {
    // bridge vlan add dev <5> vid 100 pvid untagged master
    let got = wire(RouteNetlinkMessage::SetLink(bridge_vlan_message(
        5, 100, true, true,
    )));
    let want = with_header(
        RTM_SETLINK,
        vlan_body(5, BRIDGE_VLAN_INFO_PVID | BRIDGE_VLAN_INFO_UNTAGGED, 100),
    );
    assert_eq!(got.len(), 52);
    assert_eq!(got, want);
}

#[test]
fn bridge_vlan_add_tagged_trunk_member() {
    // bridge vlan add dev <9> vid 4094 master (a vlanTrunk entry)
    let got = wire(RouteNetlinkMessage::SetLink(bridge_vlan_message(
        9, 4094, false, false,
    )));
    assert_eq!(got, with_header(RTM_SETLINK, vlan_body(9, 0, 4094)));
}

#[test]
fn bridge_vlan_del_master() {
    // bridge vlan del dev <3> vid 1 master
    let got = wire(RouteNetlinkMessage::DelLink(bridge_vlan_message(
        3, 1, false, false,
    )));
    assert_eq!(got, with_header(RTM_DELLINK, vlan_body(3, 0, 1)));
}

#[test]
fn bridge_vlan_filtering_on() {
    // ip link set <4> type bridge vlan_filtering 1
    let got = wire(RouteNetlinkMessage::NewLink(vlan_filtering_message(
        4, true,
    )));
    // iproute2 sends the kind without its NUL; netlink-packet-route includes
    // it. The kernel accepts both (NLA_STRING).
    let mut info = nla(IFLA_INFO_KIND, b"bridge\0");
    info.extend(nla(IFLA_INFO_DATA, &nla(IFLA_BR_VLAN_FILTERING, &[1])));
    let mut body = ifinfomsg(0, 4);
    body.extend(nla(IFLA_LINKINFO, &info));
    let want = with_header(RTM_NEWLINK, body);
    assert_eq!(got, want);
}

#[test]
fn bridge_vlan_show_dump_request() {
    // bridge vlan show: RTM_GETLINK, AF_BRIDGE, IFLA_EXT_MASK = RTEXT_FILTER_BRVLAN
    const RTM_GETLINK: u16 = 18;
    const IFLA_EXT_MASK: u16 = 29;
    const RTEXT_FILTER_BRVLAN: u32 = 2;
    let got = wire(RouteNetlinkMessage::GetLink(bridge_vlan_dump_message()));
    let mut body = ifinfomsg(AF_BRIDGE, 0);
    body.extend(nla(IFLA_EXT_MASK, &RTEXT_FILTER_BRVLAN.to_ne_bytes()));
    assert_eq!(got, with_header(RTM_GETLINK, body));
}

#[test]
fn port_vlans_are_read_from_af_spec() {
    use rtnetlink::packet_route::link::{
        AfSpecBridge, BridgeVlanInfo, BridgeVlanInfoFlags, LinkAttribute,
    };
    let mut msg = bridge_vlan_message(7, 1, true, true);
    msg.attributes
        .push(LinkAttribute::AfSpecBridge(vec![AfSpecBridge::VlanInfo(
            BridgeVlanInfo {
                flags: BridgeVlanInfoFlags::empty(),
                vid: 42,
            },
        )]));
    let vlans: Vec<_> = super::vlan::port_vlans(&msg).collect();
    assert_eq!(
        vlans,
        [
            super::PortVlan {
                vid: 1,
                pvid: true,
                untagged: true
            },
            super::PortVlan {
                vid: 42,
                pvid: false,
                untagged: false
            },
        ]
    );
}
