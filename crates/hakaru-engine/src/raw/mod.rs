//! Raw endpoints: one plain TCP stream or one UDP sender, from or to a tool with no protocol
//! of its own (ttcp, nc, an iperf2 client), counted ttcp-style (bytes, I/O calls, time).
//!
//! One flow runs in the caller's thread; [`Core`]'s counters and ticker give the same interval
//! samples and end-of-run [`SideReport`] (CPU, NIC) as the other transports. The UDP loops are
//! in `raw_udp.rs`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::{
    End, FlowDir, IntervalSample, Iperf2Info, RawProtocol, RawResult, RawRole, RawSpec, Role,
    SideReport,
};
use hakaru_proto::iperf2::{self, TestHeader};

use crate::recvbuf::RecvBuf;
use crate::side::{spawn_ticker, Core, FlowMeta, TickerOut};
use crate::sys::{self, AsRawFd};
use crate::tcp::{Payload, SideConfig};

mod udp;

pub use udp::{udp_sink, udp_source};

/// Receives each interval sample.
pub type SampleFn = Box<dyn FnMut(IntervalSample) + Send>;

/// How often blocking calls come back to check Ctrl-C and deadlines.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// How long a TCP source waits for a receiver that takes nothing before giving up.
const STALL: Duration = Duration::from_secs(10);
/// How long a TCP source waits for the receiver to close after its last byte.
const LINGER: Duration = Duration::from_secs(2);
/// Most streams one sink transfer takes (an iperf2 client's `-P`).
pub const MAX_STREAMS: usize = 128;
/// How long a sink waits for an iperf2 client's test header on its first stream, and then for
/// the rest of its `-P` streams.
const GATHER: Duration = Duration::from_secs(2);

/// What a raw run produced.
#[derive(Debug)]
pub struct RawOutcome {
    /// The ttcp-style figures.
    pub result: RawResult,
    /// This end's report (CPU, NIC, environment, intervals' source); `None` if no data moved.
    pub report: Option<SideReport>,
    /// True if Ctrl-C ended the run.
    pub interrupted: bool,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix: f64,
}

/// Errors that stop a raw run before it produced figures.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// A socket call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// OS error.
        #[source]
        source: io::Error,
    },
    /// The interval ticker could not start.
    #[error("starting the interval ticker: {0}")]
    Thread(#[source] io::Error),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> RawError {
    let what = what.into();
    move |source| RawError::Io { what, source }
}

pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The flows' counters and ticker: one flow per stream of the transfer.
pub(crate) struct Meter {
    pub core: Arc<Core>,
    ticker: Option<JoinHandle<TickerOut>>,
    pub started_unix: f64,
}

impl Meter {
    /// Starts the clock and the ticker now, with `flows` flows (ids 1 to `flows`).
    pub fn start(
        spec: &RawSpec,
        iface: Option<String>,
        flows: usize,
        on_sample: SampleFn,
    ) -> Result<Meter, RawError> {
        let (end, role) = match spec.role {
            RawRole::Sink => (End::Server, Role::Receiver),
            RawRole::Source => (End::Client, Role::Sender),
        };
        let cfg = SideConfig {
            end,
            length: spec.length.0 as usize,
            discard: false,
            mptcp: false,
            zerocopy: false,
            affinity: Vec::new(),
            interval: spec.interval.0,
            omit: Duration::ZERO,
            duration: spec.duration.map(|d| d.0),
            stall_timeout: spec.idle.0,
            iface,
            base: None,
            payload: Payload::Letters,
            pace_bps: None,
            half_close: true,
            window_at_peer_end: None,
            shares_host: false,
            thread_per_flow: false,
            subflow_guard: None,
            start_at: None,
        };
        let meta = (1..=flows.max(1) as u32)
            .map(|id| FlowMeta {
                id,
                dir: FlowDir::Up,
                role,
                quota: None,
            })
            .collect();
        Meter::with(cfg, meta, spec.protocol == RawProtocol::Udp, on_sample)
    }

