//! CSV (`--format csv` and `--format csv-summary`): stable columns, numbers without units,
//! one header row. Columns are documented in docs/csv.md; a column is never renamed or moved,
//! new ones are added at the end.
//!
//! `csv`: a row per flow per interval (`row` = `flow`), a row per direction per interval
//! (`sum`), an `interval` row per interval for latency and connect tests, and at the end a
//! `total` row per direction (or one for latency and connect). `csv-summary`: the `total`
//! rows alone, one per test and direction, for spreadsheets that collect many runs.

use hakaru_model::{
    DirectionInterval, FlowInterval, IntervalRecord, LatencyStats, RunResult, TestSpec,
};

/// The columns of every row, in order.
pub const COLUMNS: &[&str] = &[
    "test",
    "row",
    "interval",
    "start",
    "end",
    "omitted",
    "flow",
    "dir",
    "receiver_bytes",
    "receiver_bps",
    "sender_bytes",
    "sender_bps",
    "retransmits",
    "cwnd",
    "rtt_us",
    "datagrams",
    "lost",
    "lost_percent",
    "out_of_order",
    "duplicates",
    "jitter_ms",
    "sender_datagrams",
    "received_pps",
    "sent_pps",
    "transactions",
    "transactions_per_second",
    "rtt_min_us",
    "rtt_mean_us",
    "rtt_p50_us",
    "rtt_p90_us",
    "rtt_p99_us",
    "rtt_p999_us",
    "rtt_max_us",
    "connections",
    "failed",
    "connections_per_second",
    "client_cpu_busy_pct",
    "server_cpu_busy_pct",
];

/// One row under construction: a value per column, empty when it does not apply.
pub(crate) struct Row(Vec<String>);

impl Row {
    pub(crate) fn new(test: &str, row: &str) -> Row {
        let mut v = vec![String::new(); COLUMNS.len()];
        v[0] = test.to_string();
        v[1] = row.to_string();
        Row(v)
    }

    pub(crate) fn set(&mut self, col: &str, value: impl ToString) -> &mut Row {
        if let Some(i) = COLUMNS.iter().position(|c| *c == col) {
            self.0[i] = value.to_string();
        }
        self
    }

    pub(crate) fn opt<T: ToString>(&mut self, col: &str, value: Option<T>) -> &mut Row {
        if let Some(v) = value {
            self.set(col, v);
        }
        self
    }

    fn stats(&mut self, s: &LatencyStats) -> &mut Row {
        self.set("rtt_min_us", num(s.min_us))
            .set("rtt_mean_us", num(s.mean_us))
            .set("rtt_p50_us", num(s.p50_us))
            .set("rtt_p90_us", num(s.p90_us))
            .set("rtt_p99_us", num(s.p99_us))
            .set("rtt_p999_us", num(s.p999_us))
            .set("rtt_max_us", num(s.max_us))
    }

    pub(crate) fn line(&self) -> String {
        let mut s = self
            .0
            .iter()
            .map(|f| field(f))
            .collect::<Vec<_>>()
            .join(",");
        s.push('\n');
        s
    }
}

/// A number as CSV text: integers stay integers, others get up to 6 decimals.
pub(crate) fn num(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.is_finite() {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        String::new()
    }
}

/// One CSV cell: RFC 4180 quoting where it needs it, and text a spreadsheet would run as a
/// formula (a cell starting with `=`, `+`, `@`, a tab or a carriage return, or `-` when it is
/// not a number) is neutralised with a leading `'`, as OWASP's CSV injection advice says: a
/// host name or label comes from whoever ran the test.
pub fn field(f: &str) -> String {
    let formula = match f.as_bytes().first() {
        Some(b'=' | b'+' | b'@' | b'\t' | b'\r') => true,
        Some(b'-') => f.parse::<f64>().is_err(),
        _ => false,
    };
    let f = if formula {
        std::borrow::Cow::Owned(format!("'{f}"))
    } else {
        std::borrow::Cow::Borrowed(f)
    };
    if f.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.into_owned()
    }
}

/// The header row.
pub fn header() -> String {
    let mut s = COLUMNS.join(",");
    s.push('\n');
    s
}

fn interval_cols(r: &mut Row, rec: &IntervalRecord) {
    r.set("interval", rec.index)
        .set("start", num(rec.start))
        .set("end", num(rec.end))
        .set("omitted", rec.omitted);
}

#[allow(clippy::too_many_arguments)]
fn traffic_cols(
    r: &mut Row,
    secs: f64,
    rx: (Option<u64>, Option<f64>),
    tx: (Option<u64>, Option<f64>),
    udp: Option<&hakaru_model::UdpTick>,
    sender_datagrams: Option<u64>,
) {
    r.opt("receiver_bytes", rx.0)
        .opt("receiver_bps", rx.1.map(num))
        .opt("sender_bytes", tx.0)
        .opt("sender_bps", tx.1.map(num))
        .opt("sender_datagrams", sender_datagrams);
    if let Some(u) = udp {
        let expected = u.lost + u.datagrams.saturating_sub(u.duplicates);
        r.set("datagrams", u.datagrams)
            .set("lost", u.lost)
            .set(
                "lost_percent",
                num(if expected > 0 {
                    u.lost as f64 * 100.0 / expected as f64
                } else {
                    0.0
                }),
            )
            .set("out_of_order", u.out_of_order)
            .set("duplicates", u.duplicates)
            .opt("jitter_ms", u.jitter_ms.map(num));
        if secs > 0.0 {
            r.set("received_pps", num(u.datagrams as f64 / secs));
        }
    }
    if let (Some(d), true) = (sender_datagrams, secs > 0.0) {
        r.set("sent_pps", num(d as f64 / secs));
    }
}

