//! Synchronous netlink access, built on `rtnetlink`.
//!
//! Every kernel conversation of the workspace goes through this module, so an
//! rtnetlink or netlink-packet-route upgrade touches only these files.
//!
//! Shape: one tokio `current_thread` runtime per process drives all
//! connections. A [`Netlink`] is one rtnetlink connection bound to one network
//! namespace; its methods `block_on` a single request (or, `batch.rs`, send many
//! at once on its socket and read their answers back). The connection future
//! is not spawned but polled together with each request, so dropping a
//! `Netlink` closes its socket at once (a leftover socket would keep a test
//! namespace alive). Connections into another namespace are opened on a
//! short-lived helper thread; the calling thread never changes namespace.

mod addr;
mod batch;
mod error;
mod link;
mod nexthop;
mod nsid;
mod route;
mod vlan;
mod vxlan;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vlan_tests;

use std::pin::Pin;
use std::sync::atomic::AtomicU32;
use std::sync::{Mutex, OnceLock};

use futures_util::StreamExt;
use futures_util::future::{Either, select};
use rtnetlink::packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload,
};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::sys::AsyncSocket;
use sysproc::netns::{self, Netns, NetnsError};

pub use addr::Address;
pub use error::NetlinkError;
pub use link::Link;
pub use nexthop::NextHop;
pub use route::{IpFamily, MAIN_TABLE, Route, RouteSpec};
pub use vlan::PortVlan;
pub use vxlan::{FdbEntry, NeighbourEntry, VxlanDevice, VxlanParams};

/// Attempts for a dump the kernel marks inconsistent (`NLM_F_DUMP_INTR`),
/// as the Go `netlinksafe` package does.
const DUMP_ATTEMPTS: usize = 5;

type Connection = rtnetlink::proto::Connection<RouteNetlinkMessage>;

fn runtime() -> Result<&'static tokio::runtime::Runtime, NetlinkError> {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| NetlinkError::io("start netlink runtime", e))?;
    // A racing thread may have won; its runtime is kept and ours dropped.
    Ok(RT.get_or_init(|| rt))
}

/// One netlink route connection bound to one network namespace.
pub struct Netlink {
    handle: rtnetlink::Handle,
    conn: Mutex<Pin<Box<Connection>>>,
    /// Sequence numbers of pipelined requests (`batch.rs`), far from the connection's own.
    seq: AtomicU32,
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Netlink")
    }
}

impl Netlink {
    /// A connection in the calling thread's network namespace.
    pub fn current() -> Result<Netlink, NetlinkError> {
        let rt = runtime()?;
        // rtnetlink registers the socket with the reactor when it is created.
        let _guard = rt.enter();
        let (mut conn, handle, _unsolicited) =
            rtnetlink::new_connection().map_err(|e| NetlinkError::io("open netlink socket", e))?;
        // Done messages carry NLM_F_DUMP_INTR too; we want to see them.
        conn.set_forward_done(true);
        Ok(Netlink {
            handle,
            conn: Mutex::new(Box::pin(conn)),
            seq: AtomicU32::new(0x8000_0000),
        })
    }

    /// A connection inside the network namespace `ns`. The socket is created
    /// by [`Netns::run`] (the one way into a namespace: a helper thread that
    /// enters `ns` and then exits); the socket stays bound to `ns`.
    pub fn in_netns(ns: &Netns) -> Result<Netlink, NetlinkError> {
        match ns.run(Netlink::current) {
            Ok(conn) => conn,
            Err(NetnsError::Io { op, source, .. }) if op == netns::OP_SPAWN => Err(
                NetlinkError::io("start a thread for the network namespace", source),
            ),
            Err(NetnsError::Io { source, .. }) => {
                Err(NetlinkError::io("enter network namespace", source))
            }
            // Not an error `run` makes (the namespace is already open).
            Err(e) => Err(NetlinkError::unexpected(
                "enter network namespace",
                e.to_string(),
            )),
        }
    }

