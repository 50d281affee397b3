//! The charts of bulk results (tcp, udp and pps, and http's goodput): rate over time per
//! direction with each flow, the sums and both ends' interfaces, then retransmits (TCP) or
//! loss and jitter (UDP).

use hakaru_model::{FlowDir, HttpSpec, RunResult, TcpSpec, TestSpec, UdpMode, UdpSpec};

use crate::charts::{step, Chart, Series, Stroke};
use crate::kind_charts::{dir_words, rate_chart, secs, single, KindCharts};

fn is_pps(r: &RunResult) -> bool {
    matches!(&r.spec, TestSpec::Udp(u) if u.mode == UdpMode::Pps)
}

fn dirs(r: &RunResult) -> Vec<FlowDir> {
    let mut d: Vec<FlowDir> = r.totals.iter().map(|t| t.dir).collect();
    if d.is_empty() {
        for rec in &r.intervals {
            for s in &rec.sums {
                if !d.contains(&s.dir) {
                    d.push(s.dir);
                }
            }
        }
    }
    d
}

/// Rate over time per direction (each flow, the sums, both ends' interfaces) and a second
/// pane: retransmits (TCP) or loss and jitter (UDP).
fn charts(p: &str, r: &RunResult) -> Vec<Chart> {
    let pps = is_pps(r);
    let udp = matches!(r.spec, TestSpec::Udp(_));
    let mut out = Vec::new();
    for dir in dirs(r) {
        out.push(rate_over_time(p, r, dir, pps));
        // The probes' round trip right under the (first) rate chart, on its time axis.
        if out.len() == 1 {
            out.extend(crate::probe_charts::chart(p, r));
        }
        out.extend(second_pane(p, r, dir, udp));
    }
    out
}

/// One direction's rate over time: each flow thin, the sums thick (sender dashed), and the
/// interfaces of the ends that send and receive it.
fn rate_over_time(p: &str, r: &RunResult, dir: FlowDir, pps: bool) -> Chart {
    let d = dir.label();
    let mut series = Vec::new();
    let flow_ids: Vec<u32> = r
        .flows
        .iter()
        .filter(|f| f.dir == dir)
        .map(|f| f.id)
        .collect();
    for (k, id) in flow_ids.iter().enumerate() {
        let pts: Vec<(f64, f64)> = r
            .intervals
            .iter()
            .filter_map(|rec| {
                let f = rec.flows.iter().find(|f| f.id == *id && f.dir == dir)?;
                let v = if pps {
                    f.udp.map(|u| u.datagrams as f64 / secs(rec))?
                } else {
                    f.receiver_bps?.0
                };
                Some(step(rec, v))
            })
            .flatten()
            .collect();
        series.push(Series {
            name: format!("flow {id}"),
            points: pts,
            stroke: Stroke::Thin,
            color: 2 + k,
            legend: false,
        });
    }
    let sum = |rx: bool| -> Vec<(f64, f64)> {
        r.intervals
            .iter()
            .filter_map(|rec| {
                let s = rec.sums.iter().find(|s| s.dir == dir)?;
                let v = match (pps, rx) {
                    (true, true) => s.udp.map(|u| u.datagrams as f64 / secs(rec))?,
                    (true, false) => s.sender_datagrams? as f64 / secs(rec),
                    (false, true) => s.receiver_bps?.0,
                    (false, false) => s.sender_bps?.0,
                };
                Some(step(rec, v))
            })
            .flatten()
            .collect()
    };
    series.push(Series {
        name: "received, all flows".into(),
        points: sum(true),
        stroke: Stroke::Thick,
        color: 0,
        legend: true,
    });
    series.push(Series {
        name: "sent, all flows".into(),
        points: sum(false),
        stroke: Stroke::Dashed,
        color: 1,
        legend: true,
    });
    series.extend(nic_series(r, dir, pps));
    rate_chart(
        format!("{p}-rate-{d}"),
        format!(
            "{}: {} over time ({} flow(s); receiver per flow thin, sum thick, sender dashed)",
            dir_words(dir),
            if pps { "packet rate" } else { "rate" },
            flow_ids.len()
        ),
        "time (s)",
        series,
        pps,
    )
}

/// The interfaces each end saw, on the rate chart's axis: the receiver's rx is the wire
/// truth. Only the end that receives `dir` (rx) and the one that sends it (tx).
fn nic_series(r: &RunResult, dir: FlowDir, pps: bool) -> Vec<Series> {
    let mut series = Vec::new();
    for (end, pick, rx, color) in [
        ("server", true, true, 3usize),
        ("server", true, false, 4),
        ("client", false, true, 5),
        ("client", false, false, 6),
    ] {
        let pts: Vec<(f64, f64)> = r
            .intervals
            .iter()
            .filter_map(|rec| {
                let n = if pick { rec.server_nic } else { rec.client_nic }?;
                let v = match (pps, rx) {
                    (true, true) => n.rx_packets as f64,
                    (true, false) => n.tx_packets as f64,
                    (false, true) => n.rx_bytes as f64 * 8.0,
                    (false, false) => n.tx_bytes as f64 * 8.0,
                };
                Some(step(rec, v / secs(rec)))
            })
            .flatten()
            .collect();
        // Only the end that receives this direction (rx) and the one that sends it (tx).
        let relevant = match dir {
            FlowDir::Up => (pick && rx) || (!pick && !rx),
            FlowDir::Down => (!pick && rx) || (pick && !rx),
        };
        if relevant && !pts.is_empty() {
            series.push(Series {
                name: format!("{end} NIC {}", if rx { "rx" } else { "tx" }),
                points: pts,
                stroke: Stroke::Medium,
                color,
                legend: true,
            });
        }
    }
    series
}