    /// Starts the clock and the ticker now, for flows described by `meta`.
    pub fn with(
        cfg: SideConfig,
        meta: Vec<FlowMeta>,
        udp: bool,
        on_sample: SampleFn,
    ) -> Result<Meter, RawError> {
        let core = Arc::new(Core::new(cfg, meta, Box::new(|| {}), udp));
        let started_unix = unix_now();
        let ticker = spawn_ticker(Arc::clone(&core), on_sample, None).map_err(RawError::Thread)?;
        Ok(Meter {
            core,
            ticker: Some(ticker),
            started_unix,
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.core.now_ns()
    }

    /// Ends every flow (flow `i` with `errors[i]`, if any) and returns this end's report.
    pub fn finish(mut self, mut errors: Vec<Option<String>>) -> SideReport {
        let n = self.core.meta.len();
        errors.resize(n, None);
        for (i, e) in errors.into_iter().enumerate() {
            self.core.finish_flow(i, e);
        }
        let t = self
            .ticker
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_else(|| TickerOut::empty(n));
        self.core.report(t, |_| None)
    }
}

/// Fills the counts of `r` from `report`: the sum of its flows, over the side's time.
pub(crate) fn counts_from(r: &mut RawResult, report: &SideReport) {
    let flows = &report.flows;
    let seconds = flows.first().map_or(0.0, |f| f.seconds);
    r.set_counts(
        flows.iter().map(|f| f.bytes).sum(),
        flows.iter().map(|f| f.calls).sum(),
        seconds,
    );
    r.error = flows.iter().find_map(|f| f.error.clone());
    if flows.iter().any(|f| f.udp.is_some()) {
        r.datagrams = Some(
            flows
                .iter()
                .filter_map(|f| f.udp)
                .map(|u| u.datagrams)
                .sum(),
        );
    }
}

/// One result per flow of `report`, for a transfer of more than one stream; `fill` adds
/// what only the caller knows of stream `i` (its peer, its iperf2 figures).
pub(crate) fn stream_results(
    spec: &RawSpec,
    report: &SideReport,
    streams: usize,
    mut fill: impl FnMut(usize, &mut RawResult),
) -> Vec<RawResult> {
    if streams < 2 {
        return Vec::new();
    }
    report
        .flows
        .iter()
        .take(streams)
        .enumerate()
        .map(|(i, f)| {
            let mut r = RawResult::new(spec.role, spec.protocol);
            r.set_counts(f.bytes, f.calls, f.seconds);
            r.error = f.error.clone();
            r.datagrams = f.udp.map(|u| u.datagrams);
            fill(i, &mut r);
            r
        })
        .collect()
}

/// How many streams an iperf2 client's test header says it opens (`-P`), within
/// [`MAX_STREAMS`]; 1 for anything else.
pub(crate) fn iperf2_streams(h: Option<&TestHeader>) -> usize {
    h.map_or(1, |h| (h.threads as usize).clamp(1, MAX_STREAMS))
}

/// Connects a TCP stream to `peer` within `timeout`, from `bind` when given.
pub fn connect_tcp(
    peer: SocketAddr,
    bind: Option<std::net::IpAddr>,
    timeout: Duration,
) -> Result<TcpStream, RawError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))
        .map_err(io_err("creating a TCP socket"))?;
    if let Some(b) = bind {
        sock.bind(&SocketAddr::new(b, 0).into())
            .map_err(io_err(format!("-B/--bind: binding {b}")))?;
    }
    sock.connect_timeout(&peer.into(), timeout)
        .map_err(io_err(format!("cannot connect to {peer}")))?;
    Ok(sock.into())
}

/// Waits for one connection on `listener`, checking `stop` every [`TICK`]; `None` if stopped.
pub fn accept_one(
    listener: &TcpListener,
    stop: &AtomicBool,
) -> Result<Option<(TcpStream, SocketAddr)>, RawError> {
    accept_until(listener, stop, None)
}

/// Waits for one connection until `deadline` (if any); `None` if stopped or past it.
fn accept_until(
    listener: &TcpListener,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) -> Result<Option<(TcpStream, SocketAddr)>, RawError> {
    listener
        .set_nonblocking(true)
        .map_err(io_err("setting the listener non-blocking"))?;
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        let wait = match deadline.map(|d| d.checked_duration_since(Instant::now())) {
            None => TICK,
            Some(Some(left)) => left.min(TICK),
            Some(None) => return Ok(None),
        };
        match listener.accept() {
            Ok((s, a)) => {
                s.set_nonblocking(false)
                    .map_err(io_err("setting the connection blocking"))?;
                return Ok(Some((s, a)));
            }
            Err(e) if is_retry(&e) => wait_readable(listener, wait),
            Err(e) => return Err(io_err("accepting a connection")(e)),
        }
    }
}

