//! The fleet mesh's flags: `hakaru server --mesh PEERS` (one struct, flattened into the
//! server's options) and `hakaru mesh report`.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use hakaru_mesh::report::{self, Thresholds};
use hakaru_mesh::{MeshConfig, PeerSource, ProbeConfig};
use hakaru_model::Dur;

/// `hakaru server`'s mesh options.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerFlags {
    /// Also be a mesh agent: probe every peer continuously (UDP round trips on the mesh port,
    /// loss counted by sequence) while serving tests, and serve the view at /mesh and the
    /// server's /metrics (hakaru_mesh_ series) on the mesh port's TCP side. PEERS is a file
    /// (`HOST[:PORT] [key=value ...]` a line, `#` comments) or `dns:NAME[:PORT]` (every
    /// address of a name, e.g. a Kubernetes headless Service), read again every
    /// --mesh-refresh. Only listed peers' probes are answered, and with a key (--psk-file /
    /// HAKARU_PSK) only those tagged with it (docs/mesh.md).
    #[arg(long, value_name = "PEERS")]
    pub mesh: Option<String>,
    /// The mesh port, UDP and TCP.
    #[arg(long, value_name = "PORT", default_value_t = hakaru_mesh::DEFAULT_PORT, requires = "mesh")]
    pub mesh_port: u16,
    /// Each peer at most once per this (stretched when the peers times the rate would pass
    /// --mesh-max-rate).
    #[arg(long, value_name = "TIME", default_value = "1s", requires = "mesh")]
    pub mesh_interval: Dur,
    /// A probe with no reply after this is counted lost.
    #[arg(long, value_name = "TIME", default_value = "2s", requires = "mesh")]
    pub mesh_timeout: Dur,
    /// Most probes a second this agent sends, all peers together: a longer list is sampled,
    /// every peer once per cycle of peers/rate seconds.
    #[arg(long, value_name = "N", default_value_t = 100, requires = "mesh", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub mesh_max_rate: u32,
    /// Most replies a second this agent sends (probes past it go unanswered and are counted).
    #[arg(long, value_name = "N", default_value_t = 1000, requires = "mesh", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub mesh_max_reply_rate: u32,
    /// The view's loss and RTT quantiles cover this much recent time.
    #[arg(long, value_name = "TIME", default_value = "60s", requires = "mesh")]
    pub mesh_window: Dur,
    /// Probe datagram size in bytes, 48-1472 (default 64, or 80 with a key: a probe then
    /// carries a 32-byte tag).
    #[arg(long, value_name = "BYTES", requires = "mesh", value_parser = clap::value_parser!(u16).range(48..=1472))]
    pub mesh_size: Option<u16>,
    /// How often the peer list is read again (a file, or DNS).
    #[arg(long, value_name = "TIME", default_value = "30s", requires = "mesh")]
    pub mesh_refresh: Dur,
    /// Most peers in the list; a longer one is refused (at start) or ignored (later reads).
    #[arg(long, value_name = "N", default_value_t = 10_000, requires = "mesh", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub mesh_max_peers: u32,
    /// Up to this many peers /metrics has series per peer; past it, per value of
    /// --mesh-group-by (the cardinality bound).
    #[arg(long, value_name = "N", default_value_t = 100, requires = "mesh", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub mesh_metrics_peers: u32,
    /// The peers-file label that groups peers in /metrics past --mesh-metrics-peers.
    #[arg(long, value_name = "LABEL", default_value = "zone", requires = "mesh")]
    pub mesh_group_by: String,
    /// Also time a TCP connect to each peer's mesh port at most once per this (e.g. 10s):
    /// the handshake and the far side's accept queue, in /mesh (`connect`) and
    /// hakaru_mesh_connect_seconds. A connect not established within --mesh-timeout counts
    /// lost. Off unless given.
    #[arg(long, value_name = "TIME", requires = "mesh")]
    pub mesh_connect_interval: Option<Dur>,
    /// Most TCP connects a second this agent starts, all peers together (a longer list is
    /// sampled, as with --mesh-max-rate); at most 256 are under way at once.
    #[arg(long, value_name = "N", default_value_t = 10, requires = "mesh_connect_interval", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub mesh_connect_max_rate: u32,
    /// Also run a short TCP throughput test (a slice) to each peer's test port at most once
    /// per this (e.g. 1h), one at a time, spread over the period: the last rate per peer in
    /// /mesh (`slice`) and hakaru_mesh_slice_bits_per_second. Off unless given.
    #[arg(long, value_name = "TIME", requires = "mesh")]
    pub mesh_slice_every: Option<Dur>,
    /// Each slice's length (at most 10 s).
    #[arg(
        long,
        value_name = "TIME",
        default_value = "1s",
        requires = "mesh_slice_every"
    )]
    pub mesh_slice_time: Dur,
    /// Each slice's rate cap: the budget is this for --mesh-slice-time out of every
    /// max(--mesh-slice-every / peers, --mesh-slice-time).
    #[arg(
        long,
        value_name = "RATE",
        default_value = "100M",
        requires = "mesh_slice_every"
    )]
    pub mesh_slice_rate: hakaru_model::BitRate,
    /// The peers' test port (their `hakaru server -p`; default: this server's).
    #[arg(long, value_name = "PORT", requires = "mesh_slice_every")]
    pub mesh_slice_port: Option<u16>,
}

