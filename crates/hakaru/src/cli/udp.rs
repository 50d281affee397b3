//! `hakaru udp` (UDP at a rate, with loss and jitter) and `hakaru pps` (maximum packet rate):
//! one spec type, two sets of defaults.

use hakaru_model::{
    BitRate, Bytes, Dur, ServerPorts, TestSpec, UdpMode, UdpRate, UdpSpec, DEFAULT_PPS_LENGTH,
    DEFAULT_UDP_LENGTH_V4, DEFAULT_UDP_LENGTH_V6, MAX_BATCH,
};

use super::common::{Iperf3Peer, Shape, Target};
use super::netperf::NetperfPeer;

/// Flags `udp` and `pps` share.
#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    peer: Iperf3Peer,
    #[command(flatten)]
    netperf: NetperfPeer,
    /// Do not use UDP GSO (one send call carrying many datagrams); send with sendmmsg instead.
    #[arg(long)]
    no_gso: bool,
    /// Receive with UDP GRO. On loopback the kernel then never splits GSO batches, so the
    /// packet rate shown is not a wire rate (labelled in the output).
    #[arg(long)]
    gro: bool,
    /// Most datagrams per send or receive system call (1 to 64).
    #[arg(long, value_name = "N", default_value_t = MAX_BATCH)]
    batch: u32,
    /// Give each flow a UDP port of its own on the server instead of sharing the server's
    /// port (iperf3's way). Linux then finds every flow's socket without a full lookup, which
    /// it does for only one of the sockets sharing a port; a firewall in front of the server
    /// must pass its ephemeral UDP ports. A Windows server always does this.
    #[arg(long)]
    port_per_flow: bool,
    #[command(flatten)]
    search: SearchFlags,
    #[command(flatten)]
    probe: super::probe::ProbeArgs,
}

/// `--find-max` and its knobs.
#[derive(Debug, clap::Args)]
pub struct SearchFlags {
    /// Find the highest send rate whose loss stays within --loss: a ramp (doubling) to the
    /// first miss, then a binary search to --precision, the best rate repeated to confirm it;
    /// each trial is a test of its own with a warm-up (-O, default 0.5 s). At most 44 trials.
    #[arg(long, conflicts_with_all = ["time", "bytes", "blocks", "iperf3", "sync_start"])]
    find_max: bool,
    // No `default_value` on the knobs below: clap's `requires` counts a defaulted flag as
    // present, so the knobs alone would be accepted. The defaults are applied in `run_find_max`.
    /// --find-max: most loss a rate may have, percent (0.1%, 0.5) [default: 0.1%].
    #[arg(long, value_name = "PERCENT", value_parser = parse_loss, requires = "find_max")]
    loss: Option<f64>,
    /// --find-max: measured time of each trial [default: 2].
    #[arg(long, value_name = "TIME", requires = "find_max")]
    trial: Option<Dur>,
    /// --find-max: stop when the best rate and the first miss are this close [default: 1%].
    #[arg(long, value_name = "PERCENT", value_parser = parse_loss, requires = "find_max")]
    precision: Option<f64>,
}

/// `--loss` when not given, percent.
const DEFAULT_LOSS: f64 = 0.1;
/// `--precision` when not given, percent.
const DEFAULT_PRECISION: f64 = 1.0;
/// `--trial` when not given.
const DEFAULT_TRIAL: std::time::Duration = std::time::Duration::from_secs(2);

/// A percentage such as `0.1%` or `0.1` (both 0.1 %), from 0 to 100.
fn parse_loss(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%').trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a percentage from 0 to 100")),
    }
}

