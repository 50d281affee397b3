//! The chart of a raw transfer (sink or source): its rate over time.

use hakaru_model::{RawSpec, RunResult};

use crate::charts::{step, Chart};
use crate::kind_charts::{scale_rates, single, KindCharts};

/// The transfer rate over time.
fn charts(p: &str, r: &RunResult) -> Vec<Chart> {
    let pts = r
        .intervals
        .iter()
        .filter_map(|rec| {
            let s = rec.sums.first()?;
            Some(step(rec, s.receiver_bps.or(s.sender_bps)?.0))
        })
        .flatten()
        .collect();
    let mut c = single(
        format!("{p}-rate"),
        "rate over time".into(),
        "",
        "rate",
        pts,
    );
    scale_rates(&mut c, "bit/s", "rate");
    vec![c]
}

impl KindCharts for RawSpec {
    fn what(&self, _r: &RunResult) -> String {
        "raw transfer".into()
    }
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart> {
        charts(p, r)
    }
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart> {
        crate::bulk_charts::overlay(runs)
    }
}
