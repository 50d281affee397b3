//! `hakaru report`: one self-contained HTML file with SVG charts of saved results (no
//! scripts, fonts or fetches: it opens offline and mails as one attachment).
//!
//! Each input gets a section: a header (test, date, hosts, environment), its headline figures
//! in large type, its charts, and the full text summary. Several inputs of the same kind are
//! also overlaid on shared axes first (before/after comparisons). Every chart's `<figure>`
//! carries the scale that maps its pixels back to values (`data-*` attributes).

use std::fmt::Write;

use hakaru_model::plan::{PlanResult, StepResult};
use hakaru_model::{FlowDir, RunResult};

use crate::charts::{self, Chart, Figure, Series, Stroke};
use crate::kind_charts::{dir_words, rate_chart};
use crate::View;

// The inputs live in their own module (compare reads them too, and the report's compare
// section reads compare); their paths here stay as they were.
pub use crate::input::{Content, Input};

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The charts of one test result; `p` prefixes their ids.
pub fn run_charts(p: &str, r: &RunResult) -> Vec<Chart> {
    crate::kinds::of(&r.spec).charts(p, r)
}

/// Per receiver and direction of each plan step: each sender's rate stacked, the total, and
/// the receiver interface's rx rate (the truth line).
pub fn plan_charts(p: &str, plan: &PlanResult) -> Vec<Chart> {
    let mut out = Vec::new();
    for step in &plan.steps {
        let mut keys: Vec<(String, FlowDir)> = Vec::new();
        for row in &step.timeline {
            for t in &row.receivers {
                if !keys.contains(&(t.receiver.clone(), t.dir)) {
                    keys.push((t.receiver.clone(), t.dir));
                }
            }
        }
        for (recv, dir) in keys {
            out.push(receiver_chart(p, step, &recv, dir));
        }
    }
    out
}

/// One receiver's chart in one direction of a plan step: its senders stacked, the total it
/// received and its NIC's count.
fn receiver_chart(p: &str, step: &StepResult, recv: &str, dir: FlowDir) -> Chart {
    let pps = step
        .timeline
        .iter()
        .flat_map(|r| r.receivers.iter())
        .any(|t| t.receiver == recv && t.dir == dir && t.pps.is_some())
        && step.kind == "pps";
    let mut series = stacked_senders(step, recv, dir, pps);
    let tick = |f: &dyn Fn(&hakaru_model::plan::ReceiverTick) -> Option<f64>| {
        step.timeline
            .iter()
            .filter_map(|row| {
                let t = row
                    .receivers
                    .iter()
                    .find(|t| t.receiver == recv && t.dir == dir)?;
                let v = f(t)?;
                Some([(row.start, v), (row.end, v)])
            })
            .flatten()
            .collect::<Vec<_>>()
    };
    series.push(Series {
        name: "total received".into(),
        points: tick(&|t| if pps { t.pps } else { Some(t.bps) }),
        stroke: Stroke::Thick,
        color: 0,
        legend: true,
    });
    let nic = tick(&|t| if pps { t.nic_rx_pps } else { t.nic_rx_bps });
    if !nic.is_empty() {
        series.push(Series {
            name: format!("{recv} NIC rx"),
            points: nic,
            stroke: Stroke::Dashed,
            color: 1,
            legend: true,
        });
    }
    rate_chart(
        format!("{p}-step{}-{}-{}", step.index, slug(recv), dir.label()),
        format!(
            "step {} ({}): into {recv}, {}: senders stacked, total, NIC truth",
            step.index,
            step.name,
            dir_words(dir)
        ),
        "time since the release (s)",
        series,
        pps,
    )
}

