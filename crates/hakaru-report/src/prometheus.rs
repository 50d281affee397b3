//! The Prometheus text exposition format (version 0.0.4) of metric families.

use std::fmt::Write;

use hakaru_model::metrics::{MetricFamily, MetricKind};

/// The Content-Type of this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `# HELP`, `# TYPE` and one line per sample for every family with samples.
pub fn render(families: &[MetricFamily]) -> String {
    let mut s = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let kind = match f.kind {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
        };
        let _ = writeln!(s, "# HELP {} {}", f.name, escape_help(&f.help));
        let _ = writeln!(s, "# TYPE {} {kind}", f.name);
        for m in &f.samples {
            s.push_str(&f.name);
            if !m.labels.is_empty() {
                let labels: Vec<String> = m
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                    .collect();
                let _ = write!(s, "{{{}}}", labels.join(","));
            }
            let _ = writeln!(s, " {}", value(m.value));
        }
    }
    s
}

fn escape_help(h: &str) -> String {
    h.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Whole numbers without a fraction; NaN and infinities as Prometheus spells them.
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 9e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_with_help_type_and_escaped_labels() {
        let f = vec![
            MetricFamily::new("x_total", "Things\nseen \\ here.", MetricKind::Counter)
                .with(&[("kind", "tcp"), ("note", "a \"b\"")], 3.0)
                .with(&[("kind", "udp"), ("note", "")], 0.5),
            MetricFamily::new("empty", "Nothing.", MetricKind::Gauge),
            MetricFamily::new("up", "Up.", MetricKind::Gauge).with(&[], 1.0),
        ];
        let s = render(&f);
        assert_eq!(
            s,
            "# HELP x_total Things\\nseen \\\\ here.\n# TYPE x_total counter\n\
             x_total{kind=\"tcp\",note=\"a \\\"b\\\"\"} 3\nx_total{kind=\"udp\",note=\"\"} 0.5\n\
             # HELP up Up.\n# TYPE up gauge\nup 1\n"
        );
        assert_eq!(value(f64::NAN), "NaN");
        assert_eq!(value(f64::INFINITY), "+Inf");
    }
}
