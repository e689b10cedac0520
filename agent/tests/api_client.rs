//! The API client under a fleet, against the stub API server: how many requests the watch
//! loop makes when every watch fails, over how many connections, with what parameters.
//! The loop runs on a virtual clock that moves only in its backoff pauses, so request
//! counts are checked against the delays taken, not against wall-clock time.

mod support;

use std::time::{Duration, Instant};

use cni_rs_agent::kube::api::{Client, Kind, Outcome};
use cni_rs_agent::kube::watcher::{self, Pace, Shared};
use cni_rs_agent::serve::Metrics;
use support::Node;
use support::apiserver::WatchMode;

/// Pauses return at once (after `on_pause`, given their number); after `limit` of them
/// the loop is told to stop.
struct VirtualTime<'a> {
    now: Instant,
    pauses: Vec<Duration>,
    limit: usize,
    on_pause: &'a dyn Fn(usize),
}

impl Pace for VirtualTime<'_> {
    fn pause(&mut self, _: &Shared, d: Duration) -> bool {
        self.pauses.push(d);
        self.now += d;
        (self.on_pause)(self.pauses.len());
        self.pauses.len() < self.limit
    }

    fn now(&self) -> Instant {
        self.now
    }
}

fn client(node: &Node) -> Client {
    Client::new(
        node.api.url(),
        node.dir.join("sa/token"),
        node.dir.join("sa/ca.crt"),
    )
}

/// Runs the watch loop until it has paused `limit` times.
fn run(node: &Node, limit: usize) -> (Vec<Duration>, Client, Metrics) {
    run_with(node, limit, &|_| {})
}

fn run_with(
    node: &Node,
    limit: usize,
    on_pause: &dyn Fn(usize),
) -> (Vec<Duration>, Client, Metrics) {
    let (client, shared, metrics) = (client(node), Shared::default(), Metrics::default());
    let mut pace = VirtualTime {
        now: Instant::now(),
        pauses: vec![],
        limit,
        on_pause,
    };
    metrics.count_requests(client.requests());
    watcher::run_paced(&client, &shared, &metrics.api_errors, &mut pace);
    (pace.pauses, client, metrics)
}

/// Pause `i` is within the jittered backoff: [d/2, d] for d = 1 s doubling up to 30 s.
fn assert_backed_off(pauses: &[Duration]) {
    for (i, p) in pauses.iter().enumerate() {
        let d = Duration::from_secs(1 << i.min(5)).min(Duration::from_secs(30));
        assert!(
            *p >= d / 2 && *p <= d,
            "pause {i}: {p:?} not in [{:?}, {d:?}]",
            d / 2
        );
    }
    // Jittered: the pauses at the cap are not all the same.
    let capped = &pauses[5..];
    assert!(
        capped.iter().any(|p| *p != capped[0]),
        "no jitter: {capped:?}"
    );
}

#[test]
fn a_server_that_ends_every_watch_at_once_gets_one_watch_per_growing_jittered_backoff() {
    let node = Node::new(&["10.244.1.0/24"]);
    node.api.set_watch_mode(WatchMode::EndAtOnce);
    let limit = 12;
    let (pauses, client, metrics) = run(&node, limit);
    assert_eq!(pauses.len(), limit);
    assert_backed_off(&pauses);
    let counts = node.api.counts();
    // One list, from the watch cache; then a watch right after it and one after each
    // pause but the last (the stop): an ended watch resumes, it does not re-list.
    assert_eq!(counts.list_rvs, vec![Some("0".to_string())]);
    assert_eq!(counts.watches as usize, limit);
    assert_eq!(counts.requests as usize, limit + 1);
    // Over the failing stretch the rate is bounded by the backoff: once it reached its
    // cap, at most one request per 15 s of (virtual) time.
    let capped: Duration = pauses[5..limit - 1].iter().sum();
    assert!(capped >= Duration::from_secs(15) * (limit - 6) as u32);
    // Every watch asks for bookmarks and an end well within a minute, each its own.
    for q in &counts.watch_queries {
        assert_eq!(q["allowWatchBookmarks"], "true", "{q:?}");
        let t: u64 = q["timeoutSeconds"].parse().unwrap();
        assert!((30..=40).contains(&t), "{q:?}");
        assert_eq!(
            q["resourceVersion"],
            counts.watch_queries[0]["resourceVersion"]
        );
    }
    let timeouts: std::collections::BTreeSet<&String> = counts
        .watch_queries
        .iter()
        .map(|q| &q["timeoutSeconds"])
        .collect();
    assert!(
        timeouts.len() > 1,
        "the watch timeouts are not spread: {timeouts:?}"
    );
    // All of it over one kept-alive TLS connection.
    assert_eq!(counts.connections, 1);
    assert_eq!(client.requests().connections(), 1);
    // /metrics counts what the server saw.
    let out = metrics.render();
    for (kind, outcome, n) in [
        ("list", "ok", 1),
        ("watch", "ok", limit),
        ("watch", "error", 0),
        ("get", "ok", 0),
    ] {
        let line =
            format!("cni_rs_api_requests_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} {n}\n");
        assert!(out.contains(&line), "no {line:?} in\n{out}");
    }
    assert!(out.contains("\ncni_rs_api_connections_total 1\n"), "{out}");
}

