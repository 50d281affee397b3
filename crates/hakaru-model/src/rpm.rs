//! The responsiveness test (`hakaru rpm`, draft-ietf-ippm-responsiveness): what was asked and
//! what it measured. The method is in docs/rpm.md; the driver in the `hakaru-rpm` crate.

use serde::{Deserialize, Serialize};

use crate::config::SpecError;
use crate::units::{BitRate, Bytes, Dur};

/// Most load-generating connections one run opens (per direction).
pub const MAX_RPM_CONNECTIONS: u32 = 64;
/// Most probes (of each type) per second.
pub const MAX_RPM_PROBES: u32 = 1000;

/// Which way the load goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RpmDirection {
    /// Downloads of the large URL (GET).
    Down,
    /// Uploads to the upload URL (POST).
    Up,
    /// Both at once, each on connections of its own.
    Both,
}

impl RpmDirection {
    /// `down`, `up` or `both`.
    pub fn as_str(self) -> &'static str {
        match self {
            RpmDirection::Down => "down",
            RpmDirection::Up => "up",
            RpmDirection::Both => "both",
        }
    }
}

/// What `hakaru rpm` was asked to do. The names in brackets are the draft's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RpmSpec {
    /// The configuration URL (`https://HOST/.well-known/nq`).
    pub url: String,
    /// Download, upload or both at once.
    pub direction: RpmDirection,
    /// Most load-generating connections per direction (MNP).
    pub max_connections: u32,
    /// Interval at which stability is evaluated and a connection added (ID).
    pub interval: Dur,
    /// Intervals in the moving averages (MAD).
    pub moving_average: u32,
    /// Standard deviation tolerance, a fraction of the moving average (SDT).
    pub tolerance: f64,
    /// Most probes of each type per second (MPS).
    pub probes_per_second: u32,
    /// The run ends here even when it has not become stable (the result then says so).
    pub max_duration: Dur,
    /// Skip TLS certificate verification (`--insecure`).
    pub insecure: bool,
    /// PEM file of the certificate authorities to trust instead of the system's (`--cacert`).
    pub cacert: Option<String>,
    /// HTTP/1.1 instead of HTTP/2 (self probes are then the load connections' TCP RTT).
    pub http1: bool,
    /// How long a connection (TCP and TLS handshakes) may take.
    pub connect_timeout: Dur,
    /// TCP congestion control of this end's sockets (`-C`): the uploads' sender. Unset: the
    /// system's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
}

impl RpmSpec {
    /// Checks every limit; messages name the flag.
    pub fn validate(&self) -> Result<(), SpecError> {
        let err = |m: String| Err(SpecError(m));
        if !(self.url.starts_with("https://") || self.url.starts_with("http://")) {
            return err(format!(
                "the URL must start with https:// or http://, got '{}'",
                self.url
            ));
        }
        if self.max_connections == 0 || self.max_connections > MAX_RPM_CONNECTIONS {
            return err(format!(
                "--max-connections must be between 1 and {MAX_RPM_CONNECTIONS}, got {}",
                self.max_connections
            ));
        }
        let iv = self.interval.secs_f64();
        if !(0.05..=10.0).contains(&iv) {
            return err(format!(
                "--interval must be between 50ms and 10s, got {}",
                self.interval
            ));
        }
        if !(2..=20).contains(&self.moving_average) {
            return err(format!(
                "--moving-average must be between 2 and 20 intervals, got {}",
                self.moving_average
            ));
        }
        if !(self.tolerance > 0.0 && self.tolerance <= 1.0) {
            return err(format!(
                "--tolerance must be more than 0 and at most 1, got {}",
                self.tolerance
            ));
        }
        if self.probes_per_second == 0 || self.probes_per_second > MAX_RPM_PROBES {
            return err(format!(
                "--probes must be between 1 and {MAX_RPM_PROBES} per second, got {}",
                self.probes_per_second
            ));
        }
        let md = self.max_duration.secs_f64();
        if md < iv * 2.0 || md > 600.0 {
            return err(format!(
                "--max-duration must be at least two intervals and at most 600 s, got {}",
                self.max_duration
            ));
        }
        if let Some(cc) = &self.congestion {
            crate::config::check_congestion_name(cc)?;
        }
        let ct = self.connect_timeout.secs_f64();
        if ct <= 0.0 || ct > 60.0 {
            return err(format!(
                "--connect-timeout must be more than 0 and at most 60 s, got {}",
                self.connect_timeout
            ));
        }
        Ok(())
    }
}

/// How far a stage got (the draft's confidence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RpmConfidence {
    /// Fewer intervals than the moving average spans: the window was never full.
    Low,
    /// The window was full but the values never became stable within the tolerance.
    Medium,
    /// Stable within the tolerance.
    High,
}

impl RpmConfidence {
    /// `low`, `medium` or `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            RpmConfidence::Low => "low",
            RpmConfidence::Medium => "medium",
            RpmConfidence::High => "high",
        }
    }
}

