//! The three modes: one pass (--once), the node agent (the DaemonSet), --uninstall; and
//! the node's files (binaries, conflist) they share.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hostnet::node::{NodeNet, NodeNetError};
use ipnetwork::IpNetwork;

use crate::api::{ApiError, Client};
use crate::atomic::FileError;
use crate::backoff::Backoff;
use crate::binaries::{self, Binary};
use crate::config::Args;
use crate::conflist::{self, Settings};
use crate::health::Metrics;
use crate::signals::Stop;
use crate::watcher::Shared;
use crate::{agent, atomic, log};

/// Retry delays while the API server fails or the node has no podCIDR (--once): 1 s
/// doubling up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why a mode ended with an error (logged as `error: <this>`).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The flags, the environment or the source dir (their messages).
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The node has no podCIDRs (yet).
    #[error("{0}")]
    NoPodCidrs(String),
    #[error("gave up after --wait {wait}s: {last}")]
    GaveUp {
        wait: u64,
        #[source]
        last: Box<RunError>,
    },
    #[error("stopped by signal {0} before the node's files were in place")]
    Stopped(i32),
    #[error("{0}")]
    Kernel(#[from] NodeNetError),
}

/// The API client the flags describe.
pub fn client(args: &Args) -> Result<Client, RunError> {
    Ok(Client::new(
        args.api_server().map_err(RunError::Setup)?,
        args.token_file.clone(),
        args.ca_file.clone(),
    ))
}

/// This node's files: the plugin binaries and the conflist.
pub struct Installer<'a> {
    args: &'a Args,
    pub node: String,
    bins: Vec<Binary>,
}

impl<'a> Installer<'a> {
    pub fn new(args: &'a Args) -> Result<Installer<'a>, RunError> {
        let installer = Installer {
            args,
            node: args.node_name().map_err(RunError::Setup)?.to_string(),
            bins: binaries::load(&args.source_dir).map_err(RunError::Setup)?,
        };
        installer.remove_stale_temps();
        Ok(installer)
    }

    fn remove_stale_temps(&self) {
        for dir in [&self.args.bin_dir, &self.args.conf_dir] {
            for name in atomic::remove_stale_temps(dir) {
                log(&format!(
                    "removed a stale temporary file {}",
                    dir.join(name).display()
                ));
            }
        }
    }

    fn conf_path(&self) -> PathBuf {
        self.args.conf_dir.join(&self.args.conf_name)
    }

    pub fn put_binaries(&self) -> Result<(), RunError> {
        let written = binaries::install(&self.bins, &self.args.bin_dir)?;
        for name in written {
            log(&format!(
                "installed {}",
                self.args.bin_dir.join(name).display()
            ));
        }
        Ok(())
    }

    pub fn waiting(&self) -> String {
        format!(
            "node {} has no spec.podCIDR(s) yet (assigned by kube-controller-manager \
             --allocate-node-cidrs or your IPAM controller); waiting, no subnet is made up",
            self.node
        )
    }

    /// Network configs in the conf dir that a runtime picks before ours (lexical order).
    fn configs_before_ours(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.args.conf_dir) else {
            return vec![];
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| {
                [".conf", ".conflist", ".json"]
                    .iter()
                    .any(|ext| n.ends_with(ext))
                    && *n < self.args.conf_name
            })
            .collect();
        names.sort();
        names
    }

    /// `mtu`: the pods' MTU unless --mtu is given (the overlay's when it is used, else the
    /// default route's interface's; None: the bridge plugin's default).
    pub fn put_conflist(&self, cidrs: &[IpNetwork], mtu: Option<u32>) -> Result<(), RunError> {
        let mtu = self.args.mtu.or(mtu);
        let settings = Settings {
            cni_version: &self.args.cni_version,
            bridge: &self.args.bridge,
            mtu,
            ip_masq: self.args.files_only,
            portmap_backend: self.args.portmap_backend.map(|b| b.as_str()),
        };
        let text = conflist::render(&settings, cidrs).map_err(RunError::Setup)?;
        if atomic::put(
            &self.args.conf_dir,
            &self.args.conf_name,
            text.as_bytes(),
            0o644,
        )? {
            let mtu = mtu.map_or("the bridge plugin's default".to_string(), |m| m.to_string());
            log(&format!(
                "wrote {} for podCIDRs {} (mtu {mtu})",
                self.conf_path().display(),
                show(cidrs)
            ));
            for first in self.configs_before_ours() {
                log(&format!(
                    "warning: {} sorts before {}: runtimes use the first config, not ours",
                    first, self.args.conf_name
                ));
            }
        }
        Ok(())
    }
}

/// `10.244.1.0/24,fd00:1::/64`
pub fn show(cidrs: &[IpNetwork]) -> String {
    let cidrs: Vec<String> = cidrs.iter().map(|c| c.to_string()).collect();
    cidrs.join(",")
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
    installer.put_conflist(&cidrs, mtu)
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
        installer.bins.len(),
        args.bin_dir.display(),
        installer.conf_path().display(),
    ));
    let net = net.as_ref().map(|n| n as &dyn NodeNet);
    agent::run(
        args,
        &installer,
        client,
        net,
        shared,
        Arc::new(Metrics::default()),
    )
}

/// Removes our conflist, those of our binaries still identical to the source dir's, our
/// routes, our VXLAN device (with its entries and routes) and our firewall table; nothing
/// else.
pub fn uninstall(args: &Args, net: Result<&dyn NodeNet, NodeNetError>) -> Result<(), RunError> {
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
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
