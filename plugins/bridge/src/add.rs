//! ADD, in the reference's order: bridge, veth, port options, spoof check, IPAM, container
//! addresses and routes, gateway addresses, forwarding, masquerade, port-state wait.
//! Everything done for this attachment is undone if a later step fails.

use crate::config::{BridgeConf, mac_string};
use crate::container;
use crate::fail::{Context, fail, firewall_fail};
use crate::gateway::calc_gateways;
use crate::host;
use crate::rollback::Rollback;
use hostnet::firewall::{self, names, spoofcheck};
use hostnet::netlink::{Link, Netlink};
use libcni::netns::Netns;
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface};
use libcni::{Error, step, version};
use std::os::fd::AsFd;

/// Attempts at a free random host veth name.
const VETH_NAME_ATTEMPTS: usize = 10;

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = BridgeConf::load(&args.stdin_data, &args.args)?;
    if !conf.is_layer3() && !version::at_least(&args.config_version, "0.3.0")? {
        // The reference finds this out only after creating the veth.
        return Err(Error::internal("cannot convert: no valid IP addresses"));
    }
    let netns = Netns::open(&args.netns)
        .map_err(|e| fail(format!("failed to open netns {:?}", args.netns), e))?;
    let host = Netlink::current().context("failed to open netlink socket")?;
    let ctr = Netlink::in_netns(netns.as_fd())
        .context("failed to open netlink socket in the container")?;
    let mut rollback = Rollback::default();
    match add_attachment(args, &conf, &netns, &host, &ctr, &mut rollback) {
        Ok(result) => Ok(result),
        Err(e) => {
            rollback.run(&host, &conf, args);
            Err(e)
        }
    }
}

fn add_attachment(
    args: &CmdArgs,
    conf: &BridgeConf,
    netns: &Netns,
    host: &Netlink,
    ctr: &Netlink,
    rollback: &mut Rollback,
) -> Result<CniResult, Error> {
    let br = host::ensure_bridge(host, conf)?;
    step::point("bridge.bridge-created")?;
    let (host_veth, ctr_veth) = setup_veth(args, conf, netns, host, ctr, &br, rollback)?;
    let mut result = CniResult {
        cni_version: args.config_version.clone(),
        interfaces: vec![
            iface(&br.name, br.mac),
            iface(&host_veth.name, host_veth.mac),
            Interface {
                sandbox: args.netns.clone(),
                ..iface(&ctr_veth.name, ctr_veth.mac)
            },
        ],
        ..Default::default()
    };

    if conf.macspoofchk {
        rollback.spoofcheck = true;
        spoofcheck::setup(
            &args.container_id,
            &args.ifname,
            &host_veth.name,
            &mac_string(ctr_veth.mac),
        )
        .map_err(|e| {
            let reference = names::spoofcheck_ref(&args.container_id, &args.ifname);
            let chain = names::spoofcheck_iface_chain(&reference);
            let what = format!(
                "failed to set up mac spoof check for {:?} (nft chain {chain:?} in table bridge nat)",
                host_veth.name
            );
            firewall_fail(what, e)
        })?;
        step::point("bridge.spoofcheck-set")?;
    }

    let mut pinned_bridge = None;
    if conf.is_layer3() {
        let ipam = conf.ipam(args);
        let mut ipam_result = ipam.add()?;
        rollback.ipam = true;
        step::point("bridge.ipam-added")?;
        crate::ipam_result::check(&mut ipam_result)?;
        result.ips = ipam_result.ips;
        result.routes = ipam_result.routes;
        result.dns = ipam_result.dns;
        let gateways = calc_gateways(&mut result, conf)?;

        let has_v6 = result.ips.iter().any(|ip| ip.address.is_ipv6());
        container::set_sysctls(netns, &args.ifname, conf.enable_dad, has_v6)?;
        container::configure_iface(ctr, ctr_veth.index, &args.ifname, &result)?;

        let gw_link = if conf.vlan != 0 && conf.is_gateway {
            let vlan_if = host::ensure_vlan_interface(host, &br, conf)?;
            result.interfaces.push(iface(&vlan_if.name, vlan_if.mac));
            vlan_if
        } else {
            br.clone()
        };
        pinned_bridge = host::ensure_gateways(host, &gw_link, &gateways, conf.force_address)?
            .filter(|link| link.index == br.index);

        if conf.ip_masq {
            let ips: Vec<_> = result.ips.iter().map(|ip| ip.address).collect();
            rollback.ipmasq = ips.clone();
            let att = conf.attachment(args);
            firewall::setup_ipmasq(conf.ip_masq_backend, &att, &ips).map_err(|e| {
                firewall_fail(format!("failed to set up IP masquerading for {ips:?}"), e)
            })?;
            step::point("bridge.ipmasq-set")?;
        }
    } else if !conf.disable_container_interface {
        ctr.set_up(ctr_veth.index)
            .context(format!("failed to set {:?} up", args.ifname))?;
    }

    if !conf.disable_container_interface {
        host.wait_oper_up(host_veth.index)
            .map_err(|e| match e.last_state() {
                Some(state) => Error::internal(format!("bridge port in error state: {state}")),
                None => fail("failed to read bridge port state", e),
            })?;
    }
    // An unpinned bridge MAC follows the lowest port MAC, so it may have changed when our
    // port joined; unless the gateway setup just read and pinned it, read it again.
    let br_now = match pinned_bridge {
        Some(link) => link,
        None => host::bridge_by_name(host, &conf.bridge)?,
    };
    result.interfaces[0].mac = mac_string(br_now.mac);
    if let Some(dns) = conf.dns_override() {
        result.dns = dns.clone();
    }
    // Fail now (and roll back) rather than when skel prints an unconvertible result.
    result.to_value(&args.config_version)?;
    step::point("bridge.result-ready")?;
    Ok(result)
}