#[test]
fn a_watch_answered_410_every_time_relists_from_the_cache_after_a_growing_jittered_backoff() {
    let node = Node::new(&["10.244.1.0/24"]);
    node.api
        .put_node("node-2", &["10.244.2.0/24"], &["172.18.0.3"]);
    node.api.set_watch_mode(WatchMode::Gone);
    let limit = 10;
    let (pauses, client, _metrics) = run(&node, limit);
    assert_backed_off(&pauses);
    let counts = node.api.counts();
    // A list and its watch first, then one list and one watch after each pause but the
    // last: a list that succeeds between two 410s does not reset the backoff.
    assert_eq!(counts.lists as usize, limit);
    assert_eq!(counts.watches as usize, limit);
    // The first list takes the cache as it is; each re-list asks the cache for a state
    // not older than the last resourceVersion seen; none is a quorum read.
    let rv = counts.watch_queries[0]["resourceVersion"].clone();
    assert_ne!(rv, "0");
    let mut want = vec![Some("0".to_string())];
    want.extend(std::iter::repeat_n(Some(rv), limit - 1));
    assert_eq!(counts.list_rvs, want);
    // A re-list says so, and has no limit: with one, the API server would read that exact
    // version from etcd instead.
    for q in &counts.list_queries[1..] {
        assert_eq!(q["resourceVersionMatch"], "NotOlderThan", "{q:?}");
        assert!(!q.contains_key("limit"), "{q:?}");
    }
    assert_eq!(counts.connections, 1);
    assert_eq!(
        client.requests().count(Kind::List, Outcome::Ok) as usize,
        limit
    );
}

#[test]
fn a_cache_behind_what_the_agent_saw_makes_one_quorum_read_then_the_cache_again() {
    let node = Node::new(&["10.244.1.0/24"]);
    node.api
        .put_node("node-2", &["10.244.2.0/24"], &["172.18.0.3"]);
    node.api.set_watch_mode(WatchMode::Gone);
    // At the first pause (after the first 410) the server falls behind what was listed.
    let (_, client, _) = run_with(&node, 4, &|n| {
        if n == 1 {
            node.api.rewind(4000);
        }
    });
    let counts = node.api.counts();
    let listed = counts.watch_queries[0]["resourceVersion"].clone();
    assert_eq!(
        counts.list_rvs,
        vec![
            Some("0".to_string()),
            Some(listed), // answered 504 "Too large resource version"
            None,         // the quorum read
            Some("4000".to_string()),
        ]
    );
    assert_eq!(client.requests().count(Kind::List, Outcome::Error), 1);
}

#[test]
fn a_silent_watch_connection_is_given_up_after_its_timeout_and_a_little_slack() {
    let node = Node::new(&["10.244.1.0/24"]);
    node.api.set_watch_mode(WatchMode::Silent);
    let client = client(&node);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut watch = client.watch("1", 1).unwrap();
        let _ = tx.send(watch.next_event().map(|_| ()).map_err(|e| e.to_string()));
    });
    // The server said nothing after the headers: the client ends the watch itself at
    // timeoutSeconds + WATCH_SLACK (11 s here; 30-40 s + 10 s in the agent), not 330 s.
    let ended = rx
        .recv_timeout(Duration::from_secs(1) + cni_rs_agent::kube::api::WATCH_SLACK * 3)
        .expect("the silent watch was not given up");
    let err = ended.unwrap_err();
    assert!(err.contains("timeout") || err.contains("Timeout"), "{err}");
}

