//! Merging both ends' samples and reports into the model's result types, and the shared part every
//! kind's result starts from (`RunResult::begin`).

use std::collections::BTreeMap;

use crate::{
    rfc3339_utc, BitRate, Counted, DirectionInterval, DirectionTotal, EndResult, FlowDir,
    FlowInterval, FlowResult, FlowSide, IntervalRecord, IntervalSample, Role, RunResult,
    SideReport, TestSpec, UdpCounts, UdpTick,
};

/// Merges this end's and the server's sample for one interval. The client's own timestamps
/// label the interval when it has one.
pub fn merge_interval(
    local: Option<&IntervalSample>,
    remote: Option<&IntervalSample>,
    dirs: &BTreeMap<u32, FlowDir>,
) -> IntervalRecord {
    let base = local.or(remote);
    let (index, start, end, omitted) = base.map_or((0, 0.0, 0.0, false), |s| {
        (s.index, s.start, s.end, s.omitted)
    });
    let secs = end - start;
    let rate = |b: Option<u64>| b.map(|b| BitRate::from_bytes(b, secs));
    let find = |s: Option<&IntervalSample>, id: u32| {
        s.and_then(|s| s.flows.iter().find(|f| f.id == id).cloned())
    };
    let mut flows = Vec::with_capacity(dirs.len());
    for (&id, &dir) in dirs {
        // Up flows: the client sends, the server receives; down flows the reverse.
        let (snd, rcv) = match dir {
            FlowDir::Up => (find(local, id), find(remote, id)),
            FlowDir::Down => (find(remote, id), find(local, id)),
        };
        let sender_bytes = snd.as_ref().map(|f| f.bytes);
        let receiver_bytes = rcv.as_ref().map(|f| f.bytes);
        flows.push(FlowInterval {
            id,
            dir,
            receiver_bytes,
            receiver_bps: rate(receiver_bytes),
            sender_bytes,
            sender_bps: rate(sender_bytes),
            udp: rcv.as_ref().and_then(|f| f.udp),
            sender_datagrams: snd.as_ref().and_then(|f| f.udp).map(|u| u.datagrams),
            tcp: snd.and_then(|f| f.tcp),
        });
    }
    let mut sums = Vec::new();
    for dir in [FlowDir::Up, FlowDir::Down] {
        let of_dir: Vec<&FlowInterval> = flows.iter().filter(|f| f.dir == dir).collect();
        if of_dir.is_empty() {
            continue;
        }
        let add = |get: fn(&FlowInterval) -> Option<u64>| -> Option<u64> {
            of_dir.iter().map(|f| get(f)).sum()
        };
        let receiver_bytes = add(|f| f.receiver_bytes);
        let sender_bytes = add(|f| f.sender_bytes);
        let retransmits = of_dir
            .iter()
            .map(|f| f.tcp.and_then(|t| t.retransmits))
            .sum::<Option<u64>>();
        let udp = of_dir
            .iter()
            .any(|f| f.udp.is_some())
            .then(|| UdpTick::sum(of_dir.iter().filter_map(|f| f.udp.as_ref())));
        sums.push(DirectionInterval {
            dir,
            receiver_bytes,
            receiver_bps: rate(receiver_bytes),
            sender_bytes,
            sender_bps: rate(sender_bytes),
            retransmits,
            udp,
            sender_datagrams: add(|f| f.sender_datagrams),
        });
    }
    IntervalRecord {
        index,
        start,
        end,
        omitted,
        flows,
        sums,
        latency: None,
        connect: None,
        client_nic: local.and_then(|s| s.nic),
        server_nic: remote.and_then(|s| s.nic),
        probe: local.or(remote).and_then(|s| s.probe.clone()),
    }
}

/// Everything [`assemble`] needs.
pub struct Inputs {
    /// The test.
    pub spec: TestSpec,
    /// The test ran over IPv6 (for wire-rate estimates).
    pub ipv6: bool,
    /// Server address.
    pub server: String,
    /// Whether the server was in-process.
    pub embedded: bool,
    /// Local control address.
    pub local_address: String,
    /// Remote control address.
    pub remote_address: String,
    /// Wall-clock start.
    pub started_unix: f64,
    /// Merged intervals.
    pub intervals: Vec<IntervalRecord>,
    /// This end's report.
    pub local: SideReport,
    /// The server's report.
    pub remote: SideReport,
    /// Stopped early.
    pub interrupted: bool,
    /// Choices that affect the figures.
    pub notes: Vec<String>,
}

