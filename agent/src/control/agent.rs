//! The node agent's loop: the watch thread keeps the Node cache and marks it dirty; this
//! loop reconciles one snapshot at a time, and runs again right after if anything arrived
//! meanwhile (a flood of events coalesces; an event on an idle agent is reconciled at
//! once). The kernel's own change notifications wake it too (a route of ours deleted by
//! NetworkManager, our table flushed by a firewall reload, our device deleted): the next
//! pass reads what changed again and repairs it. With nothing arriving it re-checks this
//! node's own state every --interval (files, routes and rules changed by someone else,
//! also what no notification tells), without asking the API server.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hostnet::node::{NodeNet, VxlanSpec, Watch, overlay_address};
use ipnetwork::IpNetwork;

use crate::backoff::Backoff;
use crate::config::{Args, Mode};
use crate::desired::{Desired, Incremental, Local, Options};
use crate::error::RunError;
use crate::files::Installer;
use crate::files::leases;
use crate::kube::api::Client;
use crate::kube::nodes::NodeInfo;
use crate::kube::podcidr::show;
use crate::kube::watcher::{self, Shared, Wake};
use crate::log;
use crate::policy::PolicyKernel;
use crate::policy::inbox::Inbox;
use crate::reconcile::{self, Applied, Overlay};
use crate::serve::{self, Metrics};

/// A failed reconcile is retried after 1 s doubling up to this (or sooner on an event).
const MAX_RETRY: Duration = Duration::from_secs(30);

struct Agent<'a> {
    installer: &'a Installer<'a>,
    /// The kernel the agent changes (None with --files-only).
    net: Option<&'a dyn NodeNet>,
    /// The kernel the agent reads MTUs from (also with --files-only).
    host: Option<&'a dyn NodeNet>,
    files_only: bool,
    metrics: &'a Metrics,
    options: Options,
    vni: u32,
    port: u16,
    /// The pods' MTU for the overlay, once it was used: kept when no peer needs it any
    /// more, so pods started meanwhile do not get a larger MTU than the next overlay peer
    /// carries (until the agent restarts).
    overlay_mtu: Option<u32>,
    /// The default route's interface's MTU and the underlay interface's, kept until the
    /// periodic re-check: reading them dumps the main table, which holds a route per node.
    host_mtu: Option<Option<u32>>,
    underlay_mtu: Option<(IpAddr, u32)>,
    /// What the last pass left in the kernel, trusted until the periodic re-check.
    applied: Applied,
    /// Answers of `on_link`, kept until the next periodic re-check (a reconcile per event
    /// must not ask the kernel about every node again).
    on_link: HashMap<IpAddr, bool, BuildHasherDefault<Fnv>>,
    /// Warnings of the last reconcile and of this one: each is logged once while it lasts.
    warned: BTreeSet<String>,
    warning: BTreeSet<String>,
    own: Vec<IpNetwork>,
    /// This node's last valid Node, kept through an API glitch (`desired_keeping`).
    last_own: Option<Arc<NodeInfo>>,
    /// Whether the last pass stood in for this node's Node with `last_own`.
    kept_own: bool,
    /// The binaries were found or put in place since the last periodic re-check.
    binaries_in_place: bool,
    /// The ranges and MTU the conflist was put with since the last periodic re-check
    /// (reading it back on every Node event cost a sixth of an event).
    conflist_put: Option<(Vec<IpNetwork>, Option<u32>)>,
    /// The desired state, kept per Node: a pass recomputes the Nodes that changed.
    incremental: Incremental,
    nodes: Option<Vec<Arc<NodeInfo>>>,
    retry: Backoff,
    retry_at: Option<Instant>,
}

