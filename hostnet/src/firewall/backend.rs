//! The ipMasq backends (`ipMasqBackend`) and the probes of the automatic choice
//! (see `super::auto`).

use super::error::{FirewallError, Result};
use super::exec;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    IpTables,
    NfTables,
}

impl Backend {
    /// Parse the config value; `None` (absent or empty) means automatic choice.
    pub fn from_config(value: Option<&str>) -> Result<Option<Backend>> {
        match value {
            None | Some("") => Ok(None),
            Some("iptables") => Ok(Some(Backend::IpTables)),
            Some("nftables") => Ok(Some(Backend::NfTables)),
            Some(other) => Err(FirewallError::UnknownBackend(other.to_string())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::IpTables => "iptables",
            Backend::NfTables => "nftables",
        }
    }
}

/// `utils.SupportsIPTables`: the `iptables` tool runs and can read `filter INPUT`.
pub(crate) fn iptables_usable() -> bool {
    exec::run(
        "iptables",
        &["-w", "-t", "filter", "-S", "INPUT", "1"],
        None,
    )
    .is_ok()
}

/// `utils.SupportsNFTables`: `nft` runs and may change the ruleset (a
/// check-only transaction, which commits nothing).
pub(crate) fn nftables_usable() -> bool {
    exec::run(
        "nft",
        &["--check", "add", "table", "ip", "supports_nftables_test"],
        None,
    )
    .is_ok()
}
