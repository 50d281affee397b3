//! Samples and results: what each end measures and the one [`RunResult`] every renderer reads.

use serde::{Deserialize, Serialize};

use crate::config::FlowDir;
use crate::connect::{ConnectInterval, ConnectServerCounts};
use crate::spec::TestSpec;
use crate::udp::{UdpCounts, UdpFlowSide, UdpKernelCounters, UdpPaths, UdpTick};
use crate::units::BitRate;

/// Version of the JSON result format; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Which end of a test a report comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The end that ran `hakaru tcp`.
    Client,
    /// The end that ran `hakaru server`.
    Server,
}

/// Whether an end sends or receives on a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Writes data into the flow.
    Sender,
    /// Reads data from the flow.
    Receiver,
}

/// A snapshot of one socket's TCP state: Linux `struct tcp_info`, Windows SIO_TCP_INFO or macOS
/// TCP_CONNECTION_INFO (times in microseconds). RTT, cwnd, MSS and bytes retransmitted come
/// from every OS; the optional figures are absent where the OS does not give them
/// (docs/platforms.md lists which).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpInfo {
    /// Congestion control algorithm in use on the socket (TCP_CONGESTION).
    pub congestion: Option<String>,
    /// Segments retransmitted over the connection's life (tcpi_total_retrans); absent on
    /// Windows, which counts retransmission episodes, not segments.
    pub retransmits: Option<u64>,
    /// Segments currently considered lost (tcpi_lost); Linux only.
    pub lost: Option<u32>,
    /// Reordering events seen (tcpi_reord_seen); Linux only.
    pub reord_seen: Option<u32>,
    /// Smoothed round-trip time, microseconds (tcpi_rtt).
    pub rtt_us: u32,
    /// Round-trip time variance, microseconds (tcpi_rttvar); absent on Windows.
    pub rttvar_us: Option<u32>,
    /// Minimum round-trip time seen, microseconds (tcpi_min_rtt); absent on macOS.
    pub min_rtt_us: Option<u32>,
    /// Congestion window, in segments (tcpi_snd_cwnd).
    pub snd_cwnd: u32,
    /// Sender maximum segment size, bytes (tcpi_snd_mss).
    pub snd_mss: u32,
    /// Path MTU, bytes (tcpi_pmtu); Linux only.
    pub pmtu: Option<u32>,
    /// Current pacing rate, bits per second (tcpi_pacing_rate x 8); Linux only, and absent
    /// when the socket is not paced.
    pub pacing_rate_bps: Option<f64>,
    /// Most recent delivery rate estimate, bits per second (tcpi_delivery_rate x 8); Linux
    /// only.
    pub delivery_rate_bps: Option<f64>,
    /// Time the connection was busy sending, microseconds (tcpi_busy_time); absent on macOS.
    pub busy_time_us: Option<u64>,
    /// Time sending was limited by the receiver's window, microseconds (tcpi_rwnd_limited);
    /// absent on macOS.
    pub rwnd_limited_us: Option<u64>,
    /// Time sending was limited by the send buffer, microseconds (tcpi_sndbuf_limited);
    /// absent on macOS.
    pub sndbuf_limited_us: Option<u64>,
    /// Bytes acknowledged by the peer (tcpi_bytes_acked).
    pub bytes_acked: u64,
    /// Bytes retransmitted (tcpi_bytes_retrans).
    pub bytes_retrans: u64,
}

