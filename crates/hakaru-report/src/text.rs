//! Human text: live interval lines and the final summary.

use std::fmt::Write;

use hakaru_model::{
    Amount, BitRate, Bytes, Counted, Direction, FlowDir, IntervalRecord, RunResult, TcpInfo,
    TcpSpec, TestSpec,
};

use crate::text_parts::{
    direction_words, end_lines, flow_dir_words, hidden_flows_line, late_lines, span, trailer, RULE,
};
use crate::{connect_text, latency_text, udp_text, View};

impl crate::kind_text::KindText for TcpSpec {
    fn header(&self, server: &str, embedded: bool) -> String {
        tcp_header(self, server, embedded)
    }
    fn interval_heading(&self, _view: &View) -> String {
        tcp_interval_heading()
    }
    fn summary(&self, r: &RunResult, view: &View) -> String {
        tcp_summary(r, view)
    }
    fn sums_and_headline(&self, r: &RunResult, _view: &View) -> String {
        tcp_sums(r) + &tcp_headline(r)
    }
    fn row(&self, r: &RunResult, s: &mut crate::kind_text::Row) {
        s.direction = crate::summary::direction_word(self.direction).into();
        s.flows = Some(self.flows);
        s.headline = crate::summary::received_bps(r);
        s.unit = "bit/s".into();
    }
    fn csv_totals(&self, r: &RunResult) -> String {
        crate::csv::bulk_totals(r)
    }
}

/// The line that opens a run.
pub fn header(spec: &TestSpec, server: &str, embedded: bool) -> String {
    crate::kinds::of(spec).header(server, embedded)
}

/// Column headings for the interval lines of a test.
pub fn interval_heading(spec: &TestSpec, view: &View) -> String {
    crate::kinds::of(spec).interval_heading(view)
}

/// Warnings about one interval that need the test's spec: a paced UDP sender held back.
pub fn interval_warnings(rec: &IntervalRecord, spec: &TestSpec) -> String {
    crate::kinds::of(spec).interval_warnings(rec)
}

/// Lines for one interval of any test.
pub fn interval_lines(rec: &IntervalRecord, view: &View) -> String {
    if rec.latency.is_some() {
        return latency_text::interval_lines(rec);
    }
    if rec.connect.is_some() {
        return connect_text::interval_lines(rec);
    }
    let udp = rec
        .flows
        .iter()
        .any(|f| f.udp.is_some() || f.sender_datagrams.is_some());
    let mut s = if udp {
        udp_text::interval_lines(rec, view)
    } else {
        tcp_interval_lines(rec, view)
    };
    if let Some(line) = crate::probe_text::interval_line(rec) {
        s.push_str(&line);
    }
    s
}

/// The final summary of any test, ending with its one-line headline; with
/// [`View::summary_only`], only the per-direction sums and the headline.
pub fn summary(r: &RunResult, view: &View) -> String {
    let kind = crate::kinds::of(&r.spec);
    let mut s = if view.summary_only {
        kind.sums_and_headline(r, view)
    } else {
        kind.summary(r, view)
    };
    if let Some(p) = r.detail.probe() {
        // Before the headline, which ends the summary.
        let body = s.trim_end_matches('\n');
        let at = body.rfind('\n').map_or(0, |i| i + 1);
        s.insert_str(at, &crate::probe_text::summary(p));
    }
    view.fit(s)
}

fn tcp_header(spec: &TcpSpec, server: &str, embedded: bool) -> String {
    let dir = direction_words(spec.direction);
    let amount = match spec.amount {
        Amount::Time(t) => format!("{t}"),
        Amount::Bytes(b) => format!("{} total per direction", Bytes(b.0)),
        Amount::Blocks(k) => format!("{k} blocks of {} per direction", Bytes(spec.length.0)),
    };
    let mut s = format!(
        "hakaru TCP to {server}{}: {} flow(s) {dir}, {amount}, {} writes/reads",
        if embedded {
            " (embedded loopback server)"
        } else {
            ""
        },
        spec.flows,
        Bytes(spec.length.0),
    );
    match (spec.direction, spec.rate, spec.rate_for(FlowDir::Down)) {
        (Direction::Bidir, up, Some(down)) if up != Some(down) => {
            let up = up.map_or_else(|| "unpaced".to_string(), |u| format!("paced to {u}"));
            let _ = write!(s, ", {up} per flow up, paced to {down} down");
        }
        (Direction::Reverse, _, Some(down)) => {
            let _ = write!(s, ", paced to {down} per flow");
        }
        (Direction::Reverse, _, None) => {}
        (_, Some(r), _) => {
            let _ = write!(s, ", paced to {r} per flow");
        }
        _ => {}
    }
    if !spec.omit.is_zero() {
        let _ = write!(s, ", first {} omitted", spec.omit);
    }
    if spec.discard {
        s.push_str(", receiver DISCARDS (MSG_TRUNC)");
    }
    if spec.mptcp {
        s.push_str(", over MPTCP");
    }
    if spec.zerocopy {
        s.push_str(", sender uses SENDFILE (-Z)");
    }
    s.push('\n');
    s
}

