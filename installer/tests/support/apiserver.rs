//! A stand-in for the Kubernetes API server: HTTPS on 127.0.0.1 with a throwaway CA,
//! `GET /api/v1/nodes/NAME` checked against a bearer token, answers in the real API's
//! shape (a Node object, or a Status object for errors). Used by the installer tests and,
//! through `examples/stub-apiserver.rs`, by `scripts/e2e-install.sh`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};

/// What the server answers; tests change it while the installer runs.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// `spec.podCIDRs` of the node (empty: not assigned yet; the field is then absent).
    pub pod_cidrs: Vec<String>,
    /// Set only `spec.podCIDR` (a cluster from before dual-stack).
    pub legacy_pod_cidr_only: bool,
    /// Answer 403 as if the ClusterRole were missing.
    pub forbidden: bool,
}

#[derive(Debug, Default)]
pub struct Counts {
    pub requests: u32,
    pub unauthorized: u32,
}

pub struct ApiServer {
    pub addr: SocketAddr,
    pub ca_pem: String,
    pub token: String,
    pub behaviour: Arc<Mutex<Behaviour>>,
    pub counts: Arc<Mutex<Counts>>,
    stop: Arc<AtomicBool>,
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
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])
        .unwrap();
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
        let behaviour = Arc::new(Mutex::new(Behaviour {
            pod_cidrs: pod_cidrs.iter().map(|s| s.to_string()).collect(),
            legacy_pod_cidr_only: false,
            forbidden: false,
        }));
        let counts = Arc::new(Mutex::new(Counts::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Handler {
            node: node.to_string(),
            token: token.clone(),
            behaviour: behaviour.clone(),
            counts: counts.clone(),
        };
        let config = Arc::new(config);
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(tcp) = conn {
                    // Handshake failures (a client with the wrong CA) just end that connection.
                    let _ = handler.serve(tcp, config.clone());
                }
            }
        });
        ApiServer {
            addr,
            ca_pem: ca.pem(),
            token,
            behaviour,
            counts,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn set(&self, change: impl FnOnce(&mut Behaviour)) {
        change(&mut self.behaviour.lock().unwrap());
    }

    pub fn requests(&self) -> u32 {
        self.counts.lock().unwrap().requests
    }

    pub fn unauthorized(&self) -> u32 {
        self.counts.lock().unwrap().unauthorized
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Handler {
    node: String,
    token: String,
    behaviour: Arc<Mutex<Behaviour>>,
    counts: Arc<Mutex<Counts>>,
}

impl Handler {
    fn serve(&self, tcp: TcpStream, config: Arc<rustls::ServerConfig>) -> std::io::Result<()> {
        tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
        let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
        let mut tls = BufReader::new(rustls::StreamOwned::new(conn, tcp));
        let mut request_line = String::new();
        tls.read_line(&mut request_line)?;
        let mut authorization = None;
        loop {
            let mut line = String::new();
            if tls.read_line(&mut line)? == 0 || line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("authorization")
            {
                authorization = Some(value.trim().to_string());
            }
        }
        let (status, body) = self.answer(&request_line, authorization.as_deref());
        let body = body.to_string();
        let stream = tls.get_mut();
        write!(
            stream,
            "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            reason(status),
            body.len()
        )?;
        stream.flush()?;
        stream.conn.send_close_notify();
        stream.flush()
    }

    fn answer(&self, request_line: &str, authorization: Option<&str>) -> (u16, Value) {
        self.counts.lock().unwrap().requests += 1;
        if authorization != Some(&format!("Bearer {}", self.token)) {
            self.counts.lock().unwrap().unauthorized += 1;
            return (401, status_object(401, "Unauthorized", "Unauthorized"));
        }
        let b = self.behaviour.lock().unwrap().clone();
        let mut parts = request_line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let Some(name) = path.strip_prefix("/api/v1/nodes/") else {
            return (
                404,
                status_object(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            );
        };
        if b.forbidden {
            let msg = format!(
                "nodes \"{name}\" is forbidden: User \"system:serviceaccount:kube-system:cni-rs\" \
                 cannot get resource \"nodes\" in API group \"\" at the cluster scope"
            );
            return (403, status_object(403, "Forbidden", &msg));
        }
        if method != "GET" || name != self.node {
            return (
                404,
                status_object(404, "NotFound", &format!("nodes \"{name}\" not found")),
            );
        }
        (200, node_object(&self.node, &b))
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
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
fn node_object(name: &str, b: &Behaviour) -> Value {
    let mut spec = json!({ "providerID": format!("kind://podman/kind/{name}") });
    if let Some(first) = b.pod_cidrs.first() {
        spec["podCIDR"] = json!(first);
        if !b.legacy_pod_cidr_only {
            spec["podCIDRs"] = json!(b.pod_cidrs);
        }
    }
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": "5b1c6a5e-0d3c-4f1e-9a59-2b0f0e6f1c11",
            "resourceVersion": "4711",
            "creationTimestamp": "2026-11-30T12:00:00Z",
            "labels": { "kubernetes.io/hostname": name, "kubernetes.io/os": "linux" }
        },
        "spec": spec,
        "status": {
            "conditions": [{ "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                             "message": "container runtime network not ready: NetworkReady=false" }],
            "addresses": [{ "type": "InternalIP", "address": "172.18.0.2" },
                          { "type": "Hostname", "address": name }],
            "nodeInfo": { "kubeletVersion": "v1.31.0", "containerRuntimeVersion": "containerd://1.7.22" }
        }
    })
}
