//! Private network namespaces for the privileged tests of every module.

use nix::sched::{CloneFlags, unshare};
use sysproc::netns::Netns;

/// Runs `f` on a fresh thread inside a new, empty network namespace; tools it
/// spawns inherit that namespace. The namespace (with every link and rule in
/// it) vanishes with the thread, so nothing leaks even when `f` panics.
pub fn in_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            unshare(CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A new network namespace, kept alive by the returned handle only.
pub fn new_netns() -> Netns {
    in_netns(|| Netns::current().expect("open own netns"))
}