    /// Sends one request and collects the inner messages of the answer.
    /// A NACK becomes [`NetlinkError::Os`]. `op` names the operation for errors.
    fn request(
        &self,
        op: &dyn Fn() -> String,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.request_checked(op, msg, flags, false)
    }

    /// [`Self::request`]; with `strict`, under `NETLINK_GET_STRICT_CHK` while this request
    /// is sent, so the kernel filters a dump by the request's header; the socket is
    /// lenient again after. (Another thread's request queued on this connection meanwhile
    /// goes out strict too; our requests' zeroed headers pass either check.)
    fn request_checked(
        &self,
        op: &dyn Fn() -> String,
        msg: RouteNetlinkMessage,
        flags: u16,
        strict: bool,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        let rt = runtime()?;
        for _ in 0..DUMP_ATTEMPTS {
            let mut req = NetlinkMessage::from(msg.clone());
            req.header.flags = NLM_F_REQUEST | flags;
            let mut handle = self.handle.clone();
            let stream = handle
                .request(req)
                .map_err(|_| NetlinkError::Closed { op: op() })?;
            let answers = {
                let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
                // The flag is read when the kernel receives the request, which happens
                // while the connection is driven below, under this lock.
                let set_strict = |conn: &mut Connection, on: bool| {
                    conn.socket_mut()
                        .socket_mut()
                        .set_netlink_get_strict_chk(on)
                        .is_ok()
                };
                let strict = strict && set_strict(conn.as_mut().get_mut(), true);
                let answers = match rt.block_on(select(conn.as_mut(), stream.collect::<Vec<_>>())) {
                    Either::Left(_) => None,
                    Either::Right((answers, _)) => Some(answers),
                };
                if strict && !set_strict(conn.as_mut().get_mut(), false) {
                    return Err(NetlinkError::Closed { op: op() });
                }
                answers.ok_or_else(|| NetlinkError::Closed { op: op() })?
            };
            let mut interrupted = false;
            let mut out = Vec::new();
            for answer in answers {
                interrupted |= answer.header.flags & NLM_F_DUMP_INTR != 0;
                match answer.payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Error(e) => {
                        if let Some(code) = e.code {
                            return Err(NetlinkError::os(op(), -code.get()));
                        }
                    }
                    NetlinkPayload::Overrun(_) => interrupted = true,
                    _ => {}
                }
            }
            if !(interrupted && flags & NLM_F_DUMP == NLM_F_DUMP) {
                return Ok(out);
            }
        }
        Err(NetlinkError::os(op(), nix::libc::EINTR))
    }

    /// A change request (`NLM_F_ACK` plus `flags`); the answer is only the ACK.
    fn ack(
        &self,
        op: &dyn Fn() -> String,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), NetlinkError> {
        self.request(op, msg, NLM_F_ACK | flags).map(drop)
    }

    /// The port id the kernel gave this connection's socket: the sender it stamps on the
    /// notifications of our own changes. None if the socket cannot tell.
    pub fn port_id(&self) -> Option<u32> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut addr = rtnetlink::sys::SocketAddr::new(0, 0);
        let sock = conn.as_mut().get_mut().socket_mut().socket_mut();
        sock.get_address(&mut addr).ok()?;
        Some(addr.port_number())
    }

    /// A dump request; `pick` keeps the answers of the wanted kind.
    fn dump<T>(
        &self,
        op: &dyn Fn() -> String,
        msg: RouteNetlinkMessage,
        pick: impl FnMut(RouteNetlinkMessage) -> Option<T>,
    ) -> Result<Vec<T>, NetlinkError> {
        self.dump_checked(op, msg, false, pick)
    }

    /// [`Self::dump`]; with `strict`, filtered by the kernel ([`Self::request_checked`]).
    fn dump_checked<T>(
        &self,
        op: &dyn Fn() -> String,
        msg: RouteNetlinkMessage,
        strict: bool,
        pick: impl FnMut(RouteNetlinkMessage) -> Option<T>,
    ) -> Result<Vec<T>, NetlinkError> {
        let answers = self.request_checked(op, msg, NLM_F_DUMP, strict)?;
        Ok(answers.into_iter().filter_map(pick).collect())
    }
}