fn positive(d: Dur, flag: &str) -> anyhow::Result<Duration> {
    anyhow::ensure!(!d.0.is_zero(), "{flag} must be more than 0");
    Ok(d.0)
}

impl ServerFlags {
    /// The agent's settings, when --mesh is given; `key` is the server's, `port` its test
    /// port (the peers' too, unless --mesh-slice-port says otherwise).
    pub fn config(
        &self,
        key: Option<hakaru_client::Psk>,
        port: u16,
    ) -> anyhow::Result<Option<MeshConfig>> {
        let Some(spec) = &self.mesh else {
            return Ok(None);
        };
        let source = PeerSource::parse(spec, self.mesh_port)
            .map_err(anyhow::Error::msg)
            .context("--mesh")?;
        let keyed = key.is_some();
        let min = hakaru_mesh::wire::min_len(keyed);
        let size = self.mesh_size.map_or(min.max(64), usize::from);
        if size < min {
            anyhow::bail!(
                "--mesh-size {size}: with a key a probe carries a 32-byte tag; at least {min} bytes"
            );
        }
        let window = positive(self.mesh_window, "--mesh-window")?;
        let interval = positive(self.mesh_interval, "--mesh-interval")?;
        anyhow::ensure!(
            window >= interval,
            "--mesh-window {:?} is shorter than --mesh-interval {:?}: it would hold no probe",
            window,
            interval
        );
        Ok(Some(MeshConfig {
            source,
            port: self.mesh_port,
            probe: ProbeConfig {
                interval,
                timeout: positive(self.mesh_timeout, "--mesh-timeout")?,
                max_pps: self.mesh_max_rate,
                window,
                size,
                keyed,
            },
            refresh: positive(self.mesh_refresh, "--mesh-refresh")?,
            max_peers: self.mesh_max_peers as usize,
            metrics_peers: self.mesh_metrics_peers as usize,
            group_by: self.mesh_group_by.clone(),
            max_reply_pps: self.mesh_max_reply_rate,
            connect: match self.mesh_connect_interval {
                Some(d) => {
                    let interval = positive(d, "--mesh-connect-interval")?;
                    anyhow::ensure!(
                        window >= interval,
                        "--mesh-window {window:?} is shorter than --mesh-connect-interval {interval:?}: it would hold no connect"
                    );
                    Some(hakaru_mesh::connect::ConnectConfig {
                        interval,
                        max_rate: self.mesh_connect_max_rate,
                    })
                }
                None => None,
            },
            slice: self.slice_config(key.clone(), port)?,
            key,
        }))
    }
}

impl ServerFlags {
    fn slice_config(
        &self,
        key: Option<hakaru_client::Psk>,
        port: u16,
    ) -> anyhow::Result<Option<hakaru_mesh::slice::SliceConfig>> {
        let Some(every) = self.mesh_slice_every else {
            return Ok(None);
        };
        let every = positive(every, "--mesh-slice-every")?;
        let time = positive(self.mesh_slice_time, "--mesh-slice-time")?;
        anyhow::ensure!(
            time <= Duration::from_secs(10),
            "--mesh-slice-time {time:?}: a slice is at most 10 s"
        );
        anyhow::ensure!(
            every >= time,
            "--mesh-slice-every {every:?} is shorter than a slice (--mesh-slice-time {time:?})"
        );
        let rate = self.mesh_slice_rate.0;
        anyhow::ensure!(
            (1e3..=hakaru_model::config::MAX_TCP_RATE).contains(&rate),
            "--mesh-slice-rate {}: from 1k (a slice needs a rate cap: the budget) to 400G",
            self.mesh_slice_rate
        );
        anyhow::ensure!(
            time >= Duration::from_millis(10),
            "--mesh-slice-time {time:?}: at least 10ms"
        );
        let port = self.mesh_slice_port.unwrap_or(port);
        anyhow::ensure!(
            port != 0,
            "this server's -p 0 is no port its peers listen on: give --mesh-slice-port"
        );
        // The test every slice runs, checked once here rather than failing at every slice.
        slice_spec(time, rate as u64)
            .validate()
            .map_err(|e| anyhow::anyhow!("--mesh-slice-*: {e}"))?;
        Ok(Some(hakaru_mesh::slice::SliceConfig {
            every,
            time,
            rate_bps: rate as u64,
            port,
            runner: std::sync::Arc::new(move |to, time, bps, stop| {
                slice(to, time, bps, key.clone(), stop)
            }),
        }))
    }
}

