//! `--mesh-slice-every`: a short throughput test to each peer on a schedule, within a budget.
//! Probes say a path is there and how long a round trip takes; a slice says how much it
//! carries now. The agent runs an ordinary hakaru TCP test against each peer's server port
//! (the same `hakaru server` that is the peer's agent), one at a time, each capped at a rate
//! and a length, each peer at most once per period:
//!
//! - [`Schedule`]: which peer is next and when, sans-IO (tested on virtual time). Peers in
//!   turn, spread over the period; never two at once and never closer than a slice's length,
//!   so an agent sends at most `rate` for `time` out of every max(`every` / peers, `time`).
//! - [`run`]: the driver thread, following the UDP prober's peers; the test itself is the
//!   [`SliceRunner`] the binary gives (hakaru's client), so this crate stays free of it.

use std::collections::HashMap;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::connect::Shared;

/// Runs one slice: a TCP test to the address for the time at most at the rate (bit/s),
/// ended early when the flag is set (the agent stops); returns the rate received, bit/s, or
/// why it failed.
pub type SliceRunner =
    Arc<dyn Fn(SocketAddr, Duration, u64, Arc<AtomicBool>) -> Result<f64, String> + Send + Sync>;

/// How the slices run.
#[derive(Clone)]
pub struct SliceConfig {
    /// Each peer at most once per this.
    pub every: Duration,
    /// Each slice's length.
    pub time: Duration,
    /// Each slice's rate cap, bit/s.
    pub rate_bps: u64,
    /// The peers' test port (their `hakaru server -p`).
    pub port: u16,
    /// The test.
    pub runner: SliceRunner,
}

impl std::fmt::Debug for SliceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceConfig")
            .field("every", &self.every)
            .field("time", &self.time)
            .field("rate_bps", &self.rate_bps)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// Which peer's slice is due, on a clock passed in (ns).
#[derive(Debug)]
pub struct Schedule {
    order: Vec<SocketAddr>,
    cursor: usize,
    next: u64,
    every: u64,
    time: u64,
}

impl Schedule {
    /// A schedule of one slice per peer per `every`, each `time` long, starting at `now`.
    pub fn new(every: Duration, time: Duration, now: u64) -> Schedule {
        Schedule {
            order: Vec::new(),
            cursor: 0,
            next: now,
            every: ns(every),
            time: ns(time),
        }
    }

    /// The peers now (the cursor stays where it was, within the new list).
    pub fn set_peers(&mut self, peers: Vec<SocketAddr>) {
        self.order = peers;
        if self.cursor >= self.order.len() {
            self.cursor = 0;
        }
    }

    /// Time between the starts of two slices: the period shared by the peers, never less
    /// than a slice.
    pub fn slot(&self) -> u64 {
        (self.every / self.order.len().max(1) as u64).max(self.time)
    }

    /// The peer whose slice is due at `now`, if one is. The next is due a slot after `now`
    /// (not after when this one was due): a late or long slice never makes a burst.
    pub fn poll(&mut self, now: u64) -> Option<SocketAddr> {
        if self.order.is_empty() || now < self.next {
            return None;
        }
        let a = self.order[self.cursor];
        self.cursor = (self.cursor + 1) % self.order.len();
        self.next = now + self.slot();
        Some(a)
    }

    /// When the next slice is due (None with no peers).
    pub fn next(&self) -> Option<u64> {
        (!self.order.is_empty()).then_some(self.next)
    }

    /// A slice (or a wait) that ended at `now`: the next starts no sooner, so slices never
    /// overlap however long one ran.
    pub fn ended(&mut self, now: u64) {
        self.next = self.next.max(now);
    }
}

/// One peer's slices so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SliceResult {
    /// Slices run.
    pub runs: u64,
    /// Slices that failed (refused, unreachable, cut short).
    pub failed: u64,
    /// The last successful slice's received rate, bit/s.
    pub bps: Option<f64>,
    /// When the last slice ended (ns of the agent's clock).
    pub at: u64,
    /// Why the last slice failed, if it did.
    pub error: Option<String>,
}

