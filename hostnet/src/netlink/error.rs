//! The one error type of the netlink layer. It always says what was being done
//! and keeps the kernel errno reachable, so callers can treat EEXIST or ENODEV
//! as the expected outcomes they often are.

use std::io;

/// Errors from [`super::Netlink`] operations.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel refused the request (a netlink NACK) or a socket/namespace
    /// syscall failed. `source` carries the positive errno.
    #[error("{op}: {source}")]
    Os { op: String, source: io::Error },
    /// The connection to the kernel stopped answering (socket closed).
    #[error("{op}: netlink connection closed")]
    Closed { op: String },
    /// The kernel answered with something we could not use.
    #[error("{op}: {detail}")]
    Unexpected { op: String, detail: String },
    /// A polling wait gave up; `state` is the last observed state (for
    /// [`super::Netlink::wait_oper_up`] the link's operational state, e.g. `"down"`).
    #[error("{op}: {state}")]
    Timeout { op: String, state: String },
    /// IPv6 duplicate address detection failed for `address`.
    #[error("{op}: address {address} is in DADFAILED state")]
    DadFailed { op: String, address: String },
}

impl NetlinkError {
    pub(crate) fn os(op: impl Into<String>, errno: i32) -> Self {
        NetlinkError::Os {
            op: op.into(),
            source: io::Error::from_raw_os_error(errno),
        }
    }

    pub(crate) fn io(op: impl Into<String>, source: io::Error) -> Self {
        NetlinkError::Os {
            op: op.into(),
            source,
        }
    }

    pub(crate) fn unexpected(op: impl Into<String>, detail: impl Into<String>) -> Self {
        NetlinkError::Unexpected {
            op: op.into(),
            detail: detail.into(),
        }
    }

    /// The positive errno, when the failure came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Os { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// EEXIST: the link, address or route is already there.
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(nix::libc::EEXIST)
    }

    /// ENODEV: no such link.
    pub fn is_no_device(&self) -> bool {
        self.errno() == Some(nix::libc::ENODEV)
    }

    /// ENOENT or ESRCH: no such object (route or address), or ENODEV.
    /// The kernel answers ESRCH for a missing route and EADDRNOTAVAIL for a
    /// missing address, so both count.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.errno(),
            Some(
                nix::libc::ENOENT | nix::libc::ESRCH | nix::libc::ENODEV | nix::libc::EADDRNOTAVAIL
            )
        )
    }

    /// For [`NetlinkError::Timeout`]: the last observed state.
    pub fn last_state(&self) -> Option<&str> {
        match self {
            NetlinkError::Timeout { state, .. } => Some(state),
            _ => None,
        }
    }
}
