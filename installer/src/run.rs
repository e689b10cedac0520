//! The three modes: one pass (--once), staying running (the DaemonSet), --uninstall.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;

use crate::api::{ApiError, Client};
use crate::atomic::FileError;
use crate::binaries::{self, Binary};
use crate::config::Args;
use crate::conflist::{self, Settings};
use crate::signals::Stop;
use crate::{atomic, host_mtu, log};

/// Retry delays while the API server fails or the node has no podCIDR: 1 s doubling up to
/// this (and never beyond --interval when staying running).
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
}

struct Installer<'a> {
    args: &'a Args,
    node: String,
    client: Client,
    bins: Vec<Binary>,
}

impl<'a> Installer<'a> {
    fn new(args: &'a Args) -> Result<Installer<'a>, RunError> {
        let installer = Installer {
            args,
            node: args.node_name().map_err(RunError::Setup)?.to_string(),
            client: Client {
                server: args.api_server().map_err(RunError::Setup)?,
                token_file: args.token_file.clone(),
                ca_file: args.ca_file.clone(),
            },
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

    fn put_binaries(&self) -> Result<(), RunError> {
        let written = binaries::install(&self.bins, &self.args.bin_dir)?;
        for name in written {
            log(&format!(
                "installed {}",
                self.args.bin_dir.join(name).display()
            ));
        }
        Ok(())
    }

    fn pod_cidrs(&self) -> Result<Vec<IpNetwork>, ApiError> {
        self.client.pod_cidrs(&self.node)
    }

    fn waiting(&self) -> String {
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

    fn put_conflist(&self, cidrs: &[IpNetwork]) -> Result<(), RunError> {
        let mtu = self.args.mtu.or_else(|| {
            host_mtu::default_route_mtu("/proc/net".as_ref(), "/sys/class/net".as_ref())
        });
        let settings = Settings {
            cni_version: &self.args.cni_version,
            bridge: &self.args.bridge,
            mtu,
        };
        let text = conflist::render(&settings, cidrs);
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
fn show(cidrs: &[IpNetwork]) -> String {
    let cidrs: Vec<String> = cidrs.iter().map(|c| c.to_string()).collect();
    cidrs.join(",")
}

struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    fn new(max: Duration) -> Backoff {
        Backoff {
            next: Duration::from_secs(1).min(max),
            max,
        }
    }

    fn take(&mut self) -> Duration {
        let d = self.next;
        self.next = (d * 2).min(self.max);
        d
    }
}

/// One pass: the node's podCIDRs (waiting at most --wait for them), then the binaries,
/// then the conflist. Nothing is written before the podCIDRs are known and valid.
pub fn once(args: &Args, stop: &Stop) -> Result<(), RunError> {
    let installer = Installer::new(args)?;
    let deadline = Instant::now() + args.wait();
    let mut backoff = Backoff::new(MAX_BACKOFF);
    let cidrs = loop {
        let reason = match installer.pod_cidrs() {
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
        if let Some(sig) = stop.sleep(backoff.take().min(left)) {
            return Err(RunError::Stopped(sig));
        }
    };
    installer.put_binaries()?;
    installer.put_conflist(&cidrs)
}

/// Stays running: every --interval puts back what is missing or changed, re-renders when
/// the podCIDRs change, writes nothing when nothing changed. Ok on SIGTERM/SIGINT.
pub fn daemon(args: &Args, stop: &Stop) -> Result<(), RunError> {
    let installer = Installer::new(args)?;
    log(&format!(
        "node {}: installing {} binaries into {}, conflist {}; re-checking every {}s",
        installer.node,
        installer.bins.len(),
        args.bin_dir.display(),
        installer.conf_path().display(),
        args.interval
    ));
    // The node's last known podCIDRs: the conflist is put back from them while the API
    // server is unreachable.
    let mut known: Vec<IpNetwork> = Vec::new();
    let mut backoff = Backoff::new(MAX_BACKOFF.min(args.interval()));
    loop {
        let ok = pass(&installer, &mut known);
        let delay = if ok {
            backoff = Backoff::new(MAX_BACKOFF.min(args.interval()));
            args.interval()
        } else {
            backoff.take()
        };
        if let Some(sig) = stop.sleep(delay) {
            log(&format!(
                "signal {sig}: exiting, the node's files stay in place"
            ));
            return Ok(());
        }
    }
}

/// One re-check; false when something failed or is still missing (retry sooner).
fn pass(installer: &Installer, known: &mut Vec<IpNetwork>) -> bool {
    let mut ok = true;
    match installer.pod_cidrs() {
        Ok(cidrs) if !cidrs.is_empty() => {
            if !known.is_empty() && *known != cidrs {
                log(&format!(
                    "podCIDRs changed: {} -> {}",
                    show(known),
                    show(&cidrs)
                ));
            }
            *known = cidrs;
        }
        Ok(_) if known.is_empty() => {
            log(&installer.waiting());
            return false;
        }
        Ok(_) => log("the node lost its podCIDRs; keeping the conflist for the last known ones"),
        Err(e) => {
            log(&format!("error: {e} (retrying)"));
            ok = false;
        }
    }
    if known.is_empty() {
        return false;
    }
    // The binaries before the conflist: a runtime that sees the conflist runs them.
    if let Err(e) = installer.put_binaries() {
        log(&format!("error: {e} (the conflist waits for the binaries)"));
        return false;
    }
    if let Err(e) = installer.put_conflist(known) {
        log(&format!("error: {e}"));
        ok = false;
    }
    ok
}

/// Removes our conflist and those of our binaries still identical to the source dir's.
pub fn uninstall(args: &Args) -> Result<(), RunError> {
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
    Ok(())
}
