//! A temporary directory removed on drop: the one every crate's unit tests use.

pub use testkit::TempDir;