/// CPU use of the whole machine at one end over the counted part of a test, from /proc/stat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuUsage {
    /// Wall-clock seconds the deltas cover.
    pub seconds: f64,
    /// Number of CPUs the percentages are shared over.
    pub cpus: u32,
    /// CPU-seconds in user mode (user + nice).
    pub user_s: f64,
    /// CPU-seconds in kernel mode (system).
    pub system_s: f64,
    /// CPU-seconds in hard interrupts (irq); absent where the OS does not split them out
    /// (Windows, macOS: they are inside system time there).
    pub irq_s: Option<f64>,
    /// CPU-seconds in soft interrupts, where most network receive work runs (softirq);
    /// absent where the OS does not split them out.
    pub softirq_s: Option<f64>,
    /// CPU-seconds stolen by the hypervisor (steal); absent where the OS does not tell.
    pub steal_s: Option<f64>,
    /// Busy CPU-seconds: user + system + irq + softirq + steal (the parts the OS gives).
    pub busy_s: f64,
    /// user_s as a percentage of all CPUs' time.
    pub user_pct: f64,
    /// system_s as a percentage of all CPUs' time.
    pub system_pct: f64,
    /// softirq_s as a percentage of all CPUs' time; absent with softirq_s.
    pub softirq_pct: Option<f64>,
    /// busy_s as a percentage of all CPUs' time.
    pub busy_pct: f64,
}

/// Interface counter deltas at one end over the counted part of a test (what `sar -n DEV` shows).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicUsage {
    /// Interface name (loopback reports `lo`).
    pub interface: String,
    /// Seconds the deltas cover.
    pub seconds: f64,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Received packets dropped.
    pub rx_drops: u64,
    /// Sent packets dropped.
    pub tx_drops: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Received packets per second (sar rxpck/s).
    pub rx_pps: f64,
    /// Sent packets per second (sar txpck/s).
    pub tx_pps: f64,
    /// Received kilobytes (1024 bytes, as sysstat counts them) per second (sar rxkB/s).
    pub rx_kib_per_s: f64,
    /// Sent kilobytes (1024 bytes, as sysstat counts them) per second (sar txkB/s).
    pub tx_kib_per_s: f64,
    /// Receive drops per second.
    pub rx_drops_ps: f64,
    /// Transmit drops per second.
    pub tx_drops_ps: f64,
    /// Receive errors per second (sar -n EDEV rxerr/s).
    // Defaulted so a report from a peer built before this field existed still decodes.
    #[serde(default)]
    pub rx_errors_ps: f64,
    /// Transmit errors per second (sar -n EDEV txerr/s).
    #[serde(default)]
    pub tx_errors_ps: f64,
    /// The interface has no device behind it (lo, veth, bridge, tun): the kernel can count a
    /// GSO or GRO buffer on it as one packet.
    #[serde(default)]
    pub virtual_interface: bool,
    /// The packet counts are GSO buffers, not wire packets: the interface is virtual and it
    /// counted well under (below 90 % of) the datagrams or full segments the test's sockets
    /// moved through it. The sockets' datagram counts are then the packet figure; bytes still
    /// count every byte. Never set for a real NIC, which counts wire packets.
    #[serde(default)]
    pub packets_are_buffers: bool,
}

/// Facts about one end's machine and network stack.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Environment {
    /// hakaru version running at this end.
    pub software: String,
    /// Host name.
    pub hostname: String,
    /// Operating system family (`linux`, `macos`, `windows`, ...).
    pub os: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Number of online CPUs.
    pub cpus: u32,
    /// The system's default TCP congestion control.
    pub default_congestion: Option<String>,
    /// Interface the test's traffic used at this end.
    pub interface: Option<String>,
    /// Root queueing discipline of that interface (`noqueue`, `pfifo_fast`, `tbf`, ...).
    pub qdisc: Option<String>,
    /// MTU of that interface, bytes.
    pub mtu: Option<u32>,
    /// net.core.rmem_max, bytes.
    pub rmem_max: Option<u64>,
    /// net.core.wmem_max, bytes.
    pub wmem_max: Option<u64>,
    /// net.ipv4.tcp_rmem (min default max), bytes.
    pub tcp_rmem: Option<String>,
    /// net.ipv4.tcp_wmem (min default max), bytes.
    pub tcp_wmem: Option<String>,
}

