//! The portmap plugin's one error type; the CNI code, message and details are made in one
//! place (`impl From<PortmapError> for libcni::Error`).

use hostnet::firewall::FirewallError;
use hostnet::firewall::portmap::LocalnetError;
use libcni::error::code;

#[derive(Debug, thiserror::Error)]
pub enum PortmapError {
    /// A CNI error from elsewhere (config, prevResult, result conversion), code kept.
    #[error(transparent)]
    Cni(#[from] libcni::Error),
    /// A firewall tool failed (or refused a name or condition the config gave).
    #[error("{op}: {source}")]
    Firewall {
        op: &'static str,
        #[source]
        source: FirewallError,
    },
    #[error(transparent)]
    Localnet(#[from] LocalnetError),
    /// CHECK: the attachment's rules are not all there.
    #[error("missing port mapping rules for container {container_id:?} ({backend})")]
    Missing {
        container_id: String,
        backend: &'static str,
    },
    /// STATUS: the backend's tool does not work on this node (code 50).
    #[error("{0} is not usable on this node")]
    Unavailable(&'static str),
}

/// Puts a firewall failure in context.
pub fn firewall(op: &'static str) -> impl FnOnce(FirewallError) -> PortmapError {
    move |source| PortmapError::Firewall { op, source }
}

impl From<PortmapError> for libcni::Error {
    fn from(e: PortmapError) -> libcni::Error {
        let msg = e.to_string();
        match e {
            PortmapError::Cni(e) => e,
            PortmapError::Firewall {
                source: source @ FirewallError::InvalidName { .. },
                ..
            } => {
                libcni::Error::new(code::INVALID_NETWORK_CONFIG, msg).with_details(source.details())
            }
            PortmapError::Firewall { source, .. } => {
                libcni::Error::new(code::INTERNAL, msg).with_details(source.details())
            }
            PortmapError::Unavailable(_) => libcni::Error::new(code::PLUGIN_NOT_AVAILABLE, msg),
            PortmapError::Localnet(_) | PortmapError::Missing { .. } => {
                libcni::Error::new(code::INTERNAL, msg)
            }
        }
    }
}
