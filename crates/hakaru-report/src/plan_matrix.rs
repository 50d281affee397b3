//! Who sent what to whom in a plan step (issue 34): a sender x receiver matrix per direction,
//! each cell the rate its receiver got from that sender (and the loss, for UDP), shaded by
//! its share of the largest, and per receiver a bar of the total with the NIC check beside
//! it. Plain HTML and CSS (no script), every cell and bar with a `title` giving its value.

use std::fmt::Write;

use hakaru_model::plan::{PlanResult, StepResult};
use hakaru_model::{BitRate, FlowDir};

/// Escapes text for HTML (as `html::esc`, which cannot be imported from here: html uses
/// this module).
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One cell: the rate one sender's run delivered to one receiver in one direction.
struct Cell {
    value: f64,
    loss: Option<f64>,
}

fn dir_words(d: FlowDir) -> &'static str {
    match d {
        FlowDir::Up => "senders -> receivers",
        FlowDir::Down => "receivers -> senders",
    }
}

/// The figure in words: bit/s, or packets/s for a pps step.
fn value_text(v: f64, pps: bool) -> String {
    if pps {
        let (u, div) = crate::charts::rate_unit(v, "pkt/s");
        format!(
            "{} {u}",
            crate::charts::tick_text((v / div * 100.0).round() / 100.0)
        )
    } else {
        BitRate(v).to_string()
    }
}

fn cell(step: &StepResult, sender: &str, receiver: &str, dir: FlowDir, pps: bool) -> Option<Cell> {
    let run = step
        .runs
        .iter()
        .find(|r| r.sender == sender && r.receiver == receiver)?;
    let t = run.result.as_ref()?.totals.iter().find(|t| t.dir == dir)?;
    let value = if pps {
        t.udp.map(|u| u.received_pps)?
    } else {
        t.receiver.bits_per_second.0
    };
    Some(Cell {
        value,
        loss: t.udp.map(|u| u.lost_percent),
    })
}

/// The matrix of one step and direction, and the receivers' totals beside their NIC check.
fn step_dir(html: &mut String, step: &StepResult, dir: FlowDir) {
    let pps = step.kind == "pps";
    let cells: Vec<Vec<Option<Cell>>> = step
        .senders
        .iter()
        .map(|s| {
            step.receivers
                .iter()
                .map(|r| cell(step, s, r, dir, pps))
                .collect()
        })
        .collect();
    let max = cells
        .iter()
        .flatten()
        .flatten()
        .map(|c| c.value)
        .fold(0.0f64, f64::max);
    if max <= 0.0 {
        return;
    }
    let _ = writeln!(
        html,
        "<table class=\"matrix\"><caption>step {} ({}), {}: {} received per sender and receiver{}</caption><tr><th>sender \\ receiver</th>",
        step.index,
        esc(&step.name),
        dir_words(dir),
        if pps { "packets/s" } else { "rate" },
        if cells.iter().flatten().flatten().any(|c| c.loss.is_some()) {
            ", with loss"
        } else {
            ""
        }
    );
    for r in &step.receivers {
        let _ = write!(html, "<th>{}</th>", esc(r));
    }
    html.push_str("</tr>\n");
    for (s, row) in step.senders.iter().zip(&cells) {
        let _ = write!(html, "<tr><th>{}</th>", esc(s));
        for (r, c) in step.receivers.iter().zip(row) {
            let Some(c) = c else {
                html.push_str("<td class=\"none\">-</td>");
                continue;
            };
            let v = value_text(c.value, pps);
            let loss = c
                .loss
                .map(|l| format!(", {l:.3} % lost"))
                .unwrap_or_default();
            // The cell's shade: its share of the largest cell (8 % to 60 % of the accent).
            let share = c.value / max;
            let _ = write!(
                html,
                "<td style=\"background:rgba(31,119,180,{:.2})\" title=\"{} -> {}: {v}{loss}\">{v}{}</td>",
                0.08 + 0.52 * share,
                esc(s),
                esc(r),
                c.loss
                    .map(|l| format!("<br><small>{l:.3} % lost</small>"))
                    .unwrap_or_default()
            );
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    receiver_bars(html, step, dir, pps);
}

/// Per receiver: its total as a bar (scaled to the largest), the NIC's figure and the check.
fn receiver_bars(html: &mut String, step: &StepResult, dir: FlowDir, pps: bool) {
    let aggs: Vec<_> = step.aggregates.iter().filter(|a| a.dir == dir).collect();
    let total = |a: &hakaru_model::plan::ReceiverAggregate| {
        if pps {
            a.received_pps.unwrap_or(0.0)
        } else {
            a.received_bps
        }
    };
    let max = aggs.iter().map(|a| total(a)).fold(0.0f64, f64::max);
    if aggs.is_empty() || max <= 0.0 {
        return;
    }
    html.push_str("<div class=\"bars\">");
    for a in aggs {
        let v = value_text(total(a), pps);
        let check = a.nic_check.as_ref().map_or_else(
            || "no NIC check".to_string(),
            |c| {
                format!(
                    "NIC check ({}): clients {}, NIC {}: {} ({:+.2} %)",
                    c.measure,
                    crate::charts::value_text(c.clients),
                    crate::charts::value_text(c.nic),
                    if c.agrees { "agree" } else { "DISAGREE" },
                    c.difference_percent
                )
            },
        );
        let class = match a.nic_check.as_ref().map(|c| c.agrees) {
            Some(true) => "ok",
            Some(false) => "bad",
            None => "",
        };
        let _ = write!(
            html,
            "<div class=\"bar\"><span class=\"who\">{r}</span><span class=\"track\"><span class=\"fill\" style=\"width:{:.1}%\" title=\"{r}: {v} from {} run(s), {} flow(s)\"></span></span><span class=\"val\">{v}</span><span class=\"check {class}\">{}</span></div>",
            100.0 * total(a) / max,
            a.runs,
            a.flows,
            esc(&check),
            r = esc(&a.receiver),
        );
    }
    html.push_str("</div>\n");
}

/// The matrices of every step of a plan, for its section of the report.
pub(crate) fn html(plan: &PlanResult) -> String {
    let mut out = String::new();
    for step in &plan.steps {
        for dir in [FlowDir::Up, FlowDir::Down] {
            step_dir(&mut out, step, dir);
        }
    }
    out
}

/// The styles of the matrix and the bars (light and dark).
pub(crate) const STYLE: &str = ".matrix{margin:1em 0}.matrix caption{text-align:left;font-weight:600;padding:.3em 0;white-space:nowrap}\
.matrix td{text-align:right;font-variant-numeric:tabular-nums;min-width:7em}.matrix td.none{color:#999;text-align:center}\
.bars{margin:.5em 0 1.5em}.bar{display:flex;align-items:center;gap:.6em;margin:.2em 0;font-size:.9em}\
.bar .who{width:8em;text-align:right}.bar .track{flex:0 0 40%;background:#eee;height:1em}\
.bar .fill{display:block;height:100%;background:#1f77b4}.bar .val{width:8em;font-variant-numeric:tabular-nums}\
.check.ok{color:#2c7a2c}.check.bad{color:#c0392b;font-weight:600}\
@media (prefers-color-scheme:dark){.bar .track{background:#2b2f35}.check.ok{color:#6cc46c}.check.bad{color:#ff7a6b}}";
