//! Per-flow counters: one cache line each, written by one worker, read by the ticker.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one flow. Padded to its own cache lines so workers never false-share.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct FlowCounters {
    bytes: AtomicU64,
    calls: AtomicU64,
    /// Nanoseconds since the side's start when the flow moved its last byte (0 = none yet).
    last_ns: AtomicU64,
}

/// A consistent-enough read of one flow's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Bytes moved so far.
    pub bytes: u64,
    /// System calls that moved bytes so far.
    pub calls: u64,
}

impl FlowCounters {
    /// Adds one call that moved `n` bytes at `at_ns` since the start.
    #[inline]
    pub fn add(&self, n: u64, at_ns: u64) {
        // One writer per flow: relaxed load+store is enough and cheaper than fetch_add.
        self.bytes
            .store(self.bytes.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        self.calls
            .store(self.calls.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.last_ns.store(at_ns, Ordering::Relaxed);
    }

    /// Reads the counters.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            bytes: self.bytes.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
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
        assert_eq!(
            c.snapshot(),
            CounterSnapshot {
                bytes: 150,
                calls: 2
            }
        );
        assert_eq!(c.last_ns(), 9);
        assert!(std::mem::align_of::<FlowCounters>() >= 128);
    }
}