/// FNV-1a: the on-link cache is looked up twice per node per reconcile, and std's SipHash
/// was a quarter of a reconcile's time at 5,000 nodes. Its keys are addresses from the
/// API server, but an attacker who can write Node objects has easier ways to slow us.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Runs the agent until `shared` is asked to stop: the watch thread, the health server and
/// the reconcile loop. `net`: the kernel (None: it could not be opened: then never ready,
/// unless `--files-only`, which only reads MTUs from it). `policy`: the kernel's
/// NetworkPolicy side, with its own sockets for its own loop (None: not enforced).
pub fn run(
    args: &Args,
    installer: &Installer,
    client: Client,
    net: Option<&dyn NodeNet>,
    policy: Option<PolicyKernel>,
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
) -> Result<(), RunError> {
    let listener = serve::bind(args.health_listen)
        .map_err(|e| RunError::Setup(format!("--health-listen {}: {e}", args.health_listen)))?;
    let addr = listener.local_addr().map_or(args.health_listen, |a| a);
    log(&format!(
        "node {}: serving /readyz, /healthz, /metrics on http://{addr}",
        installer.node
    ));
    {
        let metrics = metrics.clone();
        std::thread::Builder::new()
            .name("health".into())
            .spawn(move || serve::serve(listener, &metrics))
            .map_err(|e| RunError::Setup(format!("starting the health server: {e}")))?;
    }
    metrics.count_requests(client.requests());
    let client = Arc::new(client);
    let mut inbox = None;
    if let Some(policy) = policy {
        inbox = Some(
            crate::policy::enforce::start(
                &installer.node,
                client.clone(),
                shared.clone(),
                policy,
                metrics.clone(),
                args.interval(),
            )
            .map_err(|e| RunError::Setup(format!("starting NetworkPolicy: {e}")))?,
        );
    }
    {
        let (shared, metrics) = (shared.clone(), metrics.clone());
        // Detached: at a stop it may sit in a read of the watch stream; the process ends.
        std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || watcher::run(&client, &shared, &metrics.api_errors))
            .map_err(|e| RunError::Setup(format!("starting the watch: {e}")))?;
    }
    free_stale_leases(args);
    let options = Options {
        cluster_cidrs: args.cluster_cidr.clone(),
        no_masquerade: args.no_masquerade_cidr.clone(),
        mode: args.mode,
        bridge: args.bridge.clone(),
    };
    let mut agent = Agent {
        installer,
        net: net.filter(|_| !args.files_only),
        host: net,
        files_only: args.files_only,
        metrics: &metrics,
        options: options.clone(),
        vni: args.vxlan_vni,
        port: args.vxlan_port,
        overlay_mtu: None,
        host_mtu: None,
        underlay_mtu: None,
        applied: Applied::default(),
        on_link: HashMap::default(),
        warned: BTreeSet::new(),
        warning: BTreeSet::new(),
        own: Vec::new(),
        last_own: None,
        kept_own: false,
        binaries_in_place: false,
        conflist_put: None,
        incremental: Incremental::new(&installer.node, options.clone()),
        nodes: None,
        retry: Backoff::new(MAX_RETRY),
        retry_at: None,
    };
    // Ended (its thread joined) when the loop returns.
    let _watch = agent.net.and_then(|net| watch_kernel(net, &shared, inbox));
    // The binaries do not wait for the API server.
    agent.put_binaries();
    // The last time the kernel was asked afresh (the first pass always asks).
    let mut checked = Instant::now();
    loop {
        // The periodic re-check is due every --interval, also under a steady stream of
        // events (what the agent trusts between two re-checks must not grow old).
        let due = checked + args.interval();
        let wake_at = agent.retry_at.map_or(due, |t| t.min(due));
        match shared.wait(wake_at.saturating_duration_since(Instant::now())) {
            Wake::Stop(sig) => {
                log(&format!(
                    "signal {sig}: exiting; files, routes and rules stay in place"
                ));
                return Ok(());
            }
            Wake::Changed(nodes) => {
                if nodes.is_some() {
                    agent.nodes = nodes;
                }
            }
            Wake::Idle => {}
        }
        let drift = shared.take_drift();
        if Instant::now() >= due || drift.lost {
            agent.forget_kernel();
            checked = Instant::now();
        } else {
            agent.applied.forget_drift(&drift);
        }
        agent.pass();
    }
}

