//! Records of `hakaru nic`, the per-interface rate monitor (what `sar -n DEV 1` prints).

use serde::{Deserialize, Serialize};

use crate::result::NicUsage;

/// One interval of `hakaru nic`: every watched interface's counters over it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicInterval {
    /// Interval number, from 0.
    pub index: u64,
    /// Start, seconds since the first counter read (monotonic clock).
    pub start: f64,
    /// End, seconds since the first counter read (monotonic clock); taken just before the
    /// counters that close the interval were read.
    pub end: f64,
    /// Wall-clock end, RFC 3339 UTC (taken with `end`).
    pub time: String,
    /// Wall-clock end, seconds since the Unix epoch (taken with `end`).
    pub time_unix: f64,
    /// Deltas and rates of each interface over the interval, rates over the measured time
    /// between the two counter reads (`seconds` of each entry).
    pub interfaces: Vec<NicUsage>,
}

/// The end of a `hakaru nic` run: each interface over all reported intervals, as sar's
/// `Average:` lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicSummary {
    /// Intervals reported.
    pub intervals: u64,
    /// Seconds the reported intervals cover.
    pub seconds: f64,
    /// True if the run was stopped (Ctrl-C, SIGTERM) before its count; an interval cut short
    /// by the stop is not reported and not in the averages.
    pub interrupted: bool,
    /// Each interface's deltas summed over the intervals it was seen in, and its rates over
    /// that time.
    pub interfaces: Vec<NicUsage>,
}
