//! Turning kernel and firewall errors into CNI errors: the reference's verb phrase in
//! front, code 999 (internal) as Go's skel gives untyped errors.

use hostnet::firewall::FirewallError;
use libcni::Error;
use std::fmt::Display;

pub fn fail(context: impl Display, err: impl Display) -> Error {
    Error::internal(format!("{context}: {err}"))
}

/// A firewall failure: the tool's reason in `msg`, its whole output and script in `details`.
pub fn firewall_fail(context: impl Display, err: FirewallError) -> Error {
    let details = err.details();
    fail(context, err).with_details(details)
}

/// Adds context to any error convertible to a message.
pub trait Context<T> {
    fn context(self, what: impl Display) -> Result<T, Error>;
}

impl<T, E: Display> Context<T> for Result<T, E> {
    fn context(self, what: impl Display) -> Result<T, Error> {
        self.map_err(|e| fail(what, e))
    }
}
