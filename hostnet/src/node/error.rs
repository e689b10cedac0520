//! [`NodeNetError`]: which kernel operation of the agent failed, on what (the route, the
//! peer, the address), and why: the netlink, nf_tables, sysctl or namespace error itself,
//! or a refusal of ours, each with its errno where the kernel gave one. Callers decide on
//! the errno ([`NodeNetError::is_exists`], ...) and on the operation, never on text.

use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use sysproc::netns::NetnsError;

use super::{OverlayPeer, PodRoute, VXLAN_DEVICE, libc_errno};
use crate::netlink::NetlinkError;
use crate::nftnl::NftError;
use crate::sysctl::SysctlError;

/// A kernel operation of the agent that failed. The errno decides behaviour (EEXIST: a
/// route of someone else holds that destination).
#[derive(Debug, thiserror::Error)]
#[error("{op}: {cause}")]
pub struct NodeNetError {
    pub op: Op,
    #[source]
    pub cause: Cause,
}

/// What the agent asked of the kernel, and of which object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Opening the node's network namespace (or a test's).
    Open,
    ListRoutes,
    AddRoute(PodRoute),
    ReplaceRoute(PodRoute),
    DeleteRoute(PodRoute),
    /// The kernel's route to an address (is it on-link?).
    RouteTo(IpAddr),
    ListAddresses,
    ApplyFirewall,
    ReadFirewall,
    RemoveFirewall,
    EnableForwarding,
    EnsureVxlan,
    RemoveVxlan,
    ListOverlayPeers,
    AddOverlayPeer(OverlayPeer),
    DeleteOverlayPeer(OverlayPeer),
    DefaultRouteMtu,
    /// The MTU of the interface holding this address.
    UnderlayMtu(IpAddr),
    Watch,
    ReplacePolicy,
    ApplyPolicy,
    RemovePolicy,
    ReadPolicy,
    ListConntrack,
    ForgetConnections,
    ReadBridgeNetfilter,
    EnableBridgeNetfilter,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let peer = |f: &mut fmt::Formatter<'_>, verb: &str, p: &OverlayPeer| {
            let cidrs: Vec<String> = p.pod_cidrs.iter().map(ToString::to_string).collect();
            write!(
                f,
                "{verb} overlay peer {} via {}",
                cidrs.join(","),
                p.node_ip
            )
        };
        match self {
            Op::Open => f.write_str("open the network namespace"),
            Op::ListRoutes => f.write_str("list routes"),
            Op::AddRoute(r) => write!(f, "add route {} via {}", r.dst, r.gateway),
            Op::ReplaceRoute(r) => write!(f, "replace route {} via {}", r.dst, r.gateway),
            Op::DeleteRoute(r) => write!(f, "delete route {} via {}", r.dst, r.gateway),
            Op::RouteTo(a) => write!(f, "route get {a}"),
            Op::ListAddresses => f.write_str("list addresses"),
            Op::ApplyFirewall => f.write_str("apply firewall"),
            Op::ReadFirewall => f.write_str("read firewall"),
            Op::RemoveFirewall => f.write_str("remove firewall"),
            Op::EnableForwarding => f.write_str("enable forwarding"),
            Op::EnsureVxlan => write!(f, "ensure vxlan device {VXLAN_DEVICE}"),
            Op::RemoveVxlan => write!(f, "remove vxlan device {VXLAN_DEVICE}"),
            Op::ListOverlayPeers => f.write_str("list overlay peers"),
            Op::AddOverlayPeer(p) => peer(f, "add", p),
            Op::DeleteOverlayPeer(p) => peer(f, "delete", p),
            Op::DefaultRouteMtu => f.write_str("read the default route's MTU"),
            Op::UnderlayMtu(a) => write!(f, "read the MTU of the interface holding {a}"),
            Op::Watch => f.write_str("watch the kernel"),
            Op::ReplacePolicy => f.write_str("replace network policy"),
            Op::ApplyPolicy => f.write_str("apply network policy changes"),
            Op::RemovePolicy => f.write_str("remove network policy"),
            Op::ReadPolicy => f.write_str("read network policy"),
            Op::ListConntrack => f.write_str("list conntrack entries"),
            Op::ForgetConnections => f.write_str("delete conntrack entries of denied connections"),
            Op::ReadBridgeNetfilter => f.write_str("read the bridge netfilter sysctls"),
            Op::EnableBridgeNetfilter => f.write_str("enable bridge netfilter"),
        }
    }
}