fn tcp_interval_heading() -> String {
    format!(
        "{:<5} {:<4} {:>15}  {:>22}  {:>22}  {:>5} {:>6} {:>8}\n",
        "[ ID]", "Dir", "Interval", "Receiver", "Sender", "Retr", "Cwnd", "RTT"
    )
}

fn pair(bytes: Option<u64>, rate: Option<BitRate>) -> String {
    match (bytes, rate) {
        (Some(b), Some(r)) => format!("{:>10} {:>11}", Bytes(b).to_string(), r.to_string()),
        _ => format!("{:>22}", "-"),
    }
}

/// Lines for one interval: one per flow (up to the view's limit), then a SUM line per
/// direction with several flows.
fn tcp_interval_lines(rec: &IntervalRecord, view: &View) -> String {
    let mut s = String::new();
    let omitted = if rec.omitted { "  (omitted)" } else { "" };
    let shown = |d: FlowDir| view.flow_rows(rec.flows.iter().filter(|f| f.dir == d).count());
    for f in rec.flows.iter().filter(|f| shown(f.dir)) {
        let (retr, cwnd, rtt) = match f.tcp {
            Some(t) => (
                blank_if_none(t.retransmits),
                t.snd_cwnd.to_string(),
                format!("{}us", t.rtt_us),
            ),
            None => ("".into(), "".into(), "".into()),
        };
        let _ = writeln!(
            s,
            "[{:>3}] {:<4} {:>15}  {}  {}  {:>5} {:>6} {:>8}{omitted}",
            f.id,
            f.dir.label(),
            span(rec.start, rec.end),
            pair(f.receiver_bytes, f.receiver_bps),
            pair(f.sender_bytes, f.sender_bps),
            retr,
            cwnd,
            rtt
        );
    }
    for d in &rec.sums {
        let n = rec.flows.iter().filter(|f| f.dir == d.dir).count();
        if n < 2 {
            continue;
        }
        let _ = writeln!(
            s,
            "[SUM] {:<4} {:>15}  {}  {}  {:>5}{omitted}",
            d.dir.label(),
            span(rec.start, rec.end),
            pair(d.receiver_bytes, d.receiver_bps),
            pair(d.sender_bytes, d.sender_bps),
            blank_if_none(d.retransmits)
        );
    }
    s
}

fn counted(c: &Counted) -> String {
    format!(
        "{:>10} {:>11}",
        Bytes(c.bytes).to_string(),
        c.bits_per_second.to_string()
    )
}

fn ms(us: u64) -> String {
    format!("{:.0} ms", us as f64 / 1000.0)
}

fn tcp_table_heading(s: &mut String) {
    let _ = writeln!(
        s,
        "{:<5} {:<4} {:>15}  {:>22}  {:>22}  {:>5}",
        "[ ID]", "Dir", "Interval", "Receiver (headline)", "Sender", "Retr"
    );
}

