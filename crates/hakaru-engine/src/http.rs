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
pub use tls::client_tls_config;
use tls::{handshake, tls_config, Stream};

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

/// One connection's state and figures.
struct Worker {
    /// Flow index (0-based).
    i: usize,
    conn: Option<Conn>,
    stats: HttpConnection,
    connect_ms: Vec<f64>,
    tls_ms: Vec<f64>,
    ttfb_ms: Vec<f64>,
    failed: u64,
    /// Body bytes left with `-n`.
    budget: Option<u64>,
    buf: Vec<u8>,
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
    let workers: Vec<Worker> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..flows)
            .map(|i| {
                let shared = &shared;
                let items: Vec<(Url, Option<ByteRange>)> = if spec.range {
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
                };
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
    });
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
        window_at_peer_end: false,
        shares_host: false,
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

impl Worker {
    fn new(i: usize, spec: &HttpSpec) -> Worker {
        Worker {
            i,
            conn: None,
            stats: HttpConnection {
                id: i as u32 + 1,
                ..Default::default()
            },
            connect_ms: Vec::new(),
            tls_ms: Vec::new(),
            ttfb_ms: Vec::new(),
            failed: 0,
            budget: spec.bytes.map(|b| b.0),
            buf: vec![0u8; BUF],
        }
    }

    /// Fetches the items once, or in turn until the time or the byte budget is used up.
    fn work(&mut self, sh: &Shared, items: &[(Url, Option<ByteRange>)]) {
        let repeat = sh.spec.duration.is_some() || sh.spec.bytes.is_some();
        if items.is_empty() {
            return;
        }
        let mut k = 0usize;
        loop {
            if sh.over() || self.budget == Some(0) {
                break;
            }
            let Some((url, range)) = items.get(k % items.len()) else {
                break;
            };
            let mut halt = self.request(sh, url.clone(), *range);
            if let Err(Halt::Stale(_)) = halt {
                self.conn = None;
                halt = self.request(sh, url.clone(), *range);
            }
            match halt {
                Ok(()) => {}
                Err(Halt::Cut) => break,
                Err(Halt::Failed(e)) | Err(Halt::Stale(e)) => {
                    self.failed += 1;
                    self.stats.error = Some(e);
                    break;
                }
            }
            k += 1;
            if !repeat && k >= items.len() {
                break;
            }
        }
        self.conn = None;
    }

