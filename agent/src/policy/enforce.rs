//! The NetworkPolicy loop: takes what the watches left in the inbox, turns it into the
//! node's `netpol` program event by event (the engine), and writes the difference into
//! the kernel, one nf_tables transaction per event (a burst is one transaction of the
//! whole difference). The first programming after start diffs against what the kernel
//! holds (a restart changes nothing that is right); any failed transaction is followed by
//! a whole replacement; the table is compared with the program every --interval.
//!
//! Nothing is programmed before every kind has been listed once: a partial view could
//! allow what a policy not yet seen denies. Until then, and while the kernel refuses the
//! program, the node is not ready.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hostnet::node::{NodeNetError, Refusal};
use netpol::conntrack::CtEntry;
use netpol::diff::{Changes, diff};
use netpol::engine::Engine;
use netpol::program::Program;

use crate::backoff::Backoff;
use crate::log;
use crate::policy::PolicyKernel;
use crate::policy::dumps::{self, Dumps};
use crate::policy::inbox::{Batch, Inbox};
use crate::serve::PolicyMetrics;

/// More events than this in one batch are written as one difference of the programs
/// (one transaction) rather than one transaction each.
const BURST: usize = 64;
const MAX_RETRY: Duration = Duration::from_secs(30);

pub struct Enforcer<'a> {
    node: String,
    kernel: &'a PolicyKernel,
    metrics: &'a PolicyMetrics,
    engine: Option<Engine>,
    /// Before the first programming: the first pod list's pods as they are read, indexed
    /// while the rest is parsed, and the list's epoch (`Batch::stream_epoch`).
    preload: Option<(u64, Engine)>,
    /// The kernel holds the engine's program (as far as the agent knows).
    in_place: bool,
    /// Refused policies already logged (each once while it stays refused).
    warned: BTreeSet<String>,
    retry: Backoff,
    retry_at: Option<Instant>,
    /// The conntrack dump thread.
    dumps: Arc<Dumps>,
}

/// Runs the loop until the process ends.
pub fn run(
    node: &str,
    inbox: &Inbox,
    kernel: &PolicyKernel,
    metrics: &PolicyMetrics,
    interval: Duration,
    dumps: Arc<Dumps>,
) {
    let mut e = Enforcer::new(node, kernel, metrics, dumps);
    let mut checked = Instant::now();
    loop {
        let due = checked + interval;
        let wake = e.retry_at.map_or(due, |t| t.min(due));
        let batch = inbox.take(wake.saturating_duration_since(Instant::now()));
        let recheck = batch.recheck || Instant::now() >= due;
        if recheck {
            checked = Instant::now();
        }
        e.step(batch, recheck);
    }
}

