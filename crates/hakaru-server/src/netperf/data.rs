//! The data phase of one netperf test, as netserver runs it (docs/protocol-notes.md, "netperf").
//!
//! netperf counts calls as well as bytes and ends its tests its own way (EOF, three empty
//! datagrams, a per-transaction connection), so the figures netserver reports are kept here
//! call by call, in one blocking loop per test on its own thread, rather than through the
//! engine's side core. Every loop waits at most [`TICK`] at a time, so it sees the stop flag
//! and its deadline, except TCP_RR's on Linux, whose receive has no timeout and is ended by a
//! watchdog thread ([`watch`]); only the control connection's address is served (connections
//! from elsewhere are closed, datagrams from elsewhere dropped and never answered).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_engine::recvbuf::{at_stream_pos, RecvBuf};
use hakaru_engine::sys;
use hakaru_engine::wake::Wake;
use hakaru_proto::netperf::{self as wire, OmniRequest, OmniResponse, OmniResults};
use hakaru_session::netperf::server::errno;
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use super::sizes::{asked_buf, bind_port, sizes, AUTOTUNED};

mod nap;
mod udp;
mod watch;

/// How long a blocking call waits before the loop looks at its stop flag and deadline.
const TICK: Duration = Duration::from_millis(100);
/// netserver's /proc/stat CPU method code.
const CPU_METHOD_PROC_STAT: u32 = 8;

/// A test's bound data socket, before the data phase.
pub(crate) enum DataSock {
    /// A listener (TCP tests).
    Tcp(TcpListener),
    /// A socket on the data port (UDP tests).
    Udp(UdpSocket),
}

/// What binding a test's data socket may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BindOpts {
    /// `--netperf-data-ports`: the ports a data socket may take.
    pub ports: (u16, u16),
    /// `--max-test-memory`: socket buffers are asked no larger than a quarter of it each
    /// (the kernel doubles them, and there are two).
    pub test_memory: Option<u64>,
}

/// A test's data socket, bound, with what netperf is told and the buffer memory it holds.
pub(crate) struct Bound {
    pub sock: DataSock,
    pub resp: OmniResponse,
    /// Bytes to reserve in `--max-memory`: the socket buffers the kernel granted (read back),
    /// or [`AUTOTUNED`] each where the test left them to autotuning, plus the loop's buffers;
    /// never more than `--max-test-memory`.
    pub memory: u64,
}

/// Binds the test's data socket on `ip` (the control connection's local address) and says
/// what netperf is told about it.
pub(crate) fn bind(ip: IpAddr, req: &OmniRequest, opts: &BindOpts) -> io::Result<Bound> {
    let domain = Domain::for_address(SocketAddr::new(ip, 0));
    let udp = req.protocol == wire::PROTO_UDP;
    let sock = if udp {
        Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?
    } else {
        Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?
    };
    if !udp {
        sock.set_reuse_address(true)?;
    }
    if let Some(n) = asked_buf(req.send_buf_size, opts.test_memory) {
        sock.set_send_buffer_size(n)?;
    }
    if let Some(n) = asked_buf(req.recv_buf_size, opts.test_memory) {
        sock.set_recv_buffer_size(n)?;
    }
    bind_port(&sock, ip, req.data_port, opts.ports)?;
    // What the kernel granted (it clamps to its maximum and doubles).
    let sndbuf = sock.send_buffer_size().unwrap_or(0) as i32;
    let rcvbuf = sock.recv_buffer_size().unwrap_or(0) as i32;
    let local = sock
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("data socket has no address"))?;
    let data = if udp {
        DataSock::Udp(sock.into())
    } else {
        sock.listen(128)?;
        if sys::ACCEPT_INHERITS_TIMEOUTS {
            // Set once here, they come with every accepted socket, and accept itself waits at
            // most a tick: a TCP_CRR connection costs accept, receive, send and close, as
            // under netserver (docs/performance-notes.md, "A connection per transaction").
            sock.set_read_timeout(Some(TICK))?;
            sock.set_write_timeout(Some(TICK))?;
            if req.no_delay() {
                sock.set_tcp_nodelay(true)?;
            }
        } else {
            sock.set_nonblocking(true)?;
        }
        DataSock::Tcp(sock.into())
    };
    let (recv_size, send_size) = sizes(req, rcvbuf, sndbuf);
    let flags = req.flags & (wire::flag::NO_DELAY | wire::flag::MEASURE_CPU);
    let kernel = |asked: i32, granted: i32| {
        if asked > 0 || udp {
            u64::try_from(granted).unwrap_or(0)
        } else {
            AUTOTUNED
        }
    };
    let memory = kernel(req.send_buf_size, sndbuf)
        + kernel(req.recv_buf_size, rcvbuf)
        + (recv_size + send_size) as u64;
    let memory = opts.test_memory.map_or(memory, |cap| memory.min(cap));
    Ok(Bound {
        sock: data,
        memory,
        resp: OmniResponse {
            recv_buf_size: rcvbuf,
            receive_size: if req.recv_only() || req.is_rr() {
                recv_size as i32
            } else {
                req.receive_size
            },
            recv_width: req.recv_width.max(1) as i32,
            send_buf_size: sndbuf,
            send_size: if req.xmit_only() || req.is_rr() {
                send_size as i32
            } else {
                req.send_size
            },
            send_width: req.send_width.max(1) as i32,
            flags,
            cpu_rate: if req.measure_cpu() {
                hakaru_session::netperf::server::CPU_RATE
            } else {
                0.0
            },
            data_port: local.port(),
            socket_prio: req.socket_prio,
            socket_tos: req.socket_tos,
        },
    })
}

