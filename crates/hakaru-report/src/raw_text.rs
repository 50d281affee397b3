//! Human text for `hakaru sink` and `hakaru source`: ttcp's summary lines (bytes, real
//! seconds, rate, I/O calls, bytes per call, calls per second) plus hakaru's interval lines.

use std::fmt::Write;

use hakaru_model::{
    BitRate, Bytes, IntervalRecord, Iperf2Info, RawProtocol, RawResult, RawRole, RawSpec, RunResult,
};

use crate::text_parts::{end_lines, span};

/// The line that opens a run: what listens or where it sends.
pub fn header(spec: &RawSpec, addr: &str) -> String {
    let proto = spec.protocol_name();
    let mut s = match spec.role {
        RawRole::Sink => format!("hakaru sink: {proto} on {addr}, waiting for a sender"),
        RawRole::Source => format!(
            "hakaru source: {proto} to {addr}, {} per {}",
            Bytes(spec.length.0),
            if spec.protocol == RawProtocol::Udp {
                "datagram"
            } else {
                "write"
            }
        ),
    };
    if spec.role == RawRole::Source {
        match (spec.count, spec.duration) {
            (Some(n), _) => {
                let _ = write!(s, ", {n} buffers");
            }
            (None, Some(t)) => {
                let _ = write!(s, ", for {t}");
            }
            _ => {}
        }
        if let Some(r) = spec.rate {
            let _ = write!(s, ", paced to {r}");
        }
    }
    if spec.iperf2 {
        s.push_str(", speaking iperf2");
    }
    if spec.stdio {
        s.push_str(match spec.role {
            RawRole::Sink => ", data to stdout",
            RawRole::Source => ", data from stdin",
        });
    }
    s.push('\n');
    s
}

/// Column headings of the interval lines.
pub fn interval_heading(spec: &RawSpec) -> String {
    let mut s = format!(
        "{:<5} {:>15}  {:>10} {:>11}",
        "[ ID]", "Interval", "Bytes", "Rate"
    );
    if spec.protocol == RawProtocol::Udp {
        let _ = write!(s, "  {:>10}", "Datagrams");
        if spec.iperf2 {
            let _ = write!(s, "  {:>8} {:>10}", "Lost", "Jitter");
        }
    }
    s.push('\n');
    s
}

/// The lines for an interval of a raw run: one per stream, and a `[SUM]` line when there
/// are several.
pub fn interval_lines(rec: &IntervalRecord) -> String {
    let mut s = String::new();
    let at = span(rec.start, rec.end);
    for f in &rec.flows {
        let Some(moved) = moved(
            (f.receiver_bytes, f.receiver_bps),
            (f.sender_bytes, f.sender_bps),
        ) else {
            continue;
        };
        let udp = f.udp.as_ref().map(|u| (u.datagrams, u.lost, u.jitter_ms));
        let udp = udp.or(f.sender_datagrams.map(|d| (d, 0, None)));
        interval_line(&mut s, &format!("{:>3}", f.id), &at, moved, udp);
    }
    if rec.flows.len() > 1 {
        for d in &rec.sums {
            let Some(moved) = moved(
                (d.receiver_bytes, d.receiver_bps),
                (d.sender_bytes, d.sender_bps),
            ) else {
                continue;
            };
            let udp = d.udp.as_ref().map(|u| (u.datagrams, u.lost, u.jitter_ms));
            interval_line(&mut s, "SUM", &at, moved, udp);
        }
    }
    s
}

/// Bytes and rate of an interval: the receiver's where this end received, else the sender's.
fn moved(
    receiver: (Option<u64>, Option<BitRate>),
    sender: (Option<u64>, Option<BitRate>),
) -> Option<(u64, Option<BitRate>)> {
    match (receiver, sender) {
        ((Some(b), bps), _) | (_, (Some(b), bps)) => Some((b, bps)),
        _ => None,
    }
}

