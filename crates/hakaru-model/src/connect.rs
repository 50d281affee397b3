//! Connection-rate tests (`hakaru connect`, netperf TCP_CRR): the spec both ends run and the
//! figures of a result.

use serde::{Deserialize, Serialize};

use crate::config::SpecError;
use crate::latency::{HistogramBucket, LatencyStats};
use crate::units::{Bytes, Dur};

/// Most concurrent connectors one test may ask for.
pub const MAX_CONNECTORS: u32 = 1024;
/// Largest request or response of one connection (64 KiB).
pub const MAX_CONNECT_MESSAGE: u64 = 64 << 10;

/// Everything a connection-rate test needs that both ends must agree on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectSpec {
    /// Concurrent connectors (1 to 1024); each has one connection open at a time.
    pub connectors: u32,
    /// How long the connectors open connections.
    pub duration: Dur,
    /// Bytes the client sends on each connection (1 to 64 KiB).
    pub request: Bytes,
    /// Bytes the server answers with on each connection (1 to 64 KiB).
    pub response: Bytes,
    /// The client closes first, with RST (SO_LINGER 0), so no connection waits in TIME_WAIT
    /// at either end. Without it the server closes first with FIN, as netserver does in
    /// TCP_CRR, and keeps the TIME_WAIT.
    pub rst: bool,
    /// Seconds between interval reports; 0 turns them off.
    pub interval: Dur,
    /// CPUs the server pins its accept workers to, one worker per CPU; empty for one worker
    /// per online CPU, unpinned.
    pub server_affinity: Vec<usize>,
    /// How long one connection's connect, request or response may take before the
    /// connection counts as failed (`--connect-timeout`).
    pub connect_timeout: Dur,
    /// Client only: put the connect-time distribution in the result (`--histogram`).
    #[serde(default)]
    pub histogram: bool,
}

impl Default for ConnectSpec {
    fn default() -> Self {
        ConnectSpec {
            connectors: 1,
            duration: Dur::from_secs(10),
            request: Bytes(1),
            response: Bytes(1),
            rst: false,
            interval: Dur::from_secs(1),
            server_affinity: Vec::new(),
            connect_timeout: Dur::from_secs(5),
            histogram: false,
        }
    }
}

impl ConnectSpec {
    /// Checks every limit; used by the client on flags and by the server on requests.
    pub fn validate(&self) -> Result<(), SpecError> {
        let err = |m: String| Err(SpecError(m));
        if self.connectors == 0 || self.connectors > MAX_CONNECTORS {
            return err(format!(
                "-P/--parallel must be between 1 and {MAX_CONNECTORS} connectors, got {}",
                self.connectors
            ));
        }
        let secs = self.duration.secs_f64();
        if self.duration.is_zero() || secs > 86_400.0 {
            return err(format!(
                "-t/--time must be more than 0 and at most 86400 s, got {}",
                self.duration
            ));
        }
        for (flag, b) in [("--request", self.request), ("--response", self.response)] {
            if b.0 == 0 || b.0 > MAX_CONNECT_MESSAGE {
                return err(format!(
                    "{flag} must be between 1 byte and 64 KiB, got {}",
                    b.0
                ));
            }
        }
        if !self.interval.is_zero() && self.interval.secs_f64() < 0.01 {
            return err(format!(
                "-i/--interval must be 0 (off) or at least 10ms, got {}",
                self.interval
            ));
        }
        if self.server_affinity.len() > 4096 || self.server_affinity.iter().any(|&c| c >= 4096) {
            return err("--server-affinity lists CPUs numbered 0 to 4095".into());
        }
        let t = self.connect_timeout.secs_f64();
        if !(0.01..=300.0).contains(&t) {
            return err(format!(
                "--connect-timeout must be between 10ms and 300 s, got {}",
                self.connect_timeout
            ));
        }
        Ok(())
    }

    /// The server closes each connection first, right after its response: with FIN, as
    /// netserver does in TCP_CRR, so TIME_WAIT stays at the server and the client's local
    /// ports are free at once. With `--rst` the client closes first, with RST.
    pub fn server_closes_first(&self) -> bool {
        !self.rst
    }

    /// How the client closes its connections, as the output names it: `rst` or `fin`.
    pub fn close_name(&self) -> &'static str {
        if self.rst {
            "rst"
        } else {
            "fin"
        }
    }
}

/// Connections of one interval of a connection-rate test, counted at the client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectInterval {
    /// Connections completed during the interval (connect, request, response, close).
    pub connections: u64,
    /// Connections that failed during the interval.
    pub failed: u64,
    /// connections / interval length.
    pub connections_per_second: f64,
}

