//! A fleet's mesh in a report (`hakaru mesh report --json` files or saved snapshots): each
//! snapshot as a heatmap (source row, probed column, each cell shaded by its loss against the
//! report's threshold, its RTT in the cell and every figure in its `title`) with the
//! suspects; and, over several snapshots, the worst pairs' loss and RTT p99 over time.
//! Plain HTML and CSS for the heatmap (no script); the time charts are ordinary charts.

use std::collections::BTreeMap;
use std::fmt::Write;

use hakaru_model::mesh::{MeshReport, Pair};

use crate::charts::{Chart, Series, Stroke};
use crate::input::{Content, Input};

/// Hosts past which a heatmap gives way to a list of the worst pairs (a 200 x 200 table is
/// 40,000 cells).
const MAX_HEATMAP_HOSTS: usize = 200;
/// Pairs listed (past the heatmap's size) and drawn over time.
const WORST_LISTED: usize = 50;
const WORST_DRAWN: usize = 8;

pub(crate) const STYLE: &str = ".heat{border-collapse:collapse;margin:1em 0;font-size:.8em}\
.heat td,.heat th{border:1px solid #ddd;padding:.15em .35em;text-align:right;font-variant-numeric:tabular-nums}\
.heat th{font-weight:500;white-space:nowrap}.heat td.self{background:#f4f4f4}.heat td.none{color:#999;text-align:center}\
@media (prefers-color-scheme:dark){.heat td,.heat th{border-color:#444}.heat td.self{background:#24272c}}";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A cell's background: green at no loss, through yellow, to red at the threshold and past
/// it; the alpha keeps text readable in both colour schemes.
fn shade(loss: f64, threshold: f64) -> String {
    let x = if threshold > 0.0 {
        (loss / threshold).clamp(0.0, 1.0)
    } else if loss > 0.0 {
        1.0
    } else {
        0.0
    };
    let hue = 120.0 * (1.0 - x);
    format!("hsla({hue:.0},70%,45%,0.35)")
}

fn fmt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0} µs"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.2} %", v * 100.0))
}

fn cell_title(p: &Pair) -> String {
    let mut t = format!(
        "{} -> {}: RTT p50 {}, p99 {}, loss {} ({} probes in the window)",
        p.src,
        p.dst,
        fmt_us(p.rtt_p50_us),
        fmt_us(p.rtt_p99_us),
        pct(p.loss),
        p.probes
    );
    if p.connect_p50_us.is_some() || p.connect_loss.is_some() {
        let _ = write!(
            t,
            "; TCP connect p50 {}, p99 {}, lost {}",
            fmt_us(p.connect_p50_us),
            fmt_us(p.connect_p99_us),
            pct(p.connect_loss)
        );
    }
    if let Some(b) = p.slice_bps {
        let _ = write!(t, "; last slice {}", hakaru_model::BitRate(b));
    }
    if p.bad {
        t.push_str("; bad");
    }
    t
}

fn when(at_unix: f64) -> String {
    if at_unix > 0.0 {
        hakaru_model::rfc3339_utc(at_unix)
    } else {
        "an unknown time".into()
    }
}

/// A snapshot's section: what it covers, its suspects, and the heatmap (or, for a large
/// fleet, the worst pairs).
pub(crate) fn section(label: &str, m: &MeshReport) -> String {
    let mut h = String::new();
    let answered = m.hosts.iter().filter(|x| x.answered).count();
    let bad = m.pairs.iter().filter(|p| p.bad).count();
    let _ = writeln!(
        h,
        "<section><h2>mesh of {} hosts</h2><p class=\"meta\">{} &middot; asked at {} &middot; {answered} agents answered &middot; {} pairs, {bad} bad (over {:.1} % loss{})</p>",
        m.hosts.len(),
        esc(label),
        esc(&when(m.at_unix)),
        m.pairs.len(),
        m.loss_threshold * 100.0,
        m.rtt_p99_threshold_us
            .map_or_else(String::new, |t| format!(" or an RTT p99 over {t:.0} µs"))
    );
    if m.suspects.is_empty() {
        h.push_str("<p>Suspects: none.</p>\n");
    } else {
        h.push_str("<p>Suspects, worst first:</p><ul>\n");
        for s in &m.suspects {
            let _ = writeln!(h, "<li><b>{}</b>: {}</li>", esc(&s.host), esc(&s.reason));
        }
        h.push_str("</ul>\n");
    }
    if m.hosts.len() <= MAX_HEATMAP_HOSTS {
        h.push_str(&heatmap(m));
    } else {
        h.push_str(&worst_list(m));
    }
    h.push_str("</section>\n");
    h
}

