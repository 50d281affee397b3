//! When the kernel wakes a TCP reader that waits in its reads: per segment, or once a fast
//! flow has [`BATCH`] bytes queued (docs/performance-notes.md, section 22).

use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::sys;

/// The low-water mark of a fast flow's socket: a waiting read is woken once this many bytes
/// are queued (or at its timeout, the end of the stream, an error), two of loopback's 64 KiB
/// segments, where Linux wakes it for every segment otherwise.
pub const BATCH: u32 = 128 * 1024;

/// A flow reads [`BATCH`] at a time from this rate on (bits/s) and goes back to every segment
/// under half of it, so a batch waits at most about 2 ms for its last byte.
const FAST_BPS: f64 = 1e9;

/// The receive buffer a socket must have before it batches. When a low-water mark needs a
/// larger buffer than the socket has, Linux grows the buffer to fit it and clamps the window it
/// advertises to the mark (until its own tuning grows the buffer again): a flow batches only
/// once its buffer is far larger, so the window is never clamped.
const ROOM: usize = 4 * BATCH as usize;

/// The span over which the rate is measured.
const LOOK: Duration = Duration::from_millis(10);

/// When the kernel wakes a TCP reader that waits in its reads and copies what it reads (the
/// engine's lone receiver, `tcp/read.rs`; the netperf server's TCP_STREAM). A waiting reader is
/// woken by the sender's CPU, once per segment by default; on loopback, and more so in a virtual
/// machine where waking a reader on another CPU costs an interrupt between CPUs, that work is
/// taken from the sender, and a stock client's rate with it (docs/performance-notes.md, section
/// 22). A fast flow whose sender runs on another CPU asks for one wake-up per [`BATCH`] bytes
/// instead (SO_RCVLOWAT); a slow one, or one whose sender shares the reader's CPU, keeps the
/// default, so its bytes are counted as they arrive. Reads that skip the copy keep
/// the default too: Linux acknowledges every segment below the mark at once, which costs more
/// than the wake-up saves when the read itself costs almost nothing.
#[derive(Debug)]
pub struct Wake {
    batched: bool,
    /// Spans in a row that ended with the sender on the reader's CPU.
    shared: u8,
    since: Instant,
    bytes: u64,
}

impl Wake {
    /// A flow that starts at `now`, woken per segment.
    pub fn new(now: Instant) -> Wake {
        Wake {
            batched: false,
            shared: 0,
            since: now,
            bytes: 0,
        }
    }

    /// Counts a read of `n` bytes (0 for one that found none) at `now`: the low-water mark to
    /// set when it changes. `shared` tells, when a span ends on a fast flow, whether its sender
    /// runs on the reader's CPU.
    fn read(&mut self, n: u64, now: Instant, shared: impl FnOnce() -> bool) -> Option<u32> {
        self.bytes += n;
        let span = now.saturating_duration_since(self.since);
        if span < LOOK {
            return None;
        }
        let bps = self.bytes as f64 * 8.0 / span.as_secs_f64();
        (self.since, self.bytes) = (now, 0);
        let fast = bps
            >= if self.batched {
                FAST_BPS / 2.0
            } else {
                FAST_BPS
            };
        // A sender on the reader's own CPU wakes it without an interrupt between CPUs, and the
        // mark's cost stays: Linux acknowledges at once every segment that leaves fewer bytes
        // than the mark queued, work done on that one CPU (section 22). The kernel names the
        // reader's CPU for a segment now and then even with the sender pinned elsewhere, so a
        // batching flow stops only after two such spans in a row.
        self.shared = if fast && shared() {
            self.shared.saturating_add(1)
        } else {
            0
        };
        let fast = fast && self.shared < if self.batched { 2 } else { 1 };
        (fast != self.batched).then(|| {
            self.batched = fast;
            if fast {
                BATCH
            } else {
                1
            }
        })
    }