/// Starts the kernel's change notifications for `net`, which wake the loop through
/// `shared`; None (logged) where the kernel cannot tell: drift then waits for --interval.
fn watch_kernel(
    net: &dyn NodeNet,
    shared: &Arc<Shared>,
    inbox: Option<Arc<Inbox>>,
) -> Option<Watch> {
    let notified = shared.clone();
    let notify = move |drift: hostnet::node::Drift| {
        if let Some(inbox) = &inbox
            && (drift.policy || drift.lost)
        {
            inbox.kernel_changed();
        }
        notified.kernel_changed(drift);
    };
    match net.watch(Box::new(notify)) {
        Ok(watch) => Some(watch),
        Err(e) => {
            log(&format!(
                "warning: {e}: routes, rules and the overlay device changed by someone else \
                 are repaired only every --interval"
            ));
            None
        }
    }
}

/// host-local's leases of an earlier boot (see `leases`); a failure is logged, not fatal.
pub fn free_stale_leases(args: &Args) {
    let network = crate::files::conflist::NETWORK_NAME;
    let result = leases::Boot::read()
        .and_then(|boot| leases::free_stale(&args.ipam_data_dir, network, &boot));
    match result {
        Ok(leases::Cleanup::Done) => {}
        Ok(leases::Cleanup::Marked) => log(&format!(
            "leases: this boot recorded in {}/{network}/{}; none freed (no earlier record: \
             leases of an earlier boot, if any, are freed after the next reboot)",
            args.ipam_data_dir.display(),
            leases::MARKER
        )),
        Ok(leases::Cleanup::Freed(freed)) => {
            let freed: Vec<String> = freed.iter().map(|ip| ip.to_string()).collect();
            log(&format!(
                "freed {} lease(s) of pods from before this boot: {}",
                freed.len(),
                freed.join(",")
            ));
        }
        Err(e) => log(&format!(
            "warning: leases of an earlier boot not freed: {e}"
        )),
    }
}

