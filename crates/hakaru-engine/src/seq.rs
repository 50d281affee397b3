//! Receive-side UDP accounting for one flow: loss, reordering, duplicates and RFC 3550 jitter.
//!
//! Sequence numbers start at 0 per flow. A gap counts the missing datagrams as lost; when one
//! of them arrives later it is counted out of order and no longer lost. A bitmap of the last
//! [`WINDOW`] sequence numbers tells a late datagram from a duplicate; a datagram older than
//! that is counted out of order (it cannot be checked for duplication).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

/// Sequence numbers behind the highest one that are remembered for duplicate detection.
pub const WINDOW: u64 = 1 << 16;
const WORDS: usize = (WINDOW / 64) as usize;

/// Counters of one received flow.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SeqCounts {
    /// Datagrams received (duplicates included).
    pub received: u64,
    /// Datagrams currently missing (gaps not filled by a late arrival).
    pub lost: u64,
    /// Datagrams that arrived after a higher sequence number.
    pub out_of_order: u64,
    /// Datagrams seen before.
    pub duplicates: u64,
    /// Highest sequence number seen plus one (0 before the first).
    pub next_seq: u64,
    /// RFC 3550 interarrival jitter, nanoseconds (None before two timed datagrams).
    pub jitter_ns: Option<f64>,
}

/// Tracks one flow's sequence numbers and transit times.
#[derive(Debug, Clone)]
pub struct SeqTracker {
    counts: SeqCounts,
    seen: Vec<u64>,
    last_transit: Option<i64>,
    jitter: f64,
    timed: u64,
}

impl Default for SeqTracker {
    fn default() -> Self {
        SeqTracker::new()
    }
}

