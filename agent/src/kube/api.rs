//! The API server with the pod's service account: one Node (`--once`), every Node page by
//! page (list) and the watch stream after it; and what to fix when a request fails.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipnetwork::IpNetwork;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig, TlsProvider};
use ureq::unversioned::transport::Connector;

use crate::kube::collection::{
    Collection, Kept, ListMeta, ListPage, Nodes, WatchEvent, decode_event,
};
use crate::kube::nodes::{self, NodeInfo};
use crate::kube::parse;

mod connect;
mod requests;

pub use requests::{Kind, Outcome, Requests};

/// A Node object is a few KiB (a few hundred with many images and annotations); anything
/// this large is not one: one watch event or one Node body larger than this is an error
/// (and a re-list), never a bigger buffer.
pub const MAX_EVENT: usize = 4 << 20;
/// Nodes per list page: bounds what one response holds while it is decoded.
const PAGE: u32 = 500;
/// One request, connect to last byte.
const TIMEOUT: Duration = Duration::from_secs(15);
/// How much longer than its `timeoutSeconds` the client waits for a watch to end.
pub const WATCH_SLACK: Duration = Duration::from_secs(10);
/// A kept connection unused this long is closed (the watch reopens at once, so only an
/// outage leaves it idle).
const IDLE: Duration = Duration::from_secs(60);

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
        "{url}: 403 Forbidden: the ServiceAccount needs get, list and watch on nodes \
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
    /// 410, or a watch ERROR event with code 410: the resourceVersion is too old.
    #[error("{url}: 410 Gone: {message} (re-listing after a backoff)")]
    Gone { url: String, message: String },
    /// A body or event that is not what the API sends (or too large to be).
    #[error("{url}: {reason}")]
    Decode { url: String, reason: String },
}

/// Every object of a collection (as kept) and the resourceVersion to watch from.
pub struct Listing<T = NodeInfo> {
    pub items: Vec<T>,
    pub resource_version: String,
}

/// Which state a list may be served from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListFrom {
    /// `resourceVersion=0`: whatever the API server's watch cache holds (it may lag etcd
    /// a little; the watch from its resourceVersion brings the agent up to date).
    Cache,
    /// `resourceVersion=RV&resourceVersionMatch=NotOlderThan` (no `limit`): from the watch
    /// cache, not older than RV (what the agent has already seen: a re-list never takes
    /// it back in time).
    NotOlderThan(String),
    /// No resourceVersion: a quorum read from etcd; only when the cache cannot answer.
    Quorum,
}

/// The API server's address and the service account's files; one HTTP agent, kept while
/// the CA file is unchanged, so that every request goes over one kept-alive connection.
pub struct Client {
    pub server: String,
    pub token_file: PathBuf,
    pub ca_file: PathBuf,
    requests: Arc<Requests>,
    /// The CA file's bytes the agent was built with, and the agent.
    agent: Mutex<Option<(Vec<u8>, ureq::Agent)>>,
}

impl Client {
    pub fn new(server: String, token_file: PathBuf, ca_file: PathBuf) -> Client {
        Client {
            server,
            token_file,
            ca_file,
            requests: Arc::default(),
            agent: Mutex::new(None),
        }
    }

    /// The counts of requests this client made (shared with `/metrics`).
    pub fn requests(&self) -> Arc<Requests> {
        self.requests.clone()
    }

    /// The node's pod ranges; empty while it has none yet. Served from the watch cache:
    /// a lagging answer only means one more wait for a podCIDR.
    pub fn pod_cidrs(&self, node: &str) -> Result<Vec<IpNetwork>, ApiError> {
        let url = format!("{}/api/v1/nodes/{node}?resourceVersion=0", self.server);
        let body = self.get(&url, Kind::Get, TIMEOUT, Some(node))?;
        let body = read_bounded(body, MAX_EVENT as u64).map_err(|reason| ApiError::Decode {
            url: url.clone(),
            reason,
        })?;
        nodes::from_node_json(&body).map_err(|reason| ApiError::BadNode { url, reason })
    }

    /// Every Node (see [`Client::list_of`]).
    pub fn list(&self, from: &ListFrom) -> Result<Listing, ApiError> {
        self.list_of::<Nodes>(from)
    }

    /// Every object of `C`, page by page (`limit`, `continue`) if the server pages; one
    /// consistent snapshot. The watch cache answers `resourceVersion=0` in one page
    /// whatever the `limit`; a quorum read pages.
    pub fn list_of<C: Collection>(&self, from: &ListFrom) -> Result<Listing<C::Object>, ApiError> {
        let mut items = Vec::new();
        let resource_version = self.list_each::<C>(from, &mut |o| {
            items.push(o);
            Ok(())
        })?;
        Ok(Listing {
            items,
            resource_version,
        })
    }

