//! Test specifications: what a client asks a server to run, validated in one place.

use serde::{Deserialize, Serialize};

use crate::units::{BitRate, Bytes, Dur};

/// Most flows one test may ask for.
pub const MAX_FLOWS: u32 = 1024;
/// Smallest and largest write/read length accepted for TCP.
pub const MIN_TCP_LENGTH: u64 = 1;
/// Largest write/read length accepted for TCP (64 MiB).
pub const MAX_TCP_LENGTH: u64 = 64 << 20;
/// Default TCP write and read length: 1 MiB (docs/performance-notes.md §1).
pub const DEFAULT_TCP_LENGTH: u64 = 1 << 20;

/// Address family restriction (`-4`, `-6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// Either family: names resolve to whatever they have; servers listen dual-stack.
    #[default]
    Any,
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

impl Family {
    /// The family the `-4` / `-6` flags ask for.
    pub fn from_flags(ipv4: bool, ipv6: bool) -> Family {
        match (ipv4, ipv6) {
            (true, _) => Family::V4,
            (_, true) => Family::V6,
            _ => Family::Any,
        }
    }
}

/// Which way data moves, seen from the client.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client sends, the server receives (iperf3's default).
    #[default]
    Forward,
    /// The server sends, the client receives (`-R`, the "receive direction").
    Reverse,
    /// Both at once: each flow count is opened in each direction (`--bidir`).
    Bidir,
}

/// The direction one flow carries data, seen from the client.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FlowDir {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

impl FlowDir {
    /// Short label for text output.
    pub fn label(self) -> &'static str {
        match self {
            FlowDir::Up => "up",
            FlowDir::Down => "down",
        }
    }
}

/// How much a test sends: for a time, or a fixed amount in total over all flows of a direction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Amount {
    /// Send for this many seconds (after the omitted warm-up).
    Time(Dur),
    /// Send exactly this many bytes in total per direction (`-n`).
    Bytes(Bytes),
    /// Send exactly this many blocks of `length` bytes in total per direction (`-k`).
    Blocks(u64),
}

/// Everything a TCP bulk-transfer test needs that both ends must agree on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpSpec {
    /// Parallel flows per direction (1 to 1024).
    pub flows: u32,
    /// Which way data moves.
    pub direction: Direction,
    /// Time or amount to send.
    pub amount: Amount,
    /// Warm-up seconds at the start that are not counted in the totals.
    pub omit: Dur,
    /// Seconds between interval reports; 0 turns them off.
    pub interval: Dur,
    /// Bytes per write and per read.
    pub length: Bytes,
    /// Socket send and receive buffer size (SO_SNDBUF/SO_RCVBUF) on both ends, when set.
    pub window: Option<Bytes>,
    /// TCP maximum segment size (TCP_MAXSEG), when set.
    pub mss: Option<u32>,
    /// TCP congestion control algorithm on both ends, when set.
    pub congestion: Option<String>,
    /// TCP_NODELAY on both ends.
    pub nodelay: bool,
    /// IP TOS byte (IPv4) or traffic class (IPv6) on both ends, when set.
    pub tos: Option<u8>,
    /// Receivers discard data with MSG_TRUNC instead of copying it (labelled in output).
    pub discard: bool,
    /// Senders use sendfile from an in-memory file instead of copying (labelled in output).
    pub zerocopy: bool,
    /// CPUs the server pins its flow workers to, round robin; empty for no pinning.
    pub server_affinity: Vec<usize>,
    /// Seconds a flow may make no progress before it fails (a peer that stopped reading).
    pub stall_timeout: Dur,
    /// Each flow's send rate, payload bits per second (`-b`): senders pace to it. Absent:
    /// as fast as the path allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<BitRate>,
    /// The server -> client rate per flow when it differs from `rate`, which is then the
    /// client -> server rate (`--bitrate-down`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_down: Option<BitRate>,
    /// Data connections use Multipath TCP (IPPROTO_MPTCP, `--mptcp`) at both ends.
    // Defaulted (and left out when false) so ends built before this field still agree.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mptcp: bool,
    /// Round-trip probes on a flow of their own beside the bulk flows (`--latency-probe`).
    /// A server that predates the field ignores it and accepts without `probe` in its
    /// answer; the client then stops with an error that names the option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_probe: Option<crate::probe::LatencyProbe>,
}

/// Highest paced TCP rate per flow (`-b`): 400 Gbit/s.
pub const MAX_TCP_RATE: f64 = 400e9;

/// A spec that violates a limit; the message names the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

