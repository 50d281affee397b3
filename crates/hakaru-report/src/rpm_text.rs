//! Human text for `hakaru rpm`: the opening line, the intervals (connections, goodput, the
//! window's responsiveness), the components (foreign and self probes' trimmed means), the
//! confidence of each stage, and the headline (RPM and the milliseconds it stands for).

use std::fmt::Write;

use hakaru_model::{RpmResult, RpmSpec, RunResult};

use crate::compare_metrics::{Better, KindMetrics, Metrics, Scale};
use crate::csv::{num, Row};
use crate::text_parts::{end_lines, RULE};
use crate::View;

/// The line that opens a run.
pub fn header(spec: &RpmSpec, embedded: bool) -> String {
    format!(
        "hakaru RPM {}{}: {} load, up to {} connection(s) per direction, {} intervals, at most {}{}\n",
        spec.url,
        if embedded {
            " (embedded loopback endpoint)"
        } else {
            ""
        },
        spec.direction.as_str(),
        spec.max_connections,
        spec.interval,
        spec.max_duration,
        if spec.http1 { ", HTTP/1.1" } else { "" },
    )
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// Each interval: connections, goodput and its moving average, the window's RPM.
pub fn intervals(x: &RpmResult) -> String {
    let mut s = format!(
        "{:>8} {:>5} {:>12} {:>12} {:>8} {:>10} {:>8}\n",
        "end s", "conns", "goodput", "moving avg", "RPM", "foreign ms", "self ms"
    );
    for i in &x.intervals {
        let _ = writeln!(
            s,
            "{:>8.2} {:>5} {:>12} {:>12} {:>8} {:>10} {:>8}",
            i.end,
            i.connections,
            i.bits_per_second.to_string(),
            if i.goodput_average.0 > 0.0 {
                i.goodput_average.to_string()
            } else {
                "-".into()
            },
            i.rpm.map_or("-".into(), |r| format!("{r:.0}")),
            ms(i.foreign_ms),
            ms(i.self_ms),
        );
    }
    s
}

/// The components, the goodput, the confidences.
pub fn sums(r: &RunResult) -> String {
    let Some(x) = r.detail.rpm() else {
        return String::new();
    };
    let p = &x.probes;
    let mut s = format!(
        "foreign probes ({}): TCP {} ms, TLS {} ms, HTTP {} ms -> {:.0} RPM\n",
        p.foreign,
        ms(p.tcp_ms),
        ms(p.tls_ms),
        ms(p.http_ms),
        x.foreign_rpm
    );
    let _ = writeln!(
        s,
        "self probes ({}): {} ms{} -> {:.0} RPM",
        p.selfp,
        ms(p.self_ms),
        if x.protocol == "http/1.1" {
            " (TCP RTT of the load connections: HTTP/1.1)"
        } else {
            ""
        },
        x.self_rpm
    );
    if let Some(ms_in_order) = p.self_in_order_ms {
        let _ = writeln!(
            s,
            "  with nothing out of order ahead of them: {} ms ({} of {} waited behind a loss)",
            ms(Some(ms_in_order)),
            p.self_behind_loss.unwrap_or(0),
            p.selfp
        );
    }
    let mut load = Vec::new();
    if let Some(d) = x.download {
        load.push(format!("download {d}"));
    }
    if let Some(u) = x.upload {
        load.push(format!("upload {u}"));
    }
    let _ = writeln!(
        s,
        "working conditions: {} over {} connection(s), {} {}; confidence: goodput {}, responsiveness {}",
        load.join(", "),
        x.connections,
        x.protocol,
        x.tls.as_deref().unwrap_or("without TLS"),
        x.goodput_confidence.as_str(),
        x.rpm_confidence.as_str(),
    );
    if x.failed_probes > 0 {
        let _ = writeln!(s, "failed probes: {}", x.failed_probes);
    }
    s
}

/// The closing headline.
pub fn headline(r: &RunResult) -> String {
    let Some(x) = r.detail.rpm() else {
        return String::new();
    };
    format!(
        "rpm: {:.0} RPM ({:.1} ms) under working conditions, {} confidence\n",
        x.rpm,
        x.responsiveness_ms,
        x.rpm_confidence.as_str()
    )
}

/// The summary.
pub fn summary(r: &RunResult, _view: &View) -> String {
    let Some(x) = r.detail.rpm() else {
        return String::new();
    };
    let mut s = String::new();
    s.push_str(&intervals(x));
    s.push_str(RULE);
    s.push('\n');
    s.push_str(&sums(r));
    for e in x.errors.iter().take(8) {
        let _ = writeln!(s, "error: {e}");
    }
    if r.interrupted {
        s.push_str("  (interrupted: the figures cover the time it ran)\n");
    }
    end_lines(&mut s, "client", &r.client);
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s.push_str(&headline(r));
    s
}

impl crate::kind_text::KindText for RpmSpec {
    fn header(&self, _server: &str, embedded: bool) -> String {
        header(self, embedded)
    }
    fn interval_heading(&self, _view: &View) -> String {
        String::new()
    }
    fn summary(&self, r: &RunResult, view: &View) -> String {
        summary(r, view)
    }
    fn sums_and_headline(&self, r: &RunResult, _view: &View) -> String {
        sums(r) + &headline(r)
    }
    fn row(&self, r: &RunResult, s: &mut crate::kind_text::Row) {
        s.direction = self.direction.as_str().into();
        s.flows = r.detail.rpm().map(|x| x.connections);
        s.headline = r.detail.rpm().map(|x| x.rpm);
        s.unit = "RPM".into();
        if !r.embedded_server {
            s.peer = Some(self.url.clone());
        }
    }
    fn csv_totals(&self, r: &RunResult) -> String {
        r.detail
            .rpm()
            .map_or_else(String::new, |x| rpm_rows(r.spec.name(), x))
    }
}

/// What `hakaru compare` reads of a responsiveness run.
impl KindMetrics for RpmSpec {
    fn metrics(&self, m: &mut Metrics<'_>) {
        let (b, n) = (m.b, m.n);
        let both = |f: &dyn Fn(&RunResult) -> Option<f64>| Some((f(b)?, f(n)?));
        type Pick = fn(&hakaru_model::rpm::RpmResult) -> Option<f64>;
        let higher: [(&str, &'static str, Pick); 5] = [
            ("RPM", "1/min", |r| Some(r.rpm)),
            ("foreign RPM", "1/min", |r| Some(r.foreign_rpm)),
            ("self RPM", "1/min", |r| Some(r.self_rpm)),
            ("download goodput", "bit/s", |r| Some(r.download?.0)),
            ("upload goodput", "bit/s", |r| Some(r.upload?.0)),
        ];
        for (name, unit, f) in higher {
            m.push(
                name.into(),
                unit,
                (Better::Higher, Scale::Relative),
                both(&|r| f(r.detail.rpm()?)),
                None,
            );
        }
        m.push(
            "responsiveness".into(),
            "ms",
            (Better::Lower, Scale::Relative),
            both(&|r| Some(r.detail.rpm()?.responsiveness_ms)),
            None,
        );
    }
}

/// A responsiveness run: a `total` row per loaded direction (its goodput where the client
/// counts it), the responsiveness as a round trip in `rtt_mean_us` (60 000 000 / RPM), the
/// probes in `transactions` and the failed ones in `failed` (docs/csv.md).
fn rpm_rows(test: &str, x: &hakaru_model::RpmResult) -> String {
    let mut s = String::new();
    for (dir, bps, col) in [
        (hakaru_model::FlowDir::Down, x.download, "receiver_bps"),
        (hakaru_model::FlowDir::Up, x.upload, "sender_bps"),
    ] {
        let Some(bps) = bps else { continue };
        let mut row = Row::new(test, "total");
        row.set("start", 0)
            .set("end", num(x.seconds))
            .set("dir", dir.label())
            .set("flow", "")
            .set(col, num(bps.0))
            .set("transactions", x.probes.foreign + x.probes.selfp)
            .set("failed", x.failed_probes)
            .set("rtt_mean_us", num(x.responsiveness_ms * 1000.0))
            .set("connections", x.connections);
        s.push_str(&row.line());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{BitRate, RpmConfidence, RpmInterval, RpmProbes};

    #[test]
    fn the_sums_name_every_component() {
        let x = RpmResult {
            rpm: 1500.0,
            responsiveness_ms: 40.0,
            foreign_rpm: 2000.0,
            self_rpm: 1000.0,
            probes: RpmProbes {
                tcp_ms: Some(20.0),
                tls_ms: Some(30.0),
                http_ms: Some(40.0),
                self_ms: Some(60.0),
                foreign: 12,
                selfp: 11,
                self_in_order_ms: Some(52.0),
                self_behind_loss: Some(3),
            },
            download: Some(BitRate(20e6)),
            upload: None,
            connections: 5,
            goodput_confidence: RpmConfidence::High,
            rpm_confidence: RpmConfidence::Medium,
            protocol: "h2".into(),
            tls: Some("TLSv1_3".into()),
            peer: "127.0.0.1:1".into(),
            seconds: 12.0,
            bytes: hakaru_model::Bytes(1),
            failed_probes: 0,
            intervals: vec![RpmInterval {
                end: 1.0,
                connections: 1,
                rpm: Some(1500.0),
                ..Default::default()
            }],
            errors: vec![],
        };
        let t = intervals(&x);
        assert!(t.contains("1500"), "{t}");
        let mut r = crate::tests::fixture("tcp_p2_omit1");
        r.detail = hakaru_model::KindDetail::Rpm(Box::new(x));
        let s = sums(&r);
        assert!(
            s.contains("TCP 20.00 ms, TLS 30.00 ms, HTTP 40.00 ms -> 2000 RPM"),
            "{s}"
        );
        assert!(s.contains("self probes (11): 60.00 ms -> 1000 RPM"), "{s}");
        assert!(
            s.contains(
                "nothing out of order ahead of them: 52.00 ms (3 of 11 waited behind a loss)"
            ),
            "{s}"
        );
        let load = format!("download {} over 5 connection(s)", BitRate(20e6));
        assert!(s.contains(&load), "{s}");
        assert!(s.contains("goodput high, responsiveness medium"), "{s}");
        assert_eq!(
            headline(&r),
            "rpm: 1500 RPM (40.0 ms) under working conditions, medium confidence\n"
        );
    }
}