fn counted(side: Option<&FlowSide>) -> Counted {
    side.map_or_else(Counted::default, |f| Counted {
        omitted_bytes: f.omitted_bytes,
        late_bytes: f.late_bytes,
        late_flows: u32::from(f.late_bytes > 0),
        late_seconds: f.late_seconds,
        ..Counted::new(f.bytes, f.seconds, f.calls)
    })
}

/// One end's report as the result's view of that end, with its bytes per CPU-second.
pub fn end_result(r: &SideReport) -> EndResult {
    let moved: u64 = r.flows.iter().map(|f| f.bytes).sum();
    EndResult {
        bytes_per_cpu_second: r
            .cpu
            .as_ref()
            .filter(|c| c.busy_s > 0.0 && moved > 0)
            .map(|c| moved as f64 / c.busy_s),
        cpu: r.cpu.clone(),
        nic: r.nic.clone(),
        env: r.env.clone(),
        send_mode: r.send_mode.clone(),
        recv_mode: r.recv_mode.clone(),
        udp_paths: r.udp_paths.clone(),
        udp_kernel: r.udp_kernel,
        stray_datagrams: r.stray_datagrams,
        window_start_unix: r.window_start_unix,
        window_end_unix: r.window_end_unix,
        began_unix: r.began_unix,
    }
}

fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// One UDP flow's figures from its sender's and receiver's reports.
fn udp_counts(
    snd: Option<&FlowSide>,
    rcv: Option<&FlowSide>,
    length: u64,
    ipv6: bool,
) -> UdpCounts {
    let su = snd.and_then(|f| f.udp).unwrap_or_default();
    let ru = rcv.and_then(|f| f.udp).unwrap_or_default();
    let sequenced = length >= crate::SEQ_HEADER as u64;
    let lost = if sequenced {
        // Gaps the receiver saw, plus whatever was sent after the last datagram that arrived.
        ru.lost + su.next_seq.saturating_sub(ru.next_seq)
    } else {
        (su.datagrams + su.omitted_datagrams).saturating_sub(ru.datagrams + ru.omitted_datagrams)
    };
    let sent_pps = rate(su.datagrams, snd.map_or(0.0, |f| f.seconds));
    let received_pps = rate(ru.datagrams, rcv.map_or(0.0, |f| f.seconds));
    let wire = crate::ethernet_wire_bytes(length, ipv6) as f64 * 8.0;
    finish_udp(UdpCounts {
        sent_datagrams: su.datagrams,
        received_datagrams: ru.datagrams,
        lost,
        out_of_order: ru.out_of_order,
        duplicates: ru.duplicates,
        jitter_ms: ru.jitter_ms,
        sent_pps,
        received_pps,
        received_wire_bps: BitRate(received_pps * wire),
        sent_wire_bps: BitRate(sent_pps * wire),
        sequenced,
        ignored: ru.ignored,
        socket_drops: ru.socket_drops,
        lost_percent: 0.0,
    })
}

/// Derives the loss percentage: lost over what should have arrived once.
fn finish_udp(mut u: UdpCounts) -> UdpCounts {
    let expected = u.lost + u.received_datagrams.saturating_sub(u.duplicates);
    u.lost_percent = if expected > 0 {
        u.lost as f64 * 100.0 / expected as f64
    } else {
        0.0
    };
    u
}

/// The UDP figures of several flows added up (jitter: the mean over flows).
fn sum_udp<'a>(of: impl Iterator<Item = &'a UdpCounts>) -> UdpCounts {
    let mut t = UdpCounts {
        sequenced: true,
        ..UdpCounts::default()
    };
    let (mut jsum, mut jn) = (0.0, 0u32);
    for u in of {
        t.sent_datagrams += u.sent_datagrams;
        t.received_datagrams += u.received_datagrams;
        t.lost += u.lost;
        t.out_of_order += u.out_of_order;
        t.duplicates += u.duplicates;
        t.sent_pps += u.sent_pps;
        t.received_pps += u.received_pps;
        t.received_wire_bps = BitRate(t.received_wire_bps.0 + u.received_wire_bps.0);
        t.sent_wire_bps = BitRate(t.sent_wire_bps.0 + u.sent_wire_bps.0);
        t.sequenced &= u.sequenced;
        t.ignored += u.ignored;
        if let Some(d) = u.socket_drops {
            t.socket_drops = Some(t.socket_drops.unwrap_or(0) + d);
        }
        if let Some(j) = u.jitter_ms {
            jsum += j;
            jn += 1;
        }
    }
    t.jitter_ms = (jn > 0).then(|| jsum / f64::from(jn));
    finish_udp(t)
}

