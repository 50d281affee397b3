//! Tests of the HTML report's pictures (issue 34): titles that name their test, headings that
//! name the test rather than the file, all-zero series in words, a tooltip on every point,
//! colours for dark and light, and before/after bars for two results.

use hakaru_model::{QuickLine, QuickResult, RunResult};

use crate::html::{all_charts, report, svgs, Content, Input};
use crate::tests::fixture;

fn quick() -> Input {
    let runs: Vec<RunResult> = ["tcp_bidir", "udp_reverse", "tcp_bidir"]
        .map(fixture)
        .into();
    let line = |what: &str| QuickLine {
        what: what.into(),
        command: "hakaru tcp HOST".into(),
        headline: "1 Gbit/s".into(),
        value: 1.0,
        unit: "bit/s".into(),
        error: None,
    };
    Input {
        label: "r.html".into(),
        content: Content::Quick(Box::new(QuickResult {
            schema_version: hakaru_model::SCHEMA_VERSION,
            test: "quick".into(),
            server: "127.0.0.1".into(),
            embedded_server: true,
            lines: vec![line("TCP first"), line("UDP second"), line("TCP third")],
            results: runs.into_iter().map(Some).collect(),
        })),
    }
}

/// The ids of the `<figure>`s of a page, in order.
fn figure_ids(html: &str) -> Vec<String> {
    html.match_indices("<figure id=\"")
        .map(|(at, m)| {
            let rest = &html[at + m.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        })
        .collect()
}

#[test]
fn every_chart_of_a_quick_report_has_its_own_title_naming_its_test() {
    let charts = all_charts(&[quick()]);
    assert!(charts.len() >= 6, "{}", charts.len());
    let mut titles: Vec<&str> = charts.iter().map(|(_, c)| c.title.as_str()).collect();
    for (_, c) in &charts {
        assert!(
            ["TCP first: ", "UDP second: ", "TCP third: "]
                .iter()
                .any(|w| c.title.starts_with(w)),
            "{}",
            c.title
        );
    }
    titles.sort_unstable();
    let n = titles.len();
    titles.dedup();
    assert_eq!(titles.len(), n, "two charts share a title");
}

#[test]
fn headings_name_the_test_and_not_the_output_file() {
    let html = report(&[quick()]).unwrap();
    assert!(
        !html.contains("r.html: quick"),
        "the heading names the file"
    );
    assert!(html.contains("<h2>quick: 3 tests against 127.0.0.1</h2>"));
    assert!(html.contains("<title>hakaru quick</title>"));
    let html = report(&[Input::run("run.json".into(), fixture("tcp_bidir"))]).unwrap();
    assert!(
        html.contains("<h2>TCP 1 flow each way</h2>"),
        "{html:.2000}"
    );
}

#[test]
fn an_all_zero_series_is_said_in_words_instead_of_drawn() {
    let mut r = fixture("udp_reverse");
    for rec in &mut r.intervals {
        for s in &mut rec.sums {
            if let Some(u) = s.udp.as_mut() {
                u.lost = 0;
            }
        }
    }
    let html = report(&[Input::run("u.json".into(), r.clone())]).unwrap();
    let at = html
        .find("<figure id=\"r1-loss-down\"")
        .expect("the loss chart");
    let fig = &html[at..at + html[at..].find("</figure>").unwrap()];
    assert!(fig.contains("data-zero=\"true\""), "{fig}");
    assert!(fig.contains("0 in every interval"), "{fig}");
    assert!(!fig.contains("polyline"), "{fig}");
    // --svg still writes one well-formed file per chart.
    let files = svgs(&[Input::run("u.json".into(), r)]).unwrap();
    assert!(files.iter().any(|(id, svg)| id == "r1-loss-down"
        && svg.starts_with("<svg")
        && svg.contains("0 in every interval")));
}

#[test]
fn every_point_has_a_tooltip_with_its_value() {
    let r = fixture("tcp_p2_omit1");
    let html = report(&[Input::run("t.json".into(), r.clone())]).unwrap();
    for id in figure_ids(&html) {
        let at = html.find(&format!("<figure id=\"{id}\"")).unwrap();
        let fig = &html[at..at + html[at..].find("</figure>").unwrap()];
        if fig.contains("data-zero") {
            continue;
        }
        let tips = fig.matches("<circle").count();
        assert!(tips > 0 && fig.matches("<title>").count() >= tips, "{id}");
    }
    // The received sum: one tooltip per interval, with the value and the interval.
    let at = html.find("<figure id=\"r1-rate-up\"").expect("rate chart");
    let fig = &html[at..];
    let sums = fig.matches("<title>received, all flows: ").count();
    let intervals = r
        .intervals
        .iter()
        .filter(|i| i.sums.iter().any(|s| s.receiver_bps.is_some()))
        .count();
    // Two equal neighbours share one tooltip.
    assert!(sums >= 1 && sums <= intervals, "{sums} of {intervals}");
    assert!(fig.contains("bit/s, "), "the unit and the interval");
}

#[test]
fn the_page_is_dark_or_light_by_the_readers_preference_and_self_contained() {
    let html = report(&[quick()]).unwrap();
    assert!(html.contains("@media (prefers-color-scheme:dark)"));
    assert!(html.contains("name=\"color-scheme\" content=\"light dark\""));
    for bad in ["<script", "src=\"http", "href=\"http", "@import", "url("] {
        assert!(!html.contains(bad), "the page holds {bad}");
    }
}

#[test]
fn two_results_of_one_kind_get_before_and_after_bars_with_the_verdicts() {
    let base = fixture("tcp_bidir");
    let mut new = base.clone();
    for t in &mut new.totals {
        t.receiver.bits_per_second.0 /= 2.0;
        t.receiver.bytes /= 2;
    }
    let html = report(&[
        Input::run("before.json".into(), base.clone()),
        Input::run("after.json".into(), new),
    ])
    .unwrap();
    let at = html
        .find("<div class=\"cmp\">")
        .expect("the compare section");
    let cmp = &html[at..at + html[at..].find("</section>").unwrap()];
    assert!(html.contains("before and after: before.json &rarr; after.json"));
    let rows = cmp.matches("<div class=\"row\">").count();
    assert!(rows >= 2, "{cmp}");
    // Two bars a row, each with its value in a tooltip.
    assert_eq!(cmp.matches(", base: ").count(), rows);
    assert_eq!(cmp.matches(", new: ").count(), rows);
    assert!(cmp.contains("WORSE"), "halved rates are worse: {cmp}");
    // One result, or results of two kinds: no such section.
    let one = report(&[Input::run("a.json".into(), base)]).unwrap();
    assert!(!one.contains("<div class=\"cmp\">"));
}
