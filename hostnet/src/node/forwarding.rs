//! IP forwarding for a node that routes pod traffic.
//!
//! Turning `net.ipv6.conf.all.forwarding` on makes the kernel drop the default routes it
//! learned from router advertisements (and stop taking new ones) on every interface whose
//! `accept_ra` is 1; with 2 it keeps accepting them. So before forwarding goes on, an
//! interface that holds an RA-learned route (`proto ra`) and has `accept_ra` 1 gets 2.
//! Only those: a bridge of pods with `accept_ra` 2 would take a pod's router
//! advertisement for the node.

use std::collections::BTreeSet;

use crate::netlink::{IpFamily, Netlink, NetlinkError};
use crate::sysctl::{self, SysctlError};

/// `RTPROT_RA`.
const PROTO_RA: u8 = 9;

#[derive(Debug, thiserror::Error)]
pub enum ForwardingError {
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
}

/// The interfaces that hold a route learned from a router advertisement.
fn ra_interfaces(nl: &Netlink) -> Result<BTreeSet<String>, NetlinkError> {
    let oifs: BTreeSet<u32> = nl
        .routes_of_protocol(IpFamily::V6, PROTO_RA)?
        .iter()
        .filter_map(|r| r.oif)
        .collect();
    let mut names = BTreeSet::new();
    for index in oifs {
        match nl.link_by_index(index) {
            Ok(link) => {
                names.insert(link.name);
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(names)
}

/// Turns forwarding on (in the calling thread's namespace, where `nl` must be too).
pub fn enable(nl: &Netlink, v4: bool, v6: bool) -> Result<(), ForwardingError> {
    if v4 {
        sysctl::ensure("net.ipv4.ip_forward", "1")?;
    }
    if v6 {
        for name in ra_interfaces(nl)? {
            let path = sysctl::path(&["net", "ipv6", "conf", &name, "accept_ra"])?;
            if sysctl::read_path(&path)?.trim() == "1" {
                sysctl::write_path(&path, "2")?;
            }
        }
        sysctl::ensure("net.ipv6.conf.all.forwarding", "1")?;
    }
    Ok(())
}
