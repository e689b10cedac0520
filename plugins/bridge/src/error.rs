//! The bridge's one error type. Each kernel, namespace, firewall or I/O failure keeps its
//! typed source (and so its errno) next to the step it broke, named where the step runs in
//! the reference's verb phrase ([`During::during`], [`Source::at`]). The CNI code, message and details are made in one
//! place, `impl From<BridgeError> for libcni::Error`: 999 (Go's skel wraps untyped errors
//! so) with `"<verb phrase>: <source>"`, the firewall tool's output in `details`.

use hostnet::firewall::FirewallError;
use hostnet::netlink::NetlinkError;
use hostnet::sysctl::SysctlError;
use ipnetwork::IpNetwork;
use libcni::error::code;
use std::borrow::Cow;
use std::fmt;
use std::io;
use std::net::IpAddr;
use sysproc::netns::NetnsError;
use sysproc::step::Injected;

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// A CNI error from elsewhere (config, version, IPAM delegation, result conversion),
    /// passed on as it is, code included.
    #[error(transparent)]
    Cni(#[from] libcni::Error),
    /// A fault-injection point failed (crash tests only).
    #[error(transparent)]
    Injected(#[from] Injected),

    // A step that failed in the kernel, a namespace, a firewall tool or a file; `step` is
    // the reference's phrase for it ("failed to set \"eth0\" up").
    #[error("{step}: {source}")]
    Netlink {
        step: Step,
        #[source]
        source: NetlinkError,
    },
    #[error("{step}: {source}")]
    Netns {
        step: Step,
        #[source]
        source: NetnsError,
    },
    #[error("{step}: {source}")]
    Firewall {
        step: Step,
        #[source]
        source: FirewallError,
    },
    #[error("{step}: {source}")]
    Io {
        step: Step,
        #[source]
        source: io::Error,
    },
    #[error("{step}: {source}")]
    Sysctl {
        step: Step,
        #[source]
        source: SysctlError,
    },

    // Wrappers carrying the reference's prefix for a whole sub-step.
    #[error("failed to create bridge {name:?}: {source}")]
    CreateBridge {
        name: String,
        #[source]
        source: Box<BridgeError>,
    },
    #[error("failed to set bridge addr: {0}")]
    SetBridgeAddr(#[source] Box<BridgeError>),
    /// STATUS: the plugin cannot work on this node now (code 50).
    #[error("{0}")]
    Unavailable(#[source] Box<BridgeError>),

    // ADD's own refusals.
    #[error("cannot convert: no valid IP addresses")]
    NoValidIps,
    #[error("{verb} {name:?}: Link not found")]
    LinkNotFound { verb: &'static str, name: String },
    #[error("{name:?} already exists but is not a bridge")]
    NotABridge { name: String },
    #[error("{link:?} already has an IP address different from {gw}")]
    AddressConflict { link: String, gw: IpNetwork },
    #[error("container veth name ({ifname:?}) already exists")]
    ContainerIfaceExists { ifname: String },
    #[error("bridge port in error state: {}", .source.last_state().unwrap_or_default())]
    PortState {
        #[source]
        source: NetlinkError,
    },
    #[error("no gateway address after {0}")]
    NoGatewayAfter(IpNetwork),
    #[error("gateway {gw} does not fit address {address}")]
    GatewayMisfit { gw: IpAddr, address: IpNetwork },
    #[error("IPAM plugin returned missing IP config")]
    MissingIpConfig,
    /// An IPAM answer no container can use: `field` is e.g. `ips[0].address`.
    #[error("invalid IPAM result: {field} {value} {why}")]
    InvalidIpamResult {
        field: String,
        value: IpOrNet,
        why: Unusable,
    },

    // CHECK's findings: the kernel no longer matches the ADD result.
    #[error("Required prevResult missing")]
    PrevResultMissing,
    #[error("Sandbox in prevResult doesn't match configured netns: {netns}")]
    SandboxMismatch { netns: String },
    #[error("CNI created bridge {bridge} in host namespace was not found")]
    BridgeNotInResult { bridge: String },
    #[error("Interface name {name} not found")]
    InterfaceNotFound { name: String },
    #[error("Interface {name} does not have link type of bridge")]
    NotBridgeType { name: String },
    #[error("Bridge interface {name} Mac doesn't match: {mac}")]
    BridgeMac { name: String, mac: String },
    #[error(
        "Bridge interface {name} configured Promisc Mode {want} doesn't match current state: {is}"
    )]
    BridgePromisc { name: String, want: bool, is: bool },
    #[error("CNI created interface in container {name} not found")]
    ContainerIfaceNotFound { name: String },
    #[error("Error: Container interface {name} not of type veth")]
    ContainerNotVeth { name: String },
    #[error("Interface {name} Mac {want} doesn't match container Mac: {is}")]
    ContainerMac {
        name: String,
        want: String,
        is: String,
    },
    #[error("veth {veth} is not a port of bridge {bridge}")]
    NotAPort { veth: String, bridge: String },
    #[error("Interface {name} Mac doesn't match: {mac} not found")]
    VethMac { name: String, mac: String },
    #[error("CNI veth created for bridge {bridge} was not found")]
    VethNotFound { bridge: String },
    #[error("bridge port {port} hairpin mode is {is:?}, config wants {want}")]
    Hairpin {
        port: String,
        is: Option<bool>,
        want: bool,
    },
    #[error("mac spoof check rules for {port} are missing")]
    SpoofCheckMissing { port: String },
    #[error("masquerade rules for {container_id:?} are missing")]
    IpMasqMissing { container_id: String },
    #[error("Failed to match addr {addr} on interface {ifname}")]
    AddrMissing { addr: IpNetwork, ifname: String },
    #[error("Expected route {dst}{} not found in the container", via(.gw))]
    RouteMissing { dst: IpNetwork, gw: Option<IpAddr> },

    /// DEL and GC run every step whatever failed before: each failure, in order (two or
    /// more; see [`BridgeError::all`]). The first gives the code; the messages are joined
    /// with "; ", the details with a blank line.
    #[error("{}", joined(.0))]
    Several(Vec<BridgeError>),
}

fn joined(all: &[BridgeError]) -> String {
    let messages: Vec<String> = all.iter().map(BridgeError::message).collect();
    messages.join("; ")
}

/// `" via <gw>"`, or nothing.
pub fn via(gw: &Option<IpAddr>) -> String {
    gw.map(|g| format!(" via {g}")).unwrap_or_default()
}

/// An address or a network, as an IPAM result field holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpOrNet {
    Ip(IpAddr),
    Net(IpNetwork),
}

impl fmt::Display for IpOrNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpOrNet::Ip(ip) => ip.fmt(f),
            IpOrNet::Net(net) => net.fmt(f),
        }
    }
}

