//! A stand-in for the Kubernetes API server: HTTPS on a local address with a throwaway CA,
//! checked against a bearer token, answering in the real API's shape. It serves
//! `GET /api/v1/nodes/NAME` (one Node), `GET /api/v1/nodes?limit=&continue=` (the list, in
//! pages) and `?watch=1&resourceVersion=` (a stream of events from a history, with
//! bookmarks and a 410 ERROR event for a resourceVersion older than the history). Tests
//! add, change and delete Nodes, expire every watch (410), drop the watch connections and
//! send garbage. Used by the installer tests and, through `examples/stub-apiserver.rs`, by
//! `scripts/e2e-install.sh` and the scale benchmark.
//!
//! HTTP/1.1 with keep-alive as the real API server: answers with a Content-Length, watches
//! chunked, many requests per connection; it counts connections and requests by kind, and
//! records each list's and watch's query. A list with `resourceVersion=0`, or with a
//! resourceVersion and no limit, is served as the watch cache does: every Node in one
//! page, `limit` ignored. `set_watch_mode` makes every watch end at once, or answer 410, or go silent;
//! `restart` closes everything and listens again after a pause, with a fresh history.
//!
//! Pods, Namespaces and NetworkPolicies (what the agent's NetworkPolicy enforcement
//! watches) are served alike, cluster-wide (`/api/v1/pods`, `/api/v1/namespaces`,
//! `/apis/networking.k8s.io/v1/networkpolicies`: list and watch, one resourceVersion
//! sequence for all kinds, as etcd's); tests put and delete them as JSON objects.
//! [`Counts`]' lists and watches are the Nodes' only.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};

/// What the server answers for "the" node (the one `start` names); tests change it while
/// the installer runs. Every change is a MODIFIED event for watchers.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// `spec.podCIDRs` of the node (empty: not assigned yet; the field is then absent).
    pub pod_cidrs: Vec<String>,
    /// Set only `spec.podCIDR` (a cluster from before dual-stack).
    pub legacy_pod_cidr_only: bool,
    /// Answer 403 as if the ClusterRole were missing.
    pub forbidden: bool,
    /// The node's InternalIPs.
    pub internal_ips: Vec<String>,
}

#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub requests: u32,
    pub unauthorized: u32,
    pub lists: u32,
    pub watches: u32,
    pub gets: u32,
    /// TLS connections accepted.
    pub connections: u32,
    /// The `resourceVersion` of each list request (None: absent, a quorum read).
    pub list_rvs: Vec<Option<String>>,
    /// The query of each list request.
    pub list_queries: Vec<BTreeMap<String, String>>,
    /// The query of each watch request.
    pub watch_queries: Vec<BTreeMap<String, String>>,
}

/// How every new watch is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchMode {
    /// Events from the history until the client's timeoutSeconds.
    #[default]
    Normal,
    /// Ended at once, cleanly, with no event.
    EndAtOnce,
    /// A 410 ERROR event at once ("too old resource version"), then the end.
    Gone,
    /// Headers, then nothing, never an end: a half-open connection.
    Silent,
}

/// A kind the stub holds as plain objects (beside its Nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    Pod,
    Namespace,
    NetworkPolicy,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 3] = [
        ObjectKind::Pod,
        ObjectKind::Namespace,
        ObjectKind::NetworkPolicy,
    ];

    /// The collection's path, cluster-wide.
    pub fn path(self) -> &'static str {
        match self {
            ObjectKind::Pod => "/api/v1/pods",
            ObjectKind::Namespace => "/api/v1/namespaces",
            ObjectKind::NetworkPolicy => "/apis/networking.k8s.io/v1/networkpolicies",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            ObjectKind::Pod => "Pod",
            ObjectKind::Namespace => "Namespace",
            ObjectKind::NetworkPolicy => "NetworkPolicy",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            ObjectKind::NetworkPolicy => "networking.k8s.io/v1",
            _ => "v1",
        }
    }
}

/// What a request's path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Nodes,
    Objects(ObjectKind),
}

fn resource_of(route: &str) -> Option<Resource> {
    if route == "/api/v1/nodes" {
        return Some(Resource::Nodes);
    }
    ObjectKind::ALL
        .into_iter()
        .find(|k| k.path() == route)
        .map(Resource::Objects)
}

