//! Errors of the nf_tables layer: what was being done, the kernel's errno, and for a
//! kernel without the needed nf_tables support, which part is missing.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// No `NETLINK_NETFILTER` socket: the kernel lacks nfnetlink or refused us.
    #[error("open a netfilter netlink socket: {source}{}", missing_nfnetlink(.source))]
    Socket { source: io::Error },
    /// The kernel refused the batch itself: it has no nf_tables subsystem.
    #[error(
        "nf_tables batch refused: {source}: this kernel has no nf_tables \
         (CONFIG_NF_TABLES, module nf_tables)"
    )]
    NoNfTables { source: io::Error },
    /// The kernel refused one message (or a socket call failed).
    #[error("{op}: {source}{}", needs_hint(.source, .needs))]
    Os {
        op: String,
        source: io::Error,
        /// Kernel features the operation needs, named when the kernel says it lacks one.
        needs: &'static str,
    },
    /// The kernel answered with something we could not use.
    #[error("{op}: {detail}")]
    Unexpected { op: String, detail: String },
}

fn missing_nfnetlink(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(nix::libc::EPROTONOSUPPORT) {
        " (this kernel has no nfnetlink: CONFIG_NETFILTER_NETLINK, module nfnetlink)"
    } else {
        ""
    }
}

fn needs_hint(e: &io::Error, needs: &str) -> String {
    if e.raw_os_error() == Some(nix::libc::ENFILE) {
        return " (a set made with room for fewer elements is full)".into();
    }
    let missing = matches!(
        e.raw_os_error(),
        Some(nix::libc::ENOENT | nix::libc::EOPNOTSUPP | nix::libc::EAFNOSUPPORT)
    );
    if missing && !needs.is_empty() {
        format!(" (does the kernel have {needs}?)")
    } else {
        String::new()
    }
}

impl NftError {
    pub(crate) fn socket(source: io::Error) -> Self {
        NftError::Socket { source }
    }

    pub(crate) fn io(op: impl Into<String>, source: io::Error) -> Self {
        NftError::Os {
            op: op.into(),
            source,
            needs: "",
        }
    }

    pub(crate) fn os(op: impl Into<String>, errno: i32, needs: &'static str) -> Self {
        NftError::Os {
            op: op.into(),
            source: io::Error::from_raw_os_error(errno),
            needs,
        }
    }

    pub(crate) fn batch(errno: i32) -> Self {
        NftError::NoNfTables {
            source: io::Error::from_raw_os_error(errno),
        }
    }

    pub(crate) fn unexpected(op: impl Into<String>, detail: impl Into<String>) -> Self {
        NftError::Unexpected {
            op: op.into(),
            detail: detail.into(),
        }
    }

    /// The positive errno, when the kernel refused.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NftError::Socket { source }
            | NftError::NoNfTables { source }
            | NftError::Os { source, .. } => source.raw_os_error(),
            NftError::Unexpected { .. } => None,
        }
    }

    /// ENOENT: the table, chain or set asked for does not exist.
    pub fn is_not_found(&self) -> bool {
        self.errno() == Some(nix::libc::ENOENT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_kernel_feature_is_named() {
        let e = NftError::os(
            "add chain inet cni-rs postrouting",
            nix::libc::ENOENT,
            "nft_chain_nat",
        );
        assert_eq!(
            e.to_string(),
            "add chain inet cni-rs postrouting: No such file or directory (os error 2) \
             (does the kernel have nft_chain_nat?)"
        );
        assert!(e.is_not_found());
        let e = NftError::batch(nix::libc::EOPNOTSUPP);
        assert!(
            e.to_string()
                .contains("this kernel has no nf_tables (CONFIG_NF_TABLES")
        );
        let e = NftError::socket(io::Error::from_raw_os_error(nix::libc::EPROTONOSUPPORT));
        assert!(e.to_string().contains("CONFIG_NETFILTER_NETLINK"));
    }
}
