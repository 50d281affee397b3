//! Human text for UDP tests (`hakaru udp`, `hakaru pps`): the receiver's datagram counts,
//! loss and jitter lead; the sender's figures follow, labelled.

use std::fmt::Write;

use hakaru_model::{
    Amount, BitRate, Bytes, EndResult, FlowDir, IntervalRecord, RunResult, UdpCounts, UdpMode,
    UdpRate, UdpSpec, UdpTick,
};

use crate::text_parts::{
    direction_words, end_lines, flow_dir_words, hidden_flows_line, span, trailer, RULE,
};
use crate::View;

/// The line that opens a UDP run.
pub fn header(spec: &UdpSpec, server: &str, embedded: bool) -> String {
    let dir = direction_words(spec.direction);
    let amount = match spec.amount {
        Amount::Time(t) => format!("{t}"),
        Amount::Bytes(b) => format!("{} total per direction", Bytes(b.0)),
        Amount::Blocks(k) => format!("{k} datagrams per direction"),
    };
    let words = |r: UdpRate| match r {
        UdpRate::Unlimited => "as fast as possible".to_string(),
        UdpRate::Bits(b) if b.0 <= 0.0 => "as fast as possible".to_string(),
        UdpRate::Bits(b) => format!("{b} per flow"),
        UdpRate::Packets(p) => format!("{p:.0} datagrams/s per flow"),
    };
    let rate = match (spec.direction, spec.rate_down) {
        (hakaru_model::Direction::Bidir, Some(d)) => {
            format!("{} up, {} down", words(spec.rate), words(d))
        }
        (hakaru_model::Direction::Reverse, _) => words(spec.rate_for(FlowDir::Down)),
        _ => words(spec.rate),
    };
    let what = match spec.mode {
        UdpMode::Pps => "packet rate",
        UdpMode::Bandwidth => "UDP",
    };
    let mut s = format!(
        "hakaru {what} to {server}{}: {} flow(s) {dir}, {amount}, {}-byte payloads, {rate}",
        if embedded {
            " (embedded loopback server)"
        } else {
            ""
        },
        spec.flows,
        spec.length.0,
    );
    if spec.length.0 < 8 {
        s.push_str(
            ", payload too short for a sequence number: datagrams are counted, not sequenced",
        );
    }
    if !spec.omit.is_zero() {
        let _ = write!(s, ", first {} omitted", spec.omit);
    }
    if spec.gro {
        s.push_str(", receiver uses UDP GRO (--gro: on loopback GSO batches are never split, so the packet rate is not a wire rate)");
    }
    s.push('\n');
    s
}

/// Column headings for UDP interval lines. The default view shows the received rate; the
/// wide one adds the received bytes.
pub fn interval_heading(view: &View) -> String {
    if view.wide {
        format!(
            "{:<5} {:<4} {:>15}  {:>22}  {:>11}  {:>24}  {:>10}  | {:>11}\n",
            "[ ID]",
            "Dir",
            "Interval",
            "Received",
            "rx pkt/s",
            "Lost/Expected",
            "Jitter",
            "tx pkt/s"
        )
    } else {
        narrow_heading("Received")
    }
}

/// The 96-column heading shared by narrow interval lines and narrow summaries.
fn narrow_heading(received: &str) -> String {
    format!(
        "{:<5} {:<4} {:>15} {:>11} {:>9} {:>24} {:>10} | {:>9}\n",
        "[ ID]", "Dir", "Interval", received, "rx pkt/s", "Lost/Expected", "Jitter", "tx pkt/s"
    )
}

/// One narrow row: label, direction, span, received rate, rx pkt/s, loss, jitter, tx pkt/s.
fn narrow_row(label: &str, dir: FlowDir, span: &str, cols: [&str; 5], tail: &str) -> String {
    let [rate, rx, l, j, tx] = cols;
    format!(
        "{label} {:<4} {span:>15} {rate:>11} {rx:>9} {l:>24} {j:>10} | {tx:>9}{tail}\n",
        dir.label()
    )
}

fn pps(n: u64, secs: f64) -> String {
    if secs > 0.0 {
        format!("{:.0}", n as f64 / secs)
    } else {
        "-".into()
    }
}

