//! One peer's figures: counters since the agent started, RTT buckets for Prometheus, and a
//! window of recent results for the view's quantiles and loss.

use std::collections::VecDeque;

/// Upper bounds of the RTT buckets, seconds (Prometheus `le`; `+Inf` is implied).
pub const BUCKETS_S: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Counters since the agent started probing the peer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Probes sent.
    pub sent: u64,
    /// Replies within the timeout.
    pub replied: u64,
    /// Probes with no reply within the timeout.
    pub lost: u64,
    /// Replies that came after their probe was counted lost.
    pub late: u64,
    /// Replies per bucket of [`BUCKETS_S`] (not cumulative), the last for larger ones.
    pub buckets: [u64; BUCKETS_S.len() + 1],
    /// Sum of the RTTs of the replies, seconds.
    pub rtt_sum_s: f64,
}

impl Totals {
    /// Counts a reply after `rtt_ns`.
    pub fn reply(&mut self, rtt_ns: u64) {
        self.replied += 1;
        let s = rtt_ns as f64 / 1e9;
        self.rtt_sum_s += s;
        let i = BUCKETS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BUCKETS_S.len());
        self.buckets[i] += 1;
    }

    /// Adds `o` into these (a label group's sum).
    pub fn add(&mut self, o: &Totals) {
        self.sent += o.sent;
        self.replied += o.replied;
        self.lost += o.lost;
        self.late += o.late;
        for (a, b) in self.buckets.iter_mut().zip(o.buckets.iter()) {
            *a += b;
        }
        self.rtt_sum_s += o.rtt_sum_s;
    }
}

/// Results of the last `span_ns`: RTT in µs, or `None` for a lost probe.
#[derive(Debug, Clone, Default)]
pub struct Window {
    span_ns: u64,
    cap: usize,
    items: VecDeque<(u64, Option<u32>)>,
}

/// What a window says now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowFigures {
    /// Replies in the window.
    pub replied: u64,
    /// Losses in the window.
    pub lost: u64,
    /// Median RTT, µs.
    pub p50_us: Option<f64>,
    /// 99th percentile RTT, µs (the largest when fewer than 100 replies).
    pub p99_us: Option<f64>,
}

impl WindowFigures {
    /// Lost over lost plus replied (None with neither).
    pub fn loss(&self) -> Option<f64> {
        let n = self.lost + self.replied;
        (n > 0).then(|| self.lost as f64 / n as f64)
    }
}

impl Window {
    /// A window of `span_ns` keeping at most `cap` results.
    pub fn new(span_ns: u64, cap: usize) -> Window {
        Window {
            span_ns,
            cap: cap.max(1),
            items: VecDeque::new(),
        }
    }

    /// Records a result at `at_ns`.
    pub fn push(&mut self, at_ns: u64, rtt_us: Option<u32>) {
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back((at_ns, rtt_us));
        self.prune(at_ns);
    }

    fn prune(&mut self, now_ns: u64) {
        while let Some(&(at, _)) = self.items.front() {
            if at + self.span_ns < now_ns {
                self.items.pop_front();
            } else {
                break;
            }
        }
    }

    /// The figures of the results no older than the span at `now_ns`.
    pub fn figures(&self, now_ns: u64) -> WindowFigures {
        let live = self
            .items
            .iter()
            .filter(|(at, _)| at + self.span_ns >= now_ns);
        let mut rtts = Vec::new();
        let mut lost = 0;
        for (_, r) in live {
            match r {
                Some(us) => rtts.push(*us),
                None => lost += 1,
            }
        }
        rtts.sort_unstable();
        let q = |p: f64| -> Option<f64> {
            if rtts.is_empty() {
                return None;
            }
            // Nearest rank.
            let rank = ((p * rtts.len() as f64).ceil() as usize).clamp(1, rtts.len());
            Some(f64::from(rtts[rank - 1]))
        };
        WindowFigures {
            replied: rtts.len() as u64,
            lost,
            p50_us: q(0.50),
            p99_us: q(0.99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_take_each_reply_once() {
        let mut t = Totals::default();
        t.reply(50_000); // 50 µs
        t.reply(100_000); // exactly 100 µs: le 0.0001
        t.reply(3_000_000); // 3 ms
        t.reply(9_000_000_000); // 9 s: past the last bound
        assert_eq!(t.buckets[0], 2);
        assert_eq!(t.buckets[5], 1);
        assert_eq!(t.buckets[BUCKETS_S.len()], 1);
        assert_eq!(t.replied, 4);
        assert!((t.rtt_sum_s - 9.00315).abs() < 1e-9);
    }

    #[test]
    fn a_window_forgets_what_is_older_than_its_span() {
        let s = 1_000_000_000;
        let mut w = Window::new(10 * s, 1000);
        for i in 0..100u64 {
            // RTT 1..=100 µs, one lost in ten.
            let r = if i % 10 == 9 {
                None
            } else {
                Some(i as u32 + 1)
            };
            w.push(i * s / 10, r);
        }
        let f = w.figures(99 * s / 10);
        assert_eq!((f.replied, f.lost), (90, 10));
        assert_eq!(f.loss(), Some(0.1));
        assert_eq!(f.p50_us, Some(49.0));
        assert_eq!(f.p99_us, Some(99.0));
        // 15 s later than the last: nothing left.
        let f = w.figures(25 * s);
        assert_eq!((f.replied, f.lost, f.p50_us), (0, 0, None));
        assert_eq!(f.loss(), None);
    }

    #[test]
    fn a_window_holds_at_most_its_cap() {
        let mut w = Window::new(u64::MAX / 2, 3);
        for i in 0..10 {
            w.push(i, Some(i as u32));
        }
        let f = w.figures(10);
        assert_eq!(f.replied, 3);
        assert_eq!(f.p50_us, Some(8.0));
    }
}