/// A slice's test: one flow for `time` paced at `bps`, one interval.
fn slice_spec(time: Duration, bps: u64) -> hakaru_model::TcpSpec {
    hakaru_model::TcpSpec {
        amount: hakaru_model::Amount::Time(Dur(time)),
        interval: Dur(time),
        rate: Some(hakaru_model::BitRate(bps as f64)),
        ..hakaru_model::TcpSpec::default()
    }
}

/// A slice: a one-flow TCP test of `time` at most at `bps` to the hakaru server at `to`,
/// with the fleet's key, ended early by `stop`; the rate the server received.
fn slice(
    to: SocketAddr,
    time: Duration,
    bps: u64,
    psk: Option<hakaru_client::Psk>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<f64, String> {
    struct Quiet;
    impl hakaru_engine::Observer for Quiet {}
    let spec = slice_spec(time, bps);
    let opts = hakaru_client::ClientOptions {
        host: to.ip().to_string(),
        port: to.port(),
        family: hakaru_model::Family::Any,
        bind: None,
        spec: hakaru_model::TestSpec::Tcp(spec),
        affinity: Vec::new(),
        embedded: false,
        connect_timeout: Duration::from_secs(2),
        full_log: None,
        histogram: false,
        iperf3: false,
        gate: None,
        ntttcp: false,
        netperf: false,
        netperf_passphrase: None,
        psk,
    };
    let r = hakaru_client::run_test(&opts, &mut Quiet, stop).map_err(|e| e.to_string())?;
    r.totals
        .iter()
        .find(|t| t.dir == hakaru_model::FlowDir::Up)
        .map(|t| t.receiver.bits_per_second.0)
        .ok_or_else(|| "the test has no upload total".to_string())
}

/// `hakaru mesh`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Ask every agent of PEERS for its view and print the matrix (RTT p50, loss) and the
    /// suspects: hosts whose pairs are bad while the pairs without them are not.
    Report(ReportArgs),
}

/// `hakaru mesh report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The agents: the same peers file or `dns:NAME[:PORT]` they probe.
    #[arg(long, value_name = "PEERS")]
    peers: String,
    /// The mesh port of peers written without one.
    #[arg(long, value_name = "PORT", default_value_t = hakaru_mesh::DEFAULT_PORT)]
    port: u16,
    /// A pair is bad when it loses more than this fraction of its probes (0.02 = 2 %).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.02, value_parser = fraction)]
    loss_above: f64,
    /// A pair is also bad when its RTT p99 is over this (default: RTT alone makes no pair bad).
    #[arg(long, value_name = "TIME")]
    rtt_p99_above: Option<Dur>,
    /// How long to wait for each agent.
    #[arg(long, value_name = "TIME", default_value = "3s")]
    timeout: Dur,
    /// The report as JSON (`pairs[]`, `suspects[]`, `hosts[]`; docs/mesh.md).
    #[arg(long)]
    json: bool,
    /// -o (the JSON to a file), --report (a heatmap page), --save (a snapshot in the
    /// archive: `hakaru report` on several draws the worst pairs over time).
    #[command(flatten)]
    files: super::common::OutputFiles,
}

/// Runs `hakaru mesh`.
pub fn run(a: Args) -> anyhow::Result<()> {
    match a.command {
        Sub::Report(r) => report_cmd(r),
    }
}

/// A loss fraction from 0 to 1 (a usage error otherwise).
fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err("a fraction from 0 to 1 (0.02 is 2 %)".into()),
    }
}

fn report_cmd(a: ReportArgs) -> anyhow::Result<()> {
    let source = PeerSource::parse(&a.peers, a.port).map_err(anyhow::Error::msg)?;
    let peers = source
        .load(a.port, 100_000)
        .map_err(anyhow::Error::msg)
        .context("--peers")?;
    anyhow::ensure!(!peers.is_empty(), "--peers {}: no peer in it", a.peers);
    let addrs: Vec<SocketAddr> = peers.iter().map(|p| p.addr).collect();
    let views = hakaru_mesh::fetch::fetch_all(&addrs, positive(a.timeout, "--timeout")?);
    let r = report::build(
        peers
            .into_iter()
            .zip(views)
            .map(|(p, view)| report::Asked {
                host: p.name,
                addr: Some(p.addr),
                labels: p.labels,
                view,
            })
            .collect(),
        Thresholds {
            loss: a.loss_above,
            rtt_p99_us: a.rtt_p99_above.map(|d| d.0.as_secs_f64() * 1e6),
        },
    );
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", report::text(&r));
    }
    a.files.write_mesh(&r)
}
