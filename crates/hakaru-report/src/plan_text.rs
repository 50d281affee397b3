//! `hakaru plan run`: live lines and the summary of a plan, as text (its JSON document is
//! `json::plan`, its JSON Lines events `jsonl::event`).

use hakaru_model::plan::{
    PlanHost, PlanResult, ReceiverAggregate, ReceiverTick, Release, StepResult, TimelineRow,
};
use hakaru_model::{BitRate, FlowDir};

/// A count per second with its SI prefix and the space before the unit that follows:
/// `950 `, `12.3 k`, `1.02 M` (so `{}pps` reads `950 pps`, `12.3 kpps`).
pub fn per_second(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0} ")
    }
}

/// A count per second with its prefix, no trailing space (for a unit after a space).
fn count(v: f64) -> String {
    per_second(v).trim_end().to_string()
}

fn arrow(dir: FlowDir) -> &'static str {
    match dir {
        FlowDir::Up => "<-",
        FlowDir::Down => "->",
    }
}

/// One line per prepared host.
pub fn host_line(h: &PlanHost) -> String {
    format!(
        "host {}: {}, {}{} at {}\n",
        h.name,
        h.launcher,
        h.version.as_deref().unwrap_or("no hakaru answered"),
        if h.pushed { " (pushed)" } else { "" },
        h.hakaru
    )
}

/// The heading of a step.
pub fn step_heading(
    index: u32,
    of: usize,
    name: &str,
    senders: &[String],
    receivers: &[String],
    flags: &[String],
) -> String {
    // Search trials are steps the plan did not count in advance (`of` is 0 for them).
    let of = if of > 0 {
        format!("/{of}")
    } else {
        String::new()
    };
    format!(
        "\nstep {index}{of}: {name}: {} -> {} ({} client(s)) {}\n",
        senders.join(", "),
        receivers.join(", "),
        senders.len() * receivers.len(),
        flags.join(" ")
    )
}

/// How well the start was synchronised.
pub fn release_line(r: &Release) -> String {
    let late = match r.late {
        0 => String::new(),
        n => format!(
            " ({n} had their `go` after the instant {:.0} ms ahead: a slow launcher or a clock ahead)",
            r.lead_ms
        ),
    };
    format!(
        "  released {} client(s) after {:.0} ms of set-up: skew {:.2} ms by their clocks{late}, acknowledgements within {:.2} ms\n",
        r.clients, r.setup_ms, r.skew_ms, r.ack_spread_ms
    )
}

fn receiver_part(t: &ReceiverTick, row: &TimelineRow) -> String {
    let runs: Vec<String> = row
        .runs
        .iter()
        .filter(|r| r.receiver == t.receiver && r.dir == t.dir)
        .map(|r| match (r.per_second, r.pps) {
            (Some(ps), _) => format!("{} {}/s", r.sender, per_second(ps).trim_end()),
            (None, Some(pps)) => format!("{} {}pps", r.sender, per_second(pps)),
            (None, None) => format!("{} {}", r.sender, BitRate(r.bps)),
        })
        .collect();
    let total = match (t.per_second, t.pps) {
        (Some(ps), _) => format!("{}/s", per_second(ps).trim_end()),
        (None, Some(pps)) => format!("{}pps {}", per_second(pps), BitRate(t.bps)),
        (None, None) => format!("{}", BitRate(t.bps)),
    };
    let nic = match t.dir {
        FlowDir::Up => t
            .nic_rx_pps
            .zip(t.nic_rx_bps)
            .map(|(p, b)| format!(" | NIC rx {}pkt/s {}", per_second(p), BitRate(b))),
        FlowDir::Down => t
            .nic_tx_pps
            .zip(t.nic_tx_bps)
            .map(|(p, b)| format!(" | NIC tx {}pkt/s {}", per_second(p), BitRate(b))),
    };
    format!(
        "{} {} {total} [{}]{}",
        t.receiver,
        arrow(t.dir),
        runs.join(", "),
        nic.unwrap_or_default()
    )
}

/// One merged interval: per receiver the total, each sender's part and the NIC.
pub fn row_line(row: &TimelineRow) -> String {
    let parts: Vec<String> = row
        .receivers
        .iter()
        .map(|t| receiver_part(t, row))
        .collect();
    format!(
        "  {:6.2}-{:<6.2}{} {}\n",
        row.start,
        row.end,
        if row.omitted { " (omitted)" } else { "" },
        parts.join("; ")
    )
}

