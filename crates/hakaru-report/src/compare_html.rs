//! Before and after in the report (issue 34): when a report has exactly two results of one
//! kind, each metric `hakaru compare` judges is drawn as two bars (base and new) with the
//! interval-to-interval noise band around the base, and the verdict beside them, at the
//! compare defaults (5 %, 0.1 loss points). HTML and CSS only, a `title` on every bar.

use std::fmt::Write;

use crate::compare::{self, Verdict};
use crate::input::{Content, Input};

/// The compare defaults (`hakaru compare` without flags).
const THRESHOLD: f64 = 0.05;
const LOSS_POINTS: f64 = 0.1;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn verdict(v: Verdict) -> (&'static str, &'static str) {
    match v {
        Verdict::Better => ("better", "ok"),
        Verdict::Worse => ("WORSE", "bad"),
        Verdict::Within => ("within threshold", ""),
        Verdict::WithinNoise => ("within noise", ""),
        Verdict::Informational => ("informational", ""),
    }
}

/// The section, or nothing when the report is not one before/after pair of test results.
pub(crate) fn section(inputs: &[Input]) -> String {
    let [a, b] = inputs else {
        return String::new();
    };
    if !matches!((&a.content, &b.content), (Content::Run(_), Content::Run(_))) {
        return String::new();
    }
    let Ok(c) = compare::compare(a, b, THRESHOLD, LOSS_POINTS, true) else {
        return String::new();
    };
    let mut html = format!(
        "<section><h2>{} before and after: {} &rarr; {}</h2><p class=\"meta\">each metric as <code>hakaru compare</code> judges it (threshold {:.0} %, loss {} points); the shaded band is the interval-to-interval noise around the base. {}</p>\n<div class=\"cmp\">",
        esc(&c.test),
        esc(&c.base),
        esc(&c.new),
        c.threshold_percent,
        c.loss_threshold_points,
        if c.differences.is_empty() {
            String::new()
        } else {
            format!("Run differently: {}.", esc(&c.differences.join("; ")))
        }
    );
    for r in &c.rows {
        let max = r.base.abs().max(r.new.abs());
        if max <= 0.0 || !max.is_finite() {
            continue;
        }
        let w = |v: f64| 100.0 * v.abs() / max;
        // Rates in the unit their size asks for (Mbit/s, kpkt/s); other figures as they are.
        let (unit, div) = if r.unit.ends_with("/s") {
            crate::charts::rate_unit(max, &r.unit)
        } else {
            (r.unit.clone(), 1.0)
        };
        let num = |v: f64| format!("{} {unit}", crate::charts::value_text(v / div));
        let noise = r.noise_percent.map(|n| {
            let lo = w(r.base * (1.0 - n / 100.0)).max(0.0);
            let hi = w(r.base * (1.0 + n / 100.0)).min(100.0);
            format!(
                "<span class=\"noise\" style=\"left:{lo:.1}%;width:{:.1}%\" title=\"noise: base &plusmn; {n:.2} %\"></span>",
                (hi - lo).max(0.3)
            )
        });
        let (word, class) = verdict(r.verdict);
        let change = r
            .change_percent
            .map_or_else(String::new, |p| format!("{p:+.1} %"));
        let _ = write!(
            html,
            "<div class=\"row\"><span class=\"metric\">{m}</span><span class=\"pair\">\
             <span class=\"track\"><span class=\"base\" style=\"width:{:.1}%\" title=\"{m}, base: {b}\"></span>{}</span>\
             <span class=\"track\"><span class=\"new {class}\" style=\"width:{:.1}%\" title=\"{m}, new: {n}\"></span></span></span>\
             <span class=\"vals\">{b}<br>{n}</span><span class=\"verdict {class}\">{change} {word}</span></div>",
            w(r.base),
            noise.unwrap_or_default(),
            w(r.new),
            m = esc(&r.metric),
            b = esc(&num(r.base)),
            n = esc(&num(r.new)),
        );
    }
    html.push_str("</div></section>\n");
    html
}

/// The styles of the bars (light and dark).
pub(crate) const STYLE: &str = ".cmp .row{display:flex;align-items:center;gap:.6em;margin:.35em 0;font-size:.9em}\
.cmp .metric{width:16em}.cmp .pair{flex:0 0 35%}.cmp .track{display:block;position:relative;height:.8em;margin:2px 0;background:#eee}\
.cmp .base,.cmp .new{display:block;height:100%}.cmp .base{background:#7f7f7f}.cmp .new{background:#1f77b4}\
.cmp .new.bad{background:#d62728}.cmp .new.ok{background:#2ca02c}\
.cmp .noise{position:absolute;top:-2px;bottom:-2px;background:rgba(255,127,14,.35);border:1px solid rgba(255,127,14,.8)}\
.cmp .vals{width:10em;font-variant-numeric:tabular-nums;font-size:.85em}.cmp .verdict.bad{color:#c0392b;font-weight:600}\
.cmp .verdict.ok{color:#2c7a2c}@media (prefers-color-scheme:dark){.cmp .track{background:#2b2f35}\
.cmp .verdict.bad{color:#ff7a6b}.cmp .verdict.ok{color:#6cc46c}}";
