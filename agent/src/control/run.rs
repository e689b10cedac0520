//! The three modes: one pass (--once), the node agent (the DaemonSet), --uninstall.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hostnet::node::{HostNodeNet, NodeNet, NodeNetError, PolicyNet};

use crate::backoff::Backoff;
use crate::config::Args;
use crate::control::agent;
use crate::control::signals::Stop;
use crate::error::RunError;
use crate::files::{Installer, atomic, binaries};
use crate::kube::api::{ApiError, Client};
use crate::kube::watcher::Shared;
use crate::log;
use crate::policy::PolicyKernel;
use crate::policy::dumps::Dump;
use crate::serve::Metrics;

/// Retry delays while the API server fails or the node has no podCIDR (--once): 1 s
/// doubling up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The API client the flags describe.
pub fn client(args: &Args) -> Result<Client, RunError> {
    Ok(Client::new(
        args.api_server().map_err(RunError::Setup)?,
        args.token_file.clone(),
        args.ca_file.clone(),
    ))
}

/// One pass: the node's podCIDRs (waiting at most --wait for them), then the binaries,
/// then the conflist. Nothing is written before the podCIDRs are known and valid.
pub fn once(args: &Args, stop: &Stop) -> Result<(), RunError> {
    let client = client(args)?;
    let installer = Installer::new(args)?;
    let deadline = Instant::now() + args.wait();
    let mut backoff = Backoff::new(MAX_BACKOFF);
    let cidrs = loop {
        let reason = match client.pod_cidrs(&installer.node) {
            Ok(cidrs) if !cidrs.is_empty() => break cidrs,
            Ok(_) => RunError::NoPodCidrs(installer.waiting()),
            Err(e @ (ApiError::BadNode { .. } | ApiError::File { .. } | ApiError::NoCaCert(_))) => {
                return Err(e.into());
            }
            Err(e) => e.into(),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RunError::GaveUp {
                wait: args.wait,
                last: Box::new(reason),
            });
        }
        log(&format!("{reason} (retrying)"));
        if let Some(sig) = stop.sleep(backoff.take_exact().min(left)) {
            return Err(RunError::Stopped(sig));
        }
    };
    agent::free_stale_leases(args);
    installer.put_binaries()?;
    // Without the Node list it cannot tell whether a peer needs the overlay: the agent
    // lowers the MTU when one does.
    let mtu = hostnet::node::HostNodeNet::current()
        .ok()
        .and_then(|net| net.default_route_mtu().ok().flatten());
    Ok(installer.put_conflist(&cidrs, mtu)?)
}

/// The node agent until SIGTERM/SIGINT (Ok then): see `agent`.
pub fn daemon(args: &Args, stop: Stop) -> Result<(), RunError> {
    let client = client(args)?;
    let installer = Installer::new(args)?;
    // With --files-only only to read the MTU from.
    let net = match hostnet::node::HostNodeNet::current() {
        Ok(net) => Some(net),
        Err(_) if args.files_only => None,
        Err(e) => {
            log(&format!(
                "error: {e}: no routes or rules on this node, only its files (never ready)"
            ));
            None
        }
    };
    let shared = Arc::new(Shared::default());
    {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                loop {
                    if let Some(sig) = stop.sleep(Duration::from_secs(3600)) {
                        shared.request_stop(sig);
                        return;
                    }
                }
            })
            .map_err(|e| RunError::Setup(format!("starting the signal thread: {e}")))?;
    }
    log(&format!(
        "node {}: installing {} binaries into {}, conflist {}; watching every Node",
        installer.node,
        installer.binaries(),
        args.bin_dir.display(),
        installer.conf_path().display(),
    ));
    // One kernel for both loops: its change notifications then tell the NetworkPolicy
    // loop's own transactions (its socket's port id) from someone else's.
    let net = net.map(Arc::new);
    let policy = net.as_ref().and_then(|n| policy_net(args, n));
    let net = net.as_deref().map(|n| n as &dyn NodeNet);
    agent::run(
        args,
        &installer,
        client,
        net,
        policy,
        shared,
        Arc::new(Metrics::default()),
    )
}

/// The kernel's NetworkPolicy side for the agent: None with --files-only (the kernel is
/// not the agent's), without a kernel, or with --network-policy=false (then our table is
/// removed, so a policy once enforced is not left behind half-true).
fn policy_net(args: &Args, net: &Arc<HostNodeNet>) -> Option<PolicyKernel> {
    if args.files_only {
        return None;
    }
    if args.network_policy {
        let addrs = net.clone();
        // The conntrack dump on its own socket: it does not hold up the loop's writes.
        let conntrack: Dump = match HostNodeNet::current() {
            Ok(dumper) => Arc::new(move || dumper.conntrack()),
            Err(e) => {
                log(&format!(
                    "warning: a socket for conntrack dumps: {e}; dumping through the shared one"
                ));
                let shared = net.clone();
                Arc::new(move || shared.conntrack())
            }
        };
        return Some(PolicyKernel {
            net: Box::new(net.clone()),
            local_addrs: Box::new(move || addrs.local_addrs()),
            conntrack,
        });
    }
    if let Err(e) = net.remove_policy() {
        log(&format!("warning: removing the NetworkPolicy table: {e}"));
    }
    None
}

/// Removes our conflist, those of our binaries still identical to the source dir's, our
/// routes, our VXLAN device (with its entries and routes), our firewall table and our
/// NetworkPolicy table (`policy`, the same kernel); nothing else.
pub fn uninstall(
    args: &Args,
    net: Result<&dyn NodeNet, NodeNetError>,
    policy: Option<&dyn PolicyNet>,
) -> Result<(), RunError> {
    let bins = binaries::load(&args.source_dir).map_err(RunError::Setup)?;
    let conf = args.conf_dir.join(&args.conf_name);
    // The conflist first: runtimes stop using the network before its plugins go.
    if atomic::remove(&conf)? {
        log(&format!("removed {}", conf.display()));
    }
    let (removed, kept) = binaries::uninstall(&bins, &args.bin_dir)?;
    for name in removed {
        log(&format!("removed {}", args.bin_dir.join(name).display()));
    }
    for name in kept {
        log(&format!(
            "left {} alone: it is not the binary we installed",
            args.bin_dir.join(name).display()
        ));
    }
    for dir in [&args.bin_dir, &args.conf_dir] {
        atomic::remove_stale_temps(dir);
    }
    // The kernel last: pods keep reaching other nodes until the network is gone.
    let net = net?;
    let mut failed = None;
    for route in net.our_routes()? {
        match net.del_route(&route) {
            Ok(()) => log(&format!(
                "removed route {} via {}",
                route.dst, route.gateway
            )),
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                log(&format!("error: {e}"));
                failed = Some(e);
            }
        }
    }
    if let Err(e) = net.remove_vxlan() {
        log(&format!("error: {e}"));
        failed = Some(e);
    } else {
        log(&format!(
            "removed our VXLAN device {} (if there was one)",
            hostnet::node::VXLAN_DEVICE
        ));
    }
    net.remove_firewall()?;
    log("removed our firewall table (if there was one)");
    if let Some(policy) = policy {
        policy.remove_policy()?;
        log(&format!(
            "removed our NetworkPolicy table inet {} (if there was one)",
            netpol::program::TABLE
        ));
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
