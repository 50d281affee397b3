//! `hakaru udp` (UDP at a rate, with loss and jitter) and `hakaru pps` (maximum packet rate):
//! one spec type, two sets of defaults.

use hakaru_model::{
    BitRate, Bytes, TestSpec, UdpMode, UdpRate, UdpSpec, DEFAULT_PPS_LENGTH, DEFAULT_UDP_LENGTH_V4,
    DEFAULT_UDP_LENGTH_V6, MAX_BATCH,
};

use super::common::{Iperf3Peer, Shape, Target};

/// Flags `udp` and `pps` share.
#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    peer: Iperf3Peer,
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
}

impl Common {
    fn spec(&mut self, mode: UdpMode, length: Bytes, rate: UdpRate) -> anyhow::Result<UdpSpec> {
        self.target.iperf3 = self.peer.iperf3;
        self.target.check(match mode {
            UdpMode::Bandwidth => "udp",
            UdpMode::Pps => "pps",
        })?;
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
    #[arg(short = 'b', long, value_name = "RATE", default_value = "1M")]
    bitrate: BitRate,
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
    #[arg(long, value_name = "PPS", conflicts_with = "bitrate")]
    rate: Option<f64>,
    /// Fixed payload rate per flow instead of a packet rate (0 = as fast as possible).
    #[arg(short = 'b', long, value_name = "RATE")]
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
    let rate = if a.bitrate.0 <= 0.0 {
        UdpRate::Unlimited
    } else {
        UdpRate::Bits(a.bitrate)
    };
    let spec = a.common.spec(UdpMode::Bandwidth, length, rate)?;
    a.common.target.run(TestSpec::Udp(spec))
}

/// Runs `hakaru pps`.
pub fn run_pps(mut a: PpsArgs) -> anyhow::Result<()> {
    let rate = match (a.rate, a.bitrate) {
        (Some(p), _) => UdpRate::Packets(p),
        (None, Some(b)) if b.0 > 0.0 => UdpRate::Bits(b),
        _ => UdpRate::Unlimited,
    };
    let spec = a.common.spec(UdpMode::Pps, a.length, rate)?;
    a.common.target.run(TestSpec::Udp(spec))
}