/// One interval line: `[id] span bytes rate` and, for UDP, datagrams (with lost and jitter
/// where known).
fn interval_line(
    s: &mut String,
    id: &str,
    at: &str,
    (bytes, bps): (u64, Option<BitRate>),
    udp: Option<(u64, u64, Option<f64>)>,
) {
    let _ = write!(
        s,
        "[{id}] {at:>15}  {:>10} {:>11}",
        Bytes(bytes).to_string(),
        bps.unwrap_or(BitRate(0.0)).to_string()
    );
    if let Some((datagrams, lost, jitter)) = udp {
        let _ = write!(s, "  {datagrams:>10}");
        if jitter.is_some() || lost > 0 {
            let j = jitter.map_or("-".into(), |j| format!("{j:.3} ms"));
            let _ = write!(s, "  {lost:>8} {j:>10}");
        }
    }
    s.push('\n');
}

/// The ttcp-style lines of a raw result, each prefixed with `sink:` or `source:`.
pub fn ttcp_lines(r: &RawResult) -> String {
    let who = match r.role {
        RawRole::Sink => "sink",
        RawRole::Source => "source",
    };
    let mut s = String::new();
    if !r.streams.is_empty() {
        let _ = writeln!(
            s,
            "{who}: {} streams, each and then their sum:",
            r.streams.len()
        );
        for (i, st) in r.streams.iter().enumerate() {
            stream_line(&mut s, who, i + 1, st);
        }
    }
    let mbs = if r.seconds > 0.0 {
        r.bytes as f64 / r.seconds / 1e6
    } else {
        0.0
    };
    let _ = writeln!(
        s,
        "{who}: {} bytes in {:.3} real seconds = {mbs:.1} MB/s = {}",
        r.bytes, r.seconds, r.bits_per_second
    );
    let _ = writeln!(
        s,
        "{who}: {} I/O calls, {:.1} bytes/call, {:.0} calls/sec",
        r.io_calls, r.bytes_per_call, r.calls_per_second
    );
    let proto = match r.protocol {
        RawProtocol::Tcp => "tcp",
        RawProtocol::Udp => "udp",
    };
    let peer = r.peer.as_deref().unwrap_or("nobody");
    let dir = match r.role {
        RawRole::Sink => "from",
        RawRole::Source => "to",
    };
    let _ = write!(s, "{who}: {proto} {dir} {peer}");
    if r.streams.len() > 1 {
        let _ = write!(s, " (first of {} streams)", r.streams.len());
    }
    if let Some(d) = r.datagrams {
        let _ = write!(s, ", {d} datagrams");
    }
    if let Some(i) = r.ignored.filter(|&i| i > 0) {
        let _ = write!(s, ", {i} ignored (markers, strangers, not iperf2)");
    }
    s.push('\n');
    if let Some(b) = r.stdio_bytes {
        let what = match r.role {
            RawRole::Sink => "written to stdout",
            RawRole::Source => "read from stdin",
        };
        let _ = writeln!(s, "{who}: {b} bytes {what}");
    }
    let headerless = |i: &&Iperf2Info| i.flags == 0 && i.datagrams.is_none();
    if r.iperf2.as_ref().filter(headerless).is_some() {
        let _ = writeln!(
            s,
            "{who}: iperf2: no test header (a --compat client, or not iperf2), all of it data"
        );
    } else if let Some(i) = &r.iperf2 {
        let _ = write!(
            s,
            "{who}: iperf2 client {}, asked for {}",
            i.client_version.as_deref().unwrap_or("(version not sent)"),
            i.amount
        );
        if let Some(rate) = i.rate_bps {
            let _ = write!(s, " at {}", BitRate(rate as f64));
        }
        s.push('\n');
        if let (Some(d), Some(l)) = (i.datagrams, i.lost) {
            let pct = if d > 0 {
                l as f64 * 100.0 / d as f64
            } else {
                0.0
            };
            let j = i.jitter_ms.map_or("-".into(), |j| format!("{j:.3} ms"));
            let _ = writeln!(
                s,
                "{who}: iperf2 lost/total {l}/{d} ({pct:.3}%), {} out of order, jitter {j}, \
                 server report {}",
                i.out_of_order.unwrap_or(0),
                if i.fin_answered {
                    "sent"
                } else {
                    "not sent (no FIN)"
                }
            );
        }
    }
    if let Some(e) = &r.error {
        let _ = writeln!(s, "{who}: error: {e}");
    }
    s
}

