//! The overlay on the real kernel, over [`Netlink`]: the device, and each peer's FDB entry,
//! neighbour entries and on-link routes (marked [`ROUTE_PROTO`]) on it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

use super::overlay::{OverlayPeer, VXLAN_DEVICE, VxlanSpec, overlay_gateway, vtep_mac};
use super::{NodeNetError, Op, ROUTE_PROTO, Refusal};
use crate::netlink::{FdbEntry, IpFamily, MAIN_TABLE, Netlink, NetlinkError, VxlanParams};

fn err(op: &Op, e: NetlinkError) -> NodeNetError {
    NodeNetError::new(op.clone(), e)
}

fn params(spec: &VxlanSpec) -> VxlanParams {
    VxlanParams {
        vni: spec.vni,
        port: spec.port,
        local: spec.local,
        learning: false,
    }
}

/// The index of our device, if there is one; a non-VXLAN link of its name is an error.
fn our_device(nl: &Netlink, op: &Op) -> Result<Option<(u32, Option<VxlanParams>)>, NodeNetError> {
    let Some(link) = nl.link_by_name(VXLAN_DEVICE).map_err(|e| err(op, e))? else {
        return Ok(None);
    };
    if link.kind.as_deref() != Some("vxlan") {
        let kind = link.kind.unwrap_or_else(|| "plain".to_string());
        return Err(NodeNetError::new(op.clone(), Refusal::NotOurLink { kind }));
    }
    let current = nl.vxlan_params(link.index).map_err(|e| err(op, e))?;
    Ok(Some((link.index, current)))
}

fn device_index(nl: &Netlink, op: &Op) -> Result<u32, NodeNetError> {
    match our_device(nl, op)? {
        Some((index, _)) => Ok(index),
        None => Err(NodeNetError::new(op.clone(), Refusal::NoDevice)),
    }
}

pub(super) fn ensure_vxlan(nl: &Netlink, spec: &VxlanSpec) -> Result<(), NodeNetError> {
    let op = &Op::EnsureVxlan;
    let want = params(spec);
    let mac = vtep_mac(spec.local);
    let mut index = None;
    if let Some((i, current)) = our_device(nl, op)? {
        let link = nl.link_by_index(i).map_err(|e| err(op, e))?;
        if current == Some(want) && link.mtu == spec.mtu() && link.mac == Some(mac) {
            index = Some(i);
        } else {
            nl.delete_link(i).map_err(|e| err(op, e))?;
        }
    }
    let index = match index {
        Some(i) => i,
        None => create(nl, spec, &want, mac)?,
    };
    set_addresses(nl, index, &spec.addrs()).map_err(|e| err(op, e))?;
    nl.set_up(index).map_err(|e| err(op, e))
}

/// Makes the device; first refuses, naming it, when another VXLAN device has our VNI and
/// port over the same family (the kernel's EEXIST would not say which).
fn create(
    nl: &Netlink,
    spec: &VxlanSpec,
    want: &VxlanParams,
    mac: [u8; 6],
) -> Result<u32, NodeNetError> {
    let op = &Op::EnsureVxlan;
    let v6 = spec.local.is_ipv6();
    let clash = nl
        .vxlan_devices()
        .map_err(|e| err(op, e))?
        .into_iter()
        .find(|d| d.vni == spec.vni && d.port == spec.port && d.ipv6 == v6);
    if let Some(d) = clash {
        let taken = Refusal::VniInUse {
            device: d.name,
            vni: d.vni,
            port: d.port,
        };
        return Err(NodeNetError::new(op.clone(), taken));
    }
    nl.create_vxlan(VXLAN_DEVICE, want, spec.mtu(), mac)
        .map_err(|e| err(op, e))?;
    nl.link_by_name(VXLAN_DEVICE)
        .map_err(|e| err(op, e))?
        .map(|l| l.index)
        .ok_or_else(|| NodeNetError::new(op.clone(), Refusal::Vanished))
}

/// The device's global addresses made exactly `want` (its link-local one stays). IPv6
/// without duplicate detection: the address is this node's by its pod range. Losing a
/// family's last address drops that family's routes through the device: the caller lists
/// the peers after any change of the spec (see [`super::NodeNet::ensure_vxlan`]).
fn set_addresses(nl: &Netlink, index: u32, want: &[IpNetwork]) -> Result<(), NetlinkError> {
    const RT_SCOPE_UNIVERSE: u8 = 0;
    let have: Vec<IpNetwork> = nl
        .addresses(Some(index))?
        .into_iter()
        .filter(|a| a.scope == RT_SCOPE_UNIVERSE)
        .map(|a| a.addr)
        .collect();
    // New ones first: the kernel flushes a family's routes through a device that loses
    // its last address of that family.
    for a in want.iter().filter(|a| !have.contains(a)) {
        nl.add_address_nodad(index, *a)?;
    }
    for a in have.iter().filter(|a| !want.contains(a)) {
        gone(nl.del_address(index, *a))?;
    }
    Ok(())
}