/// Why an operation failed: the lower layer's error as it came, or a refusal of ours.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error(transparent)]
    Nft(#[from] NftError),
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Refused(#[from] Refusal),
}

/// What the agent (or the fake, as the kernel would) refuses, before or instead of the
/// kernel's own answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A route that is not ours (or not of this kind) holds the destination. EEXIST.
    #[error("a route to {0} exists already")]
    RouteExists(IpNetwork),
    /// A link of our device's name is not a VXLAN device: someone else's. EEXIST.
    #[error("a {kind} link named {VXLAN_DEVICE} exists and is not ours")]
    NotOurLink { kind: String },
    /// Our device is not there. ENODEV.
    #[error("no {VXLAN_DEVICE} device")]
    NoDevice,
    /// Our device was made but is not found. ENODEV.
    #[error("the device vanished after creation")]
    Vanished,
    /// Another VXLAN device holds our VNI and port over the same family. EADDRINUSE.
    #[error(
        "the VXLAN device {device} already has VNI {vni} on UDP port {port}, and the kernel \
         allows one device per VNI and port"
    )]
    VniInUse { device: String, vni: u32, port: u16 },
    /// A pod range of everything: it would forward and masquerade all traffic.
    #[error("pod CIDR {0} would forward and masquerade everything")]
    EverythingPodCidr(IpNetwork),
    /// The gateway is on no link (the kernel's extack text). ENETUNREACH, IPv6 EHOSTUNREACH.
    #[error("Nexthop has invalid gateway")]
    GatewayNotOnLink(IpAddr),
    /// What a change refers to is not there (a set, a chain, an element). ENOENT.
    #[error("no {what} {name}")]
    Missing { what: &'static str, name: String },
    /// A set exists with another type. EEXIST.
    #[error("set {0} exists with another type")]
    SetKind(String),
    /// The kernel's plain errno, as the fake answers it (`File exists`).
    #[error("{}", nix::errno::Errno::from_raw(*.0).desc())]
    Errno(i32),
    /// The netfilter socket was not opened.
    #[error("netfilter socket not open")]
    NoNftSocket,
    /// No `/proc/sys/net/bridge`: module br_netfilter is not loaded, and the agent's image
    /// cannot load it. Bridged traffic between pods of one node then bypasses policy.
    #[error(
        "br_netfilter is not loaded (no /proc/sys/net/bridge): traffic bridged between pods \
         of one node bypasses NetworkPolicy (and kube-proxy); load it on the node \
         (modprobe br_netfilter, and list it in /etc/modules-load.d)"
    )]
    NoBridgeNetfilter,
    /// This kernel interface cannot do it.
    #[error("not supported")]
    NotSupported,
    /// A test made the fake fail this operation.
    #[error("injected failure")]
    Injected,
}

impl Refusal {
    fn errno(&self) -> Option<i32> {
        match self {
            Refusal::RouteExists(_) | Refusal::NotOurLink { .. } | Refusal::SetKind(_) => {
                Some(libc_errno::EEXIST)
            }
            Refusal::NoDevice | Refusal::Vanished => Some(libc_errno::ENODEV),
            Refusal::VniInUse { .. } => Some(libc_errno::EADDRINUSE),
            Refusal::GatewayNotOnLink(IpAddr::V4(_)) => Some(nix::libc::ENETUNREACH),
            Refusal::GatewayNotOnLink(IpAddr::V6(_)) => Some(nix::libc::EHOSTUNREACH),
            Refusal::Missing { .. } => Some(libc_errno::ENOENT),
            Refusal::Errno(e) => Some(*e),
            Refusal::EverythingPodCidr(_)
            | Refusal::NoBridgeNetfilter
            | Refusal::NoNftSocket
            | Refusal::NotSupported
            | Refusal::Injected => None,
        }
    }
}

impl NodeNetError {
    pub fn new(op: Op, cause: impl Into<Cause>) -> NodeNetError {
        NodeNetError {
            op,
            cause: cause.into(),
        }
    }

    /// `op` on `e`, for `map_err`.
    pub fn of<E: Into<Cause>>(op: Op) -> impl FnOnce(E) -> NodeNetError {
        move |e| NodeNetError::new(op, e)
    }

    /// The kernel's errno (positive), or the one a refusal of ours stands for.
    pub fn errno(&self) -> Option<i32> {
        match &self.cause {
            Cause::Netlink(e) => e.errno(),
            Cause::Nft(e) => e.errno(),
            Cause::Sysctl(e) => e.errno(),
            Cause::Netns(e) => e.errno().map(|e| e as i32),
            Cause::Io(e) => e.raw_os_error(),
            Cause::Refused(r) => r.errno(),
        }
    }

    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc_errno::EEXIST)
    }

    /// Another VXLAN device has our VNI and UDP port (the kernel allows one per family).
    pub fn is_in_use(&self) -> bool {
        self.errno() == Some(libc_errno::EADDRINUSE)
    }

    pub fn is_not_found(&self) -> bool {
        matches!(
            self.errno(),
            Some(libc_errno::ESRCH) | Some(libc_errno::ENOENT)
        )
    }

    /// The refusal of ours, when it was one.
    pub fn refusal(&self) -> Option<&Refusal> {
        match &self.cause {
            Cause::Refused(r) => Some(r),
            _ => None,
        }
    }
}
