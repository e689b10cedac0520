//! Retry delays: 1 s doubling up to a maximum, each drawn between half and all of it so
//! that thousands of agents that lost the API server together do not return together.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub struct Backoff {
    next: Duration,
    max: Duration,
    rng: Jitter,
}

impl Backoff {
    pub fn new(max: Duration) -> Backoff {
        Backoff {
            next: Duration::from_secs(1).min(max),
            max,
            rng: Jitter::seeded(),
        }
    }

    /// The delay before the next attempt (jittered), and doubles the one after.
    pub fn take(&mut self) -> Duration {
        let d = self.next;
        self.next = (d * 2).min(self.max);
        d / 2 + d.mul_f64(self.rng.unit() / 2.0)
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

/// A small xorshift generator: spread, not secrecy. Seeded from the clock's nanoseconds
/// and the process id, so agents started in the same second still draw apart.
pub struct Jitter(u64);

impl Jitter {
    pub fn seeded() -> Jitter {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos() as u64);
        let local = 0u8;
        let seed = nanos ^ (u64::from(std::process::id()) << 32) ^ (&local as *const u8 as u64);
        Jitter(seed | 1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
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

    #[test]
    fn jitter_spreads_over_the_range() {
        let mut j = Jitter::seeded();
        let draws: Vec<f64> = (0..1000).map(|_| j.unit()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        // Each tenth of the range is hit: not stuck, not clustered.
        for tenth in 0..10 {
            let lo = f64::from(tenth) / 10.0;
            assert!(draws.iter().any(|u| (lo..lo + 0.1).contains(u)), "{lo}");
        }
    }
}
