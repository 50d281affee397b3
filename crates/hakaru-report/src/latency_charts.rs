//! The charts of a latency result: round trips over time, and the distribution by
//! percentile (a "nines" axis: p90, p99, p99.9 a step each), cumulative and as a histogram,
//! drawn from the full histogram when the result holds one (`--histogram`), else through
//! its percentiles (and the title says which).

use hakaru_model::{HistogramBucket, LatencyResult, LatencySpec, LatencyStats, RunResult};

use crate::charts::{self, step, Chart, Series, Stroke};
use crate::kind_charts::KindCharts;

/// The charts of a latency result; `p` prefixes their ids.
fn charts(p: &str, r: &RunResult) -> Vec<Chart> {
    let mut out = vec![over_time(p, r)];
    if let Some(l) = r.detail.latency() {
        out.extend(distribution(p, l));
    }
    out
}

/// Round trip per interval: p50, p99 and max.
fn over_time(p: &str, r: &RunResult) -> Chart {
    let pick = |f: fn(&LatencyStats) -> f64| -> Vec<(f64, f64)> {
        r.intervals
            .iter()
            .filter(|rec| !rec.omitted)
            .filter_map(|rec| Some(step(rec, f(&rec.latency.as_ref()?.rtt))))
            .flatten()
            .collect()
    };
    Chart {
        id: format!("{p}-rtt"),
        title: "round trip per interval: p50, p99 and max (log axis)".into(),
        x_desc: "time (s)".into(),
        y_desc: "round trip (us, log)".into(),
        y_scale: 1.0,
        log_x: false,
        log_y: true,
        series: vec![
            series("p50", pick(|s| s.p50_us), Stroke::Thick, 0),
            series("p99", pick(|s| s.p99_us), Stroke::Medium, 1),
            series("max", pick(|s| s.max_us), Stroke::Thin, 3),
        ],
    }
}

fn series(name: &str, points: Vec<(f64, f64)>, stroke: Stroke, color: usize) -> Series {
    Series {
        name: name.into(),
        points,
        stroke,
        color,
        legend: true,
    }
}

/// The round-trip distribution: by percentile, cumulative, and the histogram itself.
fn distribution(p: &str, l: &LatencyResult) -> Vec<Chart> {
    let mut out = Vec::new();
    let full = !l.histogram.is_empty();
    let (pct, cdf, source) = curves(l);
    let load = if l.under_load.is_some() {
        ", idle and under load"
    } else {
        ""
    };
    out.push(Chart {
        id: format!("{p}-pct"),
        title: format!("round trip by percentile{load} ({source}; log axis)"),
        x_desc: "percentile (p90, p99, p99.9: a step per nine)".into(),
        y_desc: "round trip (us, log)".into(),
        y_scale: 1.0,
        log_x: false,
        log_y: true,
        series: pct,
    });
    out.push(Chart {
        id: format!("{p}-cdf"),
        title: format!("round-trip CDF{load} ({source}; log axis)"),
        x_desc: "round trip (us, log)".into(),
        y_desc: "requests at or below (%)".into(),
        y_scale: 1.0,
        log_x: true,
        log_y: false,
        series: cdf,
    });
    if full {
        let pts = l
            .histogram
            .iter()
            .filter(|b| b.le_us > 0.0)
            .map(|b| (b.le_us, b.count as f64))
            .collect();
        out.push(Chart {
            id: format!("{p}-hist"),
            title: "round-trip histogram (count per bucket, log axis)".into(),
            x_desc: "round trip (us, log)".into(),
            y_desc: "round trips (count per bucket)".into(),
            y_scale: 1.0,
            log_x: true,
            log_y: false,
            series: vec![series("count", pts, Stroke::Thick, 0)],
        });
    }
    out
}

/// The percentile and cumulative curves of a result, and where they come from in words.
fn curves(l: &LatencyResult) -> (Vec<Series>, Vec<Series>, &'static str) {
    // Idle and loaded distributions are kept as percentiles only.
    let full = !l.histogram.is_empty() && l.under_load.is_none();
    // Without --histogram the result keeps only its percentiles: drawn through them, and said
    // (docs/report.md names the flag that keeps every bucket).
    let source = if full {
        "full histogram"
    } else {
        "percentiles only"
    };
    let (pct, cdf) = if let Some(u) = &l.under_load {
        (
            vec![
                series("idle", pct_from_stats(&u.idle_rtt, 0), Stroke::Thick, 2),
                series(
                    "under load",
                    pct_from_stats(&u.loaded_rtt, 0),
                    Stroke::Thick,
                    3,
                ),
            ],
            vec![
                series("idle", cdf_from_stats(&u.idle_rtt), Stroke::Thick, 2),
                series(
                    "under load",
                    cdf_from_stats(&u.loaded_rtt),
                    Stroke::Thick,
                    3,
                ),
            ],
        )
    } else if full {
        (
            vec![series(
                "round trip",
                hist_pct(&l.histogram),
                Stroke::Thick,
                0,
            )],
            vec![series(
                "round trip",
                hist_cdf(&l.histogram),
                Stroke::Thick,
                0,
            )],
        )
    } else {
        (
            vec![series(
                "round trip",
                pct_from_stats(&l.rtt, l.replies),
                Stroke::Thick,
                0,
            )],
            vec![series(
                "round trip",
                cdf_from_stats(&l.rtt),
                Stroke::Thick,
                0,
            )],
        )
    };
    (pct, cdf, source)
}

