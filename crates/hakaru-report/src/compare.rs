//! `hakaru compare BASE NEW`: headline metrics side by side with a verdict per row, for CI
//! gates (docs/compare.md).
//!
//! Rates, packet rates, round trips and efficiency are compared by relative change against
//! `--threshold`; loss in absolute percentage points against `--loss-threshold`. Where both
//! results have interval samples of a metric, the change is also tested against the
//! interval-to-interval spread: it is "beyond noise" when it exceeds two standard errors of
//! the difference of the two means (sqrt(cv_b^2/n_b + cv_n^2/n_n), cv the coefficient of
//! variation of the intervals, n their count). A change past the threshold but within that
//! noise gets the verdict "within noise" and does not fail the gate.
//!
//! TCP retransmits are compared per GB sent, and only when at least one of the two results
//! retransmits a material amount ([`RETRANSMITS_FLOOR_PER_GB`]); below that the row is
//! informational (a handful of retransmits on loopback, 9 -> 10 or 0 -> 1, says nothing).

use std::fmt::Write;

use hakaru_model::{BitRate, Bytes, RunResult};
use serde::Serialize;

pub use crate::compare_metrics::{Better, Scale};
use crate::compare_metrics::{Raw, RETRANSMITS_UNIT};
use crate::input::{Content, Input};

/// A row's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Better by more than the threshold.
    Better,
    /// Worse by more than the threshold.
    Worse,
    /// Within the threshold either way.
    Within,
    /// Past the threshold, but not beyond the interval-to-interval noise: does not fail.
    WithinNoise,
    /// Shown, not judged: both values are below the metric's material floor (retransmits).
    Informational,
}

/// Retransmits per GB (10^9 bytes sent) below which a result's retransmits are not material:
/// 100 per GB is about one segment in 7000 at a 1448-byte MSS.
pub const RETRANSMITS_FLOOR_PER_GB: f64 = 100.0;

/// One metric of both results.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What is measured, with its direction.
    pub metric: String,
    /// Unit of `base` and `new`.
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    /// How the change is judged.
    pub scale: Scale,
    /// The base result's value.
    pub base: f64,
    /// The new result's value.
    pub new: f64,
    /// new - base.
    pub change: f64,
    /// (new - base) / base in percent; absent when the base is 0.
    pub change_percent: Option<f64>,
    /// The verdict.
    pub verdict: Verdict,
    /// Two standard errors of the difference, percent of the base (interval samples of both).
    pub noise_percent: Option<f64>,
    /// Whether the change is larger than that noise estimate.
    pub beyond_noise: Option<bool>,
}

/// A whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The base input's name.
    pub base: String,
    /// The new input's name.
    pub new: String,
    /// The test kind compared.
    pub test: String,
    /// Relative threshold, percent.
    pub threshold_percent: f64,
    /// Loss threshold, percentage points.
    pub loss_threshold_points: f64,
    /// Spec differences (compared anyway with --force).
    pub differences: Vec<String>,
    /// The metrics.
    pub rows: Vec<Row>,
    /// Rows worse than their threshold.
    pub worse: usize,
}

/// Mean and coefficient of variation of samples (None under two samples or a zero mean).
fn spread(v: &[f64]) -> Option<(f64, f64, usize)> {
    if v.len() < 2 {
        return None;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if mean == 0.0 {
        return None;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, var.sqrt() / mean.abs(), v.len()))
}

/// Two standard errors of the difference of two means, relative (a fraction).
pub fn noise(base: &[f64], new: &[f64]) -> Option<f64> {
    let (_, cb, nb) = spread(base)?;
    let (_, cn, nn) = spread(new)?;
    Some(2.0 * (cb * cb / nb as f64 + cn * cn / nn as f64).sqrt())
}

/// The verdict for a change; thresholds are fractions (relative) or units (absolute).
pub fn verdict(better: Better, scale: Scale, base: f64, new: f64, threshold: f64) -> Verdict {
    let change = match scale {
        Scale::Absolute => new - base,
        Scale::Relative if base != 0.0 => (new - base) / base.abs(),
        // From zero: any rise of a lower-is-better metric is worse, any of a higher one better.
        Scale::Relative if new == 0.0 => 0.0,
        Scale::Relative => f64::INFINITY * new.signum(),
    };
    let signed = match better {
        Better::Higher => change,
        Better::Lower => -change,
    };
    if signed < -threshold {
        Verdict::Worse
    } else if signed > threshold {
        Verdict::Better
    } else {
        Verdict::Within
    }
}