pub(super) fn remove_vxlan(nl: &Netlink) -> Result<(), NodeNetError> {
    let op = &Op::RemoveVxlan;
    match our_device(nl, op)? {
        Some((index, _)) => match nl.delete_link(index) {
            Err(e) if e.is_no_device() => Ok(()),
            other => other.map_err(|e| err(op, e)),
        },
        None => Ok(()),
    }
}

/// Our routes through the device `index`: (pod range, gateway).
pub(super) fn overlay_routes(
    nl: &Netlink,
    index: u32,
) -> Result<Vec<(IpNetwork, IpAddr)>, NetlinkError> {
    let mut out = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        out.extend(
            nl.routes_of_protocol(family, ROUTE_PROTO)?
                .into_iter()
                .filter(|r| r.table == MAIN_TABLE && r.oif == Some(index))
                .filter_map(|r| Some((r.dst, r.gateway?))),
        );
    }
    Ok(out)
}

/// The index of our device when there is one (no error for a foreign link of its name:
/// then nothing is ours).
pub(super) fn device_if_ours(nl: &Netlink) -> Result<Option<u32>, NetlinkError> {
    Ok(nl
        .link_by_name(VXLAN_DEVICE)?
        .filter(|l| l.kind.as_deref() == Some("vxlan"))
        .map(|l| l.index))
}

pub(super) fn overlay_peers(nl: &Netlink) -> Result<Vec<OverlayPeer>, NodeNetError> {
    let op = &Op::ListOverlayPeers;
    let Some(index) = device_if_ours(nl).map_err(|e| err(op, e))? else {
        return Ok(Vec::new());
    };
    let fdb = nl.fdb_entries(index).map_err(|e| err(op, e))?;
    let neigh: BTreeMap<IpAddr, [u8; 6]> = nl
        .neighbours(index)
        .map_err(|e| err(op, e))?
        .into_iter()
        .filter(|n| n.permanent)
        .map(|n| (n.ip, n.mac))
        .collect();
    let by_mac: BTreeMap<[u8; 6], IpAddr> = fdb.iter().map(|f| (f.mac, f.dst)).collect();
    let mut peers: BTreeMap<IpAddr, Vec<IpNetwork>> =
        fdb.iter().map(|f| (f.dst, Vec::new())).collect();
    for (dst, gw) in overlay_routes(nl, index).map_err(|e| err(op, e))? {
        let node = neigh.get(&gw).and_then(|mac| by_mac.get(mac)).copied();
        let node = node.unwrap_or(match dst {
            IpNetwork::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpNetwork::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        });
        peers.entry(node).or_default().push(dst);
    }
    Ok(peers
        .into_iter()
        .map(|(ip, cidrs)| OverlayPeer::new(ip, cidrs))
        .collect())
}

pub(super) fn add_overlay_peer(nl: &Netlink, peer: &OverlayPeer) -> Result<(), NodeNetError> {
    let op = &Op::AddOverlayPeer(peer.clone());
    let index = device_index(nl, op)?;
    let mac = peer.mac();
    let ours: Vec<IpNetwork> = overlay_routes(nl, index)
        .map_err(|e| err(op, e))?
        .into_iter()
        .map(|(dst, _)| dst)
        .collect();
    // Refuse before changing anything: a range someone else's route (or our direct one)
    // holds stays theirs.
    for cidr in &peer.pod_cidrs {
        if ours.contains(cidr) {
            continue;
        }
        if let Ok(held) = nl.route_to(cidr.network(), true)
            && held.dst == *cidr
            && held.table == MAIN_TABLE
        {
            return Err(NodeNetError::new(op.clone(), Refusal::RouteExists(*cidr)));
        }
    }
    nl.replace_fdb(
        index,
        &FdbEntry {
            mac,
            dst: peer.node_ip,
        },
    )
    .map_err(|e| err(op, e))?;
    for cidr in &peer.pod_cidrs {
        let gw = overlay_gateway(cidr);
        nl.replace_neighbour(index, gw, mac)
            .map_err(|e| err(op, e))?;
        nl.set_onlink_route(*cidr, gw, index, ROUTE_PROTO, ours.contains(cidr))
            .map_err(|e| err(op, e))?;
    }
    Ok(())
}

fn gone<T>(r: Result<T, NetlinkError>) -> Result<(), NetlinkError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other.map(drop),
    }
}

pub(super) fn del_overlay_peer(nl: &Netlink, peer: &OverlayPeer) -> Result<(), NodeNetError> {
    let op = &Op::DeleteOverlayPeer(peer.clone());
    let Some(index) = device_if_ours(nl).map_err(|e| err(op, e))? else {
        return Ok(());
    };
    for cidr in &peer.pod_cidrs {
        let gw = overlay_gateway(cidr);
        gone(nl.del_onlink_route(*cidr, gw, index, ROUTE_PROTO)).map_err(|e| err(op, e))?;
        gone(nl.del_neighbour(index, gw)).map_err(|e| err(op, e))?;
    }
    if !peer.node_ip.is_unspecified() {
        let entry = FdbEntry {
            mac: peer.mac(),
            dst: peer.node_ip,
        };
        gone(nl.del_fdb(index, &entry)).map_err(|e| err(op, e))?;
    }
    Ok(())
}