    /// Opens a connection for `url` unless the current one serves it.
    fn connection(&mut self, sh: &Shared, url: &Url) -> Result<&mut Conn, Halt> {
        let key = (url.tls, url.host.clone(), url.port);
        if self.conn.as_ref().is_some_and(|c| c.key != key) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let c = self.open(sh, url, key)?;
            self.conn = Some(c);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| Halt::Failed("no connection".into()))
    }

    fn open(&mut self, sh: &Shared, url: &Url, key: (bool, String, u16)) -> Result<Conn, Halt> {
        let timeout = sh.spec.connect_timeout.0;
        let fail = |m: String| Halt::Failed(format!("{url}: {m}"));
        let addrs: Vec<SocketAddr> = (url.host.as_str(), url.port)
            .to_socket_addrs()
            .map_err(|e| fail(format!("cannot resolve {}: {e}", url.host)))?
            .filter(|a| match sh.spec.ip_version {
                Some(4) => a.is_ipv4(),
                Some(6) => a.is_ipv6(),
                _ => true,
            })
            .collect();
        if addrs.is_empty() {
            return Err(fail(format!(
                "{} has no IPv{} address",
                url.host,
                sh.spec.ip_version.unwrap_or(4)
            )));
        }
        let t0 = Instant::now();
        let mut last = None;
        let mut tcp = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => {
                    tcp = Some((s, *a));
                    break;
                }
                Err(e) => last = Some(format!("connecting to {a}: {e}")),
            }
        }
        let Some((tcp, peer)) = tcp else {
            return Err(fail(last.unwrap_or_default()));
        };
        self.connect_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        self.stats.connects += 1;
        self.stats.peer = Some(peer.to_string());
        let setup = |e: io::Error| fail(format!("setting up the socket: {e}"));
        tcp.set_nodelay(true).map_err(setup)?;
        tcp.set_read_timeout(Some(TICK)).map_err(setup)?;
        tcp.set_write_timeout(Some(TICK)).map_err(setup)?;
        let stream = match (&sh.tls, url.tls) {
            (Some(cfg), true) => {
                let t1 = Instant::now();
                let s = handshake(cfg, url, tcp, timeout, sh.stop).map_err(fail)?;
                self.tls_ms.push(t1.elapsed().as_secs_f64() * 1e3);
                let c = &s.conn;
                self.stats.tls = Some(format!(
                    "{} {}",
                    c.protocol_version()
                        .map_or("?".into(), |v| format!("{v:?}")),
                    c.negotiated_cipher_suite()
                        .map_or("?".into(), |s| format!("{:?}", s.suite()))
                ));
                Stream::Tls(Box::new(s))
            }
            _ => Stream::Plain(tcp),
        };
        Ok(Conn {
            stream,
            key,
            pending: Vec::new(),
            used: 0,
        })
    }

    /// One request and its response, following redirects.
    fn request(&mut self, sh: &Shared, mut url: Url, range: Option<ByteRange>) -> Result<(), Halt> {
        let method = sh.spec.method;
        let mut redirects = 0;
        loop {
            self.stats.url = url.to_string();
            let upload = sh.spec.upload.map(|b| b.0);
            let head = wire::request_head(method.as_str(), &url, &sh.headers, upload, range);
            let reused = self.connection(sh, &url)?.used > 0;
            if redirects == 0 {
                self.stats.requests += 1;
            }
            let what = format!("{} {url}", method.as_str());
            let stale_or = |reused: bool, m: String| {
                if reused {
                    Halt::Stale(m)
                } else {
                    Halt::Failed(m)
                }
            };
            if let Some(c) = self.conn.as_mut() {
                c.used += 1;
            }
            self.write_all(sh, &head, false)
                .map_err(|h| restale(h, reused, &what))?;
            if let Some(n) = upload {
                self.upload(sh, n).map_err(|h| named(h, &what))?;
            }
            // Time to first byte runs from the request's last byte.
            let t0 = Instant::now();
            let resp = match self.read_head(sh, t0, false)? {
                Some(r) => r,
                None => {
                    self.conn = None;
                    return Err(stale_or(
                        reused,
                        format!("{what}: the server closed the connection before answering"),
                    ));
                }
            };
            *self.stats.status.entry(resp.status).or_insert(0) += 1;
            let redirect = (300..400).contains(&resp.status)
                && resp.status != 304
                && resp.location.is_some()
                && method == HttpMethod::Get;
            if redirect && redirects < sh.spec.max_redirects {
                self.body(sh, &resp, false).map_err(|h| named(h, &what))?;
                if !resp.keep_alive {
                    self.conn = None;
                }
                let loc = resp.location.unwrap_or_default();
                url = url
                    .join(&loc)
                    .map_err(|e| Halt::Failed(format!("{what}: redirect to '{loc}': {e}")))?;
                redirects += 1;
                continue;
            }
            if !(200..300).contains(&resp.status) {
                self.conn = None;
                let more = if redirect {
                    format!(" (more than {} redirects)", sh.spec.max_redirects)
                } else {
                    String::new()
                };
                return Err(Halt::Failed(format!(
                    "{what}: {} {}{more}",
                    resp.status, resp.reason
                )));
            }
            if let Some(r) = range {
                let ok = resp.status == 206 && resp.content_range.is_some_and(|(cr, _)| cr == r);
                if !ok {
                    self.conn = None;
                    return Err(Halt::Failed(format!(
                        "{what}: asked for bytes {}-{} and got status {} {}",
                        r.first,
                        r.last,
                        resp.status,
                        resp.content_range.map_or(
                            "without Content-Range".into(),
                            |(c, _)| format!("with bytes {}-{}", c.first, c.last)
                        )
                    )));
                }
            }
            self.body(sh, &resp, method == HttpMethod::Get)
                .map_err(|h| named(h, &what))?;
            self.stats.completed += 1;
            if !resp.keep_alive {
                self.conn = None;
            }
            return Ok(());
        }
    }

    /// Writes `data`; `count` adds it to the flow's counter (upload bodies).
    fn write_all(&mut self, sh: &Shared, mut data: &[u8], count: bool) -> Result<(), Halt> {
        let mut last = Instant::now();
        let Some(c) = self.conn.as_mut() else {
            return Err(Halt::Failed("no connection".into()));
        };
        while !data.is_empty() {
            match c.stream.write(data) {
                Ok(0) => return Err(Halt::Failed("the connection closed while sending".into())),
                Ok(n) => {
                    if let Some(counter) = sh.core.counters.get(self.i).filter(|_| count) {
                        counter.add(n as u64, sh.core.now_ns());
                    }
                    data = data.get(n..).unwrap_or_default();
                    last = Instant::now();
                }
                Err(e) if retry(&e) => sh.still_waiting(last, "took")?,
                Err(e) => return Err(Halt::Failed(format!("sending: {e}"))),
            }
        }
        if let Stream::Tls(s) = &mut c.stream {
            // Push out what rustls still holds.
            let _ = s.flush();
        }
        Ok(())
    }

    /// Sends a generated body of `n` bytes, counting it.
    fn upload(&mut self, sh: &Shared, n: u64) -> Result<(), Halt> {
        let mut left = n;
        while left > 0 {
            let k = left.min(BUF as u64) as usize;
            let k = match self.budget {
                Some(0) => return Err(Halt::Cut),
                Some(b) => k.min(b.min(usize::MAX as u64) as usize),
                None => k,
            };
            if sh.over() {
                return Err(Halt::Cut);
            }
            let Some(chunk) = sh.payload.get(..k) else {
                return Err(Halt::Failed("no payload to send".into()));
            };
            self.write_all(sh, chunk, true)?;
            left -= k as u64;
            if let Some(b) = self.budget.as_mut() {
                *b -= k as u64;
            }
        }
        Ok(())
    }

    /// Reads some bytes into the buffer; `Ok(0)` at the end of the stream.
    fn read_some(&mut self, sh: &Shared) -> Result<usize, Halt> {
        let since = Instant::now();
        let Some(c) = self.conn.as_mut() else {
            return Ok(0);
        };
        loop {
            match c.stream.read(&mut self.buf) {
                Ok(n) => return Ok(n),
                Err(e) if retry(&e) => sh.still_waiting(since, "sent")?,
                Err(e) => return Err(Halt::Failed(format!("receiving: {e}"))),
            }
        }
    }

    /// Reads a response head; `None` if the connection closed before its first byte.
    fn read_head(
        &mut self,
        sh: &Shared,
        sent: Instant,
        head_request: bool,
    ) -> Result<Option<wire::ResponseHead>, Halt> {
        let mut acc = self
            .conn
            .as_mut()
            .map(|c| std::mem::take(&mut c.pending))
            .unwrap_or_default();
        let mut first = !acc.is_empty();
        if first {
            self.ttfb_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        }
        loop {
            if !acc.is_empty() {
                match wire::parse_response(&acc, head_request) {
                    Ok(Some(h)) if h.status == 100 => {
                        acc.drain(..h.head_len);
                        continue;
                    }
                    Ok(Some(h)) => {
                        if let Some(c) = self.conn.as_mut() {
                            c.pending = acc.split_off(h.head_len);
                        }
                        return Ok(Some(h));
                    }
                    Ok(None) => {}
                    Err(e) => return Err(Halt::Failed(e.0)),
                }
            }
            let n = self.read_some(sh)?;
            if n == 0 {
                if acc.is_empty() {
                    return Ok(None);
                }
                return Err(Halt::Failed(
                    "the server closed the connection inside the response head".into(),
                ));
            }
            if !first {
                first = true;
                self.ttfb_ms.push(sent.elapsed().as_secs_f64() * 1e3);
            }
            acc.extend_from_slice(self.buf.get(..n).unwrap_or_default());
        }
    }

    /// Reads a body to its end; `count` adds its bytes to the flow (downloads).
    fn body(&mut self, sh: &Shared, h: &wire::ResponseHead, count: bool) -> Result<(), Halt> {
        let mut state = match h.body {
            BodyKind::Empty => return Ok(()),
            BodyKind::Length(0) => return Ok(()),
            BodyKind::Length(n) => Body::Length { left: n, total: n },
            BodyKind::Chunked => Body::Chunked(ChunkedDecoder::default()),
            BodyKind::UntilClose => Body::UntilClose,
        };
        let pending = self
            .conn
            .as_mut()
            .map(|c| std::mem::take(&mut c.pending))
            .unwrap_or_default();
        if !pending.is_empty() {
            let (used, done) = self.account(sh, &mut state, &pending, count)?;
            if done {
                if let Some(c) = self.conn.as_mut() {
                    c.pending = pending.get(used..).unwrap_or_default().to_vec();
                }
                return Ok(());
            }
        }
        let held = match self.conn.as_ref().map(|c| &c.stream) {
            Some(Stream::Tls(_)) => TLS_HELD,
            _ => 0,
        };
        let mut raised = match state {
            Body::Length { left, .. } if left > 4 * u64::from(BODY_LOWAT) + held => {
                self.set_lowat(BODY_LOWAT)
            }
            _ => false,
        };
        loop {
            // A body that never makes the reads wait (a fast path, a large file) must still
            // end at the run's time: the waits check it, this checks it between reads.
            if sh.over() {
                return Err(Halt::Cut);
            }
            if raised
                && matches!(state, Body::Length { left, .. } if left < u64::from(BODY_LOWAT) + held)
            {
                raised = !self.set_lowat(1);
            }
            let n = self.read_some(sh)?;
            if n == 0 {
                return match state {
                    Body::UntilClose => {
                        self.conn = None;
                        Ok(())
                    }
                    Body::Length { left, total } => Err(Halt::Failed(format!(
                        "the connection closed after {} of {total} body bytes",
                        total - left
                    ))),
                    Body::Chunked(_) => Err(Halt::Failed(
                        "the connection closed inside a chunked body".into(),
                    )),
                };
            }
            let data = std::mem::take(&mut self.buf);
            let r = self.account(sh, &mut state, data.get(..n).unwrap_or_default(), count);
            let leftover = match &r {
                Ok((used, true)) if *used < n => data.get(*used..n).unwrap_or_default().to_vec(),
                _ => Vec::new(),
            };
            self.buf = data;
            let (_, done) = r?;
            if done {
                if let Some(c) = self.conn.as_mut() {
                    c.pending = leftover;
                }
                return Ok(());
            }
        }
    }

    /// Sets the connection's receive low-water mark ([`BODY_LOWAT`]); true if it was set.
    /// Under TLS the caller allows for the body bytes TLS holds ([`TLS_HELD`]), which the
    /// socket no longer has.
    fn set_lowat(&mut self, bytes: u32) -> bool {
        let tcp = match self.conn.as_ref().map(|c| &c.stream) {
            Some(Stream::Plain(s)) => s,
            Some(Stream::Tls(s)) => &s.sock.tcp,
            None => return false,
        };
        crate::sys::set_recv_lowat(&socket2::SockRef::from(tcp), bytes).is_ok()
    }

    /// Counts the body bytes in `data`; returns the bytes used and whether the body ended.
    fn account(
        &mut self,
        sh: &Shared,
        state: &mut Body,
        data: &[u8],
        count: bool,
    ) -> Result<(usize, bool), Halt> {
        let (used, payload, done) = match state {
            Body::Length { left, .. } => {
                let k = (*left).min(data.len() as u64);
                *left -= k;
                (k as usize, k, *left == 0)
            }
            Body::Chunked(d) => {
                let s = d.feed(data).map_err(|e| Halt::Failed(e.0))?;
                (s.consumed, s.payload, s.done)
            }
            Body::UntilClose => (data.len(), data.len() as u64, false),
        };
        if count && payload > 0 {
            let take = self.budget.map_or(payload, |b| b.min(payload));
            if let Some(counter) = sh.core.counters.get(self.i) {
                counter.add(take, sh.core.now_ns());
            }
            if let Some(b) = self.budget.as_mut() {
                *b -= take;
                // A body that ends with the budget is a completed request.
                if *b == 0 && !done {
                    self.conn = None;
                    return Err(Halt::Cut);
                }
            }
        }
        Ok((used, done))
    }
}

/// Where a body stands.
enum Body {
    Length { left: u64, total: u64 },
    Chunked(ChunkedDecoder),
    UntilClose,
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