impl<'a> Enforcer<'a> {
    pub fn new(
        node: &str,
        kernel: &'a PolicyKernel,
        metrics: &'a PolicyMetrics,
        dumps: Arc<Dumps>,
    ) -> Enforcer<'a> {
        metrics.enabled.store(true, Ordering::Relaxed);
        Enforcer {
            node: node.to_string(),
            kernel,
            metrics,
            engine: None,
            preload: None,
            in_place: false,
            warned: BTreeSet::new(),
            retry: Backoff::new(MAX_RETRY),
            retry_at: None,
            dumps,
        }
    }

    /// One turn of the loop: `batch` into the engine and the kernel; `recheck`: compare
    /// the kernel's table with the program (someone else's change is repaired).
    pub fn step(&mut self, mut batch: Batch, recheck: bool) {
        let since = batch.since;
        let (pods, _, policies) = batch.counts;
        let m = self.metrics;
        m.pods.store(pods as u64, Ordering::Relaxed);
        m.policies.store(policies as u64, Ordering::Relaxed);
        self.preload(&mut batch);
        if !batch.synced {
            return;
        }
        let dumped = batch.conntrack.take();
        // What may deny a connection allowed so far: then its conntrack entry goes.
        let may_deny = self.engine.is_none()
            || !batch.policies.is_empty()
            || !batch.namespaces.is_empty()
            || batch.pods_updated;
        let bridged = if self.engine.is_none() || recheck || !self.in_place {
            self.bridge_netfilter()
        } else {
            Ok(())
        };
        let written = match self.engine.as_mut() {
            None => {
                let mut engine = match self.preload.take() {
                    Some((_, engine)) => engine,
                    None => Engine::new(&self.node, &[]),
                };
                let namespaces: Vec<_> = batch.namespaces.into_values().flatten().collect();
                // Out of the pending map first: its table and keys (~13 MB at 150,000
                // pods) are gone before the engine grows. Sorted as the API lists them, so
                // a namespace's pods get neighbouring ids (its sets are built from them).
                let mut pods: Vec<Box<_>> = batch.pods.into_values().flatten().collect();
                pods.sort_unstable_by(|a, b| {
                    (&*a.namespace, &a.name).cmp(&(&*b.namespace, &b.name))
                });
                let pods = pods.into_iter().map(|p| *p);
                let policies = batch.policies.into_values().flatten();
                engine.load(&namespaces, pods, policies);
                engine.fill_later();
                // The engine has them: gone before the first write.
                drop(namespaces);
                self.engine = Some(engine);
                self.program_afresh(true)
            }
            Some(_) if !self.in_place => {
                self.feed(batch);
                self.program_afresh(false)
            }
            Some(_) => {
                let changes = self.feed(batch);
                self.write(changes)
            }
        };
        // What the batch denies is denied from here on; the new peer sets' addresses
        // follow (`Engine::fill_later`).
        let enforced = Instant::now();
        let written = written.and_then(|()| self.fill());
        let written = match written {
            Ok(()) if recheck => self.recheck(),
            other => other,
        };
        // The latency ends at the commit: the policy is enforced from there on. The
        // conntrack cleanup that follows dumps the whole table (its time grows with
        // nf_conntrack_buckets, ~25 ms at 262,144, however few entries it holds).
        if written.is_ok()
            && bridged.is_ok()
            && let Some(since) = since
        {
            let now = Instant::now();
            let enforce_us = (enforced - since).as_micros() as u64;
            m.last_enforce_latency_us
                .store(enforce_us, Ordering::Relaxed);
            m.max_enforce_latency_us
                .fetch_max(enforce_us, Ordering::Relaxed);
            let us = (now - since).as_micros() as u64;
            m.last_latency_us.store(us, Ordering::Relaxed);
            m.max_latency_us.fetch_max(us, Ordering::Relaxed);
        }
        // A dump asked for earlier is judged against the program now in place (a
        // connection this batch denies goes too).
        if let Some(entries) = dumped {
            self.forget_denied(entries);
        }
        if written.is_ok() && may_deny {
            self.dumps.want();
        }
        match written.and(bridged) {
            Ok(()) => {
                self.in_place = true;
                self.retry.reset();
                self.retry_at = None;
            }
            Err(e) => {
                self.in_place = false;
                m.errors.fetch_add(1, Ordering::Relaxed);
                let delay = self.retry.take();
                self.retry_at = Some(Instant::now() + delay);
                log(&format!(
                    "error: NetworkPolicy: {e} (the whole table again in {delay:?}; not ready)"
                ));
            }
        }
        // The counts first: whoever sees the table in place sees what it holds.
        self.count();
        m.in_place.store(self.in_place, Ordering::Release);
    }

    /// The first pod list's pods read since the last turn into the engine of the first
    /// programming (no policies yet: only indexed), so that it does not wait for them
    /// once every kind is listed; a failed list's pods go with their engine.
    fn preload(&mut self, batch: &mut Batch) {
        if self
            .preload
            .as_ref()
            .is_some_and(|(epoch, _)| *epoch != batch.stream_epoch)
        {
            self.preload = None;
        }
        // Only before the first programming: the first list is the only one streamed.
        let pods = std::mem::take(&mut batch.streamed);
        if pods.is_empty() {
            return;
        }
        let node = &self.node;
        let (_, engine) = self
            .preload
            .get_or_insert_with(|| (batch.stream_epoch, Engine::new(node, &[])));
        engine.add_pods(pods);
    }

    /// The batch into the engine: the kernel's changes, event by event, or (a burst) the
    /// one difference of the programs.
    fn feed(&mut self, batch: Batch) -> Vec<Changes> {
        let engine = self.engine.as_mut().expect("loaded");
        let events = batch.pods.len() + batch.namespaces.len() + batch.policies.len();
        let before = (events > BURST).then(|| engine.program().clone());
        let mut out = Vec::new();
        // Namespaces and policies first: a pod then meets the selectors it will live with.
        for (name, ns) in batch.namespaces {
            out.push(match ns {
                Some(ns) => engine.set_namespace(&ns),
                None => engine.remove_namespace(&name),
            });
        }
        for (key, np) in batch.policies {
            out.push(match np {
                Some(np) => engine.set_checked(np),
                None => {
                    let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                    engine.remove_policy(ns, name)
                }
            });
        }
        for (key, pod) in batch.pods {
            out.push(match pod {
                Some(pod) => engine.set_pod(*pod),
                None => {
                    let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                    engine.remove_pod(ns, name)
                }
            });
        }
        match before {
            Some(before) => vec![diff(&before, engine.program())],
            None => out,
        }
    }

    /// Each change in its own transaction; a failure falls back to the whole table.
    fn write(&mut self, changes: Vec<Changes>) -> Result<(), NodeNetError> {
        for ch in changes.iter().filter(|c| !c.is_empty()) {
            self.metrics.transactions.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = self.kernel.net.apply_policy(ch) {
                // A full set (`ENFILE`) is no fault: the table grows by being made anew.
                let level = match e.errno() {
                    Some(libc::ENFILE) => "",
                    _ => "warning: ",
                };
                log(&format!(
                    "{level}NetworkPolicy: {e}: replacing the whole table"
                ));
                return self.program_afresh(false);
            }
        }
        Ok(())
    }

    /// The addresses of the peer sets the last changes made empty, in a transaction of
    /// their own.
    fn fill(&mut self) -> Result<(), NodeNetError> {
        let fill = self.engine.as_mut().expect("loaded").fill();
        self.write(vec![fill])
    }

    /// The whole program into the kernel: the difference from what the kernel holds when
    /// it is a table of ours (`first`: after a start), else a replacement.
    fn program_afresh(&mut self, first: bool) -> Result<(), NodeNetError> {
        let program = self.engine.as_ref().expect("loaded").program();
        log_refused(&mut self.warned, program);
        self.metrics.transactions.fetch_add(1, Ordering::Relaxed);
        let net = &self.kernel.net;
        // Nothing held (a fresh node): the whole program is written from itself, not as a
        // difference from nothing (at 150,000 pods that copied its 220,000 elements, each
        // with its set's name, at the agent's memory peak).
        if first
            && let Ok(Some(held)) = net.read_policy()
            && !(held.sets.is_empty() && held.chains.is_empty())
        {
            let changes = diff(&held, program);
            if net.apply_policy(&changes).is_ok() {
                log(&format!(
                    "NetworkPolicy: table inet {} in place ({} changes to what the kernel held)",
                    netpol::program::TABLE,
                    size(&changes)
                ));
                return Ok(());
            }
        }
        net.replace_policy(program)?;
        log(&format!(
            "NetworkPolicy: table inet {} written ({} chains, {} sets)",
            netpol::program::TABLE,
            program.chains.len(),
            program.sets.len()
        ));
        Ok(())
    }

    /// The kernel's table against the program: someone else's change is repaired.
    fn recheck(&mut self) -> Result<(), NodeNetError> {
        let program = self.engine.as_ref().expect("loaded").program();
        if self.kernel.net.policy_matches(program)? {
            return Ok(());
        }
        log("NetworkPolicy: the kernel's table differs from the policies: writing it again");
        self.program_afresh(false)
    }

    /// Bridged traffic between pods of this node must meet the forward hook: the two
    /// sysctls set (they are per namespace); br_netfilter not loaded is an error that
    /// keeps the node not ready (the scratch image cannot load a module).
    fn bridge_netfilter(&self) -> Result<(), NodeNetError> {
        let net = &self.kernel.net;
        let result = net.enable_bridge_netfilter();
        let on = result.is_ok()
            && net
                .bridge_netfilter()
                .is_ok_and(|b| b.polices_bridged_traffic());
        self.metrics.bridge_netfilter.store(on, Ordering::Relaxed);
        if let Err(e) = &result
            && matches!(e.refusal(), Some(Refusal::NoBridgeNetfilter))
        {
            log(&format!(
                "error: NetworkPolicy between pods of this node cannot be enforced: {e}"
            ));
        }
        result
    }

    /// Deletes the conntrack entries (a dump's, `entries`) of connections the program
    /// now denies (judged as their first packet would be, after DNAT), so they stop as
    /// the policy says; the others keep their state (a Service's DNAT among it). A
    /// failure is logged: the policy itself is in place, only old connections live on.
    fn forget_denied(&mut self, entries: Result<Vec<CtEntry>, NodeNetError>) {
        let kernel = self.kernel;
        let result = (kernel.local_addrs)().and_then(|local| {
            let engine = self.engine.as_mut().expect("loaded");
            engine.set_local(local);
            let entries = entries?;
            let denied = netpol::eval::denied(engine.program(), &entries).unwrap_or_else(|e| {
                log(&format!("error: NetworkPolicy: judging connections: {e}"));
                Vec::new()
            });
            if denied.is_empty() {
                return Ok(0);
            }
            kernel.net.forget_connections(&denied)
        });
        match result {
            Ok(0) => {}
            Ok(n) => {
                self.metrics
                    .connections_forgotten
                    .fetch_add(n as u64, Ordering::Relaxed);
                log(&format!(
                    "NetworkPolicy: {n} connection(s) the policies now deny ended (conntrack)"
                ));
            }
            Err(e) => {
                self.metrics.errors.fetch_add(1, Ordering::Relaxed);
                log(&format!(
                    "warning: NetworkPolicy: {e}: connections opened before the change go on"
                ));
            }
        }
    }

    fn count(&mut self) {
        let Some(program) = self.engine.as_ref().map(Engine::program) else {
            return;
        };
        let refused = program.refused.len() as u64;
        let chains = program.chains.len() as u64;
        let rules: usize = program.chains.values().map(|c| c.rules.len()).sum();
        let elements: usize = program.sets.values().map(|s| s.elems.len()).sum();
        let m = self.metrics;
        m.refused.store(refused, Ordering::Relaxed);
        m.chains.store(chains, Ordering::Relaxed);
        m.rules.store(rules as u64, Ordering::Relaxed);
        m.set_elements.store(elements as u64, Ordering::Relaxed);
        // A refusal that came with an event is logged here (a full write logs its own).
        log_refused(&mut self.warned, program);
    }
}

