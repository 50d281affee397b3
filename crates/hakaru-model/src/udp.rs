//! UDP tests (`hakaru udp`, `hakaru pps`): the spec both ends run and the UDP figures of a result.

use serde::{Deserialize, Serialize};

use crate::config::{Amount, Direction, FlowDir, SpecError, TcpSpec, MAX_FLOWS};
use crate::units::{BitRate, Bytes, Dur};

/// Largest UDP payload over IPv4 (65535 - 20 - 8).
pub const MAX_UDP_LENGTH: u64 = 65_507;
/// Smallest payload `hakaru udp` accepts: room for the full datagram header.
pub const MIN_UDP_LENGTH: u64 = 16;
/// Shortest payload that carries a sequence number (flow id and 48-bit sequence); the wire
/// format lives in hakaru-proto's `datagram`, which uses this constant.
pub const SEQ_HEADER: usize = 8;

/// Smallest payload `hakaru pps` accepts (netperf `-m 1`); such datagrams are not sequenced.
pub const MIN_PPS_LENGTH: u64 = 1;
/// Default `hakaru udp` payload over IPv4: fills a 1500-byte MTU (1500 - 20 - 8).
pub const DEFAULT_UDP_LENGTH_V4: u64 = 1472;
/// Default `hakaru udp` payload over IPv6: fills a 1500-byte MTU (1500 - 40 - 8).
pub const DEFAULT_UDP_LENGTH_V6: u64 = 1452;
/// Default `hakaru pps` payload: sockperf's minimum message size.
pub const DEFAULT_PPS_LENGTH: u64 = 14;
/// Most datagrams one send or receive system call moves.
pub const MAX_BATCH: u32 = 64;

/// Which command built the spec: it sets the defaults and what the output leads with.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum UdpMode {
    /// `hakaru udp`: bandwidth with loss and jitter.
    #[default]
    Bandwidth,
    /// `hakaru pps`: packet rate.
    Pps,
}

/// How fast each flow sends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum UdpRate {
    /// As fast as the sender can (`-b 0`).
    Unlimited,
    /// Payload bits per second per flow (`-b`).
    Bits(BitRate),
    /// Datagrams per second per flow (`--rate`).
    Packets(f64),
}

impl UdpRate {
    /// Nanoseconds between datagrams of `length` payload bytes, or `None` when unpaced.
    pub fn gap_ns(&self, length: u64) -> Option<f64> {
        match *self {
            UdpRate::Unlimited => None,
            UdpRate::Bits(b) if b.0 <= 0.0 => None,
            UdpRate::Bits(b) => Some(length as f64 * 8.0 * 1e9 / b.0),
            UdpRate::Packets(p) if p <= 0.0 => None,
            UdpRate::Packets(p) => Some(1e9 / p),
        }
    }
}

/// Everything a UDP test needs that both ends must agree on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpSpec {
    /// Bandwidth (`hakaru udp`) or packet-rate (`hakaru pps`) test.
    pub mode: UdpMode,
    /// Parallel flows per direction (1 to 1024), each with its own source port.
    pub flows: u32,
    /// Which way data moves.
    pub direction: Direction,
    /// Time or amount to send (bytes are rounded up to whole datagrams).
    pub amount: Amount,
    /// Warm-up seconds at the start that are not counted in the totals.
    pub omit: Dur,
    /// Seconds between interval reports; 0 turns them off.
    pub interval: Dur,
    /// UDP payload bytes per datagram.
    pub length: Bytes,
    /// Target rate of each flow.
    pub rate: UdpRate,
    /// Socket send and receive buffer size on both ends, when set.
    pub window: Option<Bytes>,
    /// IP TOS byte (IPv4) or traffic class (IPv6) on both ends, when set.
    pub tos: Option<u8>,
    /// Senders may use UDP GSO (one send call carries many datagrams; probed, with fallback).
    pub gso: bool,
    /// Receivers use UDP GRO (coalesced receives; on loopback it hides the per-packet cost).
    pub gro: bool,
    /// Most datagrams per send or receive call (1 to 64).
    pub batch: u32,
    /// CPUs the server pins its flow workers to, round robin; empty for no pinning.
    pub server_affinity: Vec<usize>,
    /// Seconds a sender may be unable to send before its flow fails.
    pub stall_timeout: Dur,
    /// The server -> client rate per flow when it differs from `rate`, which is then the
    /// client -> server rate (`--bitrate-down`, `--rate-down`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_down: Option<UdpRate>,
    /// Where the server's end of each flow listens: the server's one UDP port, or a port of
    /// its own per flow (`--port-per-flow`, and always on a Windows server).
    #[serde(default = "ServerPorts::absent")]
    pub server_ports: ServerPorts,
    /// Round-trip probes on a flow of their own beside the bulk flows (`--latency-probe`),
    /// as [`crate::TcpSpec::latency_probe`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_probe: Option<crate::probe::LatencyProbe>,
}

