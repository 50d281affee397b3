//! Raw endpoints (`hakaru sink`, `hakaru source`): a plain TCP stream or UDP datagrams to or
//! from a tool with no protocol of its own (ttcp, nc, an iperf2 client), counted ttcp-style.

use serde::{Deserialize, Serialize};

use crate::config::SpecError;
use crate::units::{BitRate, Bytes, Dur};

/// Largest buffer (`-l`) a raw endpoint reads or writes at once (64 MiB).
pub const MAX_RAW_LENGTH: u64 = 64 << 20;
/// Largest UDP payload.
pub const MAX_UDP_PAYLOAD: u64 = 65_507;

/// Which end of a raw transfer this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawRole {
    /// Receives (`hakaru sink`).
    Sink,
    /// Sends (`hakaru source`).
    Source,
}

/// Transport of a raw transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawProtocol {
    /// A TCP byte stream.
    Tcp,
    /// UDP datagrams.
    Udp,
}

/// What a raw endpoint was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RawSpec {
    /// Sink or source.
    pub role: RawRole,
    /// TCP or UDP.
    pub protocol: RawProtocol,
    /// Bytes per read or write call (per datagram for a UDP source).
    pub length: Bytes,
    /// Source: buffers to send (`-n`); `None` with a time or with `--stdin`.
    pub count: Option<u64>,
    /// Source: seconds to send (`-t`).
    pub duration: Option<Dur>,
    /// UDP source: pacing rate (`-b`); `None` sends as fast as the socket takes.
    pub rate: Option<BitRate>,
    /// Seconds between interval reports; 0 turns them off.
    pub interval: Dur,
    /// UDP sink: the transfer ends after this long without a datagram (`--idle`).
    pub idle: Dur,
    /// Data comes from stdin (source) or goes to stdout (sink) instead of being generated or
    /// discarded.
    pub stdio: bool,
    /// Sink: speak iperf2 (skip its test header, answer a UDP FIN with a server report).
    pub iperf2: bool,
    /// UDP: datagrams of 4 bytes or fewer are ttcp's start and end markers (a source sends one
    /// before its data and four after; a sink stops at the first after data). `--no-markers`
    /// turns this off.
    pub markers: bool,
}

impl RawSpec {
    /// Checks every limit; messages name the flag.
    pub fn validate(&self) -> Result<(), SpecError> {
        let err = |m: String| Err(SpecError(m));
        let max = match self.protocol {
            RawProtocol::Tcp => MAX_RAW_LENGTH,
            RawProtocol::Udp => MAX_UDP_PAYLOAD,
        };
        if self.length.0 == 0 || self.length.0 > max {
            return err(format!(
                "-l/--length must be between 1 and {max} bytes for {}, got {}",
                self.protocol_name(),
                self.length.0
            ));
        }
        if self.count == Some(0) {
            return err("-k/--blocks (or -n/--bytes) must be more than 0".into());
        }
        if let Some(t) = self.duration {
            if t.is_zero() || t.secs_f64() > 86_400.0 {
                return err(format!(
                    "-t/--time must be more than 0 and at most 86400 s, got {t}"
                ));
            }
        }
        if self.count.is_some() && self.duration.is_some() {
            return err("-k/--blocks (or -n/--bytes) and -t/--time cannot both be given".into());
        }
        if let Some(r) = self.rate {
            if self.protocol != RawProtocol::Udp {
                return err("-b/--bitrate paces UDP only; add -u".into());
            }
            if !(r.0 > 0.0 && r.0.is_finite()) {
                return err(format!("-b/--bitrate must be more than 0, got {r}"));
            }
        }
        if !self.interval.is_zero() && self.interval.secs_f64() < 0.01 {
            return err(format!(
                "-i/--interval must be 0 (off) or at least 10ms, got {}",
                self.interval
            ));
        }
        let idle = self.idle.secs_f64();
        if !(0.01..=3600.0).contains(&idle) {
            return err(format!(
                "--idle must be between 10ms and 3600 s, got {}",
                self.idle
            ));
        }
        if self.iperf2 && self.role == RawRole::Source {
            return err("--iperf2 applies to hakaru sink only".into());
        }
        Ok(())
    }

    /// `tcp` or `udp`.
    pub fn protocol_name(&self) -> &'static str {
        match self.protocol {
            RawProtocol::Tcp => "tcp",
            RawProtocol::Udp => "udp",
        }
    }

    /// `sink` or `source`.
    pub fn role_name(&self) -> &'static str {
        match self.role {
            RawRole::Sink => "sink",
            RawRole::Source => "source",
        }
    }
}

/// What an iperf2 client told a sink and what the sink made of its datagrams.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Iperf2Info {
    /// Flag word of the client's test header.
    pub flags: u32,
    /// Client version from the header extension (`2.1.8`), when present.
    pub client_version: Option<String>,
    /// What the client said it would send (`10.00 s` or `1048576 bytes`).
    pub amount: String,
    /// Rate the client asked for, bits/s, when given.
    pub rate_bps: Option<u64>,
    /// UDP: datagrams by the client's count (highest id, the FIN's included), as the server
    /// report tells the client.
    pub datagrams: Option<u64>,
    /// UDP: datagrams lost (sequence gaps not filled by late arrivals).
    pub lost: Option<u64>,
    /// UDP: datagrams that arrived after a later one.
    pub out_of_order: Option<u64>,
    /// UDP: RFC 1889 jitter from the client's timestamps, milliseconds.
    pub jitter_ms: Option<f64>,
    /// UDP: true if the client's FIN arrived and was answered with a server report.
    pub fin_answered: bool,
}

