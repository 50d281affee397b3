//! Per-flow counters: one cache line pair each, written by one worker, read by the ticker.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::seq::SeqCounts;

/// Marks an unset optional counter.
const NONE: u64 = u64::MAX;

/// Counters of one flow. Padded to its own cache lines so workers never false-share.
#[repr(align(128))]
#[derive(Debug)]
pub struct FlowCounters {
    bytes: AtomicU64,
    calls: AtomicU64,
    /// Nanoseconds since the side's start when the flow moved its last byte (0 = none yet).
    last_ns: AtomicU64,
    datagrams: AtomicU64,
    next_seq: AtomicU64,
    lost: AtomicU64,
    out_of_order: AtomicU64,
    duplicates: AtomicU64,
    /// f64 bits of the jitter in nanoseconds, or NONE.
    jitter: AtomicU64,
    ignored: AtomicU64,
    /// Cumulative SO_RXQ_OVFL count, or NONE.
    socket_drops: AtomicU64,
    /// TCP receiver: bytes read after the measured window closed that reached the host
    /// before it (their arrival stamps), e.g. held out of order behind a lost segment.
    arrived_in_window: AtomicU64,
}

impl Default for FlowCounters {
    fn default() -> Self {
        FlowCounters {
            bytes: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            datagrams: AtomicU64::new(0),
            next_seq: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            jitter: AtomicU64::new(NONE),
            ignored: AtomicU64::new(0),
            socket_drops: AtomicU64::new(NONE),
            arrived_in_window: AtomicU64::new(0),
        }
    }
}

/// A consistent-enough read of one flow's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CounterSnapshot {
    /// Bytes moved so far.
    pub bytes: u64,
    /// System calls that moved bytes so far.
    pub calls: u64,
    /// UDP: datagrams moved so far.
    pub datagrams: u64,
    /// UDP sender: next sequence number; receiver: highest seen plus one.
    pub next_seq: u64,
    /// UDP receiver: datagrams missing so far.
    pub lost: u64,
    /// UDP receiver: late datagrams so far.
    pub out_of_order: u64,
    /// UDP receiver: duplicates so far.
    pub duplicates: u64,
    /// UDP receiver: current jitter, nanoseconds.
    pub jitter_ns: Option<f64>,
    /// UDP receiver: datagrams that were not test data.
    pub ignored: u64,
    /// UDP receiver: kernel drops on the socket so far (SO_RXQ_OVFL).
    pub socket_drops: Option<u64>,
}

#[inline]
fn bump(a: &AtomicU64, n: u64) {
    // One writer per flow: relaxed load+store is enough and cheaper than fetch_add.
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl FlowCounters {
    /// Adds `n` bytes read after the window closed that arrived before it.
    #[inline]
    pub fn add_arrived_in_window(&self, n: u64) {
        bump(&self.arrived_in_window, n);
    }

    /// Bytes read after the window closed that arrived before it, so far.
    pub fn arrived_in_window(&self) -> u64 {
        self.arrived_in_window.load(Ordering::Relaxed)
    }

    /// Adds one call that moved `n` bytes at `at_ns` since the start.
    #[inline]
    pub fn add(&self, n: u64, at_ns: u64) {
        bump(&self.bytes, n);
        bump(&self.calls, 1);
        self.last_ns.store(at_ns, Ordering::Relaxed);
    }

    /// Adds one send call that moved `datagrams` datagrams of `bytes` in all; `next_seq` is the
    /// sequence number the next datagram will carry.
    #[inline]
    pub fn add_sent(&self, bytes: u64, datagrams: u64, next_seq: u64, at_ns: u64) {
        self.add(bytes, at_ns);
        bump(&self.datagrams, datagrams);
        self.next_seq.store(next_seq, Ordering::Relaxed);
    }

    /// Publishes a receiver's state after one receive call that moved `bytes`.
    #[inline]
    pub fn publish_recv(
        &self,
        bytes: u64,
        seq: &SeqCounts,
        ignored: u64,
        socket_drops: Option<u64>,
        at_ns: u64,
    ) {
        self.add(bytes, at_ns);
        let st = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        st(&self.datagrams, seq.received);
        st(&self.next_seq, seq.next_seq);
        st(&self.lost, seq.lost);
        st(&self.out_of_order, seq.out_of_order);
        st(&self.duplicates, seq.duplicates);
        st(&self.jitter, seq.jitter_ns.map_or(NONE, f64::to_bits));
        st(&self.ignored, ignored);
        st(&self.socket_drops, socket_drops.unwrap_or(NONE));
    }

    /// Sets a receiver's final socket drop count (no call, no bytes).
    pub fn set_socket_drops(&self, drops: u64) {
        self.socket_drops.store(drops, Ordering::Relaxed);
    }

    /// Counts datagrams that were not test data (no call, no bytes).
    pub fn set_ignored(&self, ignored: u64) {
        self.ignored.store(ignored, Ordering::Relaxed);
    }

    /// Reads the counters.
    pub fn snapshot(&self) -> CounterSnapshot {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let opt = |v: u64| (v != NONE).then_some(v);
        CounterSnapshot {
            bytes: ld(&self.bytes),
            calls: ld(&self.calls),
            datagrams: ld(&self.datagrams),
            next_seq: ld(&self.next_seq),
            lost: ld(&self.lost),
            out_of_order: ld(&self.out_of_order),
            duplicates: ld(&self.duplicates),
            jitter_ns: opt(ld(&self.jitter)).map(f64::from_bits),
            ignored: ld(&self.ignored),
            socket_drops: opt(ld(&self.socket_drops)),
        }
    }

    /// When the flow last moved data, nanoseconds since the start (0 = never).
    pub fn last_ns(&self) -> u64 {
        self.last_ns.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_accumulate() {
        let c = FlowCounters::default();
        c.add(100, 5);
        c.add(50, 9);
        let s = c.snapshot();
        assert_eq!((s.bytes, s.calls), (150, 2));
        assert_eq!(s.jitter_ns, None);
        assert_eq!(c.last_ns(), 9);
        assert!(std::mem::align_of::<FlowCounters>() >= 128);
    }

    #[test]
    fn udp_counters_publish() {
        let c = FlowCounters::default();
        c.add_sent(1400, 100, 100, 1);
        c.add_sent(1400, 100, 200, 2);
        let s = c.snapshot();
        assert_eq!(
            (s.bytes, s.calls, s.datagrams, s.next_seq),
            (2800, 2, 200, 200)
        );
        let r = FlowCounters::default();
        let seq = SeqCounts {
            received: 7,
            lost: 2,
            out_of_order: 1,
            duplicates: 1,
            next_seq: 9,
            jitter_ns: Some(1500.0),
        };
        r.publish_recv(70, &seq, 3, Some(4), 10);
        let s = r.snapshot();
        assert_eq!(
            (s.datagrams, s.lost, s.out_of_order, s.duplicates),
            (7, 2, 1, 1)
        );
        assert_eq!(
            (s.jitter_ns, s.ignored, s.socket_drops),
            (Some(1500.0), 3, Some(4))
        );
    }
}
