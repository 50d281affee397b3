//! Human text for `hakaru latency`: round-trip percentiles lead; the one-way estimate is
//! labelled as such.

use std::fmt::Write;

use hakaru_model::{
    IntervalRecord, LatencyPeer, LatencySpec, LatencyStats, LatencyTransport, RunResult,
};

use crate::text_parts::{end_lines, span, trailer};

fn transport(t: LatencyTransport) -> &'static str {
    match t {
        LatencyTransport::Tcp => "TCP (TCP_NODELAY)",
        LatencyTransport::Udp => "UDP",
    }
}

/// The line that opens a latency run.
pub fn header(spec: &LatencySpec, server: &str, embedded: bool) -> String {
    let mode = match spec.rate {
        Some(r) => {
            format!("open loop at {r:.0} requests/s per flow, each timed from its scheduled send")
        }
        None => "closed loop (one request outstanding per flow)".into(),
    };
    let sockperf = spec.peer == LatencyPeer::Sockperf;
    let mut wait = String::new();
    if spec.spin && sockperf {
        wait.push_str(", this end SPINs (busy-polls a non-blocking socket)");
    } else if spec.spin {
        wait.push_str(", both ends SPIN (busy-poll non-blocking sockets)");
    }
    if let Some(b) = spec.busy_poll {
        let _ = write!(wait, ", SO_BUSY_POLL {b} us");
    }
    format!(
        "hakaru latency to {server}{}: {} ping-pong, {} flow(s), {}-byte messages, {}, {} measured after a {} warm-up (discarded){wait}\n",
        match (embedded, sockperf) {
            (true, true) => " (embedded loopback server's sockperf port)",
            (false, true) => " (sockperf sr)",
            (true, false) => " (embedded loopback server)",
            (false, false) => "",
        },
        transport(spec.transport),
        spec.flows,
        spec.length.0,
        mode,
        spec.duration,
        spec.warmup,
    )
}

/// Column headings for latency interval lines.
pub fn interval_heading() -> String {
    format!(
        "{:>15}  {:>10} {:>6}  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  RTT us\n",
        "Interval", "trans/s", "lost", "min", "mean", "p50", "p99", "p99.9", "max"
    )
}

fn us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// One line per interval.
pub fn interval_lines(rec: &IntervalRecord) -> String {
    let Some(l) = &rec.latency else {
        return String::new();
    };
    let secs = (rec.end - rec.start).max(1e-9);
    let r = &l.rtt;
    format!(
        "{:>15}  {:>10.0} {:>6}  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}{}\n",
        span(rec.start, rec.end),
        l.replies as f64 / secs,
        l.lost,
        us(r.min_us),
        us(r.mean_us),
        us(r.p50_us),
        us(r.p99_us),
        us(r.p999_us),
        us(r.max_us),
        if rec.omitted { "  (warm-up)" } else { "" }
    )
}

/// The column headings over [`stats_line`] rows.
pub(crate) fn stats_heading(s: &mut String) {
    let _ = writeln!(
        s,
        "{:<24}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}  us",
        "", "min", "mean", "sd", "p50", "p90", "p99", "p99.9", "p99.99", "max"
    );
}

/// One row of a distribution under [`stats_heading`]: min, mean, sd, percentiles and max,
/// microseconds (98 columns).
pub(crate) fn stats_line(s: &mut String, label: &str, r: &LatencyStats) {
    let _ = writeln!(
        s,
        "{label:<24}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}",
        us(r.min_us),
        us(r.mean_us),
        us(r.stddev_us),
        us(r.p50_us),
        us(r.p90_us),
        us(r.p99_us),
        us(r.p999_us),
        us(r.p9999_us),
        us(r.max_us)
    );
}