    /// [`Client::list_of`], each object handed to `each` as soon as it is decoded (a large
    /// page as it streams in); the list's resourceVersion. An error of `each` ends the
    /// list as one that does not decode.
    pub fn list_each<C: Collection>(
        &self,
        from: &ListFrom,
        each: &mut dyn FnMut(C::Object) -> Result<(), String>,
    ) -> Result<String, ApiError> {
        let mut token = String::new();
        loop {
            let mut url = format!("{}{}?", self.server, C::PATH);
            if !token.is_empty() {
                // The snapshot is the continue token's; a resourceVersion with it is refused.
                url.push_str(&format!("limit={PAGE}&continue={}", percent_encode(&token)));
            } else {
                match from {
                    ListFrom::Cache => url.push_str(&format!("limit={PAGE}&resourceVersion=0")),
                    // No limit: with one and a resourceVersion the API server reads that
                    // exact version, from etcd (410 once compacted), not from the cache.
                    ListFrom::NotOlderThan(rv) => url.push_str(&format!(
                        "resourceVersion={}&resourceVersionMatch=NotOlderThan",
                        percent_encode(rv)
                    )),
                    ListFrom::Quorum => url.push_str(&format!("limit={PAGE}")),
                }
            }
            let body = self.get(&url, Kind::List, C::LIST_TIMEOUT, None)?;
            let meta = decode_page::<C>(body.take(C::MAX_PAGE), SLICE_PAGE, each).map_err(|e| {
                ApiError::Decode {
                    url: url.clone(),
                    reason: format!(
                        "the {} list does not parse (or exceeds {} bytes): {e}",
                        C::NAME,
                        C::MAX_PAGE
                    ),
                }
            })?;
            if meta.continue_token.is_empty() {
                return Ok(meta.resource_version);
            }
            token = meta.continue_token;
        }
    }

    /// Opens a watch of every Node (see [`Client::watch_of`]).
    pub fn watch(&self, resource_version: &str, seconds: u64) -> Result<Watch, ApiError> {
        self.watch_of::<Nodes>(resource_version, seconds)
    }

    /// Opens a watch of every object of `C` from `resource_version`, with bookmarks, that
    /// the API server ends after `seconds`; the client gives up on it `WATCH_SLACK` later
    /// (a half-open connection that TCP keepalive did not catch first).
    pub fn watch_of<C: Collection>(
        &self,
        resource_version: &str,
        seconds: u64,
    ) -> Result<Watch<C>, ApiError> {
        let url = format!(
            "{}{}?watch=1&allowWatchBookmarks=true&timeoutSeconds={seconds}\
             &resourceVersion={}",
            self.server,
            C::PATH,
            percent_encode(resource_version)
        );
        let limit = Duration::from_secs(seconds) + WATCH_SLACK;
        let body = self.get(&url, Kind::Watch, limit, None)?;
        Ok(Watch {
            url,
            reader: BufReader::new(body),
            of: std::marker::PhantomData,
        })
    }

