//! Independent steps at once: [`start`] runs a step on a thread of its own within a
//! [`std::thread::scope`], or right away on the caller's thread where no thread can be
//! made (a pids limit), so a step is never skipped. A thread starts in the namespaces of
//! the thread that starts it.

use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

/// A started step; [`Started::join`] gives its result.
pub enum Started<'s, T> {
    Thread(ScopedJoinHandle<'s, T>),
    Done(T),
}

pub fn start<'s, T: Send + 's>(
    s: &'s Scope<'s, '_>,
    step: impl FnOnce() -> T + Send + 's,
) -> Started<'s, T> {
    // Whoever runs the step takes it: the new thread, or this one if spawning failed.
    let step = Arc::new(Mutex::new(Some(step)));
    let theirs = Arc::clone(&step);
    let take = |cell: &Mutex<Option<_>>| {
        let step = cell.lock().unwrap_or_else(|e| e.into_inner()).take();
        step.expect("a step runs once")
    };
    match std::thread::Builder::new().spawn_scoped(s, move || take(&theirs)()) {
        Ok(handle) => Started::Thread(handle),
        Err(_) => Started::Done(take(&step)()),
    }
}

/// Two independent steps at once: `there` (if any) on a thread of its own, as [`start`]
/// runs it, while `here` runs on the caller's thread (so a child process `here` starts is
/// tied to the caller, see `tie`); returns both results once both are done.
pub fn alongside<A, B: Send>(
    here: impl FnOnce() -> A,
    there: Option<impl FnOnce() -> B + Send>,
) -> (A, Option<B>) {
    std::thread::scope(|s| {
        let there = there.map(|step| start(s, step));
        let here = here();
        (here, there.map(Started::join))
    })
}

impl<T> Started<'_, T> {
    /// The step's result; a panic in the step goes on in the caller.
    pub fn join(self) -> T {
        match self {
            Started::Thread(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Started::Done(result) => result,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn steps_give_their_results() {
        let (a, b) = std::thread::scope(|s| {
            let a = super::start(s, || 1 + 1);
            let b = super::start(s, || "two");
            (a.join(), b.join())
        });
        assert_eq!((a, b), (2, "two"));
    }

    #[test]
    fn alongside_runs_here_on_the_caller_and_there_elsewhere() {
        let caller = std::thread::current().id();
        let (here, there) = super::alongside(
            || std::thread::current().id(),
            Some(|| std::thread::current().id()),
        );
        assert_eq!(here, caller);
        assert_ne!(there, Some(caller));
        let none: Option<fn() -> u8> = None;
        assert_eq!(super::alongside(|| 1, none), (1, None));
    }
}
