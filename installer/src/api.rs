//! `GET /api/v1/nodes/NAME` with the pod's service account, and what to fix when it fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipnetwork::IpNetwork;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig, TlsProvider};

use crate::podcidr;

/// A Node object is a few KiB; anything this large is not one.
const MAX_BODY: u64 = 4 << 20;
/// One request, connect to last byte.
const TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("reading {what} {path}: {source}")]
    File {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("CA file {0}: no PEM certificate in it")]
    NoCaCert(PathBuf),
    #[error(
        "{url}: 401 Unauthorized: the API server rejects the token in {token_file} \
         (is it this cluster's service-account token, and not expired?)"
    )]
    Unauthorized { url: String, token_file: PathBuf },
    #[error(
        "{url}: 403 Forbidden: the ServiceAccount needs get on nodes \
         (apply deploy/ ClusterRole cni-rs and its ClusterRoleBinding): {message}"
    )]
    Forbidden { url: String, message: String },
    #[error("{url}: 404 Not Found: no node named {node:?}: NODE_NAME must be spec.nodeName")]
    NoSuchNode { url: String, node: String },
    #[error("{url}: HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url}: TLS: {reason}: the API server's certificate must chain to the CA in {ca_file}")]
    Tls {
        url: String,
        reason: String,
        ca_file: PathBuf,
    },
    #[error(
        "{url}: cannot reach the API server: {reason} (check --api-server / \
         KUBERNETES_SERVICE_HOST and that this node can reach it)"
    )]
    Unreachable { url: String, reason: String },
    #[error("{url}: {reason}")]
    BadNode { url: String, reason: String },
}

pub struct Client {
    pub server: String,
    pub token_file: PathBuf,
    pub ca_file: PathBuf,
}

impl Client {
    /// The node's pod ranges; empty while it has none yet.
    pub fn pod_cidrs(&self, node: &str) -> Result<Vec<IpNetwork>, ApiError> {
        let url = format!("{}/api/v1/nodes/{node}", self.server);
        // Both re-read per request: kubelet rotates the token, the CA may be rotated.
        let token = read(&self.token_file, "token file")?;
        let token = String::from_utf8_lossy(&token).trim().to_string();
        let agent = self.agent()?;
        let mut resp = agent
            .get(&url)
            .header("Authorization", format!("Bearer {token}"))
            .header("Accept", "application/json")
            .call()
            .map_err(|e| self.transport_error(&url, e))?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| self.transport_error(&url, e))?;
        match status {
            200 => podcidr::from_node_json(&body).map_err(|reason| ApiError::BadNode {
                url: url.clone(),
                reason,
            }),
            401 => Err(ApiError::Unauthorized {
                url,
                token_file: self.token_file.clone(),
            }),
            403 => Err(ApiError::Forbidden {
                url,
                message: status_message(&body),
            }),
            404 => Err(ApiError::NoSuchNode {
                url,
                node: node.to_string(),
            }),
            _ => Err(ApiError::Status {
                url,
                status,
                message: status_message(&body),
            }),
        }
    }

    fn agent(&self) -> Result<ureq::Agent, ApiError> {
        let pem = read(&self.ca_file, "CA file")?;
        let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(ApiError::NoCaCert(self.ca_file.clone()));
        }
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(RootCerts::Specific(Arc::new(certs)))
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        let config = ureq::Agent::config_builder()
            .tls_config(tls)
            .https_only(true)
            // The in-cluster API server is never reached through an HTTP(S)_PROXY.
            .proxy(None)
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build();
        Ok(config.into())
    }

    fn transport_error(&self, url: &str, err: ureq::Error) -> ApiError {
        let tls_reason = match &err {
            ureq::Error::Tls(r) => Some(r.to_string()),
            ureq::Error::Rustls(e) => Some(e.to_string()),
            ureq::Error::Io(io) => io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .map(|e| e.to_string()),
            _ => None,
        };
        match tls_reason {
            Some(reason) => ApiError::Tls {
                url: url.to_string(),
                reason,
                ca_file: self.ca_file.clone(),
            },
            None => ApiError::Unreachable {
                url: url.to_string(),
                reason: err.to_string(),
            },
        }
    }
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, ApiError> {
    std::fs::read(path).map_err(|source| ApiError::File {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The `message` of a Kubernetes Status body, or the start of whatever came back.
fn status_message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned())
}
