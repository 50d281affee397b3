//! One line's worth of a result: its kind, peer, direction, flows and headline figure. The
//! archive indexes runs by these, `hakaru history` lists them, and `--push-gateway` pushes them.

use hakaru_model::capacity::FindMaxResult;
use hakaru_model::config::Direction;
use hakaru_model::{FlowDir, RunResult};

use crate::input::Content;

/// The figures a list row shows for a result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    /// tcp, udp, pps, latency, connect, http, sink, source, quick, plan, find_max.
    pub kind: String,
    /// The server or peer the run measured (`host:port`, a URL, a plan file).
    pub peer: String,
    /// up, down, bidir; empty where a kind has no direction.
    pub direction: String,
    /// Flows (connections) per direction.
    pub flows: Option<u32>,
    /// The headline: received bit/s (tcp, udp, http, sink, source), received datagrams/s
    /// (pps), RTT p50 in µs (latency), connections/s (connect), the found rate (find-max).
    pub headline: Option<f64>,
    /// Unit of the headline: `bit/s`, `pkt/s`, `us`, `conn/s`.
    pub unit: String,
    /// When the run started, Unix seconds (absent for `quick`, which has no start time).
    pub started_at: Option<f64>,
}

/// What a run measured against: its server, or `embedded` for the in-process loopback server
/// (whose port changes every run, so runs against it still line up in a trend).
pub const EMBEDDED_PEER: &str = "embedded";

fn peer_of(server: &str, embedded: bool) -> String {
    if embedded {
        EMBEDDED_PEER.into()
    } else {
        server.into()
    }
}

/// A direction as a list row names it.
pub(crate) fn direction_word(d: Direction) -> &'static str {
    match d {
        Direction::Forward => "up",
        Direction::Reverse => "down",
        Direction::Bidir => "bidir",
    }
}

/// The bits per second the receivers counted, summed over the directions (none without
/// totals).
pub(crate) fn received_bps(r: &RunResult) -> Option<f64> {
    (!r.totals.is_empty()).then(|| r.totals.iter().map(|t| t.receiver.bits_per_second.0).sum())
}

/// The summary of one test result.
pub fn of_run(r: &RunResult) -> Summary {
    let mut s = Summary {
        kind: r.spec.name().to_string(),
        peer: peer_of(&r.server, r.embedded_server),
        started_at: Some(r.started_at_unix),
        ..Summary::default()
    };
    let mut row = crate::kind_text::Row::default();
    crate::kinds::of(&r.spec).row(r, &mut row);
    s.direction = row.direction;
    s.flows = row.flows;
    s.headline = row.headline;
    s.unit = row.unit;
    if let Some(p) = row.peer {
        s.peer = p;
    }
    s
}

/// The summary of a `--find-max` search: the highest rate that met the loss target.
pub fn of_find_max(r: &FindMaxResult) -> Summary {
    let direction = match r.directions.as_slice() {
        [FlowDir::Up] => "up",
        [FlowDir::Down] => "down",
        _ => "bidir",
    };
    Summary {
        kind: format!("{}-find-max", r.kind),
        peer: r.server.clone(),
        direction: direction.into(),
        flows: Some(r.flows),
        headline: r.best,
        unit: if r.unit == "datagrams/s" {
            "pkt/s".into()
        } else {
            r.unit.clone()
        },
        started_at: None,
    }
}

/// The summary of any result document a report reads.
pub fn of_content(c: &Content) -> Summary {
    match c {
        Content::Run(r) => of_run(r),
        Content::Quick(q) => {
            // The first line is the one-flow TCP rate: the figure people quote.
            let first = q.lines.iter().find(|l| l.error.is_none());
            Summary {
                kind: "quick".into(),
                peer: peer_of(&q.server, q.embedded_server),
                headline: first.map(|l| l.value),
                unit: first.map(|l| unit_of(&l.unit)).unwrap_or_default(),
                started_at: q.results.iter().flatten().map(|r| r.started_at_unix).next(),
                ..Summary::default()
            }
        }
        Content::Mesh(m) => Summary {
            kind: "mesh".into(),
            peer: format!("{} hosts", m.hosts.len()),
            // The worst pair's loss: what a fleet's history is read for.
            headline: m.worst_loss().map(|l| l * 100.0),
            unit: "%".into(),
            started_at: (m.at_unix > 0.0).then_some(m.at_unix),
            ..Summary::default()
        },
        Content::Plan(p) => {
            // The first step's receivers together: what the plan moved.
            let step = p.steps.first();
            let (headline, unit) = match step {
                Some(s) if s.find_max.is_some() => {
                    let f = s.find_max.as_ref().map(of_find_max).unwrap_or_default();
                    (f.headline, f.unit)
                }
                Some(s) if s.kind == "pps" => (
                    s.aggregates
                        .iter()
                        .map(|a| a.received_pps)
                        .sum::<Option<f64>>(),
                    "pkt/s".to_string(),
                ),
                Some(s) if !s.aggregates.is_empty() => (
                    Some(s.aggregates.iter().map(|a| a.received_bps).sum()),
                    "bit/s".to_string(),
                ),
                _ => (None, String::new()),
            };
            Summary {
                kind: "plan".into(),
                peer: p.plan.clone(),
                flows: step.map(|s| s.aggregates.iter().map(|a| a.flows).sum()),
                headline,
                unit,
                started_at: Some(p.started_at_unix),
                ..Summary::default()
            }
        }
    }
}

/// Quick lines say `Gbit/s`-style units; the archive keeps base units.
fn unit_of(u: &str) -> String {
    match u {
        "datagrams/s" | "pps" => "pkt/s".into(),
        other => other.into(),
    }
}

/// The headline as a person reads it: `9.41 Gbit/s`, `1.23 Mpkt/s`, `41.2 us`.
pub fn headline_text(value: Option<f64>, unit: &str) -> String {
    match value {
        None => "-".into(),
        Some(v) => match unit {
            "pkt/s" => scaled(v, "pkt/s"),
            "conn/s" => scaled(v, "conn/s"),
            _ => crate::compare::value(v, unit),
        },
    }
}

/// `1.23 M` style scaling for counts per second.
fn scaled(v: f64, unit: &str) -> String {
    let (div, p) = if v >= 1e9 {
        (1e9, "G")
    } else if v >= 1e6 {
        (1e6, "M")
    } else if v >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let x = v / div;
    let digits = if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$} {p}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headlines_read_like_people_write_them() {
        assert_eq!(headline_text(Some(9.41e9), "bit/s"), "9.41 Gbit/s");
        assert_eq!(headline_text(Some(1_234_567.0), "pkt/s"), "1.23 Mpkt/s");
        assert_eq!(headline_text(Some(41.25), "us"), "41.2 us");
        assert_eq!(headline_text(Some(15_300.0), "conn/s"), "15.3 kconn/s");
        assert_eq!(headline_text(None, "bit/s"), "-");
    }
}
