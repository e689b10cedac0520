//! SIGTERM/SIGINT as events: blocked at start, then awaited with a timeout wherever the
//! installer sleeps, so a stop request ends any wait at once (also as PID 1, where the
//! default action would ignore SIGTERM).

use std::time::{Duration, Instant};

pub struct Stop {
    set: libc::sigset_t,
}

impl Stop {
    /// Blocks SIGTERM and SIGINT for this (single-threaded) process.
    pub fn install() -> std::io::Result<Stop> {
        // SAFETY: sigset_t is plain data initialised by sigemptyset before use.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGINT);
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Stop { set })
        }
    }

    /// Sleeps `d`; returns the signal number if a stop request came first.
    pub fn sleep(&self, d: Duration) -> Option<i32> {
        let end = Instant::now() + d;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let ts = libc::timespec {
                tv_sec: left.as_secs().min(i32::MAX as u64) as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            // SAFETY: valid set and timespec; no siginfo wanted.
            let sig = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
            if sig > 0 {
                return Some(sig);
            }
            let err = std::io::Error::last_os_error().raw_os_error();
            if err != Some(libc::EINTR) || left.is_zero() {
                return None; // EAGAIN: the time is up
            }
        }
    }
}
