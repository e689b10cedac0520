//! The firewall backends (`ipMasqBackend`, portmap's `backend`), the probes and the
//! automatic choice between them: the one place it is made, for ipMasq and portmap.

use super::error::{FirewallError, Result};
use super::exec;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

/// Whether `backend`'s tool works here.
pub(crate) fn usable(backend: Backend) -> bool {
    match backend {
        Backend::IpTables => iptables_usable(),
        Backend::NfTables => nftables_usable(),
    }
}

/// The automatic choice (Go's `SupportsIPTables`/`SupportsNFTables` order): iptables,
/// unless it is unusable and nftables usable.
pub(crate) fn automatic(usable: impl Fn(Backend) -> bool) -> Backend {
    match !usable(Backend::IpTables) && usable(Backend::NfTables) {
        true => Backend::NfTables,
        false => Backend::IpTables,
    }
}

/// Runs `op` with `backend`, or in automatic mode (`None`) with iptables, then with
/// nftables when the iptables attempt failed and [`automatic`] picks nftables. The tools
/// are probed only after a failure, so the common path costs no probe.
pub(crate) fn auto<T>(
    usable: impl Fn(Backend) -> bool,
    backend: Option<Backend>,
    mut op: impl FnMut(Backend) -> Result<T>,
) -> Result<T> {
    match backend {
        Some(b) => op(b),
        None => match op(Backend::IpTables) {
            Err(_) if automatic(usable) == Backend::NfTables => op(Backend::NfTables),
            other => other,
        },
    }
}

/// A removal's failure counts only when its backend's tool is usable here (probed only
/// then): a node without nft has no nft rules to remove.
pub(crate) fn counted(result: Result<()>, usable: impl FnOnce() -> bool) -> Result<()> {
    match result {
        Err(e) if usable() => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn denied() -> FirewallError {
        FirewallError::UnknownBackend("x".into())
    }

    /// The attempts `auto` makes on a node where `usable` holds, with iptables failing.
    fn attempts(backend: Option<Backend>, usable: &[Backend], ipt_fails: bool) -> Vec<Backend> {
        let tried = RefCell::new(Vec::new());
        let _ = auto(
            |b| usable.contains(&b),
            backend,
            |b| {
                tried.borrow_mut().push(b);
                match (b, ipt_fails) {
                    (Backend::IpTables, true) => Err(denied()),
                    _ => Ok(()),
                }
            },
        );
        tried.into_inner()
    }

    #[test]
    fn automatic_mode_tries_iptables_then_nftables_only_where_iptables_is_unusable() {
        use Backend::{IpTables as I, NfTables as N};
        assert_eq!(attempts(None, &[I, N], false), [I]);
        assert_eq!(attempts(None, &[I, N], true), [I]);
        assert_eq!(attempts(None, &[N], true), [I, N]);
        assert_eq!(attempts(None, &[], true), [I]);
        assert_eq!(attempts(Some(I), &[N], true), [I]);
        assert_eq!(attempts(Some(N), &[I], false), [N]);
        assert_eq!(automatic(|b| b == N), N);
        assert_eq!(automatic(|_| true), I);
        assert_eq!(automatic(|_| false), I);
        assert!(counted(Err(denied()), || false).is_ok());
        assert!(counted(Err(denied()), || true).is_err());
    }
}