impl Default for TcpSpec {
    fn default() -> Self {
        TcpSpec {
            flows: 1,
            direction: Direction::Forward,
            amount: Amount::Time(Dur::from_secs(10)),
            omit: Dur::default(),
            interval: Dur::from_secs(1),
            length: Bytes(DEFAULT_TCP_LENGTH),
            window: None,
            mss: None,
            congestion: None,
            nodelay: false,
            tos: None,
            discard: false,
            zerocopy: false,
            server_affinity: Vec::new(),
            stall_timeout: Dur::from_secs(10),
            rate: None,
            rate_down: None,
            mptcp: false,
            latency_probe: None,
        }
    }
}

impl TcpSpec {
    /// The paced rate per flow of the senders of direction `dir`, if any.
    pub fn rate_for(&self, dir: crate::FlowDir) -> Option<BitRate> {
        match dir {
            crate::FlowDir::Up => self.rate,
            crate::FlowDir::Down => self.rate_down.or(self.rate),
        }
    }

    /// Checks every limit; used by the client on flags and by the server on requests.
    pub fn validate(&self) -> Result<(), SpecError> {
        if let Some(p) = &self.latency_probe {
            p.validate()?;
        }
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return Err(SpecError(format!(
                "-P/--parallel must be between 1 and {MAX_FLOWS}, got {}",
                self.flows
            )));
        }
        for r in self.rate.into_iter().chain(self.rate_down) {
            if !(r.0.is_finite() && r.0 >= 8.0 && r.0 <= MAX_TCP_RATE) {
                return Err(SpecError(format!(
                    "-b/--bitrate must be between 8 bit/s and 400 Gbit/s per flow, got {r}"
                )));
            }
        }
        if self.length.0 < MIN_TCP_LENGTH || self.length.0 > MAX_TCP_LENGTH {
            return Err(SpecError(format!(
                "-l/--length must be between {MIN_TCP_LENGTH} byte and 64 MiB, got {}",
                self.length.0
            )));
        }
        match self.amount {
            Amount::Time(t) if t.secs_f64() > 86_400.0 => {
                return Err(SpecError(format!(
                    "-t/--time must be at most 86400 s, got {t}"
                )))
            }
            Amount::Time(t) if t.is_zero() => {
                return Err(SpecError(
                    "-t/--time must be more than 0 (use -n or -k for a fixed amount)".into(),
                ))
            }
            Amount::Bytes(b) if b.0 == 0 => {
                return Err(SpecError("-n/--bytes must be more than 0".into()))
            }
            Amount::Blocks(0) => return Err(SpecError("-k/--blocks must be more than 0".into())),
            _ => {}
        }
        if !self.interval.is_zero() && self.interval.secs_f64() < 0.01 {
            return Err(SpecError(format!(
                "-i/--interval must be 0 (off) or at least 10ms, got {}",
                self.interval
            )));
        }
        if self.omit.secs_f64() > 3600.0 {
            return Err(SpecError(format!(
                "-O/--omit must be at most 3600 s, got {}",
                self.omit
            )));
        }
        if let Some(w) = self.window {
            if w.0 < 2048 || w.0 > (1 << 30) {
                return Err(SpecError(format!(
                    "-w/--window must be between 2 KiB and 1 GiB, got {}",
                    w.0
                )));
            }
        }
        if let Some(m) = self.mss {
            if !(88..=65_535).contains(&m) {
                return Err(SpecError(format!(
                    "-M/--mss must be between 88 and 65535, got {m}"
                )));
            }
        }
        if let Some(cc) = &self.congestion {
            check_congestion_name(cc)?;
        }
        if self.server_affinity.len() > 4096 || self.server_affinity.iter().any(|&c| c >= 4096) {
            return Err(SpecError(
                "--server-affinity lists CPUs numbered 0 to 4095".into(),
            ));
        }
        if self.stall_timeout.secs_f64() < 0.5 || self.stall_timeout.secs_f64() > 3600.0 {
            return Err(SpecError(format!(
                "--stall-timeout must be between 0.5 s and 3600 s, got {}",
                self.stall_timeout
            )));
        }
        Ok(())
    }

    /// The flows this spec opens, in order: ids and directions.
    pub fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        let n = self.flows;
        match self.direction {
            Direction::Forward => (0..n).map(|i| (i, FlowDir::Up)).collect(),
            Direction::Reverse => (0..n).map(|i| (i, FlowDir::Down)).collect(),
            Direction::Bidir => (0..n)
                .map(|i| (i, FlowDir::Up))
                .chain((0..n).map(|i| (n + i, FlowDir::Down)))
                .collect(),
        }
    }

    /// The exact bytes flow `index` (0-based within its direction) must send, for -n/-k tests.
    pub fn bytes_for_flow(&self, index: u32) -> Option<u64> {
        let per = |total: u64, unit: u64| {
            // Split whole units evenly; the first flows take the remainder.
            let units = total / unit;
            let base = units / self.flows as u64;
            let extra = units % self.flows as u64;
            let mut mine = base + u64::from((index as u64) < extra);
            mine *= unit;
            // A byte count that is not a multiple of the unit: the last flow takes the rest.
            if index == self.flows - 1 {
                mine += total % unit;
            }
            mine
        };
        match self.amount {
            Amount::Time(_) => None,
            Amount::Bytes(b) => Some(per(b.0, 1)),
            Amount::Blocks(k) => Some(per(k.saturating_mul(self.length.0), self.length.0)),
        }
    }
}

