//! The charts of a responsiveness result: goodput and its moving average with the
//! connections over time, and the window's RPM with its foreign and self round-trip times.

use hakaru_model::{RpmSpec, RunResult};

use crate::charts::{Chart, Series, Stroke};
use crate::kind_charts::{scale_rates, KindCharts};

fn series(name: &str, color: usize, stroke: Stroke, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: name.into(),
        points,
        stroke,
        color,
        legend: true,
    }
}

fn chart(id: String, title: &str, y: &str, series: Vec<Series>) -> Chart {
    Chart {
        id,
        title: title.into(),
        x_desc: "time (s)".into(),
        y_desc: y.into(),
        y_scale: 1.0,
        log_x: false,
        log_y: false,
        series,
    }
}

fn charts(p: &str, r: &RunResult) -> Vec<Chart> {
    let Some(x) = r.detail.rpm() else {
        return Vec::new();
    };
    let iv = &x.intervals;
    let pts = |f: &dyn Fn(&hakaru_model::RpmInterval) -> Option<f64>| -> Vec<(f64, f64)> {
        iv.iter().filter_map(|i| Some((i.end, f(i)?))).collect()
    };
    let mut goodput = chart(
        format!("{p}-rpm-rate-goodput"),
        "goodput of the load-generating connections",
        "goodput",
        vec![
            series(
                "per interval",
                0,
                Stroke::Thin,
                pts(&|i| Some(i.bits_per_second.0)),
            ),
            series(
                "moving average",
                1,
                Stroke::Thick,
                pts(&|i| (i.goodput_average.0 > 0.0).then_some(i.goodput_average.0)),
            ),
        ],
    );
    scale_rates(&mut goodput, "bit/s", "goodput");
    let conns = chart(
        format!("{p}-rpm-connections"),
        "load-generating connections",
        "connections",
        vec![series(
            "connections",
            2,
            Stroke::Thick,
            pts(&|i| Some(f64::from(i.connections))),
        )],
    );
    let rpm = chart(
        format!("{p}-rpm-rpm"),
        "responsiveness over the moving window",
        "round trips per minute",
        vec![series("RPM", 3, Stroke::Thick, pts(&|i| i.rpm))],
    );
    let times = chart(
        format!("{p}-rpm-times"),
        "probe round-trip times (trimmed means over the window)",
        "time (ms)",
        vec![
            series("foreign", 4, Stroke::Thick, pts(&|i| i.foreign_ms)),
            series("self", 5, Stroke::Dashed, pts(&|i| i.self_ms)),
        ],
    );
    vec![goodput, conns, rpm, times]
}

impl KindCharts for RpmSpec {
    fn what(&self, _r: &RunResult) -> String {
        "Responsiveness (RPM)".into()
    }
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart> {
        charts(p, r)
    }
    /// Each input's RPM on shared axes.
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart> {
        vec![chart(
            "overlay-rpm".into(),
            "responsiveness of each input",
            "round trips per minute",
            runs.iter()
                .enumerate()
                .map(|(i, (label, r))| {
                    let pts = r.detail.rpm().map_or_else(Vec::new, |x| {
                        x.intervals
                            .iter()
                            .filter_map(|iv| Some((iv.end, iv.rpm?)))
                            .collect()
                    });
                    series(label, i, Stroke::Thick, pts)
                })
                .collect(),
        )]
    }
}
