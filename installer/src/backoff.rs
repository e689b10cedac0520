//! Retry delays: 1 s doubling up to a maximum, each drawn between half and all of it so
//! that thousands of agents that lost the API server together do not return together.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(max: Duration) -> Backoff {
        Backoff {
            next: Duration::from_secs(1).min(max),
            max,
        }
    }

    /// The delay before the next attempt (jittered), and doubles the one after.
    pub fn take(&mut self) -> Duration {
        let d = self.next;
        self.next = (d * 2).min(self.max);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |t| t.subsec_nanos());
        d / 2 + d.mul_f64(f64::from(nanos % 1000) / 2000.0)
    }

    /// The delays without jitter (`--once`'s wait for a podCIDR).
    pub fn take_exact(&mut self) -> Duration {
        let d = self.next;
        self.next = (d * 2).min(self.max);
        d
    }

    pub fn reset(&mut self) {
        self.next = Duration::from_secs(1).min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_maximum_within_jitter() {
        let mut b = Backoff::new(Duration::from_secs(8));
        for want in [1, 2, 4, 8, 8] {
            let d = b.take();
            let want = Duration::from_secs(want);
            assert!(d >= want / 2 && d <= want, "{d:?} for {want:?}");
        }
        b.reset();
        assert_eq!(b.take_exact(), Duration::from_secs(1));
    }
}