/// One Node of the cluster: ranges and InternalIPs.
#[derive(Debug, Clone, PartialEq)]
pub struct StubNode {
    pub pod_cidrs: Vec<String>,
    pub internal_ips: Vec<String>,
}

/// An object and its JSON, written once when stored: a list is then put together
/// outside the lock (the API server serves lists concurrently; 150,000 Pods written out
/// under it held every other list and watch for a second, on the benchmark's cores).
struct Stored {
    value: Value,
    json: Arc<str>,
}

impl Stored {
    fn new(value: Value) -> Stored {
        let json = Arc::from(value.to_string());
        Stored { value, json }
    }
}

#[derive(Default)]
struct Cluster {
    /// Every node but "the" node (that one is `Behaviour`).
    others: BTreeMap<String, StubNode>,
    /// Pods, Namespaces, NetworkPolicies by kind and `namespace/name`, with their
    /// resourceVersion set.
    objects: BTreeMap<(ObjectKind, String), Stored>,
    rv: u64,
    /// (resourceVersion, what it is of, event line) since `oldest`.
    history: Vec<(u64, Resource, String)>,
    /// A watch from before this resourceVersion gets 410.
    oldest: u64,
    /// Bumped to end every open watch: with a 410 ERROR event (expire) or without a word.
    expire_gen: u64,
    drop_gen: u64,
}

struct World {
    node: String,
    behaviour: Mutex<Behaviour>,
    cluster: Mutex<Cluster>,
    changed: Condvar,
    counts: Mutex<Counts>,
    token: String,
    stop: AtomicBool,
    /// Nodes per list page (the client's `limit` is honoured up to this).
    page: usize,
    watch_mode: Mutex<WatchMode>,
    /// Ends every watch after at most this long (a benchmark's short watch cycle).
    watch_cap: Mutex<Option<Duration>>,
    /// Every open connection (to close them at a restart), by id.
    conns: Mutex<BTreeMap<u64, TcpStream>>,
    /// A restart asked for: how long to stay down.
    restart: Mutex<Option<Duration>>,
}

pub struct ApiServer {
    pub addr: SocketAddr,
    pub ca_pem: String,
    pub token: String,
    world: Arc<World>,
    thread: Option<JoinHandle<()>>,
}

/// A CA certificate (PEM) unrelated to any server: a "bad CA".
pub fn other_ca_pem() -> String {
    ca().pem()
}

fn ca() -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "cni-rs test CA");
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

