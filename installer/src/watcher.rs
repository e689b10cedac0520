//! The Node cache: a list, then a watch from the list's resourceVersion (with bookmarks),
//! kept up to date on its own thread. An event only changes the cache and marks it dirty;
//! the reconcile loop takes a snapshot when it is ready for one, so a flood of events
//! costs one reconcile, not one each.
//!
//! A watch the server ends (its `timeoutSeconds`) resumes from the last resourceVersion
//! seen (events or bookmarks), as client-go's reflector does; a 410 re-lists at once; any
//! other failure (connection, status, an event that does not decode or is too large)
//! re-lists after a jittered backoff. The API is never polled.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hostnet::node::Drift;

use crate::api::{ApiError, Client};
use crate::backoff::Backoff;
use crate::health::Metrics;
use crate::log;
use crate::nodes::{NodeInfo, WatchEvent};

/// A cluster far beyond Kubernetes' tested 5,000 nodes; more is refused (and re-listed
/// after a backoff) rather than grown without bound.
pub const MAX_NODES: usize = 100_000;
const MAX_BACKOFF: Duration = Duration::from_secs(30);

#[derive(Default)]
struct State {
    /// Shared with the snapshots handed out: a snapshot costs a pointer per Node.
    nodes: BTreeMap<String, Arc<NodeInfo>>,
    /// A full list has arrived: the cache is the cluster (before: never act on it).
    synced: bool,
    dirty: bool,
    /// What the kernel told us someone else changed since the loop last asked.
    drift: Drift,
    /// The signal (or test request) that stops the agent.
    stop: Option<i32>,
}

/// The cache and the agent's stop request, shared by the watch thread, the reconcile loop
/// and the signal thread.
#[derive(Default)]
pub struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// What [`Shared::wait`] woke up for.
pub enum Wake {
    Stop(i32),
    /// The cache changed since the last snapshot: every Node (None before the first list).
    Changed(Option<Vec<Arc<NodeInfo>>>),
    /// Nothing happened for the whole timeout.
    Idle,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn request_stop(&self, sig: i32) {
        self.lock().stop = Some(sig);
        self.changed.notify_all();
    }

    pub fn stopped(&self) -> Option<i32> {
        self.lock().stop
    }

    /// Marks the cache dirty without a change (the reconcile loop's own retry).
    pub fn mark_dirty(&self) {
        self.lock().dirty = true;
        self.changed.notify_all();
    }

    /// The kernel changed objects of ours (someone else did): wakes the loop like a Node
    /// event; [`Shared::take_drift`] tells it what to read again.
    pub fn kernel_changed(&self, drift: Drift) {
        let mut s = self.lock();
        s.drift = s.drift.union(drift);
        s.dirty = true;
        self.changed.notify_all();
    }

    /// What the kernel changed since the last call (empty: nothing).
    pub fn take_drift(&self) -> Drift {
        std::mem::take(&mut self.lock().drift)
    }