fn flow_row(test: &str, rec: &IntervalRecord, f: &FlowInterval) -> String {
    let mut r = Row::new(test, "flow");
    interval_cols(&mut r, rec);
    r.set("flow", f.id).set("dir", f.dir.label());
    traffic_cols(
        &mut r,
        rec.end - rec.start,
        (f.receiver_bytes, f.receiver_bps.map(|b| b.0)),
        (f.sender_bytes, f.sender_bps.map(|b| b.0)),
        f.udp.as_ref(),
        f.sender_datagrams,
    );
    if let Some(t) = f.tcp {
        r.opt("retransmits", t.retransmits)
            .set("cwnd", t.snd_cwnd)
            .set("rtt_us", t.rtt_us);
    }
    r.line()
}

fn sum_row(test: &str, rec: &IntervalRecord, d: &DirectionInterval) -> String {
    let mut r = Row::new(test, "sum");
    interval_cols(&mut r, rec);
    r.set("dir", d.dir.label());
    traffic_cols(
        &mut r,
        rec.end - rec.start,
        (d.receiver_bytes, d.receiver_bps.map(|b| b.0)),
        (d.sender_bytes, d.sender_bps.map(|b| b.0)),
        d.udp.as_ref(),
        d.sender_datagrams,
    );
    r.opt("retransmits", d.retransmits);
    r.line()
}

/// The rows of one interval: per flow and per direction (bulk tests), or one row (latency,
/// connect).
pub fn interval_rows(spec: &TestSpec, rec: &IntervalRecord) -> String {
    let test = spec.name();
    let mut s = String::new();
    if let Some(l) = &rec.latency {
        let mut r = Row::new(test, "interval");
        interval_cols(&mut r, rec);
        let secs = (rec.end - rec.start).max(1e-9);
        r.set("transactions", l.replies)
            .set("lost", l.lost)
            .set("transactions_per_second", num(l.replies as f64 / secs))
            .stats(&l.rtt);
        s.push_str(&r.line());
        return s;
    }
    if let Some(c) = &rec.connect {
        let mut r = Row::new(test, "interval");
        interval_cols(&mut r, rec);
        r.set("connections", c.connections)
            .set("failed", c.failed)
            .set("connections_per_second", num(c.connections_per_second));
        s.push_str(&r.line());
        return s;
    }
    for f in &rec.flows {
        s.push_str(&flow_row(test, rec, f));
    }
    for d in &rec.sums {
        s.push_str(&sum_row(test, rec, d));
    }
    if let Some(p) = &rec.probe {
        let mut r = Row::new(test, "probe");
        interval_cols(&mut r, rec);
        let secs = (rec.end - rec.start).max(1e-9);
        probe_cols(&mut r, p, secs);
        s.push_str(&r.line());
    }
    s
}

/// A `probe` row's figures: the latency probes' round trips (`--latency-probe`).
fn probe_cols(r: &mut Row, p: &hakaru_model::LatencyInterval, secs: f64) {
    r.set("transactions", p.replies)
        .set("lost", p.lost)
        .set("transactions_per_second", num(p.replies as f64 / secs))
        .stats(&p.rtt);
}

/// The `probe_idle` and `probe_loaded` rows of a test with latency probes.
fn probe_totals(test: &str, p: &hakaru_model::ProbeResult, loaded_secs: f64) -> String {
    let mut idle = Row::new(test, "probe_idle");
    idle.set("start", num(-p.baseline_seconds)).set("end", 0);
    probe_cols(&mut idle, &p.idle, p.baseline_seconds.max(1e-9));
    let mut loaded = Row::new(test, "probe_loaded");
    loaded.set("start", 0).set("end", num(loaded_secs));
    probe_cols(&mut loaded, &p.loaded, loaded_secs.max(1e-9));
    idle.line() + &loaded.line()
}

/// The `total` rows of a finished test, as its kind writes them (`KindText::csv_totals`): one
/// per direction (bulk, rpm), or one (latency, connect, http).
pub fn total_rows(r: &RunResult) -> String {
    crate::kinds::of(&r.spec).csv_totals(r)
}

/// Both ends' CPU busy shares, where they were measured.
fn cpu_cols(row: &mut Row, r: &RunResult) {
    row.opt(
        "client_cpu_busy_pct",
        r.client.cpu.as_ref().map(|c| num(c.busy_pct)),
    )
    .opt(
        "server_cpu_busy_pct",
        r.server_end.cpu.as_ref().map(|c| num(c.busy_pct)),
    );
}

