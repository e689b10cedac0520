//! The Node cache: a list, then a watch from the list's resourceVersion (with bookmarks),
//! kept up to date on its own thread. An event only changes the cache and marks it dirty;
//! the reconcile loop takes a snapshot when it is ready for one, so a flood of events
//! costs one reconcile, not one each.
//!
//! Built for a fleet: after an API server restart 5,000 agents must not stampede it.
//! - Lists are served from the API server's watch cache: the first with
//!   `resourceVersion=0`, a re-list with the last resourceVersion seen (not older than
//!   what the agent acted on). A quorum read (etcd) only when the cache cannot answer
//!   (the list is answered 410, or 504 "Too large resource version").
//! - A watch the server ends at its `timeoutSeconds` (30-40 s, drawn per watch) resumes at
//!   once from the last resourceVersion seen (events or bookmarks), as client-go does.
//! - Every other end waits a jittered, doubling backoff first: a watch that ended within
//!   a second with no event (client-go's rule: a failure), a 410 (then a re-list), a
//!   connection or status failure (then a watch from the same resourceVersion), an event
//!   that does not decode or is too large (then a re-list), a failed list. Only a watch
//!   that opened and then delivered an event or lasted a second resets the backoff, so a list that
//!   succeeds between two 410s does not.
//!
//! The API is never polled.
//!
//! The loop is the same for every collection ([`run_collection`]); where it puts what it
//! reads is a [`Cache`]: [`Shared`] for the Nodes, the NetworkPolicy inbox for the rest.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hostnet::node::Drift;

use crate::backoff::{Backoff, Jitter};
use crate::kube::api::{ApiError, Client, ListFrom, Watch};
use crate::kube::collection::{Collection, Nodes, WatchEvent};
use crate::kube::nodes::NodeInfo;
use crate::log;

/// A cluster far beyond Kubernetes' tested 5,000 nodes; more is refused (and re-listed
/// after a backoff) rather than grown without bound.
pub const MAX_NODES: usize = 100_000;
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Each watch asks the server to end it after a time drawn from this range (seconds):
/// with `WATCH_SLACK`, a connection gone silent is given up within a minute, and agents
/// that started together do not re-watch together.
pub const WATCH_SECONDS: (u64, u64) = (30, 40);
/// A watch that ends sooner than this with no event is a failure (client-go's rule).
const SHORT_WATCH: Duration = Duration::from_secs(1);

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

/// Where a list + watch loop of `C` puts what it reads.
pub trait Cache<C: Collection> {
    /// A full list: the collection as it now is (without what `listed` kept). Err:
    /// refused (a re-list after a backoff).
    fn replace(&self, items: Vec<C::Object>) -> Result<(), String>;
    /// One ADDED, MODIFIED or DELETED event. Err: the cache cannot follow (a re-list).
    fn apply(&self, event: WatchEvent<C::Object>) -> Result<(), String>;
    /// An object of a list being read, as soon as it is decoded: the cache may keep it
    /// (None), or hand it back for `replace` (the default). Err: refused.
    fn listed(&self, object: C::Object) -> Result<Option<C::Object>, String> {
        Ok(Some(object))
    }
    /// The list being read failed: what `listed` kept of it is void.
    fn list_failed(&self) {}
}

impl Cache<Nodes> for Shared {
    fn replace(&self, nodes: Vec<NodeInfo>) -> Result<(), String> {
        if nodes.len() > MAX_NODES {
            return Err(format!("the node list has more than {MAX_NODES} nodes"));
        }
        Shared::replace(self, nodes);
        Ok(())
    }

    fn apply(&self, event: WatchEvent) -> Result<(), String> {
        Shared::apply(self, event)
    }
}

/// Time as the watch loop sees it: real for the agent; tests pass a clock that moves only
/// in their pauses, to count requests against the delays taken.
pub trait Pace {
    /// Waits `d` unless a stop comes first; false if stopped (or the test is done).
    fn pause(&mut self, shared: &Shared, d: Duration) -> bool;
    fn now(&self) -> Instant;
}

pub struct RealTime;

