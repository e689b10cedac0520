//! The one CNI error type: what a plugin prints on failure and what the runtime
//! side decodes from a plugin's stdout.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Well-known CNI error codes (spec section "Error", plus Go's 8 and 999).
pub mod code {
    pub const INCOMPATIBLE_CNI_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENVIRONMENT_VARIABLES: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODING_FAILURE: u32 = 6;
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    pub const INVALID_NETNS: u32 = 8;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    pub const LIMITED_CONNECTIVITY: u32 = 51;
    pub const INTERNAL: u32 = 999;
}

/// A CNI error as it travels on the wire: `{"code":N,"msg":"..","details":".."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    #[serde(default)]
    pub code: u32,
    #[serde(default)]
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl Error {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Anything that is not a typed CNI error (Go skel wraps those as 999).
    pub fn internal(msg: impl fmt::Display) -> Self {
        Error::new(code::INTERNAL, msg.to_string())
    }

    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Error::new(code::INVALID_NETWORK_CONFIG, msg)
    }

    pub fn decoding(msg: impl Into<String>) -> Self {
        Error::new(code::DECODING_FAILURE, msg)
    }

    pub fn invalid_env(msg: impl Into<String>) -> Self {
        Error::new(code::INVALID_ENVIRONMENT_VARIABLES, msg)
    }

    /// The JSON a plugin prints on stdout, pretty-printed with 4 spaces like Go's skel.
    pub fn to_json(&self) -> String {
        crate::types::to_pretty_json(self)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Same as Go types.Error.Error(): "msg; details" when details are present.
        if self.details.is_empty() {
            f.write_str(&self.msg)
        } else {
            write!(f, "{}; {}", self.msg, self.details)
        }
    }
}

impl std::error::Error for Error {}

impl From<sysproc::step::Injected> for Error {
    fn from(e: sysproc::step::Injected) -> Error {
        Error::internal(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_omits_empty_details_and_has_no_version() {
        let e = Error::new(7, "missing network name");
        assert_eq!(
            e.to_json(),
            "{\n    \"code\": 7,\n    \"msg\": \"missing network name\"\n}"
        );
        let e = e.with_details("x");
        assert!(e.to_json().contains("\"details\": \"x\""));
        assert_eq!(e.to_string(), "missing network name; x");
    }

    #[test]
    fn decodes_error_json() {
        let e: Error = serde_json::from_str(r#"{"code":50,"msg":"no IPs","details":"d"}"#).unwrap();
        assert_eq!(e, Error::new(50, "no IPs").with_details("d"));
    }
}