/// A count, or nothing where the OS gives none (a blank table cell).
fn blank_if_none(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// One sending socket's final TCP state; figures its OS does not give are left out.
fn tcp_info_line(id: u32, dir: FlowDir, t: &TcpInfo) -> String {
    let mut line = format!(
        "[{id:>3}] {:<4} cc {} rtt {}us",
        dir.label(),
        t.congestion.as_deref().unwrap_or("?"),
        t.rtt_us
    );
    if let Some(v) = t.rttvar_us {
        let _ = write!(line, " +/- {v}us");
    }
    if let Some(v) = t.min_rtt_us {
        let _ = write!(line, " (min {v}us)");
    }
    let _ = write!(line, " cwnd {} x {} B", t.snd_cwnd, t.snd_mss);
    if let Some(v) = t.retransmits {
        let _ = write!(line, " retrans {v}");
    }
    if let Some(v) = t.lost {
        let _ = write!(line, " lost {v}");
    }
    if let Some(v) = t.pacing_rate_bps {
        let _ = write!(line, " pacing {}", BitRate(v));
    }
    if let Some(v) = t.delivery_rate_bps {
        let _ = write!(line, " delivery {}", BitRate(v));
    }
    let limits = [
        ("busy", t.busy_time_us),
        ("rwnd-limited", t.rwnd_limited_us),
        ("sndbuf-limited", t.sndbuf_limited_us),
    ];
    let mut sep = " |";
    for (name, v) in limits {
        if let Some(v) = v {
            let _ = write!(line, "{sep} {name} {}", ms(v));
            sep = "";
        }
    }
    line
}

fn tcp_sum_rows(s: &mut String, r: &RunResult) {
    for t in &r.totals {
        let _ = writeln!(
            s,
            "[SUM] {:<4} {:>15}  {}  {}  {:>5}   {} flow(s)",
            t.dir.label(),
            span(0.0, t.receiver.seconds),
            counted(&t.receiver),
            counted(&t.sender),
            blank_if_none(t.retransmits),
            t.flows
        );
    }
}

/// The per-direction sums alone (`--summary-only`).
fn tcp_sums(r: &RunResult) -> String {
    let mut s = String::new();
    tcp_table_heading(&mut s);
    tcp_sum_rows(&mut s, r);
    s
}

/// The closing headline: one line per direction.
fn tcp_headline(r: &RunResult) -> String {
    let mut s = String::new();
    for t in &r.totals {
        let dir = flow_dir_words(t.dir);
        let _ = writeln!(
            s,
            "{dir}: {} received ({} sent)",
            t.receiver.bits_per_second, t.sender.bits_per_second
        );
    }
    s
}

fn tcp_summary(r: &RunResult, view: &View) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{RULE}");
    tcp_table_heading(&mut s);
    let shown = |d: FlowDir| view.flow_rows(r.flows.iter().filter(|f| f.dir == d).count());
    for f in r.flows.iter().filter(|f| shown(f.dir)) {
        let _ = writeln!(
            s,
            "[{:>3}] {:<4} {:>15}  {}  {}  {:>5}",
            f.id,
            f.dir.label(),
            span(0.0, f.receiver.seconds),
            counted(&f.receiver),
            counted(&f.sender),
            blank_if_none(f.tcp_info.as_ref().and_then(|t| t.retransmits))
        );
    }
    tcp_sum_rows(&mut s, r);
    hidden_flows_line(&mut s, r, view);
    s.push_str(&late_lines(r));
    s.push_str(&mptcp_line(r));
    let with_info: Vec<_> = r
        .flows
        .iter()
        .filter(|f| f.tcp_info.is_some() && shown(f.dir))
        .collect();
    if !with_info.is_empty() {
        let _ = writeln!(s, "TCP_INFO of the sending sockets at the end:");
        for f in with_info {
            let Some(t) = &f.tcp_info else { continue };
            let _ = writeln!(s, "{}", tcp_info_line(f.id, f.dir, t));
        }
    }
    let _ = writeln!(s, "Ends (CPU covers the whole machine at each end):");
    end_lines(&mut s, "client", &r.client);
    end_lines(&mut s, "server", &r.server_end);
    trailer(&mut s, r);
    s.push_str(&tcp_headline(r));
    s
}

/// For tests that asked for MPTCP: how many flows ran it and over how many subflows.
fn mptcp_line(r: &RunResult) -> String {
    let m: Vec<_> = r.flows.iter().filter_map(|f| f.mptcp).collect();
    if m.is_empty() {
        return String::new();
    }
    let active = m.iter().filter(|x| x.active).count();
    let subflows: Vec<String> = m.iter().map(|x| x.subflows.to_string()).collect();
    format!(
        "MPTCP: {active} of {} flow(s) ran MPTCP{}; subflows per flow at the end: {}\n",
        m.len(),
        if active < m.len() {
            " (the others fell back to plain TCP)"
        } else {
            ""
        },
        subflows.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{DirectionInterval, FlowInterval, TcpTick};

    #[test]
    fn interval_lines_show_both_ends_and_sum() {
        let rec = IntervalRecord {
            index: 0,
            start: 0.0,
            end: 1.0,
            omitted: false,
            flows: vec![
                FlowInterval {
                    id: 0,
                    dir: FlowDir::Up,
                    receiver_bytes: Some(1 << 30),
                    receiver_bps: Some(BitRate(8.59e9)),
                    sender_bytes: Some(1 << 30),
                    sender_bps: Some(BitRate(8.59e9)),
                    tcp: Some(TcpTick {
                        retransmits: Some(2),
                        snd_cwnd: 40,
                        rtt_us: 55,
                    }),
                    udp: None,
                    sender_datagrams: None,
                },
                FlowInterval {
                    id: 1,
                    dir: FlowDir::Up,
                    receiver_bytes: None,
                    receiver_bps: None,
                    sender_bytes: Some(5),
                    sender_bps: Some(BitRate(40.0)),
                    tcp: None,
                    udp: None,
                    sender_datagrams: None,
                },
            ],
            sums: vec![DirectionInterval {
                dir: FlowDir::Up,
                receiver_bytes: None,
                receiver_bps: None,
                sender_bytes: Some((1 << 30) + 5),
                sender_bps: Some(BitRate(8.59e9)),
                retransmits: None,
                udp: None,
                sender_datagrams: None,
            }],
            latency: None,
            connect: None,
            client_nic: None,
            server_nic: None,
            probe: None,
        };
        let out = interval_lines(&rec, &View::default());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].contains("1.00 GiB") && lines[0].contains("8.59 Gbit/s"));
        assert!(lines[0].contains("55us"));
        assert!(lines[1].contains(" - "), "{}", lines[1]);
        assert!(lines[2].starts_with("[SUM]"));
    }
}
