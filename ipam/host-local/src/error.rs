//! The plugin's one error type, and the one place where host-local errors become CNI
//! errors: code and message (the reference's) are chosen here, nowhere else. Sources stay
//! typed underneath, so an errno is reachable until the wire message is written.

use crate::allocator::AllocError;
use crate::config::ConfigError;
use crate::range_set::RangeSet;
use crate::store::StoreError;
use libcni::error::code;
use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HostLocalError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// `resolvConf` names a file that cannot be read (checked before the store is touched).
    #[error("failed to read resolvConf {}: {source}", path.display())]
    ResolvConf {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The store directory was removed between being made and being locked.
    #[error("store directory vanished")]
    StoreVanished,
    /// CHECK: the attachment holds no address.
    #[error("host-local: Failed to find address added by container {container_id}")]
    NotFound { container_id: String },
    /// STATUS: an ADD could not succeed now.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
}

/// Why STATUS reports the plugin unavailable (code 50).
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("store cannot be used: {0}")]
    Store(#[source] StoreError),
    #[error("store directory vanished")]
    StoreVanished,
    #[error("store {} cannot be written: {source}", dir.display())]
    NotWritable {
        dir: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("no IP addresses available in range set: {0}")]
    Exhausted(RangeSet),
}

impl From<HostLocalError> for libcni::Error {
    fn from(e: HostLocalError) -> libcni::Error {
        let code = match &e {
            HostLocalError::Config(ConfigError::Args(args)) => return args.clone(),
            HostLocalError::Config(ConfigError::TooManyPerFamily(_)) => code::UNSUPPORTED_FIELD,
            HostLocalError::Config(_) | HostLocalError::ResolvConf { .. } => {
                code::INVALID_NETWORK_CONFIG
            }
            HostLocalError::Store(StoreError::Busy { .. }) => code::TRY_AGAIN_LATER,
            HostLocalError::Store(_) => code::IO_FAILURE,
            // Untyped in the reference, so 999 as Go's skel reports them.
            HostLocalError::Alloc(_)
            | HostLocalError::StoreVanished
            | HostLocalError::NotFound { .. } => code::INTERNAL,
            HostLocalError::Unavailable(_) => code::PLUGIN_NOT_AVAILABLE,
        };
        libcni::Error::new(code, e.to_string())
    }
}

/// For callers (tests, the fuzz targets) that hold one of the module errors.
impl From<ConfigError> for libcni::Error {
    fn from(e: ConfigError) -> libcni::Error {
        HostLocalError::from(e).into()
    }
}

impl From<StoreError> for libcni::Error {
    fn from(e: StoreError) -> libcni::Error {
        HostLocalError::from(e).into()
    }
}

impl From<AllocError> for libcni::Error {
    fn from(e: AllocError) -> libcni::Error {
        HostLocalError::from(e).into()
    }
}
