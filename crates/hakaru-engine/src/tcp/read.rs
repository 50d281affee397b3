//! How a TCP receiver reads: whether a worker waits in its reads, one read of a flow, and when
//! the kernel wakes a lone receiver ([`Wake`]).

use std::net::TcpStream;
use std::time::{Duration, Instant};

use hakaru_model::Role;

use super::{classify, Shared, Step};
use crate::arrival::FlowStamps;
use crate::recvbuf::{at_stream_pos, block_rest};
use crate::sys::{self, AsRawFd};

/// A lone receiver's longest wait in a read: a polling worker's longest wait.
const BLOCKING_READ_WAIT: Duration = Duration::from_millis(100);

/// Whether a worker waits in its reads (blocking, [`BLOCKING_READ_WAIT`] at most): its one flow
/// is a receiver on a side with a thread per flow, as the peer's own server reads. One system
/// call per wait where polling takes three (docs/performance-notes.md, section 14).
pub(super) fn lone_receiver_blocks(s: &Shared, mine: &[usize]) -> bool {
    let [i] = mine else {
        return false;
    };
    if !sys::RECV_TIMEOUT_KEEPS_STREAM
        || !s.cfg.thread_per_flow
        || s.meta[*i].role != Role::Receiver
    {
        return false;
    }
    let stream = &s.streams[*i];
    if stream.set_read_timeout(Some(BLOCKING_READ_WAIT)).is_ok()
        && stream.set_nonblocking(false).is_ok()
    {
        return true;
    }
    let _ = stream.set_nonblocking(true);
    false
}

/// One read of flow `i`, `read` bytes in, placed by [`at_stream_pos`] or sized by [`block_rest`].
/// With `waited` (a blocking stream, [`lone_receiver_blocks`]) the read waits in the call and says
/// so; the reads after the window, which look at each read's stamp, do not wait.
pub(super) fn recv_step(
    s: &Shared,
    i: usize,
    stamps: FlowStamps,
    buf: &mut [u8],
    read: u64,
    waited: Option<&mut bool>,
) -> Step {
    let (stream, counters, blk) = (&s.streams[i], &s.counters[i], s.cfg.length);
    let discard = s.cfg.discard && sys::DISCARD_SUPPORTED;
    let len = if discard { block_rest(read, blk) } else { blk };
    // A discarding read has no buffer; an empty one stays empty.
    let buf = at_stream_pos(if discard { &mut [][..] } else { buf }, read, len);
    // Once the window is closed (read before the read, so these bytes are not in the window's
    // snapshot), each read says when its bytes reached the host.
    if let Some(end) = s.window_end_unix_ns().filter(|_| stamps.on()) {
        let r = stamps.read_after_window(stream, buf, len, end, counters);
        return classify(r, Role::Receiver);
    }
    let Some(waited) = waited else {
        let r = if discard {
            sys::recv_discard(stream.as_raw_fd(), len)
        } else {
            sys::stream_recv(stream, buf)
        };
        return classify(r, Role::Receiver);
    };
    *waited = true;
    let r = if stamps.on() {
        stamps.read_waiting(stream, buf, len, || s.window_end_unix_ns(), counters)
    } else if discard {
        sys::recv_discard_wait(stream.as_raw_fd(), len)
    } else {
        sys::stream_recv_wait(stream, buf)
    };
    classify(r, Role::Receiver)
}

/// The low-water mark of a fast flow's socket: a waiting read is woken once this many bytes
/// are queued (or at its timeout, the end of the stream, an error), two of loopback's 64 KiB
/// segments, where Linux wakes it for every segment otherwise.
pub(super) const BATCH: u32 = 128 * 1024;

/// A flow reads [`BATCH`] at a time from this rate on (bits/s) and goes back to every segment
/// under half of it, so a batch waits at most about 2 ms for its last byte.
const FAST_BPS: f64 = 1e9;

/// The span over which the rate is measured.
const LOOK: Duration = Duration::from_millis(10);

