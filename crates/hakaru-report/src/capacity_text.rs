//! Human text for `--find-max`: one line per trial as it ends, then the result.

use std::fmt::Write;

use hakaru_model::capacity::{FindMaxResult, Phase, Trial};
use hakaru_model::BitRate;

/// A rate in the search's unit.
fn rate(v: f64, unit: &str) -> String {
    if unit == "bit/s" {
        BitRate(v).to_string()
    } else if v >= 1e6 {
        format!("{:.3} Mpps", v / 1e6)
    } else {
        format!("{v:.0} pps")
    }
}

/// The opening line.
pub fn header(kind: &str, server: &str, flows: u32, loss: f64, trial: f64, warmup: f64) -> String {
    format!(
        "hakaru {kind} --find-max to {server}: {flows} flow(s), the highest rate with at most {loss} % loss; trials of {trial:.1} s after {warmup:.1} s warm-up\n{:<5} {:<7} {:>13} {:>13} {:>13} {:>10} {:>10}  verdict\n",
        "trial", "phase", "asked", "sent", "received", "loss", "jitter"
    )
}

/// One trial's line; rates are all flows of a direction together.
pub fn trial_line(t: &Trial, unit: &str) -> String {
    let phase = match t.phase {
        Phase::Ramp => "ramp",
        Phase::Floor => "floor",
        Phase::Search => "search",
        Phase::Confirm => "confirm",
    };
    if let Some(e) = &t.error {
        return format!(
            "{:<5} {phase:<7} {:>13}  FAILED: {e}\n",
            t.index,
            rate(t.asked, unit)
        );
    }
    let (sent, received) = if unit == "bit/s" {
        (t.sent_bps, t.received_bps)
    } else {
        (t.sent_pps, t.received_pps)
    };
    let mut verdict = if t.met { "ok" } else { "MISSED" }.to_string();
    if t.sender_limited {
        let cpu = t
            .sender_cpu_percent
            .map(|c| format!(", sending machine {c:.0} % busy"))
            .unwrap_or_default();
        let _ = write!(verdict, " (sender short of the asked rate{cpu})");
    }
    format!(
        "{:<5} {phase:<7} {:>13} {:>13} {:>13} {:>9.3}% {:>10}  {verdict}\n",
        t.index,
        rate(t.asked, unit),
        rate(sent, unit),
        rate(received, unit),
        t.loss_percent,
        t.jitter_ms
            .map_or_else(|| "-".into(), |j| format!("{j:.3} ms")),
    )
}

/// The result: the best rate, the first miss, why the search ended.
pub fn summary(r: &FindMaxResult) -> String {
    let mut s = String::new();
    let unit = r.unit.as_str();
    let per_flow = |v: f64| {
        if r.flows > 1 {
            format!(" ({} per flow)", rate(v, unit))
        } else {
            String::new()
        }
    };
    match (r.best, r.best_per_flow) {
        (Some(b), Some(pf)) => {
            let _ = write!(
                s,
                "highest rate with at most {} % loss: {}{}",
                r.loss_target_percent,
                rate(b, unit),
                per_flow(pf)
            );
            if let Some(t) = r
                .best_trial
                .and_then(|i| r.trials.iter().find(|t| t.index == i))
            {
                let _ = write!(
                    s,
                    ", received {} with {:.3} % lost (trial {})",
                    if unit == "bit/s" {
                        rate(t.received_bps, unit)
                    } else {
                        rate(t.received_pps, unit)
                    },
                    t.loss_percent,
                    t.index
                );
            }
            s.push('\n');
        }
        _ => {
            let _ = writeln!(
                s,
                "no rate met the target of {} % loss",
                r.loss_target_percent
            );
        }
    }
    if let Some(m) = r.first_miss_per_flow {
        let t = r
            .first_miss_trial
            .and_then(|i| r.trials.iter().find(|t| t.index == i));
        let _ = writeln!(
            s,
            "first rate that missed it: {}{}{}",
            rate(m * f64::from(r.flows), unit),
            per_flow(m),
            t.map(|t| format!(", {:.3} % lost (trial {})", t.loss_percent, t.index))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        s,
        "{} trial(s); {}{}",
        r.trials.len(),
        r.outcome,
        if r.interrupted { " (interrupted)" } else { "" }
    );
    s
}
