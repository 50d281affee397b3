//! `--latency-probe` of `hakaru tcp` and `hakaru udp`: round-trip probes beside the bulk flows.

use hakaru_model::{Dur, LatencyProbe, LatencyTransport, DEFAULT_PROBE_RATE};

use super::common::UsageError;

/// The probe flags, shared by `tcp` and `udp`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// Round-trip probes on a flow of their own beside the bulk flows, RATE a second (10 to
    /// 100, default 20), open loop: first alone for an idle baseline (2 s), then while the
    /// load runs. Each interval line gains the probes' RTT percentiles; the end gives the
    /// idle and loaded figures and the increase under load (docs/latency-under-load.md).
    #[arg(
        long,
        value_name = "RATE",
        num_args = 0..=1,
        default_missing_value = "20"
    )]
    latency_probe: Option<f64>,
    /// The probes' transport: udp (default; hakaru's datagram header, as `hakaru latency
    /// --udp`) or tcp (one connection with TCP_NODELAY, which a lost probe stalls).
    #[arg(long, value_name = "PROTO", default_value = "udp", value_parser = ["udp", "tcp"])]
    latency_probe_proto: String,
    /// How long the probes run alone before the load starts (0.5 to 10 s).
    #[arg(long, value_name = "DUR", default_value = "2s")]
    latency_probe_baseline: Dur,
}

impl ProbeArgs {
    /// The probes asked for, checked; `None` without `--latency-probe`. `peer`: the
    /// server is a stock iperf3 or ntttcp (which have no echo), when it is.
    pub fn probe(&self, peer: Option<&str>) -> anyhow::Result<Option<LatencyProbe>> {
        let Some(rate) = self.latency_probe else {
            return Ok(None);
        };
        if let Some(peer) = peer {
            return Err(UsageError(format!(
                "--latency-probe needs a hakaru server (its echo answers the probes); {peer} has none"
            ))
            .into());
        }
        let p = LatencyProbe {
            rate: if rate.is_nan() {
                DEFAULT_PROBE_RATE
            } else {
                rate
            },
            transport: if self.latency_probe_proto == "tcp" {
                LatencyTransport::Tcp
            } else {
                LatencyTransport::Udp
            },
            baseline: self.latency_probe_baseline,
        };
        p.validate().map_err(|e| UsageError(e.0))?;
        Ok(Some(p))
    }
}