fn lost(lost: u64, received: u64, dups: u64) -> String {
    let expected = lost + received.saturating_sub(dups);
    let pct = if expected > 0 {
        lost as f64 * 100.0 / expected as f64
    } else {
        0.0
    };
    format!("{lost}/{expected} ({pct:.3}%)")
}

fn jitter(j: Option<f64>) -> String {
    j.map_or_else(|| "-".into(), |j| format!("{j:.3} ms"))
}

fn received(bytes: Option<u64>, rate: Option<BitRate>) -> String {
    match (bytes, rate) {
        (Some(b), Some(r)) => format!("{:>10} {:>11}", Bytes(b).to_string(), r.to_string()),
        _ => format!("{:>22}", "-"),
    }
}

fn tick_cols(u: Option<&UdpTick>, secs: f64) -> (String, String, String) {
    match u {
        Some(u) => (
            pps(u.datagrams, secs),
            lost(u.lost, u.datagrams, u.duplicates),
            jitter(u.jitter_ms),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    }
}

fn rate_words(v: f64, unit: &str) -> String {
    if unit == "bit/s" {
        BitRate(v).to_string()
    } else {
        format!("{v:.0} datagrams/s")
    }
}

/// A warning line per direction whose paced senders sent less than 99 % of the asked rate
/// during a full interval (the last, partial one is left alone).
pub fn held_back_lines(rec: &IntervalRecord, spec: &UdpSpec) -> String {
    let mut s = String::new();
    let secs = rec.end - rec.start;
    if rec.omitted || secs < spec.interval.0.as_secs_f64() * 0.9 {
        return s;
    }
    for d in &rec.sums {
        let flows = rec.flows.iter().filter(|f| f.dir == d.dir).count() as f64;
        let (asked, sent, unit) = match spec.rate_for(d.dir) {
            UdpRate::Bits(b) if b.0 > 0.0 => (b.0 * flows, d.sender_bps.map(|b| b.0), "bit/s"),
            UdpRate::Packets(p) if p > 0.0 => (
                p * flows,
                d.sender_datagrams.map(|n| n as f64 / secs),
                "datagrams/s",
            ),
            _ => continue,
        };
        let Some(sent) = sent else { continue };
        if sent < asked * hakaru_model::RATE_TARGET_MET {
            let _ = writeln!(
                s,
                "      {} held back: sent {} of {} asked ({:.1} %)",
                d.dir.label(),
                rate_words(sent, unit),
                rate_words(asked, unit),
                sent * 100.0 / asked
            );
        }
    }
    s
}

/// Lines for one interval: one per flow (up to the view's limit), then a SUM line per
/// direction with several flows.
pub fn interval_lines(rec: &IntervalRecord, view: &View) -> String {
    let mut s = String::new();
    let secs = rec.end - rec.start;
    let omitted = if rec.omitted { "  (omitted)" } else { "" };
    let count = |d: FlowDir| rec.flows.iter().filter(|f| f.dir == d).count();
    let rate = |r: Option<BitRate>| r.map_or_else(|| "-".into(), |r| r.to_string());
    for f in rec.flows.iter().filter(|f| view.flow_rows(count(f.dir))) {
        let (rx, l, j) = tick_cols(f.udp.as_ref(), secs);
        let tx = f
            .sender_datagrams
            .map_or_else(|| "-".into(), |d| pps(d, secs));
        if !view.wide {
            let label = format!("[{:>3}]", f.id);
            let sp = span(rec.start, rec.end);
            let r = rate(f.receiver_bps);
            s.push_str(&narrow_row(
                &label,
                f.dir,
                &sp,
                [&r, &rx, &l, &j, &tx],
                omitted,
            ));
            continue;
        }
        let _ = writeln!(
            s,
            "[{:>3}] {:<4} {:>15}  {}  {rx:>11}  {l:>24}  {j:>10}  | {tx:>11}{omitted}",
            f.id,
            f.dir.label(),
            span(rec.start, rec.end),
            received(f.receiver_bytes, f.receiver_bps),
        );
    }
    for d in &rec.sums {
        if count(d.dir) < 2 {
            continue;
        }
        let (rx, l, j) = tick_cols(d.udp.as_ref(), secs);
        let tx = d
            .sender_datagrams
            .map_or_else(|| "-".into(), |n| pps(n, secs));
        if !view.wide {
            let sp = span(rec.start, rec.end);
            let r = rate(d.receiver_bps);
            s.push_str(&narrow_row(
                "[SUM]",
                d.dir,
                &sp,
                [&r, &rx, &l, &j, &tx],
                omitted,
            ));
            continue;
        }
        let _ = writeln!(
            s,
            "[SUM] {:<4} {:>15}  {}  {rx:>11}  {l:>24}  {j:>10}  | {tx:>11}{omitted}",
            d.dir.label(),
            span(rec.start, rec.end),
            received(d.receiver_bytes, d.receiver_bps),
        );
    }
    s
}

struct Row<'a> {
    label: &'a str,
    dir: FlowDir,
    secs: f64,
    rx: (u64, BitRate),
    tx: (u64, BitRate),
    u: &'a UdpCounts,
}