/// Why an IPAM result's address or gateway is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("is the unspecified address")]
    Unspecified,
    #[error("is a multicast address")]
    Multicast,
    #[error("is the broadcast address")]
    Broadcast,
    #[error("is a loopback address")]
    Loopback,
    #[error("is an IPv4-mapped IPv6 address")]
    Ipv4Mapped,
    #[error("has prefix length 0")]
    PrefixZero,
    #[error("is not in the address family of {0}")]
    FamilyOf(IpNetwork),
    /// A route's gateway: `index` is the route's.
    #[error("is not in the address family of routes[{index}].dst {dst}")]
    FamilyOfRoute { index: usize, dst: IpNetwork },
}

/// Why DEL leaves a host veth that prevResult names alone (it is logged, not returned).
#[derive(Debug, thiserror::Error)]
pub enum NotOurs {
    #[error("prevResult records no MAC for it")]
    NoRecordedMac,
    #[error("its MAC is not {recorded} as prevResult recorded")]
    MacDiffers { recorded: String },
    #[error("cannot tell where its peer lives: {0}")]
    PeerUnknown(#[source] NetlinkError),
    #[error("its peer is not in the container's namespace")]
    PeerElsewhere,
}

impl BridgeError {
    /// The CNI error code: a passed-on CNI error keeps its own, STATUS's "not available"
    /// is 50, everything else 999.
    pub fn code(&self) -> u32 {
        match self {
            BridgeError::Cni(e) => e.code,
            BridgeError::Several(all) => all.first().map_or(code::INTERNAL, Self::code),
            BridgeError::Unavailable(_) => code::PLUGIN_NOT_AVAILABLE,
            BridgeError::CreateBridge { source, .. } => source.code(),
            _ => code::INTERNAL,
        }
    }

