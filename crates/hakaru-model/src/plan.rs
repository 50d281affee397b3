//! Plans: many hosts, one test. The merged result of `hakaru plan run` and the one function
//! that adds the per-host [`RunResult`]s of a step up, per receiver and direction and per
//! interval.
//!
//! A plan step runs one client per (sender, receiver) pair, each an ordinary hakaru test whose
//! `RunResult` is kept unchanged in [`PlanRun`]; the aggregates are sums over those results,
//! never re-measured.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::result::{CpuUsage, NicUsage, RunResult};
use crate::FlowDir;

/// Version of the plan result format; bumped on any incompatible change.
pub const PLAN_SCHEMA_VERSION: u32 = 1;

/// Largest relative difference between the clients' sum and the receiver's interface count
/// that is not flagged.
pub const NIC_AGREEMENT: f64 = 0.01;

/// The merged result of one `hakaru plan run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanResult {
    /// Version of this format (see docs/plan.md).
    pub schema_version: u32,
    /// Always `hakaru`.
    pub tool: String,
    /// hakaru version of the coordinator.
    pub tool_version: String,
    /// Always `plan`.
    pub test: String,
    /// The plan file as given.
    pub plan: String,
    /// Wall-clock start of the run, RFC 3339 UTC.
    pub started_at: String,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_at_unix: f64,
    /// Every host the steps use, as prepared.
    pub hosts: Vec<PlanHost>,
    /// The steps in the order they ran (sweeps and repeats expanded).
    pub steps: Vec<StepResult>,
    /// True if the run was stopped early (Ctrl-C); the figures cover what ran.
    pub interrupted: bool,
    /// Everything that went wrong, each naming the host and step; empty on success.
    pub errors: Vec<String>,
}

/// One host of a plan as the coordinator found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanHost {
    /// Name in the plan (`[hosts.NAME]`).
    pub name: String,
    /// Address the other hosts test against, if it is a receiver.
    pub address: Option<String>,
    /// How the coordinator reaches it (`local`, `netns NAME`, `ssh DEST`, `exec ...`).
    pub launcher: String,
    /// Path of the hakaru binary run there.
    pub hakaru: String,
    /// Version that binary reported (`hakaru 0.1.0`), when it answered.
    pub version: Option<String>,
    /// True when the coordinator copied its own binary there (`push = true`).
    pub pushed: bool,
    /// For receivers: `started` (the coordinator started `hakaru server` and stopped it at the
    /// end) or `reused` (one was already listening on the port).
    pub server: Option<String>,
}

/// One step of a plan, run: every (sender, receiver) client started together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepResult {
    /// Position in the run, from 1.
    pub index: u32,
    /// Step name (from the plan, or made from its kind and sweep values).
    pub name: String,
    /// Test kind: `tcp`, `udp`, `pps`, `latency` or `connect`.
    pub kind: String,
    /// Repetition of the step, from 1 (`repeat = N`).
    pub repeat: u32,
    /// The sweep values this step ran with (`parallel = [1, 2, 4]` gives `parallel: "2"`).
    pub sweep: BTreeMap<String, String>,
    /// Hosts that ran the clients.
    pub senders: Vec<String>,
    /// Hosts that ran the servers.
    pub receivers: Vec<String>,
    /// How well the start was synchronised, when every client got as far as the start.
    pub release: Option<Release>,
    /// Per receiver and direction: the sums over the step's runs.
    pub aggregates: Vec<ReceiverAggregate>,
    /// The merged timeline: interval by interval, every run and every receiver's sum.
    pub timeline: Vec<TimelineRow>,
    /// Each client's run with its full result.
    pub runs: Vec<PlanRun>,
    /// What went wrong in this step, naming the host.
    pub errors: Vec<String>,
    /// A `find_max` step: this step is one trial of the search (`trial`); the last trial also
    /// carries the search's result (`find_max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<crate::capacity::Trial>,
    /// The search's result, on the step that ran its last trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_max: Option<crate::capacity::FindMaxResult>,
}