fn wait_readable(l: &TcpListener, t: Duration) {
    sys::wait_fd(l.as_raw_fd(), sys::Interest::Read, t);
}

pub(crate) fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Collects an iperf2 client's test header from the first bytes of a TCP stream.
#[derive(Default)]
struct HeaderSniffer {
    head: Vec<u8>,
    done: bool,
    header: Option<TestHeader>,
}

impl HeaderSniffer {
    /// Feeds bytes; answers the ack a client may wait for. Returns an error for a test the
    /// sink cannot run (the client wants the server to send).
    fn feed(&mut self, b: &[u8], stream: &TcpStream) -> Result<(), String> {
        if self.done {
            return Ok(());
        }
        let want = iperf2::MAX_HEADER
            .saturating_sub(self.head.len())
            .min(b.len());
        self.head.extend_from_slice(&b[..want]);
        if self.head.len() < 4 {
            return Ok(());
        }
        let flags = u32::from_be_bytes([self.head[0], self.head[1], self.head[2], self.head[3]]);
        if !TestHeader::plausible_flags(flags) {
            // --compat clients and plain senders: all of it is payload.
            self.done = true;
            return Ok(());
        }
        if self.head.len() < TestHeader::len_from_flags(flags) {
            return Ok(());
        }
        self.done = true;
        let Some(h) = TestHeader::parse(&self.head) else {
            return Ok(());
        };
        if h.wants_ack() {
            // A -X client blocks until it reads this; others never read it.
            let _ = (&*stream).write_all(&iperf2::encode_ack());
        }
        let bad = h.wants_server_send();
        self.header = Some(h);
        if bad {
            return Err(
                "the iperf2 client asked the server to send (-R, --full-duplex, -d or \
                        -r); hakaru sink only receives"
                    .into(),
            );
        }
        Ok(())
    }
}

pub(crate) fn iperf2_info(h: Option<&TestHeader>) -> Iperf2Info {
    match h {
        Some(h) => Iperf2Info {
            flags: h.flags,
            client_version: h.version.clone(),
            amount: h.amount_words(),
            rate_bps: h.rate,
            ..Iperf2Info::default()
        },
        None => Iperf2Info {
            amount: "until the sender closes (no test header)".into(),
            ..Iperf2Info::default()
        },
    }
}

/// Receives one transfer: the stream `first` and, when it is an iperf2 client's with `-P N`,
/// the client's other N-1 streams (gathered from the same host within [`GATHER`]). Each stream
/// is read in its own thread until its sender closes it (or Ctrl-C).
pub fn tcp_sink(
    first: TcpStream,
    listener: &TcpListener,
    spec: &RawSpec,
    iface: Option<String>,
    on_sample: SampleFn,
    stop: &AtomicBool,
) -> Result<RawOutcome, RawError> {
    let streams = gather(first, listener, spec, stop)?;
    let peers: Vec<Option<String>> = streams
        .iter()
        .map(|s| s.peer_addr().ok().map(|a| a.to_string()))
        .collect();
    for s in &streams {
        s.set_read_timeout(Some(TICK))
            .map_err(io_err("setting a receive timeout"))?;
    }
    let meter = Meter::start(spec, iface, streams.len(), on_sample)?;
    let core = &meter.core;
    let ends: Vec<StreamEnd> = std::thread::scope(|sc| {
        let rest: Vec<_> = streams
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, s)| sc.spawn(move || read_stream(i, s, core, spec, stop)))
            .collect();
        let mut ends = vec![read_stream(0, &streams[0], core, spec, stop)];
        ends.extend(rest.into_iter().map(|h| {
            h.join().unwrap_or_else(|_| StreamEnd {
                error: Some("a receiving thread failed".into()),
                ..StreamEnd::default()
            })
        }));
        ends
    });
    let started_unix = meter.started_unix;
    let report = meter.finish(ends.iter().map(|e| e.error.clone()).collect());
    for s in &streams {
        // The sender waits for our close after its own (iperf2 reads until EOF).
        let _ = s.shutdown(Shutdown::Both);
    }
    let mut result = RawResult::new(RawRole::Sink, RawProtocol::Tcp);
    result.peer = peers[0].clone();
    counts_from(&mut result, &report);
    result.stdio_bytes = spec.stdio.then_some(ends[0].stdio_bytes);
    result.iperf2 = spec.iperf2.then(|| iperf2_info(ends[0].header.as_ref()));
    result.streams = stream_results(spec, &report, streams.len(), |i, r| {
        r.peer = peers[i].clone();
        r.iperf2 = spec.iperf2.then(|| iperf2_info(ends[i].header.as_ref()));
    });
    Ok(RawOutcome {
        result,
        report: Some(report),
        interrupted: ends.iter().any(|e| e.interrupted),
        started_unix,
    })
}

