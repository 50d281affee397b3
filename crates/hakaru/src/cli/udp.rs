//! `hakaru udp` (UDP at a rate, with loss and jitter) and `hakaru pps` (maximum packet rate):
//! one spec type, two sets of defaults.

use hakaru_model::{
    Amount, BitRate, Bytes, Direction, Dur, TestSpec, UdpMode, UdpRate, UdpSpec,
    DEFAULT_PPS_LENGTH, DEFAULT_UDP_LENGTH_V4, DEFAULT_UDP_LENGTH_V6, MAX_BATCH,
};

use super::common::{parse_u8, CpuList, Target};

/// Flags `udp` and `pps` share.
#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    target: Target,
    /// Test length after the warm-up (10, 30s, 500ms).
    #[arg(short, long, value_name = "TIME", conflicts_with_all = ["bytes", "blocks"])]
    time: Option<Dur>,
    /// Send this many bytes per direction (rounded up to whole datagrams), split over the flows.
    #[arg(short = 'n', long, value_name = "SIZE", conflicts_with = "blocks")]
    bytes: Option<Bytes>,
    /// Send exactly this many datagrams per direction, split over the flows.
    #[arg(short = 'k', long, value_name = "N")]
    blocks: Option<u64>,
    /// Parallel flows per direction (1 to 1024), each from its own source port (its own 5-tuple).
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    parallel: u32,
    /// Reverse: the server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    reverse: bool,
    /// Both directions at once: --parallel flows each way.
    #[arg(long)]
    bidir: bool,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends; by default receivers ask
    /// for 4 MiB (capped by net.core.rmem_max).
    #[arg(short, long, value_name = "SIZE")]
    window: Option<Bytes>,
    /// IP TOS byte (0-255, also 0x..), both ends.
    #[arg(long, value_parser = parse_u8, conflicts_with = "dscp")]
    tos: Option<u8>,
    /// DSCP code point (0-63), both ends; sets TOS to DSCP << 2.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=63))]
    dscp: Option<u8>,
    /// Warm-up not counted in the totals (shown as omitted), added before --time.
    #[arg(short = 'O', long, value_name = "TIME", default_value = "0")]
    omit: Dur,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    interval: Dur,
    /// Pin the server's flow workers to these CPUs, round robin.
    #[arg(long, value_name = "CPUS")]
    server_affinity: Option<CpuList>,
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
    /// A sender that cannot send for this long fails.
    #[arg(long, value_name = "TIME", default_value = "10")]
    stall_timeout: Dur,
}

impl Common {
    fn spec(&self, mode: UdpMode, length: Bytes, rate: UdpRate) -> anyhow::Result<UdpSpec> {
        self.target.check()?;
        let amount = match (self.time, self.bytes, self.blocks) {
            (_, Some(b), _) => Amount::Bytes(b),
            (_, _, Some(k)) => Amount::Blocks(k),
            (Some(t), _, _) => Amount::Time(t),
            _ => Amount::Time(Dur::from_secs(10)),
        };
        let spec = UdpSpec {
            mode,
            flows: self.parallel,
            direction: if self.reverse {
                Direction::Reverse
            } else if self.bidir {
                Direction::Bidir
            } else {
                Direction::Forward
            },
            amount,
            omit: self.omit,
            interval: self.interval,
            length,
            rate,
            window: self.window,
            tos: self.tos.or(self.dscp.map(|d| d << 2)),
            gso: !self.no_gso,
            gro: self.gro,
            batch: self.batch,
            server_affinity: self
                .server_affinity
                .clone()
                .map(|c| c.0)
                .unwrap_or_default(),
            stall_timeout: self.stall_timeout,
        };
        spec.validate().map_err(|e| anyhow::anyhow!(e.0))?;
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
pub fn run_udp(a: UdpArgs) -> anyhow::Result<()> {
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
pub fn run_pps(a: PpsArgs) -> anyhow::Result<()> {
    let rate = match (a.rate, a.bitrate) {
        (Some(p), _) => UdpRate::Packets(p),
        (None, Some(b)) if b.0 > 0.0 => UdpRate::Bits(b),
        _ => UdpRate::Unlimited,
    };
    let spec = a.common.spec(UdpMode::Pps, a.length, rate)?;
    a.common.target.run(TestSpec::Udp(spec))
}