impl Agent<'_> {
    /// The periodic re-check: the next pass asks the kernel afresh (drift, changes made by
    /// someone else, MTUs) and compares the installed binaries again.
    fn forget_kernel(&mut self) {
        self.binaries_in_place = false;
        self.conflist_put = None;
        self.on_link.clear();
        self.incremental.reset();
        self.applied.forget();
        self.host_mtu = None;
        self.underlay_mtu = None;
    }

    /// The binaries in place; compared with the source only after the periodic re-check or
    /// a failure (reading every plugin back on every Node event cost milliseconds).
    fn put_binaries(&mut self) -> bool {
        if self.binaries_in_place {
            return true;
        }
        let ok = match self.installer.put_binaries() {
            Ok(()) => true,
            Err(e) => {
                log(&format!("error: {e} (the conflist waits for the binaries)"));
                false
            }
        };
        self.metrics.binaries.store(ok, Ordering::Relaxed);
        self.binaries_in_place = ok;
        ok
    }

    /// One reconcile of everything: binaries, conflist, routes, rules.
    fn pass(&mut self) {
        let Some(nodes) = self.nodes.take() else {
            // Before the first list only the binaries can be put in place.
            self.put_binaries();
            return;
        };
        let start = Instant::now();
        let mut ok = self.put_binaries();
        // Out of self while `desired` borrows it.
        let mut incremental = std::mem::take(&mut self.incremental);
        let desired = self.desired(&mut incremental, &nodes);
        let vxlan = self.vxlan(desired);
        // The pods' MTU drops once a peer sends through the overlay (or every peer will):
        // a device that only receives leaves it.
        if let Some(spec) =
            vxlan.filter(|_| !desired.overlay.is_empty() || self.options.mode == Mode::Vxlan)
        {
            self.overlay_mtu = Some(spec.mtu());
        }
        self.nodes = Some(nodes);
        match (&desired.own_error, desired.own_cidrs.is_empty()) {
            (Some(e), _) => self.warn_once(format!("error: {e}")),
            (None, true) => self.warn_once(self.installer.waiting()),
            (None, false) => {}
        }
        if !desired.own_cidrs.is_empty() && desired.own_cidrs != self.own {
            if !self.own.is_empty() {
                log(&format!(
                    "podCIDRs changed: {} -> {}",
                    show(&self.own),
                    show(&desired.own_cidrs)
                ));
            }
            self.own = desired.own_cidrs.clone();
        }
        if self.own.is_empty() {
            ok = false;
            self.metrics.conflist.store(false, Ordering::Relaxed);
        } else if ok {
            // The last known ranges: kept while the node lost them or the API is down.
            let mtu = match self.overlay_mtu {
                Some(m) => Some(m),
                None => {
                    let host = self.host;
                    *self.host_mtu.get_or_insert_with(|| {
                        host.and_then(|n| n.default_route_mtu().ok().flatten())
                    })
                }
            };
            let done = self
                .conflist_put
                .as_ref()
                .is_some_and(|(own, m)| *own == self.own && *m == mtu);
            if !done {
                let put = self.installer.put_conflist(&self.own, mtu);
                match &put {
                    Ok(()) => self.conflist_put = Some((self.own.clone(), mtu)),
                    Err(e) => {
                        log(&format!("error: {e}"));
                        ok = false;
                    }
                }
                self.metrics.conflist.store(put.is_ok(), Ordering::Relaxed);
            }
        }
        ok &= self.kernel(desired, vxlan);
        self.incremental = incremental;
        self.warned = std::mem::take(&mut self.warning);
        let took = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.metrics
            .last_reconcile_us
            .store(took, Ordering::Relaxed);
        self.metrics.reconciles.fetch_add(1, Ordering::Relaxed);
        if ok {
            self.metrics.synced_now();
            self.retry.reset();
            self.retry_at = None;
        } else {
            self.metrics
                .reconcile_errors
                .fetch_add(1, Ordering::Relaxed);
            self.retry_at = Some(Instant::now() + self.retry.take());
        }
    }

    fn desired<'i>(
        &mut self,
        incremental: &'i mut Incremental,
        nodes: &[Arc<NodeInfo>],
    ) -> &'i Desired {
        let addrs = match self.net.map(|n| n.local_addrs()) {
            Some(Ok(a)) => a,
            Some(Err(e)) => {
                log(&format!("error: {e}"));
                vec![]
            }
            None => vec![],
        };
        let net = self.net;
        let cache = &mut self.on_link;
        // desired() asks about the peers' InternalIPs (gateways, but not with --mode vxlan)
        // and the network addresses of their pod ranges: on a cold cache (the first pass,
        // a re-check) all of them in one batch; an event's new Node asks on its own.
        if let Some(n) = net.filter(|_| cache.is_empty()) {
            let me = &self.installer.node;
            let gateways = self.options.mode != Mode::Vxlan;
            let mut ask: Vec<IpAddr> = nodes
                .iter()
                .filter(|node| node.name != *me)
                .flat_map(|node| {
                    let ranges = node.ranges.as_deref().unwrap_or_default();
                    let ips = match &node.ips {
                        Ok(ips) if gateways => ips.as_slice(),
                        _ => &[],
                    };
                    ranges
                        .iter()
                        .map(|r| r.network())
                        .chain(ips.iter().copied())
                })
                .collect();
            ask.sort_unstable();
            ask.dedup();
            for (ip, r) in ask.iter().zip(n.on_link_many(&ask)) {
                // A failed one is asked again on its own below, which logs it.
                if let Ok(v) = r {
                    cache.insert(*ip, v);
                }
            }
        }
        let mut on_link = |ip: IpAddr| {
            *cache
                .entry(ip)
                .or_insert_with(|| match net.map(|n| n.on_link(ip)) {
                    Some(Ok(v)) => v,
                    Some(Err(e)) => {
                        log(&format!("error: {e}"));
                        false
                    }
                    None => false,
                })
        };
        let local = Local {
            addrs: &addrs,
            on_link: &mut on_link,
        };
        let d = incremental.update(nodes, local, &mut self.last_own);
        for w in &d.warnings {
            self.warn_once(format!("warning: {w}"));
        }
        if self.kept_own && !d.kept_own {
            log(&format!(
                "node {}: its own Node is valid again; the last good state no longer stands in",
                self.installer.node
            ));
        }
        self.kept_own = d.kept_own;
        d
    }

    /// The VXLAN device, in --mode auto and vxlan: its MTU fits the underlay interface's.
    fn vxlan(&mut self, desired: &Desired) -> Option<VxlanSpec> {
        let local = desired.underlay?;
        let underlay_mtu = match self.underlay_mtu {
            Some((addr, mtu)) if addr == local => mtu,
            _ => {
                let mtu = self
                    .host
                    .and_then(|n| n.underlay_mtu(local).ok().flatten())
                    .unwrap_or(1500);
                self.underlay_mtu = Some((local, mtu));
                mtu
            }
        };
        // The source of this node's own packets through the overlay, in its pod range, so
        // the answer comes back through the overlay too (see `overlay_address`).
        let own = desired.own_cidrs.iter().map(overlay_address);
        let addr4 = own.clone().find_map(|a| match a {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        });
        let addr6 = own.clone().find_map(|a| match a {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        });
        Some(VxlanSpec {
            vni: self.vni,
            port: self.port,
            local,
            underlay_mtu,
            addr4,
            addr6,
        })
    }

    /// Logs `msg` unless the last reconcile logged it too.
    fn warn_once(&mut self, msg: String) {
        if !self.warned.contains(&msg) && !self.warning.contains(&msg) {
            log(&msg);
        }
        self.warning.insert(msg);
    }

    /// Routes, rules and forwarding; true when all are in place.
    fn kernel(&mut self, desired: &Desired, vxlan: Option<VxlanSpec>) -> bool {
        let Some(net) = self.net else {
            // Nothing of ours to put in the kernel with --files-only.
            let ok = self.files_only;
            self.metrics.routes_ok.store(ok, Ordering::Relaxed);
            self.metrics.firewall_ok.store(ok, Ordering::Relaxed);
            return ok;
        };
        let peers_wanted = desired.overlay.len();
        let overlay = Overlay {
            spec: vxlan,
            peers: desired.overlay.clone(),
        };
        let out = reconcile::reconcile_changed(
            net,
            &desired.routes,
            desired.routes_changed.as_deref(),
            &overlay,
            &desired.policy,
            &mut self.applied,
        );
        for line in &out.changes {
            log(line);
        }
        for w in &out.warnings {
            self.warn_once(format!("warning: {w}"));
        }
        for e in &out.errors {
            log(&format!("error: {e}"));
        }
        if let Some(b) = &out.overlay_blocked {
            self.warn_once(format!("error: {b}"));
        }
        if out.firewall_applied {
            log("firewall table applied");
        }
        let m = self.metrics;
        m.routes.store(out.routes as u64, Ordering::Relaxed);
        m.routes_wanted
            .store(desired.routes.len() as u64, Ordering::Relaxed);
        m.overlay_peers
            .store(out.overlay_peers as u64, Ordering::Relaxed);
        m.overlay_peers_wanted
            .store(peers_wanted as u64, Ordering::Relaxed);
        m.routes_ok.store(out.routes_ok(), Ordering::Relaxed);
        m.firewall_ok.store(out.firewall_ok, Ordering::Relaxed);
        out.errors.is_empty() && out.overlay_blocked.is_none()
    }
}
