//! The capacity kind's charts (`hakaru capacity`): the IP-layer rate of every sub-interval.

use hakaru_model::{RunResult, UdpstSpec};

use crate::charts::{Chart, Series, Stroke};
use crate::kind_charts::KindCharts;

impl KindCharts for UdpstSpec {
    fn what(&self, _r: &RunResult) -> String {
        format!("Maximum IP-layer capacity ({})", self.direction.as_str())
    }
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart> {
        vec![rate_chart(format!("{p}-capacity-rate"), &[("L3/IP", r)])]
    }
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart> {
        vec![rate_chart("overlay-capacity".into(), runs)]
    }
}

fn rate_chart(id: String, runs: &[(&str, &RunResult)]) -> Chart {
    let series = runs
        .iter()
        .enumerate()
        .map(|(i, (label, r))| Series {
            name: (*label).into(),
            points: r.detail.udpst().map_or_else(Vec::new, |x| {
                x.sub_intervals
                    .iter()
                    .map(|s| (s.end_s, s.ip_mbps))
                    .collect()
            }),
            stroke: Stroke::Thick,
            color: i,
            legend: true,
        })
        .collect();
    Chart {
        id,
        title: "IP-layer rate of each sub-interval".into(),
        x_desc: "time (s)".into(),
        y_desc: "Mbit/s".into(),
        y_scale: 1.0,
        log_x: false,
        log_y: false,
        series,
    }
}