#[test]
fn pods_namespaces_and_policies_are_listed_and_watched_like_nodes() {
    use cni_rs_agent::kube::api::ListFrom;
    use cni_rs_agent::kube::collection::{NetworkPolicies, Pods, WatchEvent};
    use support::apiserver::ObjectKind;
    let node = Node::new(&["10.244.1.0/24"]);
    let pod = |name: &str, ip: &str| {
        serde_json::json!({
            "metadata": { "name": name, "namespace": "x", "labels": { "pod": name } },
            "spec": { "nodeName": "node-1" },
            "status": { "phase": "Running", "podIPs": [{ "ip": ip }] }
        })
    };
    node.api.put_object(ObjectKind::Pod, pod("a", "10.244.1.5"));
    let client = client(&node);
    let listing = client.list_of::<Pods>(&ListFrom::Cache).unwrap();
    assert_eq!(listing.items.len(), 1);
    assert_eq!(listing.items[0].name, "a");
    assert_eq!(listing.items[0].labels["pod"], "a");
    // No policy yet: an empty list of the other group's kind.
    assert!(
        client
            .list_of::<NetworkPolicies>(&ListFrom::Cache)
            .unwrap()
            .items
            .is_empty()
    );
    let mut watch = client
        .watch_of::<Pods>(&listing.resource_version, 5)
        .unwrap();
    // A Node event in between is not the pod watch's.
    node.api
        .put_node("node-2", &["10.244.2.0/24"], &["172.18.0.3"]);
    node.api.put_object(ObjectKind::Pod, pod("b", "10.244.1.6"));
    node.api.delete_object(ObjectKind::Pod, "x", "a");
    let Ok(Some(WatchEvent::Applied(b, _))) = watch.next_event() else {
        panic!("no ADDED event for pod b");
    };
    assert_eq!(b.name, "b");
    let Ok(Some(WatchEvent::Deleted(a, _))) = watch.next_event() else {
        panic!("no DELETED event for pod a");
    };
    assert_eq!(a.name, "a");
}

/// A list the cache refuses midway is void: the cache is told (`list_failed`), and the
/// next list is read again from its first object.
#[test]
fn a_list_refused_midway_is_void_and_read_again_from_its_start() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use cni_rs_agent::kube::collection::{Pods, WatchEvent};
    use cni_rs_agent::kube::watcher::Cache;
    use netpol::cluster::Pod;
    use support::apiserver::ObjectKind;

    /// Keeps every pod as it is read; refuses the second one of the first list.
    #[derive(Default)]
    struct Refusing {
        listed: Mutex<Vec<String>>,
        failed: AtomicUsize,
        replaced: Mutex<Vec<usize>>,
    }
    impl Cache<Pods> for Refusing {
        fn replace(&self, items: Vec<Pod>) -> Result<(), String> {
            self.replaced.lock().unwrap().push(items.len());
            Ok(())
        }
        fn apply(&self, _: WatchEvent<Pod>) -> Result<(), String> {
            Ok(())
        }
        fn listed(&self, pod: Pod) -> Result<Option<Pod>, String> {
            let mut listed = self.listed.lock().unwrap();
            listed.push(pod.name);
            if listed.len() == 2 {
                return Err("full".into());
            }
            Ok(None)
        }
        fn list_failed(&self) {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    let node = Node::new(&["10.244.1.0/24"]);
    for name in ["a", "b", "c"] {
        node.api.put_object(
            ObjectKind::Pod,
            serde_json::json!({ "metadata": { "name": name, "namespace": "x" } }),
        );
    }
    // The watch after the second list ends at once: the loop pauses, and stops.
    node.api.set_watch_cap(Some(Duration::from_millis(50)));
    let (client, shared, cache) = (client(&node), Shared::default(), Refusing::default());
    let mut pace = VirtualTime {
        now: Instant::now(),
        pauses: vec![],
        limit: 2,
        on_pause: &|_| {},
    };
    let errors = AtomicU64::new(0);
    watcher::run_collection::<Pods>(&client, &shared, &cache, &errors, &mut pace);
    assert_eq!(*cache.listed.lock().unwrap(), ["a", "b", "a", "b", "c"]);
    assert_eq!(cache.failed.load(Ordering::Relaxed), 1);
    assert_eq!(
        *cache.replaced.lock().unwrap(),
        [0],
        "one whole list, all kept"
    );
    assert!(errors.load(Ordering::Relaxed) >= 1);
}