/// The trimmed means of one window of probes, milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RpmProbes {
    /// Foreign probes: TCP handshake (`tcp_f`).
    pub tcp_ms: Option<f64>,
    /// Foreign probes: TLS handshake per round trip (`tls_f`); none over plain HTTP.
    pub tls_ms: Option<f64>,
    /// Foreign probes: GET of the small object on the new connection (`http_f`).
    pub http_ms: Option<f64>,
    /// Self probes: GET of the small object on a loaded connection (`http_l`); over HTTP/1.1
    /// the loaded connections' TCP RTT.
    pub self_ms: Option<f64>,
    /// Foreign probes in the window.
    pub foreign: u64,
    /// Self probes in the window.
    pub selfp: u64,
    /// The trimmed mean of the self probes during whose wait their connection neither
    /// received a segment out of order nor retransmitted one (no hole held their request or
    /// answer back): a diagnostic beside `self_ms`, which the RPM takes as the draft says;
    /// Linux and HTTP/2 only. Against `self_ms` it tells the path's queue from the load's loss
    /// recovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_in_order_ms: Option<f64>,
    /// Self probes in the window whose connection received segments out of order or
    /// retransmitted while they waited (a loss, or a reordering, ahead of them); Linux and
    /// HTTP/2 only (absent where no probe could be told apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_behind_loss: Option<u64>,
}

/// One interval of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RpmInterval {
    /// Seconds since the start, at the interval's end.
    pub end: f64,
    /// Load-generating connections open.
    pub connections: u32,
    /// Goodput in the interval (bodies of every direction).
    pub bits_per_second: BitRate,
    /// Moving average of the goodput.
    pub goodput_average: BitRate,
    /// Responsiveness over the moving window, once there are probes of both kinds.
    pub rpm: Option<f64>,
    /// The window's foreign responsiveness as a round-trip time, ms.
    pub foreign_ms: Option<f64>,
    /// The window's self responsiveness as a round-trip time, ms.
    pub self_ms: Option<f64>,
}

/// The result of a `hakaru rpm` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RpmResult {
    /// Round trips per minute under working conditions: the mean of the foreign and the
    /// self responsiveness.
    pub rpm: f64,
    /// 60000 / rpm: the round-trip time the RPM stands for, ms.
    pub responsiveness_ms: f64,
    /// 60000 / the mean of the foreign probes' three times.
    pub foreign_rpm: f64,
    /// 60000 / the self probes' time.
    pub self_rpm: f64,
    /// The trimmed means of the last window's probes.
    pub probes: RpmProbes,
    /// Download goodput, moving average at the end (bodies only).
    pub download: Option<BitRate>,
    /// Upload goodput, moving average at the end.
    pub upload: Option<BitRate>,
    /// Load-generating connections at the end (all directions).
    pub connections: u32,
    /// Goodput stage.
    pub goodput_confidence: RpmConfidence,
    /// Responsiveness stage.
    pub rpm_confidence: RpmConfidence,
    /// `h2` or `http/1.1`.
    pub protocol: String,
    /// TLS version and cipher suite of the load connections, for https.
    pub tls: Option<String>,
    /// Server address (`ip:port`).
    pub peer: String,
    /// Seconds the run took.
    pub seconds: f64,
    /// Body bytes moved by the load connections.
    pub bytes: Bytes,
    /// Probes that failed (a connection refused, a timeout, a non-2xx answer).
    pub failed_probes: u64,
    /// Each interval.
    pub intervals: Vec<RpmInterval>,
    /// Every distinct failure.
    pub errors: Vec<String>,
}

impl crate::kind::Kind for RpmSpec {
    fn name(&self) -> &'static str {
        "rpm"
    }
    fn validate(&self) -> Result<(), SpecError> {
        RpmSpec::validate(self)
    }
    fn common(&self) -> crate::kind::Common<'_> {
        crate::kind::Common {
            flows: self.max_connections,
            direction: match self.direction {
                RpmDirection::Down => crate::Direction::Reverse,
                RpmDirection::Up => crate::Direction::Forward,
                RpmDirection::Both => crate::Direction::Bidir,
            },
            amount: crate::Amount::Time(self.max_duration),
            interval: self.interval,
            stall_timeout: self.connect_timeout,
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

    fn spec() -> RpmSpec {
        RpmSpec {
            url: "https://example.com/.well-known/nq".into(),
            direction: RpmDirection::Down,
            max_connections: 16,
            interval: Dur::from_secs(1),
            moving_average: 4,
            tolerance: 0.05,
            probes_per_second: 100,
            max_duration: Dur::from_secs(20),
            insecure: false,
            cacert: None,
            http1: false,
            connect_timeout: Dur::from_secs(5),
            congestion: None,
        }
    }

    #[test]
    fn limits_name_the_flag() {
        assert!(spec().validate().is_ok());
        type Case = (fn(&mut RpmSpec), &'static str);
        let cases: [Case; 8] = [
            (|s| s.url = "ftp://x".into(), "https://"),
            (|s| s.max_connections = 0, "--max-connections"),
            (|s| s.max_connections = 65, "--max-connections"),
            (|s| s.interval = Dur::from_secs(11), "--interval"),
            (|s| s.moving_average = 1, "--moving-average"),
            (|s| s.probes_per_second = 0, "--probes"),
            (|s| s.max_duration = Dur::from_secs(1), "--max-duration"),
            (
                |s| s.congestion = Some("cubic; rm".into()),
                "-C/--congestion",
            ),
        ];
        for (f, flag) in cases {
            let mut s = spec();
            f(&mut s);
            let e = s.validate().unwrap_err().0;
            assert!(e.contains(flag), "{e}");
        }
        let mut s = spec();
        s.tolerance = 0.0;
        assert!(s.validate().unwrap_err().0.contains("--tolerance"));
    }
}