fn heatmap(m: &MeshReport) -> String {
    let by: BTreeMap<(&str, &str), &Pair> = m
        .pairs
        .iter()
        .map(|p| ((p.src.as_str(), p.dst.as_str()), p))
        .collect();
    let mut h = String::from(
        "<table class=\"heat\"><caption>RTT p50 from row to column; shaded by loss (green none, red at the threshold); hover a cell for every figure</caption><tr><th></th>",
    );
    for d in &m.hosts {
        let _ = write!(h, "<th>{}</th>", esc(&d.host));
    }
    h.push_str("</tr>\n");
    for s in &m.hosts {
        let _ = write!(h, "<tr><th>{}</th>", esc(&s.host));
        for d in &m.hosts {
            if s.host == d.host {
                h.push_str("<td class=\"self\"></td>");
                continue;
            }
            match by.get(&(s.host.as_str(), d.host.as_str())) {
                Some(p) => {
                    let _ = write!(
                        h,
                        "<td style=\"background:{}\" title=\"{}\">{}</td>",
                        shade(p.loss.unwrap_or(0.0), m.loss_threshold),
                        esc(&cell_title(p)),
                        p.rtt_p50_us
                            .map_or_else(|| "-".into(), |v| format!("{v:.0}"))
                    );
                }
                None => h.push_str(
                    "<td class=\"none\" title=\"no figures: its agent did not answer\">·</td>",
                ),
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    h
}

/// How bad a pair is: loss first, then RTT p99 (greater is worse).
fn badness(a: &Pair, b: &Pair) -> std::cmp::Ordering {
    a.loss
        .unwrap_or(0.0)
        .total_cmp(&b.loss.unwrap_or(0.0))
        .then(
            a.rtt_p99_us
                .unwrap_or(0.0)
                .total_cmp(&b.rtt_p99_us.unwrap_or(0.0)),
        )
}

/// Pairs worst first.
fn worst_first<'a>(pairs: impl Iterator<Item = &'a Pair>) -> Vec<&'a Pair> {
    let mut v: Vec<&Pair> = pairs.collect();
    v.sort_by(|a, b| badness(b, a));
    v
}

fn worst_list(m: &MeshReport) -> String {
    let mut h = format!(
        "<table class=\"heat\"><caption>{} hosts are too many for a heatmap: the {WORST_LISTED} worst pairs</caption><tr><th>from</th><th>to</th><th>loss</th><th>RTT p50</th><th>RTT p99</th></tr>\n",
        m.hosts.len()
    );
    for p in worst_first(m.pairs.iter()).into_iter().take(WORST_LISTED) {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td style=\"background:{}\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.src),
            esc(&p.dst),
            shade(p.loss.unwrap_or(0.0), m.loss_threshold),
            pct(p.loss),
            fmt_us(p.rtt_p50_us),
            fmt_us(p.rtt_p99_us)
        );
    }
    h.push_str("</table>\n");
    h
}

