//! Pieces of the human text that every kind's text uses: direction words, time spans, the
//! end-of-test lines of each end, the trailer.

use std::fmt::Write;

use hakaru_model::{Bytes, Direction, EndResult, FlowDir, RunResult};

use crate::View;

/// A test's direction in words, for headers.
pub(crate) fn direction_words(d: Direction) -> &'static str {
    match d {
        Direction::Forward => "client -> server",
        Direction::Reverse => "server -> client (reverse)",
        Direction::Bidir => "both directions (bidir)",
    }
}

/// A flow direction in words, for summary lines.
pub(crate) fn flow_dir_words(d: FlowDir) -> &'static str {
    match d {
        FlowDir::Up => "client -> server",
        FlowDir::Down => "server -> client",
    }
}

pub(crate) fn span(start: f64, end: f64) -> String {
    format!("{start:6.2}-{end:<6.2} s")
}

pub(crate) fn end_lines(s: &mut String, name: &str, e: &EndResult) {
    if let Some(c) = &e.cpu {
        // softirq only where the OS splits it out; elsewhere it is inside system time.
        let softirq = c
            .softirq_pct
            .map(|p| format!(", softirq {p:.1}%"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {name:<6} CPU {:5.1}% busy of {} CPUs (user {:.1}%, system {:.1}%{softirq}), {:.2} CPU-s",
            c.busy_pct, c.cpus, c.user_pct, c.system_pct, c.busy_s
        );
    } else {
        let _ = writeln!(
            s,
            "  {name:<6} CPU not reported by this end (its OS or protocol gives none)"
        );
    }
    if let Some(b) = e.bytes_per_cpu_second {
        let _ = writeln!(
            s,
            "  {name:<6} efficiency {}/CPU-s ({:.2} GB per CPU-second, sent + received)",
            Bytes(b as u64),
            b / 1e9
        );
    }
    if let Some(n) = &e.nic {
        // A virtual interface passing GSO buffers whole counts buffers, not wire packets.
        let (rx, tx, what) = if n.packets_are_buffers {
            (
                "rx GSO buffers/s",
                "tx GSO buffers/s",
                " (virtual interface: packet counts are GSO buffers, not wire packets)",
            )
        } else {
            ("rxpck/s", "txpck/s", "")
        };
        let _ = writeln!(
            s,
            "  {name:<6} NIC {}: {rx} {:.0} {tx} {:.0} rxkB/s {:.0} txkB/s {:.0} drop/s rx {:.1} tx {:.1} errors {}/{}{what}",
            n.interface, n.rx_pps, n.tx_pps, n.rx_kib_per_s, n.tx_kib_per_s, n.rx_drops_ps, n.tx_drops_ps,
            n.rx_errors, n.tx_errors
        );
    }
    env_line(s, name, e);
}

/// The environment line of one end, with only the fields the end reported; an end that
/// reported none (an iperf3 peer) gets a line saying so instead of placeholders.
fn env_line(s: &mut String, name: &str, e: &EndResult) {
    let v = &e.env;
    let mut parts: Vec<String> = Vec::new();
    let system = [v.os.as_str(), v.kernel.as_str()]
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let mut head = system;
    if !v.hostname.is_empty() {
        head = format!("{head} on {}", v.hostname).trim().to_string();
    }
    if v.cpus > 0 {
        head = format!("{head} ({} CPUs)", v.cpus).trim().to_string();
    }
    if !head.is_empty() {
        parts.push(head);
    }
    if let Some(cc) = &v.default_congestion {
        parts.push(format!("default cc {cc}"));
    }
    let mut iface = Vec::new();
    if let Some(i) = &v.interface {
        iface.push(format!("iface {i}"));
    }
    if let Some(q) = &v.qdisc {
        iface.push(format!("qdisc {q}"));
    }
    if let Some(m) = v.mtu {
        iface.push(format!("mtu {m}"));
    }
    if !iface.is_empty() {
        parts.push(iface.join(" "));
    }
    let mut bufs = Vec::new();
    if let Some(r) = v.rmem_max {
        bufs.push(format!("rmem_max {r}"));
    }
    if let Some(w) = v.wmem_max {
        bufs.push(format!("wmem_max {w}"));
    }
    if !bufs.is_empty() {
        parts.push(bufs.join(" "));
    }
    if let Some(r) = &v.tcp_rmem {
        parts.push(format!("tcp_rmem [{r}]"));
    }
    if let Some(w) = &v.tcp_wmem {
        parts.push(format!("tcp_wmem [{w}]"));
    }
    if parts.is_empty() {
        let _ = writeln!(
            s,
            "  {name:<6} env not reported by this end (its protocol carries none)"
        );
        return;
    }
    let modes = match (e.send_mode.as_str(), e.recv_mode.as_str()) {
        ("", "") => String::new(),
        (a, b) => format!(", send {a} / receive {b}"),
    };
    let _ = writeln!(s, "  {name:<6} env {}{modes}", parts.join(", "));
}

/// Bytes that arrived after the measured window, per direction, in words: they are not in
/// the headline.
pub(crate) fn late_lines(r: &RunResult) -> String {
    let mut s = String::new();
    // A socket buffer's worth that lands within milliseconds (loopback) is not worth a line;
    // the JSON has it either way.
    let worth = |c: &hakaru_model::Counted| {
        c.late_bytes > 0 && (c.late_seconds >= 0.05 || c.late_bytes * 100 >= c.bytes)
    };
    for t in r.totals.iter().filter(|t| worth(&t.receiver)) {
        let _ = writeln!(
            s,
            "note: {} of {} {} flow(s) were still delivering {:.1} s after the end of the test: {}, not in the headline (which is the bytes inside the {:.2} s window)",
            t.receiver.late_flows,
            t.flows,
            flow_dir_words(t.dir),
            t.receiver.late_seconds,
            Bytes(t.receiver.late_bytes),
            t.receiver.seconds
        );
    }
    s
}

/// The dashed rule that separates live intervals from a summary.
pub(crate) const RULE: &str =
    "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -";

/// A note for the summary when per-flow rows are hidden.
pub(crate) fn hidden_flows_line(s: &mut String, r: &RunResult, view: &View) {
    let most = r.totals.iter().map(|t| t.flows as usize).max().unwrap_or(0);
    if !view.flow_rows(most) {
        let _ = writeln!(
            s,
            "({most} flows per direction: per-flow rows hidden above {}; --per-flow shows them, --json has them all)",
            View::MAX_FLOW_ROWS
        );
    }
}

/// Notes that close every summary: shared machine, choices made, interruption.
pub(crate) fn trailer(s: &mut String, r: &RunResult) {
    if r.embedded_server {
        let _ = writeln!(
            s,
            "  note: embedded loopback server: both ends share this machine, its CPUs and lo"
        );
    } else if r.server_on_this_host {
        let _ = writeln!(
            s,
            "  note: the server runs on this machine (same kernel): both ends share its CPUs"
        );
    }
    for n in &r.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    if r.interrupted {
        let _ = writeln!(
            s,
            "  note: interrupted; figures cover the time the test ran"
        );
    }
}