impl ApiServer {
    /// Listens on `listen` (port 0: any free port) for `node`, with `pod_cidrs`.
    pub fn start(listen: &str, node: &str, pod_cidrs: &[&str]) -> ApiServer {
        let ca = ca();
        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        // Listening on a specific address (a test's "API server" namespace): valid there too.
        if let Ok(addr) = listen.parse::<SocketAddr>()
            && !addr.ip().is_unspecified()
            && !addr.ip().is_loopback()
        {
            names.push(addr.ip().to_string());
        }
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();

        let listener = TcpListener::bind(listen).unwrap();
        let addr = listener.local_addr().unwrap();
        let token = format!("token-{}-{}", std::process::id(), addr.port());
        let world = Arc::new(World {
            node: node.to_string(),
            behaviour: Mutex::new(Behaviour {
                pod_cidrs: pod_cidrs.iter().map(|s| s.to_string()).collect(),
                legacy_pod_cidr_only: false,
                forbidden: false,
                internal_ips: vec!["172.18.0.2".into()],
            }),
            cluster: Mutex::new(Cluster {
                rv: 4711,
                oldest: 4711,
                ..Cluster::default()
            }),
            changed: Condvar::new(),
            counts: Mutex::new(Counts::default()),
            token: token.clone(),
            stop: AtomicBool::new(false),
            page: 500,
            watch_mode: Mutex::new(WatchMode::Normal),
            watch_cap: Mutex::new(None),
            conns: Mutex::new(BTreeMap::new()),
            restart: Mutex::new(None),
        });
        let config = Arc::new(config);
        let w = world.clone();
        let thread = std::thread::spawn(move || {
            let mut listener = listener;
            let mut id = 0u64;
            'listen: loop {
                for conn in listener.incoming() {
                    if w.stop.load(Ordering::SeqCst) {
                        break 'listen;
                    }
                    let down = w.restart.lock().unwrap().take();
                    if let Some(down) = down {
                        // Down: connections refused until the same address is bound again.
                        drop(listener);
                        for (_, c) in std::mem::take(&mut *w.conns.lock().unwrap()) {
                            let _ = c.shutdown(std::net::Shutdown::Both);
                        }
                        std::thread::sleep(down);
                        listener = TcpListener::bind(addr).unwrap();
                        continue 'listen;
                    }
                    if let Ok(tcp) = conn {
                        id += 1;
                        if let Ok(c) = tcp.try_clone() {
                            w.conns.lock().unwrap().insert(id, c);
                        }
                        let (w, config, id) = (w.clone(), config.clone(), id);
                        // Handshake failures (a client with the wrong CA) just end that
                        // connection.
                        std::thread::spawn(move || {
                            let _ = w.serve(tcp, config);
                            w.conns.lock().unwrap().remove(&id);
                        });
                    }
                }
            }
        });
        ApiServer {
            addr,
            ca_pem: ca.pem(),
            token,
            world,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Changes "the" node; watchers see a MODIFIED event if its object changed.
    pub fn set(&self, change: impl FnOnce(&mut Behaviour)) {
        let w = &self.world;
        let mut b = w.behaviour.lock().unwrap();
        let before = node_object(&w.node, &b, 0);
        change(&mut b);
        if node_object(&w.node, &b, 0) != before {
            let b = b.clone();
            let mut c = w.cluster.lock().unwrap();
            c.rv += 1;
            let rv = c.rv;
            let line = event("MODIFIED", &node_object(&w.node, &b, rv));
            c.history.push((rv, Resource::Nodes, line));
            w.changed.notify_all();
        }
    }

    /// Adds or changes another node.
    pub fn put_node(&self, name: &str, pod_cidrs: &[&str], internal_ips: &[&str]) {
        let node = StubNode {
            pod_cidrs: pod_cidrs.iter().map(|s| s.to_string()).collect(),
            internal_ips: internal_ips.iter().map(|s| s.to_string()).collect(),
        };
        let w = &self.world;
        let mut c = w.cluster.lock().unwrap();
        let kind = if c.others.contains_key(name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        c.rv += 1;
        let rv = c.rv;
        let line = event(kind, &stub_object(name, &node, rv));
        c.others.insert(name.to_string(), node);
        c.history.push((rv, Resource::Nodes, line));
        w.changed.notify_all();
    }

    /// Adds many nodes at once (no events: as if they were there before any watch).
    pub fn put_nodes_quietly(&self, nodes: impl IntoIterator<Item = (String, StubNode)>) {
        let mut c = self.world.cluster.lock().unwrap();
        c.others.extend(nodes);
        c.rv += 1;
        c.oldest = c.rv;
        c.history.clear();
    }

    pub fn delete_node(&self, name: &str) {
        let w = &self.world;
        let mut c = w.cluster.lock().unwrap();
        if let Some(node) = c.others.remove(name) {
            c.rv += 1;
            let rv = c.rv;
            let line = event("DELETED", &stub_object(name, &node, rv));
            c.history.push((rv, Resource::Nodes, line));
            w.changed.notify_all();
        }
    }

    /// Changes without any event (as if they happened while no watch was open and the
    /// history was compacted): only a re-list sees them.
    pub fn delete_node_quietly(&self, name: &str) {
        let mut c = self.world.cluster.lock().unwrap();
        c.others.remove(name);
        c.rv += 1;
        c.oldest = c.rv;
        c.history.clear();
    }

    /// Adds or replaces an object of `kind` (named by its metadata.name, and
    /// metadata.namespace but for a Namespace); watchers see ADDED or MODIFIED.
    pub fn put_object(&self, kind: ObjectKind, object: Value) {
        let w = &self.world;
        let mut c = w.cluster.lock().unwrap();
        c.rv += 1;
        let rv = c.rv;
        let (key, object) = stamped(kind, object, rv);
        let verb = if c.objects.contains_key(&(kind, key.clone())) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let line = event(verb, &object);
        c.objects.insert((kind, key), Stored::new(object));
        c.history.push((rv, Resource::Objects(kind), line));
        w.changed.notify_all();
    }

    /// Many objects at once, with no events (as if there before any watch).
    pub fn put_objects_quietly(&self, kind: ObjectKind, objects: impl IntoIterator<Item = Value>) {
        let mut c = self.world.cluster.lock().unwrap();
        c.rv += 1;
        let rv = c.rv;
        for object in objects {
            let (key, object) = stamped(kind, object, rv);
            c.objects.insert((kind, key), Stored::new(object));
        }
        c.oldest = c.rv;
        c.history.clear();
    }

    /// Removes an object (`namespace` "" for a Namespace); watchers see DELETED.
    pub fn delete_object(&self, kind: ObjectKind, namespace: &str, name: &str) {
        let w = &self.world;
        let mut c = w.cluster.lock().unwrap();
        let key = object_key(kind, namespace, name);
        if let Some(Stored {
            value: mut object, ..
        }) = c.objects.remove(&(kind, key))
        {
            c.rv += 1;
            let rv = c.rv;
            object["metadata"]["resourceVersion"] = json!(rv.to_string());
            let line = event("DELETED", &object);
            c.history.push((rv, Resource::Objects(kind), line));
            w.changed.notify_all();
        }
    }

    /// Compacts the history: every open watch gets a 410 ERROR event and ends; a watch
    /// from any earlier resourceVersion is answered 410.
    pub fn expire_watches(&self) {
        let mut c = self.world.cluster.lock().unwrap();
        // A list made after this returns the current version, which (as on a real API
        // server) is watchable; only what came before it is gone.
        c.oldest = c.rv;
        c.history.clear();
        c.expire_gen += 1;
        self.world.changed.notify_all();
    }

    /// Closes every open watch connection without a word.
    pub fn drop_watches(&self) {
        self.world.cluster.lock().unwrap().drop_gen += 1;
        self.world.changed.notify_all();
    }

    /// Sends `line` as the next event of every open watch (garbage, a huge event...).
    pub fn send_raw(&self, line: String) {
        let mut c = self.world.cluster.lock().unwrap();
        c.rv += 1;
        let rv = c.rv;
        c.history.push((rv, Resource::Nodes, line));
        self.world.changed.notify_all();
    }

    /// How every watch from now on is answered.
    pub fn set_watch_mode(&self, mode: WatchMode) {
        *self.world.watch_mode.lock().unwrap() = mode;
    }

    /// Ends every watch from now on after at most `cap` (None: at its timeoutSeconds).
    pub fn set_watch_cap(&self, cap: Option<Duration>) {
        *self.world.watch_cap.lock().unwrap() = cap;
    }

    /// Closes every connection and refuses new ones for `down`, then serves again with a
    /// fresh watch cache: a watch from any resourceVersion seen before gets 410.
    pub fn restart(&self, down: Duration) {
        {
            let mut c = self.world.cluster.lock().unwrap();
            // The new cache starts at the current resourceVersion.
            c.rv += 1;
            c.oldest = c.rv;
            c.history.clear();
            c.drop_gen += 1;
        }
        *self.world.restart.lock().unwrap() = Some(down);
        self.world.changed.notify_all();
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
    }

    /// Sets the resourceVersion back to `rv` (an API server whose cache lags the one the
    /// client saw, or etcd restored from a backup): a list not older than a later one is
    /// answered 504 "Too large resource version".
    pub fn rewind(&self, rv: u64) {
        let mut c = self.world.cluster.lock().unwrap();
        c.rv = rv;
        c.oldest = rv;
        c.history.clear();
    }

    /// Everything counted so far.
    pub fn counts(&self) -> Counts {
        self.world.counts.lock().unwrap().clone()
    }

    pub fn connections(&self) -> u32 {
        self.world.counts.lock().unwrap().connections
    }

    pub fn requests(&self) -> u32 {
        self.world.counts.lock().unwrap().requests
    }

    pub fn unauthorized(&self) -> u32 {
        self.world.counts.lock().unwrap().unauthorized
    }

    pub fn lists(&self) -> u32 {
        self.world.counts.lock().unwrap().lists
    }

    pub fn watches(&self) -> u32 {
        self.world.counts.lock().unwrap().watches
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.world.stop.store(true, Ordering::SeqCst);
        self.world.changed.notify_all();
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn object_key(kind: ObjectKind, namespace: &str, name: &str) -> String {
    match kind {
        ObjectKind::Namespace => name.to_string(),
        _ => format!("{namespace}/{name}"),
    }
}

/// `object` with its kind, apiVersion, resourceVersion and a uid; and its key.
fn stamped(kind: ObjectKind, mut object: Value, rv: u64) -> (String, Value) {
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or_default().to_string();
    let namespace = meta["namespace"].as_str().unwrap_or_default().to_string();
    let key = object_key(kind, &namespace, &name);
    object["kind"] = json!(kind.kind());
    object["apiVersion"] = json!(kind.api_version());
    object["metadata"]["resourceVersion"] = json!(rv.to_string());
    if object["metadata"]["uid"].is_null() {
        object["metadata"]["uid"] = json!(format!("uid-{}-{key}", kind.kind()));
    }
    (key, object)
}

fn event(kind: &str, object: &Value) -> String {
    json!({ "type": kind, "object": object }).to_string()
}

/// `?a=1&b=2` as a map (values are URL-decoded for %XX only).
fn query(path: &str) -> BTreeMap<String, String> {
    let Some((_, q)) = path.split_once('?') else {
        return BTreeMap::new();
    };
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), decode(v)))
        .collect()
}

fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        if b[i] == b'%'
            && let Some(x) = hex.and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(x);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

type Tls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

impl World {
    fn serve(&self, tcp: TcpStream, config: Arc<rustls::ServerConfig>) -> std::io::Result<()> {
        // A kept-alive connection idle this long is closed, as the API server does.
        tcp.set_read_timeout(Some(Duration::from_secs(90)))?;
        let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
        let mut tls = BufReader::new(rustls::StreamOwned::new(conn, tcp));
        let mut counted = false;
        loop {
            let mut request_line = String::new();
            if tls.read_line(&mut request_line)? == 0 {
                return Ok(());
            }
            if !counted {
                // The handshake is done once a request line came through it.
                self.counts.lock().unwrap().connections += 1;
                counted = true;
            }
            let mut authorization = None;
            let mut close = false;
            loop {
                let mut line = String::new();
                if tls.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("authorization") {
                        authorization = Some(value.trim().to_string());
                    }
                    if name.eq_ignore_ascii_case("connection")
                        && value.trim().eq_ignore_ascii_case("close")
                    {
                        close = true;
                    }
                }
            }
            let stream = tls.get_mut();
            let mut parts = request_line.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let q = query(path);
            let watched = resource_of(path.split('?').next().unwrap_or(""));
            if let Some(res) = watched
                && self.authorized(authorization.as_deref())
                && method == "GET"
                && q.get("watch").is_some_and(|v| v == "1" || v == "true")
                && !self.behaviour.lock().unwrap().forbidden
            {
                if !self.watch(stream, &q, res)? {
                    return Ok(()); // dropped without a word
                }
            } else {
                let (status, body) = self.answer(method, path, &q, authorization.as_deref());
                respond(stream, status, &body)?;
            }
            if close {
                return close_tls(stream);
            }
        }
    }