fn summary_row(s: &mut String, row: Row<'_>, view: &View) {
    let Row {
        label,
        dir,
        secs,
        rx,
        tx,
        u,
    } = row;
    if !view.wide {
        let cols = [
            rx.1.to_string(),
            format!("{:.0}", u.received_pps),
            lost(u.lost, u.received_datagrams, u.duplicates),
            jitter(u.jitter_ms),
            format!("{:.0}", u.sent_pps),
        ];
        let [a, b, c, d, e] = &cols;
        s.push_str(&narrow_row(
            label,
            dir,
            &span(0.0, secs),
            [a, b, c, d, e],
            "",
        ));
        return;
    }
    let _ = writeln!(
        s,
        "{label} {:<4} {:>15}  {:>10} {:>11}  {:>11.0}  {:>24}  {:>6} {:>5}  {:>10}  | {:>10} {:>11} {:>11.0}",
        dir.label(),
        span(0.0, secs),
        Bytes(rx.0).to_string(),
        rx.1.to_string(),
        u.received_pps,
        lost(u.lost, u.received_datagrams, u.duplicates),
        u.out_of_order,
        u.duplicates,
        jitter(u.jitter_ms),
        Bytes(tx.0).to_string(),
        tx.1.to_string(),
        u.sent_pps,
    );
}

fn paths_line(s: &mut String, name: &str, e: &EndResult) {
    if let Some(p) = &e.udp_paths {
        let _ = writeln!(
            s,
            "  {name:<6} paths: send {} / receive {} (up to {} datagrams per call), receive times from {}{}",
            p.send,
            p.recv,
            p.batch,
            if p.kernel_timestamps { "the kernel" } else { "a clock read per call" },
            p.fallback
                .as_ref()
                .map(|f| format!("; {f}"))
                .unwrap_or_default()
        );
    }
}

fn drops_line(s: &mut String, name: &str, e: &EndResult, socket_drops: Option<u64>) {
    let k = e.udp_kernel.unwrap_or_default();
    let _ = writeln!(
        s,
        "  {name:<6} receive drops: test sockets {} datagrams (their drop counters), host-wide RcvbufErrors {} and InErrors {} (/proc/net/snmp: every UDP socket; GRO buffers with --gro), NIC rx drops {}",
        socket_drops.map_or_else(|| "?".into(), |d| d.to_string()),
        k.rcvbuf_errors,
        k.in_errors,
        e.nic.as_ref().map_or_else(|| "?".into(), |n| n.rx_drops.to_string()),
    );
}

fn summary_heading(s: &mut String, view: &View) {
    if !view.wide {
        s.push_str(&narrow_heading("Received"));
        return;
    }
    let _ = writeln!(
        s,
        "{:<5} {:<4} {:>15}  {:>22}  {:>11}  {:>24}  {:>6} {:>5}  {:>10}  | {:>34}",
        "[ ID]",
        "Dir",
        "Interval",
        "Received (headline)",
        "rx pkt/s",
        "Lost/Expected",
        "OOO",
        "Dup",
        "Jitter",
        "Sent                    tx pkt/s"
    );
}