/// Per-flow per-interval TCP state of a sending socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpTick {
    /// Retransmitted segments during the interval; absent where the OS does not count them.
    pub retransmits: Option<u64>,
    /// Congestion window at the end of the interval, segments.
    pub snd_cwnd: u32,
    /// Smoothed RTT at the end of the interval, microseconds.
    pub rtt_us: u32,
}

/// One flow's counters for one interval, as seen by one end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowTick {
    /// Flow id.
    pub id: u32,
    /// Bytes moved during the interval.
    pub bytes: u64,
    /// Write or read calls during the interval.
    pub calls: u64,
    /// TCP state, for flows this end sends on.
    pub tcp: Option<TcpTick>,
    /// UDP counters, for UDP flows.
    pub udp: Option<UdpTick>,
}

/// The test interface's counters over one interval at one end (what `sar -n DEV 1` shows for
/// that second). On veth and lo a GSO or GRO buffer counts as one packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicTick {
    /// Packets received during the interval.
    pub rx_packets: u64,
    /// Packets sent during the interval.
    pub tx_packets: u64,
    /// Bytes received during the interval (as the interface counts them: L2 frames without
    /// the FCS).
    pub rx_bytes: u64,
    /// Bytes sent during the interval.
    pub tx_bytes: u64,
}

/// One end's interval sample: counters of every flow over [start, end) seconds of that end's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IntervalSample {
    /// Interval number, from 0.
    pub index: u32,
    /// Start, seconds since the test started.
    pub start: f64,
    /// End, seconds since the test started.
    pub end: f64,
    /// True inside the omitted warm-up.
    pub omitted: bool,
    /// Per-flow counters.
    pub flows: Vec<FlowTick>,
    /// This end's interface counters over the interval (bulk tests, where the OS has them).
    // Defaulted so a sample from a peer built before this field existed still decodes.
    #[serde(default)]
    pub nic: Option<NicTick>,
    /// The latency probes' round trips over the interval (client samples of a bulk test with
    /// `--latency-probe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<Box<crate::latency::LatencyInterval>>,
}

/// One end's view of one flow over the whole counted test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowSide {
    /// Flow id.
    pub id: u32,
    /// Direction the flow carries data.
    pub dir: FlowDir,
    /// This end's role on the flow.
    pub role: Role,
    /// Bytes moved after the warm-up.
    pub bytes: u64,
    /// Bytes moved during the omitted warm-up.
    pub omitted_bytes: u64,
    /// Bytes that arrived after the measured window of a timed TCP test, not in `bytes`
    /// (receivers only: the flow was still draining after the senders stopped). Bytes read
    /// after the window that reached the host inside it (by their kernel arrival stamps) are
    /// in `bytes`, not here.
    // Defaulted so a report from a peer built before this field existed still decodes.
    #[serde(default)]
    pub late_bytes: u64,
    /// Seconds after the end of the window that the flow's last late byte arrived.
    #[serde(default)]
    pub late_seconds: f64,
    /// Write or read calls after the warm-up.
    pub calls: u64,
    /// Seconds the counted bytes cover: the measured window for receivers of timed TCP
    /// tests, otherwise from the end of the warm-up to this end's last byte on any flow.
    pub seconds: f64,
    /// TCP_INFO of the socket at the end, for flows this end sends on.
    pub tcp_info: Option<TcpInfo>,
    /// UDP counters, for UDP flows.
    pub udp: Option<UdpFlowSide>,
    /// What went wrong on the flow, if anything.
    pub error: Option<String>,
    /// How this end's socket ran, for TCP tests that asked for MPTCP (`--mptcp`).
    // Defaulted so a report from a peer built before this field existed still decodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpFlow>,
}

/// What became of a flow that asked for Multipath TCP, as the kernel tells at one end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MptcpFlow {
    /// The connection ran MPTCP; false: it fell back to plain TCP (the other end or the path
    /// did not take part).
    pub active: bool,
    /// Subflows (TCP connections) under the MPTCP connection at the end, the first included;
    /// 1 after a fallback.
    pub subflows: u32,
}

