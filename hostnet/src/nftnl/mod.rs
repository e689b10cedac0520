//! nf_tables over netlink, without the `nft` binary (the node agent's image is
//! `FROM scratch`) and without libnftnl: the few messages the node firewall needs,
//! built on a raw `NETLINK_NETFILTER` socket. No maintained, permissively licensed
//! crate does this: `rustables` is GPL-3.0, `nftnl` binds the C libnftnl.
//!
//! Changes go out as one batch ([`NfSocket::batch`]), which the kernel applies as
//! one transaction.

mod attr;
mod error;
mod expr;
mod objects;
mod socket;

pub use attr::Attrs;
pub use error::NftError;
pub use expr::{CmpOp, Expr, RTN_LOCAL};
pub use objects::*;
pub use socket::{Answer, Msg, NfSocket};
