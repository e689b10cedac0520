//! DEL: best effort and idempotent. Without prevResult's IPs the container link goes
//! first (it collects the addresses whose masquerade rules must go; if it fails, DEL stops
//! there), then the IP reservation and the firewall rules. With them, all steps run at once
//! (the reference releases the IPs even before the link). Either way a failed firewall or
//! IPAM step does not stop the others, and every failure is returned, in step order
//! ([`BridgeError::all`]: the first one's code, the messages joined with "; ").
//!
//! A missing, empty or broken netns, a missing link or a missing IPAM record is not an
//! error; `prevResult` supplies the IPs (and the host veth, which outlives an unreachable
//! but living netns) when the container side is gone. A host veth is deleted on
//! prevResult's word only when it provably is this attachment's ([`owned_by_us`]).

use crate::config::{BridgeConf, parse_mac};
use crate::error::{BridgeError, During, NotOurs, Source};
use crate::ipam::Ipam;
use hostnet::kernel::{Kernel, Links};
use hostnet::netlink::Link;
use ipnetwork::IpNetwork;
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface};
use libcni::version::Version;
use sysproc::netns::NetnsError;
use sysproc::{step, task};

/// What DEL found of the container side.
enum ContainerSide<N> {
    /// The container interface was deleted (its veth peer with it); these were its
    /// global addresses.
    Deleted(Vec<IpNetwork>),
    /// The namespace is there but holds no such interface.
    NoLink(N),
    /// No namespace given, or it is gone, or the path is not a namespace.
    Unreachable,
}

pub fn del<K: Kernel>(k: &K, ipam: &dyn Ipam, args: &CmdArgs) -> Result<(), BridgeError> {
    let conf = BridgeConf::load_for_teardown(&args.stdin_data, &args.args, "DEL")?;
    let prev = prev_result(&conf, args.version);
    let prev_ips: Vec<IpNetwork> = prev
        .iter()
        .flat_map(|r| &r.ips)
        .map(|ip| ip.address)
        .collect();
    if prev_ips.is_empty() {
        // The masquerade rules to remove are known only once the link's addresses are;
        // then the three remaining steps, none waiting for another, run at once.
        let ips = delete_links(k, args, &conf, prev.as_ref(), &prev_ips)?;
        let results = std::thread::scope(|s| {
            let released = task::start(s, || release_ipam(ipam, args, &conf));
            let spoofcheck = task::start(s, || remove_spoofcheck(k, args, &conf));
            let ipmasq = remove_ipmasq(k, args, &conf, &ips);
            [released.join(), spoofcheck.join(), ipmasq]
        });
        return BridgeError::all(results);
    }
    // prevResult names the IPs: nothing else waits for the links, whose delete waits for
    // the kernel (an RCU grace period), so the other steps run meanwhile.
    let (links, released, spoofcheck, ipmasq) = std::thread::scope(|s| {
        let links = task::start(s, || delete_links(k, args, &conf, prev.as_ref(), &prev_ips));
        let released = task::start(s, || release_ipam(ipam, args, &conf));
        let spoofcheck = remove_spoofcheck(k, args, &conf);
        let ipmasq = remove_ipmasq(k, args, &conf, &prev_ips);
        (links.join(), released.join(), spoofcheck, ipmasq)
    });
    // A link address prevResult did not name (stale prevResult) may have rules of its own.
    // The teardown above removed the attachment's rules of prevResult's families whatever
    // their addresses (by chain name); only another family's are left to find.
    let other_family = |ip: &&IpNetwork| !prev_ips.iter().any(|p| p.is_ipv4() == ip.is_ipv4());
    let extra: Vec<IpNetwork> = match &links {
        Ok(ips) => ips.iter().filter(other_family).copied().collect(),
        Err(_) => Vec::new(),
    };
    let extra_masq = match extra.is_empty() {
        true => Ok(()),
        false => remove_ipmasq(k, args, &conf, &extra),
    };
    BridgeError::all([links.map(drop), released, spoofcheck, ipmasq, extra_masq])
}

