//! nf_tables over netlink, without the `nft` binary (the node agent's image is
//! `FROM scratch`) and without libnftnl: the few messages the node firewall needs,
//! built on a raw `NETLINK_NETFILTER` socket. No maintained, permissively licensed
//! crate does this: `rustables` is GPL-3.0, `nftnl` binds the C libnftnl.
//!
//! Changes go out as one batch ([`NfSocket::batch`]), which the kernel applies as
//! one transaction.

mod attr;
mod chains;
pub mod ctnetlink;
mod error;
mod expr;
mod objects;
mod sets;
mod socket;

pub use attr::Attrs;
pub use chains::*;
pub use error::NftError;
pub use expr::{CmpOp, Expr, META_L4PROTO, PAYLOAD_TRANSPORT, REG_1, RTN_LOCAL, concat_reg};
pub use objects::*;
pub use sets::*;
pub use socket::{Answer, Msg, NfSocket};