/// How a test ends, from the request.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// The server's timer (netserver: the length, plus its pad unless it only sends).
    deadline: Option<Instant>,
    /// The pad included in the timer, taken off the elapsed time when the timer ends the test.
    pad: Duration,
    /// Bytes (stream) or transactions (RR) when the length is a count.
    units: Option<u64>,
    /// The end of a timed test's own length: past it (in netserver's pad) a quiet data path
    /// is the test ending, not a stall.
    nominal_end: Option<Instant>,
}

fn limits(req: &OmniRequest, start: Instant, max: Option<Duration>) -> Limits {
    if req.test_length >= 0 {
        let pad = if req.xmit_only() || req.test_length == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs(u64::from(wire::PAD_TIME_SECS))
        };
        let len = Duration::from_secs(req.test_length.unsigned_abs().into());
        let len = if req.test_length == 0 {
            max.unwrap_or(Duration::from_secs(24 * 3600))
        } else {
            len
        };
        Limits {
            deadline: Some(start + len + pad),
            pad,
            units: None,
            nominal_end: Some(start + len),
        }
    } else {
        Limits {
            deadline: max.map(|m| start + m),
            pad: Duration::ZERO,
            units: Some(u64::from(req.test_length.unsigned_abs())),
            nominal_end: None,
        }
    }
}

/// What a data loop counted.
#[derive(Debug, Default)]
struct Counts {
    bytes_received: u64,
    recv_calls: u64,
    bytes_sent: u64,
    send_calls: u64,
    trans: u64,
    /// The server's timer ended the test.
    timed_out: bool,
    /// The connection's socket buffers at the end.
    bufs: Option<(i32, i32)>,
    /// Bytes moved either way when the loop last looked, and since when that has not changed.
    moved: u64,
    quiet_since: Option<Instant>,
    /// The data path moved nothing for `--stall-timeout`.
    stalled: bool,
    /// UDP_RR requests left unanswered: their response would have been larger than both the
    /// request and [`UDP_RR_FREE_RESPONSE`].
    unanswered: u64,
    /// Where the bytes moved so far are shown to a watchdog on another thread ([`watch`]).
    shown: Option<Arc<AtomicU64>>,
}

impl Counts {
    /// Shows the bytes moved so far to the watchdog, if there is one (a relaxed store).
    fn show(&self) {
        if let Some(s) = &self.shown {
            s.store(
                self.bytes_received.saturating_add(self.bytes_sent),
                Ordering::Relaxed,
            );
        }
    }
}

/// Why a data phase stopped short: the errno netperf hears and the log line.
pub(crate) type DataError = (i32, String);

