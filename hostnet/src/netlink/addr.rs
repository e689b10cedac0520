//! IP addresses on links, and waiting for IPv6 DAD to finish.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Netlink, NetlinkError};

const SETTLE_POLL: Duration = Duration::from_millis(50);

/// An address assigned to a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub index: u32,
    /// The address with its prefix length (host bits kept: `10.1.2.3/24`).
    pub addr: IpNetwork,
    /// IPv6 DAD still running (`IFA_F_TENTATIVE`).
    pub tentative: bool,
    /// IPv6 DAD found a duplicate (`IFA_F_DADFAILED`).
    pub dadfailed: bool,
    /// `RT_SCOPE_*`: 0 universe (global), 253 link, 254 host.
    pub scope: u8,
    /// IPv4 broadcast (`IFA_BROADCAST`), if the kernel holds one.
    pub broadcast: Option<Ipv4Addr>,
}

impl Address {
    fn from_message(msg: &AddressMessage) -> Option<Address> {
        let mut local = None;
        let mut address = None;
        let mut broadcast = None;
        // The 32-bit IFA_FLAGS attribute supersedes the 8-bit header field.
        let mut flags = AddressFlags::from_bits_retain(u32::from(msg.header.flags.bits()));
        for attr in &msg.attributes {
            match attr {
                AddressAttribute::Local(ip) => local = Some(*ip),
                AddressAttribute::Address(ip) => address = Some(*ip),
                AddressAttribute::Flags(f) => flags = *f,
                AddressAttribute::Broadcast(b) => broadcast = Some(*b),
                _ => {}
            }
        }
        // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on
        // point-to-point links and the only one present for IPv6.
        let ip = local.or(address)?;
        Some(Address {
            index: msg.header.index,
            addr: IpNetwork::new(ip, msg.header.prefix_len).ok()?,
            tentative: flags.contains(AddressFlags::Tentative),
            dadfailed: flags.contains(AddressFlags::Dadfailed),
            scope: msg.header.scope.into(),
            broadcast,
        })
    }
}

/// The message for `ip addr add|del ADDR dev IDX`, with the IPv4 broadcast
/// filled in below /31 as `ip` does.
fn address_message(index: u32, addr: IpNetwork) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.index = index;
    msg.header.prefix_len = addr.prefix();
    msg.header.scope = AddressScope::Universe;
    msg.header.flags = AddressHeaderFlags::empty();
    msg.header.family = match addr {
        IpNetwork::V4(_) => AddressFamily::Inet,
        IpNetwork::V6(_) => AddressFamily::Inet6,
    };
    msg.attributes.push(AddressAttribute::Local(addr.ip()));
    msg.attributes.push(AddressAttribute::Address(addr.ip()));
    if let IpNetwork::V4(v4) = addr
        && v4.prefix() < 31
    {
        msg.attributes
            .push(AddressAttribute::Broadcast(v4.broadcast()));
    }
    msg
}

impl Netlink {
    /// Addresses of link `index`, or of all links when `None`.
    pub fn addresses(&self, index: Option<u32>) -> Result<Vec<Address>, NetlinkError> {
        let mut msg = AddressMessage::default();
        // One link's: the kernel filters (strict checking), rather than dumping every
        // address of a node with hundreds of pods; a kernel that cannot (before 4.20)
        // dumps all, and the filter below keeps that link's.
        msg.header.index = index.unwrap_or(0);
        self.dump_checked(
            &|| "list addresses".into(),
            RouteNetlinkMessage::GetAddress(msg),
            index.is_some(),
            |m| match m {
                RouteNetlinkMessage::NewAddress(a) if index.is_none_or(|i| a.header.index == i) => {
                    Address::from_message(&a)
                }
                _ => None,
            },
        )
    }

    /// `ip addr add ADDR dev IDX`; EEXIST ([`NetlinkError::is_exists`]) if present.
    pub fn add_address(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("add address {addr} to link {index}"),
            RouteNetlinkMessage::NewAddress(address_message(index, addr)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// `ip addr add ADDR dev IDX nodad`: an IPv6 address usable at once, skipping DAD
    /// (`IFA_F_NODAD`; no effect on IPv4). EEXIST if present.
    pub fn add_address_nodad(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        let mut msg = address_message(index, addr);
        if addr.is_ipv6() {
            msg.attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        self.ack(
            &|| format!("add address {addr} nodad to link {index}"),
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// `ip addr del ADDR dev IDX`; EADDRNOTAVAIL ([`NetlinkError::is_not_found`]) if absent.
    pub fn del_address(&self, index: u32, addr: IpNetwork) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("delete address {addr} from link {index}"),
            RouteNetlinkMessage::DelAddress(address_message(index, addr)),
            0,
        )
    }

    /// Waits (polling every 50 ms) until no IPv6 address on link `index` is
    /// tentative, like Go's `ip.SettleAddresses`. Fails at once on DADFAILED.
    /// At `timeout` it fails with [`NetlinkError::Timeout`] only if the link
    /// is up: on a down link DAD never runs, so there is nothing to wait for.
    pub fn settle_addresses(&self, index: u32, timeout: Duration) -> Result<(), NetlinkError> {
        let op = || format!("settle IPv6 addresses on link {index}");
        let deadline = Instant::now() + timeout;
        loop {
            let addrs = self.addresses(Some(index))?;
            let v6 = addrs
                .iter()
                .filter(|a| matches!(a.addr.ip(), IpAddr::V6(_)));
            let mut tentative = None;
            for a in v6 {
                if a.dadfailed {
                    return Err(NetlinkError::DadFailed {
                        op: op(),
                        address: a.addr.ip().to_string(),
                    });
                }
                if a.tentative {
                    tentative = Some(a.addr);
                }
            }
            let Some(still) = tentative else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                if !self.link_by_index(index)?.admin_up {
                    return Ok(());
                }
                return Err(NetlinkError::Timeout {
                    op: op(),
                    state: format!("address {still} still tentative after {timeout:?}"),
                });
            }
            std::thread::sleep(SETTLE_POLL);
        }
    }
}