/// The streams of one TCP transfer: `first`, then (for an iperf2 client with `-P N` and no
/// `--stdout`) up to N-1 more connections from the same host. Connections from other hosts
/// meanwhile are closed: the sink serves one transfer at a time.
fn gather(
    first: TcpStream,
    listener: &TcpListener,
    spec: &RawSpec,
    stop: &AtomicBool,
) -> Result<Vec<TcpStream>, RawError> {
    let deadline = Instant::now() + GATHER;
    let want = if spec.iperf2 && !spec.stdio {
        iperf2_streams(peek_header(&first, deadline, stop).as_ref())
    } else {
        1
    };
    let host = first.peer_addr().ok().map(|a| a.ip());
    let mut streams = vec![first];
    while streams.len() < want {
        let Some((s, from)) = accept_until(listener, stop, Some(deadline))? else {
            break;
        };
        if Some(from.ip()) == host {
            streams.push(s);
        } else {
            tracing::warn!(
                "closed a connection from {from}: busy with a transfer from another host"
            );
        }
    }
    if streams.len() < want {
        tracing::warn!(
            "the iperf2 client announced {want} streams; {} connected within {GATHER:?}",
            streams.len()
        );
    }
    Ok(streams)
}

/// Reads (without taking) an iperf2 test header from the start of `s`, waiting until
/// `deadline` for its first bytes; `None` when they are not one.
fn peek_header(s: &TcpStream, deadline: Instant, stop: &AtomicBool) -> Option<TestHeader> {
    s.set_read_timeout(Some(TICK)).ok()?;
    let mut head = [0u8; iperf2::MAX_HEADER];
    while Instant::now() < deadline && !stop.load(Ordering::Acquire) {
        match s.peek(&mut head) {
            Ok(0) => return None,
            Ok(n) if n >= iperf2::BASE_HEADER => return TestHeader::parse(&head[..n]),
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) if is_retry(&e) => {}
            Err(_) => return None,
        }
    }
    None
}

/// How one stream of a TCP sink ended.
#[derive(Default)]
struct StreamEnd {
    error: Option<String>,
    interrupted: bool,
    stdio_bytes: u64,
    header: Option<TestHeader>,
}

/// Reads stream `i` until its sender closes it, counting into flow `i`; stream 0 carries the
/// data to stdout with `--stdout` (a transfer then has one stream).
fn read_stream(
    i: usize,
    stream: &TcpStream,
    core: &Core,
    spec: &RawSpec,
    stop: &AtomicBool,
) -> StreamEnd {
    let len = spec.length.0 as usize;
    let mut buf = RecvBuf::for_stream(len);
    let mut read = 0u64;
    let mut sniffer = spec.iperf2.then(HeaderSniffer::default);
    let mut out = (spec.stdio && i == 0).then(io::stdout);
    let mut end = StreamEnd::default();
    loop {
        if stop.load(Ordering::Acquire) {
            end.interrupted = true;
            break;
        }
        // Each byte at its stream position's offset in a page (recvbuf::at_stream_pos).
        let got = crate::recvbuf::at_stream_pos(&mut buf, read, len);
        let n = match (&*stream).read(got) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if is_retry(&e) => continue,
            Err(e) => {
                end.error = Some(format!("receiving: {e}"));
                break;
            }
        };
        read += n as u64;
        let got = &got[..n];
        core.counters[i].add(n as u64, core.now_ns());
        if let Some(s) = sniffer.as_mut() {
            if let Err(e) = s.feed(got, stream) {
                end.error = Some(e);
                break;
            }
        }
        if let Some(o) = out.as_mut() {
            match o.write_all(got) {
                Ok(()) => end.stdio_bytes += n as u64,
                // The reader of stdout has gone (`| head`): the transfer ends here, as an
                // interrupted one, not a failed one.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                    end.interrupted = true;
                    out = None;
                    break;
                }
                Err(e) => {
                    end.error = Some(format!("--stdout: writing: {e}"));
                    break;
                }
            }
        }
    }
    if let Some(o) = out.as_mut() {
        if let Err(e) = o.flush() {
            if e.kind() != io::ErrorKind::BrokenPipe {
                end.error.get_or_insert(format!("--stdout: writing: {e}"));
            }
        }
    }
    end.header = sniffer.and_then(|s| s.header);
    end
}