/// Round trip against percentile on the nines scale ([`charts::nines`]) from a result's
/// percentiles; the maximum at one in `count` when there were more than 10 000.
fn pct_from_stats(s: &LatencyStats, count: u64) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = [
        (0.5, s.p50_us),
        (0.9, s.p90_us),
        (0.99, s.p99_us),
        (0.999, s.p999_us),
        (0.9999, s.p9999_us),
    ]
    .into_iter()
    .map(|(q, us)| (charts::nines(q), us))
    .collect();
    if count > 10_000 {
        v.push(((count as f64).log10(), s.max_us));
    }
    v.retain(|p| p.1 > 0.0);
    v
}

/// Round trip against percentile on the nines scale, bucket by bucket: each bucket's upper
/// edge at the fraction of round trips up to it (the last at one in the total).
fn hist_pct(h: &[HistogramBucket]) -> Vec<(f64, f64)> {
    let total = h.iter().map(|b| b.count).sum::<u64>().max(1);
    let last = (total as f64).log10().max(1.0);
    let mut below = 0u64;
    let mut out: Vec<(f64, f64)> = Vec::new();
    for b in h.iter().filter(|b| b.le_us > 0.0 && b.count > 0) {
        below += b.count;
        let x = if below >= total {
            last
        } else {
            charts::nines(below as f64 / total as f64).min(last)
        };
        out.push((x, b.le_us));
    }
    out
}

fn hist_cdf(h: &[HistogramBucket]) -> Vec<(f64, f64)> {
    let total: u64 = h.iter().map(|b| b.count).sum::<u64>().max(1);
    let mut below = 0u64;
    h.iter()
        .filter(|b| b.le_us > 0.0)
        .map(|b| {
            below += b.count;
            (b.le_us, below as f64 * 100.0 / total as f64)
        })
        .collect()
}

/// Cumulative fraction (%) against microseconds from a distribution's percentiles.
pub(crate) fn cdf_from_stats(s: &LatencyStats) -> Vec<(f64, f64)> {
    let mut v = vec![
        (s.min_us, 0.0),
        (s.p50_us, 50.0),
        (s.p90_us, 90.0),
        (s.p99_us, 99.0),
        (s.p999_us, 99.9),
        (s.p9999_us, 99.99),
        (s.max_us, 100.0),
    ];
    v.retain(|p| p.0 > 0.0);
    v
}

impl KindCharts for LatencySpec {
    fn what(&self, r: &RunResult) -> String {
        match r.detail.latency().map(|l| l.transport) {
            Some(hakaru_model::LatencyTransport::Udp) => "UDP latency".into(),
            Some(hakaru_model::LatencyTransport::Tcp) => "TCP latency".into(),
            None => "latency".into(),
        }
    }
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart> {
        charts(p, r)
    }
    /// Each input's round-trip distribution, cumulative, on shared axes.
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart> {
        vec![Chart {
            id: "overlay-cdf".into(),
            title: "round-trip distribution of each input (cumulative, log axis)".into(),
            x_desc: "round trip (us, log)".into(),
            y_desc: "requests at or below (%)".into(),
            y_scale: 1.0,
            log_x: true,
            log_y: false,
            series: runs
                .iter()
                .enumerate()
                .filter_map(|(i, (label, r))| {
                    Some(Series {
                        name: label.to_string(),
                        points: cdf_from_stats(&r.detail.latency()?.rtt),
                        stroke: Stroke::Thick,
                        color: i,
                        legend: true,
                    })
                })
                .collect(),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_every_bucket_of_the_histogram() {
        let h: Vec<HistogramBucket> =
            [(10.0, 500), (20.0, 400), (40.0, 90), (80.0, 0), (900.0, 10)]
                .map(|(le_us, count)| HistogramBucket { le_us, count })
                .into();
        let p = hist_pct(&h);
        // One point per bucket that holds round trips, in order.
        assert_eq!(p.len(), 4, "{p:?}");
        assert!((p[0].0 - charts::nines(0.5)).abs() < 1e-9 && p[0].1 == 10.0);
        assert!(
            (p[1].0 - 1.0).abs() < 1e-9 && p[1].1 == 20.0,
            "p90 at 20 us"
        );
        assert!(
            (p[2].0 - 2.0).abs() < 1e-9 && p[2].1 == 40.0,
            "p99 at 40 us"
        );
        // The last bucket, at one in the total (1000 round trips: three nines).
        assert!((p[3].0 - 3.0).abs() < 1e-9 && p[3].1 == 900.0);
        let c = hist_cdf(&h);
        assert_eq!(c.last(), Some(&(900.0, 100.0)));
    }
}