/// Where the server's end of each UDP flow listens. The client's end always has a port of its
/// own, so each flow is its own 5-tuple either way.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ServerPorts {
    /// Every flow on the server's UDP port; the client cannot follow a flow to another port
    /// (what a request from a client without this field means).
    SharedOnly,
    /// Every flow on the server's UDP port, unless the server needs a port per flow: a
    /// Windows server does, because Windows does not hand a datagram to the socket connected
    /// to its sender when several sockets share a port.
    #[default]
    Shared,
    /// A port of its own per flow on the server (`--port-per-flow`). Linux's early demux
    /// then finds every flow's socket directly, which it does for only one of the sockets
    /// sharing a port (docs/BENCHMARKS.md); a firewall in front of the server must let the
    /// server's ephemeral UDP ports through.
    PerFlow,
}

impl ServerPorts {
    /// The meaning of a request that does not carry the field: an older client.
    pub fn absent() -> ServerPorts {
        ServerPorts::SharedOnly
    }

    /// Whether a server on this OS gives each flow a port of its own: `Err` when it must but
    /// the client cannot follow.
    pub fn per_flow_on(self, windows_server: bool) -> Result<bool, &'static str> {
        match (self, windows_server) {
            (ServerPorts::PerFlow, _) | (ServerPorts::Shared, true) => Ok(true),
            (ServerPorts::SharedOnly, true) => Err(
                "this server runs on Windows, where UDP flows cannot share the server's port, \
                 and the client is too old to follow a flow to a port of its own: use a newer \
                 hakaru client",
            ),
            (_, false) => Ok(false),
        }
    }
}

impl Default for UdpSpec {
    fn default() -> Self {
        UdpSpec {
            mode: UdpMode::Bandwidth,
            flows: 1,
            direction: Direction::Forward,
            amount: Amount::Time(Dur::from_secs(10)),
            omit: Dur::default(),
            interval: Dur::from_secs(1),
            length: Bytes(DEFAULT_UDP_LENGTH_V4),
            rate: UdpRate::Bits(BitRate(1e6)),
            window: None,
            tos: None,
            gso: true,
            gro: false,
            batch: MAX_BATCH,
            server_affinity: Vec::new(),
            stall_timeout: Dur::from_secs(10),
            rate_down: None,
            server_ports: ServerPorts::default(),
            latency_probe: None,
        }
    }
}

impl UdpSpec {
    /// The rate per flow of the senders of direction `dir`.
    pub fn rate_for(&self, dir: crate::FlowDir) -> UdpRate {
        match dir {
            crate::FlowDir::Up => self.rate,
            crate::FlowDir::Down => self.rate_down.unwrap_or(self.rate),
        }
    }