/// One end's final report of a test, exchanged over the control connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SideReport {
    /// Which end this is.
    pub end: End,
    /// Per-flow results.
    pub flows: Vec<FlowSide>,
    /// Machine CPU use over the counted part of the test, where the OS reports it.
    pub cpu: Option<CpuUsage>,
    /// Interface counters over the counted part of the test, where the OS reports them.
    pub nic: Option<NicUsage>,
    /// Machine and stack facts.
    pub env: Environment,
    /// How this end sent: `copy` (write) or `sendfile` (-Z).
    pub send_mode: String,
    /// How this end received: `copy` (read) or `discard` (MSG_TRUNC, --discard).
    pub recv_mode: String,
    /// UDP fast paths this end used, for UDP tests.
    pub udp_paths: Option<UdpPaths>,
    /// System-wide UDP counter deltas over the test, for UDP tests where the OS has them.
    pub udp_kernel: Option<UdpKernelCounters>,
    /// Server only: datagrams that reached the server's UDP port during the test from senders
    /// that are not part of any test (ignored, never answered).
    pub stray_datagrams: Option<u64>,
    /// Server only, connection-rate tests: what its accept workers saw.
    // Defaulted so a report from a peer built before this field existed still decodes.
    #[serde(default)]
    pub connect: Option<ConnectServerCounts>,
    /// Wall-clock start of this end's measured window (after the warm-up), seconds since the
    /// Unix epoch, by this end's clock.
    #[serde(default)]
    pub window_start_unix: Option<f64>,
    /// Wall-clock end of this end's measured window, by this end's clock.
    #[serde(default)]
    pub window_end_unix: Option<f64>,
    /// A scheduled start (`hakaru plan`, `--sync-start` with `go AT`): the instant the first
    /// of this end's data threads began, seconds since the Unix epoch by this end's clock
    /// (the scheduled instant plus how late it woke). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub began_unix: Option<f64>,
}

impl SideReport {
    /// A report that knows only its flows: no CPU, interface or UDP counters, no measured
    /// window, the default environment, plain copies both ways. For ends whose figures come
    /// from elsewhere (a peer's results document, a sockperf server) and for tests; set what is
    /// known with struct update syntax.
    pub fn flows_only(end: End, flows: Vec<FlowSide>) -> SideReport {
        SideReport {
            end,
            flows,
            cpu: None,
            nic: None,
            env: Environment::default(),
            send_mode: "copy".into(),
            recv_mode: "copy".into(),
            udp_paths: None,
            udp_kernel: None,
            stray_datagrams: None,
            connect: None,
            window_start_unix: None,
            window_end_unix: None,
            began_unix: None,
        }
    }
}

/// Bytes counted at one end of a flow or direction, with the time and rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Counted {
    /// Bytes after the warm-up.
    pub bytes: u64,
    /// Bytes moved during the omitted warm-up (not in `bytes`). Each end closes its warm-up
    /// on its own clock, so data in flight at that moment is omitted at the sender and counted
    /// at the receiver: `bytes + omitted_bytes` agree between the ends, `bytes` alone need not.
    pub omitted_bytes: u64,
    /// Seconds the bytes were counted over: for the receivers of a timed TCP test the
    /// measured window (warm-up excluded), so bytes still arriving after the senders stopped
    /// do not stretch it; otherwise to the last byte.
    pub seconds: f64,
    /// bytes x 8 / seconds.
    pub bits_per_second: BitRate,
    /// Write or read system calls.
    pub calls: u64,
    /// Receivers of timed TCP tests: bytes that arrived after the window (flows still
    /// recovering losses or draining queues when the senders stopped); in neither `bytes`
    /// nor the rate. Bytes that reached the host inside the window but were read after it
    /// (held out of order behind a lost segment) count in the window by their arrival stamps.
    // Defaulted so results written before these fields existed still decode.
    #[serde(default)]
    pub late_bytes: u64,
    /// Flows that had late bytes.
    #[serde(default)]
    pub late_flows: u32,
    /// How long after the window the last late byte arrived, seconds.
    #[serde(default)]
    pub late_seconds: f64,
}