    fn authorized(&self, authorization: Option<&str>) -> bool {
        authorization == Some(&format!("Bearer {}", self.token))
    }

    fn answer(
        &self,
        method: &str,
        path: &str,
        q: &BTreeMap<String, String>,
        authorization: Option<&str>,
    ) -> (u16, String) {
        self.counts.lock().unwrap().requests += 1;
        if !self.authorized(authorization) {
            self.counts.lock().unwrap().unauthorized += 1;
            return (
                401,
                status_object(401, "Unauthorized", "Unauthorized").to_string(),
            );
        }
        let b = self.behaviour.lock().unwrap().clone();
        let route = path.split('?').next().unwrap_or("");
        let name = route.strip_prefix("/api/v1/nodes/");
        let res = resource_of(route);
        if name.is_none() && res.is_none() {
            return (
                404,
                status_object(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )
                .to_string(),
            );
        }
        if b.forbidden {
            let plural = route.rsplit('/').next().unwrap_or_default();
            let (what, verb) = match name {
                Some(n) => (format!("nodes \"{n}\""), "get"),
                None => (plural.to_string(), "list"),
            };
            let group = if plural == "networkpolicies" {
                "networking.k8s.io"
            } else {
                ""
            };
            let msg = format!(
                "{what} is forbidden: User \"system:serviceaccount:kube-system:cni-rs\" \
                 cannot {verb} resource \"{plural}\" in API group \"{group}\" at the cluster scope"
            );
            return (403, status_object(403, "Forbidden", &msg).to_string());
        }
        let Some(name) = name else {
            return self.list(q, res.unwrap_or(Resource::Nodes));
        };
        self.counts.lock().unwrap().gets += 1;
        if method != "GET" || name != self.node {
            return (
                404,
                status_object(404, "NotFound", &format!("nodes \"{name}\" not found")).to_string(),
            );
        }
        let rv = self.cluster.lock().unwrap().rv;
        (200, node_object(&self.node, &b, rv).to_string())
    }