    /// Checks every limit; used by the client on flags and by the server on requests.
    pub fn validate(&self) -> Result<(), SpecError> {
        if let Some(p) = &self.latency_probe {
            p.validate()?;
        }
        let min = match self.mode {
            UdpMode::Bandwidth => MIN_UDP_LENGTH,
            UdpMode::Pps => MIN_PPS_LENGTH,
        };
        if self.length.0 < min || self.length.0 > MAX_UDP_LENGTH {
            return Err(SpecError(format!(
                "-l/--length must be between {min} and {MAX_UDP_LENGTH} bytes for UDP, got {}",
                self.length.0
            )));
        }
        for rate in std::iter::once(self.rate).chain(self.rate_down) {
            match rate {
                UdpRate::Bits(b) if !(b.0.is_finite() && b.0 >= 0.0 && b.0 <= 1e13) => {
                    return Err(SpecError(format!(
                        "-b/--bitrate must be between 0 and 10T, got {}",
                        b.0
                    )))
                }
                UdpRate::Packets(p) if !(p.is_finite() && p > 0.0 && p <= 1e9) => {
                    return Err(SpecError(format!(
                        "--rate must be between 1 and 1000000000 datagrams per second, got {p}"
                    )))
                }
                _ => {}
            }
        }
        if self.batch == 0 || self.batch > MAX_BATCH {
            return Err(SpecError(format!(
                "--batch must be between 1 and {MAX_BATCH}, got {}",
                self.batch
            )));
        }
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return Err(SpecError(format!(
                "-P/--parallel must be between 1 and {MAX_FLOWS}, got {}",
                self.flows
            )));
        }
        // Everything the TCP spec shares with this one is checked by the same code.
        self.as_tcp_like().validate()
    }

    /// The fields UDP shares with TCP, as a TCP spec, so the shared limits and the flow plan
    /// have one implementation.
    fn as_tcp_like(&self) -> TcpSpec {
        TcpSpec {
            flows: self.flows,
            direction: self.direction,
            amount: self.amount,
            omit: self.omit,
            interval: self.interval,
            length: Bytes(1),
            window: self.window,
            tos: self.tos,
            server_affinity: self.server_affinity.clone(),
            stall_timeout: self.stall_timeout,
            ..TcpSpec::default()
        }
    }

    /// The flows this spec opens, in order: ids and directions (as for TCP).
    pub fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        self.as_tcp_like().flow_plan()
    }

    /// Datagrams in the whole -n/-k amount of one direction, or `None` for a timed test.
    pub fn total_datagrams(&self) -> Option<u64> {
        match self.amount {
            Amount::Time(_) => None,
            Amount::Bytes(b) => Some(b.0.div_ceil(self.length.0.max(1))),
            Amount::Blocks(k) => Some(k),
        }
    }

    /// Exact datagrams flow `index` (0-based within its direction) sends in a -n/-k test.
    pub fn datagrams_for_flow(&self, index: u32) -> Option<u64> {
        let total = self.total_datagrams()?;
        let n = u64::from(self.flows.max(1));
        Some(total / n + u64::from(u64::from(index) < total % n))
    }
}

/// Bytes a datagram of `payload` bytes occupies on an Ethernet wire: UDP (8) and IP (20 for
/// IPv4, 40 for IPv6) headers, Ethernet header and FCS (18), padding to the 64-byte minimum
/// frame, and the preamble and inter-frame gap (20).
pub fn ethernet_wire_bytes(payload: u64, ipv6: bool) -> u64 {
    let ip = if ipv6 { 40 } else { 20 };
    let frame = (payload + 8 + ip + 18).max(64);
    frame + 20
}

/// One flow's UDP counters for one interval, as one end saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpTick {
    /// Datagrams sent or received during the interval.
    pub datagrams: u64,
    /// Receiver: datagrams found missing (sequence gaps) during the interval.
    pub lost: u64,
    /// Receiver: datagrams that arrived after a later one.
    pub out_of_order: u64,
    /// Receiver: datagrams that arrived twice.
    pub duplicates: u64,
    /// Receiver: RFC 3550 interarrival jitter at the end of the interval, milliseconds.
    pub jitter_ms: Option<f64>,
}

impl UdpTick {
    /// Adds another flow's tick; jitter becomes the mean over flows that have one.
    pub fn sum<'a>(ticks: impl Iterator<Item = &'a UdpTick>) -> UdpTick {
        let mut out = UdpTick::default();
        let (mut jsum, mut jn) = (0.0, 0u32);
        for t in ticks {
            out.datagrams += t.datagrams;
            out.lost += t.lost;
            out.out_of_order += t.out_of_order;
            out.duplicates += t.duplicates;
            if let Some(j) = t.jitter_ms {
                jsum += j;
                jn += 1;
            }
        }
        out.jitter_ms = (jn > 0).then(|| jsum / f64::from(jn));
        out
    }
}

