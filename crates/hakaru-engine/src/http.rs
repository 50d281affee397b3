//! HTTP transfers (`hakaru http`): each connection a thread that sends requests and counts
//! body bytes into its flow's counters, so the interval ticker, CPU and NIC figures are the
//! same as for the other transports.
//!
//! Heads are parsed by `hakaru_proto::http` (httparse); TLS is rustls. The body loop is
//! written here because it is the measured hot path: bodies are read into one 256 KiB buffer
//! per connection and only counted, never copied or decoded beyond chunk framing.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_model::{End, HttpConnection, HttpMethod, HttpResult, HttpSpec, Role, SideReport};
pub use hakaru_proto::http::Url;
use hakaru_proto::http::{self as wire, BodyKind, ByteRange, ChunkedDecoder};

use crate::raw::{Meter, SampleFn, TICK};
use crate::side::{Core, FlowMeta};
use crate::tcp::{Payload, SideConfig};

mod tls;
mod worker;
pub use tls::client_tls_config;
use tls::{handshake, tls_config, Stream};
use worker::Worker;

/// Bytes read or written per call.
const BUF: usize = 1 << 20;
/// The receive low-water mark of a plain connection while more than four times this much of a
/// body is left: a blocking read then waits for this many bytes instead of waking for each
/// segment the server sends. On a 2-vCPU VM this cut the client's context switches for a 1 GiB
/// download from about 3,000 to curl's few hundred, and an unpinned download went from 0.78x
/// curl's rate to ahead of it (docs/BENCHMARKS.md, "hakaru http against wget and curl"). It is
/// lowered to 1 before less than this is left, so that no read waits for bytes that will not
/// come.
const BODY_LOWAT: u32 = 256 << 10;
/// Under TLS, body bytes the socket no longer has: [`TlsSock`]'s buffer and rustls's records.
/// The mark is raised and lowered that much earlier, so no read waits for them.
const TLS_HELD: u64 = BUF as u64 + (64 << 10);

/// What an HTTP run produced.
#[derive(Debug)]
pub struct HttpOutcome {
    /// Per-connection and total figures.
    pub result: HttpResult,
    /// This end's report (flows, CPU, NIC, environment).
    pub report: SideReport,
    /// True if Ctrl-C ended the run.
    pub interrupted: bool,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix: f64,
}

/// Errors that stop a run before any request.
#[derive(Debug, thiserror::Error)]
pub enum HttpRunError {
    /// A URL, a certificate file or the range probe failed.
    #[error("{0}")]
    Setup(String),
    /// The interval ticker could not start.
    #[error("starting the interval ticker: {0}")]
    Thread(#[source] io::Error),
}

/// An open connection and the bytes read past the last response.
struct Conn {
    stream: Stream,
    /// Scheme, host and port it was opened for.
    key: (bool, String, u16),
    /// Bytes of the next response already read.
    pending: Vec<u8>,
    /// Requests it has carried.
    used: u64,
}

/// Why a request did not complete.
enum Halt {
    /// The test's time, byte budget or Ctrl-C ended it: not a failure.
    Cut,
    /// It failed; the connection's work ends.
    Failed(String),
    /// A reused connection was closed by the server before any response byte: retry once on
    /// a new one.
    Stale(String),
}

/// What every connection shares.
struct Shared<'a> {
    spec: &'a HttpSpec,
    core: &'a Core,
    tls: Option<Arc<rustls::ClientConfig>>,
    headers: Vec<(String, String)>,
    stop: &'a AtomicBool,
    deadline: Option<Instant>,
    payload: Vec<u8>,
}

impl Shared<'_> {
    /// True when the run must end now (time up or Ctrl-C).
    fn over(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// After a call that timed out: the run's end cuts the request, and so many seconds without
    /// progress since `since` (`--stall-timeout`) fail it ("the server took/sent nothing").
    fn still_waiting(&self, since: Instant, verb: &str) -> Result<(), Halt> {
        if self.over() {
            return Err(Halt::Cut);
        }
        let stall = self.spec.stall_timeout.0;
        if since.elapsed() > stall {
            return Err(Halt::Failed(format!(
                "the server {verb} nothing for {} s (--stall-timeout)",
                stall.as_secs_f64()
            )));
        }
        Ok(())
    }
}

