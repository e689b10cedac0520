//! Release builds abort on a panic (the workspace's `panic = "abort"`), so no `Drop` runs:
//! a benchmark that fails must still delete its network namespaces and stop its stub API
//! server, or they outlive it (a failed run once left its namespace behind).

use std::process::Command;

/// On a panic, before the abort: `ip netns del` each of `namespaces` (absent ones too),
/// then SIGKILL to the stub `stub` (a pid).
pub fn clean_up(namespaces: Vec<String>, stub: u32) {
    let before = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        before(info);
        for ns in &namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        if let Ok(pid) = i32::try_from(stub) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }));
}