/// Whether an end's interface counted fewer packets than its sockets moved (datagrams, or
/// full TCP segments): then it counted GSO buffers. `sends` is the direction this end sends.
fn counts_buffers(n: &crate::NicUsage, flows: &[FlowResult], sends: FlowDir) -> bool {
    let units = |f: &FlowResult, sender: bool| -> f64 {
        let c = if sender { &f.sender } else { &f.receiver };
        match &f.udp {
            Some(u) if sender => u.sent_datagrams as f64,
            Some(u) => u.received_datagrams as f64,
            None => {
                let mss = f.tcp_info.as_ref().map_or(1448, |t| t.snd_mss.max(536));
                (c.bytes + c.omitted_bytes + c.late_bytes) as f64 / f64::from(mss)
            }
        }
    };
    let tx: f64 = flows
        .iter()
        .filter(|f| f.dir == sends)
        .map(|f| units(f, true))
        .sum();
    let rx: f64 = flows
        .iter()
        .filter(|f| f.dir != sends)
        .map(|f| units(f, false))
        .sum();
    // Well below what the sockets moved (a real count can only be higher: headers, control
    // packets, retransmissions), and enough packets for the comparison to mean something.
    (tx > 1000.0 && (n.tx_packets as f64) < tx * 0.9)
        || (rx > 1000.0 && (n.rx_packets as f64) < rx * 0.9)
}

/// A paced UDP direction's asked rate against what its senders sent.
fn rate_target(u: &crate::UdpSpec, t: &DirectionTotal) -> Option<crate::RateTarget> {
    let flows = f64::from(t.flows);
    let (asked, achieved, unit) = match u.rate_for(t.dir) {
        crate::UdpRate::Bits(b) if b.0 > 0.0 => (b.0 * flows, t.sender.bits_per_second.0, "bit/s"),
        crate::UdpRate::Packets(p) if p > 0.0 => (
            p * flows,
            t.udp.as_ref().map_or(0.0, |x| x.sent_pps),
            "datagrams/s",
        ),
        _ => return None,
    };
    if t.sender.seconds <= 0.0 {
        return None;
    }
    let ratio = achieved / asked;
    Some(crate::RateTarget {
        asked,
        achieved,
        unit: unit.into(),
        ratio,
        missed: ratio < crate::RATE_TARGET_MET,
    })
}

/// Builds the run's result from both ends' reports.
pub fn assemble(i: Inputs) -> RunResult {
    let flows = flow_results(&i);
    let totals = direction_totals(&i.spec, &flows);
    let mut notes = i.notes;
    let mut client = end_result(&i.local);
    let mut server_end = end_result(&i.remote);
    if let Some(note) = mark_buffered_nics(&mut client, &mut server_end, &flows) {
        notes.push(note);
    }
    RunResult {
        embedded_server: i.embedded,
        local_address: i.local_address,
        remote_address: i.remote_address,
        intervals: i.intervals,
        flows,
        totals,
        client,
        server_end,
        interrupted: i.interrupted,
        notes,
        ..RunResult::begin(i.spec, i.started_unix, i.server)
    }
}

