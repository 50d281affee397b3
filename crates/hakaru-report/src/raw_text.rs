//! Human text for `hakaru sink` and `hakaru source`: ttcp's summary lines (bytes, real
//! seconds, rate, I/O calls, bytes per call, calls per second) plus hakaru's interval lines.

use std::fmt::Write;

use hakaru_model::{
    BitRate, Bytes, IntervalRecord, Iperf2Info, RawProtocol, RawResult, RawRole, RawSpec, RunResult,
};

use crate::text::{end_lines, span};

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

/// One line for an interval of a raw run.
pub fn interval_lines(rec: &IntervalRecord) -> String {
    let mut s = String::new();
    for f in &rec.flows {
        let (bytes, bps) = match (f.receiver_bytes, f.sender_bytes) {
            (Some(b), _) => (b, f.receiver_bps),
            (None, Some(b)) => (b, f.sender_bps),
            (None, None) => continue,
        };
        let _ = write!(
            s,
            "[{:>3}] {:>15}  {:>10} {:>11}",
            f.id,
            span(rec.start, rec.end),
            Bytes(bytes).to_string(),
            bps.unwrap_or(BitRate(0.0)).to_string()
        );
        if let Some(u) = &f.udp {
            let _ = write!(s, "  {:>10}", u.datagrams);
            if u.jitter_ms.is_some() || u.lost > 0 {
                let j = u.jitter_ms.map_or("-".into(), |j| format!("{j:.3} ms"));
                let _ = write!(s, "  {:>8} {j:>10}", u.lost);
            }
        } else if let Some(d) = f.sender_datagrams {
            let _ = write!(s, "  {d:>10}");
        }
        s.push('\n');
    }
    s
}

/// The ttcp-style lines of a raw result, each prefixed with `sink:` or `source:`.
pub fn ttcp_lines(r: &RawResult) -> String {
    let who = match r.role {
        RawRole::Sink => "sink",
        RawRole::Source => "source",
    };
    let mut s = String::new();
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

/// The final summary of a raw run.
pub fn summary(r: &RunResult) -> String {
    let mut s = String::new();
    let Some(raw) = &r.raw else {
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
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{FlowDir, FlowInterval, UdpTick};

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
        };
        let line = interval_lines(&rec);
        assert!(line.starts_with("[  1]"), "{line}");
        assert!(
            line.contains("8.00 Mbit/s") && line.contains(" 1000 "),
            "{line}"
        );
        assert!(line.contains("0.500 ms"), "{line}");
    }
}