/// What the data loop needs besides its socket.
pub(crate) struct Job {
    pub req: OmniRequest,
    /// Only this address is served.
    pub peer_ip: IpAddr,
    pub stop: Arc<AtomicBool>,
    /// `--max-duration`.
    pub max: Option<Duration>,
    /// `--stall-timeout`: a data path that moves nothing this long fails the test.
    pub stall: Option<Duration>,
    /// `--max-rate`, bits per second: what the server sends (RR responses) is paced to it.
    pub max_rate: Option<f64>,
    /// The server's shared UDP_STREAM receiver (`None`: receive on this thread).
    pub sink: Option<super::UdpSink>,
}

/// Runs the data phase to its end and gives netserver's figures.
pub(crate) fn run(sock: DataSock, job: &Job) -> Result<OmniResults, DataError> {
    // netperf -T ...,N: the server binds its data loop to CPU N (where the OS can).
    if let Ok(cpu) = usize::try_from(job.req.cpu_binding) {
        if let Err(e) = hakaru_engine::sys::pin_current_thread(cpu) {
            tracing::debug!("netperf: not bound to CPU {cpu} (-T): {e}");
        }
    }
    let start = Instant::now();
    let cpu_before = job
        .req
        .measure_cpu()
        .then(hakaru_engine::sys::cpu_snapshot)
        .flatten();
    let lim = limits(&job.req, start, job.max);
    let (rcvbuf, sndbuf) = match &sock {
        DataSock::Tcp(l) => bufs(&SockRef::from(l)),
        DataSock::Udp(u) => bufs(&SockRef::from(u)),
    };
    let (recv_size, send_size) = sizes(&job.req, rcvbuf, sndbuf);
    let counts = match sock {
        // UDP_STREAM into the shared receiver, unless netperf -T binds this test's loop to
        // a CPU of its own.
        DataSock::Udp(u) => match job
            .sink
            .as_ref()
            .filter(|_| !job.req.is_rr() && job.req.cpu_binding < 0)
        {
            Some(sink) => udp::sink_loop(sink, u, job, lim, recv_size, send_size),
            None => udp::udp_recv(&u, job, lim, recv_size, send_size, Counts::default()),
        },
        DataSock::Tcp(l) if job.req.connect_test() => crr_loop(&l, job, lim, recv_size, send_size),
        DataSock::Tcp(l) => tcp_loop(&l, job, lim, recv_size, send_size),
    }
    .map_err(|e| (e.raw_os_error().unwrap_or(5), e.to_string()))?;
    if counts.stalled {
        let secs = job.stall.unwrap_or_default().as_secs_f64();
        return Err((
            errno::ETIMEDOUT,
            format!(
                "the data path moved nothing for {secs} s (--stall-timeout); {} bytes received, {} sent",
                counts.bytes_received, counts.bytes_sent
            ),
        ));
    }
    if counts.unanswered > 0 {
        tracing::debug!(
            "netperf: {} UDP_RR request(s) from {} left unanswered: shorter than the response allows",
            counts.unanswered,
            job.peer_ip
        );
    }
    let mut elapsed = start.elapsed();
    if counts.timed_out {
        elapsed = elapsed.saturating_sub(lim.pad);
    }
    let (end_rcv, end_snd) = counts.bufs.unwrap_or((rcvbuf, sndbuf));
    let clip = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    let mut r = OmniResults {
        bytes_received: counts.bytes_received,
        recv_calls: clip(counts.recv_calls),
        recv_buf_size: end_rcv,
        bytes_sent: counts.bytes_sent,
        send_calls: clip(counts.send_calls),
        send_buf_size: end_snd,
        trans_received: clip(counts.trans),
        elapsed_time: elapsed.as_secs_f32(),
        transport_retrans: if job.req.protocol == wire::PROTO_UDP {
            -1
        } else {
            0
        },
        ..OmniResults::default()
    };
    if let Some(before) = cpu_before {
        if let Some(after) = hakaru_engine::sys::cpu_snapshot() {
            let u = hakaru_engine::sys::cpu_usage(&before, &after, elapsed.as_secs_f64());
            r.cpu_util = u.busy_pct as f32;
            r.cpu_parts = [
                u.user_pct as f32,
                u.system_pct as f32,
                0.0,
                0.0,
                u.softirq_pct.unwrap_or(0.0) as f32,
            ];
            r.cpu_method = CPU_METHOD_PROC_STAT;
            r.num_cpus = u.cpus;
        }
    }
    Ok(r)
}