fn run_metrics(b: &RunResult, n: &RunResult) -> Vec<Raw> {
    let mut m = crate::compare_metrics::Metrics {
        b,
        n,
        v: Vec::new(),
    };
    crate::kinds::of(&b.spec).metrics(&mut m);
    m.v
}

fn test_name(c: &Content) -> String {
    match c {
        Content::Run(r) => r.spec.name().to_string(),
        Content::Quick(_) => "quick".into(),
        Content::Plan(_) => "plan".into(),
        Content::Mesh(_) => "mesh".into(),
    }
}

/// The spec fields that differ, as "name: base vs new".
fn spec_differences(b: &Content, n: &Content) -> Vec<String> {
    let (Content::Run(b), Content::Run(n)) = (b, n) else {
        return Vec::new();
    };
    let (Ok(serde_json::Value::Object(bs)), Ok(serde_json::Value::Object(ns))) =
        (serde_json::to_value(&b.spec), serde_json::to_value(&n.spec))
    else {
        return Vec::new();
    };
    let flat = |m: &serde_json::Map<String, serde_json::Value>| {
        // Specs are {"kind": {fields}} or flat objects; compare the innermost fields.
        let inner = if m.len() == 1 {
            m.values().next().and_then(|v| v.as_object()).cloned()
        } else {
            None
        };
        inner.unwrap_or_else(|| m.clone())
    };
    let (bs, ns) = (flat(&bs), flat(&ns));
    let mut keys: Vec<&String> = bs.keys().chain(ns.keys()).collect();
    keys.sort();
    keys.dedup();
    // Two runs against the embedded endpoint differ only in the port it happened to get
    // (http's urls, rpm's url, capacity's server).
    let both_embedded = b.embedded_server && n.embedded_server;
    keys.into_iter()
        .filter(|k| !(both_embedded && matches!(k.as_str(), "urls" | "url" | "server")))
        .filter(|k| bs.get(*k) != ns.get(*k))
        .map(|k| {
            let show =
                |v: Option<&serde_json::Value>| v.map_or("(none)".to_string(), |v| v.to_string());
            format!("{k}: {} vs {}", show(bs.get(k)), show(ns.get(k)))
        })
        .collect()
}

/// Compares two results. Different kinds are refused; different specs are refused unless
/// `force` (then listed). Thresholds: `threshold` a fraction, `loss_points` percentage points.
pub fn compare(
    base: &Input,
    new: &Input,
    threshold: f64,
    loss_points: f64,
    force: bool,
) -> Result<Comparison, String> {
    let (tb, tn) = (test_name(&base.content), test_name(&new.content));
    if tb != tn {
        return Err(format!(
            "{} is a {tb} result and {} a {tn} result: compare results of one kind",
            base.label, new.label
        ));
    }
    let differences = spec_differences(&base.content, &new.content);
    if !differences.is_empty() && !force {
        return Err(format!(
            "the two {tb} tests were not run the same way ({}); --force compares them anyway",
            differences.join("; ")
        ));
    }
    let raws = match (&base.content, &new.content) {
        (Content::Run(b), Content::Run(n)) => run_metrics(b, n),
        (Content::Quick(b), Content::Quick(n)) => quick_metrics(b, n),
        (Content::Mesh(_), Content::Mesh(_)) => {
            return Err(
                "mesh snapshots are not compared pair by pair: `hakaru report` on them draws each as a heatmap and the worst pairs over time".into(),
            )
        }
        _ => {
            let kinds: Vec<&str> = crate::kinds::test_commands().collect();
            return Err(format!(
                "compare takes test results ({}) and quick results; plan results are compared per run: write each run with -o",
                kinds.join(", ")
            ));
        }
    };
    if raws.is_empty() {
        return Err(format!(
            "{} and {} share no headline metric to compare",
            base.label, new.label
        ));
    }
    let rows: Vec<Row> = raws
        .into_iter()
        .map(|m| judge(m, threshold, loss_points))
        .collect();
    let worse = rows.iter().filter(|r| r.verdict == Verdict::Worse).count();
    Ok(Comparison {
        base: base.label.clone(),
        new: new.label.clone(),
        test: tb,
        threshold_percent: threshold * 100.0,
        loss_threshold_points: loss_points,
        differences,
        rows,
        worse,
    })
}