/// Each flow of the plan with its sender's and receiver's counts, each from the end that
/// played that role.
fn flow_results(i: &Inputs) -> Vec<FlowResult> {
    let find = |r: &SideReport, id: u32, role: Role| {
        r.flows
            .iter()
            .find(|f| f.id == id && f.role == role)
            .cloned()
    };
    // Latency tests count round trips, not bytes per flow: no byte flows or totals.
    let byte_flows = if matches!(i.spec, TestSpec::Latency(_)) {
        Vec::new()
    } else {
        i.spec.flow_plan()
    };
    let mut flows = Vec::new();
    for (id, dir) in byte_flows {
        let (snd_end, rcv_end) = match dir {
            FlowDir::Up => (&i.local, &i.remote),
            FlowDir::Down => (&i.remote, &i.local),
        };
        let snd = find(snd_end, id, Role::Sender);
        let rcv = find(rcv_end, id, Role::Receiver);
        flows.push(FlowResult {
            id,
            dir,
            receiver: counted(rcv.as_ref()),
            sender: counted(snd.as_ref()),
            udp: i
                .spec
                .udp()
                .map(|u| udp_counts(snd.as_ref(), rcv.as_ref(), u.length.0, i.ipv6)),
            mptcp: mptcp_of(&i.local, &i.remote, id),
            tcp_info: snd.and_then(|f| f.tcp_info),
        });
    }
    flows
}

/// The flows of each direction summed: bytes and calls added, the longest time, retransmits
/// and UDP counts added, and a UDP test's rate target.
fn direction_totals(spec: &TestSpec, flows: &[FlowResult]) -> Vec<DirectionTotal> {
    let mut totals = Vec::new();
    for dir in [FlowDir::Up, FlowDir::Down] {
        let of: Vec<&FlowResult> = flows.iter().filter(|f| f.dir == dir).collect();
        if of.is_empty() {
            continue;
        }
        let sum = |get: fn(&FlowResult) -> Counted| {
            let b = of.iter().map(|f| get(f).bytes).sum();
            let c = of.iter().map(|f| get(f).calls).sum();
            let s = of.iter().map(|f| get(f).seconds).fold(0.0, f64::max);
            Counted {
                omitted_bytes: of.iter().map(|f| get(f).omitted_bytes).sum(),
                late_bytes: of.iter().map(|f| get(f).late_bytes).sum(),
                late_flows: of.iter().map(|f| get(f).late_flows).sum(),
                late_seconds: of.iter().map(|f| get(f).late_seconds).fold(0.0, f64::max),
                ..Counted::new(b, s, c)
            }
        };
        let mut total = DirectionTotal {
            dir,
            flows: of.len() as u32,
            receiver: sum(|f| f.receiver),
            sender: sum(|f| f.sender),
            retransmits: of
                .iter()
                .filter_map(|f| f.tcp_info.as_ref().and_then(|t| t.retransmits))
                .fold(None, |acc, r| Some(acc.unwrap_or(0) + r)),
            udp: spec
                .udp()
                .map(|_| sum_udp(of.iter().filter_map(|f| f.udp.as_ref()))),
            rate_target: None,
        };
        total.rate_target = spec.udp().and_then(|u| rate_target(u, &total));
        totals.push(total);
    }
    totals
}

/// Marks each end's interface whose packet counts are GSO buffers (a virtual interface that
/// passes them whole), and the note that says so, if any does.
fn mark_buffered_nics(
    client: &mut EndResult,
    server_end: &mut EndResult,
    flows: &[FlowResult],
) -> Option<String> {
    let mut buffered = Vec::new();
    for (e, sends) in [(client, FlowDir::Up), (server_end, FlowDir::Down)] {
        if let Some(n) = e.nic.as_mut() {
            n.packets_are_buffers = n.virtual_interface && counts_buffers(n, flows, sends);
            if n.packets_are_buffers && !buffered.contains(&n.interface) {
                buffered.push(n.interface.clone());
            }
        }
    }
    if buffered.is_empty() {
        return None;
    }
    Some(format!(
        "{} virtual (no device behind it) and pass{} GSO buffers whole, so {} packet counts are buffers, not wire packets (packets_are_buffers); the sockets' datagram counts are the packet figure, and on a real NIC the buffers are split before the wire",
        if buffered.len() == 1 { format!("{} is", buffered[0]) } else { format!("{} are", buffered.join(" and ")) },
        if buffered.len() == 1 { "es" } else { "" },
        if buffered.len() == 1 { "its" } else { "their" },
    ))
}

impl EndResult {
    /// An end that reported nothing (a stock peer, or a kind that counts no CPU): no figures,
    /// plain copies.
    pub fn unreported() -> EndResult {
        EndResult {
            cpu: None,
            nic: None,
            env: Default::default(),
            bytes_per_cpu_second: None,
            send_mode: "copy".into(),
            recv_mode: "copy".into(),
            udp_paths: None,
            udp_kernel: None,
            stray_datagrams: None,
            window_start_unix: None,
            window_end_unix: None,
            began_unix: None,
        }
    }
}

