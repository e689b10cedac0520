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
    /// The tool ran and exited unsuccessfully. The message holds the tool's reason only;
    /// its whole stderr and the script it was fed are in [`FirewallError::details`].
    #[error("{command} failed ({status}): {}", reason(.stderr))]
    Failed {
        command: String,
        status: ExitStatus,
        stderr: String,
        /// What the tool read on stdin (an iptables-restore or nft script).
        script: Option<String>,
    },
    /// The tool's output could not be understood.
    #[error("unexpected output from {command}: {source}")]
    Parse {
        command: String,
        #[source]
        source: OutputError,
    },
    /// A name that cannot be put into a rule safely (would break the script).
    #[error("invalid {what} {value:?} for a firewall rule")]
    InvalidName { what: &'static str, value: String },
    /// `ipMasqBackend` other than "iptables"/"nftables" (message as the Go plugin).
    #[error("unknown ipmasq backend {}", super::names::go_quote(.0))]
    UnknownBackend(String),
    /// A fault-injection point failed (crash tests only, see `sysproc::step`).
    #[error(transparent)]
    Injected(#[from] sysproc::step::Injected),
    /// A lock file that serializes our own firewall writers could not be taken.
    #[error("{path}: {reason}")]
    Lock { path: String, reason: String },
    /// Several backends failed (teardown/gc run both).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Multiple(Vec<FirewallError>),
}

impl FirewallError {
    /// True when the tool itself is missing (spawn failed with ENOENT).
    pub fn is_tool_missing(&self) -> bool {
        matches!(self, FirewallError::Spawn { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// The long output behind the message, for the CNI error's `details`: each failed
    /// tool's whole stderr and the script it was fed. Empty when there is none.
    pub fn details(&self) -> String {
        match self {
            FirewallError::Failed {
                command,
                stderr,
                script,
                ..
            } => {
                let mut out = format!("{command}: {stderr}");
                if let Some(script) = script {
                    out.push_str(&format!("\nscript:\n{script}"));
                }
                out
            }
            FirewallError::Multiple(errs) => errs
                .iter()
                .map(FirewallError::details)
                .filter(|d| !d.is_empty())
                .collect::<Vec<_>>()
                .join("\n\n"),
            _ => String::new(),
        }
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

/// What was wrong with a tool's output.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(transparent)]
    NotUtf8(#[from] std::string::FromUtf8Error),
    #[error(transparent)]
    NotJson(#[from] serde_json::Error),
    /// Valid JSON without what a listing must have.
    #[error("{0}")]
    Missing(&'static str),
}

/// Longest reason taken from a tool's stderr into a message.
const REASON_MAX: usize = 200;

/// What a tool's stderr says went wrong, in one short line: nft's first `Error: ...` (nft
/// echoes the offending script line after it; the position in front points into the
/// script, kept in the details), else the first non-empty line (iptables-restore's
/// `iptables-restore: line 3 failed`).
fn reason(stderr: &str) -> &str {
    let line = match stderr.lines().find_map(|l| l.split_once("Error: ")) {
        Some((_, error)) => error.trim(),
        None => (stderr.lines().map(str::trim))
            .find(|l| !l.is_empty())
            .unwrap_or("no error output"),
    };
    match line.char_indices().nth(REASON_MAX) {
        Some((cut, _)) => &line[..cut],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn failed(stderr: &str, script: Option<&str>) -> FirewallError {
        FirewallError::Failed {
            command: "nft -j -f -".into(),
            status: ExitStatus::from_raw(1 << 8),
            stderr: stderr.into(),
            script: script.map(str::to_string),
        }
    }

    #[test]
    fn message_is_the_reason_and_details_hold_the_output() {
        let script = format!("{{\"nftables\": [{}]}}\n", "{\"add\": {}}, ".repeat(200));
        let e = failed(
            "internal:0:0-0: Error: Could not process rule: Operation not supported",
            Some(&script),
        );
        assert_eq!(
            e.to_string(),
            "nft -j -f - failed (exit status: 1): Could not process rule: Operation not supported"
        );
        assert_eq!(
            e.details(),
            format!(
                "nft -j -f -: internal:0:0-0: Error: Could not process rule: \
                 Operation not supported\nscript:\n{script}"
            )
        );
        // nft text scripts: the error, then the offending line and carets.
        let e = failed(
            "/dev/stdin:3:1-40: Error: No such file or directory; did you mean table 'nat'?\n\
             add rule ip nat POSTROUTING masquerade\n^^^^^^^^^^^^^^^^^^^^^^^\n",
            Some("add rule ip nat POSTROUTING masquerade\n"),
        );
        assert!(
            e.to_string()
                .ends_with("): No such file or directory; did you mean table 'nat'?")
        );
        // iptables-restore names the failing line of the script.
        let e = failed(
            "iptables-restore: line 3 failed\n",
            Some("*nat\n:CNI-x - [0:0]\n-A CNI-x -j NOPE\nCOMMIT\n"),
        );
        assert!(
            e.to_string()
                .ends_with("): iptables-restore: line 3 failed")
        );
        assert!(e.details().contains("-A CNI-x -j NOPE"));
        // A huge one-line stderr is cut (at a char boundary).
        let e = failed(&"é".repeat(5000), None);
        assert!(e.to_string().chars().count() < 300);
        assert_eq!(e.details().len(), "nft -j -f -: ".len() + 10000);
    }

    #[test]
    fn several_failures_stay_on_one_line() {
        let e = FirewallError::Multiple(vec![
            failed("iptables-restore: line 2 failed", Some("*nat\n")),
            failed("Error: nope", None),
        ]);
        assert_eq!(
            e.to_string(),
            "nft -j -f - failed (exit status: 1): iptables-restore: line 2 failed; \
             nft -j -f - failed (exit status: 1): nope"
        );
        assert_eq!(
            e.details(),
            "nft -j -f -: iptables-restore: line 2 failed\nscript:\n*nat\n\n\n\
             nft -j -f -: Error: nope"
        );
    }
}