impl Pace for RealTime {
    fn pause(&mut self, shared: &Shared, d: Duration) -> bool {
        shared.sleep(d)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Keeps `shared`'s cache in step with the API server until a stop is requested; each
/// failed request or watch counts in `api_errors`.
pub fn run(client: &Client, shared: &Shared, api_errors: &AtomicU64) {
    run_paced(client, shared, api_errors, &mut RealTime);
}

/// [`run`] with the pauses and the clock of `pace`.
pub fn run_paced(client: &Client, shared: &Shared, api_errors: &AtomicU64, pace: &mut dyn Pace) {
    run_collection::<Nodes>(client, shared, shared, api_errors, pace);
}

/// Keeps `cache` in step with the API server's collection `C` until `shared` is asked
/// to stop, with the pauses and the clock of `pace`.
pub fn run_collection<C: Collection>(
    client: &Client,
    shared: &Shared,
    cache: &dyn Cache<C>,
    api_errors: &AtomicU64,
    pace: &mut dyn Pace,
) {
    let mut backoff = Backoff::new(MAX_BACKOFF);
    let mut jitter = Jitter::seeded();
    let mut from = ListFrom::Cache;
    // The last resourceVersion seen, and whether the cache holds everything up to it.
    let mut rv = String::new();
    let mut listed = false;
    let mut wait = false;
    while shared.stopped().is_none() {
        if wait && !pace.pause(shared, backoff.take()) {
            return;
        }
        wait = true;
        if !listed {
            match list(client, cache, &from) {
                Ok(v) => {
                    rv = v;
                    listed = true;
                    wait = false;
                }
                Err(e) => {
                    if e.api().is_some_and(cache_cannot_answer) {
                        from = ListFrom::Quorum;
                    }
                    api_failure(api_errors, &e.to_string());
                }
            }
            continue;
        }
        let (lo, hi) = WATCH_SECONDS;
        let seconds = lo + (jitter.unit() * (hi - lo + 1) as f64) as u64;
        let end = match client.watch_of::<C>(&rv, seconds) {
            Ok(mut watch) => {
                let opened = pace.now();
                let mut events = 0u64;
                let end = follow(&mut watch, shared, cache, &mut rv, &mut events);
                // Opened, and an event or a second: the server is serving watches again.
                if events > 0 || pace.now().duration_since(opened) >= SHORT_WATCH {
                    backoff.reset();
                    if let WatchEnd::Timeout = end {
                        wait = false;
                        continue;
                    }
                }
                end
            }
            Err(e) => end_of(e),
        };
        match end {
            WatchEnd::Timeout => api_failure(
                api_errors,
                "the API server ended the watch within a second, with no event",
            ),
            WatchEnd::Gone(msg) => {
                log(&msg);
                listed = false;
            }
            WatchEnd::Failed { msg, relist } => {
                api_failure(api_errors, &msg);
                listed = !relist;
            }
            WatchEnd::Stopped => return,
        }
        if !listed {
            // Never older than what the agent has acted on.
            from = ListFrom::NotOlderThan(rv.clone());
        }
    }
}

/// Why a list failed: the API's answer, or the cache refused it (beyond its bound).
enum ListError {
    Api(ApiError),
    Refused(String),
}

impl ListError {
    fn api(&self) -> Option<&ApiError> {
        match self {
            ListError::Api(e) => Some(e),
            ListError::Refused(_) => None,
        }
    }
}

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListError::Api(e) => e.fmt(f),
            ListError::Refused(why) => f.write_str(why),
        }
    }
}

/// The watch cache cannot serve a list not older than the resourceVersion asked for: it
/// was compacted away (410), or the cache has not caught up with it within the API
/// server's wait (504 "Too large resource version", e.g. a lagging API server behind a
/// load balancer). Then the next list is a quorum read.
fn cache_cannot_answer(e: &ApiError) -> bool {
    match e {
        ApiError::Gone { .. } => true,
        ApiError::Status {
            status: 504,
            message,
            ..
        } => message.contains("Too large resource version"),
        _ => false,
    }
}

/// Lists the whole collection into the cache; the list's resourceVersion.
fn list<C: Collection>(
    client: &Client,
    cache: &dyn Cache<C>,
    from: &ListFrom,
) -> Result<String, ListError> {
    let mut items = Vec::new();
    let listed = client
        .list_each::<C>(from, &mut |o| {
            items.extend(cache.listed(o)?);
            Ok(())
        })
        .map_err(ListError::Api)
        .and_then(|rv| {
            cache.replace(items).map_err(ListError::Refused)?;
            Ok(rv)
        });
    if listed.is_err() {
        cache.list_failed();
    }
    listed
}

enum WatchEnd {
    /// The server ended the watch (its timeout, or earlier).
    Timeout,
    Gone(String),
    /// `relist`: an event may have been lost; else the watch resumes from the last
    /// resourceVersion seen.
    Failed {
        msg: String,
        relist: bool,
    },
    Stopped,
}

/// What a failed request or read of a watch means for the next step.
fn end_of(e: ApiError) -> WatchEnd {
    match e {
        ApiError::Gone { .. } => WatchEnd::Gone(e.to_string()),
        ApiError::Decode { .. } | ApiError::BadNode { .. } => WatchEnd::Failed {
            msg: e.to_string(),
            relist: true,
        },
        e => WatchEnd::Failed {
            msg: e.to_string(),
            relist: false,
        },
    }
}

/// Applies `watch`'s events (counted in `events`) until it ends.
fn follow<C: Collection>(
    watch: &mut Watch<C>,
    shared: &Shared,
    cache: &dyn Cache<C>,
    rv: &mut String,
    events: &mut u64,
) -> WatchEnd {
    loop {
        if shared.stopped().is_some() {
            return WatchEnd::Stopped;
        }
        let event = match watch.next_event() {
            Ok(Some(event)) => event,
            Ok(None) => return WatchEnd::Timeout,
            Err(e) => return end_of(e),
        };
        match &event {
            WatchEvent::Applied(_, v) | WatchEvent::Deleted(_, v) | WatchEvent::Bookmark(v)
                if !v.is_empty() =>
            {
                rv.clone_from(v)
            }
            WatchEvent::Error { code, message } => {
                return WatchEnd::Failed {
                    msg: format!("watch ERROR event {code}: {message}"),
                    relist: true,
                };
            }
            _ => {}
        }
        if let Err(msg) = cache.apply(event) {
            return WatchEnd::Failed { msg, relist: true };
        }
        *events += 1;
    }
}

fn api_failure(api_errors: &AtomicU64, msg: &str) {
    api_errors.fetch_add(1, Ordering::Relaxed);
    log(&format!("error: {msg} (retrying after a backoff)"));
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
    fn only_a_cache_that_cannot_answer_makes_the_list_a_quorum_read() {
        let status = |status, message: &str| ApiError::Status {
            url: "u".into(),
            status,
            message: message.into(),
        };
        let gone = ApiError::Gone {
            url: "u".into(),
            message: "too old resource version".into(),
        };
        assert!(cache_cannot_answer(&gone));
        assert!(cache_cannot_answer(&status(
            504,
            "Too large resource version: 12, current: 10"
        )));
        assert!(!cache_cannot_answer(&status(504, "gateway timeout")));
        assert!(!cache_cannot_answer(&status(
            500,
            "etcdserver: leader changed"
        )));
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