    fn list(&self, q: &BTreeMap<String, String>, res: Resource) -> (u16, String) {
        if res == Resource::Nodes {
            let mut counts = self.counts.lock().unwrap();
            counts.lists += 1;
            counts.list_rvs.push(q.get("resourceVersion").cloned());
            counts.list_queries.push(q.clone());
        }
        let b = self.behaviour.lock().unwrap().clone();
        let c = self.cluster.lock().unwrap();
        // As the API server: "0", or a resourceVersion without a limit (not older than
        // it), comes from the watch cache; one with a limit is an exact read (paged here).
        let from_cache = q
            .get("resourceVersion")
            .is_some_and(|rv| rv == "0" || (!rv.is_empty() && !q.contains_key("limit")));
        let asked: u64 = q
            .get("resourceVersion")
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(0);
        if asked > c.rv {
            let msg = format!("Too large resource version: {asked}, current: {}", c.rv);
            return (504, status_object(504, "Timeout", &msg).to_string());
        }
        // The watch cache answers in one page whatever the limit.
        let limit = q
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|_| !from_cache)
            .unwrap_or(usize::MAX)
            .min(if from_cache { usize::MAX } else { self.page });
        // The continue token: the index to go on from, and the snapshot's resourceVersion.
        let from = q
            .get("continue")
            .and_then(|t| t.split_once(':'))
            .and_then(|(i, _)| i.parse::<usize>().ok())
            .unwrap_or(0);
        // Written out item by item, not cloned into one Value: 150,000 Pods (the
        // NetworkPolicy benchmark) would take seconds of allocation.
        let all: Vec<Arc<str>> = match res {
            Resource::Nodes => std::iter::once(node_object(&self.node, &b, c.rv))
                .chain(c.others.iter().map(|(n, s)| stub_object(n, s, c.rv)))
                .map(|v| Arc::from(v.to_string()))
                .collect(),
            Resource::Objects(kind) => c
                .objects
                .range((kind, String::new())..)
                .take_while(|((k, _), _)| *k == kind)
                .map(|(_, o)| o.json.clone())
                .collect(),
        };
        let (list_kind, api_version) = match res {
            Resource::Nodes => ("NodeList".to_string(), "v1"),
            Resource::Objects(k) => (format!("{}List", k.kind()), k.api_version()),
        };
        let end = (from + limit).min(all.len());
        let mut meta = json!({ "resourceVersion": c.rv.to_string() });
        if end < all.len() {
            meta["continue"] = json!(format!("{end}:{}", c.rv));
        }
        let head = json!({ "kind": list_kind, "apiVersion": api_version, "metadata": meta });
        drop(c);
        let head = head.to_string();
        let mut body = Vec::with_capacity(64 << 10);
        body.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
        body.extend_from_slice(b",\"items\":[");
        for (i, item) in all[from.min(end)..end].iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item.as_bytes());
        }
        body.extend_from_slice(b"]}");
        (
            200,
            String::from_utf8(body).expect("serde_json writes UTF-8"),
        )
    }

    /// Streams events after `resourceVersion` (chunked) until the client's timeoutSeconds,
    /// an expiry (410 ERROR event), a drop or the server's end; false: dropped, the
    /// connection is to be closed without a word.
    fn watch(
        &self,
        stream: &mut Tls,
        q: &BTreeMap<String, String>,
        res: Resource,
    ) -> std::io::Result<bool> {
        {
            let mut counts = self.counts.lock().unwrap();
            counts.requests += 1;
            if res == Resource::Nodes {
                counts.watches += 1;
                counts.watch_queries.push(q.clone());
            }
        }
        let timeout = q
            .get("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .unwrap_or(300);
        let mut end = Instant::now() + Duration::from_secs(timeout);
        if let Some(cap) = *self.watch_cap.lock().unwrap() {
            end = end.min(Instant::now() + cap);
        }
        let mut rv: u64 = q
            .get("resourceVersion")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        )?;
        stream.flush()?;
        let (expire_gen, drop_gen) = {
            let c = self.cluster.lock().unwrap();
            (c.expire_gen, c.drop_gen)
        };
        let gone = || {
            event(
                "ERROR",
                &status_object(410, "Expired", "too old resource version"),
            )
        };
        let mode = *self.watch_mode.lock().unwrap();
        match mode {
            WatchMode::Normal => {}
            WatchMode::EndAtOnce => return end_chunks(stream),
            WatchMode::Gone => {
                chunk(stream, &gone())?;
                return end_chunks(stream);
            }
            WatchMode::Silent => loop {
                if self.stop.load(Ordering::SeqCst) {
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_millis(100));
            },
        }
        let mut c = self.cluster.lock().unwrap();
        if rv < c.oldest {
            drop(c);
            chunk(stream, &gone())?;
            return end_chunks(stream);
        }
        loop {
            if self.stop.load(Ordering::SeqCst) || Instant::now() >= end {
                drop(c);
                return end_chunks(stream);
            }
            if c.drop_gen != drop_gen {
                return Ok(false); // no close_notify, no word: a dropped connection
            }
            if c.expire_gen != expire_gen {
                drop(c);
                chunk(stream, &gone())?;
                return end_chunks(stream);
            }
            let pending: Vec<(u64, String)> = c
                .history
                .iter()
                .filter(|(r, of, _)| *r > rv && *of == res)
                .map(|(r, _, line)| (*r, line.clone()))
                .collect();
            if pending.is_empty() {
                c = self
                    .changed
                    .wait_timeout(c, Duration::from_millis(200))
                    .unwrap()
                    .0;
                continue;
            }
            drop(c);
            for (r, line) in pending {
                chunk(stream, &line)?;
                rv = r;
            }
            stream.flush()?;
            c = self.cluster.lock().unwrap();
        }
    }
}

