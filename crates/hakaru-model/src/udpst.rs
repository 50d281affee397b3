//! `hakaru capacity`: an RFC 9946 (OB-UDPST, protocol version 20) client's test and what it
//! measured. The server runs the sending-rate search; the client reads the receiver's
//! sub-interval statistics and reports the highest IP-layer rate among them (docs/guide.md,
//! "Maximum IP-layer capacity"). The machine is `hakaru_session::udpst_client`, the driver
//! `hakaru_client::udpst`.

use serde::{Deserialize, Serialize};

use crate::config::SpecError;
use crate::units::Dur;

/// RFC 9946's control port.
pub const UDPST_DEFAULT_PORT: u16 = 24601;
/// Highest row of the sending-rate table (1153 rows).
pub const MAX_UDPST_ROW: u16 = 1152;

/// Which way the load goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UdpstDirection {
    /// The client sends load, the server reports what arrived.
    Up,
    /// The server sends load, the client counts it.
    Down,
}

impl UdpstDirection {
    /// `up` or `down`.
    pub fn as_str(self) -> &'static str {
        match self {
            UdpstDirection::Up => "up",
            UdpstDirection::Down => "down",
        }
    }
}

/// What `hakaru capacity` was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpstSpec {
    /// The server's host and control port.
    pub server: String,
    /// Which way the load goes.
    pub direction: UdpstDirection,
    /// Test duration in seconds (5 to 3600).
    pub duration_s: u16,
    /// Jumbo datagram sizes above 1 Gbit/s (udpst's default; `-j` turns it off).
    pub jumbo: bool,
    /// Traditional 1500-byte MTU sizes (`-T`).
    pub traditional: bool,
    /// A fixed sending-rate row (`-I`), or the search's starting row with `start_only`.
    pub row: Option<u16>,
    /// The row is where the search starts, not a fixed rate (`-I @N`).
    pub start_only: bool,
    /// The required bandwidth told to the server (Mbit/s, `-B`), 0 for none.
    pub max_mbps: u16,
    /// Rate adjustment algorithm C instead of B (`-A c`).
    pub algorithm_c: bool,
    /// Trial (status feedback) interval in ms (`-i`).
    pub trial_ms: u16,
    /// Sub-interval length in ms (`-P`).
    pub sub_interval_ms: u16,
}

impl UdpstSpec {
    /// Checks every bound.
    pub fn validate(&self) -> Result<(), SpecError> {
        let bad = |m: String| Err(SpecError(m));
        if !(5..=3600).contains(&self.duration_s) {
            return bad(format!("duration {} s: 5 to 3600", self.duration_s));
        }
        if let Some(r) = self.row {
            if r > MAX_UDPST_ROW {
                return bad(format!("sending-rate row {r}: 0 to {MAX_UDPST_ROW}"));
            }
        }
        if self.start_only && self.row.is_none() {
            return bad("a starting row needs a row".into());
        }
        if self.max_mbps > 0x7fff {
            return bad(format!(
                "max bandwidth {} Mbit/s: at most 32767",
                self.max_mbps
            ));
        }
        if !(5..=250).contains(&self.trial_ms) {
            return bad(format!("trial interval {} ms: 5 to 250", self.trial_ms));
        }
        if !(100..=10_000).contains(&self.sub_interval_ms) {
            return bad(format!(
                "sub-interval {} ms: 100 to 10000",
                self.sub_interval_ms
            ));
        }
        if u32::from(self.sub_interval_ms) > u32::from(self.duration_s) * 1000 {
            return bad("the sub-interval is longer than the test".into());
        }
        Ok(())
    }
}

/// One sub-interval as its receiver counted it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpstSubInterval {
    /// 1, 2, ...
    pub index: u32,
    /// Seconds since the test began, at the sub-interval's end.
    pub end_s: f64,
    /// Its length as measured (s).
    pub seconds: f64,
    /// IP-layer (L3) rate, Mbit/s.
    pub ip_mbps: f64,
    /// Datagrams received.
    pub datagrams: u32,
    /// Datagrams lost, out of order, duplicated.
    pub loss: u32,
    /// Out of order.
    pub reordered: u32,
    /// Duplicated.
    pub duplicated: u32,
    /// One-way delay variation min, average, max (ms), `None` without samples.
    pub delay_var_ms: Option<[u32; 3]>,
    /// RTT variation min and max (ms), `None` without samples.
    pub rtt_var_ms: Option<[u32; 2]>,
}

/// What `hakaru capacity` measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpstResult {
    /// `up` or `down`.
    pub direction: String,
    /// The maximum IP-layer (L3) capacity: the highest sub-interval rate, Mbit/s (udpst's
    /// "Maximum Mbps(L3/IP)").
    pub max_ip_capacity_mbps: f64,
    /// The same sub-interval at layer 2 (14 bytes of Ethernet header more per datagram).
    pub max_l2_mbps: f64,
    /// And at layer 1 (18 bytes: Ethernet header and FCS).
    pub max_l1_mbps: f64,
    /// The sub-interval of the maximum (1, 2, ...).
    pub max_index: u32,
    /// The mean of the sub-interval rates (udpst's summary Mbps), Mbit/s.
    pub mean_ip_mbps: f64,
    /// Datagrams delivered, percent of those sent (received + lost).
    pub delivered_percent: f64,
    /// Lost datagrams over the test.
    pub loss: u64,
    /// Out-of-order datagrams over the test.
    pub reordered: u64,
    /// Duplicated datagrams over the test.
    pub duplicated: u64,
    /// One-way delay variation over the test: min, average, max (ms).
    pub delay_var_ms: Option<[u32; 3]>,
    /// RTT variation over the test: min, average, max (ms).
    pub rtt_var_ms: Option<[u32; 3]>,
    /// The smallest RTT seen (ms).
    pub rtt_min_ms: Option<u32>,
    /// The parameters the server accepted: trial interval, sub-interval (ms), duration (s).
    pub trial_ms: u16,
    /// Sub-interval length (ms).
    pub sub_interval_ms: u16,
    /// Test duration (s).
    pub duration_s: u16,
    /// The test ended because the server went silent (3 s), not by the stop exchange.
    pub ended_by_watchdog: bool,
    /// Every sub-interval, in order.
    pub sub_intervals: Vec<UdpstSubInterval>,
}

impl crate::kind::Kind for UdpstSpec {
    fn name(&self) -> &'static str {
        "capacity"
    }
    fn validate(&self) -> Result<(), SpecError> {
        UdpstSpec::validate(self)
    }
    fn common(&self) -> crate::kind::Common<'_> {
        crate::kind::Common {
            direction: match self.direction {
                UdpstDirection::Down => crate::Direction::Reverse,
                UdpstDirection::Up => crate::Direction::Forward,
            },
            amount: crate::Amount::Time(Dur::from_secs(u64::from(self.duration_s))),
            interval: Dur(std::time::Duration::from_millis(u64::from(
                self.sub_interval_ms,
            ))),
            stall_timeout: Dur::from_secs(3),
            ..Default::default()
        }
    }
    fn remote(&self) -> bool {
        false
    }
}
