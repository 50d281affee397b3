//! Latency probes inside a bulk test (`hakaru tcp|udp --latency-probe`): a round-trip flow of
//! its own beside the bulk flows, to the same server, first alone for an idle baseline and
//! then while the load runs (docs/latency-under-load.md).

use serde::{Deserialize, Serialize};

use crate::latency_base::{LatencyInterval, LatencyStats, LatencyTransport};
use crate::units::Dur;

/// Default probes per second.
pub const DEFAULT_PROBE_RATE: f64 = 20.0;
/// Fewest probes per second.
pub const MIN_PROBE_RATE: f64 = 10.0;
/// Most probes per second.
pub const MAX_PROBE_RATE: f64 = 100.0;
/// Bytes of each probe and its reply (hakaru's datagram header and padding, as `ping`'s 64).
pub const PROBE_LENGTH: u64 = 64;
/// Default length of the idle baseline before the load starts.
pub const DEFAULT_PROBE_BASELINE_MS: u64 = 2000;
/// A probe without a reply for this long is lost (UDP) or ends the probe flow (TCP).
pub const PROBE_TIMEOUT_MS: u64 = 2000;

/// The probes a bulk test runs beside its flows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyProbe {
    /// Probes per second (10 to 100), sent on a fixed schedule (open loop).
    pub rate: f64,
    /// The probe flow's transport: UDP (default) or TCP with TCP_NODELAY.
    pub transport: LatencyTransport,
    /// How long the probes run alone before the load starts (the idle baseline).
    pub baseline: Dur,
}

impl Default for LatencyProbe {
    fn default() -> Self {
        LatencyProbe {
            rate: DEFAULT_PROBE_RATE,
            transport: LatencyTransport::Udp,
            baseline: Dur(std::time::Duration::from_millis(DEFAULT_PROBE_BASELINE_MS)),
        }
    }
}

impl LatencyProbe {
    /// Checks every limit; the message names the flag.
    pub fn validate(&self) -> Result<(), crate::SpecError> {
        if !(self.rate.is_finite() && (MIN_PROBE_RATE..=MAX_PROBE_RATE).contains(&self.rate)) {
            return Err(crate::SpecError(format!(
                "--latency-probe must be between {MIN_PROBE_RATE} and {MAX_PROBE_RATE} probes per second, got {}",
                self.rate
            )));
        }
        let b = self.baseline.secs_f64();
        if !(0.5..=10.0).contains(&b) {
            return Err(crate::SpecError(format!(
                "--latency-probe-baseline must be between 0.5 and 10 s, got {}",
                self.baseline
            )));
        }
        Ok(())
    }
}

/// How much the probe round trip grew under load: loaded minus idle, microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeIncrease {
    /// Median, loaded minus idle.
    pub p50_us: f64,
    /// 90th percentile, loaded minus idle.
    pub p90_us: f64,
    /// 99th percentile, loaded minus idle.
    pub p99_us: f64,
}

impl ProbeIncrease {
    /// Loaded minus idle, percentile by percentile.
    pub fn between(idle: &LatencyStats, loaded: &LatencyStats) -> ProbeIncrease {
        ProbeIncrease {
            p50_us: loaded.p50_us - idle.p50_us,
            p90_us: loaded.p90_us - idle.p90_us,
            p99_us: loaded.p99_us - idle.p99_us,
        }
    }
}

/// What the latency probes of a bulk test measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeResult {
    /// `udp` or `tcp`.
    pub transport: LatencyTransport,
    /// Probes per second asked for.
    pub rate: f64,
    /// Bytes of each probe and reply.
    pub length: u64,
    /// Seconds the probes ran alone before the load (the idle baseline).
    pub baseline_seconds: f64,
    /// Round trips of the idle baseline.
    pub idle: LatencyInterval,
    /// Round trips while the load ran (the omitted warm-up left out).
    pub loaded: LatencyInterval,
    /// Loaded minus idle.
    pub increase: ProbeIncrease,
    /// Why the probe flow ended early (a TCP probe without a reply within 2 s), if it did;
    /// the bulk test runs on and the figures cover the probes until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_baseline_limits_name_the_flag() {
        assert!(LatencyProbe::default().validate().is_ok());
        for rate in [9.9, 100.1, f64::NAN] {
            let p = LatencyProbe {
                rate,
                ..LatencyProbe::default()
            };
            let e = p.validate().unwrap_err().0;
            assert!(
                e.contains("--latency-probe must be between 10 and 100"),
                "{e}"
            );
        }
        let p = LatencyProbe {
            baseline: Dur::from_secs(11),
            ..LatencyProbe::default()
        };
        assert!(p
            .validate()
            .unwrap_err()
            .0
            .contains("--latency-probe-baseline"));
    }

    #[test]
    fn increase_is_loaded_minus_idle() {
        let idle = LatencyStats {
            p50_us: 100.0,
            p90_us: 150.0,
            p99_us: 300.0,
            ..LatencyStats::default()
        };
        let loaded = LatencyStats {
            p50_us: 100_100.0,
            p90_us: 100_200.0,
            p99_us: 101_300.0,
            ..LatencyStats::default()
        };
        let d = ProbeIncrease::between(&idle, &loaded);
        assert_eq!(
            (d.p50_us, d.p90_us, d.p99_us),
            (100_000.0, 100_050.0, 101_000.0)
        );
    }
}
