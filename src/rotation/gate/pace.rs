//! The budget of the requests a gate fans out, one per pod or node: the pokes after each step
//! and the node Lease reads at each look (`push.rs`). Without one, a rotation of 1,000 pods
//! sends 1,000 PATCHes at once, three times, from a CronJob; API Priority and Fairness (APF)
//! would queue them or answer 429.
//!
//! The budget (docs/api-requests.md, "Pokes at scale", has the arithmetic):
//! - at most [`IN_FLIGHT`] requests in flight: certgen occupies at most that many of its
//!   priority level's seats, and, since APF queues only what exceeds a flow's seats, never has
//!   more than that many requests queued: it cannot fill even one of the 50-deep queues of the
//!   default `workload-low` and `global-default` levels on its own;
//! - at most [`PER_SECOND`] requests started per second, evenly paced (no burst);
//! - after a 429, nothing new starts before its Retry-After has passed
//!   ([`crate::api_requests::quiet_until`], and [`Pacer::quiet`] for a poke still throttled after
//!   the client's retries).
//!
//! [`Pacer::run`] is the one driver: a fixed number of requests in flight
//! (`buffer_unordered`), each started at its paced slot.

use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

/// At most this many of a gate's requests in flight at once.
pub const IN_FLIGHT: usize = 8;

/// At most this many of a gate's requests started per second.
pub const PER_SECOND: u32 = 100;

/// Test hook (cargo feature `test-hooks`): the number of requests in flight instead of
/// [`IN_FLIGHT`].
#[cfg(feature = "test-hooks")]
pub const IN_FLIGHT_ENV: &str = "CERTGEN_TEST_POKES_IN_FLIGHT";

/// Test hook (cargo feature `test-hooks`): the requests per second instead of [`PER_SECOND`].
#[cfg(feature = "test-hooks")]
pub const PER_SECOND_ENV: &str = "CERTGEN_TEST_POKES_PER_SECOND";

/// Paces a gate's requests: at most `in_flight` at once, one start per `interval`, none during
/// the quiet a 429 asked for.
#[derive(Debug)]
pub struct Pacer {
    in_flight: usize,
    interval: Duration,
    /// The earliest start of the next request.
    next: Mutex<Instant>,
}

impl Default for Pacer {
    fn default() -> Self {
        #[cfg(feature = "test-hooks")]
        {
            let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
            Self::new(
                var(IN_FLIGHT_ENV).map_or(IN_FLIGHT, |n| n as usize),
                var(PER_SECOND_ENV).unwrap_or(PER_SECOND),
            )
        }
        #[cfg(not(feature = "test-hooks"))]
        Self::new(IN_FLIGHT, PER_SECOND)
    }
}

impl Pacer {
    /// The budget for `per_second` requests a second (`--poke-rate`; `None`: [`PER_SECOND`]):
    /// [`IN_FLIGHT`] in flight per [`PER_SECOND`] (rounded up), so that a request taking up to
    /// `IN_FLIGHT / PER_SECOND` seconds (80 ms) still starts at its slot; certgen then holds at most
    /// that many of its priority level's seats (docs/api-requests.md).
    pub fn for_rate(per_second: Option<std::num::NonZeroU32>) -> Self {
        // The test hooks, which `Default` reads, win over the flag.
        #[cfg(feature = "test-hooks")]
        if std::env::var_os(IN_FLIGHT_ENV).is_some() || std::env::var_os(PER_SECOND_ENV).is_some() {
            return Self::default();
        }
        let Some(rate) = per_second.map(std::num::NonZeroU32::get) else {
            return Self::default();
        };
        Self::new(
            (rate as usize * IN_FLIGHT).div_ceil(PER_SECOND as usize),
            rate,
        )
    }

    /// At most `in_flight` requests at once (at least 1), `per_second` started per second (at
    /// least 1).
    pub fn new(in_flight: usize, per_second: u32) -> Self {
        Self {
            in_flight: in_flight.max(1),
            interval: Duration::from_secs(1) / per_second.max(1),
            next: Mutex::new(Instant::now()),
        }
    }

    /// Nothing new starts for `wait` from now (a 429's Retry-After).
    pub fn quiet(&self, wait: Duration) {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        *next = (*next).max(Instant::now() + wait);
    }

