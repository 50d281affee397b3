//! The pinger's watchdog: ends blocked TCP receives that have no timeout.
//!
//! A closed-loop TCP flow waits for each reply in a blocking receive with no timeout where the
//! platform allows it ([`crate::sys::SHUTDOWN_WAKES_BLOCKED_RECV`]), so no kernel timer is armed
//! per round trip. Then nothing inside the wait can see a stop (Ctrl-C, the session's end) or a
//! reply that never comes. One thread per pinger looks, a few times per `--timeout` (at most
//! every 50 ms), at what each flow waits for, and shuts the receive side of a flow that must
//! stop waiting: the receive returns 0, and the flow, seeing [`Watch::was_cut`], ends or
//! reports the missing reply as it would after a timed-out receive.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::Shared;

/// What one flow shows the watchdog; on cache lines of its own, written twice per round trip
/// by the flow's thread only.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// Nanoseconds since the pinger started at which the request now waited for was sent,
    /// plus one; 0 while no reply is awaited.
    since: AtomicU64,
    /// The watchdog shut this flow's receive side.
    cut: AtomicBool,
}

impl Watch {
    /// The flow now waits for the reply to a request sent at `sent_ns`.
    pub(super) fn waiting(&self, sent_ns: u64) {
        self.since.store(sent_ns + 1, Ordering::Relaxed);
    }

    /// The reply came (or was given up on).
    pub(super) fn answered(&self) {
        self.since.store(0, Ordering::Relaxed);
    }

    /// True once the watchdog has ended this flow's waits.
    pub(super) fn was_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

/// The flows the watchdog may cut: their slot and a second handle on their socket.
#[derive(Debug, Default)]
pub(super) struct Cutters(Vec<(usize, TcpStream)>);

impl Cutters {
    pub(super) fn add(&mut self, slot: usize, sock: TcpStream) {
        self.0.push((slot, sock));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Runs until every flow has ended: cuts each flow's wait on a stop, or once its request
    /// has waited longer than the timeout.
    pub(super) fn watch(mut self, s: &Shared) {
        let timeout_ns = s.cfg.timeout.as_nanos() as u64;
        let period = (s.cfg.timeout / 4).clamp(Duration::from_millis(1), Duration::from_millis(50));
        while s.left.load(Ordering::Acquire) > 0 {
            std::thread::sleep(period);
            let stop = s.stop.load(Ordering::Acquire);
            let now_ns = s.start.elapsed().as_nanos() as u64;
            self.0.retain(|(slot, sock)| {
                let Some(w) = s.watch.get(*slot) else {
                    return false;
                };
                let since = w.since.load(Ordering::Relaxed);
                let overdue = since != 0 && now_ns.saturating_sub(since - 1) > timeout_ns;
                if !(stop || overdue) {
                    return true;
                }
                w.cut.store(true, Ordering::Release);
                let _ = sock.shutdown(Shutdown::Read);
                false
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_waits_only_between_its_request_and_the_answer() {
        let w = Watch::default();
        assert_eq!(w.since.load(Ordering::Relaxed), 0);
        // A request sent at 0 ns still counts as waiting.
        w.waiting(0);
        assert_eq!(w.since.load(Ordering::Relaxed), 1);
        w.answered();
        assert_eq!(w.since.load(Ordering::Relaxed), 0);
        assert!(!w.was_cut());
    }
}