/// The synchronised start of a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Release {
    /// Clients released.
    pub clients: u32,
    /// Milliseconds from starting the step until the last client reported ready.
    pub setup_ms: f64,
    /// Milliseconds the coordinator took to write `go` to every client.
    pub write_ms: f64,
    /// How far ahead of writing `go` the release instant was, milliseconds: every client
    /// waits for that instant by its own clock (0 in results of versions that released on
    /// the line itself).
    #[serde(default)]
    pub lead_ms: f64,
    /// The least time, milliseconds, by which a client's `go` came before the instant (by
    /// its clock): what the lead had left. Absent when no client said (older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go_margin_ms: Option<f64>,
    /// Clients whose `go` came after the instant (by their clock): they started as soon as
    /// it came. A remote launcher slower than the lead, or a clock ahead of the
    /// coordinator's.
    #[serde(default)]
    pub late: u32,
    /// Spread (latest minus earliest) of the instants the clients were released (heard their
    /// `go`), by their own wall clocks, milliseconds. Exact when the clients share a clock
    /// (one machine, netns); across machines it includes their clock offsets.
    pub skew_ms: f64,
    /// Spread of the instants the senders' data began, by their own clocks, milliseconds:
    /// with `go AT` a bulk test's ends start their data threads at the instant (`start_at`)
    /// and report when the first one began (`began_unix`); this is the skew the data sees.
    /// Absent when a sender did not say (latency and connection-rate steps, bare `go`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_skew_ms: Option<f64>,
    /// The latest a sender's data began after the instant, milliseconds, by its clock: what
    /// the set-up before it and the wake-up at it cost (0 at best).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_late_ms: Option<f64>,
    /// Spread of the instants the clients' `released` acknowledgements reached the
    /// coordinator, milliseconds: clock-free, an upper bound of the skew plus the launchers'
    /// return-path jitter.
    pub ack_spread_ms: f64,
}

/// One client of a step: a sender testing against a receiver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanRun {
    /// Host that ran the client.
    pub sender: String,
    /// Host that ran the server.
    pub receiver: String,
    /// The command run on the sender (after the launcher).
    pub command: Vec<String>,
    /// The run's full result, as `--json` would print it on that host.
    pub result: Option<RunResult>,
    /// Why the run has no result, or failed, naming the host.
    pub error: Option<String>,
}

/// The sums over a step's runs for one receiver and one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReceiverAggregate {
    /// Receiver host.
    pub receiver: String,
    /// `up`: into the receiver (the senders send); `down`: out of it (`reverse`).
    pub dir: FlowDir,
    /// Runs with a result.
    pub runs: u32,
    /// Flows summed.
    pub flows: u32,
    /// Bytes counted at the receiving sockets (the headline), summed.
    pub received_bytes: u64,
    /// Sum of the runs' receiver rates, bits per second.
    pub received_bps: f64,
    /// Bytes counted at the sending sockets, summed.
    pub sent_bytes: u64,
    /// Sum of the runs' sender rates, bits per second.
    pub sent_bps: f64,
    /// TCP: segments retransmitted, summed over the runs whose OS counts them.
    pub retransmits: Option<u64>,
    /// UDP: datagrams received, summed.
    pub received_datagrams: Option<u64>,
    /// UDP: sum of the runs' received datagram rates (the packet-rate headline).
    pub received_pps: Option<f64>,
    /// UDP: datagrams sent, summed.
    pub sent_datagrams: Option<u64>,
    /// UDP: sum of the runs' sent datagram rates.
    pub sent_pps: Option<f64>,
    /// UDP: datagrams lost, summed.
    pub lost: Option<u64>,
    /// UDP: lost as a percentage of lost + received.
    pub lost_percent: Option<f64>,
    /// Latency: round trips per second, summed over the runs.
    pub transactions_per_second: Option<f64>,
    /// Latency: the mean round trip over all runs (weighted by round trips), microseconds.
    pub rtt_mean_us: Option<f64>,
    /// Latency: the highest p99 of any run (percentiles do not add), microseconds.
    pub rtt_worst_p99_us: Option<f64>,
    /// Connection rate: connections per second, summed over the runs.
    pub connections_per_second: Option<f64>,
    /// The receiver's interface counters over the step (the `sar -n DEV` truth), from the
    /// server's report of the first run with one.
    pub nic: Option<NicUsage>,
    /// The receiver machine's CPU over the step, from the same report.
    pub cpu: Option<CpuUsage>,
    /// The clients' sum against the receiver's interface count.
    pub nic_check: Option<NicCheck>,
}