/// When the kernel wakes a lone receiver that copies what it reads. A waiting reader is woken
/// by the sender's CPU, once per segment by default; on loopback, and more so in a virtual
/// machine where waking a reader on another CPU costs an interrupt between CPUs, that work is
/// taken from the sender, and a stock client's rate with it (docs/performance-notes.md, section
/// 22). A fast flow asks for one wake-up per [`BATCH`] bytes instead (SO_RCVLOWAT); a slow one
/// keeps the default, so its bytes are counted as they arrive. Reads that skip the copy keep
/// the default too: Linux acknowledges every segment below the mark at once, which costs more
/// than the wake-up saves when the read itself costs almost nothing.
#[derive(Debug)]
pub(super) struct Wake {
    batched: bool,
    since: Instant,
    bytes: u64,
}

impl Wake {
    /// The rule for a flow of a worker that waits in its reads (`block`), when its reads copy.
    /// Arrival stamps near a window's end ([`crate::arrival`]) are the kernel's, per segment:
    /// when the reader is woken does not change them.
    pub(super) fn for_flow(s: &Shared, block: bool, now: Instant) -> Option<Wake> {
        let copies = !(s.cfg.discard && sys::DISCARD_SUPPORTED);
        (block && copies).then(|| Wake::new(now))
    }

    fn new(now: Instant) -> Wake {
        Wake {
            batched: false,
            since: now,
            bytes: 0,
        }
    }

    /// Counts a read of `n` bytes (0 for one that found none) at `now`: the low-water mark to
    /// set when it changes.
    fn read(&mut self, n: u64, now: Instant) -> Option<u32> {
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
        (fast != self.batched).then(|| {
            self.batched = fast;
            if fast {
                BATCH
            } else {
                1
            }
        })
    }

    /// After a read of `stream`: counts it and sets the socket's low-water mark when the rule
    /// says so; a socket that refuses it (not Linux) drops the rule.
    pub(super) fn after_read(
        wake: &mut Option<Wake>,
        stream: &TcpStream,
        step: &Step,
        now: Instant,
    ) {
        let Some(w) = wake.as_mut() else {
            return;
        };
        let n = match step {
            Step::Moved(n) => *n as u64,
            _ => 0,
        };
        if let Some(mark) = w.read(n, now) {
            if sys::set_recv_lowat(&socket2::SockRef::from(stream), mark).is_err() {
                *wake = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(base: Instant, t: u64) -> Instant {
        base + Duration::from_millis(t)
    }

    #[test]
    fn a_fast_flow_batches_and_a_slow_one_goes_back_to_every_segment() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        // 2 Gbit/s: 250 KB a millisecond, read in 64 KiB pieces; nothing before LOOK is over.
        assert_eq!(w.read(250_000, ms(t0, 1)), None);
        assert_eq!(w.read(2_250_000, ms(t0, 10)), Some(BATCH));
        // Still fast: no change.
        assert_eq!(w.read(2_500_000, ms(t0, 20)), None);
        // 0.6 Gbit/s: above half of FAST, stays batched.
        assert_eq!(w.read(750_000, ms(t0, 30)), None);
        // 0.4 Gbit/s: back to every segment.
        assert_eq!(w.read(500_000, ms(t0, 40)), Some(1));
        // 0.9 Gbit/s: under FAST, stays unbatched.
        assert_eq!(w.read(1_125_000, ms(t0, 50)), None);
    }

    #[test]
    fn reads_that_find_nothing_bring_the_rate_down() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        assert_eq!(w.read(3_000_000, ms(t0, 10)), Some(BATCH));
        // The sender stops: a read that timed out after 100 ms counts as none.
        assert_eq!(w.read(0, ms(t0, 110)), Some(1));
        assert_eq!(w.read(0, ms(t0, 210)), None);
    }

    #[test]
    fn a_slow_flow_never_batches() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        // 100 Mbit/s, a read a millisecond, for a second.
        for t in 1..=1000 {
            assert_eq!(w.read(12_500, ms(t0, t)), None, "at {t} ms");
        }
    }
}
