//! Sysctl reads and writes.
