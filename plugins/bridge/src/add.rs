//! ADD, in the reference's order (bridge, veth, port options, spoof check, IPAM, container
//! addresses and routes, gateway addresses, forwarding, masquerade, port-state wait) but
//! for two pairs of independent steps that run at once, for speed (`BENCHMARKS.md`).
//! The plan, one phase after the other ([`Attach::run`]; `tests/add.rs`'s `STEPS` checks
//! the undo after a failure at each step):
//!
//! | phase | on this thread | at once, on its own thread | a failure undoes (`rollback.rs`) |
//! |---|---|---|---|
//! | 1 | the container's interface name is free | | nothing |
//! | 2 | bridge, veth, port options, spoof check; then the masquerade is readied (its `iptables-restore` starts) | IPAM ADD | spoof check, veth, IP |
//! | 3 | container sysctls, addresses, routes; gateways; forwarding; port-state wait | the masquerade rules | masquerade, spoof check, veth, IP |
//! | 4 | the bridge MAC re-read, the result rendered | | all of the above |
//!
//! IPAM waits for phase 1, so an ADD repeated for a living attachment never touches its
//! address. A failure on either side of a phase undoes both sides; both are reported (this
//! thread's first). Every child process dies with ours (`sysproc::tie::die_with_caller`):
//! the masquerade's tool is started on this thread, which lives as long as the plugin.

use crate::config::{BridgeConf, mac_string};
use crate::container;
use crate::error::{BridgeError, During, Source};
use crate::gateway::{Gateways, calc_gateways};
use crate::host;
use crate::ipam::Ipam;
use crate::rollback::Rollback;
use hostnet::firewall::spoofcheck;
use hostnet::kernel::{Kernel, Links, MasqueradeReady};
use hostnet::netlink::Link;
use ipnetwork::IpNetwork;
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface};
use libcni::version::Version;
use sysproc::step;
use sysproc::task;

/// The links ADD makes or joins: the bridge, the host end, the container end.
type Made = (Link, Link, Link);

/// Attempts at a free random host veth name.
const VETH_NAME_ATTEMPTS: usize = 10;

/// ADD: returns the JSON skel prints for the result (rendered once, at the config's
/// version, before ADD returns: a result that cannot be rendered rolls ADD back).
pub fn add<K: Kernel>(k: &K, ipam: &dyn Ipam, args: &CmdArgs) -> Result<String, BridgeError> {
    let conf = BridgeConf::load(&args.stdin_data, &args.args)?;
    if !conf.is_layer3() && args.version < Version::V0_3_0 {
        // The reference finds this out only after creating the veth.
        return Err(BridgeError::NoValidIps);
    }
    let netns = k
        .open_netns(&args.netns, &args.opened_netns)
        .during(|| format!("failed to open netns {path:?}", path = args.netns))?;
    let host = k.host().during(|| "failed to open netlink socket")?;
    let ctr = k
        .links_in(&netns)
        .during(|| "failed to open netlink socket in the container")?;
    let mut rollback = Rollback::default();
    let attach = Attach {
        k,
        ipam,
        args,
        conf: &conf,
        netns: &netns,
        host: &host,
        ctr: &ctr,
    };
    match attach.run(&mut rollback) {
        Ok(result) => Ok(result),
        Err(e) => {
            rollback.run(k, ipam, &host, &conf, args);
            Err(e)
        }
    }
}

/// One ADD: the call, its config, and the node as it sees it.
struct Attach<'a, K: Kernel> {
    k: &'a K,
    ipam: &'a dyn Ipam,
    args: &'a CmdArgs,
    conf: &'a BridgeConf,
    netns: &'a K::Netns,
    host: &'a K::Conn,
    ctr: &'a K::Conn,
}

