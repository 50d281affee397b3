//! Human text for `hakaru http`: the opening line, interval lines per connection, and the
//! summary (per connection, status codes, connect/TLS/first-byte times, CPU and NIC).

use std::fmt::Write;

use hakaru_model::{
    Bytes, HttpConnection, HttpMethod, HttpSpec, IntervalRecord, RunResult, TimeStats,
};

use crate::text_parts::{end_lines, span, RULE};
use crate::View;

/// The line that opens a run.
pub fn header(spec: &HttpSpec, embedded: bool) -> String {
    let what = match (spec.duration, spec.bytes, spec.range) {
        (Some(t), _, _) => format!("requests repeated for {t}"),
        (None, Some(b), _) => format!("{} of body per connection", Bytes(b.0)),
        (None, None, true) => "one file split into byte ranges".to_string(),
        (None, None, false) => "one pass".to_string(),
    };
    let body = match (spec.method, spec.upload) {
        (HttpMethod::Get, _) => "body discarded".to_string(),
        (_, Some(b)) => format!("{} generated body per request", Bytes(b.0)),
        (_, None) => String::new(),
    };
    let mut s = format!(
        "hakaru HTTP {} {}{}: {} connection(s), {what}, {body}\n",
        spec.method.as_str(),
        spec.urls.first().map_or("", String::as_str),
        if embedded {
            " (embedded loopback endpoint)"
        } else {
            ""
        },
        spec.parallel,
    );
    for u in spec.urls.iter().skip(1) {
        let _ = writeln!(s, "  and {u}");
    }
    s
}

/// Column headings of the interval lines.
pub fn interval_heading() -> String {
    format!(
        "{:<5} {:<4} {:>15}  {:>10} {:>11}\n",
        "[ ID]", "dir", "interval", "body", "goodput"
    )
}

/// Each connection's body bytes and goodput over one interval, then their sum.
pub fn interval_lines(rec: &IntervalRecord, view: &View) -> String {
    let mut s = String::new();
    let shown = view.flow_rows(rec.flows.len());
    let line = |s: &mut String, id: String, dir: &str, b: Option<u64>, r: Option<f64>| {
        let _ = writeln!(
            s,
            "{id:<5} {dir:<4} {:>15}  {:>10} {:>11}",
            span(rec.start, rec.end),
            Bytes(b.unwrap_or(0)).to_string(),
            hakaru_model::BitRate(r.unwrap_or(0.0)).to_string(),
        );
    };
    if shown {
        for f in &rec.flows {
            let (b, r) = moved(
                f.receiver_bytes,
                f.receiver_bps,
                f.sender_bytes,
                f.sender_bps,
            );
            line(&mut s, format!("[{:>3}]", f.id), f.dir.label(), b, r);
        }
    }
    for d in &rec.sums {
        if shown && rec.flows.len() < 2 {
            continue;
        }
        let (b, r) = moved(
            d.receiver_bytes,
            d.receiver_bps,
            d.sender_bytes,
            d.sender_bps,
        );
        line(&mut s, "[SUM]".into(), d.dir.label(), b, r);
    }
    s
}

/// A download is counted where it arrives (the client, the receiver); an upload where it
/// leaves (the client, the sender).
fn moved(
    rb: Option<u64>,
    rr: Option<hakaru_model::BitRate>,
    sb: Option<u64>,
    sr: Option<hakaru_model::BitRate>,
) -> (Option<u64>, Option<f64>) {
    match rb {
        Some(b) => (Some(b), rr.map(|r| r.0)),
        None => (sb, sr.map(|r| r.0)),
    }
}

fn times(t: &Option<TimeStats>) -> String {
    match t {
        Some(t) => format!("{:.2}", t.median_ms),
        None => "-".into(),
    }
}