/// The worst pairs over time, from two snapshots or more (each with its time): the pairs
/// with the highest loss in any snapshot (then the highest RTT p99), their loss and their
/// RTT p99 at each snapshot.
pub(crate) fn charts(inputs: &[Input]) -> Vec<Chart> {
    let mut snaps: Vec<&MeshReport> = inputs
        .iter()
        .filter_map(|i| match &i.content {
            Content::Mesh(m) if m.at_unix > 0.0 => Some(m.as_ref()),
            _ => None,
        })
        .collect();
    if snaps.len() < 2 {
        return Vec::new();
    }
    snaps.sort_by(|a, b| a.at_unix.total_cmp(&b.at_unix));
    let t0 = snaps[0].at_unix;
    // Each pair's worst moment, across the snapshots.
    let mut worst: BTreeMap<(&str, &str), &Pair> = BTreeMap::new();
    for s in &snaps {
        for p in &s.pairs {
            let k = (p.src.as_str(), p.dst.as_str());
            if worst
                .get(&k)
                .is_none_or(|w| badness(p, w) == std::cmp::Ordering::Greater)
            {
                worst.insert(k, p);
            }
        }
    }
    let chosen: Vec<(&str, &str)> = worst_first(worst.values().copied())
        .into_iter()
        .take(WORST_DRAWN)
        .map(|p| (p.src.as_str(), p.dst.as_str()))
        .collect();
    let series = |f: &dyn Fn(&Pair) -> Option<f64>| -> Vec<Series> {
        chosen
            .iter()
            .enumerate()
            .map(|(i, (src, dst))| Series {
                name: format!("{src} -> {dst}"),
                points: snaps
                    .iter()
                    .filter_map(|s| {
                        let p = s.pairs.iter().find(|p| p.src == *src && p.dst == *dst)?;
                        Some((s.at_unix - t0, f(p)?))
                    })
                    .collect(),
                stroke: Stroke::Medium,
                color: i,
                legend: true,
            })
            .collect()
    };
    vec![
        Chart {
            id: "mesh-worst-loss".into(),
            title: format!(
                "mesh: loss of the {} worst pairs over {} snapshots",
                chosen.len(),
                snaps.len()
            ),
            x_desc: "time since the first snapshot (s)".into(),
            y_desc: "loss (%)".into(),
            y_scale: 1.0,
            log_x: false,
            log_y: false,
            series: series(&|p| p.loss.map(|l| l * 100.0)),
        },
        Chart {
            id: "mesh-worst-rtt-p99".into(),
            title: format!(
                "mesh: RTT p99 of the same pairs over {} snapshots",
                snaps.len()
            ),
            x_desc: "time since the first snapshot (s)".into(),
            y_desc: "RTT p99 (µs)".into(),
            y_scale: 1.0,
            log_x: false,
            log_y: false,
            series: series(&|p| p.rtt_p99_us),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::mesh::{Host, Suspect};

    fn pair(src: &str, dst: &str, loss: f64, p99: f64) -> Pair {
        Pair {
            src: src.into(),
            dst: dst.into(),
            rtt_p50_us: Some(p99 / 2.0),
            rtt_p99_us: Some(p99),
            loss: Some(loss),
            probes: 100,
            sent: 1000,
            bad: loss > 0.02,
            connect_p50_us: None,
            connect_p99_us: None,
            connect_loss: None,
            slice_bps: None,
        }
    }

    fn snap(at: f64, pairs: Vec<Pair>) -> Input {
        let hosts = ["a", "b", "c"]
            .iter()
            .map(|h| Host {
                host: (*h).into(),
                answered: true,
                error: None,
                labels: BTreeMap::new(),
            })
            .collect();
        Input {
            label: format!("snap{at}"),
            content: Content::Mesh(Box::new(MeshReport {
                test: "mesh".into(),
                schema_version: hakaru_model::SCHEMA_VERSION,
                at_unix: at,
                loss_threshold: 0.02,
                rtt_p99_threshold_us: None,
                hosts,
                pairs,
                suspects: vec![Suspect {
                    host: "c".into(),
                    members: Vec::new(),
                    reason: "bad <pairs>".into(),
                }],
            })),
        }
    }

    #[test]
    fn the_worst_pairs_are_drawn_over_time_worst_first() {
        let inputs = [
            // Out of order: the chart sorts by time.
            snap(
                1_000_060.0,
                vec![pair("a", "b", 0.0, 100.0), pair("a", "c", 0.5, 100.0)],
            ),
            snap(
                1_000_000.0,
                vec![pair("a", "b", 0.1, 100.0), pair("a", "c", 0.0, 900.0)],
            ),
        ];
        let charts = charts(&inputs);
        assert_eq!(charts.len(), 2);
        let loss = &charts[0];
        // a -> c lost half at its worst, a -> b a tenth.
        assert_eq!(loss.series[0].name, "a -> c");
        assert_eq!(loss.series[0].points, vec![(0.0, 0.0), (60.0, 50.0)]);
        assert_eq!(loss.series[1].name, "a -> b");
        assert_eq!(loss.series[1].points, vec![(0.0, 10.0), (60.0, 0.0)]);
        let rtt = &charts[1];
        assert_eq!(rtt.series[0].points, vec![(0.0, 900.0), (60.0, 100.0)]);
        // One snapshot, or snapshots without a time, draw nothing over time.
        assert!(super::charts(&inputs[..1]).is_empty());
        let untimed = [snap(0.0, Vec::new()), snap(0.0, Vec::new())];
        assert!(super::charts(&untimed).is_empty());
    }

    #[test]
    fn a_snapshot_is_a_heatmap_shaded_by_loss_with_its_suspects() {
        let input = snap(
            1_000_000.0,
            vec![pair("a", "b", 0.0, 100.0), pair("b", "a", 0.03, 300.0)],
        );
        let Content::Mesh(m) = &input.content else {
            unreachable!()
        };
        let h = section("s.json", m);
        // Escaped, with its reason.
        assert!(h.contains("<b>c</b>: bad &lt;pairs&gt;"), "{h}");
        // No loss is green, past the threshold red; self cells and missing pairs apart.
        assert!(
            h.contains("background:hsla(120,70%,45%,0.35)\" title=\"a -&gt; b"),
            "{h}"
        );
        assert!(
            h.contains("background:hsla(0,70%,45%,0.35)\" title=\"b -&gt; a"),
            "{h}"
        );
        assert_eq!(h.matches("class=\"self\"").count(), 3);
        assert_eq!(h.matches("class=\"none\"").count(), 4);
        assert!(
            h.contains("loss 3.00 % (100 probes in the window); bad"),
            "{h}"
        );
        assert_eq!(shade(0.01, 0.02), "hsla(60,70%,45%,0.35)");
        assert_eq!(shade(0.0, 0.0), "hsla(120,70%,45%,0.35)");
        assert_eq!(shade(0.001, 0.0), "hsla(0,70%,45%,0.35)");
    }

    #[test]
    fn a_mesh_report_reads_back_as_an_input() {
        let Content::Mesh(m) = snap(5.0, vec![pair("a", "b", 0.25, 1.0)]).content else {
            unreachable!()
        };
        let text = serde_json::to_string(&m).unwrap();
        let back = Input::parse("m.json", &text).unwrap();
        let Content::Mesh(b) = back.content else {
            panic!("not read as a mesh snapshot")
        };
        assert_eq!(*b, *m);
        let s = crate::summary::of_content(&Content::Mesh(b));
        assert_eq!((s.kind.as_str(), s.headline), ("mesh", Some(25.0)));
    }
}
