//! Fault injection for the crash tests (`tests/tests/crash_matrix.rs`): the plugins call
//! `fault::point("bridge.veth-created")?` after each step that changes the node.
//!
//! Only builds with the `fault-injection` feature have working points; no release or normal
//! build enables it, and there `point` is `Ok(())`. With the feature,
//! `CNI_RS_FAULT=<verb>.<point>:<action>` selects one point for the verb in `CNI_COMMAND`
//! (lowercase), e.g. `add.bridge.veth-created:kill` or `del.host-local.lease-removed:fail`.
//! The variable reaches the IPAM plugin the bridge runs (it inherits the environment).
//! - `kill`: the process SIGKILLs itself there, as a node crash or an OOM kill would.
//! - `fail`: the step returns an error there, as a kernel refusal would.
//!
//! Either way the point first says so on stderr and, when `CNI_RS_FAULT_LOG` names a file,
//! appends `<verb>.<point>` to it: a test can tell a fault that was injected from a step
//! name that matched nothing (a plugin's stderr is not always shown).

use std::fmt;

/// The error a `fail` point returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected(pub String);

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "injected fault at {}", self.0)
    }
}

impl std::error::Error for Injected {}

impl From<Injected> for crate::Error {
    fn from(e: Injected) -> crate::Error {
        crate::Error::internal(e)
    }
}

/// A point after a step of the current verb; see the module docs.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_name: &str) -> Result<(), Injected> {
    Ok(())
}

/// A point after a step of the current verb; see the module docs.
#[cfg(feature = "fault-injection")]
pub fn point(name: &str) -> Result<(), Injected> {
    let Ok(spec) = std::env::var("CNI_RS_FAULT") else {
        return Ok(());
    };
    let verb = std::env::var("CNI_COMMAND")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let here = format!("{verb}.{name}");
    match spec.rsplit_once(':') {
        Some((step, action)) if step == here => {
            crate::log!("fault injected: {here} ({action})");
            if let Some(log) = std::env::var_os("CNI_RS_FAULT_LOG") {
                use std::io::Write;
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .and_then(|mut f| writeln!(f, "{here}"));
            }
            match action {
                "kill" => {
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                    unreachable!("SIGKILL cannot be caught");
                }
                "fail" => Err(Injected(here)),
                other => panic!("CNI_RS_FAULT: unknown action {other:?} (kill or fail)"),
            }
        }
        _ => Ok(()),
    }
}
