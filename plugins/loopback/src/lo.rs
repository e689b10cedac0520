//! Kernel work: the `lo` link of the container's namespace, the only link this plugin
//! touches. Messages follow the reference (Go netlink's "Link not found", the netns
//! package's "failed to Statfs ...").

use hostnet::kernel::{Kernel, Links};
use hostnet::netlink::{Link, NetlinkError};
use ipnetwork::IpNetwork;
use libcni::Error;
use libcni::skel::CmdArgs;
use std::net::IpAddr;
use sysproc::goquote::quote;
use sysproc::netns::NetnsError;

#[derive(Debug, thiserror::Error)]
pub enum LoError {
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error("Link not found")]
    Missing,
    #[error("loopback interface found with non-loopback address {}", quote(&.0.to_string()))]
    NotLoopback(IpAddr),
    #[error("loopback interface is down")]
    Down,
}

/// Untyped in the reference, so code 999 (internal) as Go's skel reports them.
impl From<LoError> for Error {
    fn from(e: LoError) -> Error {
        Error::internal(e)
    }
}

/// The first IPv4 and the first IPv6 address of `lo`, as the kernel lists them.
pub struct LoAddrs {
    pub v4: Option<IpNetwork>,
    pub v6: Option<IpNetwork>,
}

/// A netlink connection inside the call's namespace (CNI_NETNS, opened once per call and
/// shared with skel), and its `lo`.
fn open<K: Kernel>(k: &K, args: &CmdArgs) -> Result<(K::Conn, Link), LoError> {
    let netns = k.open_netns(&args.netns, &args.opened_netns)?;
    let nl = k.links_in(&netns)?;
    let link = nl.link_by_name("lo")?.ok_or(LoError::Missing)?;
    Ok((nl, link))
}

/// Brings `lo` up and reads its addresses: the kernel gives it 127.0.0.1/8 and ::1/128
/// (the latter unless IPv6 is disabled) as it comes up. An address that is not a loopback
/// address is an error, as in the reference (after `lo` is up, as there).
pub fn bring_up<K: Kernel>(k: &K, args: &CmdArgs) -> Result<LoAddrs, LoError> {
    let (nl, link) = open(k, args)?;
    nl.set_up(link.index)?;
    let addrs: Vec<IpNetwork> = nl
        .addresses(Some(link.index))?
        .into_iter()
        .map(|a| a.addr)
        .collect();
    if let Some(other) = addrs.iter().map(IpNetwork::ip).find(|ip| !is_loopback(ip)) {
        return Err(LoError::NotLoopback(other));
    }
    Ok(LoAddrs {
        v4: addrs.iter().find(|a| a.is_ipv4()).copied(),
        v6: addrs.iter().find(|a| a.is_ipv6()).copied(),
    })
}

/// CHECK: `lo` must be administratively up.
pub fn check<K: Kernel>(k: &K, args: &CmdArgs) -> Result<(), LoError> {
    let (_, link) = open(k, args)?;
    if link.admin_up {
        Ok(())
    } else {
        Err(LoError::Down)
    }
}

/// DEL: best effort and never an error: `lo` holds nothing that could leak, and a failing
/// DEL would only keep the runtime from tearing the pod down.
pub fn del<K: Kernel>(k: &K, args: &CmdArgs) {
    if args.netns.is_empty() {
        return;
    }
    if let Err(e) = set_down(k, args) {
        libcni::log!("loopback: DEL: leaving lo as it is: {e}");
    }
}

fn set_down<K: Kernel>(k: &K, args: &CmdArgs) -> Result<(), LoError> {
    let (nl, link) = open(k, args)?;
    Ok(nl.set_down(link.index)?)
}

/// Go's `net.IP.IsLoopback`: 127/8, ::1, and 127/8 mapped into IPv6.
fn is_loopback(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_as_go_sees_them() {
        for ip in ["127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(&ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.0.0.1", "::2", "::ffff:10.0.0.1", "::127.0.0.1"] {
            assert!(!is_loopback(&ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn errors_read_like_the_reference() {
        let e = Error::from(LoError::NotLoopback("10.1.2.3".parse().unwrap()));
        assert_eq!(e.code, 999);
        assert_eq!(
            e.msg,
            r#"loopback interface found with non-loopback address "10.1.2.3""#
        );
        assert_eq!(Error::from(LoError::Down).msg, "loopback interface is down");
    }
}
