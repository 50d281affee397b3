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
            MetricKind::Histogram => "histogram",
        };
        let _ = writeln!(s, "# HELP {} {}", f.name, escape_help(&f.help));
        let _ = writeln!(s, "# TYPE {} {kind}", f.name);
        for m in &f.samples {
            s.push_str(&f.name);
            s.push_str(m.suffix);
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

/// A finished run's metrics for `--push-gateway`: the headline, when it ran, and for tests
/// with directions the rates, loss and retransmits of each; for latency the RTT quantiles.
/// `labels` (the run's `--label` pairs) go on every sample.
pub fn run_families(
    s: &crate::summary::Summary,
    run: Option<&hakaru_model::RunResult>,
    labels: &[(String, String)],
) -> Vec<MetricFamily> {
    let mut fams = summary_families(s, labels);
    if let Some(r) = run {
        fams.extend(total_families(s, r, labels));
        fams.push(rtt_family(s, r, labels));
    }
    fams
}

/// `labels` and then `extra`.
fn with(labels: &[(String, String)], extra: &[(&str, &str)]) -> Vec<(String, String)> {
    labels
        .iter()
        .cloned()
        .chain(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

fn gauge(name: &str, help: &str) -> MetricFamily {
    MetricFamily::new(name, help, MetricKind::Gauge)
}

/// One sample, unless its value is not a number (an exposition has no place for one).
fn push(f: &mut MetricFamily, l: Vec<(String, String)>, v: f64) {
    if v.is_finite() {
        f.samples.push(hakaru_model::metrics::MetricSample {
            labels: l,
            value: v,
            suffix: "",
        });
    }
}

/// What the history row has for every run: its headline, start and flows.
fn summary_families(s: &crate::summary::Summary, labels: &[(String, String)]) -> Vec<MetricFamily> {
    let base = [
        ("kind", s.kind.as_str()),
        ("peer", s.peer.as_str()),
        ("direction", s.direction.as_str()),
    ];
    let mut headline = gauge(
        "hakaru_run_headline",
        "The run's headline figure in the unit its label names.",
    );
    if let Some(v) = s.headline {
        let mut l = base.to_vec();
        l.push(("unit", s.unit.as_str()));
        push(&mut headline, with(labels, &l), v);
    }
    let mut started = gauge(
        "hakaru_run_start_timestamp_seconds",
        "When the run started, Unix seconds.",
    );
    if let Some(t) = s.started_at {
        push(&mut started, with(labels, &base), t);
    }
    let mut flows = gauge("hakaru_run_flows", "Flows (connections) per direction.");
    if let Some(n) = s.flows {
        push(&mut flows, with(labels, &base), f64::from(n));
    }
    vec![headline, started, flows]
}

/// Each direction's totals: received and sent rates, TCP retransmits, UDP packet rate and
/// loss.
fn total_families(
    s: &crate::summary::Summary,
    r: &hakaru_model::RunResult,
    labels: &[(String, String)],
) -> [MetricFamily; 5] {
    let mut received = gauge(
        "hakaru_run_received_bits_per_second",
        "Payload received over the run, per direction, all flows.",
    );
    let mut sent = gauge(
        "hakaru_run_sent_bits_per_second",
        "Payload sent over the run, per direction, all flows.",
    );
    let mut retrans = gauge(
        "hakaru_run_retransmits",
        "TCP segments retransmitted during the run, per direction.",
    );
    let mut pps = gauge(
        "hakaru_run_received_datagrams_per_second",
        "UDP datagrams received per second, per direction.",
    );
    let mut loss = gauge(
        "hakaru_run_loss_ratio",
        "UDP datagrams lost over datagrams sent, per direction (0 to 1).",
    );
    for t in &r.totals {
        let l = with(
            labels,
            &[
                ("kind", s.kind.as_str()),
                ("peer", s.peer.as_str()),
                ("direction", t.dir.label()),
            ],
        );
        push(&mut received, l.clone(), t.receiver.bits_per_second.0);
        push(&mut sent, l.clone(), t.sender.bits_per_second.0);
        if let Some(u) = &t.udp {
            push(&mut pps, l.clone(), u.received_pps);
            push(&mut loss, l.clone(), u.lost_percent / 100.0);
        } else if let (true, Some(r)) = (s.kind == "tcp", t.retransmits) {
            push(&mut retrans, l, r as f64);
        }
    }
    [received, sent, retrans, pps, loss]
}

/// A latency run's round-trip quantiles.
fn rtt_family(
    s: &crate::summary::Summary,
    r: &hakaru_model::RunResult,
    labels: &[(String, String)],
) -> MetricFamily {
    let mut rtt = gauge(
        "hakaru_run_rtt_seconds",
        "Round-trip time quantiles of a latency run.",
    );
    if let Some(lat) = r.detail.latency() {
        let q = &lat.rtt;
        for (name, us) in [
            ("0.5", q.p50_us),
            ("0.9", q.p90_us),
            ("0.99", q.p99_us),
            ("0.999", q.p999_us),
        ] {
            let l = with(
                labels,
                &[
                    ("kind", s.kind.as_str()),
                    ("peer", s.peer.as_str()),
                    ("quantile", name),
                ],
            );
            push(&mut rtt, l, us / 1e6);
        }
    }
    rtt
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
        let h = MetricFamily::new("rtt_seconds", "RTT.", MetricKind::Histogram).with_histogram(
            &[("peer".into(), "a".into())],
            &[0.001, 0.01],
            &[2, 0, 1],
            0.5,
            3,
        );
        assert_eq!(
            render(&[h]),
            "# HELP rtt_seconds RTT.\n# TYPE rtt_seconds histogram\n\
             rtt_seconds_bucket{peer=\"a\",le=\"0.001\"} 2\n\
             rtt_seconds_bucket{peer=\"a\",le=\"0.01\"} 2\n\
             rtt_seconds_bucket{peer=\"a\",le=\"+Inf\"} 3\n\
             rtt_seconds_sum{peer=\"a\"} 0.5\nrtt_seconds_count{peer=\"a\"} 3\n"
        );
        assert_eq!(value(f64::INFINITY), "+Inf");
    }
}