impl Counted {
    /// Builds a count and derives its rate.
    pub fn new(bytes: u64, seconds: f64, calls: u64) -> Self {
        Counted {
            bytes,
            omitted_bytes: 0,
            seconds,
            bits_per_second: BitRate::from_bytes(bytes, seconds),
            calls,
            late_bytes: 0,
            late_flows: 0,
            late_seconds: 0.0,
        }
    }
}

/// One flow's final figures: what the receiver got (the headline) and what the sender wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowResult {
    /// Flow id.
    pub id: u32,
    /// Direction the flow carries data.
    pub dir: FlowDir,
    /// Counted at the receiving socket: the headline.
    pub receiver: Counted,
    /// Counted at the sending socket.
    pub sender: Counted,
    /// TCP_INFO of the sending socket at the end of the test.
    pub tcp_info: Option<TcpInfo>,
    /// UDP figures (datagrams, loss, jitter), for UDP tests.
    pub udp: Option<UdpCounts>,
    /// For TCP tests that asked for MPTCP (`--mptcp`): whether the flow ran MPTCP and over how
    /// many subflows, as the client's kernel saw it (the server's where the client's is not
    /// known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpFlow>,
}

/// All flows of one direction added up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DirectionTotal {
    /// Direction.
    pub dir: FlowDir,
    /// Number of flows.
    pub flows: u32,
    /// Sum over flows at the receivers: the headline.
    pub receiver: Counted,
    /// Sum over flows at the senders.
    pub sender: Counted,
    /// Segments retransmitted, summed over the sending sockets; absent where no sending
    /// socket's OS counts them.
    pub retransmits: Option<u64>,
    /// UDP figures summed over the flows, for UDP tests.
    pub udp: Option<UdpCounts>,
    /// Paced UDP tests (`-b`, `--rate`): the senders' asked rate against what they sent.
    // Defaulted so results written before this field existed still decode.
    #[serde(default)]
    pub rate_target: Option<RateTarget>,
}

/// A paced sender's asked rate against what it achieved. A sender held back by its own
/// qdisc, socket buffer or CPU sends less than asked, and the receiver then shows no loss:
/// the path was never offered the asked rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RateTarget {
    /// The rate asked of all flows of the direction together.
    pub asked: f64,
    /// What the senders sent, over their counted time.
    pub achieved: f64,
    /// Unit of both: `bit/s` (payload, `-b`) or `datagrams/s` (`--rate`).
    pub unit: String,
    /// achieved / asked.
    pub ratio: f64,
    /// True when the senders achieved less than 99 % of the asked rate.
    pub missed: bool,
}

/// Below this share of the asked rate a paced sender counts as held back.
pub const RATE_TARGET_MET: f64 = 0.99;

/// One flow's figures for one interval, merged from both ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowInterval {
    /// Flow id.
    pub id: u32,
    /// Direction.
    pub dir: FlowDir,
    /// Bytes the receiver read during the interval (absent if that end sent no sample).
    pub receiver_bytes: Option<u64>,
    /// Receiver rate over the interval.
    pub receiver_bps: Option<BitRate>,
    /// Bytes the sender wrote during the interval (absent if that end sent no sample).
    pub sender_bytes: Option<u64>,
    /// Sender rate over the interval.
    pub sender_bps: Option<BitRate>,
    /// Sending socket's TCP state at the end of the interval.
    pub tcp: Option<TcpTick>,
    /// Receiver's UDP counters for the interval (the headline), for UDP tests.
    pub udp: Option<UdpTick>,
    /// Datagrams the sender sent during the interval, for UDP tests.
    pub sender_datagrams: Option<u64>,
}

