//! The latency probes of a bulk test (`--latency-probe`) in text: a line per interval under
//! the throughput, and the idle, loaded and increase figures before the headline.

use std::fmt::Write;

use hakaru_model::{IntervalRecord, LatencyInterval, LatencyTransport, ProbeResult};

/// Milliseconds with two decimals (probe round trips run from tens of microseconds on
/// loopback to seconds behind a full queue).
fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

fn figures(i: &LatencyInterval) -> String {
    if i.replies == 0 {
        return format!("no replies ({} probes, {} lost)", i.requests, i.lost);
    }
    format!(
        "p50 {:>10}  p90 {:>10}  p99 {:>10}  ({} replies, {} lost)",
        ms(i.rtt.p50_us),
        ms(i.rtt.p90_us),
        ms(i.rtt.p99_us),
        i.replies,
        i.lost
    )
}

/// The probes' line of one interval, if it has one.
pub fn interval_line(rec: &IntervalRecord) -> Option<String> {
    let p = rec.probe.as_ref()?;
    let omitted = if rec.omitted { "  (omitted)" } else { "" };
    Some(format!(
        "[RTT]      {:>15}  {}{omitted}\n",
        format!("{:6.2}-{:<6.2} s", rec.start, rec.end),
        figures(p)
    ))
}

/// The summary block: idle baseline, under load, and the increase.
pub fn summary(p: &ProbeResult) -> String {
    let mut s = String::new();
    let proto = match p.transport {
        LatencyTransport::Udp => "UDP",
        LatencyTransport::Tcp => "TCP",
    };
    let _ = writeln!(
        s,
        "Latency probes ({proto}, {} a second, {} bytes), round trip:",
        p.rate, p.length
    );
    let idle = format!("idle, {:.1} s before load", p.baseline_seconds);
    let _ = writeln!(s, "  {idle:<24}  {}", figures(&p.idle));
    let _ = writeln!(s, "  {:<24}  {}", "under load", figures(&p.loaded));
    let d = &p.increase;
    let signed = |us: f64| format!("{}{}", if us >= 0.0 { "+" } else { "" }, ms(us));
    let _ = writeln!(
        s,
        "  increase under load       p50 {:>10}  p90 {:>10}  p99 {:>10}",
        signed(d.p50_us),
        signed(d.p90_us),
        signed(d.p99_us)
    );
    if let Some(e) = &p.error {
        let _ = writeln!(s, "  the probe flow ended early: {e}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{LatencyStats, ProbeIncrease};

    fn iv(p50: f64, replies: u64) -> LatencyInterval {
        LatencyInterval {
            requests: replies,
            replies,
            lost: 0,
            rtt: LatencyStats {
                count: replies,
                p50_us: p50,
                p90_us: p50 * 2.0,
                p99_us: p50 * 3.0,
                ..LatencyStats::default()
            },
        }
    }

    #[test]
    fn summary_has_idle_loaded_and_the_increase() {
        let p = ProbeResult {
            transport: LatencyTransport::Udp,
            rate: 20.0,
            length: 64,
            baseline_seconds: 2.0,
            idle: iv(200.0, 40),
            loaded: iv(100_200.0, 200),
            increase: ProbeIncrease::between(&iv(200.0, 40).rtt, &iv(100_200.0, 200).rtt),
            error: None,
        };
        let s = summary(&p);
        assert!(
            s.contains("idle, 2.0 s before load   p50    0.20 ms"),
            "{s}"
        );
        assert!(
            s.contains("under load                p50  100.20 ms"),
            "{s}"
        );
        assert!(s.contains("p50 +100.00 ms"), "{s}");
    }

    #[test]
    fn an_interval_without_replies_says_so() {
        let rec = IntervalRecord {
            index: 0,
            start: 0.0,
            end: 1.0,
            omitted: false,
            flows: vec![],
            sums: vec![],
            latency: None,
            connect: None,
            client_nic: None,
            server_nic: None,
            probe: Some(Box::new(LatencyInterval {
                requests: 20,
                lost: 20,
                ..LatencyInterval::default()
            })),
        };
        let line = interval_line(&rec).unwrap_or_default();
        assert!(line.contains("no replies (20 probes, 20 lost)"), "{line}");
    }
}
