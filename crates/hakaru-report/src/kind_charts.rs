//! How each kind draws in the HTML report: the [`KindCharts`] trait, implemented once per
//! kind in that kind's charts module (tcp, udp and http in `bulk_charts`, the others in
//! `NAME_charts`), and the chart builders those modules share; `kinds::of` picks the kind.

use hakaru_model::{FlowDir, IntervalRecord, RunResult};

use crate::charts::{self, Chart, Series, Stroke};

/// How one kind draws.
pub(crate) trait KindCharts {
    /// What a result of this kind measured, in words: the start of its section's heading and
    /// of its charts' titles.
    fn what(&self, r: &RunResult) -> String;
    /// The charts of one result; `p` prefixes their ids.
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart>;
    /// Several results of this kind on shared axes, each series labelled with its input's
    /// name (before/after comparisons).
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart>;
}

/// Interval length in seconds (never zero).
pub(crate) fn secs(rec: &IntervalRecord) -> f64 {
    (rec.end - rec.start).max(1e-9)
}

pub(crate) fn dir_words(d: FlowDir) -> &'static str {
    match d {
        FlowDir::Up => "client -> server",
        FlowDir::Down => "server -> client",
    }
}

/// Scales every series of `c` by the unit its largest value asks for.
pub(crate) fn scale_rates(c: &mut Chart, unit: &str, what: &str) {
    let max = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let (u, div) = charts::rate_unit(max, unit);
    for s in &mut c.series {
        for p in &mut s.points {
            p.1 /= div;
        }
    }
    c.y_desc = format!("{what} ({u})");
    c.y_scale = div;
}

/// A time chart of rates (bit/s, or packets/s when `pps`), in the unit its values ask for.
pub(crate) fn rate_chart(
    id: String,
    title: String,
    x_desc: &str,
    series: Vec<Series>,
    pps: bool,
) -> Chart {
    let mut c = Chart {
        id,
        title,
        x_desc: x_desc.into(),
        y_desc: String::new(),
        y_scale: 1.0,
        log_x: false,
        log_y: false,
        series,
    };
    scale_rates(
        &mut c,
        if pps { "pkt/s" } else { "bit/s" },
        if pps { "packets" } else { "rate" },
    );
    c
}

/// A chart with one thick series.
pub(crate) fn single(
    id: String,
    title: String,
    y: &str,
    name: &str,
    points: Vec<(f64, f64)>,
) -> Chart {
    Chart {
        id,
        title,
        x_desc: "time (s)".into(),
        y_desc: y.into(),
        y_scale: 1.0,
        log_x: false,
        log_y: false,
        series: vec![Series {
            name: name.into(),
            points,
            stroke: Stroke::Thick,
            color: 0,
            legend: false,
        }],
    }
}