/// One stream of a transfer of several: `[id] bytes, time, rate, calls, peer` and its iperf2
/// UDP figures.
fn stream_line(s: &mut String, who: &str, id: usize, r: &RawResult) {
    let _ = write!(
        s,
        "{who}: [{id:>3}] {} bytes in {:.3} s = {}, {} I/O calls",
        r.bytes, r.seconds, r.bits_per_second, r.io_calls
    );
    if let Some(p) = &r.peer {
        let _ = write!(s, ", from {p}");
    }
    if let Some(i) = &r.iperf2 {
        if let (Some(d), Some(l)) = (i.datagrams, i.lost) {
            let j = i.jitter_ms.map_or("-".into(), |j| format!("{j:.3} ms"));
            let _ = write!(s, ", lost/total {l}/{d}, jitter {j}");
            if !i.fin_answered {
                s.push_str(", no FIN");
            }
        }
    }
    if let Some(e) = &r.error {
        let _ = write!(s, ", error: {e}");
    }
    s.push('\n');
}

/// The final summary of a raw run.
pub fn summary(r: &RunResult) -> String {
    let mut s = String::new();
    let Some(raw) = r.detail.raw() else {
        return s;
    };
    s.push_str(&ttcp_lines(raw));
    if r.interrupted {
        s.push_str("  (interrupted: the figures cover the time it ran)\n");
    }
    let (name, end) = match raw.role {
        RawRole::Sink => ("sink", &r.server_end),
        RawRole::Source => ("source", &r.client),
    };
    end_lines(&mut s, name, end);
    for n in &r.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    s.push_str(&headline(r));
    s
}

/// The closing headline: the rate and the amount moved.
pub fn headline(r: &RunResult) -> String {
    let Some(raw) = r.detail.raw() else {
        return String::new();
    };
    let (who, verb) = match raw.role {
        RawRole::Sink => ("sink", "received"),
        RawRole::Source => ("source", "sent"),
    };
    format!(
        "{who}: {} {verb} ({} bytes in {:.3} s)\n",
        raw.bits_per_second, raw.bytes, raw.seconds
    )
}

impl crate::kind_text::KindText for hakaru_model::RawSpec {
    fn header(&self, server: &str, _embedded: bool) -> String {
        header(self, server)
    }
    fn interval_heading(&self, _view: &crate::View) -> String {
        interval_heading(self)
    }
    fn summary(&self, r: &RunResult, _view: &crate::View) -> String {
        summary(r)
    }
    fn sums_and_headline(&self, r: &RunResult, _view: &crate::View) -> String {
        headline(r)
    }
    fn row(&self, r: &RunResult, s: &mut crate::kind_text::Row) {
        if let Some(raw) = r.detail.raw() {
            s.headline = Some(raw.bits_per_second.0);
            if let Some(p) = &raw.peer {
                s.peer = Some(p.clone());
            }
        }
        s.unit = "bit/s".into();
    }
    fn csv_totals(&self, r: &RunResult) -> String {
        crate::csv::bulk_totals(r)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{DirectionInterval, FlowDir, FlowInterval, UdpTick};

    #[test]
    fn ttcp_lines_carry_the_counts() {
        let mut r = RawResult::new(RawRole::Sink, RawProtocol::Tcp);
        r.set_counts(16_777_216, 2048, 1.25);
        r.peer = Some("127.0.0.1:4000".into());
        let out = ttcp_lines(&r);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "sink: 16777216 bytes in 1.250 real seconds = 13.4 MB/s = 107 Mbit/s"
        );
        assert_eq!(
            lines[1],
            "sink: 2048 I/O calls, 8192.0 bytes/call, 1638 calls/sec"
        );
        assert_eq!(lines[2], "sink: tcp from 127.0.0.1:4000");
    }

    #[test]
    fn iperf2_udp_lines() {
        let mut r = RawResult::new(RawRole::Sink, RawProtocol::Udp);
        r.set_counts(1_315_650, 895, 1.0);
        r.datagrams = Some(895);
        r.ignored = Some(2);
        r.iperf2 = Some(Iperf2Info {
            client_version: Some("2.1.8".into()),
            amount: "1.00 s".into(),
            datagrams: Some(895),
            lost: Some(0),
            out_of_order: Some(0),
            jitter_ms: Some(0.012),
            fin_answered: true,
            ..Iperf2Info::default()
        });
        let out = ttcp_lines(&r);
        assert!(out.contains(", 895 datagrams, 2 ignored"), "{out}");
        assert!(
            out.contains("iperf2 client 2.1.8, asked for 1.00 s"),
            "{out}"
        );
        assert!(out.contains("lost/total 0/895 (0.000%)"), "{out}");
        assert!(out.contains("server report sent"), "{out}");
    }