/// The lines two quick results share, one metric each (lines that failed on either side are
/// left out).
fn quick_metrics(b: &hakaru_model::QuickResult, n: &hakaru_model::QuickResult) -> Vec<Raw> {
    let mut v = Vec::new();
    for (lb, ln) in b.lines.iter().zip(&n.lines) {
        if lb.what != ln.what || lb.error.is_some() || ln.error.is_some() {
            continue;
        }
        let (unit, better) = match lb.unit.as_str() {
            "us" => ("us", Better::Lower),
            "datagrams/s" => ("pkt/s", Better::Higher),
            _ => ("bit/s", Better::Higher),
        };
        v.push(Raw {
            metric: lb.what.clone(),
            unit,
            better,
            scale: Scale::Relative,
            base: lb.value,
            new: ln.value,
            samples: None,
        });
    }
    v
}

/// One metric's row: its change, and the verdict against the threshold of its scale (within
/// the runs' own noise when both have samples; retransmits under the floor are only
/// informational).
fn judge(m: Raw, threshold: f64, loss_points: f64) -> Row {
    let t = match m.scale {
        Scale::Relative => threshold,
        Scale::Absolute => loss_points,
    };
    let noise_frac = m.samples.as_ref().and_then(|(a, b)| noise(a, b));
    let change_percent = (m.base != 0.0).then(|| (m.new - m.base) / m.base.abs() * 100.0);
    let beyond_noise = noise_frac
        .zip(change_percent)
        .map(|(nf, c)| c.abs() > nf * 100.0);
    let mut v = verdict(m.better, m.scale, m.base, m.new, t);
    if v != Verdict::Within && beyond_noise == Some(false) {
        v = Verdict::WithinNoise;
    }
    if m.unit == RETRANSMITS_UNIT && m.base.max(m.new) < RETRANSMITS_FLOOR_PER_GB {
        v = Verdict::Informational;
    }
    Row {
        verdict: v,
        beyond_noise,
        noise_percent: noise_frac.map(|f| f * 100.0),
        change: m.new - m.base,
        change_percent,
        metric: m.metric,
        unit: m.unit.to_string(),
        better: m.better,
        scale: m.scale,
        base: m.base,
        new: m.new,
    }
}

pub(crate) fn value(v: f64, unit: &str) -> String {
    match unit {
        "bit/s" => BitRate(v).to_string(),
        "B/CPU-s" => format!("{}/CPU-s", Bytes(v.max(0.0) as u64)),
        RETRANSMITS_UNIT => format!("{v:.1}/GB"),
        "1/min" => format!("{v:.0} RPM"),
        "pkt/s" | "1/s" => format!("{v:.0}{}", if unit == "pkt/s" { " pkt/s" } else { "/s" }),
        "us" => format!("{v:.1} us"),
        "ms" => format!("{v:.3} ms"),
        "%" => format!("{v:.3} %"),
        _ => format!("{v:.0}"),
    }
}

fn change_words(r: &Row) -> String {
    match (r.scale, r.change_percent) {
        (Scale::Absolute, _) => format!("{:+.3} pp", r.change),
        (_, Some(p)) => format!("{p:+.1} %"),
        (_, None) if r.change == 0.0 => "0".into(),
        (_, None) => "from 0".into(),
    }
}

fn verdict_words(r: &Row) -> String {
    let v = match r.verdict {
        Verdict::Better => "better",
        Verdict::Worse => "WORSE",
        Verdict::Within => "within threshold",
        Verdict::WithinNoise => "within noise",
        Verdict::Informational => "informational",
    };
    match r.beyond_noise {
        Some(true) if matches!(r.verdict, Verdict::Better | Verdict::Worse) => {
            format!("{v} (beyond noise)")
        }
        _ => v.to_string(),
    }
}

/// A row's cells: metric, base, new, change, verdict.
fn cells(r: &Row) -> [String; 5] {
    [
        r.metric.clone(),
        value(r.base, &r.unit),
        value(r.new, &r.unit),
        change_words(r),
        verdict_words(r),
    ]
}