impl<K: Kernel> Attach<'_, K> {
    fn run(&self, rollback: &mut Rollback) -> Result<String, BridgeError> {
        let Attach {
            k,
            args,
            conf,
            host,
            ctr,
            ..
        } = *self;
        // Phase 1.
        if ctr
            .link_by_name(&args.ifname)
            .during(|| "failed to look up container interface")?
            .is_some()
        {
            return Err(BridgeError::ContainerIfaceExists {
                ifname: args.ifname.clone(),
            });
        }
        let ((br, host_veth, ctr_veth), ipam_result, masq_ready) = self.links_and_ipam(rollback)?;
        let mut result = CniResult {
            // Skel admits only the versions it supports, each spelled as `Version` prints it.
            cni_version: args.version.to_string(),
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

        let mut gateways = None;
        if let Some(mut ipam_result) = ipam_result {
            step::point("bridge.ipam-added")?;
            crate::ipam_result::check(&mut ipam_result)?;
            result.ips = ipam_result.ips;
            result.routes = ipam_result.routes;
            result.dns = ipam_result.dns;
            gateways = Some(calc_gateways(&mut result, conf)?);
        }
        let masq_ips: Vec<_> = match conf.ip_masq {
            true => result.ips.iter().map(|ip| ip.address).collect(),
            false => Vec::new(),
        };
        rollback.ipmasq = masq_ips.clone();
        // Phase 3: the container and gateways here, the masquerade rules alongside (neither
        // needs the other, and the rules' exec is ADD's longest step).
        let (configured, masq) = task::alongside(
            || self.configure(&br, &host_veth, &ctr_veth, gateways, &mut result),
            (!masq_ips.is_empty())
                .then_some(|| set_up_ipmasq(k, args, conf, &masq_ips, masq_ready)),
        );
        let (pinned_bridge, ()) = BridgeError::both(configured, masq.unwrap_or(Ok(())))?;
        // Phase 4.
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
        // Rendered here, once: an unconvertible result fails (and rolls back) ADD.
        let json = result.to_json_at(args.version)?;
        step::point("bridge.result-ready")?;
        Ok(json)
    }

    /// Phase 2: the links here, IPAM alongside; the masquerade's tool starts up while IPAM
    /// finishes (it needs IPAM's addresses). Returns the links, IPAM's result (none in L2
    /// mode) and what the masquerade may use.
    fn links_and_ipam(
        &self,
        rollback: &mut Rollback,
    ) -> Result<(Made, Option<CniResult>, MasqueradeReady), BridgeError> {
        let Attach {
            k,
            ipam,
            args,
            conf,
            ..
        } = *self;
        let ipam_conf = conf.is_layer3().then(|| conf.ipam(args));
        let ((links, masq_ready), ipam_result) = task::alongside(
            || {
                let links = self.make_links(rollback);
                let masq_ready = if conf.ip_masq && ipam_conf.is_some() && links.is_ok() {
                    k.prepare_masquerade(conf.ip_masq_backend)
                } else {
                    MasqueradeReady::default()
                };
                (links, masq_ready)
            },
            ipam_conf.as_ref().map(|delegate| || ipam.add(delegate)),
        );
        let ipam_result = ipam_result.transpose().map_err(BridgeError::from);
        rollback.ipam = matches!(ipam_result, Ok(Some(_)));
        let (links, ipam_result) = BridgeError::both(links, ipam_result)?;
        Ok((links, ipam_result, masq_ready))
    }

    /// With IPAM's addresses in `result` and their `gateways`: the container's sysctls,
    /// addresses and routes, the gateway addresses and forwarding; without, the container end
    /// only goes up. Then waits for the port to forward. Returns the bridge as the gateway
    /// setup pinned it, if it did.
    fn configure(
        &self,
        br: &Link,
        host_veth: &Link,
        ctr_veth: &Link,
        gateways: Option<Gateways>,
        result: &mut CniResult,
    ) -> Result<Option<Link>, BridgeError> {
        let Attach {
            k,
            args,
            conf,
            netns,
            host,
            ctr,
            ..
        } = *self;
        let mut pinned_bridge = None;
        if let Some(gateways) = gateways {
            let has_v6 = result.ips.iter().any(|ip| ip.address.is_ipv6());
            container::set_sysctls(k, netns, &args.ifname, conf.enable_dad, has_v6)?;
            container::configure_iface(ctr, ctr_veth.index, &args.ifname, result)?;

            let gw_link = if conf.vlan != 0 && conf.is_gateway {
                let vlan_if = host::ensure_vlan_interface(k, host, br, conf)?;
                result.interfaces.push(iface(&vlan_if.name, vlan_if.mac));
                vlan_if
            } else {
                br.clone()
            };
            pinned_bridge =
                host::ensure_gateways(k, host, &gw_link, &gateways, conf.force_address)?
                    .filter(|link| link.index == br.index);
        } else if !conf.disable_container_interface {
            ctr.set_up(ctr_veth.index)
                .during(|| format!("failed to set {name:?} up", name = args.ifname))?;
        }

        if !conf.disable_container_interface {
            host.wait_oper_up(host_veth.index)
                .map_err(|e| match e.last_state() {
                    Some(_) => BridgeError::PortState { source: e },
                    None => e.at("failed to read bridge port state"),
                })?;
        }
        Ok(pinned_bridge)
    }

    /// The bridge, the veth pair and the spoof check: returns (bridge, host end, container end).
    fn make_links(&self, rollback: &mut Rollback) -> Result<Made, BridgeError> {
        let Attach {
            k,
            args,
            conf,
            host,
            ..
        } = *self;
        let br = host::ensure_bridge(k, host, conf)?;
        step::point("bridge.bridge-created")?;
        let (host_veth, ctr_veth) = self.setup_veth(&br, rollback)?;
        if conf.macspoofchk {
            rollback.spoofcheck = true;
            k.spoof_check(
                &args.container_id,
                &args.ifname,
                &host_veth.name,
                &mac_string(ctr_veth.mac),
            )
            .during(|| {
                let place = spoofcheck::rules_place(&args.container_id, &args.ifname);
                format!(
                    "failed to set up mac spoof check for {:?} ({place})",
                    host_veth.name
                )
            })?;
            step::point("bridge.spoofcheck-set")?;
        }
        Ok((br, host_veth, ctr_veth))
    }

    /// Creates the veth pair with the container end born in the container, attaches the host
    /// end to the bridge with the port options, and returns (host end, container end).
    fn setup_veth(&self, br: &Link, rollback: &mut Rollback) -> Result<(Link, Link), BridgeError> {
        let Attach {
            k,
            args,
            conf,
            netns,
            host,
            ctr,
            ..
        } = *self;
        let mut host_name = host::random_veth_name()?;
        let mut attempt = 1;
        loop {
            match k.create_veth(host, &host_name, &args.ifname, conf.mtu, conf.mac, netns) {
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
                    return Err(e.at(format!(
                        "failed to make veth pair for {ifname:?}",
                        ifname = args.ifname
                    )));
                }
            }
        }
        let host_veth = host::link_named(host, &host_name, "failed to lookup")?;
        let ctr_veth = host::link_named(ctr, &args.ifname, "failed to lookup")?;

        host.set_master(host_veth.index, br.index).during(|| {
            format!(
                "failed to connect {host_name:?} to bridge {bridge}",
                bridge = br.name
            )
        })?;
        host.set_port_options(
            host_veth.index,
            Some(conf.hairpin_mode),
            conf.port_isolation.then_some(true),
        )
        .during(|| format!("failed to set up port options for {host_name}"))?;
        crate::vlan::configure_port(host, host_veth.index, conf)
            .during(|| format!("failed to setup vlan tag on interface {host_name:?}"))?;
        host.set_up(host_veth.index)
            .during(|| format!("failed to set {host_name:?} up"))?;
        step::point("bridge.port-options-set")?;
        // We own the routes of the host end too.
        let _ = k.host_sysctl(&["net", "ipv6", "conf", &host_name, "accept_ra"], "0");
        Ok((host_veth, ctr_veth))
    }
}

fn set_up_ipmasq<K: Kernel>(
    k: &K,
    args: &CmdArgs,
    conf: &BridgeConf,
    ips: &[IpNetwork],
    ready: MasqueradeReady,
) -> Result<(), BridgeError> {
    let att = conf.attachment(args);
    k.masquerade(conf.ip_masq_backend, &att, ips, ready)
        .during(|| format!("failed to set up IP masquerading for {ips:?}"))?;
    step::point("bridge.ipmasq-set")?;
    Ok(())
}

fn iface(name: &str, mac: Option<[u8; 6]>) -> Interface {
    Interface {
        name: name.to_string(),
        mac: mac_string(mac),
        ..Default::default()
    }
}