/// One end's UDP view of one flow over the whole test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpFlowSide {
    /// Datagrams sent or received after the warm-up.
    pub datagrams: u64,
    /// Datagrams sent or received during the warm-up.
    pub omitted_datagrams: u64,
    /// Sender: datagrams sent in all (the next sequence number). Receiver: highest sequence
    /// number seen plus one (0 when none or unsequenced).
    pub next_seq: u64,
    /// Receiver: datagrams found missing by sequence gaps after the warm-up.
    pub lost: u64,
    /// Receiver: datagrams that arrived after a later one.
    pub out_of_order: u64,
    /// Receiver: datagrams that arrived twice.
    pub duplicates: u64,
    /// Receiver: RFC 3550 interarrival jitter at the end, milliseconds.
    pub jitter_ms: Option<f64>,
    /// Receiver: datagrams on the flow's socket that were not test data (ignored).
    pub ignored: u64,
    /// Receiver: datagrams the kernel dropped at this socket for lack of receive buffer (the
    /// socket's own drop counter, read when the flow ends; SO_RXQ_OVFL reports it only with
    /// a datagram that arrives, so it misses drops after the last one).
    pub socket_drops: Option<u64>,
}

/// UDP figures of one flow or one direction, merged from both ends. The receiver's are the
/// headline; `sent_*` come from the sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpCounts {
    /// Datagrams the sender sent after the warm-up.
    pub sent_datagrams: u64,
    /// Datagrams the receiver received after the warm-up (duplicates included).
    pub received_datagrams: u64,
    /// Datagrams lost: sequence gaps seen by the receiver plus datagrams sent after the last
    /// one that arrived (known from the sender's count at the end).
    pub lost: u64,
    /// lost as a percentage of lost + received (0 when nothing was expected).
    pub lost_percent: f64,
    /// Datagrams that arrived after a later one.
    pub out_of_order: u64,
    /// Datagrams that arrived twice.
    pub duplicates: u64,
    /// RFC 3550 interarrival jitter at the end, milliseconds (mean over flows for a sum).
    pub jitter_ms: Option<f64>,
    /// Datagrams per second sent.
    pub sent_pps: f64,
    /// Datagrams per second received: the packet-rate headline.
    pub received_pps: f64,
    /// Received bits per second on an Ethernet wire (headers, minimum frame, preamble, gap).
    pub received_wire_bps: BitRate,
    /// Sent bits per second on an Ethernet wire.
    pub sent_wire_bps: BitRate,
    /// False when datagrams were too short (under 8 bytes) to carry a sequence number:
    /// they are counted, not sequenced, and loss is sent minus received.
    pub sequenced: bool,
    /// Datagrams on the test's sockets that were not test data (ignored).
    pub ignored: u64,
    /// Datagrams the kernel dropped at the receiving sockets for lack of receive buffer, read
    /// from each socket's drop counter when its flow ends. With no loss elsewhere on the path
    /// it equals `lost`; drops on the wire, in a qdisc or a firewall are in `lost` only.
    pub socket_drops: Option<u64>,
}

/// System-wide UDP counter deltas at one end over the test (/proc/net/snmp, snmp6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpKernelCounters {
    /// UDP datagrams delivered to sockets (InDatagrams).
    pub in_datagrams: u64,
    /// UDP datagrams sent (OutDatagrams).
    pub out_datagrams: u64,
    /// Receive errors, buffer overflows included (InErrors).
    pub in_errors: u64,
    /// Receive buffer overflows (RcvbufErrors), for every UDP socket of the host (of its
    /// network namespace), not only the test's. One per dropped datagram; with `--gro`, one
    /// per dropped GRO buffer, which can hold many datagrams.
    pub rcvbuf_errors: u64,
    /// Send buffer overflows (SndbufErrors).
    pub sndbuf_errors: u64,
    /// Datagrams to a port with no socket (NoPorts).
    pub no_ports: u64,
}