/// A text table.
pub fn text(c: &Comparison) -> String {
    let mut s = format!(
        "compare {}: base {} -> new {} (threshold {:.1} %, loss {:.2} pp)\n",
        c.test, c.base, c.new, c.threshold_percent, c.loss_threshold_points
    );
    for d in &c.differences {
        let _ = writeln!(s, "  differs (--force): {d}");
    }
    let _ = writeln!(
        s,
        "{:<34} {:>14} {:>14} {:>10}  verdict",
        "metric", "base", "new", "change"
    );
    for r in &c.rows {
        let [m, b, n, ch, v] = cells(r);
        let _ = writeln!(s, "{m:<34} {b:>14} {n:>14} {ch:>10}  {v}");
    }
    let _ = writeln!(
        s,
        "{}: {} of {} metrics worse than the threshold",
        if c.worse > 0 { "FAIL" } else { "ok" },
        c.worse,
        c.rows.len()
    );
    s
}

/// A Markdown table (for pull-request comments).
pub fn markdown(c: &Comparison) -> String {
    let mut s = format!(
        "**hakaru compare {}**: `{}` → `{}` (threshold {:.1} %, loss {:.2} pp)\n\n",
        c.test, c.base, c.new, c.threshold_percent, c.loss_threshold_points
    );
    for d in &c.differences {
        let _ = writeln!(s, "- differs (--force): {d}");
    }
    if !c.differences.is_empty() {
        s.push('\n');
    }
    s.push_str("| metric | base | new | change | verdict |\n|---|---:|---:|---:|---|\n");
    for r in &c.rows {
        let _ = writeln!(s, "| {} |", cells(r).join(" | "));
    }
    let _ = writeln!(
        s,
        "\n{} of {} metrics worse than the threshold.",
        c.worse,
        c.rows.len()
    );
    s
}