fn statuses(c: &std::collections::BTreeMap<u16, u64>) -> String {
    if c.is_empty() {
        return "-".into();
    }
    c.iter()
        .map(|(k, v)| format!("{k}x{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn conn_row(s: &mut String, c: &HttpConnection) {
    let _ = writeln!(
        s,
        "[{:>3}] {:>10} {:>11} {:>5}/{:<5} {:>10} {:>8} {:>8} {:>8}",
        c.id,
        Bytes(c.bytes).to_string(),
        c.bits_per_second.to_string(),
        c.completed,
        c.requests,
        statuses(&c.status),
        times(&c.connect_ms),
        times(&c.tls_ms),
        times(&c.ttfb_ms),
    );
}

fn stats_line(s: &mut String, what: &str, t: &Option<TimeStats>) {
    if let Some(t) = t {
        let _ = writeln!(
            s,
            "{what}: median {:.3} ms, mean {:.3}, min {:.3}, max {:.3} ({} measured)",
            t.median_ms, t.mean_ms, t.min_ms, t.max_ms, t.count
        );
    }
}

/// The summary: per connection (up to 8 unless `--per-flow`), totals, times, errors, CPU,
/// NIC, and the headline.
pub fn summary(r: &RunResult, view: &View) -> String {
    let Some(h) = r.detail.http() else {
        return String::new();
    };
    let mut s = String::new();
    s.push_str(RULE);
    s.push('\n');
    if view.flow_rows(h.connections.len()) {
        let _ = writeln!(
            s,
            "{:<5} {:>10} {:>11} {:>11} {:>10} {:>8} {:>8} {:>8}",
            "[ ID]", "body", "goodput", "ok/reqs", "status", "conn ms", "tls ms", "ttfb ms"
        );
        for c in &h.connections {
            conn_row(&mut s, c);
        }
        let urls: Vec<&str> = h.connections.iter().map(|c| c.url.as_str()).collect();
        if urls.windows(2).any(|w| w[0] != w[1]) {
            for c in &h.connections {
                let _ = writeln!(s, "[{:>3}] {}", c.id, c.url);
            }
        }
        if let Some(t) = h.connections.iter().find_map(|c| c.tls.as_deref()) {
            let _ = writeln!(s, "TLS: {t}");
        }
    } else {
        let _ = writeln!(
            s,
            "{} connections (per-connection rows with --per-flow)",
            h.connections.len()
        );
    }
    s.push_str(&sums(r));
    stats_line(&mut s, "connect", &h.connect_ms);
    stats_line(&mut s, "TLS handshake", &h.tls_ms);
    stats_line(&mut s, "time to first byte", &h.ttfb_ms);
    for e in h.errors.iter().take(8) {
        let _ = writeln!(s, "error: {e}");
    }
    if h.errors.len() > 8 {
        let _ = writeln!(
            s,
            "... and {} more errors (--json has them all)",
            h.errors.len() - 8
        );
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

/// The totals over every connection.
pub fn sums(r: &RunResult) -> String {
    let Some(h) = r.detail.http() else {
        return String::new();
    };
    format!(
        "total: {} of body in {:.3} s = {}; requests: {} sent, {} completed, {} failed; status {}\n",
        Bytes(h.bytes),
        h.seconds,
        h.bits_per_second,
        h.requests,
        h.completed,
        h.failed,
        statuses(&h.status)
    )
}

/// The closing headline.
pub fn headline(r: &RunResult) -> String {
    let Some(h) = r.detail.http() else {
        return String::new();
    };
    let verb = match h.method {
        HttpMethod::Get => "downloaded",
        HttpMethod::Put | HttpMethod::Post => "uploaded",
    };
    // Requests neither completed nor failed were cut by the run's end (-t, Ctrl-C).
    let cut = h.requests.saturating_sub(h.completed + h.failed);
    format!(
        "http: {} goodput {verb} over {} connection(s) ({} in {:.2} s, {}/{} requests ok{})\n",
        h.bits_per_second,
        h.connections.len(),
        Bytes(h.bytes),
        h.seconds,
        h.completed,
        h.requests,
        if cut > 0 {
            format!(", {cut} cut at the end of the run")
        } else {
            String::new()
        }
    )
}

impl crate::kind_text::KindText for hakaru_model::HttpSpec {
    fn header(&self, _server: &str, embedded: bool) -> String {
        header(self, embedded)
    }
    fn interval_heading(&self, _view: &View) -> String {
        interval_heading()
    }
    fn summary(&self, r: &RunResult, view: &View) -> String {
        summary(r, view)
    }
    fn sums_and_headline(&self, r: &RunResult, _view: &View) -> String {
        sums(r) + &headline(r)
    }
    fn row(&self, r: &RunResult, s: &mut crate::kind_text::Row) {
        s.flows = Some(self.parallel);
        if let Some(x) = r.detail.http() {
            s.direction = x.dir.label().into();
            s.headline = Some(x.bits_per_second.0);
        }
        match self.urls.first() {
            Some(u) if !r.embedded_server => s.peer = Some(u.clone()),
            _ => {}
        }
        s.unit = "bit/s".into();
    }
    fn csv_totals(&self, r: &RunResult) -> String {
        crate::csv::http_totals(r)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{BitRate, Dur, HttpResult};

    fn conn(id: u32, bytes: u64) -> HttpConnection {
        HttpConnection {
            id,
            url: "http://h/f".into(),
            bytes,
            seconds: 2.0,
            bits_per_second: BitRate::from_bytes(bytes, 2.0),
            requests: 1,
            completed: 1,
            connects: 1,
            status: [(200, 1)].into_iter().collect(),
            ..Default::default()
        }
    }

    #[test]
    fn header_names_method_url_and_amount() {
        let spec = HttpSpec {
            urls: vec!["http://h/f".into()],
            method: HttpMethod::Get,
            parallel: 4,
            duration: Some(Dur::from_secs(5)),
            bytes: None,
            upload: None,
            range: false,
            headers: vec![],
            insecure: false,
            cacert: None,
            max_redirects: 10,
            interval: Dur::from_secs(1),
            connect_timeout: Dur::from_secs(5),
            stall_timeout: Dur::from_secs(10),
            ip_version: None,
        };
        let h = header(&spec, false);
        assert!(
            h.starts_with("hakaru HTTP GET http://h/f: 4 connection(s)"),
            "{h}"
        );
        assert!(h.contains("repeated for 5"), "{h}");
    }

    #[test]
    fn headline_sums_connections() {
        let h = HttpResult::from_connections(
            HttpMethod::Get,
            2.0,
            vec![conn(1, 250_000_000), conn(2, 250_000_000)],
            [&[1.0], &[], &[2.0, 3.0]],
            0,
            vec![],
        );
        assert_eq!(h.bits_per_second, BitRate(2e9));
        assert_eq!(h.status.get(&200), Some(&2));
        let mut row = String::new();
        conn_row(&mut row, &h.connections[0]);
        assert!(row.contains("200x1"), "{row}");
        assert_eq!(h.ttfb_ms.as_ref().unwrap().median_ms, 2.5);
    }
}
