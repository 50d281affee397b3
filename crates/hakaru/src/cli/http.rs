//! `hakaru http`: HTTP/1.1 and HTTPS download or upload throughput over one connection or
//! many (replaces `wget -O /dev/null`, `curl -o /dev/null`). Without a URL it runs against an
//! in-process endpoint on loopback (`hakaru server --http-port`'s).

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context;
use hakaru_model::{Bytes, Dur, HttpMethod, HttpSpec, TestSpec};
use hakaru_server::ServerConfig;

use super::common::{embedded_server, stop_flag, Formats, OutputFiles, UsageError, ViewFlags};
use crate::output;

/// Size of `/bytes/SIZE` on the embedded endpoint when neither -n nor -t is given.
const EMBEDDED_SIZE: u64 = 1 << 30;

/// Options of `hakaru http`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// URLs to fetch (http:// or https://); connections take them in turn. Without a URL,
    /// an in-process endpoint on loopback serves generated data.
    #[arg(value_name = "URL")]
    urls: Vec<String>,
    /// Connections at once.
    #[arg(short = 'P', long, value_name = "N", default_value = "1")]
    parallel: u32,
    /// Repeat requests on each connection (keep-alive) until this time is up (10, 30s).
    #[arg(short, long, value_name = "TIME", conflicts_with = "bytes")]
    time: Option<Dur>,
    /// Stop each connection after this many body bytes, repeating requests as needed (1G).
    /// Default: one pass over the URLs.
    #[arg(short = 'n', long, value_name = "SIZE")]
    bytes: Option<Bytes>,
    /// Split one URL into -P byte ranges, one per connection (the server must serve ranges).
    #[arg(long)]
    range: bool,
    /// Request method: GET downloads; PUT or POST uploads a generated body of --upload bytes.
    #[arg(short = 'X', long, value_name = "METHOD", default_value = "GET", value_parser = ["GET", "PUT", "POST", "get", "put", "post"])]
    method: String,
    /// Body size of each PUT or POST (100M).
    #[arg(long, value_name = "SIZE")]
    upload: Option<Bytes>,
    /// Extra request header, 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// HTTPS: do not verify the server's certificate (curl's -k; -k is a block count in
    /// every hakaru command).
    #[arg(long)]
    insecure: bool,
    /// HTTPS: trust the certificate authorities in this PEM file instead of the system's.
    #[arg(long, value_name = "FILE")]
    cacert: Option<String>,
    /// Redirects followed per request.
    #[arg(long, value_name = "N", default_value = "10")]
    max_redirects: u32,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    interval: Dur,
    /// How long connecting (and the TLS handshake) may take.
    #[arg(long, value_name = "TIME", default_value = "5")]
    connect_timeout: Dur,
    /// A request fails when the server sends (or takes) nothing for this long.
    #[arg(long, value_name = "TIME", default_value = "10")]
    stall_timeout: Dur,
    /// IPv4 only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6', long = "ipv6")]
    ipv6: bool,
    #[command(flatten)]
    formats: Formats,
    #[command(flatten)]
    view: ViewFlags,
    #[command(flatten)]
    files: OutputFiles,
}

impl Args {
    /// The spec, with `urls` standing in for the ones given (the embedded endpoint's).
    fn spec(&self, urls: Vec<String>) -> anyhow::Result<HttpSpec> {
        let method = match self.method.to_ascii_uppercase().as_str() {
            "PUT" => HttpMethod::Put,
            "POST" => HttpMethod::Post,
            _ => HttpMethod::Get,
        };
        let spec = HttpSpec {
            urls,
            method,
            parallel: self.parallel,
            duration: self.time,
            bytes: self.bytes,
            upload: self.upload,
            range: self.range,
            headers: self.headers.clone(),
            insecure: self.insecure,
            cacert: self.cacert.clone(),
            max_redirects: self.max_redirects,
            interval: self.interval,
            connect_timeout: self.connect_timeout,
            stall_timeout: self.stall_timeout,
            ip_version: match (self.ipv4, self.ipv6) {
                (true, _) => Some(4),
                (_, true) => Some(6),
                _ => None,
            },
        };
        spec.validate().map_err(|e| UsageError(e.0))?;
        for u in &spec.urls {
            hakaru_engine::http::Url::parse(u).map_err(|e| UsageError(e.0))?;
        }
        Ok(spec)
    }
}

/// Runs `hakaru http`.
pub fn run(a: Args) -> anyhow::Result<()> {
    // Checked before anything starts, with a stand-in URL when none is given.
    a.spec(if a.urls.is_empty() {
        vec!["http://127.0.0.1/".into()]
    } else {
        a.urls.clone()
    })?;
    let embedded = if a.urls.is_empty() {
        Some(embedded_server(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            ServerConfig {
                http_port: Some(0),
                ..ServerConfig::default()
            },
        )?)
    } else {
        None
    };
    let urls = match &embedded {
        Some(h) => {
            let addr = h
                .http_addr()
                .context("the embedded endpoint has no HTTP port")?;
            let path = if a.method.eq_ignore_ascii_case("GET") {
                let size = a.bytes.map_or(EMBEDDED_SIZE, |b| b.0.max(1));
                format!("/bytes/{}", size.min(1 << 50))
            } else {
                "/upload".into()
            };
            vec![format!("http://{addr}{path}")]
        }
        None => a.urls.clone(),
    };
    let spec = a.spec(urls)?;
    let format = a.formats.format();
    let view = a.view.view();
    let stop = stop_flag()?;
    let mut observer = output::observer(format, view);
    let tspec = TestSpec::Http(spec.clone());
    observer.on_start(&tspec, &spec.urls[0], embedded.is_some());
    let mut progress = output::Progress::new(output::is_quiet(format, view, &tspec));
    progress.step("http".into());
    progress.started(spec.duration.map(|d| d.0));
    let outcome = hakaru_client::local::http::run(&spec, embedded.is_some(), &stop, &mut |rec| {
        progress.suspend(|| observer.on_interval(rec));
    });
    progress.finish();
    let r = match outcome {
        Ok(r) => r,
        Err(e) => {
            observer.on_error(&e.to_string());
            return Err(UsageError(e.to_string()).into());
        }
    };
    drop(embedded);
    output::finish(format, view, &r)?;
    a.files.write(&r)?;
    let h = r.detail.http();
    if let Some(h) = h.filter(|h| h.failed > 0) {
        anyhow::bail!(
            "{} connection(s) failed: {}",
            h.failed,
            h.errors.first().cloned().unwrap_or_default()
        );
    }
    if h.is_some_and(|h| h.completed == 0 && !r.interrupted && spec.duration.is_none()) {
        anyhow::bail!("no request completed");
    }
    Ok(())
}
