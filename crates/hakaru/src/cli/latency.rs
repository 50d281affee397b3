//! `hakaru latency`: request/response round trips (sockperf pp, netperf TCP_RR/UDP_RR), against
//! a hakaru server or, with `--sockperf`, a stock `sockperf sr`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use hakaru_client::run_test;
use hakaru_engine::Observer;
use hakaru_model::{
    Amount, Bytes, Direction, Dur, FlowDir, LatencyPeer, LatencySpec, LatencyTransport, TcpSpec,
    TestSpec, UnderLoad, DEFAULT_LATENCY_LENGTH,
};

use hakaru_server::{ServerConfig, SOCKPERF_DEFAULT_PORT as SOCKPERF_PORT};

use super::common::{
    embedded_server, run_and_print, stop_flag, CpuList, Endpoint, Target, UsageError,
};
use super::netperf::NetperfPeer;
use crate::output;

/// Options of `hakaru latency`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// UDP instead of TCP (TCP runs with TCP_NODELAY on both ends).
    #[arg(short, long)]
    udp: bool,
    /// Bytes of each request and response (at least 14: flow, sequence number, send time).
    #[arg(short, long, value_name = "BYTES", default_value_t = Bytes(DEFAULT_LATENCY_LENGTH))]
    length: Bytes,
    /// Measured time, after the warm-up (10, 30s).
    #[arg(short, long, value_name = "TIME", default_value = "10")]
    time: Dur,
    /// Warm-up at the start whose round trips are discarded.
    #[arg(long, value_name = "TIME", default_value = "500ms")]
    warmup: Dur,
    /// Parallel ping-pong flows (1 to 256), each with its own connection or source port.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    parallel: u32,
    /// Open loop: this many requests per second per flow, each timed from its scheduled send
    /// time, so a stall shows in the percentiles. Default: closed loop.
    #[arg(long, value_name = "N")]
    rate: Option<f64>,
    /// Both ends busy-poll non-blocking sockets instead of sleeping (lowest latency; costs a
    /// CPU per flow at each end).
    #[arg(long)]
    spin: bool,
    /// SO_BUSY_POLL on both ends' sockets, microseconds (for NICs that support it).
    #[arg(long, value_name = "USECS")]
    busy_poll: Option<u32>,
    /// A request without a reply for this long is lost (UDP) or fails the test (TCP).
    #[arg(long, value_name = "TIME", default_value = "1")]
    timeout: Dur,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    interval: Dur,
    /// Pin the server's echo threads to these CPUs, round robin.
    #[arg(long, value_name = "CPUS")]
    server_affinity: Option<CpuList>,
    /// Write every sample (flow, sequence, send and receive time, round trip in microseconds)
    /// to this CSV file.
    #[arg(long, value_name = "FILE")]
    full_log: Option<PathBuf>,
    /// Print (and put in the JSON) the round-trip distribution.
    #[arg(long)]
    histogram: bool,
    /// Measure idle first, then again while bulk TCP flows run in both directions, and report
    /// both side by side with the load's throughput (what bufferbloat tests show).
    #[arg(long)]
    under_load: bool,
    /// Bulk TCP flows per direction for --under-load.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "under_load")]
    load_flows: u32,
    /// Measure against a stock `sockperf sr` (`sockperf sr --tcp` for TCP) instead of a hakaru
    /// server: requests carry sockperf's header, there is no control connection, and the
    /// server's CPU and NIC figures are absent. -p defaults to sockperf's 11111. Without HOST,
    /// runs against an in-process hakaru server's sockperf port. --spin and --busy-poll then
    /// apply to this end only.
    #[arg(long, conflicts_with_all = ["under_load", "server_affinity"])]
    sockperf: bool,
    #[command(flatten)]
    netperf: NetperfPeer,
}

impl Args {
    fn spec(&self) -> anyhow::Result<LatencySpec> {
        self.target.check("latency")?;
        let spec = LatencySpec {
            transport: if self.udp {
                LatencyTransport::Udp
            } else {
                LatencyTransport::Tcp
            },
            flows: self.parallel,
            length: self.length,
            duration: self.time,
            warmup: self.warmup,
            interval: self.interval,
            rate: self.rate,
            spin: self.spin,
            busy_poll: self.busy_poll,
            timeout: self.timeout,
            server_affinity: self
                .server_affinity
                .clone()
                .map(|c| c.0)
                .unwrap_or_default(),
            peer: if self.sockperf {
                LatencyPeer::Sockperf
            } else {
                LatencyPeer::Hakaru
            },
            server_ports: hakaru_model::ServerPorts::Shared,
        };
        spec.validate()
            .map_err(|e| super::common::UsageError(e.0))?;
        Ok(spec)
    }
}

/// Observes nothing: the idle run and the load of `--under-load` print no live lines.
struct Quiet;
impl Observer for Quiet {}