/// Creates the veth pair with the container end born in the container, attaches the host
/// end to the bridge with the port options, and returns (host end, container end).
fn setup_veth(
    args: &CmdArgs,
    conf: &BridgeConf,
    netns: &Netns,
    host: &Netlink,
    ctr: &Netlink,
    br: &Link,
    rollback: &mut Rollback,
) -> Result<(Link, Link), Error> {
    if ctr
        .link_by_name(&args.ifname)
        .context("failed to look up container interface")?
        .is_some()
    {
        return Err(Error::internal(format!(
            "container veth name ({:?}) already exists",
            args.ifname
        )));
    }
    let mut host_name = host::random_veth_name()?;
    let mut attempt = 1;
    loop {
        match host.create_veth(&host_name, &args.ifname, conf.mtu, conf.mac, netns.as_fd()) {
            Ok(()) => {
                rollback.host_veth = Some(host_name.clone());
                step::point("bridge.veth-created")?;
                break;
            }
            Err(e) if e.is_exists() && attempt < VETH_NAME_ATTEMPTS => {
                attempt += 1;
                host_name = host::random_veth_name()?;
            }
            Err(e) => {
                return Err(fail(
                    format!("failed to make veth pair for {:?}", args.ifname),
                    e,
                ));
            }
        }
    }
    let host_veth = host::link_named(host, &host_name, "failed to lookup")?;
    let ctr_veth = host::link_named(ctr, &args.ifname, "failed to lookup")?;

    host.set_master(host_veth.index, br.index).context(format!(
        "failed to connect {host_name:?} to bridge {}",
        br.name
    ))?;
    host.set_port_options(
        host_veth.index,
        Some(conf.hairpin_mode),
        conf.port_isolation.then_some(true),
    )
    .context(format!("failed to set up port options for {host_name}"))?;
    crate::vlan::configure_port(host, host_veth.index, conf).map_err(|e| {
        fail(
            format!("failed to setup vlan tag on interface {host_name:?}"),
            e,
        )
    })?;
    host.set_up(host_veth.index)
        .context(format!("failed to set {host_name:?} up"))?;
    step::point("bridge.port-options-set")?;
    // We own the routes of the host end too.
    if let Ok(path) = hostnet::sysctl::path(&["net", "ipv6", "conf", &host_name, "accept_ra"]) {
        let _ = hostnet::sysctl::ensure_path(&path, "0");
    }
    Ok((host_veth, ctr_veth))
}

fn iface(name: &str, mac: Option<[u8; 6]>) -> Interface {
    Interface {
        name: name.to_string(),
        mac: mac_string(mac),
        ..Default::default()
    }
}
