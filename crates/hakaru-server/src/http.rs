//! The HTTP endpoint (`hakaru server --http-port PORT`): `GET /bytes/SIZE` serves SIZE bytes
//! of generated data (no disk) with Content-Length and single-range support; `PUT` and `POST`
//! bodies are read, counted and discarded. So `hakaru http`, wget and curl have a server to
//! measure against where no web server is set up.
//!
//! One thread per connection, bounded per address and in total; a head must arrive within
//! [`HEAD_TIMEOUT`] and a kept-alive connection is closed after [`IDLE_TIMEOUT`] without a
//! request, so idle or slow peers cannot hold threads for long.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::Bytes;
use hakaru_proto::http::{self as wire, BodyKind, ChunkedDecoder, RangeAnswer};
use socket2::{Domain, Protocol, Socket, Type};

use crate::Ctx;

/// Connections the endpoint serves at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Connections one address may hold at once.
pub const MAX_PER_ADDRESS: usize = 64;
/// Longest wait for a request head to complete once its first byte arrived.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the next request on a kept-alive connection.
const IDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest the peer may take nothing (a download) or send nothing (an upload).
const STALL: Duration = Duration::from_secs(30);
/// How often blocking calls come back to check the shutdown flag.
const TICK: Duration = Duration::from_millis(200);
/// Bytes written per call.
const CHUNK: usize = 256 << 10;
/// Period of the generated data: byte `i` of every resource is `PATTERN[i % PERIOD]`, so a
/// range is the same bytes as that part of the whole.
const PERIOD: usize = 64 << 10;

/// The bound HTTP port.
pub struct HttpPort {
    listener: TcpListener,
}

impl HttpPort {
    /// Binds `ip:port` (0 picks a free port).
    pub fn bind(ip: IpAddr, port: u16, only_v6: bool) -> io::Result<HttpPort> {
        let addr = SocketAddr::new(ip, port);
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        hakaru_engine::sys::own_listen_port(&sock)?;
        if addr.is_ipv6() {
            let _ = sock.set_only_v6(only_v6);
        }
        sock.bind(&addr.into())?;
        sock.listen(1024)?;
        Ok(HttpPort {
            listener: sock.into(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves on a thread until the server's shutdown flag is set.
    pub(crate) fn spawn(self, ctx: Arc<Ctx>) -> io::Result<JoinHandle<()>> {
        self.listener.set_nonblocking(true)?;
        std::thread::Builder::new()
            .name("hakaru-http-port".into())
            .spawn(move || accept_loop(&ctx, &self.listener))
    }
}

/// Connections held per address, and in total.
#[derive(Default)]
struct Slots {
    per: HashMap<IpAddr, usize>,
    total: usize,
}

/// Gives a connection's slot back when it ends.
struct Slot {
    slots: Arc<Mutex<Slots>>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut s) = self.slots.lock() {
            s.total -= 1;
            if let Some(n) = s.per.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    s.per.remove(&self.ip);
                }
            }
        }
    }
}

fn take_slot(slots: &Arc<Mutex<Slots>>, ip: IpAddr) -> Result<Slot, String> {
    let mut s = slots.lock().map_err(|_| "internal lock".to_string())?;
    if s.total >= MAX_CONNECTIONS {
        return Err(format!(
            "the HTTP endpoint serves {MAX_CONNECTIONS} connections at once"
        ));
    }
    let n = s.per.entry(ip).or_insert(0);
    if *n >= MAX_PER_ADDRESS {
        return Err(format!(
            "the HTTP endpoint serves {MAX_PER_ADDRESS} connections from one address at once"
        ));
    }
    *n += 1;
    s.total += 1;
    Ok(Slot {
        slots: Arc::clone(slots),
        ip,
    })
}