impl ReceiverAggregate {
    /// An aggregate of nothing yet: zero counts, no figures.
    pub fn new(receiver: &str, dir: FlowDir) -> ReceiverAggregate {
        ReceiverAggregate {
            receiver: receiver.to_string(),
            dir,
            runs: 0,
            flows: 0,
            received_bytes: 0,
            received_bps: 0.0,
            sent_bytes: 0,
            sent_bps: 0.0,
            retransmits: None,
            received_datagrams: None,
            received_pps: None,
            sent_datagrams: None,
            sent_pps: None,
            lost: None,
            lost_percent: None,
            transactions_per_second: None,
            rtt_mean_us: None,
            rtt_worst_p99_us: None,
            connections_per_second: None,
            nic: None,
            cpu: None,
            nic_check: None,
        }
    }
}

/// Whether the clients' sum and the receiver's interface agree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicCheck {
    /// What is compared: `packets` (UDP: datagrams per second against the interface's
    /// packets per second) or `bytes` (TCP: goodput against the interface's bytes, which must
    /// lie between the goodput and the goodput plus full-segment headers).
    pub measure: String,
    /// The clients' figure (per second).
    pub clients: f64,
    /// The interface's figure (per second).
    pub nic: f64,
    /// (nic - clients) / clients, percent.
    pub difference_percent: f64,
    /// False when they disagree by more than 1 % (beyond header overhead for bytes).
    pub agrees: bool,
    /// Why they may disagree, when they do.
    pub note: Option<String>,
}

/// One interval of a step across every run (runs are aligned by interval number: they were
/// released together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimelineRow {
    /// Interval number, from 0.
    pub index: u32,
    /// Start, seconds since the release (the first run's clock).
    pub start: f64,
    /// End, seconds since the release.
    pub end: f64,
    /// True inside the omitted warm-up.
    pub omitted: bool,
    /// Each run's figures.
    pub runs: Vec<RunTick>,
    /// Each receiver's sums, with its interface counters for the same seconds.
    pub receivers: Vec<ReceiverTick>,
}

/// One run's figures for one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunTick {
    /// Sender host.
    pub sender: String,
    /// Receiver host.
    pub receiver: String,
    /// Direction.
    pub dir: FlowDir,
    /// Receiver rate, bits per second.
    pub bps: f64,
    /// Datagrams received per second (UDP).
    pub pps: Option<f64>,
    /// Latency: round trips per second; connect: connections per second.
    pub per_second: Option<f64>,
}

/// One receiver's sums for one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReceiverTick {
    /// Receiver host.
    pub receiver: String,
    /// Direction.
    pub dir: FlowDir,
    /// Receiver rates summed over the runs, bits per second.
    pub bps: f64,
    /// Datagrams received per second, summed (UDP).
    pub pps: Option<f64>,
    /// Latency: round trips per second, summed; connect: connections per second, summed.
    pub per_second: Option<f64>,
    /// Runs that reported this interval.
    pub runs: u32,
    /// The receiver interface's received packets per second (sar rxpck/s).
    pub nic_rx_pps: Option<f64>,
    /// The receiver interface's received bits per second.
    pub nic_rx_bps: Option<f64>,
    /// The receiver interface's sent packets per second (sar txpck/s).
    pub nic_tx_pps: Option<f64>,
    /// The receiver interface's sent bits per second.
    pub nic_tx_bps: Option<f64>,
}