fn sum_rows(s: &mut String, r: &RunResult, view: &View, always: bool) {
    for t in &r.totals {
        let Some(u) = &t.udp else { continue };
        if t.flows > 1 || always {
            let row = Row {
                label: "[SUM]",
                dir: t.dir,
                secs: t.receiver.seconds,
                rx: (t.receiver.bytes, t.receiver.bits_per_second),
                tx: (t.sender.bytes, t.sender.bits_per_second),
                u,
            };
            summary_row(s, row, view);
        }
    }
}

/// The per-direction sums alone (`--summary-only`).
pub fn sums(r: &RunResult, view: &View) -> String {
    let mut s = String::new();
    summary_heading(&mut s, view);
    sum_rows(&mut s, r, view, true);
    s
}

/// The final summary of a UDP run.
pub fn summary(r: &RunResult, view: &View) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{RULE}");
    summary_heading(&mut s, view);
    let count = |d: FlowDir| r.flows.iter().filter(|f| f.dir == d).count();
    for f in r.flows.iter().filter(|f| view.flow_rows(count(f.dir))) {
        let Some(u) = &f.udp else { continue };
        let label = format!("[{:>3}]", f.id);
        let row = Row {
            label: &label,
            dir: f.dir,
            secs: f.receiver.seconds,
            rx: (f.receiver.bytes, f.receiver.bits_per_second),
            tx: (f.sender.bytes, f.sender.bits_per_second),
            u,
        };
        summary_row(&mut s, row, view);
    }
    sum_rows(&mut s, r, view, false);
    hidden_flows_line(&mut s, r, view);
    for t in &r.totals {
        let Some(u) = &t.udp else { continue };
        let _ = writeln!(
            s,
            "{}: {} received, {} sent, {} on an Ethernet wire, {} reordered, {} duplicates",
            flow_dir_words(t.dir),
            Bytes(t.receiver.bytes),
            Bytes(t.sender.bytes),
            u.received_wire_bps,
            u.out_of_order,
            u.duplicates
        );
    }
    for t in &r.totals {
        if let Some(rt) = t.rate_target.as_ref().filter(|rt| rt.missed) {
            let _ = writeln!(
                s,
                "WARNING: {} senders sent {} of the {} asked ({:.1} %): they were held back (their qdisc, socket buffer or CPU), so the path was never offered the asked rate and the loss figures do not measure it",
                flow_dir_words(t.dir),
                rate_words(rt.achieved, &rt.unit),
                rate_words(rt.asked, &rt.unit),
                rt.ratio * 100.0
            );
        }
    }
    let _ = writeln!(s, "Ends (CPU covers the whole machine at each end):");
    for (name, e) in [("client", &r.client), ("server", &r.server_end)] {
        end_lines(&mut s, name, e);
        paths_line(&mut s, name, e);
        // Socket drops belong to the end that received.
        let rx_dir = if name == "client" {
            FlowDir::Down
        } else {
            FlowDir::Up
        };
        if let Some(t) = r.totals.iter().find(|t| t.dir == rx_dir) {
            drops_line(&mut s, name, e, t.udp.and_then(|u| u.socket_drops));
        }
    }
    if let Some(n) = r.server_end.stray_datagrams {
        let _ = writeln!(
            s,
            "  server ignored {n} datagram(s) from senders outside any test during the run"
        );
    }
    trailer(&mut s, r);
    s.push_str(&headline(r));
    s
}

/// The closing headline: one line per direction.
pub fn headline(r: &RunResult) -> String {
    let mut s = String::new();
    for t in &r.totals {
        let Some(u) = &t.udp else { continue };
        let dir = flow_dir_words(t.dir);
        let _ = writeln!(
            s,
            "{dir}: {:.0} pkt/s received ({:.0} sent), {} payload, {:.3}% lost{}",
            u.received_pps,
            u.sent_pps,
            t.receiver.bits_per_second,
            u.lost_percent,
            if u.sequenced {
                ""
            } else {
                " (unsequenced: sent minus received)"
            }
        );
    }
    s
}

