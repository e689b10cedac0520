//! Errors of the firewall layer. Every failure of an external tool keeps the
//! command line, its exit status and its stderr, so a CNI error message can
//! say exactly what the kernel (via iptables/nft) refused.

use std::process::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    /// The tool could not be started (typically: not installed). The io error
    /// keeps the errno (ENOENT when the binary is missing).
    #[error("failed to run {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The tool ran and exited unsuccessfully.
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    /// The tool's output could not be understood.
    #[error("unexpected output from {command}: {reason}")]
    Parse { command: String, reason: String },
    /// A name that cannot be put into a rule safely (would break the script).
    #[error("invalid {what} {value:?} for a firewall rule")]
    InvalidName { what: &'static str, value: String },
    /// `ipMasqBackend` other than "iptables"/"nftables" (message as the Go plugin).
    #[error("unknown ipmasq backend {}", super::names::go_quote(.0))]
    UnknownBackend(String),
    /// Several backends failed (teardown/gc run both).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Multiple(Vec<FirewallError>),
}

impl FirewallError {
    /// True when the tool itself is missing (spawn failed with ENOENT).
    pub fn is_tool_missing(&self) -> bool {
        matches!(self, FirewallError::Spawn { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Collapse a list of errors: none => Ok, one => itself, more => Multiple.
    pub(crate) fn collect(mut errs: Vec<FirewallError>) -> Result<()> {
        match errs.len() {
            0 => Ok(()),
            1 => Err(errs.remove(0)),
            _ => Err(FirewallError::Multiple(errs)),
        }
    }
}

pub type Result<T> = std::result::Result<T, FirewallError>;
