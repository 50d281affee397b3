//! Human text for `hakaru capacity` (RFC 9946): the opening line, one line per sub-interval
//! as the receiver counted it (the IP-layer rate, loss, reordering, duplicates, one-way delay
//! variation and RTT variation), the summary over the test, and the headline: the maximum
//! IP-layer capacity with its layer 2 and layer 1 equivalents.

use std::fmt::Write;

use hakaru_model::{RunResult, TestSpec, UdpstResult, UdpstSpec, UdpstSubInterval};

use crate::compare_metrics::{Better, KindMetrics, Metrics, Scale};
use crate::text_parts::RULE;
use crate::View;

/// The line that opens a run.
pub fn header(spec: &UdpstSpec, embedded: bool) -> String {
    let row = match (spec.row, spec.start_only) {
        (Some(r), false) => format!("fixed sending-rate row {r}"),
        (Some(r), true) => format!("rate search from row {r}"),
        (None, _) => "rate search".into(),
    };
    format!(
        "hakaru capacity {}{} (RFC 9946, OB-UDPST protocol 20): {}, {} s, {}, algorithm {}{}{}\n",
        spec.server,
        if embedded {
            ", embedded loopback server"
        } else {
            ""
        },
        spec.direction.as_str(),
        spec.duration_s,
        row,
        if spec.algorithm_c { "C" } else { "B" },
        if spec.jumbo { "" } else { ", no jumbo sizes" },
        if spec.traditional {
            ", 1500-byte MTU"
        } else {
            ""
        },
    )
}

fn range(v: Option<[u32; 3]>) -> String {
    v.map_or("-".into(), |[a, b, c]| format!("{a}/{b}/{c}"))
}

/// The column heading of the sub-interval lines.
pub fn heading() -> String {
    format!(
        "{:>4} {:>8} {:>12} {:>8} {:>6} {:>6} {:>6} {:>14} {:>10}\n",
        "#", "end s", "Mbit/s L3", "dgrams", "loss", "ooo", "dup", "owd var ms", "rtt var ms"
    )
}

/// One sub-interval line.
pub fn sub_interval(i: &UdpstSubInterval) -> String {
    format!(
        "{:>4} {:>8.2} {:>12.2} {:>8} {:>6} {:>6} {:>6} {:>14} {:>10}\n",
        i.index,
        i.end_s,
        i.ip_mbps,
        i.datagrams,
        i.loss,
        i.reordered,
        i.duplicated,
        range(i.delay_var_ms),
        i.rtt_var_ms.map_or("-".into(), |[a, b]| format!("{a}/{b}")),
    )
}

fn sums(x: &UdpstResult) -> String {
    format!(
        "summary: mean {:.2} Mbit/s (L3), delivered {:.2} %, loss/ooo/dup {}/{}/{}, one-way delay variation {} ms, RTT variation {} ms (min/avg/max), minimum RTT {}\n",
        x.mean_ip_mbps,
        x.delivered_percent,
        x.loss,
        x.reordered,
        x.duplicated,
        range(x.delay_var_ms),
        range(x.rtt_var_ms),
        x.rtt_min_ms.map_or("-".into(), |v| format!("{v} ms")),
    )
}

/// The headline.
pub fn headline(r: &RunResult) -> String {
    let Some(x) = r.detail.udpst() else {
        return String::new();
    };
    format!(
        "capacity: maximum {:.2} Mbit/s at L3/IP ({:.2} at L2, {:.2} at L1), {}, sub-interval {} of {}\n",
        x.max_ip_capacity_mbps,
        x.max_l2_mbps,
        x.max_l1_mbps,
        x.direction,
        x.max_index,
        x.sub_intervals.len(),
    )
}

/// The sub-interval table as the run printed it live (a report's full summary has no live
/// lines before it); empty for other kinds.
pub fn table(r: &RunResult) -> String {
    let Some(x) = r.detail.udpst() else {
        return String::new();
    };
    let mut s = heading();
    for i in &x.sub_intervals {
        s.push_str(&sub_interval(i));
    }
    s
}

