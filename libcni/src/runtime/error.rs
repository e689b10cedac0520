//! Errors of the list operations, with Go libcni's messages. The CNI error a plugin
//! returned stays reachable ([`RuntimeError::cni_error`]) so a caller sees its code.

use super::cache::CacheError;
use super::conf::ConfError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Conf(#[from] ConfError),
    /// A plugin's (or a pre-exec validation's) error, as is: STATUS and CHECK return these
    /// unwrapped, like Go.
    #[error("{0}")]
    Cni(#[from] crate::Error),
    /// Go: `plugin type="bridge" failed (add): <error>`.
    #[error("plugin {plugin} failed ({verb}): {source}")]
    Plugin {
        plugin: String,
        verb: &'static str,
        source: crate::Error,
    },
    #[error("configuration version {0:?} does not support the CHECK command")]
    CheckNotSupported(String),
    /// The ADD was undone (the list's DEL); `undo` is that DEL's failure, if any.
    #[error("failed to set network {network:?} cached result: {source}{}", undo_note(.undo))]
    CacheWrite {
        network: String,
        source: CacheError,
        undo: Option<Box<RuntimeError>>,
    },
    #[error("failed to get network {network:?} cached result: {source}")]
    CacheRead { network: String, source: CacheError },
    #[error("failed to delete stale attachment {container_id} {ifname}: {source}")]
    GcStale {
        container_id: String,
        ifname: String,
        source: Box<RuntimeError>,
    },
    #[error("failed to GC plugin {plugin}: {source}")]
    GcPlugin {
        plugin: String,
        source: crate::Error,
    },
    #[error("failed to list cached attachments in {dir}: {source}")]
    GcList { dir: String, source: std::io::Error },
    /// Every error of one operation that carries on after errors (GC), one per line like
    /// Go's `errors.Join`.
    #[error("{}", join(.0, "\n"))]
    Many(Vec<RuntimeError>),
    /// ValidateNetworkList's aggregate, formatted like Go's `fmt.Errorf("%v", errs)`.
    #[error("[{}]", join(.0, " "))]
    Validate(Vec<RuntimeError>),
    #[error("plugin {plugin} does not support config version {version:?}")]
    UnsupportedVersion { plugin: String, version: String },
}

fn undo_note(undo: &Option<Box<RuntimeError>>) -> String {
    match undo {
        None => String::new(),
        Some(e) => format!(" (undoing the ADD failed too: {e})"),
    }
}

fn join(errs: &[RuntimeError], sep: &str) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(sep)
}

impl RuntimeError {
    /// The CNI error behind this one (the first, for an aggregate), if a plugin returned one.
    pub fn cni_error(&self) -> Option<&crate::Error> {
        match self {
            RuntimeError::Cni(e)
            | RuntimeError::Plugin { source: e, .. }
            | RuntimeError::GcPlugin { source: e, .. } => Some(e),
            RuntimeError::GcStale { source, .. } => source.cni_error(),
            RuntimeError::Many(errs) | RuntimeError::Validate(errs) => {
                errs.iter().find_map(RuntimeError::cni_error)
            }
            _ => None,
        }
    }
}
