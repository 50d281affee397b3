//! `hakaru rpm`: the responsiveness test of draft-ietf-ippm-responsiveness (replaces Apple's
//! networkQuality, goresponsiveness): round trips per minute under working conditions, over
//! HTTP/2 and TLS against any server that publishes `/.well-known/nq`. Without a URL it runs
//! against an in-process endpoint on loopback (`hakaru server --rpm-port`'s). docs/rpm.md.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context;
use hakaru_model::{Dur, RpmDirection, RpmSpec, TestSpec};

use super::common::{embedded_server, stop_flag, Formats, OutputFiles, UsageError, ViewFlags};
use crate::output;

/// Options of `hakaru rpm`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server's configuration URL (https://HOST/.well-known/nq), or just https://HOST.
    /// Without a URL, an in-process endpoint on loopback serves the test.
    #[arg(value_name = "URL")]
    url: Option<String>,
    /// Load direction: both at once on connections of their own (the default, as
    /// networkQuality does), or only down (GET of the large URL) or up (POST to the upload
    /// URL).
    #[arg(short = 'd', long, value_name = "DIR", default_value = "both", value_parser = ["down", "up", "both"])]
    direction: String,
    /// Most load-generating connections per direction (the draft's MNP).
    #[arg(long, value_name = "N", default_value = "16")]
    max_connections: u32,
    /// Interval at which stability is evaluated and a connection added (ID).
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    interval: Dur,
    /// Intervals in the moving averages (MAD).
    #[arg(long, value_name = "N", default_value = "4")]
    moving_average: u32,
    /// Standard deviation tolerance for stability, percent of the moving average (SDT).
    #[arg(long, value_name = "PCT", default_value = "5")]
    tolerance: f64,
    /// Most probes of each kind per second (MPS); fewer when the probes would take more than
    /// 5 % of the goodput (PTC).
    #[arg(long, value_name = "N", default_value = "100")]
    probes: u32,
    /// The run ends after this long even when not stable (the confidence then says so).
    #[arg(short = 't', long, value_name = "TIME", default_value = "20")]
    max_duration: Dur,
    /// HTTPS: do not verify the server's certificate (a self-signed `hakaru server`).
    #[arg(long)]
    insecure: bool,
    /// HTTPS: trust the certificate authorities in this PEM file instead of the system's.
    #[arg(long, value_name = "FILE")]
    cacert: Option<String>,
    /// HTTP/1.1 instead of HTTP/2 (the fallback): self probes are then the load
    /// connections' TCP round-trip time, as the draft allows.
    #[arg(long)]
    http1: bool,
    /// How long a connection's TCP and TLS handshakes may take.
    #[arg(long, value_name = "TIME", default_value = "5")]
    connect_timeout: Dur,
    /// TCP congestion control of this end's sockets (cubic, bbr, reno, ...): the sender of
    /// uploads. With the embedded endpoint (no URL) its sockets too, the sender of downloads;
    /// a remote `hakaru server` takes `--rpm-congestion`. Linux only.
    #[arg(short = 'C', long, value_name = "ALGO")]
    congestion: Option<String>,
    #[command(flatten)]
    formats: Formats,
    #[command(flatten)]
    view: ViewFlags,
    #[command(flatten)]
    files: OutputFiles,
}

impl Args {
    fn spec(&self, url: String) -> anyhow::Result<RpmSpec> {
        let url = if url.matches('/').count() <= 2 {
            format!("{}/.well-known/nq", url.trim_end_matches('/'))
        } else {
            url
        };
        let spec = RpmSpec {
            url,
            direction: match self.direction.as_str() {
                "up" => RpmDirection::Up,
                "down" => RpmDirection::Down,
                _ => RpmDirection::Both,
            },
            max_connections: self.max_connections,
            interval: self.interval,
            moving_average: self.moving_average,
            tolerance: self.tolerance / 100.0,
            probes_per_second: self.probes,
            max_duration: self.max_duration,
            insecure: self.insecure,
            cacert: self.cacert.clone(),
            http1: self.http1,
            connect_timeout: self.connect_timeout,
            congestion: self.congestion.clone(),
        };
        spec.validate().map_err(|e| UsageError(e.0))?;
        hakaru_rpm::config::Target::parse(&spec.url).map_err(UsageError)?;
        Ok(spec)
    }
}

/// Runs `hakaru rpm`.
pub fn run(a: Args) -> anyhow::Result<()> {
    a.spec(a.url.clone().unwrap_or_else(|| "https://127.0.0.1".into()))?;
    let embedded = match &a.url {
        None => Some(embedded(a.congestion.clone())?),
        Some(_) => None,
    };
    let mut spec = match &embedded {
        Some((_, addr)) => a.spec(format!("https://{addr}/.well-known/nq"))?,
        None => a.spec(a.url.clone().unwrap_or_default())?,
    };
    if embedded.is_some() {
        // The endpoint's certificate was made a moment ago in this process.
        spec.insecure = true;
    }
    let format = a.formats.format();
    let view = a.view.view();
    let stop = stop_flag()?;
    let mut observer = output::observer(format, view);
    let tspec = TestSpec::Rpm(spec.clone());
    observer.on_start(&tspec, &spec.url, embedded.is_some());
    let mut progress = output::Progress::new(output::is_quiet(format, view, &tspec));
    progress.step("rpm".into());
    progress.started(Some(spec.max_duration.0));
    let outcome = hakaru_client::local::rpm::run(&spec, embedded.is_some(), &stop);
    progress.finish();
    let r = match outcome {
        Ok(r) => r,
        Err(e) => {
            observer.on_error(&e);
            anyhow::bail!("{e}");
        }
    };
    let errors = r.detail.rpm().map(|x| x.errors.clone()).unwrap_or_default();
    drop(embedded);
    output::finish(format, view, &r)?;
    a.files.write(&r)?;
    if let Some(e) = errors.iter().find(|e| e.starts_with("load connection")) {
        anyhow::bail!("a load-generating connection failed: {e}");
    }
    Ok(())
}

/// A server on loopback with only its responsiveness port open to this run (ephemeral
/// ports), its certificate made at start; it stops when dropped.
fn embedded(
    congestion: Option<String>,
) -> anyhow::Result<(hakaru_server::ServerHandle, std::net::SocketAddr)> {
    let server = embedded_server(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        hakaru_server::ServerConfig {
            rpm: Some(hakaru_server::RpmConfig {
                congestion,
                ..Default::default()
            }),
            budgets: hakaru_server::Budgets::local(),
            ..hakaru_server::ServerConfig::default()
        },
    )?;
    let addr = server
        .rpm_addr()
        .context("the embedded server has no rpm port")?;
    Ok((server, addr))
}