/// One watch event as one chunk.
fn chunk(stream: &mut Tls, line: &str) -> std::io::Result<()> {
    write!(stream, "{:x}\r\n{line}\n\r\n", line.len() + 1)
}

/// The end of a chunked watch; the connection stays open for the next request.
fn end_chunks(stream: &mut Tls) -> std::io::Result<bool> {
    write!(stream, "0\r\n\r\n")?;
    stream.flush()?;
    Ok(true)
}

fn close_tls(stream: &mut Tls) -> std::io::Result<()> {
    stream.flush()?;
    stream.conn.send_close_notify();
    stream.flush()
}

fn respond(stream: &mut Tls, status: u16, body: &str) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         \r\n{body}",
        reason(status),
        body.len()
    )?;
    stream.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        410 => "Gone",
        504 => "Gateway Timeout",
        _ => "Not Found",
    }
}

fn status_object(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code
    })
}

/// A Node as `kubectl get node -o json` shows it (absent fields are omitted, as the API does).
fn node_object(name: &str, b: &Behaviour, rv: u64) -> Value {
    let mut spec = json!({ "providerID": format!("kind://podman/kind/{name}") });
    if let Some(first) = b.pod_cidrs.first() {
        spec["podCIDR"] = json!(first);
        if !b.legacy_pod_cidr_only {
            spec["podCIDRs"] = json!(b.pod_cidrs);
        }
    }
    object(name, spec, &b.internal_ips, rv)
}

fn stub_object(name: &str, n: &StubNode, rv: u64) -> Value {
    let mut spec = json!({ "providerID": format!("kind://podman/kind/{name}") });
    if let Some(first) = n.pod_cidrs.first() {
        spec["podCIDR"] = json!(first);
        spec["podCIDRs"] = json!(n.pod_cidrs);
    }
    object(name, spec, &n.internal_ips, rv)
}

fn object(name: &str, spec: Value, ips: &[String], rv: u64) -> Value {
    let mut addresses: Vec<Value> = ips
        .iter()
        .map(|ip| json!({ "type": "InternalIP", "address": ip }))
        .collect();
    addresses.push(json!({ "type": "Hostname", "address": name }));
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": "5b1c6a5e-0d3c-4f1e-9a59-2b0f0e6f1c11",
            "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-11-30T12:00:00Z",
            "labels": { "kubernetes.io/hostname": name, "kubernetes.io/os": "linux" }
        },
        "spec": spec,
        "status": {
            "conditions": [{ "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                             "message": "container runtime network not ready: NetworkReady=false" }],
            "addresses": addresses,
            "nodeInfo": { "kubeletVersion": "v1.31.0", "containerRuntimeVersion": "containerd://1.7.22" }
        }
    })
}