/// A run of a step as the merge sees it: which pair, and its result if any.
pub struct RunRef<'a> {
    /// Sender host.
    pub sender: &'a str,
    /// Receiver host.
    pub receiver: &'a str,
    /// The result.
    pub result: &'a RunResult,
}

fn per_sec(n: f64, secs: f64) -> f64 {
    if secs > 0.0 {
        n / secs
    } else {
        0.0
    }
}

/// Adds a step's runs up per receiver and direction, and checks the sums against each
/// receiver's interface counters.
pub fn aggregate(runs: &[RunRef<'_>]) -> Vec<ReceiverAggregate> {
    let mut keys: Vec<(&str, FlowDir)> = Vec::new();
    for r in runs {
        for t in &r.result.totals {
            if !keys.contains(&(r.receiver, t.dir)) {
                keys.push((r.receiver, t.dir));
            }
        }
        if (r.result.detail.latency().is_some() || r.result.detail.connect().is_some())
            && !keys.contains(&(r.receiver, FlowDir::Up))
        {
            keys.push((r.receiver, FlowDir::Up));
        }
    }
    keys.into_iter()
        .map(|(rx, dir)| aggregate_one(runs, rx, dir))
        .collect()
}

fn aggregate_one(runs: &[RunRef<'_>], receiver: &str, dir: FlowDir) -> ReceiverAggregate {
    let mine: Vec<&RunResult> = runs
        .iter()
        .filter(|r| r.receiver == receiver)
        .map(|r| r.result)
        .collect();
    let mut a = ReceiverAggregate {
        runs: mine.len() as u32,
        ..ReceiverAggregate::new(receiver, dir)
    };
    let mut mss = 0u32;
    for r in &mine {
        if a.nic.is_none() {
            a.nic = r.server_end.nic.clone();
            a.cpu = r.server_end.cpu.clone();
        }
        for t in r.totals.iter().filter(|t| t.dir == dir) {
            a.flows += t.flows;
            a.received_bytes += t.receiver.bytes;
            a.received_bps += t.receiver.bits_per_second.0;
            a.sent_bytes += t.sender.bytes;
            a.sent_bps += t.sender.bits_per_second.0;
            if let Some(r) = t.retransmits {
                *a.retransmits.get_or_insert(0) += r;
            }
            if let Some(u) = &t.udp {
                *a.received_datagrams.get_or_insert(0) += u.received_datagrams;
                *a.received_pps.get_or_insert(0.0) += u.received_pps;
                *a.sent_datagrams.get_or_insert(0) += u.sent_datagrams;
                *a.sent_pps.get_or_insert(0.0) += u.sent_pps;
                *a.lost.get_or_insert(0) += u.lost;
            }
        }
        for f in r.flows.iter().filter(|f| f.dir == dir) {
            if let Some(ti) = &f.tcp_info {
                mss = mss.max(ti.snd_mss);
            }
        }
        if let Some(l) = r.detail.latency() {
            *a.transactions_per_second.get_or_insert(0.0) += l.transactions_per_second;
            a.flows += l.flows.len() as u32;
            let p99 = a.rtt_worst_p99_us.get_or_insert(0.0);
            *p99 = p99.max(l.rtt.p99_us);
        }
        if let Some(c) = r.detail.connect() {
            *a.connections_per_second.get_or_insert(0.0) += c.connections_per_second;
        }
    }
    let lat: Vec<_> = mine.iter().filter_map(|r| r.detail.latency()).collect();
    let count: u64 = lat.iter().map(|l| l.rtt.count).sum();
    if count > 0 {
        let sum: f64 = lat.iter().map(|l| l.rtt.mean_us * l.rtt.count as f64).sum();
        a.rtt_mean_us = Some(sum / count as f64);
    }
    if let (Some(lost), Some(rcv)) = (a.lost, a.received_datagrams) {
        a.lost_percent = Some(if lost + rcv > 0 {
            lost as f64 * 100.0 / (lost + rcv) as f64
        } else {
            0.0
        });
    }
    a.nic_check = nic_check(&a, mss);
    a
}

/// Bytes of headers on a full TCP segment over Ethernet beyond its payload (14 Ethernet, 20
/// IPv4, 20 TCP, 12 timestamp option); IPv6 adds 20 more, which only widens the band.
const TCP_SEGMENT_OVERHEAD: f64 = 66.0 + 20.0;

fn nic_check(a: &ReceiverAggregate, mss: u32) -> Option<NicCheck> {
    let nic = a.nic.as_ref()?;
    if a.runs == 0 {
        return None;
    }
    let into = a.dir == FlowDir::Up;
    // A virtual interface that passes GSO buffers whole counts buffers: compare bytes then.
    if let Some(pps) = a.received_pps.filter(|_| !nic.packets_are_buffers) {
        let nic_pps = if into { nic.rx_pps } else { nic.tx_pps };
        if pps <= 0.0 {
            return None;
        }
        let diff = (nic_pps - pps) / pps;
        let agrees = diff.abs() <= NIC_AGREEMENT;
        let note = (!agrees).then(|| {
            if nic_pps < pps {
                "the interface counted fewer packets than the sockets received datagrams: on veth, lo and other virtual interfaces a GSO or GRO buffer counts as one packet (send with --no-gso, or turn segmentation offloads off), or the counters cover other seconds".to_string()
            } else {
                "the interface counted more packets than the test's datagrams: other traffic on that interface, or datagrams dropped after the interface (see the runs' receive drops)".to_string()
            }
        });
        return Some(NicCheck {
            measure: "packets".into(),
            clients: pps,
            nic: nic_pps,
            difference_percent: diff * 100.0,
            agrees,
            note,
        });
    }
    if a.received_bps <= 0.0 || a.transactions_per_second.is_some() {
        return None;
    }
    let goodput = a.received_bps / 8.0;
    let nic_bytes = per_sec(
        if into { nic.rx_bytes } else { nic.tx_bytes } as f64,
        nic.seconds,
    );
    // Headers per packet: a full TCP segment's, or a UDP datagram's (Ethernet, IPv6, UDP).
    let (payload, overhead) = match a.received_datagrams.filter(|&d| d > 0) {
        Some(d) => (a.received_bytes as f64 / d as f64, 14.0 + 40.0 + 8.0),
        None => (
            if mss > 0 { mss as f64 } else { 1448.0 },
            TCP_SEGMENT_OVERHEAD,
        ),
    };
    let ceiling = goodput * (payload + overhead) / payload.max(1.0);
    let low = goodput * (1.0 - NIC_AGREEMENT);
    let high = ceiling * (1.0 + NIC_AGREEMENT);
    let agrees = nic_bytes >= low && nic_bytes <= high;
    let note = (!agrees).then(|| {
        if nic_bytes < low {
            "the interface carried fewer bytes than the sockets received: the counters cover other seconds, or the test ran over another interface".to_string()
        } else {
            "the interface carried more bytes than the goodput plus headers: other traffic on that interface, retransmissions, or datagrams dropped after it".to_string()
        }
    });
    Some(NicCheck {
        measure: "bytes".into(),
        clients: goodput,
        nic: nic_bytes,
        difference_percent: (nic_bytes - goodput) * 100.0 / goodput,
        agrees,
        note,
    })
}

/// Merges the runs' interval records by interval number into one timeline.
pub fn timeline(runs: &[RunRef<'_>]) -> Vec<TimelineRow> {
    let mut rows: BTreeMap<u32, TimelineRow> = BTreeMap::new();
    for r in runs {
        for rec in &r.result.intervals {
            add_record(&mut rows, r.sender, r.receiver, rec);
        }
    }
    rows.into_values().collect()
}

/// Adds one run's interval record to the timeline rows (the live merge uses this too).
pub fn add_record(
    rows: &mut BTreeMap<u32, TimelineRow>,
    sender: &str,
    receiver: &str,
    rec: &crate::result::IntervalRecord,
) {
    let row = rows.entry(rec.index).or_insert_with(|| TimelineRow {
        index: rec.index,
        start: rec.start,
        end: rec.end,
        omitted: rec.omitted,
        runs: Vec::new(),
        receivers: Vec::new(),
    });
    let secs = rec.end - rec.start;
    let mut ticks: Vec<RunTick> = rec
        .sums
        .iter()
        .map(|s| RunTick {
            sender: sender.to_string(),
            receiver: receiver.to_string(),
            dir: s.dir,
            bps: s.receiver_bps.map_or(0.0, |b| b.0),
            pps: s.udp.as_ref().map(|u| per_sec(u.datagrams as f64, secs)),
            per_second: None,
        })
        .collect();
    // Latency and connection-rate intervals carry no byte sums: their rate is transactions or
    // connections per second.
    let per_second = rec
        .latency
        .as_ref()
        .map(|l| per_sec(l.replies as f64, secs))
        .or(rec.connect.as_ref().map(|c| c.connections_per_second));
    if let Some(ps) = per_second {
        ticks.push(RunTick {
            sender: sender.to_string(),
            receiver: receiver.to_string(),
            dir: FlowDir::Up,
            bps: 0.0,
            pps: None,
            per_second: Some(ps),
        });
    }
    for tick in ticks {
        add_to_receiver(row, &tick, rec.server_nic.as_ref(), secs);
        row.runs.push(tick);
    }
}

fn add_to_receiver(
    row: &mut TimelineRow,
    tick: &RunTick,
    nic: Option<&crate::result::NicTick>,
    secs: f64,
) {
    let idx = match row
        .receivers
        .iter()
        .position(|r| r.receiver == tick.receiver && r.dir == tick.dir)
    {
        Some(i) => i,
        None => {
            row.receivers.push(ReceiverTick {
                receiver: tick.receiver.clone(),
                dir: tick.dir,
                bps: 0.0,
                pps: None,
                per_second: None,
                runs: 0,
                nic_rx_pps: None,
                nic_rx_bps: None,
                nic_tx_pps: None,
                nic_tx_bps: None,
            });
            row.receivers.len() - 1
        }
    };
    let rt = &mut row.receivers[idx];
    rt.bps += tick.bps;
    rt.runs += 1;
    if let Some(p) = tick.pps {
        *rt.pps.get_or_insert(0.0) += p;
    }
    if let Some(p) = tick.per_second {
        *rt.per_second.get_or_insert(0.0) += p;
    }
    // Every run to one receiver sees the same interface; its first report stands for all.
    if let (Some(n), None) = (nic, rt.nic_rx_pps) {
        rt.nic_rx_pps = Some(per_sec(n.rx_packets as f64, secs));
        rt.nic_rx_bps = Some(per_sec(n.rx_bytes as f64 * 8.0, secs));
        rt.nic_tx_pps = Some(per_sec(n.tx_packets as f64, secs));
        rt.nic_tx_bps = Some(per_sec(n.tx_bytes as f64 * 8.0, secs));
    }
}

/// Spread (max - min) of a set of instants, in milliseconds; 0 for fewer than two.
pub fn spread_ms(instants: &[f64]) -> f64 {
    let max = instants.iter().copied().fold(f64::MIN, f64::max);
    let min = instants.iter().copied().fold(f64::MAX, f64::min);
    if instants.len() < 2 {
        0.0
    } else {
        (max - min) * 1000.0
    }
}
