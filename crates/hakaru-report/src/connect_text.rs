//! Human text for connection-rate tests (`hakaru connect`): connections per second lead, then
//! the close used, connect-time and transaction-time percentiles, and CPU at each end.

use std::fmt::Write;

use hakaru_model::{Bytes, ConnectSpec, IntervalRecord, RunResult};

use crate::latency_text::{stats_heading, stats_line};
use crate::text_parts::{end_lines, span, trailer};

/// The line that opens a connection-rate run.
pub fn header(spec: &ConnectSpec, server: &str, embedded: bool) -> String {
    format!(
        "hakaru connect to {server}{}: close with {}, {} connector(s), {}, {} request, {} response\n",
        if embedded {
            " (embedded loopback server)"
        } else {
            ""
        },
        close_words(spec.close_name()),
        spec.connectors,
        spec.duration,
        Bytes(spec.request.0),
        Bytes(spec.response.0),
    )
}

fn close_words(close: &str) -> &'static str {
    if close == "rst" {
        "RST (--rst: no TIME_WAIT)"
    } else {
        "FIN (the server first: TIME_WAIT at the server)"
    }
}

/// Column headings for the interval lines.
pub fn interval_heading() -> String {
    format!(
        "{:<5} {:>15}  {:>11}  {:>13}  {:>7}\n",
        "", "Interval", "Connections", "Conn/s", "Failed"
    )
}

/// The line for one interval.
pub fn interval_lines(rec: &IntervalRecord) -> String {
    let Some(c) = rec.connect else {
        return String::new();
    };
    format!(
        "[CPS] {:>15}  {:>11}  {:>13.1}  {:>7}\n",
        span(rec.start, rec.end),
        c.connections,
        c.connections_per_second,
        c.failed
    )
}

/// The final summary of a connection-rate test.
pub fn summary(r: &RunResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -"
    );
    let Some(c) = r.detail.connect() else {
        let _ = writeln!(s, "no connection figures in this result");
        return s;
    };
    let _ = writeln!(
        s,
        "[CPS] {:>15}  {:>11}  {:>13.1}  {:>7}   close {}",
        span(0.0, c.seconds),
        c.connections,
        c.connections_per_second,
        c.failed,
        close_label(c)
    );
    stats_heading(&mut s);
    stats_line(&mut s, "connect time", &c.connect_time);
    stats_line(&mut s, "transaction time", &c.transaction_time);
    let _ = writeln!(
        s,
        "  (a transaction: socket, connect, request, whole response, close)"
    );
    if !c.errors.is_empty() {
        let _ = writeln!(s, "failures: {}", c.errors.join("; "));
    }
    if let Some(sv) = &c.server {
        let _ = writeln!(
            s,
            "server: {} accepted, {} served, {} dropped, {} from other addresses",
            sv.accepted, sv.served, sv.dropped, sv.foreign
        );
    }
    if !c.histogram.is_empty() {
        let _ = writeln!(s, "connect-time distribution:");
        let total = c.histogram.iter().map(|b| b.count).sum::<u64>().max(1);
        for b in &c.histogram {
            let bar = "#".repeat(((b.count * 50) / total) as usize);
            let _ = writeln!(s, "  <= {:>10.1} us {:>10}  {bar}", b.le_us, b.count);
        }
    }
    let _ = writeln!(s, "Ends (CPU covers the whole machine at each end):");
    end_lines(&mut s, "client", &r.client);
    end_lines(&mut s, "server", &r.server_end);
    if let Some(cpu) = r.client.cpu.as_ref().filter(|c| c.busy_s > 0.0) {
        let _ = writeln!(
            s,
            "  client efficiency {:.0} connections per busy CPU-second of its machine",
            c.connections as f64 / cpu.busy_s
        );
    }
    trailer(&mut s, r);
    s.push_str(&headline(r));
    s
}

/// The closing headline: connections per second and connect-time percentiles.
pub fn headline(r: &RunResult) -> String {
    let Some(c) = r.detail.connect() else {
        return String::new();
    };
    format!(
        "connect: {:.0} connections/s, close {}, connect time p50 {:.1} us p99 {:.1} us\n",
        c.connections_per_second,
        close_label(c),
        c.connect_time.p50_us,
        c.connect_time.p99_us
    )
}

/// How the connections were closed: `fin, server first`, `rst, client first`, or only the
/// close of a result saved before `first_close` existed.
fn close_label(c: &hakaru_model::ConnectResult) -> String {
    if c.first_close.is_empty() {
        c.close.clone()
    } else {
        format!("{}, {} first", c.close, c.first_close)
    }
}

impl crate::kind_text::KindText for hakaru_model::ConnectSpec {
    fn header(&self, server: &str, embedded: bool) -> String {
        header(self, server, embedded)
    }
    fn interval_heading(&self, _view: &crate::View) -> String {
        interval_heading()
    }
    fn summary(&self, r: &RunResult, _view: &crate::View) -> String {
        summary(r)
    }
    fn sums_and_headline(&self, r: &RunResult, _view: &crate::View) -> String {
        headline(r)
    }
    fn row(&self, r: &RunResult, s: &mut crate::kind_text::Row) {
        s.flows = Some(self.connectors);
        s.headline = r.detail.connect().map(|c| c.connections_per_second);
        s.unit = "conn/s".into();
    }
    fn csv_totals(&self, r: &RunResult) -> String {
        crate::csv::connect_totals(r)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::ConnectInterval;

    #[test]
    fn header_names_the_close() {
        let spec = ConnectSpec {
            rst: true,
            connectors: 4,
            ..ConnectSpec::default()
        };
        let h = header(&spec, "127.0.0.1:5201", true);
        assert!(h.contains("4 connector(s)") && h.contains("RST"), "{h}");
        let h = header(&ConnectSpec::default(), "h:1", false);
        assert!(h.contains("FIN") && !h.contains("embedded"), "{h}");
    }

    #[test]
    fn interval_line_shows_rate_and_failures() {
        let rec = IntervalRecord {
            index: 0,
            start: 0.0,
            end: 1.0,
            omitted: false,
            flows: Vec::new(),
            sums: Vec::new(),
            connect: Some(ConnectInterval {
                connections: 21_000,
                failed: 2,
                connections_per_second: 21_000.0,
            }),
            latency: None,
            client_nic: None,
            server_nic: None,
            probe: None,
        };
        let l = interval_lines(&rec);
        assert!(l.starts_with("[CPS]") && l.contains("21000.0") && l.trim_end().ends_with('2'));
    }
}