    /// Waits for the next request's turn: its paced slot, and past any quiet a 429 asked for.
    async fn slot(&self) {
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let at = (*next).max(Instant::now());
            *next = at + self.interval;
            at
        };
        tokio::time::sleep_until(at).await;
        // A 429 answered meanwhile, to any request of this process.
        if let Some(quiet) = crate::api_requests::quiet_until() {
            tokio::time::sleep_until(Instant::from_std(quiet)).await;
        }
    }

    /// Runs `f` over every item, at most `in_flight` at once, each started at its slot: the
    /// answers in the items' order, each with the instant it came.
    pub async fn run<'a, T, R, F, Fut>(&self, items: &'a [T], f: F) -> Vec<(R, Instant)>
    where
        F: Fn(&'a T) -> Fut,
        Fut: Future<Output = R>,
    {
        let f = &f;
        let mut answers: Vec<(usize, R, Instant)> = futures::stream::iter(items.iter().enumerate())
            .map(|(i, item)| async move {
                self.slot().await;
                let r = f(item).await;
                (i, r, Instant::now())
            })
            .buffer_unordered(self.in_flight)
            .collect()
            .await;
        answers.sort_by_key(|(i, _, _)| *i);
        answers.into_iter().map(|(_, r, at)| (r, at)).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Runs 40 requests that each take 50 ms, counting how many are in flight at once and when
    /// each started.
    async fn forty(pacer: &Pacer) -> (usize, Vec<Instant>, Vec<(usize, Instant)>) {
        let now = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let starts = Mutex::new(Vec::new());
        let items: Vec<usize> = (0..40).collect();
        let answers = pacer
            .run(&items, |i| {
                let (now, peak, starts) = (&now, &peak, &starts);
                async move {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    starts.lock().unwrap().push(Instant::now());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    *i
                }
            })
            .await;
        let mut starts = starts.into_inner().unwrap();
        starts.sort();
        (peak.load(Ordering::SeqCst), starts, answers)
    }

    #[tokio::test(start_paused = true)]
    async fn requests_are_bounded_in_flight_and_paced() {
        let t0 = Instant::now();
        let (peak, starts, answers) = forty(&Pacer::new(4, 100)).await;
        assert_eq!(peak, 4, "in flight at once");
        // In the items' order, whatever order they came back in.
        assert_eq!(
            answers.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..40).collect::<Vec<_>>()
        );
        // No two starts closer than 10 ms (100/s); 4 in flight of 50 ms each: the 40th starts
        // once 36 are done, 9 rounds of 50 ms.
        for w in starts.windows(2) {
            assert!(w[1] - w[0] >= Duration::from_millis(10), "{starts:?}");
        }
        assert!(starts[39] - t0 >= Duration::from_millis(450), "{starts:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_bounds_fast_requests_and_a_quiet_holds_every_start() {
        // 1,000 in flight allowed, 20/s: 40 starts take 1.95 s at least.
        let pacer = Pacer::new(1000, 20);
        let t0 = Instant::now();
        let (_, starts, _) = forty(&pacer).await;
        assert!(starts[39] - t0 >= Duration::from_millis(1950), "{starts:?}");
        // A 429 asked for 3 s: nothing starts before.
        pacer.quiet(Duration::from_secs(3));
        let t1 = Instant::now();
        let (_, starts, _) = forty(&pacer).await;
        assert!(starts[0] - t1 >= Duration::from_secs(3), "{starts:?}");
    }

    #[test]
    fn a_poke_rate_scales_the_requests_in_flight_with_it() {
        let budget = |rate: Option<u32>| {
            let p = Pacer::for_rate(rate.and_then(std::num::NonZeroU32::new));
            (p.in_flight, p.interval)
        };
        assert_eq!(budget(None), (IN_FLIGHT, Duration::from_millis(10)));
        assert_eq!(budget(Some(100)), (8, Duration::from_millis(10)));
        assert_eq!(budget(Some(250)), (20, Duration::from_millis(4)));
        assert_eq!(budget(Some(1000)), (80, Duration::from_millis(1)));
        // Never none in flight, however low.
        assert_eq!(budget(Some(1)), (1, Duration::from_secs(1)));
        assert_eq!(budget(Some(20)), (2, Duration::from_millis(50)));
    }
}
