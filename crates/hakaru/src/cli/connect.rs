//! `hakaru connect`: connections per second, netperf TCP_CRR style.

use hakaru_model::{Bytes, ConnectSpec, Dur, TestSpec};

use super::common::{CpuList, Target};
use super::netperf::NetperfPeer;

/// Options of `hakaru connect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Test length (10, 30s, 500ms).
    #[arg(short, long, value_name = "TIME", default_value = "10")]
    time: Dur,
    /// Concurrent connectors (1 to 1024), each with one connection open at a time.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    parallel: u32,
    /// Bytes the client sends on each connection (1 to 64K).
    #[arg(long, value_name = "SIZE", default_value = "1")]
    request: Bytes,
    /// Bytes the server answers with on each connection (1 to 64K).
    #[arg(long, value_name = "SIZE", default_value = "1")]
    response: Bytes,
    /// The client closes first, with RST (SO_LINGER 0): no socket waits in TIME_WAIT at either
    /// end. Without it the server closes each connection with FIN right after its response,
    /// as netserver does in TCP_CRR, and keeps the TIME_WAIT; the client's ports stay free.
    #[arg(long)]
    rst: bool,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    interval: Dur,
    /// Pin the server's accept workers to these CPUs, one worker each.
    #[arg(long, value_name = "CPUS")]
    server_affinity: Option<CpuList>,
    /// Print the connect-time distribution (in the JSON result too).
    #[arg(long)]
    histogram: bool,
    #[command(flatten)]
    netperf: NetperfPeer,
}

/// Runs `hakaru connect`.
pub fn run(mut a: Args) -> anyhow::Result<()> {
    a.netperf.apply(&mut a.target);
    a.target.check("connect")?;
    let spec = ConnectSpec {
        connectors: a.parallel,
        duration: a.time,
        request: a.request,
        response: a.response,
        rst: a.rst,
        interval: a.interval,
        server_affinity: a.server_affinity.map(|c| c.0).unwrap_or_default(),
        connect_timeout: a.target.connect_timeout,
        histogram: a.histogram,
    };
    spec.validate()
        .map_err(|e| super::common::UsageError(e.0))?;
    a.target.run(TestSpec::Connect(spec))
}
