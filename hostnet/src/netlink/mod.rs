//! Netlink access (rtnetlink). Owned by the netlink work.