/// What the server's accept workers saw during a connection-rate test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectServerCounts {
    /// Connections accepted from the test's client.
    pub accepted: u64,
    /// Connections whose whole request was read and whole response written.
    pub served: u64,
    /// Connections closed without a complete exchange: reset or closed early, timed out, or
    /// still open when the test ended.
    pub dropped: u64,
    /// Connections from addresses other than the test's client, closed at once.
    pub foreign: u64,
}

/// The figures of a connection-rate test. Connections are counted at the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectResult {
    /// Connections completed: connect, request sent, whole response read, closed.
    pub connections: u64,
    /// Connections that failed (refused, timed out, reset, short response).
    pub failed: u64,
    /// Seconds from the start until the last connector finished.
    pub seconds: f64,
    /// connections / seconds: the headline.
    pub connections_per_second: f64,
    /// How the client closed each connection: `rst` (SO_LINGER 0, --rst) or `fin`.
    pub close: String,
    /// Which end closed each connection first: `server` (FIN tests: the server closes right
    /// after its response, as netserver does in TCP_CRR, so TIME_WAIT stays at the server and
    /// the client's ports are free at once) or `client` (`--rst`, or a server that waits for
    /// the client's close).
    #[serde(default)]
    pub first_close: String,
    /// Time connect() took (SYN to established at the client), microseconds.
    pub connect_time: LatencyStats,
    /// Time of the whole transaction: socket, connect, request, response and close,
    /// microseconds.
    pub transaction_time: LatencyStats,
    /// The connect-time distribution (`--histogram`), else empty.
    pub histogram: Vec<HistogramBucket>,
    /// Each kind of failure with its count, in words (e.g. "connection refused: 3").
    pub errors: Vec<String>,
    /// The server's own counts, where the server reports them.
    pub server: Option<ConnectServerCounts>,
}

impl crate::kind::Kind for ConnectSpec {
    fn name(&self) -> &'static str {
        "connect"
    }
    fn validate(&self) -> Result<(), SpecError> {
        ConnectSpec::validate(self)
    }
    fn common(&self) -> crate::kind::Common<'_> {
        crate::kind::Common {
            flows: self.connectors,
            amount: crate::Amount::Time(self.duration),
            interval: self.interval,
            stall_timeout: self.connect_timeout,
            length: self.request,
            server_affinity: &self.server_affinity,
            ..Default::default()
        }
    }
    /// Request and response per open connection; the server caps those.
    fn server_memory(&self, _cpus: usize) -> u64 {
        4 << 20
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_spec_is_valid() {
        ConnectSpec::default().validate().unwrap();
        assert_eq!(ConnectSpec::default().close_name(), "fin");
    }

    #[test]
    fn limits_name_the_flag() {
        let flag = |s: &ConnectSpec| s.validate().unwrap_err().0;
        let mut s = ConnectSpec {
            connectors: 0,
            ..ConnectSpec::default()
        };
        assert!(flag(&s).contains("-P/--parallel"));
        s.connectors = 1025;
        assert!(flag(&s).contains("-P/--parallel"));
        s.connectors = 1024;
        s.validate().unwrap();
        s.duration = Dur::from_secs(0);
        assert!(flag(&s).contains("-t/--time"));
        s.duration = Dur::from_secs(90_000);
        assert!(flag(&s).contains("-t/--time"));
        s.duration = Dur::from_secs(1);
        s.request = Bytes(0);
        assert!(flag(&s).contains("--request"));
        s.request = Bytes(65_537);
        assert!(flag(&s).contains("--request"));
        s.request = Bytes(65_536);
        s.validate().unwrap();
        s.response = Bytes(0);
        assert!(flag(&s).contains("--response"));
        s.response = Bytes(1);
        s.interval = Dur(std::time::Duration::from_millis(5));
        assert!(flag(&s).contains("-i/--interval"));
        s.interval = Dur::from_secs(0);
        s.validate().unwrap();
        s.server_affinity = vec![5000];
        assert!(flag(&s).contains("--server-affinity"));
        s.server_affinity = vec![0, 1];
        s.connect_timeout = Dur::from_secs(0);
        assert!(flag(&s).contains("--connect-timeout"));
        s.connect_timeout = Dur::from_secs(1);
        s.rst = true;
        s.validate().unwrap();
        assert_eq!(s.close_name(), "rst");
    }

    #[test]
    fn spec_round_trips_and_defaults_histogram() {
        let s = ConnectSpec {
            connectors: 4,
            rst: true,
            request: Bytes(100),
            ..ConnectSpec::default()
        };
        let mut j = serde_json::to_value(&s).unwrap();
        assert_eq!(serde_json::from_value::<ConnectSpec>(j.clone()).unwrap(), s);
        // A peer that does not know --histogram leaves it out.
        j.as_object_mut().unwrap().remove("histogram");
        assert!(!serde_json::from_value::<ConnectSpec>(j).unwrap().histogram);
    }
}
