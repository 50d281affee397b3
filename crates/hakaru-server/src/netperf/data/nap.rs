//! How a UDP_STREAM receiver waits once its socket is empty: a short sleep on a timer of its
//! own while datagrams keep coming, a wait on the socket once they stop.
//!
//! A receiver waiting on its socket is woken by the sender: the kernel delivers a datagram on
//! the sending CPU and, finding a waiter, wakes it there (for a halted CPU, an interprocessor
//! interrupt). A receiver that keeps up empties its queue every few datagrams and waits again,
//! so the sender pays a wake-up every few datagrams, and on a CPU of its own that is the row's
//! bound (docs/performance-notes.md, section 21). Instead, once the queue is empty the receiver
//! sleeps for as long as its receive buffer can take a quarter of its size at the rate the
//! datagrams came in the last nap, at most [`LONGEST`], then takes what came: the sender finds
//! nobody waiting and pays nothing. A nap that finds nothing, a rate too high for a nap of
//! [`SHORTEST`], or a buffer that holds fewer than [`ROOM`] datagrams of the size last taken
//! ends napping: the next wait is on the socket, as before (large datagrams cost few wake-ups
//! per byte, and a nap would risk the buffer). An idle or slow flow costs the receiver at most
//! one timer wake-up per wait on the socket.

use std::time::{Duration, Instant};

/// The first nap after a wait on the socket, before a rate is known.
pub(super) const FIRST: Duration = Duration::from_micros(10);
/// The shortest nap worth a timer: below it the receiver waits on the socket.
pub(super) const SHORTEST: Duration = Duration::from_micros(10);
/// The longest nap.
pub(super) const LONGEST: Duration = Duration::from_micros(100);
/// The fewest datagrams of the size last taken the receive buffer must hold for a nap.
pub(super) const ROOM: u64 = 8;

/// What a datagram of `len` bytes costs the receive buffer, taken generously so that the rate
/// is overestimated, never under: Linux charges the socket buffer's whole allocation, its head
/// (about 770 bytes for a 14-byte datagram) and the payload's room rounded up to a power of two
/// (a 65,507-byte datagram costs about 128 KiB).
fn cost(len: usize) -> u64 {
    2 * len as u64 + 1024
}

/// The napping state of one receive loop.
#[derive(Debug)]
pub(super) struct Nap {
    /// The socket's receive buffer, bytes (what the kernel counts against it, not payload).
    rcvbuf: u64,
    /// When the current nap began; `None` while the receiver waits on the socket.
    since: Option<Instant>,
    /// What the datagrams taken since then cost the receive buffer (estimated).
    came: u64,
    /// The size of the datagram last taken.
    last: usize,
}

impl Nap {
    pub(super) fn new(rcvbuf: u64) -> Nap {
        Nap {
            rcvbuf,
            since: None,
            came: 0,
            last: 0,
        }
    }

    /// A datagram of `len` bytes was taken.
    pub(super) fn took(&mut self, len: usize) {
        self.last = len;
        if self.since.is_some() {
            self.came = self.came.saturating_add(cost(len));
        }
    }

    /// The socket is empty at `now`: how long to sleep before looking again, or `None` to wait
    /// on the socket.
    pub(super) fn empty(&mut self, now: Instant) -> Option<Duration> {
        let since = self.since.take();
        if self.rcvbuf < ROOM * cost(self.last) {
            return None;
        }
        let next = match since {
            None => FIRST,
            Some(_) if self.came == 0 => return None,
            Some(t) => {
                let spent = now
                    .saturating_duration_since(t)
                    .max(Duration::from_micros(1));
                let per_sec = self.came as f64 / spent.as_secs_f64();
                let fill = (self.rcvbuf / 4) as f64 / per_sec;
                let d = Duration::from_secs_f64(fill.min(LONGEST.as_secs_f64()));
                if d < SHORTEST {
                    return None;
                }
                d
            }
        };
        self.since = Some(now);
        self.came = 0;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUF: u64 = 212_992;

    #[test]
    fn a_steady_flow_naps_for_a_quarter_of_the_buffer_at_its_rate() {
        let t0 = Instant::now();
        let mut n = Nap::new(BUF);
        assert_eq!(n.empty(t0), Some(FIRST), "first nap before a rate is known");
        // 10 datagrams of 1400 bytes in 50 us: (10 * 3824) / 50 us = 764.8 MB/s; a quarter of
        // the buffer (53,248 bytes) fills in 69.6 us.
        for _ in 0..10 {
            n.took(1400);
        }
        let t1 = t0 + Duration::from_micros(50);
        let d = n.empty(t1).unwrap();
        assert!(
            d > Duration::from_micros(69) && d < Duration::from_micros(70),
            "{d:?}"
        );
        // 5 of them in 50 us: a quarter would fill in 139 us: capped at LONGEST.
        for _ in 0..5 {
            n.took(1400);
        }
        assert_eq!(n.empty(t1 + Duration::from_micros(50)), Some(LONGEST));
    }

    #[test]
    fn a_nap_that_finds_nothing_goes_back_to_waiting_on_the_socket() {
        let t0 = Instant::now();
        let mut n = Nap::new(BUF);
        assert!(n.empty(t0).is_some());
        assert_eq!(n.empty(t0 + Duration::from_micros(30)), None);
        // The wait on the socket brought a datagram: napping starts again, from the first nap.
        n.took(1400);
        assert_eq!(n.empty(t0 + Duration::from_millis(5)), Some(FIRST));
    }

    #[test]
    fn a_flow_too_fast_for_the_buffer_waits_on_the_socket() {
        let t0 = Instant::now();
        let mut n = Nap::new(BUF);
        assert!(n.empty(t0).is_some());
        // 40 datagrams of 1400 bytes in 10 us: a quarter of the buffer fills in 3.5 us.
        for _ in 0..40 {
            n.took(1400);
        }
        assert_eq!(n.empty(t0 + Duration::from_micros(10)), None);
    }

    #[test]
    fn a_buffer_that_holds_few_datagrams_never_naps() {
        let t0 = Instant::now();
        // The kernel's default buffer holds fewer than ROOM of the largest datagrams.
        let mut n = Nap::new(BUF);
        n.took(65_507);
        assert_eq!(n.empty(t0), None);
        // A small buffer (netperf -S 8192: the kernel grants 16 KiB) and 1400-byte datagrams.
        let mut n = Nap::new(16_384);
        n.took(1400);
        assert_eq!(n.empty(t0), None);
        // The default buffer and 1400-byte datagrams: room for 55.
        let mut n = Nap::new(BUF);
        n.took(1400);
        assert_eq!(n.empty(t0), Some(FIRST));
    }

    #[test]
    fn datagrams_taken_while_waiting_on_the_socket_are_not_counted() {
        let t0 = Instant::now();
        let mut n = Nap::new(BUF);
        // Waiting on the socket: a burst of any size says nothing about a nap.
        for _ in 0..1000 {
            n.took(1400);
        }
        assert_eq!(n.empty(t0), Some(FIRST));
    }
}