/// Runs the transfers `spec` asks for and returns what every connection measured.
pub fn run(
    spec: &HttpSpec,
    iface: Option<String>,
    on_sample: SampleFn,
    stop: &AtomicBool,
) -> Result<HttpOutcome, HttpRunError> {
    let urls: Vec<Url> = spec
        .urls
        .iter()
        .map(|u| Url::parse(u).map_err(|e| HttpRunError::Setup(e.0)))
        .collect::<Result<_, _>>()?;
    let tls = if urls.iter().any(|u| u.tls) {
        Some(tls_config(spec).map_err(HttpRunError::Setup)?)
    } else {
        None
    };
    let Some(first_url) = urls.first() else {
        return Err(HttpRunError::Setup("no URL to fetch".into()));
    };
    let ranges = if spec.range {
        let size = probe_size(spec, first_url, tls.clone(), stop)?;
        wire::split_ranges(size, spec.parallel)
    } else {
        Vec::new()
    };
    let flows = if spec.range {
        ranges.len()
    } else {
        spec.parallel as usize
    };
    let dir = spec.method.dir();
    let role = match spec.method {
        HttpMethod::Get => Role::Receiver,
        _ => Role::Sender,
    };
    let cfg = client_side(spec, spec.interval.0, spec.duration.map(|d| d.0), iface);
    let meta = (1..=flows as u32)
        .map(|id| FlowMeta {
            id,
            dir,
            role,
            quota: None,
        })
        .collect();
    let meter = Meter::with(cfg, meta, false, on_sample).map_err(|e| match e {
        crate::raw::RawError::Thread(e) => HttpRunError::Thread(e),
        other => HttpRunError::Setup(other.to_string()),
    })?;
    let shared = Shared {
        spec,
        core: &meter.core,
        tls,
        headers: spec.header_pairs(),
        stop,
        deadline: spec.duration.map(|d| meter.core.start + d.0),
        payload: Payload::Letters.fill(BUF),
    };
    let work = |i: usize| -> Vec<(Url, Option<ByteRange>)> {
        if spec.range {
            ranges
                .get(i)
                .map(|&r| (first_url.clone(), Some(r)))
                .into_iter()
                .collect()
        } else {
            spec.urls_of(i as u32)
                .into_iter()
                .filter_map(|u| Url::parse(u).ok())
                .map(|u| (u, None))
                .collect()
        }
    };
    let workers = run_workers(&shared, flows, &work);
    let interrupted = stop.load(Ordering::Acquire);
    let started_unix = meter.started_unix;
    // Flow errors are in the workers' figures; the report keeps its own copy per flow.
    let report = meter.finish(workers.iter().map(|w| w.stats.error.clone()).collect());
    Ok(HttpOutcome {
        result: assemble(spec, workers, &report),
        report,
        interrupted,
        started_unix,
    })
}

/// One thread per connection, each taking its items (URLs, or one byte range of the first);
/// a thread that panics or cannot start is a failed connection.
fn run_workers(
    shared: &Shared,
    flows: usize,
    work: &(dyn Fn(usize) -> Vec<(Url, Option<ByteRange>)> + Sync),
) -> Vec<Worker> {
    let spec = shared.spec;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..flows)
            .map(|i| {
                let items = work(i);
                std::thread::Builder::new()
                    .name(format!("hakaru-http-{}", i + 1))
                    .spawn_scoped(s, move || {
                        let mut w = Worker::new(i, spec);
                        // The flow is finished by `Meter::finish`, once for every flow.
                        w.work(shared, &items);
                        w
                    })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    let mut w = Worker::new(i, spec);
                    w.stats.error = Some("the connection's thread panicked".into());
                    w
                }),
                Err(e) => {
                    let mut w = Worker::new(i, spec);
                    w.stats.error = Some(format!("starting a thread: {e}"));
                    w.failed = 1;
                    w
                }
            })
            .collect()
    })
}

/// The client's side of a run: its flows' counters, ticked every `interval` (0: none), the
/// measured window `duration` long when timed.
fn client_side(
    spec: &HttpSpec,
    interval: Duration,
    duration: Option<Duration>,
    iface: Option<String>,
) -> SideConfig {
    SideConfig {
        end: End::Client,
        length: BUF,
        discard: true,
        mptcp: false,
        zerocopy: false,
        affinity: Vec::new(),
        interval,
        omit: Duration::ZERO,
        duration,
        stall_timeout: spec.stall_timeout.0,
        iface,
        base: None,
        payload: Payload::Letters,
        pace_bps: None,
        half_close: false,
        window_at_peer_end: None,
        shares_host: false,
        thread_per_flow: false,
        subflow_guard: None,
        start_at: None,
    }
}