impl Common {
    fn spec(
        &mut self,
        mode: UdpMode,
        length: Bytes,
        rate: UdpRate,
        rate_down: Option<UdpRate>,
    ) -> anyhow::Result<UdpSpec> {
        self.target.iperf3 = self.peer.iperf3;
        self.netperf.apply(&mut self.target);
        if self.netperf.netperf && self.search.find_max {
            return Err(super::common::UsageError(
                "--find-max searches against a hakaru server; drop --netperf".into(),
            )
            .into());
        }
        self.target.check(match mode {
            UdpMode::Bandwidth => "udp",
            UdpMode::Pps => "pps",
        })?;
        let peer = self.peer.iperf3.then_some("an iperf3 server");
        let latency_probe = self.probe.probe(peer)?;
        if latency_probe.is_some() && self.search.find_max {
            return Err(super::common::UsageError(
                "--latency-probe cannot be used with --find-max: each trial is a test of its own"
                    .into(),
            )
            .into());
        }
        let sh = &self.shape;
        let spec = UdpSpec {
            mode,
            flows: sh.parallel,
            direction: sh.direction(),
            amount: sh.amount(),
            omit: sh.omit,
            interval: sh.interval,
            length,
            rate,
            window: sh.window,
            tos: sh.tos(),
            gso: !self.no_gso,
            gro: self.gro,
            batch: self.batch,
            server_affinity: sh.server_affinity(),
            stall_timeout: sh.stall_timeout,
            rate_down,
            server_ports: if self.port_per_flow {
                ServerPorts::PerFlow
            } else {
                ServerPorts::Shared
            },
            latency_probe,
        };
        spec.validate()
            .map_err(|e| super::common::UsageError(e.0))?;
        Ok(spec)
    }
}

/// Options of `hakaru udp`.
#[derive(Debug, clap::Args)]
pub struct UdpArgs {
    #[command(flatten)]
    common: Common,
    /// Target payload rate per flow (1M, 2.5G); 0 sends as fast as possible.
    #[arg(
        short = 'b',
        long,
        value_name = "RATE",
        default_value = "1M",
        conflicts_with = "find_max"
    )]
    bitrate: BitRate,
    /// Client -> server rate per flow instead of -b (with --bidir).
    #[arg(long, value_name = "RATE", conflicts_with = "find_max")]
    bitrate_up: Option<BitRate>,
    /// Server -> client rate per flow instead of -b (with --bidir or -R).
    #[arg(long, value_name = "RATE", conflicts_with = "find_max")]
    bitrate_down: Option<BitRate>,
    /// UDP payload bytes per datagram (16 to 65507); default 1472, or 1452 over IPv6, which
    /// fills a 1500-byte MTU.
    #[arg(short, long, value_name = "BYTES")]
    length: Option<Bytes>,
}

/// Options of `hakaru pps`.
#[derive(Debug, clap::Args)]
pub struct PpsArgs {
    #[command(flatten)]
    common: Common,
    /// Fixed packet rate per flow, datagrams per second; default: as fast as possible.
    #[arg(long, value_name = "PPS", conflicts_with_all = ["bitrate", "find_max"])]
    rate: Option<f64>,
    /// Client -> server packet rate per flow instead of --rate (with --bidir).
    #[arg(long, value_name = "PPS", conflicts_with_all = ["bitrate", "find_max"])]
    rate_up: Option<f64>,
    /// Server -> client packet rate per flow instead of --rate (with --bidir or -R).
    #[arg(long, value_name = "PPS", conflicts_with_all = ["bitrate", "find_max"])]
    rate_down: Option<f64>,
    /// Fixed payload rate per flow instead of a packet rate (0 = as fast as possible).
    #[arg(short = 'b', long, value_name = "RATE", conflicts_with = "find_max")]
    bitrate: Option<BitRate>,
    /// UDP payload bytes per datagram (1 to 65507). Under 8 bytes there is no room for a
    /// sequence number: datagrams are counted, not sequenced.
    #[arg(short, long, value_name = "BYTES", default_value_t = Bytes(DEFAULT_PPS_LENGTH))]
    length: Bytes,
}

