//! `hakaru http`: HTTP/1.1 and HTTPS download or upload throughput over one connection or
//! many (replaces `wget -O /dev/null`, `curl -o /dev/null`). Without a URL it runs against an
//! in-process endpoint on loopback (`hakaru server --http-port`'s).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::mpsc;

use anyhow::Context;
use hakaru_model::{
    Bytes, Dur, EndResult, FlowDir, HttpMethod, HttpSpec, KindDetail, RunResult, TestSpec,
};
use hakaru_server::{Server, ServerConfig};

use super::common::{stop_flag, Formats, OutputFiles, UsageError, ViewFlags};
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
        let server = Server::bind(ServerConfig {
            bind: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port: 0,
            http_port: Some(0),
            ..ServerConfig::default()
        })
        .context("starting the embedded endpoint on loopback")?;
        Some(server.spawn().context("starting the embedded endpoint")?)
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
    let iface = iface_of(&spec);
    let (tx, rx) = mpsc::channel();
    let on_sample = Box::new(move |s| {
        let _ = tx.send(s);
    });
    let dir = spec.method.dir();
    let outcome = std::thread::scope(|scope| {
        let worker = scope.spawn(|| hakaru_engine::http::run(&spec, iface, on_sample, &stop));
        let mut intervals = Vec::new();
        for sample in rx {
            let dirs: BTreeMap<u32, FlowDir> = sample
                .flows
                .iter()
                .map(|f: &hakaru_model::FlowTick| (f.id, dir))
                .collect();
            let rec = hakaru_model::merge_interval(Some(&sample), None, &dirs);
            progress.suspend(|| observer.on_interval(&rec));
            intervals.push(rec);
        }
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("the transfer thread panicked"))
            .map(|r| (r, intervals))
    });
    progress.finish();
    let (outcome, intervals) = outcome?;
    let o = match outcome {
        Ok(o) => o,
        Err(e) => {
            observer.on_error(&e.to_string());
            return Err(UsageError(e.to_string()).into());
        }
    };
    let r = assemble(&spec, embedded.is_some(), o, intervals);
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

/// The interface towards the first URL's host, for the NIC counters.
fn iface_of(spec: &HttpSpec) -> Option<String> {
    use std::net::ToSocketAddrs;
    let u = hakaru_engine::http::Url::parse(spec.urls.first()?).ok()?;
    let addr = (u.host.as_str(), u.port).to_socket_addrs().ok()?.next()?;
    let sock = std::net::UdpSocket::bind(if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .ok()?;
    sock.connect(addr).ok()?;
    hakaru_engine::sys::interface_for_addr(sock.local_addr().ok()?.ip())
}

fn assemble(
    spec: &HttpSpec,
    embedded: bool,
    o: hakaru_engine::http::HttpOutcome,
    intervals: Vec<hakaru_model::IntervalRecord>,
) -> RunResult {
    let client: EndResult = hakaru_model::end_result(&o.report);
    let peer = o
        .result
        .connections
        .iter()
        .find_map(|c| c.peer.clone())
        .unwrap_or_default();
    let mut notes = vec![
        "goodput counts body bytes only (no headers, TLS records or TCP/IP headers); the client counts what it received (GET) or sent (PUT/POST)".to_string(),
    ];
    if spec.method != HttpMethod::Get {
        notes.push(
            "an upload request completes when the server answered 2xx after the whole body".into(),
        );
    }
    RunResult {
        embedded_server: embedded,
        remote_address: peer,
        intervals,
        client,
        interrupted: o.interrupted,
        notes,
        detail: KindDetail::Http(Box::new(o.result)),
        server_on_this_host: embedded,
        ..RunResult::begin(
            TestSpec::Http(spec.clone()),
            o.started_unix,
            spec.urls.first().cloned().unwrap_or_default(),
        )
    }
}