fn bufs(s: &SockRef<'_>) -> (i32, i32) {
    (
        s.recv_buffer_size().unwrap_or(0) as i32,
        s.send_buffer_size().unwrap_or(0) as i32,
    )
}

/// True once the loop should end: stopped, past the timer, or stalled (which it marks).
fn over(job: &Job, lim: &Limits, c: &mut Counts) -> bool {
    if job.stop.load(Ordering::Acquire) {
        return true;
    }
    let now = Instant::now();
    if lim.deadline.is_some_and(|d| now >= d) {
        c.timed_out = true;
        return true;
    }
    if let Some(stall) = job.stall {
        let moved = c.bytes_received.saturating_add(c.bytes_sent);
        if moved != c.moved || c.quiet_since.is_none() {
            c.moved = moved;
            c.quiet_since = Some(now);
        }
        let quiet = c
            .quiet_since
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        if quiet >= stall && lim.nominal_end.is_none_or(|e| now < e) {
            c.stalled = true;
            return true;
        }
    }
    false
}

/// Paces what the server sends to `--max-rate`: each chunk goes at the start of its own slot
/// (its bytes at the rate), so by any time the server has sent at most the rate times the
/// time so far plus one chunk; idle time earns no credit.
struct Pacer {
    bytes_per_sec: f64,
    next: Option<Instant>,
}

impl Pacer {
    fn new(max_rate: Option<f64>) -> Option<Pacer> {
        let bits = max_rate.filter(|r| r.is_finite() && *r > 0.0)?;
        Some(Pacer {
            bytes_per_sec: (bits / 8.0).max(1.0),
            next: None,
        })
    }

    /// Bytes a write may carry: 50 ms at the rate, between 512 bytes and 64 KiB.
    fn chunk(&self) -> usize {
        (self.bytes_per_sec * 0.05).clamp(512.0, 65536.0) as usize
    }

    /// Waits until `n` bytes may go; false when the loop is over first (stop or timer). The
    /// wait is the server's own doing, so it does not count as the path being quiet.
    fn wait(&mut self, n: usize, job: &Job, lim: &Limits, c: &mut Counts) -> bool {
        let now = Instant::now();
        let start = self.next.map_or(now, |t| t.max(now));
        self.next = Some(start + Duration::from_secs_f64(n as f64 / self.bytes_per_sec));
        // Bounded by `start`, the timer or the stop flag, checked every tick.
        loop {
            if job.stop.load(Ordering::Acquire) {
                return false;
            }
            let now = Instant::now();
            if lim.deadline.is_some_and(|d| now >= d) {
                c.timed_out = true;
                return false;
            }
            if now >= start {
                c.quiet_since = Some(now);
                return true;
            }
            std::thread::sleep((start - now).min(TICK));
        }
    }
}

