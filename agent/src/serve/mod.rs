//! `/readyz`, `/healthz` and `/metrics` (Prometheus text) on a small HTTP server: one
//! connection at a time, a read timeout, a bounded request; nothing else is served.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::kube::api::{Kind, Outcome, Requests};
use crate::log;

const READ_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_REQUEST: u64 = 4096;

/// What the agent has in place and has done; written by the loops, read by the server.
#[derive(Default)]
pub struct Metrics {
    pub binaries: AtomicBool,
    pub conflist: AtomicBool,
    /// The last reconcile put every wanted route and the firewall table in place.
    pub routes_ok: AtomicBool,
    pub firewall_ok: AtomicBool,
    pub routes: AtomicU64,
    pub routes_wanted: AtomicU64,
    /// VXLAN overlay peers in the kernel, and wanted, after the last reconcile.
    pub overlay_peers: AtomicU64,
    pub overlay_peers_wanted: AtomicU64,
    pub reconciles: AtomicU64,
    pub reconcile_errors: AtomicU64,
    pub api_errors: AtomicU64,
    /// Unix seconds of the last reconcile that left everything in place (0: none yet).
    pub last_sync: AtomicU64,
    /// How long the last reconcile took, in microseconds.
    pub last_reconcile_us: AtomicU64,
    /// The API client's requests by kind and outcome (set when the watch starts).
    api_requests: OnceLock<Arc<Requests>>,
    pub policy: PolicyMetrics,
}

/// NetworkPolicy enforcement, written by its loop (`policy::enforce`).
#[derive(Default)]
pub struct PolicyMetrics {
    /// Enforcement is on (`--network-policy`): then readiness waits for it.
    pub enabled: AtomicBool,
    /// Every Pod, Namespace and NetworkPolicy seen so far is programmed in the kernel.
    pub in_place: AtomicBool,
    pub policies: AtomicU64,
    /// Policies refused (enforced as deny-all for the pods they select).
    pub refused: AtomicU64,
    pub pods: AtomicU64,
    pub chains: AtomicU64,
    pub rules: AtomicU64,
    pub set_elements: AtomicU64,
    /// nf_tables transactions made, and those that failed.
    pub transactions: AtomicU64,
    pub errors: AtomicU64,
    /// From a watch event's arrival to its change committed in the kernel: the last one
    /// and the largest, in microseconds.
    pub last_latency_us: AtomicU64,
    pub max_latency_us: AtomicU64,
    /// The same to the moment nothing the change denies passes any more: earlier than
    /// the above when new peer sets are filled in a transaction of their own.
    pub last_enforce_latency_us: AtomicU64,
    pub max_enforce_latency_us: AtomicU64,
    /// Conntrack entries of connections a change denied, deleted.
    pub connections_forgotten: AtomicU64,
    /// Bridged traffic between pods of this node meets the forward hook (br_netfilter
    /// loaded, `bridge-nf-call-iptables`/`-ip6tables` set).
    pub bridge_netfilter: AtomicBool,
}