/// One direction's sum for one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DirectionInterval {
    /// Direction.
    pub dir: FlowDir,
    /// Bytes all receivers read during the interval.
    pub receiver_bytes: Option<u64>,
    /// Receiver rate.
    pub receiver_bps: Option<BitRate>,
    /// Bytes all senders wrote during the interval.
    pub sender_bytes: Option<u64>,
    /// Sender rate.
    pub sender_bps: Option<BitRate>,
    /// Retransmits during the interval, summed over sending sockets.
    pub retransmits: Option<u64>,
    /// Receivers' UDP counters summed over the flows, for UDP tests.
    pub udp: Option<UdpTick>,
    /// Datagrams all senders sent during the interval, for UDP tests.
    pub sender_datagrams: Option<u64>,
}

/// One reporting interval, merged from both ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IntervalRecord {
    /// Interval number, from 0.
    pub index: u32,
    /// Start, seconds since the test started (client clock).
    pub start: f64,
    /// End, seconds since the test started (client clock).
    pub end: f64,
    /// True inside the omitted warm-up (not counted in totals).
    pub omitted: bool,
    /// Per-flow figures.
    pub flows: Vec<FlowInterval>,
    /// Per-direction sums.
    pub sums: Vec<DirectionInterval>,
    /// Round trips of the interval, for latency tests.
    pub latency: Option<crate::latency::LatencyInterval>,
    /// Connections of the interval, for connection-rate tests (counted at the client; `flows`
    /// and `sums` are then empty).
    pub connect: Option<ConnectInterval>,
    /// The client interface's counters over the interval (bulk tests).
    // Defaulted so results written before these fields existed still decode.
    #[serde(default)]
    pub client_nic: Option<NicTick>,
    /// The server interface's counters over the interval (bulk tests; the receiver's wire
    /// truth for the forward direction, in the same seconds as the flows).
    #[serde(default)]
    pub server_nic: Option<NicTick>,
    /// The latency probes' round trips over the interval (bulk tests with
    /// `--latency-probe`), next to the throughput of the same seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<Box<crate::latency::LatencyInterval>>,
}

/// One end's resource use and environment, with its efficiency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EndResult {
    /// Machine CPU use over the counted part of the test.
    pub cpu: Option<CpuUsage>,
    /// Interface counters over the counted part of the test.
    pub nic: Option<NicUsage>,
    /// Machine and stack facts.
    pub env: Environment,
    /// Bytes this end sent plus bytes it received, per busy CPU-second of its machine.
    pub bytes_per_cpu_second: Option<f64>,
    /// How this end sent: `copy` or `sendfile`.
    pub send_mode: String,
    /// How this end received: `copy` or `discard`.
    pub recv_mode: String,
    /// UDP fast paths this end used, for UDP tests.
    pub udp_paths: Option<UdpPaths>,
    /// System-wide UDP counter deltas at this end over the test, for UDP tests.
    pub udp_kernel: Option<UdpKernelCounters>,
    /// Server only: datagrams from senders outside any test, ignored during this test.
    pub stray_datagrams: Option<u64>,
    /// Wall-clock start of this end's measured window (after the warm-up), seconds since the
    /// Unix epoch by this end's clock: to align results of tests run at once on several
    /// machines (see `server_clock_offset` for the two clocks' difference).
    // Defaulted so results written before these fields existed still decode.
    #[serde(default)]
    pub window_start_unix: Option<f64>,
    /// Wall-clock end of this end's measured window, by this end's clock.
    #[serde(default)]
    pub window_end_unix: Option<f64>,
    /// A scheduled start (`hakaru plan`, `--sync-start` with `go AT`): the instant the first
    /// of this end's data threads began, seconds since the Unix epoch by this end's clock
    /// (the scheduled instant plus how late it woke). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub began_unix: Option<f64>,
}