    /// The long output behind the message (a firewall tool's stderr and script).
    pub fn details(&self) -> String {
        match self {
            BridgeError::Cni(e) => e.details.clone(),
            BridgeError::Firewall { source, .. } => source.details(),
            BridgeError::CreateBridge { source, .. } => source.details(),
            BridgeError::Several(all) => {
                let details: Vec<String> = all.iter().map(Self::details).collect();
                details
                    .into_iter()
                    .filter(|d| !d.is_empty())
                    .collect::<Vec<_>>()
                    .join("\n\n")
            }
            _ => String::new(),
        }
    }

    /// The CNI error's `msg`: a passed-on CNI error's own (its Display adds the details).
    fn message(&self) -> String {
        match self {
            BridgeError::Cni(e) => e.msg.clone(),
            e => e.to_string(),
        }
    }

    /// Every failure of steps that all ran: none is `Ok`, one is itself (so a single
    /// failure reads exactly as it would alone), more are [`BridgeError::Several`].
    pub fn all(results: impl IntoIterator<Item = Result<(), BridgeError>>) -> Result<(), Self> {
        let mut failures = Vec::new();
        for e in results.into_iter().filter_map(Result::err) {
            match e {
                BridgeError::Several(more) => failures.extend(more),
                e => failures.push(e),
            }
        }
        match failures.len() {
            0 => Ok(()),
            1 => Err(failures.remove(0)),
            _ => Err(BridgeError::Several(failures)),
        }
    }

    /// The values of two steps that ran at once, or every failure (`a`'s first).
    pub fn both<A, B>(a: Result<A, Self>, b: Result<B, Self>) -> Result<(A, B), Self> {
        match (a, b) {
            (Ok(a), Ok(b)) => Ok((a, b)),
            (a, b) => Err(Self::all([a.map(drop), b.map(drop)]).unwrap_err()),
        }
    }

    /// The errno of the kernel or system call that failed, if one did. Only tests ask:
    /// they check the typed errors keep it (the wire message carries it as text).
    #[cfg(test)]
    pub fn errno(&self) -> Option<i32> {
        match self {
            BridgeError::Netlink { source, .. } | BridgeError::PortState { source } => {
                source.errno()
            }
            BridgeError::Netns { source, .. } => source.errno().map(|e| e as i32),
            BridgeError::Io { source, .. } => source.raw_os_error(),
            BridgeError::Sysctl { source, .. } => source.errno(),
            BridgeError::Firewall {
                source: FirewallError::Spawn { source, .. },
                ..
            } => source.raw_os_error(),
            BridgeError::CreateBridge { source, .. }
            | BridgeError::SetBridgeAddr(source)
            | BridgeError::Unavailable(source) => source.errno(),
            _ => None,
        }
    }