fn aggregate_line(a: &ReceiverAggregate) -> String {
    let mut s = format!(
        "  {} {} {} run(s), {} flow(s): ",
        a.receiver,
        arrow(a.dir),
        a.runs,
        a.flows
    );
    if let Some(tps) = a.transactions_per_second {
        s += &format!(
            "{} round trips/s, mean RTT {:.1} us, worst run's p99 {:.1} us",
            count(tps),
            a.rtt_mean_us.unwrap_or(0.0),
            a.rtt_worst_p99_us.unwrap_or(0.0)
        );
    } else if let Some(cps) = a.connections_per_second {
        s += &format!("{} connections/s", count(cps));
    } else if let Some(pps) = a.received_pps {
        s += &format!(
            "{}pps received ({}), sent {}pps, lost {} ({:.3} %)",
            per_second(pps),
            BitRate(a.received_bps),
            per_second(a.sent_pps.unwrap_or(0.0)),
            a.lost.unwrap_or(0),
            a.lost_percent.unwrap_or(0.0)
        );
    } else {
        s += &format!(
            "{} received, {} sent",
            BitRate(a.received_bps),
            BitRate(a.sent_bps)
        );
        if let Some(r) = a.retransmits {
            s += &format!(", {r} retransmits");
        }
    }
    s.push('\n');
    if let Some(n) = &a.nic {
        s += &format!(
            "    receiver NIC {}: rx {}pkt/s {}, tx {}pkt/s {}",
            n.interface,
            per_second(n.rx_pps),
            BitRate(n.rx_kib_per_s * 1024.0 * 8.0),
            per_second(n.tx_pps),
            BitRate(n.tx_kib_per_s * 1024.0 * 8.0)
        );
        if let Some(c) = &a.cpu {
            s += &format!(", CPU {:.1} % busy", c.busy_pct);
        }
        s.push('\n');
    }
    if let Some(c) = &a.nic_check {
        let (what, clients, nic) = if c.measure == "packets" {
            ("packets/s", count(c.clients), count(c.nic))
        } else {
            (
                "bits/s: the NIC's between the payload and the payload with full headers",
                BitRate(c.clients * 8.0).to_string(),
                BitRate(c.nic * 8.0).to_string(),
            )
        };
        if c.agrees {
            s += &format!(
                "    NIC check ({what}): clients {clients}, NIC {nic}: agree ({:+.2} %)\n",
                c.difference_percent
            );
        } else {
            s += &format!(
                "    NIC check ({what}): clients {clients}, NIC {nic}: DISAGREE by {:+.2} %{}\n",
                c.difference_percent,
                c.note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
        }
    }
    s
}

/// One run's headline: what its receiver got (per direction), or its error.
fn run_line(r: &hakaru_model::plan::PlanRun) -> String {
    let Some(res) = &r.result else {
        return format!(
            "    {} -> {}: {}\n",
            r.sender,
            r.receiver,
            r.error.as_deref().unwrap_or("no result")
        );
    };
    let mut parts: Vec<String> = res
        .totals
        .iter()
        .map(|t| match &t.udp {
            Some(u) => format!(
                "{} {}pps received ({}, lost {:.3} %)",
                t.dir.label(),
                per_second(u.received_pps),
                t.receiver.bits_per_second,
                u.lost_percent
            ),
            None => format!(
                "{} {} received ({} sent)",
                t.dir.label(),
                t.receiver.bits_per_second,
                t.sender.bits_per_second
            ),
        })
        .collect();
    if let Some(l) = res.detail.latency() {
        parts.push(format!(
            "{} round trips/s, RTT p50 {:.1} us p99 {:.1} us",
            count(l.transactions_per_second),
            l.rtt.p50_us,
            l.rtt.p99_us
        ));
    }
    if let Some(c) = res.detail.connect() {
        parts.push(format!("{} connections/s", count(c.connections_per_second)));
    }
    if let Some(p) = res.detail.probe() {
        // The latency probes (`latency_probe`): under load against idle, and the increase.
        parts.push(format!(
            "probe RTT p50 {:.2} ms under load, {:.2} ms idle (+{:.2} ms)",
            p.loaded.rtt.p50_us / 1000.0,
            p.idle.rtt.p50_us / 1000.0,
            p.increase.p50_us / 1000.0
        ));
    }
    if res.interrupted {
        parts.push("interrupted".into());
    }
    format!("    {} -> {}: {}\n", r.sender, r.receiver, parts.join("; "))
}

/// The end of a step: aggregates per receiver, then each run's headline or error.
pub fn step_summary(s: &StepResult) -> String {
    let mut out = String::new();
    if let Some(t) = &s.trial {
        out += &crate::capacity_text::trial_line(
            t,
            if s.kind == "pps" {
                "datagrams/s"
            } else {
                "bit/s"
            },
        );
    }
    if let Some(fm) = &s.find_max {
        out += &crate::capacity_text::summary(fm);
    }
    if let (Some(skew), Some(late)) = s
        .release
        .as_ref()
        .map_or((None, None), |r| (r.start_skew_ms, r.start_late_ms))
    {
        out += &format!(
            "  the senders' data began within {skew:.2} ms of each other, at most {late:.2} ms after the instant (by their clocks)\n"
        );
    }
    for a in &s.aggregates {
        out += &aggregate_line(a);
    }
    if !s.runs.is_empty() {
        out += "  runs:\n";
    }
    for r in &s.runs {
        out += &run_line(r);
    }
    out
}

/// The closing summary of the run.
pub fn summary(p: &PlanResult) -> String {
    let mut out = format!("\nplan {}: {} step(s)", p.plan, p.steps.len());
    if p.interrupted {
        out += ", interrupted";
    }
    out.push('\n');
    for s in &p.steps {
        for a in &s.aggregates {
            let headline = if let Some(tps) = a.transactions_per_second {
                format!("{} round trips/s", count(tps))
            } else if let Some(cps) = a.connections_per_second {
                format!("{} connections/s", count(cps))
            } else if let Some(pps) = a.received_pps {
                format!("{}pps", per_second(pps))
            } else {
                BitRate(a.received_bps).to_string()
            };
            out += &format!(
                "  step {} {}: {} {} {headline}{}\n",
                s.index,
                s.name,
                a.receiver,
                arrow(a.dir),
                match &a.nic_check {
                    Some(c) if !c.agrees => " (NIC disagrees)",
                    _ => "",
                }
            );
        }
    }
    if !p.errors.is_empty() {
        out += &format!("{} error(s):\n", p.errors.len());
        for e in &p.errors {
            out += &format!("  {e}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::plan::{NicCheck, RunTick};

    #[test]
    fn rows_show_each_sender_the_total_and_the_nic() {
        let row = TimelineRow {
            index: 0,
            start: 0.0,
            end: 1.0,
            omitted: false,
            runs: ["a", "b"]
                .iter()
                .map(|s| RunTick {
                    sender: s.to_string(),
                    receiver: "rx".into(),
                    dir: FlowDir::Up,
                    bps: 1e6,
                    pps: Some(100_000.0),
                    per_second: None,
                })
                .collect(),
            receivers: vec![ReceiverTick {
                receiver: "rx".into(),
                dir: FlowDir::Up,
                bps: 2e6,
                pps: Some(200_000.0),
                per_second: None,
                runs: 2,
                nic_rx_pps: Some(200_500.0),
                nic_rx_bps: Some(3e6),
                nic_tx_pps: Some(10.0),
                nic_tx_bps: Some(1e4),
            }],
        };
        let l = row_line(&row);
        assert!(l.contains("rx <- 200.0 kpps"), "{l}");
        assert!(l.contains("a 100.0 kpps, b 100.0 kpps"), "{l}");
        assert!(l.contains("NIC rx 200.5 kpkt/s"), "{l}");
    }

    #[test]
    fn a_disagreeing_nic_is_flagged_with_the_numbers() {
        let mut a = ReceiverAggregate {
            runs: 3,
            flows: 192,
            received_datagrams: Some(1),
            received_pps: Some(300_000.0),
            sent_datagrams: Some(1),
            sent_pps: Some(300_000.0),
            lost: Some(0),
            lost_percent: Some(0.0),
            nic_check: Some(NicCheck {
                measure: "packets".into(),
                clients: 300_000.0,
                nic: 9_679.0,
                difference_percent: -96.8,
                agrees: false,
                note: Some("GSO".into()),
            }),
            ..ReceiverAggregate::new("rx", FlowDir::Up)
        };
        let s = aggregate_line(&a);
        assert!(s.contains("DISAGREE by -96.80 %"), "{s}");
        assert!(s.contains("clients 300.0 k, NIC 9679"), "{s}");
        a.nic_check.as_mut().unwrap().agrees = true;
        assert!(aggregate_line(&a).contains("agree ("));
    }
}
