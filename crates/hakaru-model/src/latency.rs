//! Latency and connection-rate figures shared by `hakaru latency` and `hakaru connect`.

use serde::{Deserialize, Serialize};

use crate::config::{Amount, Direction, FlowDir, TcpSpec};
use crate::udp::{UdpMode, UdpRate, UdpSpec};
use crate::units::{Bytes, Dur};

pub use crate::latency_base::{HistogramBucket, LatencyInterval, LatencyStats, LatencyTransport};

/// Which server a latency test runs against, and so how requests are framed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LatencyPeer {
    /// A hakaru server: a control connection, hakaru's datagram header, both ends report.
    #[default]
    Hakaru,
    /// A stock `sockperf sr` (`--sockperf`): sockperf's 14-byte header, no control connection,
    /// so there is no server report (its CPU, NIC and environment figures are absent).
    Sockperf,
}

/// Smallest request: room for flow, sequence number and send time.
pub const MIN_LATENCY_LENGTH: u64 = 14;
/// Default request and response size (sockperf's minimum message).
pub const DEFAULT_LATENCY_LENGTH: u64 = 14;
/// Most parallel ping-pong flows.
pub const MAX_LATENCY_FLOWS: u32 = 256;

/// A request/response (ping-pong) test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencySpec {
    /// TCP or UDP.
    pub transport: LatencyTransport,
    /// Parallel ping-pong flows (1 to 256), each with one request outstanding (closed loop).
    pub flows: u32,
    /// Bytes of each request and each response.
    pub length: Bytes,
    /// Measured time, after the warm-up.
    pub duration: Dur,
    /// Warm-up at the start whose round trips are discarded.
    pub warmup: Dur,
    /// Seconds between interval reports; 0 turns them off.
    pub interval: Dur,
    /// Open loop: requests per second per flow, each timed from its scheduled send time; `None`
    /// for closed loop (the next request leaves when the reply arrives).
    pub rate: Option<f64>,
    /// Both ends busy-poll non-blocking sockets instead of sleeping (lowest latency, one CPU
    /// per flow at each end).
    pub spin: bool,
    /// SO_BUSY_POLL microseconds on both ends' sockets, for NICs that support it.
    pub busy_poll: Option<u32>,
    /// A request without a reply for this long is lost (UDP) or fails the test (TCP).
    pub timeout: Dur,
    /// CPUs the server pins its echo threads to, round robin; empty for no pinning.
    pub server_affinity: Vec<usize>,
    /// The kind of server: hakaru, or a stock sockperf (`--sockperf`).
    // Defaulted so a request from a client built before this field existed still decodes.
    #[serde(default)]
    pub peer: LatencyPeer,
    /// UDP: where the server's end of each flow listens (as [`crate::UdpSpec::server_ports`]).
    #[serde(default = "crate::ServerPorts::absent")]
    pub server_ports: crate::ServerPorts,
}

impl Default for LatencySpec {
    fn default() -> Self {
        LatencySpec {
            transport: LatencyTransport::Tcp,
            flows: 1,
            length: Bytes(DEFAULT_LATENCY_LENGTH),
            duration: Dur::from_secs(10),
            warmup: Dur(std::time::Duration::from_millis(500)),
            interval: Dur::from_secs(1),
            rate: None,
            spin: false,
            busy_poll: None,
            timeout: Dur::from_secs(1),
            server_affinity: Vec::new(),
            peer: LatencyPeer::Hakaru,
            server_ports: crate::ServerPorts::default(),
        }
    }
}