/// Adds the report's counted bytes and seconds to each connection and sums them.
fn assemble(spec: &HttpSpec, workers: Vec<Worker>, report: &SideReport) -> HttpResult {
    let (mut connect, mut tls, mut ttfb) = (Vec::new(), Vec::new(), Vec::new());
    let (mut failed, mut errors) = (0, Vec::new());
    let mut seconds: f64 = 0.0;
    let conns = workers
        .into_iter()
        .map(|w| {
            let mut c = w.stats;
            if let Some(f) = report.flows.iter().find(|f| f.id == c.id) {
                c.bytes = f.bytes;
                c.seconds = f.seconds;
                seconds = seconds.max(f.seconds);
            }
            c.bits_per_second = hakaru_model::BitRate::from_bytes(c.bytes, c.seconds);
            c.connect_ms = hakaru_model::TimeStats::of(&w.connect_ms);
            c.tls_ms = hakaru_model::TimeStats::of(&w.tls_ms);
            c.ttfb_ms = hakaru_model::TimeStats::of(&w.ttfb_ms);
            connect.extend(w.connect_ms);
            tls.extend(w.tls_ms);
            ttfb.extend(w.ttfb_ms);
            failed += w.failed;
            if let Some(e) = &c.error {
                errors.push(format!("connection {}: {e}", c.id));
            }
            c
        })
        .collect();
    HttpResult::from_connections(
        spec.method,
        seconds,
        conns,
        [&connect, &tls, &ttfb],
        failed,
        errors,
    )
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Puts the request in front of a failure's words.
fn named(h: Halt, what: &str) -> Halt {
    match h {
        Halt::Failed(m) => Halt::Failed(format!("{what}: {m}")),
        Halt::Stale(m) => Halt::Stale(format!("{what}: {m}")),
        Halt::Cut => Halt::Cut,
    }
}

/// A failure to send on a reused connection is the server having closed it: retried.
fn restale(h: Halt, reused: bool, what: &str) -> Halt {
    match h {
        Halt::Failed(m) if reused => Halt::Stale(format!("{what}: {m}")),
        h => named(h, what),
    }
}

/// The size of the resource behind `url`, from a one-byte range request (`--range`).
fn probe_size(
    spec: &HttpSpec,
    url: &Url,
    tls: Option<Arc<rustls::ClientConfig>>,
    stop: &AtomicBool,
) -> Result<u64, HttpRunError> {
    let setup = |m: String| HttpRunError::Setup(format!("--range: {url}: {m}"));
    let cfg = client_side(spec, Duration::ZERO, None, None);
    let meta = vec![FlowMeta {
        id: 1,
        dir: spec.method.dir(),
        role: Role::Receiver,
        quota: None,
    }];
    let core = Core::new(cfg, meta, Box::new(|| {}), false);
    let sh = Shared {
        spec,
        core: &core,
        tls,
        headers: spec.header_pairs(),
        stop,
        deadline: None,
        payload: Vec::new(),
    };
    let mut w = Worker::new(0, spec);
    w.budget = None;
    let probe = ByteRange { first: 0, last: 0 };
    let mut target = url.clone();
    for _ in 0..=spec.max_redirects {
        let head = wire::request_head("GET", &target, &sh.headers, None, Some(probe));
        w.connection(&sh, &target)
            .map_err(|h| setup(halt_words(h)))?;
        let t0 = Instant::now();
        w.write_all(&sh, &head, false)
            .map_err(|h| setup(halt_words(h)))?;
        let h = w
            .read_head(&sh, t0, false)
            .map_err(|h| setup(halt_words(h)))?
            .ok_or_else(|| setup("the server closed the connection before answering".into()))?;
        if (300..400).contains(&h.status) {
            if let Some(loc) = &h.location {
                target = target.join(loc).map_err(|e| setup(e.0))?;
                w.conn = None;
                continue;
            }
        }
        return match (h.status, h.content_range) {
            (206, Some((_, Some(size)))) if size > 0 => Ok(size),
            (206, _) => Err(setup(
                "a 206 answer without the whole size in Content-Range".into(),
            )),
            (s, _) => Err(setup(format!(
                "the server answered a range request with {s} {}: it does not serve byte ranges",
                h.reason
            ))),
        };
    }
    Err(setup(format!("more than {} redirects", spec.max_redirects)))
}

fn halt_words(h: Halt) -> String {
    match h {
        Halt::Cut => "stopped".into(),
        Halt::Failed(m) | Halt::Stale(m) => m,
    }
}
