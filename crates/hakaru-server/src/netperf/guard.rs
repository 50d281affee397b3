//! What stands between a netperf passphrase and someone guessing it: a wrong one is closed
//! after [`FAIL_DELAY`] (at most [`MAX_DELAYED`] wait at once; more are closed at once), and
//! a client that sent `--netperf-passphrase-failures` wrong ones within [`WINDOW`] has its
//! connections closed at accept until the window ends, each counted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::limits::Client;
use crate::Ctx;

/// How long a wrong passphrase waits before its connection is closed (hakaru's own key
/// proofs wait as long).
pub(crate) const FAIL_DELAY: Duration = Duration::from_secs(1);
/// Wrong passphrases waiting out [`FAIL_DELAY`] at once, server-wide; more are closed at once
/// (they still count against their client's budget).
pub(crate) const MAX_DELAYED: usize = 64;
/// The window a client's failures are counted over.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Clients whose failures are remembered; past it, windows that have ended are forgotten
/// first, then new clients are not recorded (they are still delayed).
const MAX_CLIENTS: usize = 4096;

/// Failed passphrases by client, and those waiting out their delay.
#[derive(Debug, Default)]
pub(crate) struct Guards {
    failures: Mutex<HashMap<Client, (Instant, u32)>>,
    delayed: AtomicUsize,
}

impl Guards {
    /// The failures `client` has sent in its current window, when it has reached `budget`.
    pub(crate) fn over_budget(&self, client: Client, budget: u32, now: Instant) -> Option<u32> {
        let m = self.failures.lock().ok()?;
        let &(since, n) = m.get(&client)?;
        (now.saturating_duration_since(since) < WINDOW && n >= budget).then_some(n)
    }

    /// Counts one failure of `client`; the count in its window.
    fn record(&self, client: Client, now: Instant) -> u32 {
        let Ok(mut m) = self.failures.lock() else {
            return 0;
        };
        if m.len() >= MAX_CLIENTS && !m.contains_key(&client) {
            m.retain(|_, (since, _)| now.saturating_duration_since(*since) < WINDOW);
            if m.len() >= MAX_CLIENTS {
                return 0;
            }
        }
        let e = m.entry(client).or_insert((now, 0));
        if now.saturating_duration_since(e.0) >= WINDOW {
            *e = (now, 0);
        }
        e.1 = e.1.saturating_add(1);
        e.1
    }

    /// A wrong passphrase from `peer`: counted, logged (one line a second), and its
    /// connection held [`FAIL_DELAY`] before it is closed, unless [`MAX_DELAYED`] already
    /// wait or the client has used its budget.
    pub(crate) fn failed(&self, ctx: &Ctx, peer: SocketAddr, why: &str) {
        let client = ctx.cfg.limits.client_of(peer.ip());
        let budget = ctx.cfg.netperf.passphrase_failures;
        let n = self.record(client, Instant::now());
        ctx.metrics.refused("auth");
        ctx.log.warn("auth", || {
            format!(
                "netperf: {why} from {peer} (failure {n} of {budget} a minute allowed from {client}; --netperf-passphrase-failures)"
            )
        });
        // Connections accepted before the budget was used up: closed at once.
        if n > budget {
            return;
        }
        let waiting = self.delayed.fetch_add(1, Ordering::AcqRel);
        if waiting < MAX_DELAYED {
            let until = Instant::now() + FAIL_DELAY;
            // Bounded by FAIL_DELAY; the shutdown flag cuts it short.
            while !ctx.shutdown.load(Ordering::Acquire) {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(Duration::from_millis(100)));
            }
        }
        self.delayed.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;

    #[test]
    fn failures_count_per_client_over_a_window() {
        let g = Guards::default();
        let l = Limits::default();
        let a = l.client_of("10.0.0.1".parse().unwrap());
        let b = l.client_of("10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for i in 1..=3 {
            assert_eq!(g.over_budget(a, 3, t0), None);
            assert_eq!(g.record(a, t0), i);
        }
        assert_eq!(g.over_budget(a, 3, t0 + Duration::from_secs(59)), Some(3));
        assert_eq!(g.over_budget(b, 3, t0), None);
        // The window ends: a fresh budget.
        assert_eq!(g.over_budget(a, 3, t0 + WINDOW), None);
        assert_eq!(g.record(a, t0 + WINDOW), 1);
    }

    #[test]
    fn the_table_of_clients_is_bounded() {
        let g = Guards::default();
        let l = Limits::default();
        let t0 = Instant::now();
        for i in 0..MAX_CLIENTS as u32 {
            g.record(l.client_of(std::net::Ipv4Addr::from(i).into()), t0);
        }
        let new = l.client_of("203.0.113.9".parse().unwrap());
        assert_eq!(g.record(new, t0), 0, "full: not recorded");
        // Once the others' windows end, they make room.
        assert_eq!(g.record(new, t0 + WINDOW), 1);
        assert_eq!(g.failures.lock().unwrap().len(), 1);
    }
}