    /// Waits up to `timeout` for a change or a stop; a change that came while the caller
    /// was busy is returned at once.
    pub fn wait(&self, timeout: Duration) -> Wake {
        let end = Instant::now() + timeout;
        let mut s = self.lock();
        loop {
            if let Some(sig) = s.stop {
                return Wake::Stop(sig);
            }
            if s.dirty {
                s.dirty = false;
                return Wake::Changed(s.synced.then(|| s.nodes.values().cloned().collect()));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Wake::Idle;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Sleeps `d` unless a stop comes first; false if stopped.
    fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        let mut s = self.lock();
        while s.stop.is_none() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        false
    }

    fn replace(&self, nodes: Vec<NodeInfo>) {
        let mut s = self.lock();
        s.nodes = nodes
            .into_iter()
            .map(|n| (n.name.clone(), Arc::new(n)))
            .collect();
        s.synced = true;
        s.dirty = true;
        self.changed.notify_all();
    }

    fn apply(&self, event: WatchEvent) -> Result<(), String> {
        let mut s = self.lock();
        match event {
            WatchEvent::Applied(node, _) => {
                if !s.nodes.contains_key(&node.name) && s.nodes.len() >= MAX_NODES {
                    return Err(format!("more than {MAX_NODES} nodes"));
                }
                if s.nodes.get(&node.name).is_some_and(|n| **n == node) {
                    return Ok(()); // a status heartbeat: nothing the agent uses changed
                }
                s.nodes.insert(node.name.clone(), Arc::new(node));
            }
            WatchEvent::Deleted(node, _) => {
                if s.nodes.remove(&node.name).is_none() {
                    return Ok(());
                }
            }
            WatchEvent::Bookmark(_) | WatchEvent::Error { .. } => return Ok(()),
        }
        s.dirty = true;
        self.changed.notify_all();
        Ok(())
    }
}

/// Keeps `shared`'s cache in step with the API server until a stop is requested.
pub fn run(client: &Client, shared: &Shared, metrics: &Metrics) {
    let mut backoff = Backoff::new(MAX_BACKOFF);
    let mut failed = false;
    while shared.stopped().is_none() {
        if failed && !shared.sleep(backoff.take()) {
            return;
        }
        failed = true;
        let listing = match client.list() {
            Ok(l) if l.nodes.len() > MAX_NODES => {
                api_failure(
                    metrics,
                    &format!("the node list has more than {MAX_NODES} nodes"),
                );
                continue;
            }
            Ok(l) => l,
            Err(e) => {
                api_failure(metrics, &e.to_string());
                continue;
            }
        };
        let mut rv = listing.resource_version;
        shared.replace(listing.nodes);
        // Watches until one fails; a clean end resumes from the last resourceVersion.
        loop {
            match watch_once(client, shared, &mut rv, &mut backoff) {
                Ok(()) => continue,
                Err(WatchEnd::Gone(msg)) => {
                    log(&msg);
                    failed = false;
                }
                Err(WatchEnd::Failed(msg)) => api_failure(metrics, &msg),
                Err(WatchEnd::Stopped) => return,
            }
            break;
        }
    }
}

enum WatchEnd {
    Gone(String),
    Failed(String),
    Stopped,
}

fn watch_once(
    client: &Client,
    shared: &Shared,
    rv: &mut String,
    backoff: &mut Backoff,
) -> Result<(), WatchEnd> {
    let failed = |e: ApiError| match e {
        ApiError::Gone { .. } => WatchEnd::Gone(e.to_string()),
        e => WatchEnd::Failed(e.to_string()),
    };
    let mut watch = client.watch(rv).map_err(failed)?;
    loop {
        if shared.stopped().is_some() {
            return Err(WatchEnd::Stopped);
        }
        let Some(event) = watch.next_event().map_err(failed)? else {
            return Ok(());
        };
        match &event {
            WatchEvent::Applied(_, v) | WatchEvent::Deleted(_, v) | WatchEvent::Bookmark(v)
                if !v.is_empty() =>
            {
                rv.clone_from(v)
            }
            WatchEvent::Error { code, message } => {
                return Err(WatchEnd::Failed(format!(
                    "watch ERROR event {code}: {message}"
                )));
            }
            _ => {}
        }
        shared.apply(event).map_err(WatchEnd::Failed)?;
        backoff.reset();
    }
}

fn api_failure(metrics: &Metrics, msg: &str) {
    metrics.api_error();
    log(&format!("error: {msg} (re-listing after a backoff)"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cidr: &str) -> NodeInfo {
        NodeInfo::new(name.into(), "spec.podCIDRs", vec![cidr.into()], vec![])
    }

    #[test]
    fn nothing_is_handed_out_before_the_first_list_and_events_coalesce() {
        let shared = Shared::default();
        assert!(matches!(shared.wait(Duration::ZERO), Wake::Idle));
        shared.mark_dirty();
        assert!(matches!(shared.wait(Duration::ZERO), Wake::Changed(None)));
        shared.replace(vec![node("a", "10.0.1.0/24")]);
        for i in 0..1000 {
            let event = WatchEvent::Applied(node(&format!("n{i}"), "10.0.2.0/24"), "1".into());
            shared.apply(event).unwrap();
        }
        let Wake::Changed(Some(nodes)) = shared.wait(Duration::ZERO) else {
            panic!("no snapshot")
        };
        assert_eq!(nodes.len(), 1001);
        // All of them in one snapshot: nothing is left for a second reconcile.
        assert!(matches!(shared.wait(Duration::ZERO), Wake::Idle));
    }

    #[test]
    fn an_unchanged_node_does_not_mark_dirty_and_a_delete_does() {
        let shared = Shared::default();
        shared.replace(vec![node("a", "10.0.1.0/24")]);
        let _ = shared.wait(Duration::ZERO);
        shared
            .apply(WatchEvent::Applied(node("a", "10.0.1.0/24"), "2".into()))
            .unwrap();
        assert!(matches!(shared.wait(Duration::ZERO), Wake::Idle));
        shared
            .apply(WatchEvent::Deleted(node("a", "10.0.1.0/24"), "3".into()))
            .unwrap();
        assert!(matches!(shared.wait(Duration::ZERO), Wake::Changed(Some(n)) if n.is_empty()));
    }

    #[test]
    fn kernel_changes_wake_the_loop_and_coalesce() {
        let shared = Shared::default();
        shared.replace(vec![node("a", "10.0.1.0/24")]);
        let _ = shared.wait(Duration::ZERO);
        let routes = Drift {
            routes: true,
            ..Drift::default()
        };
        let firewall = Drift {
            firewall: true,
            ..Drift::default()
        };
        shared.kernel_changed(routes);
        shared.kernel_changed(firewall);
        assert!(matches!(shared.wait(Duration::ZERO), Wake::Changed(Some(n)) if n.len() == 1));
        assert_eq!(shared.take_drift(), routes.union(firewall));
        assert!(shared.take_drift().is_empty());
        assert!(matches!(shared.wait(Duration::ZERO), Wake::Idle));
    }

    #[test]
    fn a_stop_wins_over_changes() {
        let shared = Shared::default();
        shared.replace(vec![]);
        shared.request_stop(15);
        assert!(matches!(
            shared.wait(Duration::from_secs(60)),
            Wake::Stop(15)
        ));
        assert!(!shared.sleep(Duration::from_secs(60)));
    }
}
