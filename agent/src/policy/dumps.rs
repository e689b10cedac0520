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
pub type Dump = Arc<dyn Fn() -> Result<Vec<CtEntry>, NodeNetError> + Send + Sync>;

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
    use std::sync::mpsc::{Receiver, Sender, channel};
    use std::time::Duration;

    /// A dump thread whose dumps say when they begin (`begun`) and end when `go` says.
    fn blocking() -> (Arc<Dumps>, Receiver<()>, Sender<()>) {
        let (begun_tx, begun) = channel();
        let (go, go_rx) = channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let dump: Dump = Arc::new(move || {
            begun_tx.send(()).unwrap();
            go_rx.lock().unwrap().recv().unwrap();
            Ok(vec![])
        });
        let dumps = start(dump, Arc::new(Inbox::default())).unwrap();
        (dumps, begun, go)
    }

    const WAIT: Duration = Duration::from_secs(10);
    const NONE: Duration = Duration::from_millis(50);

    #[test]
    fn a_request_during_a_dump_gets_a_dump_of_its_own_after_it() {
        let (dumps, begun, go) = blocking();
        assert!(begun.recv_timeout(NONE).is_err(), "a dump nobody asked for");
        dumps.want();
        begun.recv_timeout(WAIT).expect("the first dump");
        // Two requests while it runs: one more dump, begun after the first ended.
        dumps.want();
        dumps.want();
        assert!(
            begun.recv_timeout(NONE).is_err(),
            "began before the first ended"
        );
        go.send(()).unwrap();
        begun
            .recv_timeout(WAIT)
            .expect("the dump of the later requests");
        go.send(()).unwrap();
        assert!(begun.recv_timeout(NONE).is_err(), "a third dump");
    }
}
