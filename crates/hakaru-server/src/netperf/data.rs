//! The data phase of one netperf test, as netserver runs it (docs/protocol-notes.md, "netperf").
//!
//! netperf counts calls as well as bytes and ends its tests its own way (EOF, three empty
//! datagrams, a per-transaction connection), so the figures netserver reports are kept here
//! call by call, in one blocking loop per test on its own thread, rather than through the
//! engine's side core. Every loop waits at most [`TICK`] at a time, so it sees the stop flag
//! and its deadline; only the control connection's address is served (connections from
//! elsewhere are closed, datagrams from elsewhere dropped and never answered).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_engine::sys;
use hakaru_proto::netperf::{self as wire, OmniRequest, OmniResponse, OmniResults};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

/// How long a blocking call waits before the loop looks at its stop flag and deadline.
const TICK: Duration = Duration::from_millis(100);
/// Largest buffer a receive uses (a request may ask for more; netserver's own limit is 64 KiB
/// of message plus alignment).
const MAX_BUF: usize = 1 << 20;
/// Receive size when the request leaves it to the server and the buffer size is unknown.
const DEFAULT_RECV: usize = 128 * 1024;
/// netserver's /proc/stat CPU method code.
const CPU_METHOD_PROC_STAT: u32 = 8;

/// A test's bound data socket, before the data phase.
pub(crate) enum DataSock {
    /// A listener (TCP tests).
    Tcp(TcpListener),
    /// A socket on the data port (UDP tests).
    Udp(UdpSocket),
}

/// Binds the test's data socket on `ip` (the control connection's local address) and says
/// what netperf is told about it.
pub(crate) fn bind(ip: IpAddr, req: &OmniRequest) -> io::Result<(DataSock, OmniResponse)> {
    let port = u16::try_from(req.data_port)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "data port above 65535"))?;
    let addr = SocketAddr::new(ip, port);
    let udp = req.protocol == wire::PROTO_UDP;
    let sock = if udp {
        Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?
    } else {
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?
    };
    if !udp {
        sock.set_reuse_address(true)?;
    }
    if req.send_buf_size > 0 {
        sock.set_send_buffer_size(req.send_buf_size as usize)?;
    }
    if req.recv_buf_size > 0 {
        sock.set_recv_buffer_size(req.recv_buf_size as usize)?;
    }
    sock.bind(&addr.into())?;
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
    Ok((
        data,
        OmniResponse {
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
    ))
}

/// Bytes per receive and per send: the transaction sizes of an RR test, else the asked sizes,
/// else netserver's choices (the socket buffer for receives, 16 KiB... for sends).
fn sizes(req: &OmniRequest, rcvbuf: i32, sndbuf: i32) -> (usize, usize) {
    let pick = |asked: i32, fallback: usize| {
        usize::try_from(asked)
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or(fallback)
            .min(MAX_BUF)
    };
    if req.is_rr() {
        return (pick(req.request_size, 1), pick(req.response_size, 1));
    }
    let recv_default = usize::try_from(rcvbuf)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_RECV);
    let send_default = usize::try_from(sndbuf)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(16384)
        .min(64 * 1024);
    if req.protocol == wire::PROTO_UDP {
        return (65_536, pick(req.send_size, 1024));
    }
    (
        pick(req.receive_size, recv_default),
        pick(req.send_size, send_default),
    )
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
        }
    } else {
        Limits {
            deadline: max.map(|m| start + m),
            pad: Duration::ZERO,
            units: Some(u64::from(req.test_length.unsigned_abs())),
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
        DataSock::Udp(u) => udp_loop(&u, job, lim, recv_size, send_size),
        DataSock::Tcp(l) if job.req.connect_test() => crr_loop(&l, job, lim, recv_size, send_size),
        DataSock::Tcp(l) => tcp_loop(&l, job, lim, recv_size, send_size),
    }
    .map_err(|e| (e.raw_os_error().unwrap_or(5), e.to_string()))?;
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

/// True once the loop should end: stopped, or past the timer (which it marks).
fn over(job: &Job, lim: &Limits, c: &mut Counts) -> bool {
    if job.stop.load(Ordering::Acquire) {
        return true;
    }
    if lim.deadline.is_some_and(|d| Instant::now() >= d) {
        c.timed_out = true;
        return true;
    }
    false
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
        rr_on(&mut s, job, &lim, rsize, ssize, &mut c, false)?;
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
        let mut buf = vec![0u8; rsize];
        // Bounded by EOF, the timer or the stop flag.
        while !over(job, &lim, &mut c) {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    c.bytes_received += n as u64;
                    c.recv_calls += 1;
                }
                Err(e) if is_tick(&e) => {}
                Err(e) => return Err(e),
            }
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
            }
            Err(e) if is_tick(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Transactions on one connection (TCP_RR), or one transaction (TCP_CRR, `once`).
fn rr_on(
    s: &mut TcpStream,
    job: &Job,
    lim: &Limits,
    rsize: usize,
    ssize: usize,
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
        write_all(s, &resp, job, lim, c)?;
        c.send_calls += 1;
        c.bytes_sent += resp.len() as u64;
        c.trans += 1;
        if once {
            return Ok(());
        }
    }
    Ok(())
}

fn write_all(
    s: &mut TcpStream,
    mut buf: &[u8],
    job: &Job,
    lim: &Limits,
    c: &mut Counts,
) -> io::Result<()> {
    // Bounded by the buffer, the timer or the stop flag.
    while !buf.is_empty() {
        if over(job, lim, c) {
            return Ok(());
        }
        match s.write(buf) {
            Ok(n) => buf = buf.get(n..).unwrap_or_default(),
            Err(e) if is_tick(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
    // Bounded by the timer, the transaction count or the stop flag.
    while lim.units.is_none_or(|u| c.trans < u) {
        let Some(mut s) = accept(l, job, &lim, &mut c)? else {
            break;
        };
        if c.bufs.is_none() {
            c.bufs = Some(bufs(&SockRef::from(&s)));
        }
        match rr_on(&mut s, job, &lim, rsize, ssize, &mut c, true) {
            Ok(()) => {}
            // A client that gave up on one connection does not end the test.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            Err(e) => return Err(e),
        }
    }
    Ok(c)
}

/// UDP_STREAM and UDP_RR: datagrams from the test's client until its empty datagrams (or the
/// timer).
fn udp_loop(
    u: &UdpSocket,
    job: &Job,
    lim: Limits,
    rsize: usize,
    ssize: usize,
) -> io::Result<Counts> {
    let mut c = Counts::default();
    u.set_read_timeout(Some(TICK))?;
    let mut buf = vec![0u8; rsize.max(1)];
    let resp = vec![b'r'; ssize];
    let rr = job.req.is_rr();
    // Bounded by the client's empty datagram, the timer or the stop flag.
    while !over(job, &lim, &mut c) {
        match u.recv_from(&mut buf) {
            Ok((_, from)) if from.ip().to_canonical() != job.peer_ip.to_canonical() => {}
            Ok((0, _)) => break,
            Ok((n, from)) => {
                c.bytes_received += n as u64;
                c.recv_calls += 1;
                if rr {
                    match u.send_to(&resp, from) {
                        Ok(k) => {
                            c.bytes_sent += k as u64;
                            c.send_calls += 1;
                        }
                        Err(e) if hakaru_engine::sys::is_out_of_buffers(&e) => {}
                        Err(e) => return Err(e),
                    }
                    c.trans += 1;
                }
            }
            Err(e) if is_tick(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(direction: u32, protocol: u32, test_length: i32) -> OmniRequest {
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
