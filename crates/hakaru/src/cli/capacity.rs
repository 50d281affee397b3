//! `hakaru capacity [HOST[:PORT]]`: the maximum IP-layer capacity of RFC 9946 against any
//! OB-UDPST server (`udpst` run as a server, `hakaru server --udpst-port`), one direction per
//! run; without HOST against an embedded server's udpst port on loopback. The server searches
//! the sending rate; hakaru reads the receiver's sub-intervals.

use std::net::ToSocketAddrs;

use anyhow::Context;
use hakaru_model::{TestSpec, UdpstDirection, UdpstSpec};

use super::common::{split_host_port, stop_flag, Formats, OutputFiles, UsageError, ViewFlags};
use crate::output;
use hakaru_report::export::LiveItem;

/// Options of `hakaru capacity`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The OB-UDPST server: HOST, HOST:PORT, [v6]:PORT (port 24601 by default). Without it,
    /// an embedded server on loopback (what this machine's own stack can carry).
    #[arg(value_name = "HOST[:PORT]")]
    server: Option<String>,
    /// Upstream: this end sends the load, the server counts it (udpst -u).
    #[arg(short = 'u', long, conflicts_with = "down")]
    up: bool,
    /// Downstream: the server sends the load, this end counts it (udpst -d; the default).
    #[arg(short = 'd', long)]
    down: bool,
    /// Test duration in seconds, 5 to 3600 (udpst -t).
    #[arg(short = 't', long, value_name = "SECONDS", default_value = "10")]
    time: u16,
    /// Sending-rate row: a fixed rate (row N is about N Mbit/s up to 1000), or with a
    /// leading @ where the search starts (udpst -I).
    #[arg(short = 'I', long, value_name = "[@]ROW")]
    row: Option<String>,
    /// The bandwidth the server must have for the test (Mbit/s; a server with less
    /// refuses, udpst -B).
    #[arg(short = 'B', long, value_name = "MBPS", default_value = "0")]
    max_rate: u16,
    /// No jumbo datagram sizes above 1 Gbit/s (udpst -j).
    #[arg(short = 'j', long)]
    no_jumbo: bool,
    /// Traditional 1500-byte MTU datagram sizes (udpst -T).
    #[arg(short = 'T', long)]
    traditional: bool,
    /// Rate adjustment algorithm: b or c (udpst -A).
    #[arg(short = 'A', long, value_name = "ALGO", default_value = "b", value_parser = ["b", "c", "B", "C"])]
    algorithm: String,
    /// Trial (status feedback) interval in ms, 5 to 250 (udpst -F).
    #[arg(long, value_name = "MS", default_value = "50")]
    trial: u16,
    /// Sub-interval length in ms, 100 to 10000 (udpst -P).
    #[arg(short = 'P', long, value_name = "MS", default_value = "1000")]
    sub_interval: u16,
    #[command(flatten)]
    formats: Formats,
    #[command(flatten)]
    view: ViewFlags,
    #[command(flatten)]
    files: OutputFiles,
}

impl Args {
    fn spec(&self, server: &str) -> anyhow::Result<(UdpstSpec, String, u16)> {
        let (host, port) = split_host_port(server).map_err(UsageError)?;
        let port = port.unwrap_or(hakaru_model::UDPST_DEFAULT_PORT);
        let (row, start_only) = match &self.row {
            None => (None, false),
            Some(r) => {
                let (n, start) = match r.strip_prefix('@') {
                    Some(n) => (n, true),
                    None => (r.as_str(), false),
                };
                let n: u16 = n
                    .parse()
                    .map_err(|_| UsageError(format!("-I {r}: a row number, or @ and one")))?;
                (Some(n), start)
            }
        };
        let shown = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let spec = UdpstSpec {
            server: shown,
            direction: if self.up && !self.down {
                UdpstDirection::Up
            } else {
                UdpstDirection::Down
            },
            duration_s: self.time,
            jumbo: !self.no_jumbo,
            traditional: self.traditional,
            row,
            start_only,
            max_mbps: self.max_rate,
            algorithm_c: self.algorithm.eq_ignore_ascii_case("c"),
            trial_ms: self.trial,
            sub_interval_ms: self.sub_interval,
        };
        spec.validate().map_err(|e| UsageError(e.0))?;
        Ok((spec, host, port))
    }
}

/// Runs `hakaru capacity`.
pub fn run(a: Args) -> anyhow::Result<()> {
    a.spec(a.server.as_deref().unwrap_or("127.0.0.1"))?;
    let embedded = match a.server {
        Some(_) => None,
        None => Some(embedded()?),
    };
    let server = match &embedded {
        Some((_, addr)) => addr.to_string(),
        None => a.server.clone().unwrap_or_default(),
    };
    let (spec, host, port) = a.spec(&server)?;
    let to = (host.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    let format = a.formats.format();
    let view = a.view.view();
    let stop = stop_flag()?;
    let mut print = output::printer(format, view);
    let tspec = TestSpec::Udpst(spec.clone());
    print(&LiveItem::Start {
        spec: &tspec,
        server: &spec.server,
        embedded: embedded.is_some(),
    });
    let mut progress = output::Progress::new(output::is_quiet(format, view, &tspec));
    progress.step("capacity".into());
    progress.started(Some(std::time::Duration::from_secs(spec.duration_s.into())));
    let outcome = hakaru_client::udpst::run(&spec, to, embedded.is_some(), &stop, &mut |row| {
        print(&LiveItem::SubInterval(row));
    });
    progress.finish();
    let r = match outcome {
        Ok(r) => r,
        Err(e) => {
            print(&LiveItem::Error(&e));
            anyhow::bail!("capacity test with {}: {e}", spec.server);
        }
    };
    output::finish(format, view, &r)?;
    a.files.write(&r)?;
    Ok(())
}

/// A server on loopback with only its udpst port open to this run (an ephemeral port).
fn embedded() -> anyhow::Result<(hakaru_server::ServerHandle, std::net::SocketAddr)> {
    let server = super::common::embedded_server(
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        hakaru_server::ServerConfig {
            udpst_port: Some(0),
            budgets: hakaru_server::Budgets::local(),
            ..hakaru_server::ServerConfig::default()
        },
    )?;
    let addr = server
        .udpst_addr()
        .context("the embedded server has no udpst port")?;
    Ok((server, addr))
}