/// Reads until `buf` is full or stdin ends; returns the bytes read.
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Why a source stops before its next buffer, if it should.
pub(crate) fn source_done(
    spec: &RawSpec,
    sent: u64,
    deadline: Option<Instant>,
    stop: &AtomicBool,
) -> Option<bool> {
    if stop.load(Ordering::Acquire) {
        return Some(true);
    }
    if spec.count.is_some_and(|n| sent >= n) || deadline.is_some_and(|d| Instant::now() >= d) {
        return Some(false);
    }
    None
}

/// The next block a source sends: `len` bytes of the pattern already in `buf`, or what stdin
/// gives (`None` at its end).
pub(crate) fn next_block(
    stdin: Option<&mut io::Stdin>,
    buf: &mut [u8],
    len: usize,
) -> Result<Option<usize>, String> {
    match stdin {
        None => Ok(Some(len)),
        Some(s) => match read_full(s, buf) {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(e) => Err(format!("--stdin: reading: {e}")),
        },
    }
}

/// Sends a plain TCP stream: `-n` buffers, for `-t`, or stdin until its end.
pub fn tcp_source(
    stream: TcpStream,
    spec: &RawSpec,
    iface: Option<String>,
    on_sample: SampleFn,
    stop: &AtomicBool,
) -> Result<RawOutcome, RawError> {
    let peer = stream.peer_addr().ok().map(|a| a.to_string());
    stream
        .set_write_timeout(Some(TICK))
        .map_err(io_err("setting a send timeout"))?;
    let len = spec.length.0 as usize;
    let mut buf = if spec.stdio {
        vec![0u8; len]
    } else {
        // Printable like ttcp's, so `nc -l` on a terminal shows text.
        Payload::Letters.fill(len)
    };
    let mut stdin = spec.stdio.then(io::stdin);
    let meter = Meter::start(spec, iface, 1, on_sample)?;
    let deadline = spec.duration.map(|d| meter.core.start + d.0);
    let (mut bufs, mut stdio_bytes, mut error, mut interrupted) = (0u64, 0u64, None, false);
    'outer: loop {
        if let Some(i) = source_done(spec, bufs, deadline, stop) {
            interrupted = i;
            break;
        }
        let n = match next_block(stdin.as_mut(), &mut buf, len) {
            Ok(Some(n)) => n,
            Ok(None) => break,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        stdio_bytes += if spec.stdio { n as u64 } else { 0 };
        let (mut off, mut last) = (0, Instant::now());
        while off < n {
            match (&stream).write(&buf[off..n]) {
                Ok(w) => {
                    meter.core.counters[0].add(w as u64, meter.now_ns());
                    off += w;
                    last = Instant::now();
                }
                Err(e) if is_retry(&e) => {
                    if stop.load(Ordering::Acquire) {
                        interrupted = true;
                        break 'outer;
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        break 'outer;
                    }
                    if last.elapsed() > STALL {
                        error = Some(format!(
                            "sending: the receiver took nothing for {} s",
                            STALL.as_secs()
                        ));
                        break 'outer;
                    }
                }
                Err(e) => {
                    error = Some(format!("sending: {e}"));
                    break 'outer;
                }
            }
        }
        bufs += 1;
    }
    let started_unix = meter.started_unix;
    let report = meter.finish(vec![error]);
    linger(&stream);
    let mut result = RawResult::new(RawRole::Source, RawProtocol::Tcp);
    result.peer = peer;
    counts_from(&mut result, &report);
    result.stdio_bytes = spec.stdio.then_some(stdio_bytes);
    Ok(RawOutcome {
        result,
        report: Some(report),
        interrupted,
        started_unix,
    })
}

/// Half-closes and waits (bounded) for the receiver to close, so the last bytes are read
/// before our socket goes away.
fn linger(stream: &TcpStream) {
    if stream.shutdown(Shutdown::Write).is_err() || stream.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let until = Instant::now() + LINGER;
    let mut b = [0u8; 4096];
    while Instant::now() < until {
        match (&*stream).read(&mut b) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_retry(&e) => {}
            Err(_) => return,
        }
    }
}