    /// After a read of `stream` that moved `n` bytes (0: none, or its wait timed out): counts
    /// it and sets the socket's low-water mark when the rule says so; a socket that refuses it
    /// (not Linux) drops the rule.
    pub fn after_read(wake: &mut Option<Wake>, stream: &TcpStream, n: u64, now: Instant) {
        let Some(w) = wake.as_mut() else {
            return;
        };
        let sock = socket2::SockRef::from(stream);
        let shared = || sys::shares_cpu_with_sender(&sock).unwrap_or(false);
        let Some(mark) = w.read(n, now, shared) else {
            return;
        };
        if mark == BATCH && sock.recv_buffer_size().map_or(true, |b| b < ROOM) {
            // Not yet: the next span asks again.
            w.batched = false;
            return;
        }
        if sys::set_recv_lowat(&sock, mark).is_err() {
            *wake = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sender runs on another CPU.
    fn apart() -> bool {
        false
    }

    fn ms(base: Instant, t: u64) -> Instant {
        base + Duration::from_millis(t)
    }

    #[test]
    fn a_fast_flow_batches_and_a_slow_one_goes_back_to_every_segment() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        // 2 Gbit/s: 250 KB a millisecond, read in 64 KiB pieces; nothing before LOOK is over.
        assert_eq!(w.read(250_000, ms(t0, 1), apart), None);
        assert_eq!(w.read(2_250_000, ms(t0, 10), apart), Some(BATCH));
        // Still fast: no change.
        assert_eq!(w.read(2_500_000, ms(t0, 20), apart), None);
        // 0.6 Gbit/s: above half of FAST, stays batched.
        assert_eq!(w.read(750_000, ms(t0, 30), apart), None);
        // 0.4 Gbit/s: back to every segment.
        assert_eq!(w.read(500_000, ms(t0, 40), apart), Some(1));
        // 0.9 Gbit/s: under FAST, stays unbatched.
        assert_eq!(w.read(1_125_000, ms(t0, 50), apart), None);
    }

    #[test]
    fn reads_that_find_nothing_bring_the_rate_down() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        assert_eq!(w.read(3_000_000, ms(t0, 10), apart), Some(BATCH));
        // The sender stops: a read that timed out after 100 ms counts as none.
        assert_eq!(w.read(0, ms(t0, 110), apart), Some(1));
        assert_eq!(w.read(0, ms(t0, 210), apart), None);
    }

    #[test]
    fn a_slow_flow_never_batches() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        // 100 Mbit/s, a read a millisecond, for a second.
        for t in 1..=1000 {
            assert_eq!(w.read(12_500, ms(t0, t), apart), None, "at {t} ms");
        }
    }

    #[test]
    fn a_sender_on_the_readers_cpu_is_read_per_segment() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        // 2 Gbit/s with the sender on the reader's CPU: no batching.
        assert_eq!(w.read(2_500_000, ms(t0, 10), || true), None);
        // The sender moves to another CPU: batching.
        assert_eq!(w.read(2_500_000, ms(t0, 20), apart), Some(BATCH));
        // One span that names the reader's CPU is not enough to stop batching; two in a row.
        assert_eq!(w.read(2_500_000, ms(t0, 30), || true), None);
        assert_eq!(w.read(2_500_000, ms(t0, 40), apart), None);
        assert_eq!(w.read(2_500_000, ms(t0, 50), || true), None);
        assert_eq!(w.read(2_500_000, ms(t0, 60), || true), Some(1));
        // Asked only when a span ends on a fast flow.
        let asked = std::cell::Cell::new(0);
        let ask = || {
            asked.set(asked.get() + 1);
            false
        };
        assert_eq!(w.read(2_500_000, ms(t0, 65), ask), None);
        assert_eq!(w.read(100, ms(t0, 90), ask), None);
        assert_eq!(asked.get(), 0, "mid-span and slow spans do not ask");
    }
}
