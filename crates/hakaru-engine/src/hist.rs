//! Latency histograms: one HDR histogram per worker (no sharing on the hot path), merged at
//! the end, reduced to [`LatencyStats`].

use hakaru_model::{HistogramBucket, LatencyStats};
use hdrhistogram::Histogram;

/// Longest time recorded without saturating: 100 s in nanoseconds.
const MAX_NS: u64 = 100_000_000_000;

/// Nanosecond latency histogram with 3 significant digits (0.1 % resolution).
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    h: Histogram<u64>,
    /// Samples above the range, recorded at the top of it.
    saturated: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            // Bounds are constants that hdrhistogram accepts; this cannot fail.
            h: Histogram::new_with_bounds(1, MAX_NS, 3).unwrap_or_else(|_| {
                Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits"))
            }),
            saturated: 0,
        }
    }

    /// Records one time in nanoseconds (0 is recorded as 1 ns, beyond 100 s as 100 s).
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        let v = ns.clamp(1, MAX_NS);
        if ns > MAX_NS {
            self.saturated += 1;
        }
        let _ = self.h.record(v);
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        let _ = self.h.add(&other.h);
        self.saturated += other.saturated;
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.h.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }

    /// The distribution's summary, microseconds.
    pub fn stats(&self) -> LatencyStats {
        if self.h.is_empty() {
            return LatencyStats::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let q = |p: f64| us(self.h.value_at_quantile(p));
        LatencyStats {
            count: self.h.len(),
            min_us: us(self.h.min()),
            mean_us: self.h.mean() / 1000.0,
            stddev_us: self.h.stdev() / 1000.0,
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            p999_us: q(0.999),
            p9999_us: q(0.9999),
            max_us: us(self.h.max()),
        }
    }

    /// The distribution in about `buckets` logarithmic buckets between min and max.
    pub fn buckets(&self, buckets: usize) -> Vec<HistogramBucket> {
        if self.h.is_empty() || buckets == 0 {
            return Vec::new();
        }
        let (lo, hi) = (self.h.min().max(1) as f64, self.h.max().max(1) as f64);
        let step = (hi / lo).powf(1.0 / buckets as f64).max(1.0001);
        let mut out = Vec::new();
        let mut edge = lo;
        let mut below = 0u64;
        while out.len() < buckets + 1 {
            let top = if edge >= hi { hi } else { edge };
            let upto = self.h.count_between(0, top as u64);
            out.push(HistogramBucket {
                le_us: top / 1000.0,
                count: upto - below,
            });
            below = upto;
            if top >= hi {
                break;
            }
            edge *= step;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_uniform_set() {
        let mut h = LatencyHistogram::new();
        // 1..=10000 microseconds, one each.
        for us in 1..=10_000u64 {
            h.record_ns(us * 1000);
        }
        let s = h.stats();
        assert_eq!(s.count, 10_000);
        let near = |a: f64, b: f64| (a - b).abs() <= b * 0.001 + 0.001;
        assert!(near(s.min_us, 1.0), "{s:?}");
        assert!(near(s.max_us, 10_000.0), "{s:?}");
        assert!(near(s.mean_us, 5000.5), "{s:?}");
        assert!(near(s.p50_us, 5000.0), "{s:?}");
        assert!(near(s.p90_us, 9000.0), "{s:?}");
        assert!(near(s.p99_us, 9900.0), "{s:?}");
        assert!(near(s.p999_us, 9990.0), "{s:?}");
        // Uniform on 1..10000: sd = sqrt((n^2 - 1) / 12).
        assert!(near(s.stddev_us, 2886.75), "{s:?}");
    }

    #[test]
    fn tail_percentiles_see_rare_outliers() {
        let mut h = LatencyHistogram::new();
        for _ in 0..99_980 {
            h.record_ns(10_000);
        }
        // 0.02 % of the samples: above p99.9, at p99.99.
        for _ in 0..20 {
            h.record_ns(5_000_000);
        }
        let s = h.stats();
        assert!((s.p999_us - 10.0).abs() < 0.1, "{s:?}");
        assert!((s.p9999_us - 5000.0).abs() < 5.0, "{s:?}");
        assert!((s.max_us - 5000.0).abs() < 5.0);
    }

    #[test]
    fn merge_adds_and_buckets_sum_to_count() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        for i in 0..1000 {
            a.record_ns(1000 + i);
            b.record_ns(100_000 + i * 10);
        }
        a.merge(&b);
        assert_eq!(a.len(), 2000);
        let bk = a.buckets(20);
        assert_eq!(bk.iter().map(|b| b.count).sum::<u64>(), 2000);
        assert!(bk.windows(2).all(|w| w[0].le_us < w[1].le_us));
        let s = LatencyHistogram::new().stats();
        assert_eq!(s.count, 0);
        let mut big = LatencyHistogram::new();
        big.record_ns(u64::MAX);
        assert_eq!(big.len(), 1);
    }
}