/// The final summary of a latency run; per-flow rows above eight flows only with the view's
/// `per_flow`.
pub fn summary(r: &RunResult, view: &crate::View) -> String {
    let mut s = String::new();
    let Some(l) = r.detail.latency() else {
        return s;
    };
    let _ = writeln!(
        s,
        "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -"
    );
    let _ = writeln!(
        s,
        "{} {} round trips in {:.2} s ({:.0} transactions/s), {} requests, {} lost, {} late, {} warm-up round trips discarded; wait: {}",
        l.replies,
        l.mode.replace('_', " "),
        l.seconds,
        l.transactions_per_second,
        l.requests,
        l.lost,
        l.late,
        l.warmup_discarded,
        l.wait
    );
    stats_heading(&mut s);
    stats_line(&mut s, "round trip (headline)", &l.rtt);
    stats_line(&mut s, "one-way estimate (RTT/2)", &l.one_way_estimate);
    if l.flows.len() > 1 && view.flow_rows(l.flows.len()) {
        for f in &l.flows {
            stats_line(&mut s, &format!("  flow {:>3} round trip", f.id), &f.rtt);
        }
    } else if l.flows.len() > 1 {
        let _ = writeln!(
            s,
            "({} flows: per-flow rows hidden above {}; --per-flow shows them, --json has them all)",
            l.flows.len(),
            crate::View::MAX_FLOW_ROWS
        );
    }
    if !l.histogram.is_empty() {
        let _ = writeln!(s, "Round-trip distribution:");
        let total: u64 = l.histogram.iter().map(|b| b.count).sum::<u64>().max(1);
        let mut below = 0u64;
        for b in &l.histogram {
            below += b.count;
            let bar = "#".repeat(((b.count * 50) / total) as usize);
            let _ = writeln!(
                s,
                "  <= {:>10} us {:>10} {:>7.3}%  {bar}",
                us(b.le_us),
                b.count,
                below as f64 * 100.0 / total as f64
            );
        }
    }
    if let Some(path) = &l.full_log {
        let _ = writeln!(
            s,
            "every sample written to {path} (CSV: flow,seq,send_us,recv_us,rtt_us)"
        );
    }
    if let Some(u) = &l.under_load {
        let _ = writeln!(
            s,
            "Under load ({} bulk TCP flow(s) each way: {:.2} Gbit/s up, {:.2} Gbit/s down received):",
            u.load_flows,
            u.load_up_bps / 1e9,
            u.load_down_bps / 1e9
        );
        stats_heading(&mut s);
        stats_line(&mut s, "  idle round trip", &u.idle_rtt);
        stats_line(&mut s, "  loaded round trip", &u.loaded_rtt);
        if u.idle_rtt.p50_us > 0.0 {
            let _ = writeln!(
                s,
                "  median grows {:.1}x, p99 {:.1}x under load",
                u.loaded_rtt.p50_us / u.idle_rtt.p50_us,
                u.loaded_rtt.p99_us / u.idle_rtt.p99_us.max(1e-9)
            );
        }
    }
    let _ = writeln!(s, "Ends (CPU covers the whole machine at each end):");
    end_lines(&mut s, "client", &r.client);
    match &r.spec {
        hakaru_model::TestSpec::Latency(l) if l.peer == LatencyPeer::Sockperf => {
            let _ = writeln!(
                s,
                "  server sockperf sr: not measured (no control connection)"
            );
        }
        _ => end_lines(&mut s, "server", &r.server_end),
    }
    trailer(&mut s, r);
    s.push_str(&headline(r));
    s
}

/// The closing headline: transport, median and tail round trip, rate.
pub fn headline(r: &RunResult) -> String {
    let Some(l) = r.detail.latency() else {
        return String::new();
    };
    let transport = match &r.spec {
        hakaru_model::TestSpec::Latency(spec) => match spec.transport {
            LatencyTransport::Tcp => "TCP",
            LatencyTransport::Udp => "UDP",
        },
        _ => "",
    };
    let mut s = format!(
        "latency: {transport} RTT p50 {} us, p99 {} us, mean {} us, {:.0} transactions/s",
        us(l.rtt.p50_us),
        us(l.rtt.p99_us),
        us(l.rtt.mean_us),
        l.transactions_per_second
    );
    if l.lost > 0 {
        let _ = write!(s, ", {} lost", l.lost);
    }
    if let Some(u) = &l.under_load {
        let _ = write!(s, "; idle p50 {} us", us(u.idle_rtt.p50_us));
    }
    s.push('\n');
    s
}

impl crate::kind_text::KindText for hakaru_model::LatencySpec {
    fn header(&self, server: &str, embedded: bool) -> String {
        header(self, server, embedded)
    }
    fn interval_heading(&self, _view: &crate::View) -> String {
        interval_heading()
    }
    fn summary(&self, r: &RunResult, view: &crate::View) -> String {
        summary(r, view)
    }
    fn sums_and_headline(&self, r: &RunResult, _view: &crate::View) -> String {
        headline(r)
    }
    fn row(&self, r: &RunResult, s: &mut crate::kind_text::Row) {
        s.headline = r.detail.latency().map(|l| l.rtt.p50_us);
        s.unit = "us".into();
    }
    fn csv_totals(&self, r: &RunResult) -> String {
        crate::csv::latency_totals(r)
    }
}
