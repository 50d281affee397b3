//! Arrival stamps of a TCP receiver: when a receiving flow asks the kernel to stamp its segments
//! (SO_TIMESTAMPNS), and whether a read after the measured window closed brought bytes that
//! reached the host inside it (held out of order behind a lost segment until its
//! retransmission, so released only after the end).
//!
//! With the option on, the kernel stamps every packet the host receives. On loopback, with both
//! ends on one CPU, that cost about two per cent of a receiver's rate
//! (docs/performance-notes.md, section 16), and the stamps only matter for segments that arrive
//! near the end or wait across it in the out-of-order queue. So a flow turns them on
//! [`STAMP_LEAD`] before its window is due to close, or as soon as it has held segments out of
//! order (they can wait there for several retransmission timeouts), or at once where the kernel
//! does not say whether it has.

use std::io;
use std::net::TcpStream;
use std::time::Duration;

use crate::counters::FlowCounters;
use crate::sys::{self, AsRawFd};

/// How long before a timed window is due to close a receiver asks for arrival stamps, unless
/// its flow has held segments out of order before (then at once).
pub const STAMP_LEAD: Duration = Duration::from_millis(500);

/// How often a receiver without stamps looks for segments held out of order (TCP_INFO).
const HOLE_CHECK_EVERY: Duration = Duration::from_millis(100);

/// The kernel may turn its stamping on a little after the option is set (the first socket on
/// the host that asks for stamps switches them on in a deferred work item); a read without a
/// stamp counts in the window only if the stamps were asked for at least this long before it
/// closed.
const STAMP_SETTLE: Duration = Duration::from_millis(100);

/// Whether a receiving flow's stamps are on.
#[derive(Clone, Copy, PartialEq, Debug, Default)]
enum State {
    /// Not yet turned on.
    #[default]
    Off,
    /// The kernel refused them (or this OS has none): reads carry no stamp.
    Refused,
    /// On since this instant on the wall clock (nanoseconds since the Unix epoch, the base of
    /// the side's `window_end_unix_ns`), read just before the request.
    Since(u64),
}

/// One receiving flow's arrival stamps.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowStamps {
    state: State,
    /// When the flow, stamps still off, next looks for segments held out of order
    /// (nanoseconds since the side's start).
    next_hole_check_ns: u64,
}

impl FlowStamps {
    /// Whether reads of this flow carry stamps.
    pub fn on(&self) -> bool {
        matches!(self.state, State::Since(_))
    }

    /// Turns the stamps of `stream` on once `now_ns` (since the side's start; `unix_now` is the
    /// same instant on the wall clock) reaches `from_ns`, or once the flow has received
    /// segments out of order (or the kernel does not say whether it has).
    pub fn turn_on_if_due(&mut self, stream: &TcpStream, from_ns: u64, now_ns: u64, unix_now: u64) {
        if self.state != State::Off {
            return;
        }
        let due = now_ns >= from_ns
            || (now_ns >= self.next_hole_check_ns && {
                self.next_hole_check_ns = now_ns + HOLE_CHECK_EVERY.as_nanos() as u64;
                sys::tcp_out_of_order(stream.as_raw_fd()).is_none_or(|n| n > 0)
            });
        if !due {
            return;
        }
        self.state = if sys::tcp_enable_rx_stamps(stream) {
            State::Since(unix_now)
        } else {
            State::Refused
        };
    }

    /// Whether a read after the window closed at `end` (Unix nanoseconds), whose last stamped
    /// segment carried `stamp`, brought bytes that reached the host inside the window. A read
    /// with no stamp took only segments that came before the stamps began, so before the end
    /// if they began (and the kernel had time to start stamping) before it.
    pub fn arrived_in_window(&self, stamp: Option<u64>, end: u64) -> bool {
        match (self.state, stamp) {
            (State::Since(_), Some(at)) => at <= end,
            (State::Since(since), None) => {
                since.saturating_add(STAMP_SETTLE.as_nanos() as u64) <= end
            }
            _ => false,
        }
    }
}

