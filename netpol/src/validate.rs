//! What can be enforced exactly, as checked types. A policy that fails is not dropped:
//! `Policy::from_object` returns a deny-all stand-in with the error, so the pods it
//! would select are isolated in both directions (never silently allowed).

use std::sync::Arc;

use ipnetwork::IpNetwork;

use crate::cluster::shared_rules;
use crate::model::{self, IntOrString, NetworkPolicy};
use crate::select::{Selector, SelectorError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    Ingress,
    Egress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The IP protocol number (`meta l4proto`).
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    /// The API's names are case-sensitive; absent means TCP.
    pub fn parse(s: Option<&str>) -> Option<Protocol> {
        match s {
            None | Some("TCP") => Some(Protocol::Tcp),
            Some("UDP") => Some(Protocol::Udp),
            Some("SCTP") => Some(Protocol::Sctp),
            Some(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PortMatch {
    /// The protocol with any port.
    Any,
    /// `port` ..= `endPort` (a single port is `n ..= n`).
    Range(u16, u16),
    /// A container port's name, resolved per pod.
    Named(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Port {
    pub protocol: Protocol,
    pub port: PortMatch,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Namespaces {
    /// The policy's own namespace (a peer with only `podSelector`).
    Own,
    Matching(Selector),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Peer {
    Pods {
        namespaces: Namespaces,
        pods: Selector,
    },
    Block {
        cidr: IpNetwork,
        except: Vec<IpNetwork>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// `None`: every peer (the rule had no `from`/`to`).
    pub peers: Option<Vec<Peer>>,
    /// `None`: every port and protocol (the rule had no `ports`).
    pub ports: Option<Vec<Port>>,
}

/// A policy as checked: enforceable, or refused with the stand-in that isolates its pods.
pub type Checked = Result<Policy, Box<Refused>>;

/// A checked policy. `ingress`/`egress` is `None` when the policy does not affect that
/// direction (`policyTypes`); `Some(vec![])` isolates without allowing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    pub pod_selector: Selector,
    /// Shared with every policy of the same rules (`cluster::shared_rules`).
    pub ingress: Option<Arc<[Rule]>>,
    pub egress: Option<Arc<[Rule]>>,
}

impl Policy {
    pub fn rules(&self, dir: Direction) -> Option<&[Rule]> {
        match dir {
            Direction::Ingress => self.ingress.as_deref(),
            Direction::Egress => self.egress.as_deref(),
        }
    }

    /// `namespace/name`, as log lines and metrics name a policy.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The policy as enforced, or the deny-all stand-in and why.
    pub fn from_object(np: &NetworkPolicy) -> Checked {
        let namespace = np.metadata.namespace.clone();
        let name = np.metadata.name.clone();
        let err = |field: String, problem| {
            let selector = Selector::new(&np.spec.pod_selector).unwrap_or_default();
            Box::new(Refused {
                stand_in: Policy {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    pod_selector: selector,
                    ingress: Some(shared_rules(&[])),
                    egress: Some(shared_rules(&[])),
                },
                error: PolicyError {
                    policy: format!("{namespace}/{name}"),
                    field,
                    problem,
                },
            })
        };
        check(np).map_err(|(field, problem)| err(field, problem))
    }
}

/// A policy refused, and the stand-in enforced instead: it selects what the policy's
/// `podSelector` selects (its whole namespace when that selector is itself bad) and
/// isolates both directions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub stand_in: Policy,
    pub error: PolicyError,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("networkpolicy {policy}: {field}: {problem}; its pods are isolated (deny all)")]
pub struct PolicyError {
    /// `namespace/name`.
    pub policy: String,
    /// The JSON path of the refused field, e.g. `spec.ingress[0].from[1].ipBlock.except[0]`.
    pub field: String,
    pub problem: Problem,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("{0}")]
    Selector(SelectorError),
    #[error("unknown policy type {0:?} (Ingress, Egress)")]
    PolicyType(String),
    #[error("a peer needs podSelector, namespaceSelector or ipBlock")]
    EmptyPeer,
    #[error("ipBlock cannot be combined with podSelector or namespaceSelector")]
    BlockWithSelector,
    #[error("{0:?} is not a CIDR (address/prefix)")]
    Cidr(String),
    #[error("except {except} is not a strict subset of cidr {cidr}")]
    ExceptOutside { except: String, cidr: String },
    #[error("unknown protocol {0:?} (TCP, UDP, SCTP)")]
    Protocol(String),
    #[error("port {0} is not in 1..=65535")]
    PortRange(i64),
    #[error("{0:?} is not a valid port name (1-15 of a-z, 0-9, '-', with a letter)")]
    PortName(String),
    #[error("endPort needs a numeric port")]
    EndPortWithoutNumber,
    #[error("endPort {end} is below port {port}")]
    EndPortBelow { port: u16, end: i64 },
}

type Fail = (String, Problem);

fn check(np: &NetworkPolicy) -> Result<Policy, Fail> {
    let spec = &np.spec;
    let pod_selector = selector(&spec.pod_selector, "spec.podSelector")?;
    let (mut ingress, mut egress) = (true, !spec.egress.is_empty());
    // The API server defaults an empty list as an absent one.
    if let Some(types) = spec.policy_types.as_ref().filter(|t| !t.is_empty()) {
        (ingress, egress) = (false, false);
        for (i, t) in types.iter().enumerate() {
            match t.as_str() {
                "Ingress" => ingress = true,
                "Egress" => egress = true,
                _ => {
                    return Err((
                        format!("spec.policyTypes[{i}]"),
                        Problem::PolicyType(t.clone()),
                    ));
                }
            }
        }
    }
    let rules = |dir: &str, raw: Vec<(&[model::Peer], &[model::PolicyPort])>| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (peers, ports))| {
                let at = format!("spec.{dir}[{i}]");
                let peer_field = if dir == "ingress" { "from" } else { "to" };
                Ok(Rule {
                    peers: list(peers, |j, p| peer(p, &format!("{at}.{peer_field}[{j}]")))?,
                    ports: list(ports, |j, p| port(p, &format!("{at}.ports[{j}]")))?,
                })
            })
            .collect::<Result<Vec<_>, Fail>>()
    };
    let ing = spec
        .ingress
        .iter()
        .map(|r| (&r.from[..], &r.ports[..]))
        .collect();
    let eg = spec
        .egress
        .iter()
        .map(|r| (&r.to[..], &r.ports[..]))
        .collect();
    let (ing, eg) = (rules("ingress", ing)?, rules("egress", eg)?);
    Ok(Policy {
        namespace: np.metadata.namespace.clone(),
        name: np.metadata.name.clone(),
        pod_selector,
        // Rules of a direction the policy does not affect are ignored, as upstream.
        ingress: ingress.then(|| shared_rules(&ing)),
        egress: egress.then(|| shared_rules(&eg)),
    })
}

/// An empty list means "all": `None`.
fn list<T, U>(raw: &[T], f: impl Fn(usize, &T) -> Result<U, Fail>) -> Result<Option<Vec<U>>, Fail> {
    if raw.is_empty() {
        return Ok(None);
    }
    raw.iter()
        .enumerate()
        .map(|(i, x)| f(i, x))
        .collect::<Result<_, _>>()
        .map(Some)
}

fn selector(raw: &model::LabelSelector, field: &str) -> Result<Selector, Fail> {
    Selector::new(raw).map_err(|e| (field.to_string(), Problem::Selector(e)))
}

fn peer(p: &model::Peer, at: &str) -> Result<Peer, Fail> {
    if let Some(block) = &p.ip_block {
        if p.pod_selector.is_some() || p.namespace_selector.is_some() {
            return Err((at.to_string(), Problem::BlockWithSelector));
        }
        let cidr = cidr(&block.cidr, &format!("{at}.ipBlock.cidr"))?;
        let mut except = Vec::with_capacity(block.except.len());
        for (i, e) in block.except.iter().enumerate() {
            let field = format!("{at}.ipBlock.except[{i}]");
            let net = self::cidr(e, &field)?;
            // As the API server: same family, inside, and strictly smaller.
            let inside = cidr.is_ipv4() == net.is_ipv4()
                && cidr.contains(net.network())
                && net.prefix() > cidr.prefix();
            if !inside {
                let problem = Problem::ExceptOutside {
                    except: e.clone(),
                    cidr: block.cidr.clone(),
                };
                return Err((field, problem));
            }
            except.push(net);
        }
        return Ok(Peer::Block { cidr, except });
    }
    let namespaces = match &p.namespace_selector {
        Some(s) => Namespaces::Matching(selector(s, &format!("{at}.namespaceSelector"))?),
        None => Namespaces::Own,
    };
    let pods = match &p.pod_selector {
        Some(s) => selector(s, &format!("{at}.podSelector"))?,
        None if p.namespace_selector.is_some() => Selector::everything(),
        None => return Err((at.to_string(), Problem::EmptyPeer)),
    };
    Ok(Peer::Pods { namespaces, pods })
}

/// A CIDR with its host bits cleared (`10.1.2.3/16` is `10.1.0.0/16`, as the API reads it).
fn cidr(s: &str, field: &str) -> Result<IpNetwork, Fail> {
    let bad = || (field.to_string(), Problem::Cidr(s.to_string()));
    if !s.contains('/') {
        return Err(bad());
    }
    let net: IpNetwork = s.parse().map_err(|_| bad())?;
    IpNetwork::new(net.network(), net.prefix()).map_err(|_| bad())
}

fn port(p: &model::PolicyPort, at: &str) -> Result<Port, Fail> {
    let protocol = Protocol::parse(p.protocol.as_deref()).ok_or_else(|| {
        (
            format!("{at}.protocol"),
            Problem::Protocol(p.protocol.clone().unwrap_or_default()),
        )
    })?;
    let number = |n: i64, field: &str| {
        u16::try_from(n)
            .ok()
            .filter(|&n| n != 0)
            .ok_or_else(|| (format!("{at}.{field}"), Problem::PortRange(n)))
    };
    let port = match (&p.port, p.end_port) {
        (None, None) => PortMatch::Any,
        (Some(IntOrString::Int(n)), None) => {
            let n = number(*n, "port")?;
            PortMatch::Range(n, n)
        }
        (Some(IntOrString::Int(n)), Some(end)) => {
            let n = number(*n, "port")?;
            let e = number(end, "endPort")?;
            if e < n {
                return Err((
                    format!("{at}.endPort"),
                    Problem::EndPortBelow { port: n, end },
                ));
            }
            PortMatch::Range(n, e)
        }
        (Some(IntOrString::Str(name)), None) => {
            if !valid_port_name(name) {
                return Err((format!("{at}.port"), Problem::PortName(name.clone())));
            }
            PortMatch::Named(name.clone())
        }
        (_, Some(_)) => return Err((format!("{at}.endPort"), Problem::EndPortWithoutNumber)),
    };
    Ok(Port { protocol, port })
}

/// IANA_SVC_NAME, as the API validates container port names.
pub fn valid_port_name(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=15).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(u8::is_ascii_lowercase)
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !s.contains("--")
}
