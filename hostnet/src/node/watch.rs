//! Drift notifications: which of our objects someone else changed in the kernel, told as it
//! happens (NetworkManager or systemd-networkd deleting "foreign" routes, a firewall reload
//! flushing our table, our device deleted), so the agent repairs it at once instead of at
//! its next periodic re-check. [`super::NodeNet::watch`] starts one; dropping the
//! [`Watch`] ends it.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

/// What changed: each part the agent must read from the kernel again instead of trusting
/// what its last pass left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drift {
    /// A route of ours (protocol [`super::ROUTE_PROTO`]).
    pub routes: bool,
    /// Our VXLAN device or its FDB/neighbour entries (or an overlay route: also `routes`).
    pub overlay: bool,
    /// Our `inet cni-rs` table or an iptables-nft `filter FORWARD` chain.
    pub firewall: bool,
    /// Our NetworkPolicy table `inet cni-rs-netpol`.
    pub policy: bool,
    /// Notifications were lost (the socket overran): anything may have changed.
    pub lost: bool,
}

impl Drift {
    /// Everything may have changed.
    pub const ALL: Drift = Drift {
        routes: true,
        overlay: true,
        firewall: true,
        policy: true,
        lost: true,
    };

    pub fn is_empty(&self) -> bool {
        *self == Drift::default()
    }

    pub fn union(self, other: Drift) -> Drift {
        Drift {
            routes: self.routes || other.routes,
            overlay: self.overlay || other.overlay,
            firewall: self.firewall || other.firewall,
            policy: self.policy || other.policy,
            lost: self.lost || other.lost,
        }
    }
}

/// Called from the watch's own thread with each coalesced burst of changes.
pub type Notify = Box<dyn Fn(Drift) + Send>;

/// A running watch; dropping it stops its thread (at once: the thread waits on a stop
/// socket beside the kernel's) and closes its sockets.
#[derive(Debug, Default)]
pub struct Watch {
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    pub(super) fn new(stop: UnixStream, thread: JoinHandle<()>) -> Watch {
        Watch {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// A watch without a thread (the fake's: it notifies from the caller's).
    pub fn detached() -> Watch {
        Watch::default()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The thread wakes on the byte or, should the send fail, on the closed peer.
            let _ = (&stop).write_all(&[1]);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