/// Bytes per read once the measured window is closed.
const AFTER_WINDOW_READ: usize = 16 << 10;

impl FlowStamps {
    /// One read of a stamped flow after its window closed at `end` (Unix nanoseconds), without
    /// waiting; an empty `buf` discards up to `len` bytes. What it brings that reached the host
    /// in time (held out of order behind a lost segment until its retransmission) counts in
    /// the window.
    pub fn read_after_window(
        &self,
        stream: &TcpStream,
        buf: &mut [u8],
        len: usize,
        end: u64,
        counters: &FlowCounters,
    ) -> io::Result<usize> {
        // Small reads: a read's stamp is its last segment's, so a read that also takes
        // segments that came after the end would leave out the ones that came before.
        let len = len.min(AFTER_WINDOW_READ);
        let take = len.min(buf.len());
        let r = sys::stream_recv_stamped(stream, &mut buf[..take], len);
        if let Ok((n, at)) = r {
            if n > 0 && self.arrived_in_window(at, end) {
                counters.add_arrived_in_window(n as u64);
            }
        }
        r.map(|(n, _)| n)
    }

    /// One waiting read of a stamped flow while its window is open (`window_end` says whether
    /// it has closed when the read returns); an empty `buf` discards up to `len` bytes. The
    /// window can close while the read waits: what it then brings that reached the host before
    /// the end counts in the window, as [`Self::read_after_window`] counts it.
    pub fn read_waiting(
        &self,
        stream: &TcpStream,
        buf: &mut [u8],
        len: usize,
        window_end: impl Fn() -> Option<u64>,
        counters: &FlowCounters,
    ) -> io::Result<usize> {
        let r = sys::stream_recv_stamped_wait(stream, buf, len);
        if let (Ok((n, at)), Some(end)) = (&r, window_end()) {
            if *n > 0 && self.arrived_in_window(*at, end) {
                counters.add_arrived_in_window(*n as u64);
            }
        }
        r.map(|(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn since(at: u64) -> FlowStamps {
        FlowStamps {
            state: State::Since(at),
            next_hole_check_ns: 0,
        }
    }

    #[test]
    fn a_read_counts_in_the_window_by_its_stamp_or_by_when_the_stamps_began() {
        let end = 10_000_000_000;
        let settle = STAMP_SETTLE.as_nanos() as u64;
        let on = since(end - 500_000_000);
        // A stamped segment counts by its stamp.
        assert!(on.arrived_in_window(Some(end), end));
        assert!(on.arrived_in_window(Some(end - 1), end));
        assert!(!on.arrived_in_window(Some(end + 1), end));
        // No stamp: the segments came before the stamps began, so before the end when they
        // began (and the kernel had time to start stamping) before it.
        assert!(on.arrived_in_window(None, end));
        assert!(since(end - settle).arrived_in_window(None, end));
        assert!(!since(end - settle + 1).arrived_in_window(None, end));
        assert!(!since(end + 1).arrived_in_window(None, end));
        // Without stamps nothing read after the end is known to have come before it.
        for state in [State::Off, State::Refused] {
            let f = FlowStamps {
                state,
                next_hole_check_ns: 0,
            };
            assert!(!f.on());
            assert!(!f.arrived_in_window(Some(end - 1), end));
            assert!(!f.arrived_in_window(None, end));
        }
        assert!(on.on());
    }

    /// A loss-free loopback flow waits for the lead; a past `from_ns` turns the stamps on.
    #[cfg(target_os = "linux")]
    #[test]
    fn stamps_turn_on_at_the_lead_and_not_before_on_a_flow_without_holes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let mut f = FlowStamps::default();
        f.turn_on_if_due(&stream, 1_000, 10, 42);
        assert!(!f.on(), "{f:?}");
        assert!(!sys::tcp_rx_stamps_on(&stream));
        f.turn_on_if_due(&stream, 1_000, 1_000, 43);
        assert!(f.on(), "{f:?}");
        assert!(sys::tcp_rx_stamps_on(&stream));
        assert_eq!(f.state, State::Since(43));
    }
}