    #[test]
    fn interval_line_of_a_udp_sink() {
        let rec = IntervalRecord {
            index: 0,
            start: 0.0,
            end: 1.0,
            omitted: false,
            flows: vec![FlowInterval {
                id: 1,
                dir: FlowDir::Up,
                receiver_bytes: Some(1_000_000),
                receiver_bps: Some(BitRate(8e6)),
                sender_bytes: None,
                sender_bps: None,
                tcp: None,
                udp: Some(UdpTick {
                    datagrams: 1000,
                    lost: 1,
                    out_of_order: 0,
                    duplicates: 0,
                    jitter_ms: Some(0.5),
                }),
                sender_datagrams: None,
            }],
            sums: Vec::new(),
            latency: None,
            connect: None,
            client_nic: None,
            server_nic: None,
            probe: None,
        };
        let line = interval_lines(&rec);
        assert!(line.starts_with("[  1]"), "{line}");
        assert!(
            line.contains("8.00 Mbit/s") && line.contains(" 1000 "),
            "{line}"
        );
        assert!(line.contains("0.500 ms"), "{line}");
    }

    fn tcp_flow(id: u32, bytes: u64) -> FlowInterval {
        FlowInterval {
            id,
            dir: FlowDir::Up,
            receiver_bytes: Some(bytes),
            receiver_bps: Some(BitRate(bytes as f64 * 8.0)),
            sender_bytes: None,
            sender_bps: None,
            tcp: None,
            udp: None,
            sender_datagrams: None,
        }
    }

    #[test]
    fn several_streams_get_a_sum_line_and_one_stream_none() {
        let mut rec = IntervalRecord {
            index: 0,
            start: 0.0,
            end: 1.0,
            omitted: false,
            flows: vec![tcp_flow(1, 1_000_000), tcp_flow(2, 3_000_000)],
            sums: vec![DirectionInterval {
                dir: FlowDir::Up,
                receiver_bytes: Some(4_000_000),
                receiver_bps: Some(BitRate(32e6)),
                sender_bytes: None,
                sender_bps: None,
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
        let out = interval_lines(&rec);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with("[  1]") && lines[1].starts_with("[  2]"));
        assert!(
            lines[2].starts_with("[SUM]") && lines[2].contains("32.0 Mbit/s"),
            "{out}"
        );
        rec.flows.truncate(1);
        assert_eq!(interval_lines(&rec).lines().count(), 1);
    }

    #[test]
    fn streams_are_listed_before_their_sum() {
        let mut r = RawResult::new(RawRole::Sink, RawProtocol::Udp);
        r.set_counts(3000, 3, 1.0);
        r.peer = Some("127.0.0.1:4000".into());
        for (i, b) in [1000u64, 2000].into_iter().enumerate() {
            let mut st = RawResult::new(RawRole::Sink, RawProtocol::Udp);
            st.set_counts(b, 1 + i as u64, 1.0);
            st.peer = Some(format!("127.0.0.1:{}", 4000 + i));
            st.iperf2 = Some(Iperf2Info {
                datagrams: Some(1 + i as u64),
                lost: Some(0),
                jitter_ms: None,
                fin_answered: i == 0,
                ..Iperf2Info::default()
            });
            r.streams.push(st);
        }
        let out = ttcp_lines(&r);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "sink: 2 streams, each and then their sum:");
        assert!(
            lines[1].starts_with("sink: [  1] 1000 bytes in 1.000 s")
                && lines[1].contains("from 127.0.0.1:4000, lost/total 0/1"),
            "{out}"
        );
        assert!(lines[2].ends_with(", no FIN"), "{out}");
        assert!(lines[3].starts_with("sink: 3000 bytes"), "{out}");
        assert!(
            out.contains("udp from 127.0.0.1:4000 (first of 2 streams)"),
            "{out}"
        );
    }
}
