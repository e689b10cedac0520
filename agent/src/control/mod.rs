//! The modes (`--once`, the node agent, `--uninstall`), the agent's loop over coalesced
//! events, and the signals that end them.

pub mod agent;
pub mod run;
#[allow(unsafe_code)]
pub mod signals;