/// How far the server's wall clock was from the client's, estimated from the control
/// connection's handshake (the server's time in its welcome, or in its `auth_ok` when it has
/// a key, against the middle of the client's round trip, as NTP does).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClockOffset {
    /// Server clock minus client clock, seconds.
    pub offset_s: f64,
    /// The handshake's round trip, seconds: the estimate is good to half of it.
    pub round_trip_s: f64,
}

/// The result of one hakaru run: every renderer reads this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunResult {
    /// Version of this format (see docs/json.md).
    pub schema_version: u32,
    /// Always `hakaru`.
    pub tool: String,
    /// hakaru version of the client.
    pub tool_version: String,
    /// Test kind: `tcp`, `udp`, `pps`, `latency`, `connect`, `sink` or `source`.
    pub test: String,
    /// Wall-clock start, RFC 3339 UTC.
    pub started_at: String,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_at_unix: f64,
    /// Server address the client connected to (`host:port`).
    pub server: String,
    /// True when the server ran inside the client process on loopback (no HOST given).
    pub embedded_server: bool,
    /// Local address of the control connection.
    pub local_address: String,
    /// Remote address of the control connection.
    pub remote_address: String,
    /// The test as both ends ran it; `kind` tells which (`tcp`, `udp`, `connect`).
    pub spec: TestSpec,
    /// Interval reports, in order.
    pub intervals: Vec<IntervalRecord>,
    /// Per-flow totals.
    pub flows: Vec<FlowResult>,
    /// Per-direction totals.
    pub totals: Vec<DirectionTotal>,
    /// The client end.
    pub client: EndResult,
    /// The server end.
    pub server_end: EndResult,
    /// True if the test was stopped early (Ctrl-C); the figures cover the time it ran.
    pub interrupted: bool,
    /// Choices hakaru made that affect the figures, in words (e.g. congestion control on loopback).
    pub notes: Vec<String>,
    /// What the kind found beyond the shared part: in the JSON, its keys in place
    /// (`latency`, `connect`, `raw`, and when present `http`, `probe`, `rpm`, `udpst`).
    #[serde(flatten)]
    pub detail: crate::KindDetail,
    /// The server's wall clock against the client's, for tests against a hakaru server.
    #[serde(default)]
    pub server_clock_offset: Option<ClockOffset>,
    /// True when the server runs on the client's kernel (it reported the same boot id):
    /// loopback, another network namespace or a container of this machine. Both ends then
    /// shared these CPUs, and in UDP tests each side started workers for half of them; the
    /// figures measure the machine's stack, not a network between two machines.
    #[serde(default)]
    pub server_on_this_host: bool,
}

/// Formats Unix seconds as an RFC 3339 UTC timestamp with milliseconds.
pub fn rfc3339_utc(unix: f64) -> String {
    let total_ms = (unix * 1000.0).floor() as i64;
    let ms = total_ms.rem_euclid(1000);
    let secs = total_ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{ms:03}Z")
}

/// `hakaru quick --json`: every test's headline and its whole result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuickResult {
    /// Version of the result format (the same as `RunResult`'s).
    pub schema_version: u32,
    /// Always `quick`.
    pub test: String,
    /// Server address.
    pub server: String,
    /// True when the server ran in-process on loopback.
    pub embedded_server: bool,
    /// One line per test, in the order they ran.
    pub lines: Vec<crate::latency::QuickLine>,
    /// Each test's full result, in the same order (absent for a test that failed).
    pub results: Vec<Option<RunResult>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339_utc(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc(951_782_400.5), "2000-02-29T00:00:00.500Z");
        assert_eq!(rfc3339_utc(1_795_000_000.0), "2026-11-18T11:06:40.000Z");
    }

    #[test]
    fn counted_derives_rate() {
        let c = Counted::new(1_250_000_000, 10.0, 5);
        assert_eq!(c.bits_per_second, BitRate(1e9));
    }
}
