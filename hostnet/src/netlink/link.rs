//! Links: read, create (bridge, veth), change, delete, wait for oper state.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{
    InfoBridgePort, InfoData, InfoKind, InfoPortData, InfoPortKind, InfoVeth, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage, State,
};

use super::{Netlink, NetlinkError};

/// Sleeps between oper-state checks, as the Go bridge plugin does
/// (the first check is immediate).
const OPER_UP_BACKOFF_MS: [u64; 5] = [0, 50, 500, 1000, 1000];

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND`: "bridge", "veth", ...; `None` for `lo` and plain devices.
    pub kind: Option<String>,
    pub mac: Option<[u8; 6]>,
    pub mtu: u32,
    /// `IFF_UP` (administratively up).
    pub admin_up: bool,
    /// Operational state is `up`.
    pub oper_up: bool,
    /// Operational state in Go's spelling: "up", "down", "lowerlayerdown", "unknown", ...
    pub oper_state: String,
    /// Index of the bridge (or other controller) this link is a port of.
    pub master: Option<u32>,
    /// `IFLA_LINK`: for a veth, the peer's index (in the peer's namespace).
    pub peer_index: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the peer's namespace as this namespace numbers it (see
    /// [`Netlink::netns_id`]); `None` when the peer is in this namespace.
    pub peer_netns_id: Option<i32>,
    /// `IFF_PROMISC` as set by `ip link set promisc on` (not by bridge membership).
    pub promisc: bool,
    /// Bridge-port hairpin mode; `None` unless the link is a bridge port.
    pub hairpin: Option<bool>,
    /// Bridge-port isolation; `None` unless the link is a bridge port.
    pub isolated: Option<bool>,
}

fn oper_state_name(state: &State) -> String {
    match state {
        State::Unknown => "unknown".into(),
        State::NotPresent => "notpresent".into(),
        State::Down => "down".into(),
        State::LowerLayerDown => "lowerlayerdown".into(),
        State::Testing => "testing".into(),
        State::Dormant => "dormant".into(),
        State::Up => "up".into(),
        other => other.to_string().to_lowercase(),
    }
}

impl Link {
    fn from_message(msg: &LinkMessage) -> Link {
        let flags = msg.header.flags;
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            kind: None,
            mac: None,
            mtu: 0,
            admin_up: flags.contains(LinkFlags::Up),
            oper_up: false,
            oper_state: "unknown".into(),
            master: None,
            peer_index: None,
            peer_netns_id: None,
            promisc: flags.contains(LinkFlags::Promisc),
            hairpin: None,
            isolated: None,
        };
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Address(a) => link.mac = <[u8; 6]>::try_from(a.as_slice()).ok(),
                LinkAttribute::Mtu(m) => link.mtu = *m,
                LinkAttribute::OperState(s) => {
                    link.oper_up = *s == State::Up;
                    link.oper_state = oper_state_name(s);
                }
                LinkAttribute::Controller(m) => link.master = Some(*m),
                LinkAttribute::Link(p) => link.peer_index = Some(*p),
                LinkAttribute::LinkNetNsId(id) => link.peer_netns_id = Some(*id),
                LinkAttribute::LinkInfo(infos) => link.read_info(infos),
                _ => {}
            }
        }
        link
    }

    fn read_info(&mut self, infos: &[LinkInfo]) {
        for info in infos {
            match info {
                LinkInfo::Kind(k) => self.kind = Some(k.to_string()),
                LinkInfo::PortData(InfoPortData::BridgePort(opts)) => {
                    for opt in opts {
                        match opt {
                            InfoBridgePort::HairpinMode(v) => self.hairpin = Some(*v),
                            InfoBridgePort::Isolated(v) => self.isolated = Some(*v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

fn indexed(index: u32) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg
}

fn mtu_attr(mtu: Option<u32>) -> Option<LinkAttribute> {
    mtu.map(LinkAttribute::Mtu)
}

impl Netlink {
    fn only_link(&self, op: &dyn Fn() -> String, msg: LinkMessage) -> Result<Link, NetlinkError> {
        let answers = self.request(op, RouteNetlinkMessage::GetLink(msg), 0)?;
        answers
            .iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(Link::from_message(l)),
                _ => None,
            })
            .ok_or_else(|| NetlinkError::unexpected(op(), "no link in the answer"))
    }

    /// The link called `name`, or `None` if there is none (ENODEV).
    pub fn link_by_name(&self, name: &str) -> Result<Option<Link>, NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        match self.only_link(&|| format!("get link {name:?}"), msg) {
            Ok(l) => Ok(Some(l)),
            Err(e) if e.is_no_device() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The link with index `index`; ENODEV (see [`NetlinkError::is_no_device`]) if absent.
    pub fn link_by_index(&self, index: u32) -> Result<Link, NetlinkError> {
        self.only_link(&|| format!("get link {index}"), indexed(index))
    }

    /// All links of this namespace.
    pub fn links(&self) -> Result<Vec<Link>, NetlinkError> {
        self.dump(
            &|| "list links".into(),
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            |m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(Link::from_message(&l)),
                _ => None,
            },
        )
    }

    fn new_link(
        &self,
        op: &dyn Fn() -> String,
        msg: LinkMessage,
        create: bool,
    ) -> Result<(), NetlinkError> {
        let flags = if create { NLM_F_CREATE | NLM_F_EXCL } else { 0 };
        self.ack(op, RouteNetlinkMessage::NewLink(msg), flags)
    }

    fn set_link(&self, op: &dyn Fn() -> String, msg: LinkMessage) -> Result<(), NetlinkError> {
        self.ack(op, RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// `ip link add NAME [mtu MTU] type bridge`. Fails with EEXIST
    /// ([`NetlinkError::is_exists`]) if a link of that name exists, whatever its kind.
    pub fn create_bridge(&self, name: &str, mtu: Option<u32>) -> Result<(), NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        msg.attributes.extend(mtu_attr(mtu));
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        self.new_link(&|| format!("create bridge {name:?}"), msg, true)
    }

    /// Creates a veth pair with one RTM_NEWLINK: `host_name` in this
    /// connection's namespace, `container_name` born directly inside
    /// `container_ns` (no move, no rename race). Both ends get `mtu`; the
    /// container end gets `container_mac`. EEXIST if either name is taken in
    /// its namespace.
    pub fn create_veth(
        &self,
        host_name: &str,
        container_name: &str,
        mtu: Option<u32>,
        container_mac: Option<[u8; 6]>,
        container_ns: BorrowedFd<'_>,
    ) -> Result<(), NetlinkError> {
        let mut peer = LinkMessage::default();
        peer.attributes
            .push(LinkAttribute::IfName(container_name.to_string()));
        peer.attributes.extend(mtu_attr(mtu));
        if let Some(mac) = container_mac {
            peer.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        // The fd is borrowed for the whole call, so it stays open until the ACK.
        peer.attributes
            .push(LinkAttribute::NetNsFd(container_ns.as_raw_fd()));

        let mut msg = LinkMessage::default();
        msg.attributes
            .push(LinkAttribute::IfName(host_name.to_string()));
        msg.attributes.extend(mtu_attr(mtu));
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        self.new_link(
            &|| format!("create veth pair {host_name:?} / {container_name:?}"),
            msg,
            true,
        )
    }

    fn set_flag(
        &self,
        index: u32,
        flag: LinkFlags,
        on: bool,
        what: &str,
    ) -> Result<(), NetlinkError> {
        let mut msg = indexed(index);
        msg.header.change_mask = flag;
        if on {
            msg.header.flags = flag;
        }
        self.set_link(&|| format!("set link {index} {what}"), msg)
    }

    /// `ip link set IDX up`.
    pub fn set_up(&self, index: u32) -> Result<(), NetlinkError> {
        self.set_flag(index, LinkFlags::Up, true, "up")
    }

    /// `ip link set IDX down`.
    pub fn set_down(&self, index: u32) -> Result<(), NetlinkError> {
        self.set_flag(index, LinkFlags::Up, false, "down")
    }

    /// `ip link set IDX promisc on|off`.
    pub fn set_promisc(&self, index: u32, on: bool) -> Result<(), NetlinkError> {
        self.set_flag(
            index,
            LinkFlags::Promisc,
            on,
            if on { "promisc on" } else { "promisc off" },
        )
    }

    /// `ip link set IDX master MASTER`.
    pub fn set_master(&self, index: u32, master: u32) -> Result<(), NetlinkError> {
        let mut msg = indexed(index);
        msg.attributes.push(LinkAttribute::Controller(master));
        self.set_link(&|| format!("set link {index} master {master}"), msg)
    }

    /// `ip link set IDX address MAC`.
    pub fn set_mac(&self, index: u32, mac: [u8; 6]) -> Result<(), NetlinkError> {
        let mut msg = indexed(index);
        msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        self.set_link(&|| format!("set link {index} address"), msg)
    }

    /// `ip link set IDX type bridge_slave [hairpin on|off] [isolated on|off]`.
    /// Sent as RTM_NEWLINK: the kernel ignores port data in RTM_SETLINK.
    pub fn set_port_options(
        &self,
        index: u32,
        hairpin: Option<bool>,
        isolated: Option<bool>,
    ) -> Result<(), NetlinkError> {
        let mut opts = Vec::new();
        opts.extend(hairpin.map(InfoBridgePort::HairpinMode));
        opts.extend(isolated.map(InfoBridgePort::Isolated));
        if opts.is_empty() {
            return Ok(());
        }
        let mut msg = indexed(index);
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::PortKind(InfoPortKind::Bridge),
            LinkInfo::PortData(InfoPortData::BridgePort(opts)),
        ]));
        self.new_link(
            &|| format!("set bridge port options on link {index}"),
            msg,
            false,
        )
    }

    /// `ip link del IDX`. Deleting either veth end removes the pair.
    pub fn delete_link(&self, index: u32) -> Result<(), NetlinkError> {
        self.ack(
            &|| format!("delete link {index}"),
            RouteNetlinkMessage::DelLink(indexed(index)),
            0,
        )
    }

    /// Polls the link's operational state with sleeps of 0, 50, 500, 1000 and
    /// 1000 ms. On failure returns [`NetlinkError::Timeout`] whose
    /// [`NetlinkError::last_state`] is the final state ("down", ...).
    pub fn wait_oper_up(&self, index: u32) -> Result<Link, NetlinkError> {
        let mut state = String::new();
        for ms in OPER_UP_BACKOFF_MS {
            std::thread::sleep(Duration::from_millis(ms));
            let link = self.link_by_index(index)?;
            if link.oper_up {
                return Ok(link);
            }
            state = link.oper_state;
        }
        Err(NetlinkError::Timeout {
            op: format!("wait for link {index} to be operationally up"),
            state,
        })
    }
}