    /// A GET answered 200 (its body), else the error its status means.
    fn get(
        &self,
        url: &str,
        kind: Kind,
        timeout: Duration,
        node: Option<&str>,
    ) -> Result<Box<dyn Read + Send>, ApiError> {
        let result = self.call(url, timeout, node);
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(ApiError::Gone { .. }) => Outcome::Gone,
            Err(_) => Outcome::Error,
        };
        self.requests.add(kind, outcome);
        result
    }

    fn call(
        &self,
        url: &str,
        timeout: Duration,
        node: Option<&str>,
    ) -> Result<Box<dyn Read + Send>, ApiError> {
        // Both re-read per request: kubelet rotates the token, the CA may be rotated.
        let token = read(&self.token_file, "token file")?;
        let token = String::from_utf8_lossy(&token).trim().to_string();
        let agent = self.agent()?;
        let resp = agent
            .get(url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Authorization", format!("Bearer {token}"))
            .header("Accept", "application/json")
            .call()
            .map_err(|e| self.transport_error(url, e))?;
        let status = resp.status().as_u16();
        let body = resp.into_body().into_reader();
        if status == 200 {
            return Ok(Box::new(body));
        }
        let body = read_bounded(body, 64 << 10).unwrap_or_default();
        let url = url.to_string();
        Err(match status {
            401 => ApiError::Unauthorized {
                url,
                token_file: self.token_file.clone(),
            },
            403 => ApiError::Forbidden {
                url,
                message: status_message(&body),
            },
            404 if node.is_some() => ApiError::NoSuchNode {
                url,
                node: node.unwrap_or_default().to_string(),
            },
            410 => ApiError::Gone {
                url,
                message: status_message(&body),
            },
            _ => ApiError::Status {
                url,
                status,
                message: status_message(&body),
            },
        })
    }

    /// The agent for the CA file as it is now: the one kept (and its pooled connection)
    /// while the file is unchanged, a new one when it was rotated.
    fn agent(&self) -> Result<ureq::Agent, ApiError> {
        let pem = read(&self.ca_file, "CA file")?;
        let mut kept = self.agent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((was, agent)) = kept.as_ref()
            && *was == pem
        {
            return Ok(agent.clone());
        }
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
            .timeout_connect(Some(TIMEOUT))
            // One API server: one connection, kept between a watch's end and the next.
            .max_idle_connections(1)
            .max_idle_connections_per_host(1)
            .max_idle_age(IDLE)
            .build();
        let connector = ()
            .chain(connect::KeepaliveTcp::new(self.requests.clone()))
            .chain(ureq::unversioned::transport::RustlsConnector::default());
        let agent = ureq::Agent::with_parts(
            config,
            connector,
            ureq::unversioned::resolver::DefaultResolver::default(),
        );
        *kept = Some((pem, agent.clone()));
        Ok(agent)
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

/// An open watch of `C`: events one line at a time (the API server ends each with a
/// newline).
pub struct Watch<C: Collection = Nodes> {
    url: String,
    reader: BufReader<Box<dyn Read + Send>>,
    of: std::marker::PhantomData<C>,
}

impl<C: Collection> Watch<C> {
    /// The next event; `None` when the server ended the watch (its timeout).
    pub fn next_event(&mut self) -> Result<Option<WatchEvent<C::Object>>, ApiError> {
        let line = read_line_bounded(&mut self.reader, MAX_EVENT).map_err(|e| match e {
            // The connection failed mid-stream: what came before it is good.
            Line::Io(reason) => ApiError::Unreachable {
                url: self.url.clone(),
                reason,
            },
            Line::TooLarge(reason) => ApiError::Decode {
                url: self.url.clone(),
                reason,
            },
        })?;
        let Some(line) = line else {
            return Ok(None);
        };
        match decode_event::<C>(&line) {
            Ok(WatchEvent::Error { code: 410, message }) => {
                self.drain();
                Err(ApiError::Gone {
                    url: self.url.clone(),
                    message,
                })
            }
            Ok(event) => Ok(Some(event)),
            Err(reason) => Err(ApiError::Decode {
                url: self.url.clone(),
                reason,
            }),
        }
    }
}

impl<C: Collection> Watch<C> {
    /// Reads the little the server sends after an ERROR event (the end of the response),
    /// so that the connection goes back to the pool for the re-list.
    fn drain(&mut self) {
        let _ = std::io::copy(&mut (&mut self.reader).take(64 << 10), &mut std::io::sink());
    }
}

/// Why a line could not be read.
#[derive(Debug)]
enum Line {
    Io(String),
    TooLarge(String),
}

/// One line (without its newline), at most `max` bytes; `None` at the end of the stream.
/// Blank lines are skipped.
fn read_line_bounded(reader: &mut impl BufRead, max: usize) -> Result<Option<Vec<u8>>, Line> {
    let mut line = Vec::new();
    loop {
        let buf = reader
            .fill_buf()
            .map_err(|e| Line::Io(format!("reading the watch stream: {e}")))?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        let ended = done > chunk.len();
        if line.len() + chunk.len() > max {
            return Err(Line::TooLarge(format!(
                "a watch event larger than {max} bytes"
            )));
        }
        line.extend_from_slice(chunk);
        reader.consume(done);
        if ended {
            if line.iter().all(u8::is_ascii_whitespace) {
                line.clear();
                continue;
            }
            return Ok(Some(line));
        }
    }
}

fn read_bounded(body: impl Read, max: u64) -> Result<Vec<u8>, String> {
    libcni::file::read_bounded(body, max).map_err(|e| match e {
        libcni::file::ReadError::Io(e) => format!("reading the answer: {e}"),
        _ => format!("an answer larger than {max} bytes"),
    })
}

/// Query values (resourceVersion, continue tokens: base64 and digits) made URL-safe.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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

/// A page read whole up to this, then parsed from memory: serde_json parses a slice
/// several times faster than a reader (no per-byte position keeping). A larger page (a
/// re-list of 150,000 pods from the watch cache is ~100 MB, in one page) has its items
/// parsed from memory one by one as it streams in (`page`), so that its body is never
/// all in memory: at 16 MiB, the 11 MB list of 30,000 pods was, and the agent's peak
/// was 60-63 MiB against 36-48 now.
const SLICE_PAGE: u64 = 1 << 20;

/// One list page: each item to `each` as it is decoded; the page's metadata.
fn decode_page<C: Collection>(
    mut body: impl Read,
    slice_page: u64,
    each: &mut dyn FnMut(C::Object) -> Result<(), String>,
) -> Result<ListMeta, String> {
    let mut head = Vec::new();
    (&mut body)
        .take(slice_page)
        .read_to_end(&mut head)
        .map_err(|e| e.to_string())?;
    if (head.len() as u64) < slice_page {
        let page: ListPage<C> = serde_json::from_slice(&head).map_err(|e| e.to_string())?;
        for object in page.items.map(|k| k.0).into_iter().flatten() {
            each(object)?;
        }
        return Ok(page.metadata);
    }
    let item = |raw: &[u8]| {
        let raw = serde_json::from_slice(raw).map_err(|e| format!("an item: {e}"))?;
        Ok(Kept::<C>::one(raw))
    };
    let rest = parse::split_parse(std::io::Cursor::new(head).chain(body), item, each)?;
    let page: ListPage<C> = serde_json::from_slice(&rest).map_err(|e| e.to_string())?;
    Ok(page.metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_parses_the_same_from_memory_and_split_past_the_slice_limit() {
        use crate::kube::collection::Namespaces;
        // The names handed to `each`, in order, and the page's metadata.
        let decode = |body: &[u8], limit| -> Result<(Vec<String>, String, String), String> {
            let mut names = Vec::new();
            let meta = decode_page::<Namespaces>(body, limit, &mut |n| {
                names.push(n.metadata.name);
                Ok(())
            })?;
            Ok((names, meta.resource_version, meta.continue_token))
        };
        let list = r#"{"kind":"NamespaceList","metadata":{"resourceVersion":"9","continue":"c"},
            "items":[{"metadata":{"name":"a"}},{"metadata":{}},{"metadata":{"name":"b\"]"}}]}"#;
        let want = (
            vec!["a".to_string(), "b\"]".to_string()],
            "9".into(),
            "c".into(),
        );
        // Read whole, or split (a limit below its size), alike; a nameless item skipped.
        for limit in [SLICE_PAGE, 16] {
            assert_eq!(
                decode(list.as_bytes(), limit).unwrap(),
                want,
                "limit {limit}"
            );
            let empty = decode(br#"{"items":null,"metadata":{}}"#, limit);
            assert_eq!(empty.unwrap().0, Vec::<String>::new());
            for cut in [&list[..list.len() - 2], &list[..5]] {
                let e = decode(cut.as_bytes(), limit).err();
                assert!(
                    e.as_ref().is_some_and(|e| e.contains("EOF")),
                    "limit {limit}: {e:?}"
                );
            }
            let bad = list.replace(r#""name":"a""#, r#""name":1"#);
            assert!(decode(bad.as_bytes(), limit).is_err());
            // A refusal of `each` ends the page there.
            let mut seen = 0;
            let refused = decode_page::<Namespaces>(list.as_bytes(), limit, &mut |_| {
                seen += 1;
                Err("no more".into())
            });
            assert_eq!((refused.err().as_deref(), seen), (Some("no more"), 1));
        }
    }

    #[test]
    fn lines_are_bounded_and_blank_ones_skipped() {
        let mut r = BufReader::with_capacity(4, &b"ab\n\n  \ncdefgh\nij"[..]);
        assert_eq!(read_line_bounded(&mut r, 10).unwrap().unwrap(), b"ab");
        assert_eq!(read_line_bounded(&mut r, 10).unwrap().unwrap(), b"cdefgh");
        assert_eq!(read_line_bounded(&mut r, 10).unwrap().unwrap(), b"ij");
        assert_eq!(read_line_bounded(&mut r, 10).unwrap(), None);
        let mut r = BufReader::with_capacity(4, &b"0123456789abc\n"[..]);
        assert!(matches!(
            read_line_bounded(&mut r, 10),
            Err(Line::TooLarge(m)) if m.contains("larger than 10")
        ));
    }

    #[test]
    fn an_endless_line_is_refused_without_reading_it_all() {
        let mut endless = BufReader::new(std::io::repeat(b'x'));
        assert!(read_line_bounded(&mut endless, 1 << 20).is_err());
    }

    #[test]
    fn continue_tokens_are_encoded() {
        assert_eq!(percent_encode("eyJ2Ijo+/="), "eyJ2Ijo%2B%2F%3D");
        assert_eq!(percent_encode("12345"), "12345");
    }
}