impl crate::kind_text::KindText for hakaru_model::UdpSpec {
    fn header(&self, server: &str, embedded: bool) -> String {
        header(self, server, embedded)
    }
    fn interval_heading(&self, view: &View) -> String {
        interval_heading(view)
    }
    fn interval_warnings(&self, rec: &hakaru_model::IntervalRecord) -> String {
        held_back_lines(rec, self)
    }
    fn summary(&self, r: &RunResult, view: &View) -> String {
        summary(r, view)
    }
    fn sums_and_headline(&self, r: &RunResult, view: &View) -> String {
        sums(r, view) + &headline(r)
    }
    fn row(&self, r: &RunResult, s: &mut crate::kind_text::Row) {
        s.direction = crate::summary::direction_word(self.direction).into();
        s.flows = Some(self.flows);
        if self.mode == hakaru_model::UdpMode::Pps {
            s.headline = (!r.totals.is_empty()).then(|| {
                r.totals
                    .iter()
                    .filter_map(|t| t.udp.as_ref().map(|c| c.received_pps))
                    .sum()
            });
            s.unit = "pkt/s".into();
        } else {
            s.headline = crate::summary::received_bps(r);
            s.unit = "bit/s".into();
        }
    }
    fn csv_totals(&self, r: &RunResult) -> String {
        crate::csv::bulk_totals(r)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{DirectionInterval, FlowInterval};

    #[test]
    fn interval_lines_lead_with_the_receiver() {
        let tick = UdpTick {
            datagrams: 990,
            lost: 10,
            out_of_order: 0,
            duplicates: 0,
            jitter_ms: Some(0.25),
        };
        let flow = |id| FlowInterval {
            id,
            dir: FlowDir::Up,
            receiver_bytes: Some(990 * 1000),
            receiver_bps: Some(BitRate(7.92e6)),
            sender_bytes: Some(1_000_000),
            sender_bps: Some(BitRate(8e6)),
            tcp: None,
            udp: Some(tick),
            sender_datagrams: Some(1000),
        };
        let rec = IntervalRecord {
            index: 0,
            start: 0.0,
            end: 1.0,
            omitted: false,
            flows: vec![flow(0), flow(1)],
            sums: vec![DirectionInterval {
                dir: FlowDir::Up,
                receiver_bytes: Some(1_980_000),
                receiver_bps: Some(BitRate(15.84e6)),
                sender_bytes: Some(2_000_000),
                sender_bps: Some(BitRate(16e6)),
                retransmits: None,
                udp: Some(UdpTick::sum([tick, tick].iter())),
                sender_datagrams: Some(2000),
            }],
            latency: None,
            connect: None,
            client_nic: None,
            server_nic: None,
            probe: None,
        };
        for wide in [false, true] {
            let view = View {
                wide,
                ..View::default()
            };
            let out = interval_lines(&rec, &view);
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 3);
            assert!(lines[0].contains("10/1000 (1.000%)"), "{}", lines[0]);
            assert!(lines[0].contains("0.250 ms"));
            assert!(lines[0].contains(" 990 "), "{}", lines[0]);
            assert!(lines[2].starts_with("[SUM]") && lines[2].contains("20/2000"));
            assert!(lines[2].contains("2000"));
            // The narrow view fits 100 columns, under its heading's columns.
            let heading = interval_heading(&view);
            if !wide {
                assert!(lines.iter().all(|l| l.len() <= View::WIDTH), "{out}");
                assert_eq!(heading.trim_end().len(), lines[0].len(), "{heading}{out}");
            } else {
                assert!(lines[0].len() > View::WIDTH, "{out}");
            }
        }
        // Above eight flows per direction only the sum is shown, unless asked.
        let mut many = rec.clone();
        many.flows = (0..9)
            .map(|id| FlowInterval {
                id,
                ..rec.flows[0].clone()
            })
            .collect();
        let out = interval_lines(&many, &View::default());
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.starts_with("[SUM]"));
        let per_flow = View {
            per_flow: true,
            ..View::default()
        };
        assert_eq!(interval_lines(&many, &per_flow).lines().count(), 10);
    }

    #[test]
    fn header_says_when_datagrams_are_unsequenced() {
        let spec = UdpSpec {
            mode: UdpMode::Pps,
            length: Bytes(1),
            ..UdpSpec::default()
        };
        let h = header(&spec, "h:1", false);
        assert!(h.contains("counted, not sequenced"), "{h}");
        assert!(h.starts_with("hakaru packet rate"));
    }
}
