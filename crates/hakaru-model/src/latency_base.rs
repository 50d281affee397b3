//! The latency figures and the round-trip transport that a bulk test's latency probe shares
//! with latency tests (kept apart from the latency test's spec so that the bulk kinds' specs,
//! which carry a probe, do not depend on it).

use serde::{Deserialize, Serialize};

/// A distribution of times, in microseconds, from an HDR histogram (3 significant digits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyStats {
    /// Number of samples.
    pub count: u64,
    /// Smallest sample, microseconds.
    pub min_us: f64,
    /// Mean, microseconds.
    pub mean_us: f64,
    /// Standard deviation, microseconds.
    pub stddev_us: f64,
    /// Median, microseconds.
    pub p50_us: f64,
    /// 90th percentile, microseconds.
    pub p90_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// 99.9th percentile, microseconds.
    pub p999_us: f64,
    /// 99.99th percentile, microseconds.
    pub p9999_us: f64,
    /// Largest sample, microseconds.
    pub max_us: f64,
}

impl LatencyStats {
    /// Every figure halved: the one-way estimate from a round trip (what sockperf prints).
    pub fn halved(&self) -> LatencyStats {
        LatencyStats {
            count: self.count,
            min_us: self.min_us / 2.0,
            mean_us: self.mean_us / 2.0,
            stddev_us: self.stddev_us / 2.0,
            p50_us: self.p50_us / 2.0,
            p90_us: self.p90_us / 2.0,
            p99_us: self.p99_us / 2.0,
            p999_us: self.p999_us / 2.0,
            p9999_us: self.p9999_us / 2.0,
            max_us: self.max_us / 2.0,
        }
    }
}

/// One bucket of a printed distribution (`--histogram`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistogramBucket {
    /// Upper edge of the bucket, microseconds (samples at most this, above the previous edge).
    pub le_us: f64,
    /// Samples in the bucket.
    pub count: u64,
}

/// Transport of a latency test.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LatencyTransport {
    /// TCP with TCP_NODELAY (the default, sockperf `pp --tcp`, netperf TCP_RR).
    #[default]
    Tcp,
    /// UDP (`--udp`, sockperf `pp`, netperf UDP_RR).
    Udp,
}

/// One interval of a latency test, all flows merged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyInterval {
    /// Requests sent during the interval.
    pub requests: u64,
    /// Replies timed during the interval.
    pub replies: u64,
    /// Requests found lost during the interval.
    pub lost: u64,
    /// Round-trip times of the interval's replies.
    pub rtt: LatencyStats,
}