/// A latency run's `total` row: its round trips and their statistics.
pub(crate) fn latency_totals(r: &RunResult) -> String {
    let Some(l) = r.detail.latency() else {
        return String::new();
    };
    let mut row = Row::new(r.spec.name(), "total");
    row.set("start", 0)
        .set("end", num(l.seconds))
        .set("transactions", l.replies)
        .set("lost", l.lost)
        .set("transactions_per_second", num(l.transactions_per_second))
        .set("flow", "")
        .stats(&l.rtt);
    cpu_cols(&mut row, r);
    row.line()
}

/// A connection-rate run's `total` row: connections, failures and the connect times.
pub(crate) fn connect_totals(r: &RunResult) -> String {
    let Some(c) = r.detail.connect() else {
        return String::new();
    };
    let mut row = Row::new(r.spec.name(), "total");
    row.set("start", 0)
        .set("end", num(c.seconds))
        .set("connections", c.connections)
        .set("failed", c.failed)
        .set("connections_per_second", num(c.connections_per_second))
        .stats(&c.connect_time);
    cpu_cols(&mut row, r);
    row.line()
}

/// An HTTP run's `total` row: body bytes the way they went, requests completed and failed.
pub(crate) fn http_totals(r: &RunResult) -> String {
    let Some(h) = r.detail.http() else {
        return String::new();
    };
    let mut row = Row::new(r.spec.name(), "total");
    let (bytes_col, bps_col) = match h.dir {
        hakaru_model::FlowDir::Down => ("receiver_bytes", "receiver_bps"),
        hakaru_model::FlowDir::Up => ("sender_bytes", "sender_bps"),
    };
    row.set("start", 0)
        .set("end", num(h.seconds))
        .set("dir", h.dir.label())
        .set("flow", "")
        .set(bytes_col, h.bytes)
        .set(bps_col, num(h.bits_per_second.0))
        .set("transactions", h.completed)
        .set("failed", h.failed)
        .set("connections", h.connections.len());
    cpu_cols(&mut row, r);
    row.line()
}

/// A bulk run's `total` rows, one per direction (TCP's retransmits, UDP's datagram counts),
/// and its latency probes' rows if it had them. Raw transfers write the same; a capacity run
/// has no totals of this shape and writes none.
pub(crate) fn bulk_totals(r: &RunResult) -> String {
    let test = r.spec.name();
    let mut s = String::new();
    for t in &r.totals {
        let mut row = Row::new(test, "total");
        row.set("start", 0)
            .set("end", num(t.receiver.seconds))
            .set("dir", t.dir.label())
            .set("flow", "")
            .set("receiver_bytes", t.receiver.bytes)
            .set("receiver_bps", num(t.receiver.bits_per_second.0))
            .set("sender_bytes", t.sender.bytes)
            .set("sender_bps", num(t.sender.bits_per_second.0));
        if matches!(r.spec, TestSpec::Tcp(_)) {
            row.opt("retransmits", t.retransmits);
        }
        if let Some(u) = &t.udp {
            row.set("datagrams", u.received_datagrams)
                .set("sender_datagrams", u.sent_datagrams)
                .set("lost", u.lost)
                .set("lost_percent", num(u.lost_percent))
                .set("out_of_order", u.out_of_order)
                .set("duplicates", u.duplicates)
                .opt("jitter_ms", u.jitter_ms.map(num))
                .set("received_pps", num(u.received_pps))
                .set("sent_pps", num(u.sent_pps));
        }
        cpu_cols(&mut row, r);
        s.push_str(&row.line());
    }
    if let Some(p) = r.detail.probe() {
        let secs = r.totals.first().map_or(0.0, |t| t.receiver.seconds);
        s.push_str(&probe_totals(test, p, secs));
    }
    s
}

/// `--format csv-summary`: the header and the `total` rows.
pub fn summary(r: &RunResult) -> String {
    header() + &total_rows(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_only_when_needed_and_numbers_carry_no_units() {
        assert_eq!(field("up"), "up");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        // Formulas a spreadsheet would run are text again; negative numbers stay numbers.
        assert_eq!(field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(field("+1+2"), "'+1+2");
        assert_eq!(field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(field("-2+3"), "'-2+3");
        assert_eq!(field("\tx"), "'\tx");
        assert_eq!(field("-0.25"), "-0.25");
        assert_eq!(field("a=b"), "a=b");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(0.25), "0.25");
        assert_eq!(num(1.0 / 3.0), "0.333333");
        assert_eq!(num(f64::NAN), "");
        let h = header();
        assert!(h.starts_with("test,row,interval,start,end,"));
        assert_eq!(h.trim_end().split(',').count(), COLUMNS.len());
    }

    #[test]
    fn every_row_has_every_column() {
        let mut r = Row::new("tcp", "flow");
        r.set("receiver_bytes", 5).set("no_such_column", 1);
        let line = r.line();
        assert_eq!(line.trim_end().split(',').count(), COLUMNS.len());
        assert!(line.starts_with("tcp,flow,"));
    }
}