impl LatencySpec {
    /// Checks every limit; the message names the flag.
    pub fn validate(&self) -> Result<(), crate::SpecError> {
        let e = |m: String| Err(crate::SpecError(m));
        if self.flows == 0 || self.flows > MAX_LATENCY_FLOWS {
            return e(format!(
                "-P/--parallel must be between 1 and {MAX_LATENCY_FLOWS} for latency, got {}",
                self.flows
            ));
        }
        let max = match self.transport {
            LatencyTransport::Udp => crate::MAX_UDP_LENGTH,
            LatencyTransport::Tcp => 1 << 20,
        };
        if self.length.0 < MIN_LATENCY_LENGTH || self.length.0 > max {
            return e(format!(
                "-l/--length must be between {MIN_LATENCY_LENGTH} and {max} bytes, got {}",
                self.length.0
            ));
        }
        let secs = self.duration.secs_f64();
        if !(secs > 0.0 && secs <= 86_400.0) {
            return e(format!(
                "-t/--time must be between 0 and 86400 s, got {}",
                self.duration
            ));
        }
        if self.warmup.secs_f64() > 3600.0 {
            return e(format!(
                "--warmup must be at most 3600 s, got {}",
                self.warmup
            ));
        }
        if !self.interval.is_zero() && self.interval.secs_f64() < 0.01 {
            return e(format!(
                "-i/--interval must be 0 (off) or at least 10ms, got {}",
                self.interval
            ));
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && (1.0..=10_000_000.0).contains(&r)) {
                return e(format!(
                    "--rate must be between 1 and 10000000 requests per second, got {r}"
                ));
            }
        }
        if self.busy_poll.is_some_and(|b| b > 1_000_000) {
            return e("--busy-poll must be at most 1000000 microseconds".into());
        }
        let t = self.timeout.secs_f64();
        if !(0.001..=60.0).contains(&t) {
            return e(format!(
                "--timeout must be between 1ms and 60 s, got {}",
                self.timeout
            ));
        }
        if self.server_affinity.iter().any(|&c| c >= 4096) {
            return e("--server-affinity lists CPUs numbered 0 to 4095".into());
        }
        if self.peer == LatencyPeer::Sockperf && !self.server_affinity.is_empty() {
            return e("--server-affinity needs a hakaru server; a sockperf server is pinned with its own options (taskset), not by --sockperf".into());
        }
        Ok(())
    }
}

impl LatencySpec {
    /// The flows: all opened by the client.
    pub fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        (0..self.flows).map(|i| (i, FlowDir::Up)).collect()
    }

    /// The data path as a TCP spec (to open and configure the connections).
    pub fn as_tcp(&self) -> TcpSpec {
        TcpSpec {
            flows: self.flows,
            direction: Direction::Forward,
            amount: Amount::Time(self.duration),
            length: self.length,
            nodelay: true,
            server_affinity: self.server_affinity.clone(),
            ..TcpSpec::default()
        }
    }

    /// The data path as a UDP spec (to open and configure the flows).
    pub fn as_udp(&self) -> UdpSpec {
        UdpSpec {
            mode: UdpMode::Bandwidth,
            flows: self.flows,
            direction: Direction::Forward,
            amount: Amount::Time(self.duration),
            length: self.length,
            rate: UdpRate::Unlimited,
            gso: false,
            server_affinity: self.server_affinity.clone(),
            server_ports: self.server_ports,
            ..UdpSpec::default()
        }
    }
}

/// One flow's round trips.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyFlow {
    /// Flow id.
    pub id: u32,
    /// Requests sent after the warm-up.
    pub requests: u64,
    /// Replies received and timed.
    pub replies: u64,
    /// Requests without a reply within the timeout (UDP).
    pub lost: u64,
    /// Replies that arrived after their timeout (not timed).
    pub late: u64,
    /// Round-trip times.
    pub rtt: LatencyStats,
}

/// Latency measured idle and with bulk TCP load in both directions (`--under-load`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UnderLoad {
    /// Round trips with no other traffic (a run of the same test just before).
    pub idle_rtt: LatencyStats,
    /// Round trips while the load ran (the same as the result's `rtt`).
    pub loaded_rtt: LatencyStats,
    /// Load throughput client to server, received bits per second.
    pub load_up_bps: f64,
    /// Load throughput server to client, received bits per second.
    pub load_down_bps: f64,
    /// Load flows per direction.
    pub load_flows: u32,
}