/// Runs the test and prints the result in the chosen format.
pub fn run(mut a: Args) -> anyhow::Result<()> {
    a.netperf.apply(&mut a.target);
    if a.netperf.netperf && (a.sockperf || a.under_load) {
        return Err(UsageError(format!(
            "--netperf cannot be used with {}",
            if a.sockperf {
                "--sockperf (they name different servers)"
            } else {
                "--under-load (its load needs a hakaru server)"
            }
        ))
        .into());
    }
    let spec = a.spec()?;
    let test = TestSpec::Latency(spec.clone());
    if a.target.sync_start && (a.sockperf || a.under_load) {
        return Err(UsageError(format!(
            "--sync-start cannot be used with {}: it holds one test against a hakaru server",
            if a.sockperf {
                "--sockperf"
            } else {
                "--under-load"
            }
        ))
        .into());
    }
    if a.sockperf {
        return run_sockperf(&a, test);
    }
    if a.netperf.netperf {
        let mut opts = a.target.options(&a.target.netperf_endpoint()?, test);
        opts.full_log = a.full_log.clone();
        opts.histogram = a.histogram;
        return run_and_print(&a.target, &opts, false);
    }
    let ep = a.target.endpoint(&test)?;
    let mut opts = a.target.options(&ep, test);
    opts.full_log = a.full_log.clone();
    opts.histogram = a.histogram;
    if !a.under_load {
        return run_and_print(&a.target, &opts, a.target.sync_start);
    }
    let stop = stop_flag()?;
    let format = a.target.format();
    // 1. Idle.
    let idle = run_test(&opts, &mut Quiet, Arc::clone(&stop)).context("measuring idle latency")?;
    // 2. Bulk TCP both ways for longer than the loaded run; stopped when it is done.
    let load_spec = TestSpec::Tcp(TcpSpec {
        flows: a.load_flows.clamp(1, 64),
        direction: Direction::Bidir,
        amount: Amount::Time(Dur(spec.warmup.0
            + spec.duration.0
            + std::time::Duration::from_secs(3))),
        interval: Dur::default(),
        ..TcpSpec::default()
    });
    let mut load_opts = a.target.options(&ep, load_spec);
    load_opts.full_log = None;
    let load_stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = Arc::clone(&load_stop);
        std::thread::spawn(move || run_test(&load_opts, &mut Quiet, stop))
    };
    // Let the load reach its rate before measuring.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let mut observer = output::observer(format, a.target.view.view());
    let loaded = run_test(&opts, observer.as_mut(), Arc::clone(&stop));
    load_stop.store(true, Ordering::Release);
    let load = load
        .join()
        .map_err(|_| anyhow::anyhow!("the load thread panicked"))?
        .context("running the bulk TCP load for --under-load")?;
    let mut loaded = match loaded {
        Ok(r) => r,
        Err(e) => {
            observer.on_error(&e.to_string());
            return Err(e.into());
        }
    };
    let bps = |dir: FlowDir| {
        load.totals
            .iter()
            .find(|t| t.dir == dir)
            .map_or(0.0, |t| t.receiver.bits_per_second.0)
    };
    if let (Some(l), Some(i)) = (loaded.detail.latency_mut(), idle.detail.latency()) {
        l.under_load = Some(UnderLoad {
            idle_rtt: i.rtt,
            loaded_rtt: l.rtt,
            load_up_bps: bps(FlowDir::Up),
            load_down_bps: bps(FlowDir::Down),
            load_flows: a.load_flows.clamp(1, 64),
        });
    }
    output::finish(format, a.target.view.view(), &loaded)?;
    a.target.files.write(&loaded)
}

/// `--sockperf`: against HOST's `sockperf sr`, or an in-process hakaru server's sockperf port.
fn run_sockperf(a: &Args, test: TestSpec) -> anyhow::Result<()> {
    let mut ep = a.target.endpoint_without_server()?;
    // The embedded server stays up until the test is over.
    let mut _embedded = None;
    if a.target.host.is_none() {
        let ip = a.target.loopback();
        let server = embedded_server(
            ip,
            ServerConfig {
                sockperf_ports: Some((0, 0)),
                ..ServerConfig::default()
            },
        )?;
        let addr = server
            .sockperf_addr()
            .context("the embedded server has no sockperf port")?;
        ep = Endpoint::remote(ip.to_string(), addr.port());
        _embedded = Some(server);
    } else if !a.target.port_given() {
        ep = Endpoint::remote(ep.host().to_string(), SOCKPERF_PORT);
    }
    let mut opts = a.target.options(&ep, test);
    opts.embedded = _embedded.is_some();
    opts.full_log = a.full_log.clone();
    opts.histogram = a.histogram;
    run_and_print(&a.target, &opts, false)
}
