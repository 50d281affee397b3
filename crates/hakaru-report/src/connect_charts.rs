//! The charts of a connection-rate result: connections per second over time, and connect
//! and transaction times as distributions.

use hakaru_model::{ConnectSpec, RunResult};

use crate::charts::{step, Chart, Series, Stroke};
use crate::kind_charts::{single, KindCharts};
use crate::latency_charts::cdf_from_stats;

/// Connections per second per interval, and the connect and transaction times as CDFs.
fn charts(p: &str, r: &RunResult) -> Vec<Chart> {
    let pts = r
        .intervals
        .iter()
        .filter_map(|rec| Some(step(rec, rec.connect.as_ref()?.connections_per_second)))
        .flatten()
        .collect();
    let mut out = vec![single(
        format!("{p}-cps"),
        "connections per second per interval".into(),
        "rate (connections/s)",
        "connections/s",
        pts,
    )];
    if let Some(c) = r.detail.connect() {
        out.push(Chart {
            id: format!("{p}-connect-cdf"),
            title: "connect and transaction time (cumulative, log axis)".into(),
            x_desc: "time (us, log)".into(),
            y_desc: "connections at or below (%)".into(),
            y_scale: 1.0,
            log_x: true,
            log_y: false,
            series: vec![
                Series {
                    name: "connect".into(),
                    points: cdf_from_stats(&c.connect_time),
                    stroke: Stroke::Thick,
                    color: 0,
                    legend: true,
                },
                Series {
                    name: "transaction".into(),
                    points: cdf_from_stats(&c.transaction_time),
                    stroke: Stroke::Thick,
                    color: 1,
                    legend: true,
                },
            ],
        });
    }
    out
}

impl KindCharts for ConnectSpec {
    fn what(&self, _r: &RunResult) -> String {
        "TCP connection rate".into()
    }
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart> {
        charts(p, r)
    }
    /// Each input's connections per second on shared axes.
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart> {
        vec![Chart {
            id: "overlay-cps".into(),
            title: "connections per second of each input".into(),
            x_desc: "time (s)".into(),
            y_desc: "rate (connections/s)".into(),
            y_scale: 1.0,
            log_x: false,
            log_y: false,
            series: runs
                .iter()
                .enumerate()
                .map(|(i, (label, r))| Series {
                    name: label.to_string(),
                    points: r
                        .intervals
                        .iter()
                        .filter_map(|rec| {
                            Some(step(rec, rec.connect.as_ref()?.connections_per_second))
                        })
                        .flatten()
                        .collect(),
                    stroke: Stroke::Thick,
                    color: i,
                    legend: true,
                })
                .collect(),
        }]
    }
}