/// The second pane of a direction: retransmits (TCP) or loss and jitter (UDP).
fn second_pane(p: &str, r: &RunResult, dir: FlowDir, udp: bool) -> Vec<Chart> {
    let d = dir.label();
    let mut out = Vec::new();
    if udp {
        let loss: Vec<(f64, f64)> = r
            .intervals
            .iter()
            .filter_map(|rec| {
                let u = rec.sums.iter().find(|s| s.dir == dir)?.udp?;
                let expected = u.lost + u.datagrams.saturating_sub(u.duplicates);
                let pct = if expected > 0 {
                    u.lost as f64 * 100.0 / expected as f64
                } else {
                    0.0
                };
                Some(step(rec, pct))
            })
            .flatten()
            .collect();
        let jitter: Vec<(f64, f64)> = r
            .intervals
            .iter()
            .filter_map(|rec| {
                let u = rec.sums.iter().find(|s| s.dir == dir)?.udp?;
                Some(step(rec, u.jitter_ms?))
            })
            .flatten()
            .collect();
        out.push(single(
            format!("{p}-loss-{d}"),
            format!("{}: loss per interval", dir_words(dir)),
            "lost (%)",
            "loss",
            loss,
        ));
        if !jitter.is_empty() {
            out.push(single(
                format!("{p}-jitter-{d}"),
                format!("{}: jitter per interval", dir_words(dir)),
                "jitter (ms)",
                "jitter",
                jitter,
            ));
        }
    } else {
        let retr: Vec<(f64, f64)> = r
            .intervals
            .iter()
            .filter_map(|rec| {
                let s = rec.sums.iter().find(|s| s.dir == dir)?;
                Some(step(rec, s.retransmits? as f64))
            })
            .flatten()
            .collect();
        out.push(single(
            format!("{p}-retr-{d}"),
            format!(
                "{}: TCP retransmits per interval (all flows)",
                dir_words(dir)
            ),
            "retransmits (segments)",
            "retransmits",
            retr,
        ));
    }
    out
}

/// Each input's received rate per direction on shared axes.
pub(crate) fn overlay(runs: &[(&str, &RunResult)]) -> Vec<Chart> {
    let mut out = Vec::new();
    let Some((_, first)) = runs.first() else {
        return out;
    };
    let pps = is_pps(first);
    for dir in [FlowDir::Up, FlowDir::Down] {
        let series: Vec<Series> = runs
            .iter()
            .enumerate()
            .map(|(i, (label, r))| Series {
                name: label.to_string(),
                points: r
                    .intervals
                    .iter()
                    .filter_map(|rec| {
                        let s = rec.sums.iter().find(|s| s.dir == dir)?;
                        let v = if pps {
                            s.udp.map(|u| u.datagrams as f64 / secs(rec))?
                        } else {
                            s.receiver_bps?.0
                        };
                        Some(step(rec, v))
                    })
                    .flatten()
                    .collect(),
                stroke: Stroke::Thick,
                color: i,
                legend: true,
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        out.push(rate_chart(
            format!("overlay-{}", dir.label()),
            format!("{}: received by each input", dir_words(dir)),
            "time (s)",
            series,
            pps,
        ));
    }
    out
}

/// "TCP 4 flows, client -> server" and the like.
fn what(r: &RunResult) -> String {
    let kind = if is_pps(r) {
        "pps"
    } else if matches!(r.spec, TestSpec::Udp(_)) {
        "UDP"
    } else {
        "TCP"
    };
    let d = dirs(r);
    let n = d
        .first()
        .map_or(0, |d0| r.flows.iter().filter(|f| f.dir == *d0).count());
    let flows = if n == 1 {
        "1 flow".to_string()
    } else {
        format!("{n} flows")
    };
    match d.as_slice() {
        [one] => format!("{kind} {flows}, {}", dir_words(*one)),
        _ => format!("{kind} {flows} each way"),
    }
}

impl KindCharts for TcpSpec {
    fn what(&self, r: &RunResult) -> String {
        what(r)
    }
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart> {
        charts(p, r)
    }
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart> {
        overlay(runs)
    }
}

impl KindCharts for UdpSpec {
    fn what(&self, r: &RunResult) -> String {
        what(r)
    }
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart> {
        charts(p, r)
    }
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart> {
        overlay(runs)
    }
}

impl KindCharts for HttpSpec {
    fn what(&self, _r: &RunResult) -> String {
        "HTTP".into()
    }
    /// Per connection and summed goodput; HTTP has no retransmit or loss pane.
    fn charts(&self, p: &str, r: &RunResult) -> Vec<Chart> {
        charts(p, r)
            .into_iter()
            .filter(|c| c.id.contains("-rate-"))
            .collect()
    }
    fn overlay(&self, runs: &[(&str, &RunResult)]) -> Vec<Chart> {
        overlay(runs)
    }
}
