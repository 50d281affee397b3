//! `hakaru tcp`: TCP bulk-transfer throughput.

use hakaru_model::{BitRate, Bytes, TcpSpec, TestSpec};

use super::common::{run_and_print, Endpoint, Iperf3Peer, Shape, Target, UsageError};
use super::netperf::NetperfPeer;

/// Options of `hakaru tcp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    peer: Iperf3Peer,
    #[command(flatten)]
    netperf: NetperfPeer,
    /// The server is a stock ntttcp-for-linux receiver (`ntttcp -r`): sync on PORT - 1 and
    /// send flow i to data port PORT + i (PORT: -p, default 5001), as `ntttcp -s -m P,*,HOST`.
    /// ntttcp carries no results, so the receiver figures are this end's sender view; the
    /// receiver prints its own total.
    #[arg(long, conflicts_with = "iperf3")]
    ntttcp: bool,
    /// Bytes per write and per read.
    #[arg(short, long, value_name = "SIZE", default_value = "1M")]
    length: Bytes,
    /// TCP maximum segment size.
    #[arg(short = 'M', long, value_name = "BYTES")]
    mss: Option<u32>,
    /// Congestion control algorithm on both ends (cubic, bbr, reno, ...).
    #[arg(short = 'C', long, value_name = "ALGO")]
    congestion: Option<String>,
    /// Set TCP_NODELAY on both ends.
    #[arg(short = 'N', long)]
    no_delay: bool,
    /// Receivers discard data with MSG_TRUNC instead of copying it (measures the network and
    /// sender, not the receiver's copy; labelled in the output).
    #[arg(long)]
    discard: bool,
    /// Senders use sendfile from an in-memory file instead of copying (labelled in the output).
    #[arg(short = 'Z', long)]
    zerocopy: bool,
    /// Pace each flow to this payload rate (50M, 2.5G): the kernel paces the socket
    /// (SO_MAX_PACING_RATE) and the sender keeps to the rate on average; the output says which.
    #[arg(short = 'b', long, value_name = "RATE")]
    bitrate: Option<BitRate>,
    /// Pace the client -> server flows to this rate instead of -b (with --bidir).
    #[arg(long, value_name = "RATE")]
    bitrate_up: Option<BitRate>,
    /// Pace the server -> client flows to this rate instead of -b (with --bidir or -R).
    #[arg(long, value_name = "RATE")]
    bitrate_down: Option<BitRate>,
    /// Data connections use Multipath TCP (IPPROTO_MPTCP) at both ends (Linux 5.6+ with
    /// net.mptcp.enabled = 1); the result says whether each flow ran MPTCP and over how many
    /// subflows.
    #[arg(long)]
    mptcp: bool,
    #[command(flatten)]
    probe: super::probe::ProbeArgs,
}

impl Args {
    /// Checks what clap cannot and builds the spec both ends run.
    fn spec(&self) -> anyhow::Result<TcpSpec> {
        self.target.check("tcp")?;
        if self.mptcp && self.netperf.netperf {
            return Err(super::common::UsageError(
                "--mptcp is for hakaru servers; netserver's data sockets are plain TCP".into(),
            )
            .into());
        }
        if self.mptcp && self.peer.iperf3 {
            return Err(super::common::UsageError(
                "--mptcp is for hakaru servers; against an iperf3 server run iperf3 -m".into(),
            )
            .into());
        }
        let peer = if self.peer.iperf3 {
            Some("an iperf3 server")
        } else if self.ntttcp {
            Some("an ntttcp receiver")
        } else {
            None
        };
        let latency_probe = self.probe.probe(peer)?;
        let sh = &self.shape;
        let spec = TcpSpec {
            flows: sh.parallel,
            direction: sh.direction(),
            amount: sh.amount(),
            omit: sh.omit,
            interval: sh.interval,
            length: self.length,
            window: sh.window,
            mss: self.mss,
            congestion: self.congestion.clone(),
            nodelay: self.no_delay,
            tos: sh.tos(),
            discard: self.discard,
            zerocopy: self.zerocopy,
            server_affinity: sh.server_affinity(),
            stall_timeout: sh.stall_timeout,
            rate: self.bitrate_up.or(self.bitrate).filter(|b| b.0 > 0.0),
            rate_down: self.bitrate_down.filter(|b| b.0 > 0.0),
            mptcp: self.mptcp,
            latency_probe,
        };
        spec.validate()
            .map_err(|e| super::common::UsageError(e.0))?;
        Ok(spec)
    }
}

/// Runs the test and prints the result in the chosen format.
pub fn run(mut a: Args) -> anyhow::Result<()> {
    a.target.iperf3 = a.peer.iperf3;
    a.target.ntttcp = a.ntttcp;
    a.netperf.apply(&mut a.target);
    if a.ntttcp && a.netperf.netperf {
        return Err(
            UsageError("--netperf and --ntttcp name different servers: give one".into()).into(),
        );
    }
    let spec = a.spec()?;
    if a.ntttcp {
        return run_ntttcp(&a.target, TestSpec::Tcp(spec));
    }
    a.target.run(TestSpec::Tcp(spec))
}

/// `hakaru tcp --ntttcp`: HOST (loopback without one) at the receiver's first data port
/// (ntttcp's 5001 unless -p or HOST:PORT gives one).
fn run_ntttcp(target: &Target, spec: TestSpec) -> anyhow::Result<()> {
    if target.sync_start {
        return Err(UsageError(
            "--sync-start needs a hakaru server: an ntttcp receiver cannot hold its start (drop --ntttcp)".into(),
        )
        .into());
    }
    let given = target.host_port()?;
    let host = given
        .as_ref()
        .map_or_else(|| target.loopback().to_string(), |(h, _)| h.clone());
    let port = match (target.port_given(), given) {
        (true, Some((_, p))) => p,
        (true, None) => target.port.unwrap_or(hakaru_client::NTTTCP_DEFAULT_PORT),
        (false, _) => hakaru_client::NTTTCP_DEFAULT_PORT,
    };
    let opts = target.options(&Endpoint::remote(host, port), spec);
    run_and_print(target, &opts, false)
}