/// Which UDP fast paths one end used: anything that can change a figure is labelled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpPaths {
    /// Send path: `gso` (UDP_SEGMENT), `sendmmsg` or `send`.
    pub send: String,
    /// Receive path: `gro` (UDP_GRO, coalesced), `recvmmsg` or `recv`.
    pub recv: String,
    /// Most datagrams per system call.
    pub batch: u32,
    /// Receive times come from the kernel (SO_TIMESTAMPNS) rather than from a clock read after
    /// each receive call.
    pub kernel_timestamps: bool,
    /// Why a requested fast path did not run, if one did not.
    pub fallback: Option<String>,
}

/// Receive buffer a one-flow UDP receiver asks for when -w is not given: enough to ride out a
/// scheduling hiccup at a million packets per second (the kernel caps it at net.core.rmem_max).
pub const DEFAULT_UDP_RCVBUF: usize = 4 << 20;
/// All of a side's UDP receive buffers together, when -w is not given: many flows split it.
pub const UDP_RCVBUF_BUDGET: usize = 16 << 20;
/// Smallest receive buffer a flow asks for when the budget is split: a few hundred datagrams,
/// several send batches.
pub const MIN_UDP_RCVBUF: usize = 128 << 10;

/// Receive buffer each of `flows` UDP flows asks for when -w is not given. Every flow asking
/// for 4 MiB made 256 flows queue up to a gigabyte of datagrams: a receiver that fell behind
/// read cold memory and drained for half a second after the senders stopped (hakaru pps -P 256
/// on loopback, docs/BENCHMARKS.md). Splitting a fixed budget keeps the queued total near
/// the one-flow figure.
pub fn udp_rcvbuf_for(flows: u32) -> usize {
    (UDP_RCVBUF_BUDGET / flows.max(1) as usize).clamp(MIN_UDP_RCVBUF, DEFAULT_UDP_RCVBUF)
}

