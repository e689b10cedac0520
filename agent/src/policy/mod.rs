//! NetworkPolicy enforced on this node: the Pod, Namespace and NetworkPolicy watches fill
//! the [`inbox`]; [`enforce`] turns it into this node's `netpol` program and writes it
//! into the kernel through `hostnet`'s `PolicyNet`. See netpol/README.md for the
//! semantics and the table's layout.

pub mod enforce;
pub mod inbox;
