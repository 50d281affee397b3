//! `hakaru tcp`: TCP bulk-transfer throughput.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use anyhow::Context;
use hakaru_client::{run_tcp, ClientOptions, Family};
use hakaru_model::{Amount, Bytes, Direction, Dur, TcpSpec};
use hakaru_server::{Server, ServerConfig, DEFAULT_PORT};

use super::common::CpuList;
use crate::output::{self, Format};

/// Options of `hakaru tcp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Server to measure against. Omit it to run against an in-process server on loopback.
    host: Option<String>,
    /// Server control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
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
    /// Local address for control and data sockets.
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// IPv4 only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6', long = "ipv6")]
    ipv6: bool,
    /// Warm-up not counted in the totals (shown as omitted), added before --time.
    #[arg(short = 'O', long, value_name = "TIME", default_value = "0")]
    omit: Dur,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    interval: Dur,
    /// Pin this end's flow workers to these CPUs, round robin (0,2,4-7).
    #[arg(short = 'A', long, value_name = "CPUS")]
    affinity: Option<CpuList>,
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
    /// How long connecting to the server may take.
    #[arg(long, value_name = "TIME", default_value = "5")]
    connect_timeout: Dur,
    /// Print one JSON document for the whole run (schema: docs/json.md).
    #[arg(long, conflicts_with = "json_stream")]
    json: bool,
    /// Print JSON Lines events (start, interval, end, error) as the test runs.
    #[arg(long)]
    json_stream: bool,
}

fn parse_u8(s: &str) -> Result<u8, String> {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u8::from_str_radix(h, 16)
    } else {
        s.parse()
    };
    v.map_err(|_| format!("'{s}' is not a number from 0 to 255"))
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
        if self.ipv4 && self.bind.is_some_and(|b| b.is_ipv6()) {
            anyhow::bail!("-B/--bind is an IPv6 address but -4/--ipv4 was given");
        }
        if self.ipv6 && self.bind.is_some_and(|b| b.is_ipv4()) {
            anyhow::bail!("-B/--bind is an IPv4 address but -6/--ipv6 was given");
        }
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
        if let Some(CpuList(cpus)) = &self.affinity {
            let n = hakaru_engine::sys::online_cpus();
            if let Some(bad) = cpus.iter().find(|&&c| c >= n) {
                anyhow::bail!("-A/--affinity: CPU {bad} does not exist (this host has {n})");
            }
        }
        Ok(spec)
    }
}

/// Runs the test and prints the result in the chosen format.
pub fn run(a: Args) -> anyhow::Result<()> {
    let spec = a.spec()?;
    // Each flow is one socket per end; the embedded server holds the other end in-process.
    let per_flow = if a.host.is_some() { 1 } else { 2 };
    let needed = spec.flow_plan().len() as u64 * per_flow + 64;
    if let Some(limit) = hakaru_engine::sys::raise_fd_limit() {
        if limit < needed {
            anyhow::bail!(
                "-P/--parallel {}: needs about {needed} open files but this process may open {limit}; raise the limit (ulimit -n) or use fewer flows",
                spec.flows
            );
        }
    }
    let family = Family::from_flags(a.ipv4, a.ipv6);
    let format = if a.json {
        Format::Json
    } else if a.json_stream {
        Format::JsonStream
    } else {
        Format::Text
    };
    // No HOST: the embedded default, a server in this process on loopback.
    let (embedded, host, port) = match &a.host {
        Some(h) => (None, h.clone(), a.port),
        None => {
            let ip = if a.ipv6 {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            };
            let server = Server::bind(ServerConfig {
                bind: Some(ip),
                port: 0,
                ..ServerConfig::default()
            })
            .context("starting the embedded loopback server")?
            .spawn()
            .context("starting the embedded loopback server")?;
            let port = server.addr().port();
            (Some(server), ip.to_string(), port)
        }
    };
    let opts = ClientOptions {
        host,
        port,
        family,
        bind: a.bind,
        spec,
        affinity: a.affinity.clone().map(|c| c.0).unwrap_or_default(),
        embedded: embedded.is_some(),
        connect_timeout: a.connect_timeout.0.max(Duration::from_millis(100)),
    };
    let stop = super::common::stop_flag()?;
    let mut observer = output::observer(format);
    let result = run_tcp(&opts, observer.as_mut(), stop);
    if let Some(s) = embedded {
        s.stop();
    }
    match result {
        Ok(r) => output::finish(format, &r),
        Err(e) => {
            observer.on_error(&e.to_string());
            Err(e.into())
        }
    }
}
