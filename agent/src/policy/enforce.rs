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
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hostnet::node::{NodeNetError, PolicyNet};
use netpol::diff::{Changes, diff};
use netpol::engine::Engine;
use netpol::program::Program;

use crate::backoff::Backoff;
use crate::log;
use crate::policy::inbox::{Batch, Inbox};
use crate::serve::PolicyMetrics;

/// More events than this in one batch are written as one difference of the programs
/// (one transaction) rather than one transaction each.
const BURST: usize = 64;
const MAX_RETRY: Duration = Duration::from_secs(30);

pub struct Enforcer<'a> {
    node: String,
    /// This node's own addresses (traffic to and from them never meets the chains).
    local: Vec<IpAddr>,
    net: &'a dyn PolicyNet,
    metrics: &'a PolicyMetrics,
    engine: Option<Engine>,
    /// The kernel holds the engine's program (as far as the agent knows).
    in_place: bool,
    /// Refused policies already logged (each once while it stays refused).
    warned: BTreeSet<String>,
    retry: Backoff,
    retry_at: Option<Instant>,
}

/// Runs the loop until the process ends.
pub fn run(
    node: &str,
    local: Vec<IpAddr>,
    inbox: &Inbox,
    net: &dyn PolicyNet,
    metrics: &PolicyMetrics,
    interval: Duration,
) {
    let mut e = Enforcer::new(node, local, net, metrics);
    let mut checked = Instant::now();
    loop {
        let due = checked + interval;
        let wake = e.retry_at.map_or(due, |t| t.min(due));
        let batch = inbox.take(wake.saturating_duration_since(Instant::now()));
        let recheck = Instant::now() >= due;
        if recheck {
            checked = Instant::now();
        }
        e.step(batch, recheck);
    }
}

impl<'a> Enforcer<'a> {
    pub fn new(
        node: &str,
        local: Vec<IpAddr>,
        net: &'a dyn PolicyNet,
        metrics: &'a PolicyMetrics,
    ) -> Enforcer<'a> {
        metrics.enabled.store(true, Ordering::Relaxed);
        Enforcer {
            node: node.to_string(),
            local,
            net,
            metrics,
            engine: None,
            in_place: false,
            warned: BTreeSet::new(),
            retry: Backoff::new(MAX_RETRY),
            retry_at: None,
        }
    }

    /// The program the kernel is to hold (None before every kind was listed).
    pub fn program(&self) -> Option<&Program> {
        self.engine.as_ref().map(Engine::program)
    }

    /// One turn of the loop: `batch` into the engine and the kernel; `recheck`: compare
    /// the kernel's table with the program (someone else's change is repaired).
    pub fn step(&mut self, batch: Batch, recheck: bool) {
        let since = batch.since;
        let (pods, namespaces, policies) = batch.counts;
        let m = self.metrics;
        m.pods.store(pods as u64, Ordering::Relaxed);
        m.policies.store(policies as u64, Ordering::Relaxed);
        let _ = namespaces;
        if !batch.synced {
            return;
        }
        let written = match self.engine.as_mut() {
            None => {
                let mut engine = Engine::new(&self.node, &self.local);
                let namespaces: Vec<_> = batch.namespaces.into_values().flatten().collect();
                let policies: Vec<_> = batch.policies.into_values().flatten().collect();
                engine.load(&namespaces, batch.pods.into_values().flatten(), &policies);
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
        let written = match written {
            Ok(()) if recheck => self.recheck(),
            other => other,
        };
        match written {
            Ok(()) => {
                self.in_place = true;
                self.retry.reset();
                self.retry_at = None;
                if let Some(since) = since {
                    let us = since.elapsed().as_micros() as u64;
                    m.last_latency_us.store(us, Ordering::Relaxed);
                    m.max_latency_us.fetch_max(us, Ordering::Relaxed);
                }
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
        m.in_place.store(self.in_place, Ordering::Relaxed);
        self.count();
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
                Some(np) => engine.set_policy(&np),
                None => {
                    let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                    engine.remove_policy(ns, name)
                }
            });
        }
        for (key, pod) in batch.pods {
            out.push(match pod {
                Some(pod) => engine.set_pod(pod),
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
            if let Err(e) = self.net.apply_policy(ch) {
                log(&format!(
                    "warning: NetworkPolicy: {e}: replacing the whole table"
                ));
                return self.program_afresh(false);
            }
        }
        Ok(())
    }

    /// The whole program into the kernel: the difference from what the kernel holds when
    /// it is a table of ours (`first`: after a start), else a replacement.
    fn program_afresh(&mut self, first: bool) -> Result<(), NodeNetError> {
        let program = self.engine.as_ref().expect("loaded").program();
        log_refused(&mut self.warned, program);
        self.metrics.transactions.fetch_add(1, Ordering::Relaxed);
        if first && let Ok(Some(held)) = self.net.read_policy() {
            let changes = diff(&held, program);
            if self.net.apply_policy(&changes).is_ok() {
                log(&format!(
                    "NetworkPolicy: table inet {} in place ({} changes to what the kernel held)",
                    netpol::program::TABLE,
                    size(&changes)
                ));
                return Ok(());
            }
        }
        self.net.replace_policy(program)?;
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
        if self.net.policy_matches(program)? {
            return Ok(());
        }
        log("NetworkPolicy: the kernel's table differs from the policies: writing it again");
        self.program_afresh(false)
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
/// ends with the agent's main loop).
pub fn start(
    node: &str,
    local: Vec<IpAddr>,
    client: Arc<crate::kube::api::Client>,
    shared: Arc<crate::kube::watcher::Shared>,
    net: Box<dyn PolicyNet + Send>,
    metrics: Arc<crate::serve::Metrics>,
    interval: Duration,
) -> std::io::Result<()> {
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
    let node = node.to_string();
    std::thread::Builder::new()
        .name("netpol".into())
        .spawn(move || run(&node, local, &inbox, &*net, &metrics.policy, interval))?;
    Ok(())
}
