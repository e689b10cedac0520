//! Namespace ids: how this namespace numbers another one (`ip netns list-id`).

use std::os::fd::{AsRawFd, BorrowedFd};

use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::nsid::{NsidAttribute, NsidMessage};

use super::{Netlink, NetlinkError};

impl Netlink {
    /// The id this connection's namespace gives the namespace `ns` (an open netns file),
    /// as links report their peer's namespace in [`super::Link::peer_netns_id`]; `None`
    /// when it has none assigned (then no link here has its peer there).
    pub fn netns_id(&self, ns: BorrowedFd<'_>) -> Result<Option<i32>, NetlinkError> {
        let mut msg = NsidMessage::default();
        msg.attributes
            .push(NsidAttribute::Fd(ns.as_raw_fd() as u32));
        let answers = self.request(
            &|| "get netns id".into(),
            RouteNetlinkMessage::GetNsId(msg),
            0,
        )?;
        let id = answers.iter().find_map(|m| match m {
            RouteNetlinkMessage::NewNsId(m) => m.attributes.iter().find_map(|a| match a {
                NsidAttribute::Id(id) => Some(*id),
                _ => None,
            }),
            _ => None,
        });
        match id {
            Some(id) if id >= 0 => Ok(Some(id)),
            Some(_) => Ok(None),
            None => Err(NetlinkError::unexpected(
                "get netns id",
                "no id in the answer",
            )),
        }
    }
}