fn is_tick(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Accepts the next connection from the test's client, or `None` when the loop is over.
fn accept(
    l: &TcpListener,
    job: &Job,
    lim: &Limits,
    c: &mut Counts,
) -> io::Result<Option<TcpStream>> {
    // Bounded by the deadline or the stop flag, checked every tick.
    loop {
        if over(job, lim, c) {
            return Ok(None);
        }
        match l.accept() {
            Ok((s, from)) if from.ip().to_canonical() == job.peer_ip.to_canonical() => {
                if !sys::ACCEPT_INHERITS_TIMEOUTS {
                    s.set_nonblocking(false)?;
                    s.set_read_timeout(Some(TICK))?;
                    s.set_write_timeout(Some(TICK))?;
                    if job.req.no_delay() {
                        s.set_nodelay(true)?;
                    }
                }
                return Ok(Some(s));
            }
            Ok((_, from)) => {
                tracing::debug!(
                    "netperf: closed a data connection from {from}: not the test's client"
                );
            }
            // A blocking accept has waited its tick already.
            Err(e) if is_tick(&e) && sys::ACCEPT_INHERITS_TIMEOUTS => {}
            Err(e) if is_tick(&e) => crate::wait_readable_for(l, TICK),
            Err(e) => return Err(e),
        }
    }
}

/// TCP_STREAM, TCP_MAERTS, TCP_RR and omni over TCP: one connection.
fn tcp_loop(
    l: &TcpListener,
    job: &Job,
    lim: Limits,
    rsize: usize,
    ssize: usize,
) -> io::Result<Counts> {
    let mut c = Counts::default();
    let Some(mut s) = accept(l, job, &lim, &mut c)? else {
        return Ok(c);
    };
    let req = &job.req;
    if req.is_rr() {
        let mut pacer = Pacer::new(job.max_rate);
        let sizes = (rsize, ssize);
        if sys::SHUTDOWN_WAKES_BLOCKED_RECV {
            watch::rr_untimed(&mut s, job, &lim, sizes, &mut pacer, &mut c)?;
        } else {
            rr_on(&mut s, job, &lim, sizes, &mut pacer, &mut c, false)?;
        }
    } else if req.xmit_only() {
        let buf = vec![b'n'; ssize];
        let mut left = lim.units;
        // Bounded by the timer or the byte count (and the stop flag).
        // Whole sends, as netserver: a count of N bytes sends N rounded up to a send size.
        while !over(job, &lim, &mut c) && left != Some(0) {
            match s.write(&buf) {
                Ok(k) => {
                    c.bytes_sent += k as u64;
                    c.send_calls += 1;
                    left = left.map(|l| l.saturating_sub(k as u64));
                }
                Err(e) if is_tick(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let _ = s.shutdown(std::net::Shutdown::Write);
    } else {
        let mut buf = RecvBuf::for_stream(rsize);
        // A fast flow's reader is woken per 128 KiB queued, not per segment (engine::wake).
        let mut wake = Some(Wake::new(Instant::now()));
        // Bounded by EOF, the timer or the stop flag.
        while !over(job, &lim, &mut c) {
            // Each byte at its stream position's offset in a page (recvbuf::at_stream_pos).
            let n = match s.read(at_stream_pos(&mut buf, c.bytes_received, rsize)) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if is_tick(&e) => 0,
                Err(e) => return Err(e),
            };
            c.bytes_received += n as u64;
            c.recv_calls += u64::from(n > 0);
            Wake::after_read(&mut wake, &s, n as u64, Instant::now());
        }
    }
    c.bufs = Some(bufs(&SockRef::from(&s)));
    Ok(c)
}

/// Reads one whole request; `false` at EOF or when the loop is over.
fn read_request(
    s: &mut TcpStream,
    buf: &mut [u8],
    job: &Job,
    lim: &Limits,
    c: &mut Counts,
) -> io::Result<bool> {
    let mut got = 0;
    // Bounded by the request size, EOF, the timer or the stop flag.
    while got < buf.len() {
        if over(job, lim, c) {
            return Ok(false);
        }
        match s.read(buf.get_mut(got..).unwrap_or_default()) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                got += n;
                c.bytes_received += n as u64;
                c.recv_calls += 1;
                c.show();
            }
            Err(e) if is_tick(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// True for the errors of a peer that went away mid-response (netperf closes its data
/// connection when its own timer ends, whatever the server is sending).
fn peer_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    )
}

/// Transactions on one connection (TCP_RR), or one transaction (TCP_CRR, `once`); `sizes`
/// are the request's and the response's, the responses paced to `--max-rate`.
fn rr_on(
    s: &mut TcpStream,
    job: &Job,
    lim: &Limits,
    (rsize, ssize): (usize, usize),
    pacer: &mut Option<Pacer>,
    c: &mut Counts,
    once: bool,
) -> io::Result<()> {
    let mut req = vec![0u8; rsize];
    let resp = vec![b'r'; ssize];
    // Bounded by EOF, the timer, the transaction count or the stop flag.
    while lim.units.is_none_or(|u| c.trans < u) {
        if !read_request(s, &mut req, job, lim, c)? {
            return Ok(());
        }
        match write_all(s, &resp, job, lim, pacer, c) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) if peer_gone(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
        c.send_calls += 1;
        c.trans += 1;
        if once {
            return Ok(());
        }
    }
    Ok(())
}

/// Writes `buf` whole (true), paced when there is a pacer, counting its bytes as they go;
/// false when the loop ended first.
fn write_all(
    s: &mut TcpStream,
    mut buf: &[u8],
    job: &Job,
    lim: &Limits,
    pacer: &mut Option<Pacer>,
    c: &mut Counts,
) -> io::Result<bool> {
    // Bounded by the buffer, the timer or the stop flag.
    while !buf.is_empty() {
        let mut part = buf;
        if let Some(p) = pacer.as_mut() {
            part = buf.get(..p.chunk().min(buf.len())).unwrap_or(buf);
            if !p.wait(part.len(), job, lim, c) {
                return Ok(false);
            }
        }
        // Bounded by the part, the timer or the stop flag.
        while !part.is_empty() {
            if over(job, lim, c) {
                return Ok(false);
            }
            match s.write(part) {
                Ok(n) => {
                    c.bytes_sent += n as u64;
                    c.show();
                    part = part.get(n..).unwrap_or_default();
                    buf = buf.get(n..).unwrap_or_default();
                }
                Err(e) if is_tick(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(true)
}

/// TCP_CRR: a connection per transaction, until the timer or the count.
fn crr_loop(
    l: &TcpListener,
    job: &Job,
    lim: Limits,
    rsize: usize,
    ssize: usize,
) -> io::Result<Counts> {
    let mut c = Counts::default();
    let mut pacer = Pacer::new(job.max_rate);
    // Bounded by the timer, the transaction count or the stop flag.
    while lim.units.is_none_or(|u| c.trans < u) {
        let Some(mut s) = accept(l, job, &lim, &mut c)? else {
            break;
        };
        if c.bufs.is_none() {
            c.bufs = Some(bufs(&SockRef::from(&s)));
        }
        match rr_on(&mut s, job, &lim, (rsize, ssize), &mut pacer, &mut c, true) {
            Ok(()) => {}
            // A client that gave up on one connection does not end the test.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            Err(e) => return Err(e),
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::super::sizes::{DEFAULT_RECV, MAX_BUF};
    use super::*;

    pub(super) fn req(direction: u32, protocol: u32, test_length: i32) -> OmniRequest {
        OmniRequest {
            cpu_binding: -1,
            send_buf_size: -1,
            send_size: -1,
            send_width: 0,
            request_size: -1,
            recv_buf_size: -1,
            receive_size: -1,
            recv_width: 0,
            response_size: -1,
            flags: 0,
            cpu_rate: 0.0,
            test_length,
            data_port: 0,
            ipfamily: wire::NF_INET,
            socket_type: wire::NST_STREAM,
            protocol,
            direction,
            netperf_port: 0,
            interval_burst: 0,
            interval_usecs: 0,
            socket_prio: -1,
            socket_tos: -1,
            cong_control: String::new(),
        }
    }

    #[test]
    fn the_timer_is_padded_unless_the_server_only_sends() {
        let now = Instant::now();
        let recv = limits(&req(wire::direction::RECV, wire::PROTO_TCP, 10), now, None);
        assert_eq!(recv.deadline, Some(now + Duration::from_secs(14)));
        assert_eq!(recv.pad, Duration::from_secs(4));
        let xmit = limits(&req(wire::direction::XMIT, wire::PROTO_TCP, 10), now, None);
        assert_eq!(xmit.deadline, Some(now + Duration::from_secs(10)));
        assert_eq!(xmit.pad, Duration::ZERO);
        let counted = limits(
            &req(6, wire::PROTO_TCP, -500),
            now,
            Some(Duration::from_secs(60)),
        );
        assert_eq!(counted.units, Some(500));
        assert_eq!(counted.deadline, Some(now + Duration::from_secs(60)));
        let unbounded = limits(&req(6, wire::PROTO_TCP, i32::MIN), now, None);
        assert_eq!(unbounded.units, Some(1 << 31));
        assert_eq!(unbounded.deadline, None);
    }

    /// A test's job on loopback for `req`, nothing else asked.
    pub(super) fn job(req: OmniRequest, stall: Option<Duration>) -> Job {
        Job {
            req,
            peer_ip: "127.0.0.1".parse().unwrap(),
            stop: Arc::default(),
            max: None,
            stall,
            max_rate: None,
            sink: None,
        }
    }

    #[test]
    fn buffers_are_asked_within_the_test_memory_and_reserved_as_granted() {
        assert_eq!(asked_buf(100 << 20, Some(256 << 20)), Some(64 << 20));
        assert_eq!(asked_buf(60 << 20, None), Some(60 << 20));
        assert_eq!(asked_buf(-1, Some(256 << 20)), None);
        let mut r = req(wire::direction::RECV, wire::PROTO_TCP, 1);
        r.send_buf_size = i32::MAX;
        r.recv_buf_size = i32::MAX;
        let ip = "127.0.0.1".parse().unwrap();
        let opts = BindOpts {
            ports: hakaru_session::netperf::server::DEFAULT_DATA_PORTS,
            test_memory: Some(256 << 20),
        };
        let b = bind(ip, &r, &opts).unwrap();
        let granted = (b.resp.send_buf_size + b.resp.recv_buf_size) as u64;
        assert!(b.memory <= 256 << 20, "{}", b.memory);
        assert!(b.memory >= granted, "{} < {granted}", b.memory);
        // Left to autotuning: budgeted at AUTOTUNED each.
        let auto = bind(ip, &req(wire::direction::RECV, wire::PROTO_TCP, 1), &opts).unwrap();
        assert!(auto.memory >= 2 * AUTOTUNED);
    }

    #[test]
    fn a_narrow_port_range_is_where_the_data_socket_binds() {
        let ip = "127.0.0.1".parse().unwrap();
        let free = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = free.local_addr().unwrap().port();
        drop(free);
        let opts = BindOpts {
            ports: (p, p),
            test_memory: None,
        };
        let r = req(wire::direction::RECV, wire::PROTO_TCP, 1);
        let first = bind(ip, &r, &opts).unwrap();
        assert_eq!(first.resp.data_port, p);
        let e = bind(ip, &r, &opts).err().unwrap();
        assert!(e.to_string().contains("--netperf-data-ports"), "{e}");
    }

    #[test]
    fn a_quiet_path_stalls_but_not_in_the_pad_and_not_while_paced() {
        let now = Instant::now();
        let r = req(wire::direction::RECV, wire::PROTO_TCP, 10);
        let j = job(r.clone(), Some(Duration::ZERO));
        let lim = limits(&r, now, None);
        let mut c = Counts::default();
        assert!(over(&j, &lim, &mut c) && c.stalled && !c.timed_out);
        // Past the test's own length (in the pad), quiet is the test ending.
        let lim = limits(&r, now - Duration::from_secs(11), None);
        let mut c = Counts::default();
        assert!(!over(&j, &lim, &mut c) && !c.stalled);
        // Without a stall timeout, never.
        let lim = limits(&r, now, None);
        let mut c = Counts::default();
        assert!(!over(&job(r.clone(), None), &lim, &mut c));
        // Moving bytes keep it going.
        let j = job(r.clone(), Some(Duration::from_secs(60)));
        let mut c = Counts::default();
        assert!(!over(&j, &lim, &mut c));
        c.bytes_received += 1;
        assert!(!over(&j, &lim, &mut c));
        // A pacer's wait marks the path as moving: it is the server's own doing.
        let mut p = Pacer::new(Some(8e6)).unwrap();
        assert_eq!(p.chunk(), 50_000);
        let mut c = Counts::default();
        assert!(p.wait(10_000, &j, &lim, &mut c));
        assert!(c.quiet_since.is_some());
        assert!(Pacer::new(None).is_none() && Pacer::new(Some(0.0)).is_none());
    }

    #[test]
    fn sizes_follow_the_request_within_bounds() {
        let mut rr = req(6, wire::PROTO_TCP, 1);
        rr.request_size = 32;
        rr.response_size = 1024;
        assert_eq!(sizes(&rr, 131072, 16384), (32, 1024));
        rr.response_size = i32::MAX;
        assert_eq!(sizes(&rr, 131072, 16384).1, MAX_BUF);
        let stream = req(wire::direction::RECV, wire::PROTO_TCP, 1);
        assert_eq!(sizes(&stream, 131072, 16384), (131072, 16384));
        assert_eq!(sizes(&stream, -1, -1), (DEFAULT_RECV, 16384));
        let udp = req(wire::direction::RECV, wire::PROTO_UDP, 1);
        assert_eq!(sizes(&udp, 212992, 212992).0, 65_536);
    }
}