impl crate::kind::Kind for UdpSpec {
    fn name(&self) -> &'static str {
        if self.mode == UdpMode::Pps {
            "pps"
        } else {
            "udp"
        }
    }
    fn validate(&self) -> Result<(), SpecError> {
        UdpSpec::validate(self)
    }
    fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        UdpSpec::flow_plan(self)
    }
    fn common(&self) -> crate::kind::Common<'_> {
        crate::kind::Common {
            flows: self.flows,
            direction: self.direction,
            amount: self.amount,
            interval: self.interval,
            omit: self.omit,
            stall_timeout: self.stall_timeout,
            length: self.length,
            server_affinity: &self.server_affinity,
        }
    }
    /// The workers' send and receive batches, and the receive buffers asked for.
    fn server_memory(&self, cpus: usize) -> u64 {
        let plan = self.flow_plan();
        let paths = plan.len().max(1) as u64;
        let workers = crate::kind::workers(plan.len(), cpus);
        let batches = self
            .length
            .0
            .max(2048)
            .saturating_mul(crate::kind::UDP_BATCH * 2 * workers);
        let receivers = plan.iter().filter(|f| f.1 == FlowDir::Up).count() as u64;
        let rcvbuf = match self.window {
            Some(w) => w.0 * crate::kind::KERNEL_DOUBLES * paths,
            None => udp_rcvbuf_for(self.flows) as u64 * receivers,
        };
        batches.saturating_add(rcvbuf)
    }
    fn server_send_rate(&self) -> Option<(Option<f64>, u32)> {
        if !crate::kind::server_sends(self.direction) {
            return None;
        }
        let rate = match self.rate_for(FlowDir::Down) {
            UdpRate::Unlimited => None,
            UdpRate::Bits(b) => (b.0 > 0.0).then_some(b.0),
            UdpRate::Packets(p) => (p > 0.0).then_some(p * self.length.0 as f64 * 8.0),
        };
        Some((rate, self.flows))
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TestSpec;

    #[test]
    fn server_ports_follow_the_client_and_the_server_os() {
        // A request from a client without the field: the port is shared, and a Windows server
        // refuses rather than misdeliver.
        let mut v = serde_json::to_value(UdpSpec::default()).unwrap();
        v.as_object_mut().unwrap().remove("server_ports");
        let old: UdpSpec = serde_json::from_value(v).unwrap();
        assert_eq!(old.server_ports, ServerPorts::SharedOnly);
        assert_eq!(old.server_ports.per_flow_on(false), Ok(false));
        assert!(old
            .server_ports
            .per_flow_on(true)
            .unwrap_err()
            .contains("Windows"));
        // A current client shares the port unless the server is Windows or it asked.
        assert_eq!(UdpSpec::default().server_ports, ServerPorts::Shared);
        assert_eq!(ServerPorts::Shared.per_flow_on(false), Ok(false));
        assert_eq!(ServerPorts::Shared.per_flow_on(true), Ok(true));
        assert_eq!(ServerPorts::PerFlow.per_flow_on(false), Ok(true));
        assert_eq!(ServerPorts::PerFlow.per_flow_on(true), Ok(true));
        let v = serde_json::to_value(ServerPorts::PerFlow).unwrap();
        assert_eq!(v, "per_flow");
    }

    #[test]
    fn pacing_gap_follows_rate() {
        assert_eq!(UdpRate::Bits(BitRate(8e6)).gap_ns(1000), Some(1e6));
        assert_eq!(UdpRate::Packets(1e6).gap_ns(14), Some(1000.0));
        assert_eq!(UdpRate::Bits(BitRate(0.0)).gap_ns(1000), None);
        assert_eq!(UdpRate::Unlimited.gap_ns(1000), None);
    }

    #[test]
    fn lengths_depend_on_mode() {
        let mut s = UdpSpec {
            length: Bytes(1),
            ..UdpSpec::default()
        };
        assert!(s.validate().unwrap_err().0.contains("-l/--length"));
        s.mode = UdpMode::Pps;
        s.validate().unwrap();
        s.length = Bytes(65_508);
        assert!(s.validate().unwrap_err().0.contains("65507"));
        s.length = Bytes(14);
        s.batch = 65;
        assert!(s.validate().unwrap_err().0.contains("--batch"));
        s.batch = 64;
        s.rate = UdpRate::Packets(0.0);
        assert!(s.validate().unwrap_err().0.contains("--rate"));
        s.rate = UdpRate::Unlimited;
        s.flows = 0;
        assert!(s.validate().unwrap_err().0.contains("-P/--parallel"));
    }

    #[test]
    fn datagram_quotas_split_exactly() {
        let s = UdpSpec {
            flows: 3,
            length: Bytes(100),
            amount: Amount::Bytes(Bytes(1001)),
            ..UdpSpec::default()
        };
        assert_eq!(s.total_datagrams(), Some(11));
        let per: Vec<u64> = (0..3).map(|i| s.datagrams_for_flow(i).unwrap()).collect();
        assert_eq!(per, vec![4, 4, 3]);
    }

    #[test]
    fn wire_bytes_pad_short_frames() {
        // 14-byte payload: 14 + 8 + 20 + 18 = 60 -> padded to 64, plus 20.
        assert_eq!(ethernet_wire_bytes(14, false), 84);
        assert_eq!(ethernet_wire_bytes(1472, false), 1538);
        assert_eq!(ethernet_wire_bytes(1452, true), 1538);
    }

    #[test]
    fn test_spec_is_tagged_and_round_trips() {
        let t = TestSpec::Udp(UdpSpec {
            mode: UdpMode::Pps,
            rate: UdpRate::Packets(1000.0),
            ..UdpSpec::default()
        });
        let j = serde_json::to_value(&t).unwrap();
        assert_eq!(j["kind"], "udp");
        assert_eq!(j["mode"], "pps");
        assert_eq!(serde_json::from_value::<TestSpec>(j).unwrap(), t);
        assert_eq!(t.name(), "pps");
    }

    #[test]
    fn tick_sum_averages_jitter() {
        let a = UdpTick {
            datagrams: 10,
            lost: 1,
            jitter_ms: Some(1.0),
            ..UdpTick::default()
        };
        let b = UdpTick {
            datagrams: 5,
            jitter_ms: Some(3.0),
            ..UdpTick::default()
        };
        let s = UdpTick::sum([a, b].iter());
        assert_eq!(s.datagrams, 15);
        assert_eq!(s.lost, 1);
        assert_eq!(s.jitter_ms, Some(2.0));
    }
}
