//! Why a mode ended with an error: the one error of the binary's last line.

use hostnet::node::NodeNetError;

use crate::files::FilesError;
use crate::files::atomic::FileError;
use crate::kube::api::ApiError;

/// Why a mode ended with an error (logged as `error: <this>`).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The flags, the environment or the source dir (their messages).
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The node has no podCIDRs (yet).
    #[error("{0}")]
    NoPodCidrs(String),
    #[error("gave up after --wait {wait}s: {last}")]
    GaveUp {
        wait: u64,
        #[source]
        last: Box<RunError>,
    },
    #[error("stopped by signal {0} before the node's files were in place")]
    Stopped(i32),
    #[error("{0}")]
    Kernel(#[from] NodeNetError),
}