/// Each refused policy is logged once while it stays refused.
fn log_refused(warned: &mut BTreeSet<String>, program: &Program) {
    let now: BTreeSet<String> = program.refused.iter().map(|e| e.to_string()).collect();
    for line in now.difference(warned) {
        log(&format!("error: {line}"));
    }
    *warned = now;
}

fn size(c: &Changes) -> usize {
    c.add_sets.len()
        + c.add_chains.len()
        + c.add_elems.len()
        + c.write_rules.len()
        + c.del_elems.len()
        + c.del_chains.len()
        + c.del_sets.len()
}

/// Starts the three watches and the loop on their own threads (detached: the process
/// ends with the agent's main loop); the inbox, for the kernel's notifications.
pub fn start(
    node: &str,
    client: Arc<crate::kube::api::Client>,
    shared: Arc<crate::kube::watcher::Shared>,
    kernel: PolicyKernel,
    metrics: Arc<crate::serve::Metrics>,
    interval: Duration,
) -> std::io::Result<Arc<Inbox>> {
    use crate::kube::collection::{Namespaces, NetworkPolicies, Pods};
    use crate::kube::watcher::{RealTime, run_collection};
    let inbox = Arc::new(Inbox::default());
    macro_rules! watch {
        ($kind:ty, $name:literal) => {{
            let (client, shared, inbox, metrics) = (
                client.clone(),
                shared.clone(),
                inbox.clone(),
                metrics.clone(),
            );
            std::thread::Builder::new()
                .name($name.into())
                .spawn(move || {
                    run_collection::<$kind>(
                        &client,
                        &shared,
                        &*inbox,
                        &metrics.api_errors,
                        &mut RealTime,
                    )
                })?;
        }};
    }
    watch!(Namespaces, "watch-namespaces");
    watch!(NetworkPolicies, "watch-policies");
    watch!(Pods, "watch-pods");
    let dumps = dumps::start(kernel.conntrack.clone(), inbox.clone())?;
    let node = node.to_string();
    let loop_inbox = inbox.clone();
    std::thread::Builder::new()
        .name("netpol".into())
        .spawn(move || {
            run(
                &node,
                &loop_inbox,
                &kernel,
                &metrics.policy,
                interval,
                dumps,
            )
        })?;
    Ok(inbox)
}