/// One JSON document.
pub fn json(c: &Comparison) -> String {
    let mut s =
        serde_json::to_string_pretty(c).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_direction_and_threshold() {
        use Better::*;
        use Scale::*;
        // 5 % threshold on a rate.
        assert_eq!(verdict(Higher, Relative, 100.0, 94.0, 0.05), Verdict::Worse);
        assert_eq!(
            verdict(Higher, Relative, 100.0, 96.0, 0.05),
            Verdict::Within
        );
        assert_eq!(
            verdict(Higher, Relative, 100.0, 106.0, 0.05),
            Verdict::Better
        );
        // Latency: lower is better.
        assert_eq!(verdict(Lower, Relative, 100.0, 106.0, 0.05), Verdict::Worse);
        assert_eq!(verdict(Lower, Relative, 100.0, 90.0, 0.05), Verdict::Better);
        // Loss in percentage points.
        assert_eq!(verdict(Lower, Absolute, 0.0, 0.05, 0.1), Verdict::Within);
        assert_eq!(verdict(Lower, Absolute, 0.0, 0.5, 0.1), Verdict::Worse);
        // From zero.
        assert_eq!(verdict(Lower, Relative, 0.0, 3.0, 0.05), Verdict::Worse);
        assert_eq!(verdict(Lower, Relative, 0.0, 0.0, 0.05), Verdict::Within);
    }

    #[test]
    fn noise_is_two_standard_errors_of_the_difference() {
        // Constant samples: no noise.
        assert_eq!(noise(&[5.0, 5.0, 5.0], &[5.0, 5.0]), Some(0.0));
        // cv 0.1 each with 4 samples: 2 * sqrt(0.01/4 + 0.01/4) = 0.1414...
        let a = [0.9, 1.1, 0.9, 1.1];
        let cv = spread(&a).unwrap().1;
        let n = noise(&a, &a).unwrap();
        assert!((n - 2.0 * (2.0 * cv * cv / 4.0).sqrt()).abs() < 1e-12);
        assert_eq!(noise(&[1.0], &a), None);
    }

    #[test]
    fn plans_are_refused_with_every_test_kind_named() {
        let plan = hakaru_model::plan::PlanResult {
            schema_version: 1,
            tool: "hakaru".into(),
            tool_version: "0".into(),
            test: "plan".into(),
            plan: "p.toml".into(),
            started_at: String::new(),
            started_at_unix: 0.0,
            hosts: Vec::new(),
            steps: Vec::new(),
            interrupted: false,
            errors: Vec::new(),
        };
        let input = |label: &str| Input {
            label: label.into(),
            content: Content::Plan(Box::new(plan.clone())),
        };
        let e = compare(&input("a"), &input("b"), 0.05, 0.1, false).expect_err("plans compared");
        assert!(e.contains("plan results are compared per run"), "{e}");
        // The list comes from the report's kinds: a new kind is named without touching this.
        for c in crate::kinds::test_commands() {
            assert!(e.contains(c), "{c} missing from: {e}");
        }
        assert!(e.contains("tcp, udp, pps"), "{e}");
    }

    fn tcp_fixture() -> RunResult {
        crate::tests::fixture("tcp_p2_omit1")
    }

    fn row<'a>(c: &'a Comparison, metric: &str) -> &'a Row {
        c.rows.iter().find(|r| r.metric == metric).expect(metric)
    }

    /// Compares two results at a 5 % threshold and 0.1 pp of loss.
    pub(crate) fn run_pair(b: RunResult, n: RunResult) -> Comparison {
        compare(
            &Input::run("base.json".into(), b),
            &Input::run("new.json".into(), n),
            0.05,
            0.1,
            false,
        )
        .unwrap()
    }

    /// Issue 13g: a few retransmits (9 -> 10, 0 -> 1 over ~31 GB) are informational and do
    /// not fail the gate; a material rise per GB does.
    #[test]
    fn retransmits_are_judged_per_gb_above_a_floor() {
        let gb = tcp_fixture().totals[0].sender.bytes as f64 / 1e9;
        let with = |n: u64| {
            let mut r = tcp_fixture();
            r.totals[0].retransmits = Some(n);
            r
        };
        for (b, n) in [(9, 10), (0, 1), (10, 9)] {
            let c = run_pair(with(b), with(n));
            let r = row(&c, "client -> server retransmits");
            assert_eq!(r.verdict, Verdict::Informational, "{b} -> {n}: {r:?}");
            assert_eq!(r.unit, "retransmits/GB");
            assert!((r.new - n as f64 / gb).abs() < 1e-9);
            assert_eq!(c.worse, 0, "{b} -> {n}");
            assert!(text(&c).starts_with("compare tcp") && text(&c).contains("informational"));
        }
        // From none to 1000 per GB: material, and worse.
        let c = run_pair(with(0), with((1000.0 * gb) as u64));
        assert_eq!(
            row(&c, "client -> server retransmits").verdict,
            Verdict::Worse
        );
        assert_eq!(c.worse, 1);
    }

    /// Issue 13g: a change past the threshold that the interval spread cannot tell from noise
    /// is "within noise" and does not count as worse; the same change with steady intervals
    /// fails.
    #[test]
    fn a_change_within_the_noise_does_not_fail() {
        // Six counted 1-second intervals, received rates alternating around `mean` by `swing`.
        let shaped = |mean: f64, swing: f64| {
            let mut r = tcp_fixture();
            let template = r.intervals.last().unwrap().clone();
            r.intervals = (0..6)
                .map(|k| {
                    let mut rec = template.clone();
                    rec.index = k + 1;
                    rec.start = 1.0 + k as f64;
                    rec.end = rec.start + 1.0;
                    rec.omitted = false;
                    let v = mean * if k % 2 == 0 { 1.0 + swing } else { 1.0 - swing };
                    rec.sums[0].receiver_bps = Some(BitRate(v));
                    rec
                })
                .collect();
            r.totals[0].receiver.bits_per_second = BitRate(mean);
            r
        };
        // 10 % lower, intervals swinging +-50 %: noise ~ 2 * sqrt(2 * 0.55^2 / 6) = 64 %.
        let c = run_pair(shaped(100e9, 0.5), shaped(90e9, 0.5));
        let r = row(&c, "client -> server received");
        assert_eq!(r.beyond_noise, Some(false), "{r:?}");
        assert_eq!(r.verdict, Verdict::WithinNoise, "{r:?}");
        assert_eq!(c.worse, 0);
        assert!(text(&c).contains("within noise"));
        assert!(json(&c).contains("\"within_noise\""));
        // The same 10 % with steady intervals (+-1 %): beyond noise, worse.
        let c = run_pair(shaped(100e9, 0.01), shaped(90e9, 0.01));
        let r = row(&c, "client -> server received");
        assert_eq!((r.verdict, r.beyond_noise), (Verdict::Worse, Some(true)));
        assert_eq!(c.worse, 1);
    }
}
