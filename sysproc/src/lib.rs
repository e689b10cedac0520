//! The system helpers beneath both the protocol (`libcni`) and the kernel work
//! (`hostnet`): how a plugin process enters network namespaces ([`netns`]), runs steps at
//! once ([`task`]), ties the children it starts to itself ([`tie`]), marks its steps for
//! timings and fault injection ([`step`]), and quotes as Go does in messages ([`goquote`]).

// No unsafe code but the `allow`ed: the pre_exec hook that ties a child to its caller
// (`tie.rs`).
#![deny(unsafe_code)]

pub mod goquote;
pub mod netns;
pub mod step;
pub mod task;
pub mod tie;

/// One line on stderr (a plugin's stdout carries only its result or error JSON).
macro_rules! log {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use log;