/// The figures of a latency test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyResult {
    /// `tcp` or `udp`.
    pub transport: LatencyTransport,
    /// `closed_loop` (one request outstanding per flow) or `open_loop` (`--rate`).
    pub mode: String,
    /// `blocking`, `spin` (`--spin`) or `busy_poll` (`--busy-poll`).
    pub wait: String,
    /// Seconds measured (after the warm-up).
    pub seconds: f64,
    /// Requests sent after the warm-up, all flows.
    pub requests: u64,
    /// Replies timed, all flows.
    pub replies: u64,
    /// Requests without a reply within the timeout.
    pub lost: u64,
    /// Replies that arrived after their timeout.
    pub late: u64,
    /// Replies per second, all flows (transactions per second).
    pub transactions_per_second: f64,
    /// Round trips discarded in the warm-up.
    pub warmup_discarded: u64,
    /// Round-trip time: the headline.
    pub rtt: LatencyStats,
    /// Half the round trip: the one-way estimate sockperf prints by default (labelled; it
    /// assumes a symmetric path).
    pub one_way_estimate: LatencyStats,
    /// Per-flow figures.
    pub flows: Vec<LatencyFlow>,
    /// The round-trip distribution (`--histogram`), else empty.
    pub histogram: Vec<HistogramBucket>,
    /// File every sample was written to (`--full-log`).
    pub full_log: Option<String>,
    /// Idle against loaded latency (`--under-load`).
    pub under_load: Option<UnderLoad>,
    /// The server's own counts, where it reports them (a stock netserver's results with
    /// `--netperf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<LatencyServerCounts>,
}

/// What the server counted in a latency test (`--netperf`: netserver's results, all tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyServerCounts {
    /// Transactions the server completed (requests read whole and answered), warm-up included.
    pub transactions: u64,
    /// Request bytes it received.
    pub bytes_received: u64,
    /// Response bytes it sent.
    pub bytes_sent: u64,
    /// Seconds its data phase took (the longest test's).
    pub seconds: f64,
}

/// One line of `hakaru quick`: a test and its headline figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuickLine {
    /// What was measured, in words (e.g. `TCP 1 flow client -> server`).
    pub what: String,
    /// The command that measures it alone, with its flags.
    pub command: String,
    /// The headline figure, in words (e.g. `9.41 Gbit/s`).
    pub headline: String,
    /// The same figure as a number, in `unit`.
    pub value: f64,
    /// Unit of `value`: `bit/s`, `datagrams/s` or `us`.
    pub unit: String,
    /// Why this test failed, if it did (the others still run).
    pub error: Option<String>,
}

impl crate::kind::Kind for LatencySpec {
    fn name(&self) -> &'static str {
        "latency"
    }
    fn validate(&self) -> Result<(), crate::SpecError> {
        LatencySpec::validate(self)
    }
    fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        LatencySpec::flow_plan(self)
    }
    fn common(&self) -> crate::kind::Common<'_> {
        crate::kind::Common {
            flows: self.flows,
            amount: crate::Amount::Time(self.duration),
            interval: self.interval,
            omit: self.warmup,
            stall_timeout: self.timeout,
            length: self.length,
            server_affinity: &self.server_affinity,
            ..Default::default()
        }
    }
    /// One echo thread per flow with a message buffer each (and a TCP reassembly one).
    fn server_memory(&self, _cpus: usize) -> u64 {
        let per = match self.transport {
            LatencyTransport::Tcp => 2 * self.length.0,
            LatencyTransport::Udp => self.length.0,
        };
        per.saturating_mul(self.flow_plan().len().max(1) as u64)
    }
}

impl crate::probe::LatencyProbe {
    /// The probe flow as a latency test of one open-loop flow (to configure the pinger, the
    /// echo and their sockets).
    pub fn as_latency(&self) -> LatencySpec {
        LatencySpec {
            transport: self.transport,
            flows: 1,
            length: Bytes(crate::probe::PROBE_LENGTH),
            duration: Dur::from_secs(86_400),
            warmup: Dur::default(),
            rate: Some(self.rate),
            timeout: Dur(std::time::Duration::from_millis(
                crate::probe::PROBE_TIMEOUT_MS,
            )),
            ..LatencySpec::default()
        }
    }
}