/// The senders into one receiver, stacked: the first alone, then each added to those before.
fn stacked_senders(step: &StepResult, recv: &str, dir: FlowDir, pps: bool) -> Vec<Series> {
    let mut senders: Vec<String> = Vec::new();
    for row in &step.timeline {
        for rt in row
            .runs
            .iter()
            .filter(|rt| rt.receiver == recv && rt.dir == dir)
        {
            if !senders.contains(&rt.sender) {
                senders.push(rt.sender.clone());
            }
        }
    }
    let mut series = Vec::new();
    for k in 0..senders.len() {
        let pts = step
            .timeline
            .iter()
            .flat_map(|row| {
                let v: f64 = row
                    .runs
                    .iter()
                    .filter(|rt| {
                        rt.receiver == recv && rt.dir == dir && senders[..=k].contains(&rt.sender)
                    })
                    .map(|rt| if pps { rt.pps.unwrap_or(0.0) } else { rt.bps })
                    .sum();
                [(row.start, v), (row.end, v)]
            })
            .collect();
        series.push(Series {
            name: if k == 0 {
                senders[0].clone()
            } else {
                format!("+ {}", senders[k])
            },
            points: pts,
            stroke: Stroke::Thin,
            color: 2 + k,
            legend: senders.len() <= 12,
        });
    }
    series
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The overlay charts for several inputs of one kind: each input's headline series on shared
/// axes, labelled with the input's name.
fn overlay_charts(inputs: &[Input]) -> Vec<Chart> {
    let runs: Vec<(&str, &RunResult)> = inputs
        .iter()
        .filter_map(|i| match &i.content {
            Content::Run(r) => Some((i.label.as_str(), r.as_ref())),
            _ => None,
        })
        .collect();
    let [(_, first), rest @ ..] = runs.as_slice() else {
        return Vec::new();
    };
    if rest.is_empty() || rest.iter().any(|(_, r)| r.spec.name() != first.spec.name()) {
        return Vec::new();
    }
    crate::kinds::of(&first.spec).overlay(&runs)
}

/// A chart with at least one point to draw. A result without intervals (`quick`, `-i 0`)
/// has no time series: its time charts would be empty axes, so they are left out and the
/// section's headline figures stand alone.
fn has_points(c: &Chart) -> bool {
    c.series.iter().any(|s| !s.points.is_empty())
}

/// Every chart of a report, in page order, with the section each belongs to (`None`: the
/// overlay at the top). Charts with nothing to draw are left out.
pub fn all_charts(inputs: &[Input]) -> Vec<(Option<usize>, Chart)> {
    let mut v: Vec<(Option<usize>, Chart)> = overlay_charts(inputs)
        .into_iter()
        .map(|c| (None, c))
        .collect();
    v.extend(
        crate::mesh_html::charts(inputs)
            .into_iter()
            .map(|c| (None, c)),
    );
    for (i, input) in inputs.iter().enumerate() {
        let p = format!("r{}", i + 1);
        let charts = match &input.content {
            Content::Run(r) => titled(run_charts(&p, r), &what_of(r)),
            Content::Quick(q) => q
                .results
                .iter()
                .enumerate()
                .filter_map(|(k, r)| Some((k, r.as_ref()?)))
                .flat_map(|(k, r)| {
                    let what = q
                        .lines
                        .get(k)
                        .map_or_else(|| what_of(r), |l| l.what.clone());
                    titled(run_charts(&format!("{p}-t{}", k + 1), r), &what)
                })
                .collect(),
            Content::Plan(pl) => plan_charts(&p, pl),
            Content::Mesh(_) => Vec::new(),
        };
        v.extend(charts.into_iter().map(|c| (Some(i), c)));
    }
    v.retain(|(_, c)| has_points(c));
    v
}

/// What a test result measured, in words: the start of its heading and its charts' titles.
fn what_of(r: &RunResult) -> String {
    crate::kinds::of(&r.spec).what(r)
}

/// Charts whose titles start with the test they belong to (a quick report has two latency
/// tests and four TCP tests: each chart says which); a direction already named is not
/// repeated.
fn titled(mut charts: Vec<Chart>, what: &str) -> Vec<Chart> {
    for c in &mut charts {
        let mut rest = c.title.as_str();
        for d in [FlowDir::Up, FlowDir::Down] {
            let w = dir_words(d);
            if what.contains(w) {
                rest = rest.strip_prefix(&format!("{w}: ")).unwrap_or(rest);
            }
        }
        c.title = format!("{what}: {rest}");
    }
    charts
}

/// True when every point of every series is zero (retransmits or loss on loopback): said in
/// words instead of a flat line on empty axes.
fn all_zero(c: &Chart) -> bool {
    has_points(c) && c.series.iter().flat_map(|s| &s.points).all(|p| p.1 == 0.0)
}

/// The figure of an all-zero chart: one line of text, in an SVG so `--svg` still writes a
/// file per chart. Its plotting area is empty (`data-pixels` all zero, `data-zero`).
fn zero_figure(c: &Chart) -> Figure {
    let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
    for p in c.series.iter().flat_map(|s| &s.points) {
        x0 = x0.min(p.0);
        x1 = x1.max(p.0);
    }
    let what = c.y_desc.split(" (").next().unwrap_or(&c.y_desc);
    let text = format!(
        "{}: {what} 0 in every interval ({} to {} s), so nothing to draw",
        c.title,
        charts::tick_text(x0),
        charts::tick_text(x1)
    );
    let svg = format!(
        "<svg width=\"{w}\" height=\"40\" viewBox=\"0 0 {w} 40\" xmlns=\"http://www.w3.org/2000/svg\"><text x=\"12\" y=\"26\" font-family=\"sans-serif\" font-size=\"15\" fill=\"#000000\">{}</text></svg>",
        esc(&text),
        w = charts::SIZE.0
    );
    Figure {
        id: c.id.clone(),
        title: text,
        svg,
        x_range: (x0, x1),
        y_range: (0.0, 0.0),
        pixels: (0, 0, 0, 0),
        y_scale: c.y_scale,
        log_x: c.log_x,
        log_y: c.log_y,
        decimated: false,
    }
}

/// A chart drawn, or stated in words when all its values are zero.
fn figure_of(c: &Chart) -> Result<Figure, String> {
    if all_zero(c) {
        Ok(zero_figure(c))
    } else {
        charts::render(c)
    }
}

/// Renders every chart as a standalone SVG document (`--svg DIR`): (file stem, SVG).
pub fn svgs(inputs: &[Input]) -> Result<Vec<(String, String)>, String> {
    all_charts(inputs)
        .iter()
        .map(|(_, c)| figure_of(c).map(|f| (f.id.clone(), f.svg)))
        .collect()
}

fn figure_html(f: &Figure) -> String {
    let (l, r, t, b) = f.pixels;
    let zero = if f.pixels == (0, 0, 0, 0) {
        " class=\"zero\" data-zero=\"true\""
    } else {
        ""
    };
    // The chart draws its own title; the caption carries what the picture cannot say.
    let note = if f.decimated {
        "<span class=\"note\">Long series are drawn with the lowest and highest value of each pixel column.</span>"
    } else {
        ""
    };
    format!(
        "<figure id=\"{}\"{zero} data-x-range=\"{} {}\" data-y-range=\"{} {}\" data-y-scale=\"{}\" data-pixels=\"{l} {r} {t} {b}\" data-log-x=\"{}\" data-log-y=\"{}\"><figcaption title=\"{}\">{note}</figcaption>\n{}\n</figure>\n",
        esc(&f.id),
        f.x_range.0,
        f.x_range.1,
        f.y_range.0,
        f.y_range.1,
        f.y_scale,
        f.log_x,
        f.log_y,
        esc(&f.title),
        f.svg
    )
}

/// The page's styles: system fonts, and dark colours when the reader's system asks for them
/// (the charts' SVG colours are restyled by attribute, so the SVG itself stays plain).
const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif;\
margin:2em auto;max-width:1000px;padding:0 1em;color:#1d1f23;background:#fff;line-height:1.45}\
h1{font-size:1.7em;margin-bottom:.2em}h2{font-size:1.3em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}\
.meta{color:#555;font-size:.9em}.headline{font-size:1.5em;font-weight:600;margin:.4em 0;font-variant-numeric:tabular-nums}\
.headline span{display:block}figure{margin:1.2em 0}figcaption{font-size:.9em;color:#444}\
figure svg{max-width:100%;height:auto}figure svg text{font-family:inherit}\
figure.zero{margin:.3em 0}.note{color:#777}\
pre{font-size:.75em;background:#f6f6f6;padding:.6em;overflow-x:auto}\
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .5em}\
@media (prefers-color-scheme:dark){body{background:#16181c;color:#dde1e6}\
.meta,figcaption{color:#a9b0b8}.note{color:#8a929b}pre{background:#22252a}h2,td,th{border-color:#444}\
figure svg rect[fill=\"#FFFFFF\"]{fill:#16181c}figure svg text[fill=\"#000000\"]{fill:#dde1e6}\
figure svg [stroke=\"#000000\"]{stroke:#c8cdd3}figure svg [stroke=\"#EBEBEB\"]{stroke:#2b2f35}\
figure svg [stroke=\"#B4B4B4\"]{stroke:#555}}\
@media print{body{max-width:none}details{display:none}}";

fn headline_lines(r: &RunResult) -> Vec<String> {
    let text = crate::text::summary(
        r,
        &View {
            summary_only: true,
            wide: true,
            per_flow: false,
        },
    );
    // The closing headline lines are the ones that do not start a table row.
    text.lines()
        .filter(|l| !l.starts_with('[') && !l.trim().is_empty() && !l.starts_with(' '))
        .map(str::to_string)
        .collect()
}

fn run_section(html: &mut String, label: &str, r: &RunResult, figures: &[Figure]) {
    let _ = writeln!(html, "<section><h2>{}</h2>", esc(&what_of(r)));
    let header = crate::text::header(&r.spec, &r.server, r.embedded_server);
    let _ = writeln!(
        html,
        "<p class=\"meta\">{}<br>{} &middot; started {} &middot; {} &rarr; {} &middot; hakaru {}</p>",
        esc(header.trim()),
        esc(label),
        esc(&r.started_at),
        esc(&r.local_address),
        esc(&r.remote_address),
        esc(&r.tool_version)
    );
    html.push_str("<div class=\"headline\">");
    for l in headline_lines(r) {
        let _ = write!(html, "<span>{}</span>", esc(&l));
    }
    html.push_str("</div>\n");
    let cpu = |name: &str, e: &hakaru_model::EndResult| {
        e.cpu
            .as_ref()
            .map_or(format!("{name} CPU not reported"), |c| {
                format!("{name} CPU {:.1} % busy of {} CPUs", c.busy_pct, c.cpus)
            })
    };
    let _ = writeln!(
        html,
        "<p class=\"meta\">{} &middot; {} &middot; client {} {} ({} CPUs) &middot; server {} {}</p>",
        esc(&cpu("client", &r.client)),
        esc(&cpu("server", &r.server_end)),
        esc(&r.client.env.os),
        esc(&r.client.env.kernel),
        r.client.env.cpus,
        esc(&r.server_end.env.os),
        esc(&r.server_end.env.kernel),
    );
    for f in figures {
        html.push_str(&figure_html(f));
    }
    let full = crate::udpst_text::table(r)
        + &crate::text::summary(
            r,
            &View {
                wide: true,
                ..View::default()
            },
        );
    let _ = writeln!(
        html,
        "<details><summary>full summary</summary><pre>{}</pre></details></section>",
        esc(&full)
    );
}

/// The kind of a result in words, for the page title.
fn kind_of(c: &Content) -> String {
    match c {
        Content::Run(r) => what_of(r),
        Content::Quick(_) => "quick".into(),
        Content::Plan(p) => format!("plan {}", p.plan),
        Content::Mesh(m) => format!("mesh of {} hosts", m.hosts.len()),
    }
}

/// The whole report: one HTML document.
pub fn report(inputs: &[Input]) -> Result<String, String> {
    if inputs.is_empty() {
        return Err("no results to report".into());
    }
    let charts = all_charts(inputs);
    let mut figs: Vec<(Option<usize>, Figure)> = Vec::with_capacity(charts.len());
    for (sec, c) in &charts {
        figs.push((*sec, figure_of(c)?));
    }
    let mut html = String::with_capacity(64 << 10);
    let title = match inputs {
        [one] => format!("hakaru {}", kind_of(&one.content)),
        more => format!("hakaru report: {} results", more.len()),
    };
    let _ = writeln!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"color-scheme\" content=\"light dark\"><title>{t}</title><style>{STYLE}{}{}{}</style></head><body>\n<h1>{t}</h1>",
        crate::plan_matrix::STYLE,
        crate::compare_html::STYLE,
        crate::mesh_html::STYLE,
        t = esc(&title)
    );
    let _ = writeln!(
        html,
        "<p class=\"meta\">{} result(s): {}. Charts are SVG; hover a point for its value. The page loads nothing else.</p>",
        inputs.len(),
        esc(&inputs.iter().map(|i| i.label.as_str()).collect::<Vec<_>>().join(", "))
    );
    let overlay: Vec<&Figure> = figs
        .iter()
        .filter(|(s, _)| s.is_none())
        .map(|(_, f)| f)
        .collect();
    if !overlay.is_empty() {
        html.push_str("<section><h2>All inputs on shared axes</h2>\n");
        for f in overlay {
            html.push_str(&figure_html(f));
        }
        html.push_str("</section>\n");
    }
    html.push_str(&crate::compare_html::section(inputs));
    for (i, input) in inputs.iter().enumerate() {
        let mine: Vec<Figure> = figs
            .iter()
            .filter(|(s, _)| *s == Some(i))
            .map(|(_, f)| f.clone())
            .collect();
        match &input.content {
            Content::Run(r) => run_section(&mut html, &input.label, r, &mine),
            Content::Quick(q) => {
                let _ = writeln!(
                    html,
                    "<section><h2>quick: {} tests against {}</h2><p class=\"meta\">{}</p><table><tr><th>test</th><th>result</th><th>command</th></tr>",
                    q.lines.len(),
                    esc(&q.server),
                    esc(&input.label)
                );
                for l in &q.lines {
                    let _ = writeln!(
                        html,
                        "<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                        esc(&l.what),
                        esc(l.error.as_deref().unwrap_or(&l.headline)),
                        esc(&l.command)
                    );
                }
                html.push_str("</table>\n");
                for f in &mine {
                    html.push_str(&figure_html(f));
                }
                html.push_str("</section>\n");
            }
            Content::Mesh(m) => html.push_str(&crate::mesh_html::section(&input.label, m)),
            Content::Plan(p) => {
                let _ = writeln!(
                    html,
                    "<section><h2>plan {}</h2><p class=\"meta\">{} &middot; started {} &middot; {} host(s), {} step(s)</p>",
                    esc(&p.plan),
                    esc(&input.label),
                    esc(&p.started_at),
                    p.hosts.len(),
                    p.steps.len()
                );
                html.push_str(&crate::plan_matrix::html(p));
                for f in &mine {
                    html.push_str(&figure_html(f));
                }
                let _ = writeln!(
                    html,
                    "<details><summary>full summary</summary><pre>{}</pre></details></section>",
                    esc(&crate::plan_text::summary(p))
                );
            }
        }
    }
    html.push_str("</body></html>\n");
    Ok(html)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::QuickResult;

    #[test]
    fn bad_inputs_are_named() {
        assert!(Input::parse("a.json", "{\"test\": \"tcp\"")
            .unwrap_err()
            .contains("truncated"));
        assert!(Input::parse("a.json", "[1, 2]")
            .unwrap_err()
            .contains("not a JSON object"));
        assert!(Input::parse("a.json", "{\"x\": 1}")
            .unwrap_err()
            .contains("no \"test\""));
        let e = Input::parse("a.json", "{\"test\": \"tcp\", \"schema_version\": 99}").unwrap_err();
        assert!(e.contains("schema_version 99"), "{e}");
        let e = Input::parse("a.json", "{\"test\": \"tcp\", \"schema_version\": 1}").unwrap_err();
        assert!(e.contains("does not parse"), "{e}");
        assert!(Input::parse("a.json", "garbage")
            .unwrap_err()
            .contains("not JSON"));
    }

    use crate::tests::fixture;

    /// Issue 13e: results without intervals (`quick`, `-i 0`) draw no empty time chart; the
    /// quick section still shows each test's headline.
    #[test]
    fn results_without_intervals_draw_no_empty_chart() {
        let mut runs: Vec<RunResult> = ["tcp_bidir", "udp_reverse"].map(fixture).into();
        assert!(runs.iter().all(|r| !r.intervals.is_empty()));
        // With intervals, the rate charts are there.
        let with = all_charts(&[Input::run("a".into(), runs[0].clone())]);
        assert!(with.iter().any(|(_, c)| c.id.contains("-rate-")));
        for r in &mut runs {
            r.intervals.clear();
        }
        let line = |what: &str, headline: &str| hakaru_model::QuickLine {
            what: what.into(),
            command: "hakaru tcp HOST".into(),
            headline: headline.into(),
            value: 1.0,
            unit: "bit/s".into(),
            error: None,
        };
        let quick = QuickResult {
            schema_version: hakaru_model::SCHEMA_VERSION,
            test: "quick".into(),
            server: "127.0.0.1".into(),
            embedded_server: true,
            lines: vec![
                line("TCP both ways", "9.41 Gbit/s"),
                line("UDP reverse", "812 Mbit/s"),
            ],
            results: runs.iter().cloned().map(Some).collect(),
        };
        let inputs = [
            Input {
                label: "quick.json".into(),
                content: Content::Quick(Box::new(quick)),
            },
            Input::run("i0.json".into(), runs[1].clone()),
        ];
        for (_, c) in all_charts(&inputs) {
            assert!(has_points(&c), "empty chart {}", c.id);
        }
        let html = report(&inputs).unwrap();
        assert!(!html.contains("-rate-"), "a time chart without points");
        assert!(html.contains("9.41 Gbit/s") && html.contains("812 Mbit/s"));
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }
}
