//! The latency probes of a bulk test (`--latency-probe`) as a chart: the probes' round trip
//! per interval on the same time axis as the rate charts above it (as flent's RRUL and
//! crusader draw throughput and latency), with the idle baseline's median across it.

use hakaru_model::{LatencyStats, RunResult};

use crate::charts::{step, Chart, Series, Stroke};

/// The probes' round trip over time, if the result has probes.
pub(crate) fn chart(p: &str, r: &RunResult) -> Option<Chart> {
    let probe = r.detail.probe()?;
    let pick = |f: fn(&LatencyStats) -> f64| -> Vec<(f64, f64)> {
        r.intervals
            .iter()
            .filter_map(|rec| {
                let i = rec.probe.as_ref().filter(|i| i.replies > 0)?;
                Some(step(rec, f(&i.rtt) / 1000.0))
            })
            .flatten()
            .collect()
    };
    let (start, end) = (
        r.intervals.first().map_or(0.0, |i| i.start),
        r.intervals.last().map_or(0.0, |i| i.end),
    );
    let idle = probe.idle.rtt.p50_us / 1000.0;
    let series = |name: &str, points, stroke, color| Series {
        name: name.into(),
        points,
        stroke,
        color,
        legend: true,
    };
    Some(Chart {
        id: format!("{p}-probe-rtt"),
        title: "latency probes: round trip per interval under load (p50, p90, p99), and the idle \
                baseline's median"
            .into(),
        x_desc: "time (s)".into(),
        y_desc: "round trip (ms)".into(),
        y_scale: 1.0,
        log_x: false,
        log_y: false,
        series: vec![
            series("p50", pick(|s| s.p50_us), Stroke::Thick, 0),
            series("p90", pick(|s| s.p90_us), Stroke::Medium, 1),
            series("p99", pick(|s| s.p99_us), Stroke::Thin, 3),
            series(
                "idle p50",
                vec![(start, idle), (end, idle)],
                Stroke::Dashed,
                2,
            ),
        ],
    })
}
