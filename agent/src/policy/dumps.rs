//! The conntrack dump off the enforcement loop's path. A dump walks the kernel's whole
//! conntrack hash, however few entries it holds (~25 ms at 262,144 buckets), so the loop
//! only asks for one after a change that may deny; this thread makes it on its own
//! socket and leaves the entries in the inbox, where the loop judges them against the
//! program of that moment. A request made while a dump runs gets a dump of its own
//! after it: an entry created between the two may have missed the first.

use std::sync::{Arc, Condvar, Mutex};

use hostnet::node::NodeNetError;
use netpol::conntrack::CtEntry;

use crate::policy::inbox::Inbox;

/// The conntrack dump, made on the dump thread.
pub type Dump = Box<dyn Fn() -> Result<Vec<CtEntry>, NodeNetError> + Send>;

#[derive(Default)]
pub struct Dumps {
    /// Requests made, and requests a dump has begun for.
    state: Mutex<(u64, u64)>,
    wake: Condvar,
}

impl Dumps {
    /// Asks for a dump that begins after now.
    pub fn want(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        self.wake.notify_all();
    }

    /// Waits for a request that no dump has begun for, and marks it begun.
    fn next(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.1 >= s.0 {
            s = self.wake.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.1 = s.0;
    }
}

/// Starts the dump thread (detached: it ends with the process).
pub fn start(dump: Dump, inbox: Arc<Inbox>) -> std::io::Result<Arc<Dumps>> {
    let dumps = Arc::new(Dumps::default());
    let d = dumps.clone();
    std::thread::Builder::new()
        .name("conntrack".into())
        .spawn(move || {
            loop {
                d.next();
                inbox.conntrack_dumped(dump());
            }
        })?;
    Ok(dumps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn each_request_gets_a_dump_that_begins_after_it() {
        let inbox = Arc::new(Inbox::default());
        let made = Arc::new(AtomicUsize::new(0));
        let m = made.clone();
        let dumps = start(
            Box::new(move || {
                m.fetch_add(1, Ordering::SeqCst);
                Ok(vec![])
            }),
            inbox.clone(),
        )
        .unwrap();
        dumps.want();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while made.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "no dump");
            std::thread::sleep(Duration::from_millis(1));
        }
        dumps.want();
        while made.load(Ordering::SeqCst) < 2 {
            assert!(std::time::Instant::now() < deadline, "no second dump");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Nothing asked: no more dumps.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(made.load(Ordering::SeqCst), 2);
    }
}