impl RunResult {
    /// The shared part of a result of `spec`, started at `started_unix` (Unix seconds)
    /// against `server`, with no figures: each kind sets its own on it
    /// (`RunResult { detail: KindDetail::Rpm(..), ..RunResult::begin(..) }`).
    pub fn begin(spec: TestSpec, started_unix: f64, server: String) -> RunResult {
        RunResult {
            schema_version: crate::SCHEMA_VERSION,
            tool: "hakaru".into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            test: spec.name().into(),
            started_at: rfc3339_utc(started_unix),
            started_at_unix: started_unix,
            server,
            embedded_server: false,
            local_address: String::new(),
            remote_address: String::new(),
            spec,
            intervals: Vec::new(),
            flows: Vec::new(),
            totals: Vec::new(),
            client: EndResult::unreported(),
            server_end: EndResult::unreported(),
            interrupted: false,
            notes: Vec::new(),
            detail: crate::KindDetail::default(),
            server_clock_offset: None,
            server_on_this_host: false,
        }
    }

    /// Whether the result carries no figure at all (no intervals, totals or any kind's
    /// result): a report or a comparison has nothing to read. Every field is named, so a new
    /// kind's result field must be placed here to compile.
    pub fn has_no_figures(&self) -> bool {
        let RunResult {
            schema_version: _,
            tool: _,
            tool_version: _,
            test: _,
            started_at: _,
            started_at_unix: _,
            server: _,
            embedded_server: _,
            local_address: _,
            remote_address: _,
            spec: _,
            intervals,
            flows: _,
            totals,
            client: _,
            server_end: _,
            interrupted: _,
            notes: _,
            detail,
            server_clock_offset: _,
            server_on_this_host: _,
        } = self;
        intervals.is_empty() && totals.is_empty() && !detail.has_figures()
    }
}

/// A flow's MPTCP state: the local end's (the client's in a client's result), else the other
/// end's.
fn mptcp_of(local: &SideReport, remote: &SideReport, id: u32) -> Option<crate::MptcpFlow> {
    [local, remote]
        .iter()
        .find_map(|end| end.flows.iter().find(|f| f.id == id).and_then(|f| f.mptcp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FlowTick;

    fn sample(index: u32, flows: &[(u32, u64)]) -> IntervalSample {
        IntervalSample {
            index,
            start: index as f64,
            end: index as f64 + 1.0,
            omitted: false,
            flows: flows
                .iter()
                .map(|&(id, bytes)| FlowTick {
                    id,
                    bytes,
                    calls: 1,
                    tcp: None,
                    udp: None,
                })
                .collect(),
            nic: None,
            probe: None,
        }
    }

    #[test]
    fn merge_takes_receiver_from_the_receiving_end() {
        let dirs: BTreeMap<u32, FlowDir> =
            [(0, FlowDir::Up), (1, FlowDir::Down)].into_iter().collect();
        let local = sample(3, &[(0, 100), (1, 7)]);
        let remote = sample(3, &[(0, 90), (1, 8)]);
        let r = merge_interval(Some(&local), Some(&remote), &dirs);
        assert_eq!(r.index, 3);
        let up = &r.flows[0];
        assert_eq!((up.sender_bytes, up.receiver_bytes), (Some(100), Some(90)));
        let down = &r.flows[1];
        assert_eq!((down.sender_bytes, down.receiver_bytes), (Some(8), Some(7)));
        assert_eq!(r.sums.len(), 2);
        assert_eq!(r.sums[0].receiver_bytes, Some(90));
        assert_eq!(r.sums[0].receiver_bps, Some(BitRate(720.0)));
    }

    #[test]
    fn merge_with_one_end_missing_leaves_gaps() {
        let dirs: BTreeMap<u32, FlowDir> = [(0, FlowDir::Up)].into_iter().collect();
        let local = sample(9, &[(0, 100)]);
        let r = merge_interval(Some(&local), None, &dirs);
        assert_eq!(r.flows[0].receiver_bytes, None);
        assert_eq!(r.sums[0].receiver_bytes, None);
        assert_eq!(r.sums[0].sender_bytes, Some(100));
    }
}