/// The result of a raw transfer, counted ttcp-style at this end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RawResult {
    /// Sink or source.
    pub role: RawRole,
    /// TCP or UDP.
    pub protocol: RawProtocol,
    /// Address of the other end (`host:port`), once known.
    pub peer: Option<String>,
    /// Bytes received (sink) or sent (source), headers of peers such as iperf2 included.
    pub bytes: u64,
    /// Seconds counted: a TCP sink's from the accept to the sender's close, a UDP sink's from
    /// the first to the last datagram, a source's of sending.
    pub seconds: f64,
    /// bytes x 8 / seconds.
    pub bits_per_second: BitRate,
    /// Read or write calls that moved data.
    pub io_calls: u64,
    /// io_calls / seconds.
    pub calls_per_second: f64,
    /// bytes / io_calls.
    pub bytes_per_call: f64,
    /// UDP: datagrams moved (for a sink: the sender's data datagrams, not the ignored ones).
    pub datagrams: Option<u64>,
    /// UDP sink: datagrams not counted as data: ttcp markers, datagrams from other senders,
    /// and with `--iperf2` anything that is not iperf2 data (garbage, stray FINs).
    pub ignored: Option<u64>,
    /// Bytes written to stdout (sink) or read from stdin (source), with `--stdout`/`--stdin`.
    pub stdio_bytes: Option<u64>,
    /// The iperf2 client's header and UDP figures, with `--iperf2`.
    pub iperf2: Option<Iperf2Info>,
    /// What ended the transfer early, if anything.
    pub error: Option<String>,
    /// Sink: each stream's own figures when the transfer had more than one (an iperf2 client
    /// with `-P`); the figures above are then their sum over the transfer's time. Empty for a
    /// single stream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<RawResult>,
}

impl RawResult {
    /// An empty result of a role and protocol, to be filled in.
    pub fn new(role: RawRole, protocol: RawProtocol) -> RawResult {
        RawResult {
            role,
            protocol,
            peer: None,
            bytes: 0,
            seconds: 0.0,
            bits_per_second: BitRate(0.0),
            io_calls: 0,
            calls_per_second: 0.0,
            bytes_per_call: 0.0,
            datagrams: None,
            ignored: None,
            stdio_bytes: None,
            iperf2: None,
            error: None,
            streams: Vec::new(),
        }
    }

    /// Sets bytes, calls and seconds and derives the rates.
    pub fn set_counts(&mut self, bytes: u64, io_calls: u64, seconds: f64) {
        self.bytes = bytes;
        self.io_calls = io_calls;
        self.seconds = seconds;
        self.bits_per_second = BitRate::from_bytes(bytes, seconds);
        self.calls_per_second = if seconds > 0.0 {
            io_calls as f64 / seconds
        } else {
            0.0
        };
        self.bytes_per_call = if io_calls > 0 {
            bytes as f64 / io_calls as f64
        } else {
            0.0
        };
    }
}

impl crate::kind::Kind for RawSpec {
    fn name(&self) -> &'static str {
        self.role_name()
    }
    fn validate(&self) -> Result<(), SpecError> {
        RawSpec::validate(self)
    }
    fn common(&self) -> crate::kind::Common<'_> {
        crate::kind::Common {
            amount: match (self.count, self.duration) {
                (Some(n), _) => crate::Amount::Blocks(n),
                (None, Some(t)) => crate::Amount::Time(t),
                // Until the stream ends (EOF, stdin's end, the sender's FIN).
                (None, None) => crate::Amount::Time(Dur::default()),
            },
            interval: self.interval,
            stall_timeout: self.idle,
            length: self.length,
            ..Default::default()
        }
    }
    fn remote(&self) -> bool {
        false
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RawSpec {
        RawSpec {
            role: RawRole::Source,
            protocol: RawProtocol::Tcp,
            length: Bytes(8192),
            count: Some(10),
            duration: None,
            rate: None,
            interval: Dur::from_secs(1),
            idle: Dur::from_secs(2),
            stdio: false,
            iperf2: false,
            markers: true,
        }
    }

    #[test]
    fn limits_name_the_flag() {
        assert!(spec().validate().is_ok());
        let mut s = spec();
        s.protocol = RawProtocol::Udp;
        s.length = Bytes(70_000);
        assert!(s.validate().unwrap_err().0.contains("-l/--length"));
        let mut s = spec();
        s.rate = Some(BitRate(1e6));
        assert!(s.validate().unwrap_err().0.contains("-b/--bitrate"));
        let mut s = spec();
        s.duration = Some(Dur::from_secs(1));
        assert!(s
            .validate()
            .unwrap_err()
            .0
            .contains("-k/--blocks (or -n/--bytes) and -t"));
        let mut s = spec();
        s.count = Some(0);
        assert!(s.validate().unwrap_err().0.contains("-k/--blocks"));
        let mut s = spec();
        s.iperf2 = true;
        assert!(s.validate().unwrap_err().0.contains("--iperf2"));
    }

    #[test]
    fn counts_derive_rates() {
        let mut r = RawResult::new(RawRole::Sink, RawProtocol::Tcp);
        r.set_counts(16_777_216, 2048, 2.0);
        assert_eq!(r.bytes_per_call, 8192.0);
        assert_eq!(r.calls_per_second, 1024.0);
        assert_eq!(r.bits_per_second, BitRate(16_777_216.0 * 4.0));
        r.set_counts(0, 0, 0.0);
        assert_eq!((r.bytes_per_call, r.calls_per_second), (0.0, 0.0));
    }
}