impl crate::kind::Kind for TcpSpec {
    fn name(&self) -> &'static str {
        "tcp"
    }
    fn validate(&self) -> Result<(), SpecError> {
        TcpSpec::validate(self)
    }
    fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        TcpSpec::flow_plan(self)
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
    /// One pattern for the side's senders, one read buffer per worker, and the window asked.
    fn server_memory(&self, cpus: usize) -> u64 {
        let paths = self.flow_plan().len();
        let window = self.window.map_or(0, |w| {
            w.0 * crate::kind::KERNEL_DOUBLES * paths.max(1) as u64
        });
        let workers = crate::kind::workers(paths, cpus);
        self.length
            .0
            .saturating_mul(workers + 1)
            .saturating_add(window)
    }
    fn server_send_rate(&self) -> Option<(Option<f64>, u32)> {
        crate::kind::server_sends(self.direction).then(|| {
            (
                self.rate_for(FlowDir::Down)
                    .map(|r| r.0)
                    .filter(|&b| b > 0.0),
                self.flows,
            )
        })
    }
}
/// Refuses a `-C/--congestion` value that cannot be a kernel congestion control's name (at
/// most 15 letters, digits or underscores), before it reaches a socket option.
pub fn check_congestion_name(cc: &str) -> Result<(), SpecError> {
    if cc.is_empty() || cc.len() > 15 || !cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(SpecError(format!(
            "-C/--congestion '{cc}' is not a congestion control name"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_spec_is_valid() {
        TcpSpec::default().validate().unwrap();
    }

    #[test]
    fn limits_name_the_flag() {
        let mut s = TcpSpec {
            flows: 0,
            ..TcpSpec::default()
        };
        assert!(s.validate().unwrap_err().0.contains("-P/--parallel"));
        s.flows = 1025;
        assert!(s.validate().unwrap_err().0.contains("-P/--parallel"));
        s.flows = 1024;
        s.validate().unwrap();
        s.length = Bytes(0);
        assert!(s.validate().unwrap_err().0.contains("-l/--length"));
        s.length = Bytes(1 << 20);
        s.congestion = Some("cubic; rm".into());
        assert!(s.validate().unwrap_err().0.contains("-C/--congestion"));
        s.congestion = None;
        s.amount = Amount::Bytes(Bytes(0));
        assert!(s.validate().unwrap_err().0.contains("-n/--bytes"));
    }

    #[test]
    fn fixed_amounts_split_exactly() {
        let s = TcpSpec {
            flows: 3,
            amount: Amount::Bytes(Bytes(10_000_001)),
            ..TcpSpec::default()
        };
        let total: u64 = (0..3).map(|i| s.bytes_for_flow(i).unwrap()).sum();
        assert_eq!(total, 10_000_001);
        let s = TcpSpec {
            flows: 4,
            length: Bytes(1000),
            amount: Amount::Blocks(10),
            ..TcpSpec::default()
        };
        let per: Vec<u64> = (0..4).map(|i| s.bytes_for_flow(i).unwrap()).collect();
        assert_eq!(per, vec![3000, 3000, 2000, 2000]);
    }

    #[test]
    fn bidir_plan_has_both_directions() {
        let s = TcpSpec {
            flows: 2,
            direction: Direction::Bidir,
            ..TcpSpec::default()
        };
        assert_eq!(
            s.flow_plan(),
            vec![
                (0, FlowDir::Up),
                (1, FlowDir::Up),
                (2, FlowDir::Down),
                (3, FlowDir::Down)
            ]
        );
    }

    #[test]
    fn spec_round_trips_through_json() {
        let s = TcpSpec {
            congestion: Some("cubic".into()),
            amount: Amount::Blocks(7),
            ..TcpSpec::default()
        };
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<TcpSpec>(&j).unwrap(), s);
    }
}