fn accept_loop(ctx: &Arc<Ctx>, listener: &TcpListener) {
    let slots = Arc::new(Mutex::new(Slots::default()));
    let pattern: Arc<[u8]> = pattern().into();
    let mut errors = crate::accept::AcceptErrors::new("http");
    while !ctx.shutdown.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                errors.accepted();
                if !ctx.cfg.acl.permits(peer.ip()) {
                    ctx.denied.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let _ = stream.set_nonblocking(false);
                let slot = match take_slot(&slots, peer.ip()) {
                    Ok(s) => s,
                    Err(why) => {
                        refuse(&stream, &why);
                        ctx.log_refusal(peer, &why);
                        continue;
                    }
                };
                ctx.metrics.connection("http");
                let (ctx2, pattern) = (Arc::clone(ctx), Arc::clone(&pattern));
                ctx.threads.fetch_add(1, Ordering::AcqRel);
                let spawned = std::thread::Builder::new()
                    .name("hakaru-http".into())
                    .spawn(move || {
                        serve(&ctx2, stream, peer, &pattern);
                        drop(slot);
                        ctx2.threads.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(e) = spawned {
                    ctx.threads.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!("http: cannot start a thread for {peer}: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                crate::wait_readable(listener);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => errors.failed(&e),
        }
    }
}

/// Answers 503 without reading, best effort, on a connection over the limits.
fn refuse(stream: &TcpStream, why: &str) {
    let body = format!("{why}\n");
    let mut head = wire::response_head(503, "Service Unavailable", body.len() as u64, &[], false);
    head.extend_from_slice(body.as_bytes());
    let _ = stream.set_nonblocking(true);
    let _ = (&*stream).write(&head);
}

/// The generated data: printable letters, one period plus a chunk so any offset has a
/// contiguous chunk after it.
fn pattern() -> Vec<u8> {
    generated(PERIOD + CHUNK).collect()
}

/// `n` bytes of the period-[`PERIOD`] letter sequence.
fn generated(n: usize) -> impl Iterator<Item = u8> {
    const L: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\n";
    std::iter::repeat_with(|| L.iter().copied().cycle().take(PERIOD))
        .flatten()
        .take(n)
}

/// What one connection did, for its log line.
#[derive(Default)]
struct Tally {
    requests: u64,
    sent: u64,
    received: u64,
    last: String,
}

/// Why a connection ends.
enum End {
    /// Closed by the peer, idle, or the server is stopping: nothing to say.
    Quiet,
    /// Something worth a log line.
    Said(String),
}

fn serve(ctx: &Ctx, mut stream: TcpStream, peer: SocketAddr, pattern: &[u8]) {
    let _ = stream.set_nodelay(true);
    if stream.set_read_timeout(Some(TICK)).is_err() || stream.set_write_timeout(Some(TICK)).is_err()
    {
        return;
    }
    let mut t = Tally::default();
    let mut acc: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    let end = loop {
        match one_request(ctx, &mut stream, &mut acc, &mut buf, pattern, &mut t) {
            Ok(true) => {}
            Ok(false) => break End::Quiet,
            Err(e) => break e,
        }
    };
    ctx.metrics.bytes("http", "http", "sent", t.sent);
    ctx.metrics.bytes("http", "http", "received", t.received);
    if t.requests > 0 || matches!(end, End::Said(_)) {
        let why = match &end {
            End::Said(m) => format!(" ({m})"),
            End::Quiet => String::new(),
        };
        tracing::info!(
            "http: {peer}: {} request(s){}, {} sent, {} received{why}",
            t.requests,
            if t.last.is_empty() {
                String::new()
            } else {
                format!(", last {}", t.last)
            },
            Bytes(t.sent),
            Bytes(t.received)
        );
    }
}

/// Reads until `acc` holds a whole request head; `Ok(None)` when the peer closed or went idle
/// between requests.
fn read_head(
    ctx: &Ctx,
    stream: &mut TcpStream,
    acc: &mut Vec<u8>,
    buf: &mut [u8],
) -> Result<Option<wire::RequestInfo>, End> {
    let idle_since = Instant::now();
    let mut started: Option<Instant> = (!acc.is_empty()).then(Instant::now);
    loop {
        if !acc.is_empty() {
            match wire::parse_request(acc) {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => {}
                Err(e) => {
                    answer_error(stream, 400, "Bad Request", &e.0);
                    return Err(End::Said(format!("bad request: {}", e.0)));
                }
            }
        }
        match stream.read(buf) {
            Ok(0) if acc.is_empty() => return Ok(None),
            Ok(0) => return Err(End::Said("closed inside a request head".into())),
            Ok(n) => {
                let since = *started.get_or_insert_with(Instant::now);
                acc.extend_from_slice(buf.get(..n).unwrap_or_default());
                // An absolute deadline for the whole head: a peer that trickles a byte at a
                // time never lets a read time out.
                if since.elapsed() > HEAD_TIMEOUT
                    && !matches!(wire::parse_request(acc), Ok(Some(_)))
                {
                    answer_error(
                        stream,
                        408,
                        "Request Timeout",
                        "no whole request head in time",
                    );
                    return Err(End::Said(format!(
                        "no whole request head within {} s",
                        HEAD_TIMEOUT.as_secs()
                    )));
                }
            }
            Err(e) if retry(&e) => {
                if ctx.shutdown.load(Ordering::Acquire) {
                    return Ok(None);
                }
                match started {
                    Some(s) if s.elapsed() > HEAD_TIMEOUT => {
                        return Err(End::Said(format!(
                            "no whole request head within {} s",
                            HEAD_TIMEOUT.as_secs()
                        )))
                    }
                    None if idle_since.elapsed() > IDLE_TIMEOUT => return Ok(None),
                    _ => {}
                }
            }
            Err(_) => return Ok(None),
        }
    }
}

/// Serves one request; `Ok(true)` when the connection may carry another.
fn one_request(
    ctx: &Ctx,
    stream: &mut TcpStream,
    acc: &mut Vec<u8>,
    buf: &mut [u8],
    pattern: &[u8],
    t: &mut Tally,
) -> Result<bool, End> {
    let Some(req) = read_head(ctx, stream, acc, buf)? else {
        return Ok(false);
    };
    acc.drain(..req.head_len);
    t.requests += 1;
    let path = req.path.split('?').next().unwrap_or("").to_string();
    t.last = format!("{} {path}", req.method);
    let keep = req.keep_alive;
    match req.method.as_str() {
        "GET" | "HEAD" => {
            if req.body != BodyKind::Empty {
                answer_error(stream, 400, "Bad Request", "a GET with a body");
                return Err(End::Said("a GET with a body".into()));
            }
            let Some(size) = wire::bytes_size(&path) else {
                let msg = format!(
                    "{path}: not found; this endpoint serves GET /bytes/SIZE (e.g. /bytes/1G) and takes PUT or POST bodies"
                );
                answer(stream, 404, "Not Found", &msg, keep)?;
                return Ok(keep);
            };
            let size = match size {
                Ok(s) => s,
                Err(m) => {
                    answer(stream, 400, "Bad Request", &m, keep)?;
                    return Ok(keep);
                }
            };
            let (status, reason, range, mut headers) =
                match wire::answer_range(req.range.as_deref(), size) {
                    RangeAnswer::Whole => (200, "OK", None, Vec::new()),
                    RangeAnswer::Part(r) => (
                        206,
                        "Partial Content",
                        Some(r),
                        vec![(
                            "Content-Range",
                            format!("bytes {}-{}/{size}", r.first, r.last),
                        )],
                    ),
                    RangeAnswer::Unsatisfiable => {
                        let head = wire::response_head(
                            416,
                            "Range Not Satisfiable",
                            0,
                            &[("Content-Range", format!("bytes */{size}"))],
                            keep,
                        );
                        write_all(ctx, stream, &head)?;
                        return Ok(keep);
                    }
                };
            headers.push(("Content-Type", "application/octet-stream".into()));
            headers.push(("Accept-Ranges", "bytes".into()));
            let (first, len) = range.map_or((0, size), |r| (r.first, r.len()));
            let head = wire::response_head(status, reason, len, &headers, keep);
            write_all(ctx, stream, &head)?;
            if req.method == "GET" {
                send_body(ctx, stream, pattern, first, len, t)?;
            }
            Ok(keep)
        }
        "PUT" | "POST" => {
            if req.expect_continue && req.body != BodyKind::Empty {
                write_all(ctx, stream, b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
            let got = read_body(ctx, stream, acc, buf, req.body, t)?;
            answer(stream, 200, "OK", &format!("received {got} bytes"), keep)?;
            Ok(keep)
        }
        m => {
            let head = wire::response_head(
                405,
                "Method Not Allowed",
                0,
                &[("Allow", "GET, HEAD, PUT, POST".into())],
                false,
            );
            let _ = write_all(ctx, stream, &head);
            Err(End::Said(format!("method {m} not allowed")))
        }
    }
}

fn answer(
    stream: &mut TcpStream,
    status: u16,
    reason: &str,
    msg: &str,
    keep: bool,
) -> Result<(), End> {
    let body = format!("{msg}\n");
    let mut head = wire::response_head(
        status,
        reason,
        body.len() as u64,
        &[("Content-Type", "text/plain".into())],
        keep,
    );
    head.extend_from_slice(body.as_bytes());
    let mut rest: &[u8] = &head;
    let until = Instant::now() + STALL;
    while !rest.is_empty() {
        match stream.write(rest) {
            Ok(0) => return Err(End::Quiet),
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(e) if retry(&e) && Instant::now() < until => {}
            Err(_) => return Err(End::Quiet),
        }
    }
    Ok(())
}

/// An error answer on a connection that is closed after it.
fn answer_error(stream: &mut TcpStream, status: u16, reason: &str, msg: &str) {
    let _ = answer(stream, status, reason, msg, false);
}

/// After a send that timed out: the server stopping ends the connection quietly, a client
/// that took nothing for [`STALL`] since `last` ends it with a reason.
fn still_sending(ctx: &Ctx, last: Instant) -> Result<(), End> {
    if ctx.shutdown.load(Ordering::Acquire) {
        return Err(End::Quiet);
    }
    if last.elapsed() > STALL {
        return Err(End::Said(format!("took nothing for {} s", STALL.as_secs())));
    }
    Ok(())
}

fn write_all(ctx: &Ctx, stream: &mut TcpStream, mut data: &[u8]) -> Result<(), End> {
    let mut last = Instant::now();
    while !data.is_empty() {
        match stream.write(data) {
            Ok(0) => return Err(End::Said("closed while we sent".into())),
            Ok(n) => {
                data = data.get(n..).unwrap_or_default();
                last = Instant::now();
            }
            Err(e) if retry(&e) => still_sending(ctx, last)?,
            Err(e) => return Err(End::Said(format!("sending: {e}"))),
        }
    }
    Ok(())
}

/// Sends `len` bytes of the generated data from offset `first`.
fn send_body(
    ctx: &Ctx,
    stream: &mut TcpStream,
    pattern: &[u8],
    first: u64,
    len: u64,
    t: &mut Tally,
) -> Result<(), End> {
    let mut off = first;
    let end = first + len;
    let mut last = Instant::now();
    while off < end {
        let at = (off % PERIOD as u64) as usize;
        let n = ((end - off).min(CHUNK as u64)) as usize;
        match stream.write(pattern.get(at..at + n).unwrap_or_default()) {
            Ok(0) => return Err(End::Said("closed while we sent".into())),
            Ok(w) => {
                off += w as u64;
                t.sent += w as u64;
                last = Instant::now();
            }
            Err(e) if retry(&e) => still_sending(ctx, last)?,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                return Err(End::Said(format!(
                    "the client left after {} of {len} body bytes",
                    off - first
                )))
            }
            Err(e) => return Err(End::Said(format!("sending: {e}"))),
        }
    }
    Ok(())
}

/// Reads and discards a request body; returns its payload bytes.
fn read_body(
    ctx: &Ctx,
    stream: &mut TcpStream,
    acc: &mut Vec<u8>,
    buf: &mut [u8],
    kind: BodyKind,
    t: &mut Tally,
) -> Result<u64, End> {
    let mut got = 0u64;
    let mut chunked = ChunkedDecoder::default();
    let mut left = match kind {
        BodyKind::Empty => return Ok(0),
        BodyKind::Length(n) => n,
        _ => u64::MAX,
    };
    let mut take = |data: &[u8], got: &mut u64, left: &mut u64| -> Result<(usize, bool), End> {
        if kind == BodyKind::Chunked {
            let s = chunked
                .feed(data)
                .map_err(|e| End::Said(format!("bad chunked body: {}", e.0)))?;
            *got += s.payload;
            Ok((s.consumed, s.done))
        } else {
            let k = (*left).min(data.len() as u64);
            *left -= k;
            *got += k;
            Ok((k as usize, *left == 0))
        }
    };
    if !acc.is_empty() {
        let (used, done) = take(acc, &mut got, &mut left)?;
        acc.drain(..used);
        if done {
            t.received += got;
            return Ok(got);
        }
    }
    let mut last = Instant::now();
    loop {
        match stream.read(buf) {
            Ok(0) => {
                t.received += got;
                return Err(End::Said(format!(
                    "closed inside a request body after {got} bytes"
                )));
            }
            Ok(n) => {
                last = Instant::now();
                let (used, done) = take(buf.get(..n).unwrap_or_default(), &mut got, &mut left)?;
                if done {
                    acc.extend_from_slice(buf.get(used..n).unwrap_or_default());
                    t.received += got;
                    return Ok(got);
                }
            }
            Err(e) if retry(&e) => {
                if ctx.shutdown.load(Ordering::Acquire) {
                    return Err(End::Quiet);
                }
                if last.elapsed() > STALL {
                    t.received += got;
                    return Err(End::Said(format!(
                        "sent nothing for {} s inside a body",
                        STALL.as_secs()
                    )));
                }
            }
            Err(e) => {
                t.received += got;
                return Err(End::Said(format!("receiving: {e}")));
            }
        }
    }
}

/// A timed-out or interrupted call, to be made again.
pub(crate) fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_repeats_with_its_period() {
        let p = pattern();
        assert_eq!(p.len(), PERIOD + CHUNK);
        for i in [0, 1, 100, CHUNK - 1] {
            assert_eq!(p[i], p[i + PERIOD]);
        }
    }
}