/// The slice prober's state.
pub(crate) struct Slices {
    pub(crate) cfg: SliceConfig,
    pub(crate) results: Mutex<HashMap<SocketAddr, SliceResult>>,
    /// Slices run and failed since the start, peers gone included (counters never go down).
    pub(crate) runs: AtomicU64,
    pub(crate) failed: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The slice driver: runs until `stop` is set, which also ends a slice under way.
pub(crate) fn run(a: &Shared<'_>, s: &Slices, stop: &Arc<AtomicBool>) {
    let clock = || a.epoch.elapsed().as_nanos() as u64;
    let mut sched = Schedule::new(s.cfg.every, s.cfg.time, clock());
    // The first slice waits a random part of the period (at most a minute): a fleet's agents
    // start together, and their tests would otherwise all start at once.
    let spread = ns(s.cfg.every.min(Duration::from_secs(60))).max(1);
    let jitter = hakaru_sys::random_hex(8)
        .ok()
        .and_then(|h| u64::from_str_radix(&h, 16).ok())
        .unwrap_or(0)
        % spread;
    sched.ended(clock() + ns(s.cfg.time) + jitter);
    let mut seen = None;
    while !stop.load(Ordering::Acquire) {
        // The list is copied under the prober's lock and used after it (the prober answers
        // peers meanwhile).
        let changed = {
            let udp = lock(a.udp);
            (seen != Some(udp.generation())).then(|| udp.peers())
        };
        if let Some((peers, generation)) = changed {
            seen = Some(generation);
            let peers: Vec<SocketAddr> = peers.iter().map(|p| p.addr).collect();
            let listed: HashSet<SocketAddr> = peers.iter().copied().collect();
            lock(&s.results).retain(|k, _| listed.contains(k));
            sched.set_peers(peers);
        }
        let now = clock();
        let Some(peer) = sched.poll(now) else {
            let wait = sched.next().map_or(Duration::MAX, |n| {
                Duration::from_nanos(n.saturating_sub(now))
            });
            std::thread::sleep(wait.min(Duration::from_millis(100)));
            continue;
        };
        let target = SocketAddr::new(peer.ip(), s.cfg.port);
        let got = (s.cfg.runner)(target, s.cfg.time, s.cfg.rate_bps, Arc::clone(stop));
        s.runs.fetch_add(1, Ordering::Relaxed);
        if got.is_err() {
            s.failed.fetch_add(1, Ordering::Relaxed);
        }
        let end = clock();
        sched.ended(end);
        let mut results = lock(&s.results);
        let r = results.entry(peer).or_default();
        r.runs += 1;
        r.at = end;
        match got {
            Ok(bps) => {
                r.bps = Some(bps);
                r.error = None;
            }
            Err(e) => {
                tracing::debug!("mesh: slice to {target}: {e}");
                r.failed += 1;
                r.error = Some(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn peers(n: u8) -> Vec<SocketAddr> {
        (1..=n)
            .map(|i| SocketAddr::from(([10, 0, 0, i], 5209)))
            .collect()
    }

    #[test]
    fn peers_take_turns_spread_over_the_period() {
        let mut s = Schedule::new(Duration::from_secs(60), Duration::from_secs(1), 0);
        s.set_peers(peers(4));
        // 60 s over 4 peers: one every 15 s, in turn.
        assert_eq!(s.slot(), 15 * S);
        let mut got = Vec::new();
        let mut t = 0;
        while t <= 60 * S {
            if let Some(p) = s.poll(t) {
                got.push((t / S, p));
            }
            t += S;
        }
        let order: Vec<SocketAddr> = got.iter().map(|g| g.1).collect();
        assert_eq!(order, [peers(4), peers(1)].concat());
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            [0, 15, 30, 45, 60]
        );
    }

    #[test]
    fn slices_never_overlap_or_burst() {
        // 100 peers in 60 s would be 0.6 s apart, but a slice lasts 2 s.
        let mut s = Schedule::new(Duration::from_secs(60), Duration::from_secs(2), 0);
        s.set_peers(peers(100));
        assert_eq!(s.slot(), 2 * S);
        assert!(s.poll(0).is_some());
        assert!(s.poll(S).is_none());
        // A slice that ran long (ended at 5 s): the next no sooner than then, and after a
        // long stall only one is due, not the ones missed.
        s.ended(5 * S);
        assert!(s.poll(4 * S).is_none());
        assert!(s.poll(100 * S).is_some());
        assert!(s.poll(100 * S).is_none());
        assert_eq!(s.next(), Some(102 * S));
        // No peers: nothing due, ever.
        s.set_peers(Vec::new());
        assert_eq!((s.poll(1000 * S), s.next()), (None, None));
    }
}