impl Metrics {
    pub fn api_error(&self) {
        self.api_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Shows `requests` (the watch's client) on `/metrics`; the first one stays.
    pub fn count_requests(&self, requests: Arc<Requests>) {
        let _ = self.api_requests.set(requests);
    }

    pub fn ready(&self) -> bool {
        let policy = &self.policy;
        [
            &self.binaries,
            &self.conflist,
            &self.routes_ok,
            &self.firewall_ok,
        ]
        .iter()
        .all(|f| f.load(Ordering::Relaxed))
            && (!policy.enabled.load(Ordering::Relaxed) || policy.in_place.load(Ordering::Relaxed))
    }

    pub fn synced_now(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.last_sync.store(now, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let flag = |a: &AtomicBool| u8::from(a.load(Ordering::Relaxed));
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            out.push_str(&format!(
                "# HELP cni_rs_{name} {help}\n# TYPE cni_rs_{name} {kind}\ncni_rs_{name} {value}\n"
            ));
        };
        metric(
            "ready",
            "gauge",
            "1 when binaries, conflist, routes, firewall rules and NetworkPolicies are in place.",
            u8::from(self.ready()).to_string(),
        );
        metric(
            "binaries_installed",
            "gauge",
            "1 when the plugin binaries are in the host's bin dir.",
            flag(&self.binaries).to_string(),
        );
        metric(
            "conflist_installed",
            "gauge",
            "1 when this node's conflist is in place.",
            flag(&self.conflist).to_string(),
        );
        metric(
            "routes",
            "gauge",
            "Routes of ours (proto 0xcb) in the kernel after the last reconcile.",
            get(&self.routes).to_string(),
        );
        metric(
            "routes_wanted",
            "gauge",
            "Routes the last reconcile wanted (one per other node per family).",
            get(&self.routes_wanted).to_string(),
        );
        metric(
            "overlay_peers",
            "gauge",
            "Peers of ours on the VXLAN device (cni-rs.vxlan) after the last reconcile.",
            get(&self.overlay_peers).to_string(),
        );
        metric(
            "overlay_peers_wanted",
            "gauge",
            "Peers the last reconcile wanted through the VXLAN overlay.",
            get(&self.overlay_peers_wanted).to_string(),
        );
        metric(
            "routes_in_place",
            "gauge",
            "1 when every wanted route and overlay peer is in place.",
            flag(&self.routes_ok).to_string(),
        );
        metric(
            "firewall_rules_in_place",
            "gauge",
            "1 when the node's masquerade/forward table matches the cluster.",
            flag(&self.firewall_ok).to_string(),
        );
        metric(
            "reconciles_total",
            "counter",
            "Reconciles run.",
            get(&self.reconciles).to_string(),
        );
        metric(
            "reconcile_errors_total",
            "counter",
            "Reconciles that left something out of place.",
            get(&self.reconcile_errors).to_string(),
        );
        metric(
            "api_errors_total",
            "counter",
            "Failed list or watch requests to the API server.",
            get(&self.api_errors).to_string(),
        );
        metric(
            "last_sync_timestamp_seconds",
            "gauge",
            "Unix time of the last reconcile that left everything in place.",
            get(&self.last_sync).to_string(),
        );
        metric(
            "last_reconcile_duration_seconds",
            "gauge",
            "How long the last reconcile took (desired state, files, routes, rules).",
            format!("{:.6}", get(&self.last_reconcile_us) as f64 / 1e6),
        );
        let p = &self.policy;
        let policy_metrics: [(&str, &str, &str, String); 14] = [
            (
                "netpol_enabled",
                "gauge",
                "1 when the agent enforces NetworkPolicy.",
                flag(&p.enabled).to_string(),
            ),
            (
                "netpol_in_place",
                "gauge",
                "1 when every Pod, Namespace and NetworkPolicy seen is programmed.",
                flag(&p.in_place).to_string(),
            ),
            (
                "netpol_policies",
                "gauge",
                "NetworkPolicies in the cluster.",
                get(&p.policies).to_string(),
            ),
            (
                "netpol_refused_policies",
                "gauge",
                "NetworkPolicies refused (their pods isolated: deny all).",
                get(&p.refused).to_string(),
            ),
            (
                "netpol_pods",
                "gauge",
                "Pods in the cluster.",
                get(&p.pods).to_string(),
            ),
            (
                "netpol_chains",
                "gauge",
                "Chains in this node's table inet cni-rs-netpol.",
                get(&p.chains).to_string(),
            ),
            (
                "netpol_rules",
                "gauge",
                "Rules in this node's table inet cni-rs-netpol.",
                get(&p.rules).to_string(),
            ),
            (
                "netpol_set_elements",
                "gauge",
                "Set and map elements in this node's table inet cni-rs-netpol.",
                get(&p.set_elements).to_string(),
            ),
            (
                "netpol_transactions_total",
                "counter",
                "nf_tables transactions made for NetworkPolicy.",
                get(&p.transactions).to_string(),
            ),
            (
                "netpol_errors_total",
                "counter",
                "NetworkPolicy transactions or reads that failed.",
                get(&p.errors).to_string(),
            ),
            (
                "netpol_last_sync_latency_seconds",
                "gauge",
                "From the watch event's arrival to the kernel, for the last change.",
                format!("{:.6}", get(&p.last_latency_us) as f64 / 1e6),
            ),
            (
                "netpol_max_sync_latency_seconds",
                "gauge",
                "The largest such latency since the agent started.",
                format!("{:.6}", get(&p.max_latency_us) as f64 / 1e6),
            ),
            (
                "netpol_last_enforce_latency_seconds",
                "gauge",
                "From the watch event's arrival to what the change denies being denied \
                 (new peer sets are filled after), for the last change.",
                format!("{:.6}", get(&p.last_enforce_latency_us) as f64 / 1e6),
            ),
            (
                "netpol_max_enforce_latency_seconds",
                "gauge",
                "The largest such latency since the agent started.",
                format!("{:.6}", get(&p.max_enforce_latency_us) as f64 / 1e6),
            ),
        ];
        for (name, kind, help, value) in policy_metrics {
            metric(name, kind, help, value);
        }
        metric(
            "netpol_bridge_netfilter",
            "gauge",
            "1 when bridged traffic between pods of this node meets the policy (br_netfilter).",
            flag(&p.bridge_netfilter).to_string(),
        );
        metric(
            "netpol_connections_forgotten_total",
            "counter",
            "Conntrack entries of connections a NetworkPolicy change denied, deleted.",
            get(&p.connections_forgotten).to_string(),
        );
        if let Some(r) = self.api_requests.get() {
            render_requests(&mut out, r);
        }
        out
    }
}

fn render_requests(out: &mut String, r: &Requests) {
    out.push_str(
        "# HELP cni_rs_api_requests_total Requests to the API server (a list page is one) \
         by kind and outcome (ok: 200, gone: 410, error: any other status or no answer).\n\
         # TYPE cni_rs_api_requests_total counter\n",
    );
    for kind in Kind::ALL {
        for outcome in Outcome::ALL {
            out.push_str(&format!(
                "cni_rs_api_requests_total{{kind=\"{}\",outcome=\"{}\"}} {}\n",
                kind.name(),
                outcome.name(),
                r.count(kind, outcome)
            ));
        }
    }
    out.push_str(&format!(
        "# HELP cni_rs_api_connections_total TCP connections opened to the API server \
         (one is kept alive for every request).\n\
         # TYPE cni_rs_api_connections_total counter\n\
         cni_rs_api_connections_total {}\n",
        r.connections()
    ));
}

/// Binds `addr` (port 0: any free port); the address it listens on.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
}

/// Serves until the process ends.
pub fn serve(listener: TcpListener, metrics: &Metrics) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        if let Err(e) = answer(conn, metrics) {
            log(&format!("health endpoint: {e}"));
        }
    }
}

