//! Named step points: the plugins call `step::point("bridge.veth-created")?` after each
//! step of ADD and DEL. A point has two uses:
//!
//! - **Timings**, always available: with `CNI_RS_TIMINGS=1` each point logs
//!   `timing: <verb>.<point> <ms>` on stderr, the milliseconds since the previous point of
//!   this process (or since [`start`], which `skel::plugin_main` calls first); [`finish`]
//!   logs `<verb>.<program>.total`. The variable is read once; unset, a point costs one
//!   load of a cached flag. `scripts/timings.sh` collects these over many runs.
//! - **Fault injection** for the crash tests (`tests/tests/crash_matrix.rs`), only in
//!   builds with the `fault-injection` feature (no release or normal build enables it).
//!   `CNI_RS_FAULT=<verb>.<point>:<action>` selects one point for the verb in `CNI_COMMAND`
//!   (lowercase), e.g. `add.bridge.veth-created:kill` or `del.host-local.lease-removed:fail`.
//!   The variable reaches the IPAM plugin the bridge runs (it inherits the environment).
//!   - `kill`: the process SIGKILLs itself there, as a node crash or an OOM kill would.
//!   - `fail`: the step returns an error there, as a kernel refusal would.
//!
//!   Either way the point first says so on stderr and, when `CNI_RS_FAULT_LOG` names a
//!   file, appends `<verb>.<point>` to it: a test can tell a fault that was injected from a
//!   step name that matched nothing (a plugin's stderr is not always shown).

use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The error a `fail` point returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected(pub String);

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "injected fault at {}", self.0)
    }
}

impl std::error::Error for Injected {}

/// Starts the timing clock (the process start, as far as timings go).
pub fn start() {
    timings();
}

/// Logs the whole run's time since [`start`] (`<verb>.<program>.total`) when timings are on.
pub fn finish() {
    if let Some(clock) = timings() {
        let ms = clock.start.elapsed().as_secs_f64() * 1000.0;
        let program = std::env::args_os()
            .next()
            .map(std::path::PathBuf::from)
            .and_then(|p| Some(p.file_name()?.to_string_lossy().into_owned()))
            .unwrap_or_default();
        crate::log!("timing: {}.{program}.total {ms:.2}", clock.verb);
    }
}

/// A point after a step of the current verb; see the module docs.
#[inline]
pub fn point(name: &str) -> Result<(), Injected> {
    if let Some(clock) = timings() {
        clock.lap(name);
    }
    inject(name)
}

/// The timing clock, when `CNI_RS_TIMINGS=1` (read once).
fn timings() -> Option<&'static Clock> {
    static CLOCK: OnceLock<Option<Clock>> = OnceLock::new();
    CLOCK
        .get_or_init(|| {
            (std::env::var_os("CNI_RS_TIMINGS").is_some_and(|v| v == "1")).then(|| Clock {
                start: Instant::now(),
                last: Mutex::new(Instant::now()),
                verb: verb(),
            })
        })
        .as_ref()
}

struct Clock {
    start: Instant,
    last: Mutex<Instant>,
    verb: String,
}

impl Clock {
    fn lap(&self, name: &str) {
        let now = Instant::now();
        // Points may be passed on several threads: each lap ends at the latest point.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let ms = now.saturating_duration_since(*last).as_secs_f64() * 1000.0;
        *last = now;
        drop(last);
        crate::log!("timing: {}.{name} {ms:.2}", self.verb);
    }
}

fn verb() -> String {
    std::env::var("CNI_COMMAND")
        .unwrap_or_default()
        .to_ascii_lowercase()
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
fn inject(_name: &str) -> Result<(), Injected> {
    Ok(())
}

#[cfg(feature = "fault-injection")]
fn inject(name: &str) -> Result<(), Injected> {
    let Ok(spec) = std::env::var("CNI_RS_FAULT") else {
        return Ok(());
    };
    let here = format!("{}.{name}", verb());
    match spec.rsplit_once(':') {
        Some((step, action)) if step == here => {
            crate::log!("fault injected: {here} ({action})");
            if let Some(log) = std::env::var_os("CNI_RS_FAULT_LOG") {
                use std::io::Write;
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    // One write: points on two threads (both families at once) must not
                    // interleave their lines.
                    .and_then(|mut f| f.write_all(format!("{here}\n").as_bytes()));
            }
            match action {
                "kill" => {
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                    unreachable!("SIGKILL cannot be caught");
                }
                "fail" => Err(Injected(here)),
                other => panic!("CNI_RS_FAULT: unknown action {other:?} (kill or fail)"),
            }
        }
        _ => Ok(()),
    }
}
