//! `hakaru tcp`: TCP bulk-transfer throughput.

use hakaru_model::{Amount, Bytes, Direction, Dur, TcpSpec, TestSpec};

use super::common::{parse_u8, CpuList, Target};

/// Options of `hakaru tcp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Test length after the warm-up (10, 30s, 500ms).
    #[arg(short, long, value_name = "TIME", conflicts_with_all = ["bytes", "blocks"])]
    time: Option<Dur>,
    /// Send exactly this many bytes per direction, split over the flows (128K, 1G), instead of a time.
    #[arg(short = 'n', long, value_name = "SIZE", conflicts_with = "blocks")]
    bytes: Option<Bytes>,
    /// Send exactly this many blocks of --length bytes per direction, instead of a time.
    #[arg(short = 'k', long, value_name = "N")]
    blocks: Option<u64>,
    /// Parallel flows per direction (1 to 1024).
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    parallel: u32,
    /// Reverse: the server sends, the client receives (the "receive direction").
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    reverse: bool,
    /// Both directions at once: --parallel flows each way.
    #[arg(long)]
    bidir: bool,
    /// Bytes per write and per read.
    #[arg(short, long, value_name = "SIZE", default_value = "1M")]
    length: Bytes,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends; disables autotuning.
    #[arg(short, long, value_name = "SIZE")]
    window: Option<Bytes>,
    /// TCP maximum segment size.
    #[arg(short = 'M', long, value_name = "BYTES")]
    mss: Option<u32>,
    /// Congestion control algorithm on both ends (cubic, bbr, reno, ...).
    #[arg(short = 'C', long, value_name = "ALGO")]
    congestion: Option<String>,
    /// Set TCP_NODELAY on both ends.
    #[arg(short = 'N', long)]
    no_delay: bool,
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
    /// Receivers discard data with MSG_TRUNC instead of copying it (measures the network and
    /// sender, not the receiver's copy; labelled in the output).
    #[arg(long)]
    discard: bool,
    /// Senders use sendfile from an in-memory file instead of copying (labelled in the output).
    #[arg(short = 'Z', long)]
    zerocopy: bool,
    /// A flow that makes no progress for this long fails (a peer that stopped reading).
    #[arg(long, value_name = "TIME", default_value = "10")]
    stall_timeout: Dur,
}

impl Args {
    /// Checks what clap cannot and builds the spec both ends run.
    fn spec(&self) -> anyhow::Result<TcpSpec> {
        let amount = match (self.time, self.bytes, self.blocks) {
            (_, Some(b), _) => Amount::Bytes(b),
            (_, _, Some(k)) => Amount::Blocks(k),
            (Some(t), _, _) => Amount::Time(t),
            _ => Amount::Time(Dur::from_secs(10)),
        };
        self.target.check()?;
        let spec = TcpSpec {
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
            length: self.length,
            window: self.window,
            mss: self.mss,
            congestion: self.congestion.clone(),
            nodelay: self.no_delay,
            tos: self.tos.or(self.dscp.map(|d| d << 2)),
            discard: self.discard,
            zerocopy: self.zerocopy,
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

/// Runs the test and prints the result in the chosen format.
pub fn run(a: Args) -> anyhow::Result<()> {
    let spec = a.spec()?;
    a.target.run(TestSpec::Tcp(spec))
}