fn answer(mut conn: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    conn.set_read_timeout(Some(READ_TIMEOUT))?;
    conn.set_write_timeout(Some(READ_TIMEOUT))?;
    let mut request = Vec::new();
    let mut limited = (&mut conn).take(MAX_REQUEST);
    let mut buf = [0u8; 512];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && !request.windows(2).any(|w| w == b"\n\n")
    {
        let n = limited.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let line =
        String::from_utf8_lossy(request.split(|&b| b == b'\n').next().unwrap_or(&[])).into_owned();
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, body) = match (method, path) {
        ("GET", "/healthz") => (200, "ok\n".to_string()),
        ("GET", "/readyz") if metrics.ready() => (200, "ok\n".to_string()),
        ("GET", "/readyz") => (503, not_ready(metrics)),
        ("GET", "/metrics") => (200, metrics.render()),
        ("GET", _) => (404, "not found\n".to_string()),
        _ => (405, "only GET\n".to_string()),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    write!(
        conn,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; version=0.0.4\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}

fn not_ready(m: &Metrics) -> String {
    let missing: Vec<&str> = [
        (&m.binaries, "binaries"),
        (&m.conflist, "conflist"),
        (&m.routes_ok, "routes"),
        (&m.firewall_ok, "firewall rules"),
    ]
    .iter()
    .filter(|(f, _)| !f.load(Ordering::Relaxed))
    .map(|(_, what)| *what)
    .collect();
    format!("not ready: {} not in place\n", missing.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn ready_only_when_everything_is_in_place() {
        let metrics = Arc::new(Metrics::default());
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let m = metrics.clone();
        std::thread::spawn(move || serve(listener, &m));
        let req = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";
        let out = get(addr, req);
        assert!(
            out.starts_with("HTTP/1.1 503")
                && out.contains("binaries, conflist, routes, firewall rules"),
            "{out}"
        );
        assert!(get(addr, "GET /healthz HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
        for f in [&metrics.binaries, &metrics.conflist, &metrics.routes_ok] {
            f.store(true, Ordering::Relaxed);
        }
        assert!(get(addr, req).contains("firewall rules not in place"));
        metrics.firewall_ok.store(true, Ordering::Relaxed);
        assert!(get(addr, req).starts_with("HTTP/1.1 200"));
        metrics.reconciles.store(3, Ordering::Relaxed);
        metrics.last_reconcile_us.store(2500, Ordering::Relaxed);
        let out = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(
            out.contains("\ncni_rs_reconciles_total 3\n")
                && out.contains("cni_rs_ready 1\n")
                && out.contains("\ncni_rs_last_reconcile_duration_seconds 0.002500\n"),
            "{out}"
        );
        assert!(get(addr, "POST /readyz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(addr, "GET /x HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    }

    #[test]
    fn a_silent_or_endless_client_does_not_hold_the_server() {
        let metrics = Arc::new(Metrics::default());
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let m = metrics.clone();
        std::thread::spawn(move || serve(listener, &m));
        // Connected, says nothing: the next client is served after the read timeout.
        let _silent = TcpStream::connect(addr).unwrap();
        let mut endless = TcpStream::connect(addr).unwrap();
        let _ = endless.write_all(&[b'x'; 8192]);
        assert!(get(addr, "GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }
}