    /// STATUS's form of a failure: code 50, the same message.
    pub fn unavailable(self) -> BridgeError {
        BridgeError::Unavailable(Box::new(self))
    }
}

/// The one place a bridge failure becomes what the runtime reads.
impl From<BridgeError> for libcni::Error {
    fn from(e: BridgeError) -> libcni::Error {
        match e {
            BridgeError::Cni(e) => e,
            e => libcni::Error::new(e.code(), e.message()).with_details(e.details()),
        }
    }
}

/// A failed step's phrase: most are fixed, some name a link or an address.
pub type Step = Cow<'static, str>;

/// Names the step a typed failure broke, the phrase made only if it failed:
/// `nl.set_up(i).during(|| format!("failed to set {name:?} up"))?`.
pub trait During<T> {
    fn during<S: Into<Step>>(self, step: impl FnOnce() -> S) -> Result<T, BridgeError>;
}

impl<T, E: Source> During<T> for Result<T, E> {
    fn during<S: Into<Step>>(self, step: impl FnOnce() -> S) -> Result<T, BridgeError> {
        self.map_err(|e| e.at(step()))
    }
}

/// A typed failure that can be the source of a step's error.
pub trait Source {
    fn at(self, step: impl Into<Step>) -> BridgeError;
}

impl Source for NetlinkError {
    fn at(self, step: impl Into<Step>) -> BridgeError {
        BridgeError::Netlink {
            step: step.into(),
            source: self,
        }
    }
}

impl Source for NetnsError {
    fn at(self, step: impl Into<Step>) -> BridgeError {
        BridgeError::Netns {
            step: step.into(),
            source: self,
        }
    }
}

impl Source for FirewallError {
    fn at(self, step: impl Into<Step>) -> BridgeError {
        BridgeError::Firewall {
            step: step.into(),
            source: self,
        }
    }
}

impl Source for SysctlError {
    fn at(self, step: impl Into<Step>) -> BridgeError {
        BridgeError::Sysctl {
            step: step.into(),
            source: self,
        }
    }
}

impl Source for io::Error {
    fn at(self, step: impl Into<Step>) -> BridgeError {
        BridgeError::Io {
            step: step.into(),
            source: self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn kernel_failures_keep_the_errno_behind_the_reference_message() {
        let e = io::Error::from_raw_os_error(13).at("failed to enable forwarding");
        assert_eq!(e.errno(), Some(13));
        assert!(e.source().is_some());
        let wire = libcni::Error::from(e);
        assert_eq!(wire.code, 999);
        assert!(wire.msg.starts_with("failed to enable forwarding: "));
        assert!(wire.details.is_empty());
    }

    #[test]
    fn wrappers_prefix_and_keep_the_cause() {
        let inner = BridgeError::LinkNotFound {
            verb: "could not lookup",
            name: "cni0".into(),
        };
        let e = BridgeError::CreateBridge {
            name: "cni0".into(),
            source: Box::new(inner),
        };
        assert_eq!(
            e.to_string(),
            "failed to create bridge \"cni0\": could not lookup \"cni0\": Link not found"
        );
        let e = BridgeError::NotABridge { name: "x".into() }.unavailable();
        let wire = libcni::Error::from(e);
        assert_eq!(
            (wire.code, wire.msg.as_str()),
            (50, "\"x\" already exists but is not a bridge")
        );
    }

    #[test]
    fn cni_errors_pass_unchanged() {
        let e = libcni::Error::invalid_config("bad").with_details("d");
        assert_eq!(libcni::Error::from(BridgeError::from(e.clone())), e);
        let e = BridgeError::from(Injected("bridge.x".into()));
        assert_eq!(
            libcni::Error::from(e),
            libcni::Error::internal("injected fault at bridge.x")
        );
    }

    fn firewall(step: &'static str, stderr: &str) -> BridgeError {
        use std::os::unix::process::ExitStatusExt;
        FirewallError::Failed {
            command: "nft -f -".into(),
            status: std::process::ExitStatus::from_raw(1 << 8),
            stderr: stderr.into(),
            script: None,
        }
        .at(step)
    }

    #[test]
    fn one_failure_reads_as_it_would_alone() {
        assert!(BridgeError::all([Ok(()), Ok(())]).is_ok());
        let alone = || firewall("failed to remove IP masquerading", "Error: busy");
        let e = BridgeError::all([Ok(()), Err(alone()), Ok(())]).unwrap_err();
        assert_eq!(libcni::Error::from(e), libcni::Error::from(alone()));
    }

    #[test]
    fn several_failures_are_all_reported_in_order() {
        let ipam = libcni::Error::new(11, "lock busy").with_details("ipam details");
        let e = BridgeError::all([
            Err(BridgeError::from(ipam)),
            Ok(()),
            Err(firewall("failed to remove mac spoof check", "Error: one")),
            Err(BridgeError::all([
                Err(firewall("failed to remove IP masquerading", "Error: two")),
                Err(BridgeError::from(Injected("bridge.x".into()))),
            ])
            .unwrap_err()),
        ])
        .unwrap_err();
        let wire = libcni::Error::from(e);
        // The first failure's code; each message once, in the order the steps were listed.
        assert_eq!(wire.code, 11);
        assert_eq!(
            wire.msg,
            "lock busy; \
             failed to remove mac spoof check: nft -f - failed (exit status: 1): one; \
             failed to remove IP masquerading: nft -f - failed (exit status: 1): two; \
             injected fault at bridge.x"
        );
        assert_eq!(
            wire.details,
            "ipam details\n\nnft -f -: Error: one\n\nnft -f -: Error: two"
        );
    }
}
