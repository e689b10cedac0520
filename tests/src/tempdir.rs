//! A temporary directory removed on drop: the one libcni's own tests use.

pub use libcni::testutil::TempDir;