impl SeqTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> SeqTracker {
        SeqTracker {
            counts: SeqCounts::default(),
            seen: vec![0; WORDS],
            last_transit: None,
            jitter: 0.0,
            timed: 0,
        }
    }

    fn bit(seq: u64) -> (usize, u64) {
        (((seq / 64) as usize) % WORDS, 1u64 << (seq % 64))
    }

    fn mark(&mut self, seq: u64) {
        let (w, m) = Self::bit(seq);
        if let Some(word) = self.seen.get_mut(w) {
            *word |= m;
        }
    }

    fn is_marked(&self, seq: u64) -> bool {
        let (w, m) = Self::bit(seq);
        self.seen.get(w).is_some_and(|word| word & m != 0)
    }

    fn clear_range(&mut self, from: u64, to: u64) {
        if to - from >= WINDOW {
            self.seen.iter_mut().for_each(|w| *w = 0);
            return;
        }
        let mut s = from;
        while s < to {
            if s.is_multiple_of(64) && to - s >= 64 {
                if let Some(word) = self.seen.get_mut(((s / 64) as usize) % WORDS) {
                    *word = 0;
                }
                s += 64;
            } else {
                let (w, m) = Self::bit(s);
                if let Some(word) = self.seen.get_mut(w) {
                    *word &= !m;
                }
                s += 1;
            }
        }
    }

    /// Records one datagram with sequence number `seq`; `transit_ns` is its arrival time minus
    /// its send time (any constant clock offset cancels out), when both are known.
    #[inline]
    pub fn on_datagram(&mut self, seq: u64, transit_ns: Option<i64>) {
        self.counts.received += 1;
        let next = self.counts.next_seq;
        if seq >= next {
            self.counts.lost += seq - next;
            self.counts.next_seq = seq.saturating_add(1);
            self.clear_range(next, seq);
            self.mark(seq);
        } else if next - seq > WINDOW {
            self.counts.out_of_order += 1;
            self.counts.lost = self.counts.lost.saturating_sub(1);
        } else if self.is_marked(seq) {
            self.counts.duplicates += 1;
        } else {
            self.counts.out_of_order += 1;
            self.counts.lost = self.counts.lost.saturating_sub(1);
            self.mark(seq);
        }
        if let Some(t) = transit_ns {
            if let Some(prev) = self.last_transit {
                // RFC 3550 §6.4.1: J += (|D| - J) / 16.
                // abs_diff: transit times at the ends of i64 must not overflow.
                let d = t.abs_diff(prev) as f64;
                self.jitter += (d - self.jitter) / 16.0;
            }
            self.last_transit = Some(t);
            self.timed += 1;
        }
    }

    /// Counts a datagram that carries no sequence number (payloads under 8 bytes).
    #[inline]
    pub fn on_unsequenced(&mut self) {
        self.counts.received += 1;
    }

    /// The counters so far.
    pub fn counts(&self) -> SeqCounts {
        SeqCounts {
            jitter_ns: (self.timed >= 2).then_some(self.jitter),
            ..self.counts
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: &[u64]) -> SeqCounts {
        let mut t = SeqTracker::new();
        for &s in seqs {
            t.on_datagram(s, None);
        }
        t.counts()
    }

    #[test]
    fn in_order_has_no_loss() {
        let c = run(&[0, 1, 2, 3, 4]);
        assert_eq!(
            (c.received, c.lost, c.out_of_order, c.duplicates),
            (5, 0, 0, 0)
        );
        assert_eq!(c.next_seq, 5);
        assert_eq!(c.jitter_ns, None);
    }

    #[test]
    fn gaps_are_lost_until_filled() {
        let c = run(&[0, 1, 4, 5]);
        assert_eq!((c.lost, c.out_of_order), (2, 0));
        let c = run(&[0, 1, 4, 5, 2]);
        assert_eq!((c.lost, c.out_of_order, c.duplicates), (1, 1, 0));
        let c = run(&[0, 1, 4, 5, 2, 3]);
        assert_eq!((c.lost, c.out_of_order, c.received), (0, 2, 6));
    }

    #[test]
    fn first_datagram_lost_counts() {
        let c = run(&[1, 2]);
        assert_eq!(c.lost, 1);
    }

    /// Neither a sequence number at the top of the range nor transits at both ends of i64
    /// overflow (`seq + 1` and `t - prev` did).
    #[test]
    fn extreme_sequence_numbers_and_transits_do_not_overflow() {
        let mut t = SeqTracker::new();
        t.on_datagram(u64::MAX, Some(i64::MAX));
        t.on_datagram(0, Some(i64::MIN));
        let c = t.counts();
        assert_eq!((c.received, c.next_seq, c.out_of_order), (2, u64::MAX, 1));
        assert_eq!(c.jitter_ns, Some(u64::MAX as f64 / 16.0));
    }

    #[test]
    fn duplicates_are_told_from_late_arrivals() {
        let c = run(&[0, 1, 1, 2, 0]);
        assert_eq!(
            (c.duplicates, c.out_of_order, c.lost, c.received),
            (2, 0, 0, 5)
        );
        // A late arrival, then the same datagram again.
        let c = run(&[0, 2, 1, 1]);
        assert_eq!((c.duplicates, c.out_of_order, c.lost), (1, 1, 0));
    }

    #[test]
    fn window_is_reused_after_large_jumps() {
        // Jump far ahead: old bits must not make a fresh datagram look like a duplicate.
        let mut seqs: Vec<u64> = (0..100).collect();
        seqs.push(WINDOW * 3 + 5);
        seqs.push(WINDOW * 3 + 4);
        seqs.push(WINDOW * 3 + 4);
        let c = run(&seqs);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.out_of_order, 1);
        assert_eq!(c.lost, WINDOW * 3 + 5 - 100 - 1);
        // Within the window, positions that wrapped around were cleared by the jump.
        let mut t = SeqTracker::new();
        for s in 0..WINDOW + 10 {
            if s != WINDOW + 3 {
                t.on_datagram(s, None);
            }
        }
        t.on_datagram(WINDOW + 3, None);
        assert_eq!(t.counts().duplicates, 0);
        assert_eq!(t.counts().out_of_order, 1);
    }

    #[test]
    fn very_old_datagrams_are_out_of_order() {
        let mut t = SeqTracker::new();
        t.on_datagram(WINDOW + 10, None);
        t.on_datagram(1, None);
        let c = t.counts();
        assert_eq!((c.out_of_order, c.lost), (1, WINDOW + 9));
    }

    #[test]
    fn jitter_follows_rfc3550() {
        let mut t = SeqTracker::new();
        // Constant transit: no jitter, whatever the offset between the clocks.
        for s in 0..10 {
            t.on_datagram(s, Some(-5_000_000));
        }
        assert_eq!(t.counts().jitter_ns, Some(0.0));
        // Transit alternating by 1 ms: J converges towards 1 ms.
        let mut t = SeqTracker::new();
        t.on_datagram(0, Some(0));
        t.on_datagram(1, Some(1_000_000));
        assert_eq!(t.counts().jitter_ns, Some(62_500.0));
        for s in 2..500 {
            t.on_datagram(s, Some(if s % 2 == 0 { 0 } else { 1_000_000 }));
        }
        let j = t.counts().jitter_ns.unwrap();
        assert!((j - 1_000_000.0).abs() < 1.0, "{j}");
    }

    #[test]
    fn transit_times_at_the_ends_of_i64_do_not_overflow() {
        let mut t = SeqTracker::new();
        t.on_datagram(0, Some(i64::MIN));
        t.on_datagram(1, Some(i64::MAX));
        assert_eq!(t.counts().jitter_ns, Some(u64::MAX as f64 / 16.0));
    }

    #[test]
    fn unsequenced_datagrams_are_only_counted() {
        let mut t = SeqTracker::new();
        t.on_unsequenced();
        t.on_unsequenced();
        let c = t.counts();
        assert_eq!((c.received, c.lost, c.next_seq), (2, 0, 0));
    }
}