/// The summary after the sub-interval lines (printed live, or replayed from a saved result):
/// the sums, the notes, the headline.
pub fn summary(r: &RunResult) -> String {
    let Some(x) = r.detail.udpst() else {
        return String::new();
    };
    let mut s = String::from(RULE);
    s.push('\n');
    s.push_str(&sums(x));
    if x.ended_by_watchdog {
        s.push_str(
            "note: the server went silent; the test ended by the watchdog, not the stop exchange\n",
        );
    }
    if r.interrupted {
        s.push_str("  (interrupted: the figures cover the time it ran)\n");
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s.push_str(&headline(r));
    s
}

impl crate::kind_text::KindText for UdpstSpec {
    fn header(&self, _server: &str, embedded: bool) -> String {
        header(self, embedded)
    }
    fn interval_heading(&self, _view: &View) -> String {
        heading()
    }
    fn summary(&self, r: &RunResult, _view: &View) -> String {
        summary(r)
    }
    fn sums_and_headline(&self, r: &RunResult, _view: &View) -> String {
        r.detail.udpst().map(sums).unwrap_or_default() + &headline(r)
    }
    fn row(&self, r: &RunResult, s: &mut crate::kind_text::Row) {
        s.direction = self.direction.as_str().into();
        s.flows = Some(1);
        s.headline = r.detail.udpst().map(|x| x.max_ip_capacity_mbps * 1e6);
        s.unit = "bit/s".into();
        s.peer = Some(self.server.clone());
    }
    fn csv_totals(&self, r: &RunResult) -> String {
        crate::csv::bulk_totals(r)
    }
}

/// The capacity figures, and for two fixed-row runs the loss. In a search the server raises
/// the rate until it sees loss, so a search's loss and the climb of its sub-interval rates say
/// how the search went, not how the path changed: a search is judged on its maximum and mean
/// alone, without the sub-interval spread as noise. Delay variation and RTT come in whole
/// milliseconds from the protocol: a change of one unit is a resolution step, not a verdict,
/// so they stay out.
impl KindMetrics for UdpstSpec {
    fn metrics(&self, m: &mut Metrics<'_>) {
        let (b, n) = (m.b, m.n);
        let both = |f: &dyn Fn(&RunResult) -> Option<f64>| Some((f(b)?, f(n)?));
        let fixed = |r: &RunResult| match &r.spec {
            TestSpec::Udpst(s) => s.row.is_some() && !s.start_only,
            _ => false,
        };
        let fixed_rows = fixed(b) && fixed(n);
        let subs = |r: &RunResult| -> Vec<f64> {
            r.detail
                .udpst()
                .iter()
                .flat_map(|u| u.sub_intervals.iter().map(|s| s.ip_mbps * 1e6))
                .collect()
        };
        m.push(
            "maximum IP capacity".into(),
            "bit/s",
            (Better::Higher, Scale::Relative),
            both(&|r| Some(r.detail.udpst()?.max_ip_capacity_mbps * 1e6)),
            None,
        );
        m.push(
            "mean IP rate".into(),
            "bit/s",
            (Better::Higher, Scale::Relative),
            both(&|r| Some(r.detail.udpst()?.mean_ip_mbps * 1e6)),
            fixed_rows.then(|| (subs(b), subs(n))),
        );
        if fixed_rows {
            m.push(
                "loss".into(),
                "%",
                (Better::Lower, Scale::Absolute),
                both(&|r| Some(100.0 - r.detail.udpst()?.delivered_percent)),
                None,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_interval_lines_and_headline() {
        let row = UdpstSubInterval {
            index: 2,
            end_s: 2.0,
            seconds: 1.0,
            ip_mbps: 99.5,
            datagrams: 10_000,
            loss: 3,
            delay_var_ms: Some([0, 1, 4]),
            ..Default::default()
        };
        let line = sub_interval(&row);
        assert!(line.contains("99.50") && line.contains("0/1/4"), "{line}");
        let x = UdpstResult {
            direction: "down".into(),
            max_ip_capacity_mbps: 99.5,
            max_l2_mbps: 101.0,
            max_l1_mbps: 101.5,
            max_index: 2,
            sub_intervals: vec![row],
            ..Default::default()
        };
        let mut r = crate::tests::fixture("tcp_p2_omit1");
        r.detail = hakaru_model::KindDetail::Udpst(Box::new(x));
        assert_eq!(
            headline(&r),
            "capacity: maximum 99.50 Mbit/s at L3/IP (101.00 at L2, 101.50 at L1), down, sub-interval 2 of 1\n"
        );
    }
}