/// Deletes the veth pair; returns `prev_ips` and the other global addresses the container
/// interface had.
fn delete_links<K: Kernel>(
    k: &K,
    args: &CmdArgs,
    conf: &BridgeConf,
    prev: Option<&CniResult>,
    prev_ips: &[IpNetwork],
) -> Result<Vec<IpNetwork>, BridgeError> {
    let mut ips = prev_ips.to_vec();
    match delete_container_link(k, args)? {
        ContainerSide::Deleted(addrs) => {
            for ip in addrs {
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
        }
        ContainerSide::NoLink(ns) => delete_host_veths(k, conf, prev, Some(&ns))?,
        ContainerSide::Unreachable => delete_host_veths(k, conf, prev, None)?,
    }
    step::point("bridge.links-deleted")?;
    Ok(ips)
}

fn release_ipam(ipam: &dyn Ipam, args: &CmdArgs, conf: &BridgeConf) -> Result<(), BridgeError> {
    if conf.is_layer3() {
        ipam.run(&conf.ipam(args), "DEL")?;
        step::point("bridge.ipam-released")?;
    }
    Ok(())
}

fn remove_spoofcheck<K: Kernel>(
    k: &K,
    args: &CmdArgs,
    conf: &BridgeConf,
) -> Result<(), BridgeError> {
    if conf.macspoofchk {
        k.remove_spoof_check(&args.container_id, &args.ifname)
            .during(|| "failed to remove mac spoof check")?;
        step::point("bridge.spoofcheck-removed")?;
    }
    Ok(())
}

fn remove_ipmasq<K: Kernel>(
    k: &K,
    args: &CmdArgs,
    conf: &BridgeConf,
    ips: &[IpNetwork],
) -> Result<(), BridgeError> {
    if conf.is_layer3() && conf.ip_masq {
        k.unmasquerade(&conf.attachment(args), ips)
            .during(|| "failed to remove IP masquerading")?;
        step::point("bridge.ipmasq-removed")?;
    }
    Ok(())
}

/// Deletes the container interface and returns its global addresses.
fn delete_container_link<K: Kernel>(
    k: &K,
    args: &CmdArgs,
) -> Result<ContainerSide<K::Netns>, BridgeError> {
    if args.netns.is_empty() {
        return Ok(ContainerSide::Unreachable);
    }
    let netns = match k.open_netns(&args.netns, &args.opened_netns) {
        Ok(ns) => ns,
        Err(e @ (NetnsError::NotExist(_) | NetnsError::NotNetns { .. })) => {
            libcni::log!("bridge: DEL: container namespace is gone ({e}); cleaning up the rest");
            return Ok(ContainerSide::Unreachable);
        }
        Err(e) => {
            return Err(e.at(format!("failed to open netns {path:?}", path = args.netns)));
        }
    };
    let nl = k
        .links_in(&netns)
        .during(|| "failed to open netlink socket in the container")?;
    let Some(link) = nl
        .link_by_name(&args.ifname)
        .during(|| format!("failed to lookup {name:?}", name = args.ifname))?
    else {
        return Ok(ContainerSide::NoLink(netns));
    };
    let addrs = nl.addresses(Some(link.index)).during(|| {
        format!(
            "failed to get IP addresses for {ifname:?}",
            ifname = args.ifname
        )
    })?;
    match nl.delete_link(link.index) {
        Err(e) if !e.is_no_device() => {
            return Err(e.at(format!("failed to delete {name:?}", name = args.ifname)));
        }
        _ => {}
    }
    Ok(ContainerSide::Deleted(
        addrs
            .into_iter()
            .map(|a| a.addr)
            .filter(is_global_unicast)
            .collect(),
    ))
}

/// The container end could not be reached, but its namespace may still be alive (empty
/// CNI_NETNS, a path that is no netns): delete the host ends recorded in prevResult that
/// are still veth ports of our bridge and provably this attachment's. A dead namespace
/// took the pair with it already.
fn delete_host_veths<K: Kernel>(
    k: &K,
    conf: &BridgeConf,
    prev: Option<&CniResult>,
    named_ns: Option<&K::Netns>,
) -> Result<(), BridgeError> {
    let Some(prev) = prev else {
        return Ok(());
    };
    let host = k.host().during(|| "failed to open netlink socket")?;
    let Some(br) = host
        .link_by_name(&conf.bridge)
        .during(|| format!("failed to lookup {name:?}", name = conf.bridge))?
    else {
        return Ok(());
    };
    for veth in crate::host::result_veths(&host, prev, &conf.bridge) {
        let (entry, link) = veth?;
        if link.master != Some(br.index) {
            continue;
        }
        if let Err(why) = owned_by_us(k, &host, entry, &link, named_ns) {
            libcni::log!("bridge: DEL: leaving {:?} alone: {why}", entry.name);
            continue;
        }
        match host.delete_link(link.index) {
            Err(e) if !e.is_no_device() => {
                return Err(e.at(format!("failed to delete {name:?}", name = entry.name)));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A cached prevResult can be stale and veth names are reused, so a host veth is this
/// attachment's only when its MAC is the one the result recorded (the kernel gives every
/// veth a random MAC) and, when this DEL names a living namespace, its peer lives there.
fn owned_by_us<K: Kernel>(
    k: &K,
    host: &K::Conn,
    entry: &Interface,
    link: &Link,
    named_ns: Option<&K::Netns>,
) -> Result<(), NotOurs> {
    let recorded = parse_mac(&entry.mac).ok_or(NotOurs::NoRecordedMac)?;
    if link.mac != Some(recorded) {
        return Err(NotOurs::MacDiffers {
            recorded: entry.mac.clone(),
        });
    }
    if let Some(ns) = named_ns {
        let ns_id = k.netns_id(host, ns).map_err(NotOurs::PeerUnknown)?;
        if ns_id.is_none() || link.peer_netns_id != ns_id {
            return Err(NotOurs::PeerElsewhere);
        }
    }
    Ok(())
}

fn is_global_unicast(a: &IpNetwork) -> bool {
    match a.ip() {
        std::net::IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4.is_broadcast())
        }
        std::net::IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unspecified()
                || v6.is_unicast_link_local())
        }
    }
}

/// What the runtime recorded for this attachment, if it sent a usable prevResult.
fn prev_result(conf: &BridgeConf, version: Version) -> Option<CniResult> {
    let prev = conf.common.prev_result.as_ref()?;
    CniResult::parse_at(prev, version)
        .map_err(|e| libcni::log!("bridge: DEL: ignoring unreadable prevResult: {e}"))
        .ok()
}