/// Runs `hakaru udp`.
pub fn run_udp(mut a: UdpArgs) -> anyhow::Result<()> {
    let length = a.length.unwrap_or(Bytes(if a.common.target.looks_ipv6() {
        DEFAULT_UDP_LENGTH_V6
    } else {
        DEFAULT_UDP_LENGTH_V4
    }));
    let bits = |b: BitRate| {
        if b.0 <= 0.0 {
            UdpRate::Unlimited
        } else {
            UdpRate::Bits(b)
        }
    };
    let rate = bits(a.bitrate_up.unwrap_or(a.bitrate));
    let rate_down = a.bitrate_down.map(bits);
    let spec = a.common.spec(UdpMode::Bandwidth, length, rate, rate_down)?;
    if a.common.search.find_max {
        // Payload bit/s per flow: from 10 Mbit/s up to 100 Gbit/s.
        return run_find_max(&a.common, spec, 10e6, 100e9);
    }
    a.common.target.run(TestSpec::Udp(spec))
}

/// Runs `hakaru pps`.
pub fn run_pps(mut a: PpsArgs) -> anyhow::Result<()> {
    let rate = match (a.rate_up.or(a.rate), a.bitrate) {
        (Some(p), _) => UdpRate::Packets(p),
        (None, Some(b)) if b.0 > 0.0 => UdpRate::Bits(b),
        _ => UdpRate::Unlimited,
    };
    let rate_down = a.rate_down.map(UdpRate::Packets);
    let spec = a.common.spec(UdpMode::Pps, a.length, rate, rate_down)?;
    if a.common.search.find_max {
        // Datagrams per second per flow: from 10000 up to 100 million.
        return run_find_max(&a.common, spec, 1e4, 1e8);
    }
    a.common.target.run(TestSpec::Udp(spec))
}

/// `--find-max`: runs the search and prints each trial and the result.
fn run_find_max(c: &Common, spec: UdpSpec, start: f64, ceiling: f64) -> anyhow::Result<()> {
    use crate::output::out;
    use hakaru_report::export::{DocKind, Document, LiveItem};
    let format = c.target.format();
    // A format without a form of the search: "--find-max prints text, json or json-stream".
    format.check(DocKind::FindMax)?;
    let sh = &c.shape;
    let fm = hakaru_client::find_max::FindMax {
        loss_percent: c.search.loss.unwrap_or(DEFAULT_LOSS),
        precision: (c.search.precision.unwrap_or(DEFAULT_PRECISION) / 100.0).max(0.001),
        trial: c.search.trial.map_or(DEFAULT_TRIAL, |t| t.0),
        warmup: if sh.omit.is_zero() {
            std::time::Duration::from_millis(500)
        } else {
            sh.omit.0
        },
        start,
        ceiling,
    };
    if fm.trial.is_zero() {
        return Err(super::common::UsageError("--trial must be more than 0".into()).into());
    }
    let test = TestSpec::Udp(spec.clone());
    let ep = c.target.endpoint(&test)?;
    let opts = c.target.options(&ep, test);
    let stop = super::common::stop_flag()?;
    let kind = match spec.mode {
        UdpMode::Pps => "pps",
        UdpMode::Bandwidth => "udp",
    };
    let unit = if spec.mode == UdpMode::Pps {
        "datagrams/s"
    } else {
        "bit/s"
    };
    let view = c.target.view.view();
    let mut live = format.live(view);
    if let Some(s) = live.item(&LiveItem::SearchStart {
        kind,
        server: &format!("{}:{}", ep.host(), opts.port),
        flows: spec.flows,
        loss_percent: fm.loss_percent,
        trial_s: fm.trial.as_secs_f64(),
        warmup_s: fm.warmup.as_secs_f64(),
    }) {
        out(&s);
    }
    let mut progress = crate::output::Progress::new(format.quiet_while_running(&view, false));
    let mut on_trial = |t: &hakaru_model::capacity::Trial| {
        if let Some(s) = live.item(&LiveItem::Trial { trial: t, unit }) {
            progress.suspend(|| out(&s));
        }
    };
    progress.step(format!("{kind} --find-max"));
    progress.started(None);
    let r = hakaru_client::find_max::find_max(&opts, &spec, &fm, &mut on_trial, stop);
    progress.finish();
    crate::output::print(format, view, &Document::FindMax(&r))?;
    c.target.files.write_find_max(&r)?;
    if let Some(e) = r.trials.iter().find_map(|t| t.error.clone()) {
        anyhow::bail!("a trial failed: {e}");
    }
    Ok(())
}
