//! Connection rate at the server: a listener of the test's own, served by one worker per CPU
//! (no more than the client's connectors) or per listed CPU. The control port's dispatcher
//! spends a thread per connection, far too slow for tens of thousands of connections a second;
//! these workers share the listener. Each connection: accept, read the whole request, write the
//! response, and close (FIN tests): the server closes first, as netserver does in TCP_CRR, so
//! TIME_WAIT lands here and the client's ports are free at once. With `--rst` the worker reads
//! on until the client's RST instead, and no TIME_WAIT is left. Where there are no more connectors
//! than workers (and on Linux, where accepted sockets inherit the listener's timeouts) each
//! worker does that with blocking calls, one connection at a time, as netserver does; otherwise
//! each multiplexes its connections on non-blocking sockets with `poll`.
//!
//! Only the test's client is served: a connection from any other address is closed at once.
//! Every connection has a time limit, and the number open at once is capped, so a stuck or
//! hostile peer costs a bounded amount.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::ConnectServerCounts;
use socket2::{Domain, Protocol, Socket, Type};

use crate::sys;

/// Longest a worker sleeps before it looks at the stop flag.
const POLL_WAIT: Duration = Duration::from_millis(50);
/// Longest a worker sleeps while connections wait for the client's close, which it does not
/// poll for (see [`wait_ready`]).
const DRAIN_WAIT: Duration = Duration::from_millis(5);
/// Bytes a write can send as one segment on any common path: Nagle never delays it.
pub(crate) const ONE_SEGMENT: usize = 1200;

/// Most connections one worker accepts in a row before it serves the ones it has.
const ACCEPT_BURST: usize = 64;
/// Most reads or writes one connection gets per turn, so a peer that keeps sending cannot
/// hold a worker.
const TURN_OPS: usize = 16;

/// How the server side of a connection-rate test runs.
#[derive(Debug, Clone)]
pub struct ConnectServerConfig {
    /// Address to listen on (the server's address of the test's control connection).
    pub ip: IpAddr,
    /// The test's client: connections from any other address are closed at once.
    pub peer: IpAddr,
    /// Request bytes to read on each connection.
    pub request: usize,
    /// Response bytes to write on each connection.
    pub response: usize,
    /// CPUs to pin workers to, one worker each; empty for one unpinned worker per CPU, but no
    /// more than `connectors`.
    pub affinity: Vec<usize>,
    /// Connections the client keeps open at once: more workers than that would only wake each
    /// other on the shared listener.
    pub connectors: usize,
    /// Longest a connection may stay open.
    pub timeout: Duration,
    /// Most connections open at once over all workers; beyond it new ones wait in the backlog.
    pub max_open: usize,
    /// Close each connection right after its response (FIN tests), as netserver does in
    /// TCP_CRR, instead of reading to the client's close (RST tests).
    pub closes_first: bool,
}

/// A running connect listener and its workers; stopped and freed when dropped.
pub struct ConnectServer {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<ConnectServerCounts>>,
    port: u16,
}

impl ConnectServer {
    /// Binds a listener on `cfg.ip`, port chosen by the OS, and starts the workers.
    pub fn start(cfg: ConnectServerConfig) -> io::Result<ConnectServer> {
        let nworkers = if cfg.affinity.is_empty() {
            sys::online_cpus().min(cfg.connectors)
        } else {
            cfg.affinity.len()
        }
        .max(1);
        let blocking = blocking_workers(&cfg, nworkers);
        let (port, listeners) = listeners(cfg.ip.to_canonical(), nworkers, blocking, &cfg)?;
        let per_worker = cfg.max_open.div_ceil(nworkers).max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut server = ConnectServer {
            stop: Arc::clone(&stop),
            workers: Vec::with_capacity(nworkers),
            port,
        };
        let cfg = Arc::new(cfg);
        for (w, l) in listeners.into_iter().enumerate() {
            let (cfg, stop) = (Arc::clone(&cfg), Arc::clone(&stop));
            let pin = cfg.affinity.get(w).copied();
            let h = std::thread::Builder::new()
                .name(format!("hakaru-accept-{w}"))
                .stack_size(256 << 10)
                .spawn(move || {
                    if blocking {
                        blocking_worker(&cfg, &stop, l, pin)
                    } else {
                        worker(&cfg, &stop, l, pin, per_worker)
                    }
                })?;
            // On an error above, dropping `server` stops and joins the workers started so far.
            server.workers.push(h);
        }
        Ok(server)
    }

    /// The listener's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the workers, closes the listener and every connection, and adds up the counts.
    pub fn stop(mut self) -> ConnectServerCounts {
        self.stop_workers()
    }

    fn stop_workers(&mut self) -> ConnectServerCounts {
        self.stop.store(true, Ordering::Release);
        let mut total = ConnectServerCounts::default();
        for w in self.workers.drain(..) {
            if let Ok(c) = w.join() {
                total.accepted += c.accepted;
                total.served += c.served;
                total.dropped += c.dropped;
                total.foreign += c.foreign;
            }
        }
        total
    }
}

impl Drop for ConnectServer {
    fn drop(&mut self) {
        self.stop_workers();
    }
}

/// The listener, shared by the workers. For multiplexing workers it is non-blocking and reports
/// a connection only once its request is there (TCP_DEFER_ACCEPT, where there is one: one
/// wake-up less per connection). For [`blocking_worker`]s it carries the timeouts (and
/// TCP_NODELAY where the response needs it) that every accepted socket inherits, and no
/// TCP_DEFER_ACCEPT: the worker is better woken by the handshake, while the client is still
/// sending its request (faster across CPUs and no slower on one, docs/performance-notes.md,
/// section 7). A SO_REUSEPORT listener per worker would wake one worker per connection instead
/// of all, but measured no faster here, and would let another process of the same user join
/// the port.
fn listeners(
    ip: IpAddr,
    n: usize,
    blocking: bool,
    cfg: &ConnectServerConfig,
) -> io::Result<(u16, Vec<TcpListener>)> {
    let addr = SocketAddr::new(ip, 0);
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.bind(&addr.into())?;
    // The kernel caps this at net.core.somaxconn.
    sock.listen(4096)?;
    if blocking {
        sock.set_read_timeout(Some(POLL_WAIT))?;
        sock.set_write_timeout(Some(POLL_WAIT))?;
        if cfg.response > ONE_SEGMENT {
            sock.set_tcp_nodelay(true)?;
        }
    } else {
        sock.set_nonblocking(true)?;
        let _ = sys::tcp_defer_accept(sys::AsRawFd::as_raw_fd(&sock), 1);
    }
    let first: TcpListener = sock.into();
    let port = first.local_addr()?.port();
    let mut out = Vec::with_capacity(n);
    for _ in 1..n {
        out.push(first.try_clone()?);
    }
    out.insert(0, first);
    Ok((port, out))
}

/// Whether each worker serves one connection at a time with blocking calls, as netserver and
/// bench/connect_loop.c do: where accepted sockets inherit the listener's timeouts (no system
/// call per connection for them) and there are no more connectors than workers (a worker never
/// has a second connection to serve). Across CPUs this is faster than multiplexing: the worker
/// is woken by the client's close and finishes the connection (read the close, close, accept)
/// while the client opens the next one, instead of doing that work when the next request has
/// come and the client waits for its response (docs/performance-notes.md, section 7).
fn blocking_workers(cfg: &ConnectServerConfig, nworkers: usize) -> bool {
    sys::ACCEPT_INHERITS_TIMEOUTS && cfg.connectors <= nworkers
}

/// A worker of [`blocking_workers`]: accept, read the request, write the response, read to the
/// client's close, close, each call blocking for at most [`POLL_WAIT`] (the listener's timeouts,
/// inherited) so that the stop flag and the connection's time limit are seen.
fn blocking_worker(
    cfg: &ConnectServerConfig,
    stop: &AtomicBool,
    listener: TcpListener,
    pin: Option<usize>,
) -> ConnectServerCounts {
    let (peer, response, mut buf) = start_worker(cfg, pin);
    let mut counts = ConnectServerCounts::default();
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, from)) => {
                if from.ip().to_canonical() != peer {
                    counts.foreign += 1;
                    // RST, so this end keeps no TIME_WAIT for a stranger.
                    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                    continue;
                }
                counts.accepted += 1;
                if serve_blocking(&stream, cfg, stop, &mut buf, &response) {
                    counts.served += 1;
                } else {
                    counts.dropped += 1;
                }
            }
            // The listener's timeout: look at the stop flag.
            Err(e) if is_tick(&e) || e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("connect listener: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    counts
}

/// A worker's start: its CPU (`--server-affinity`), the one client it serves, its response and
/// its read buffer.
fn start_worker(cfg: &ConnectServerConfig, pin: Option<usize>) -> (IpAddr, Vec<u8>, Vec<u8>) {
    if let Some(cpu) = pin {
        if let Err(e) = sys::pin_current_thread(cpu) {
            tracing::warn!("connect worker: --server-affinity: {e}");
        }
    }
    (
        cfg.peer.to_canonical(),
        vec![b'r'; cfg.response.max(1)],
        vec![0u8; cfg.request.clamp(1, 64 << 10)],
    )
}

fn is_tick(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// One connection on a blocking socket: the request, the response, then reads to the client's
/// FIN or RST. True once the whole response is written; the connection's time limit and the
/// stop flag cut it short.
fn serve_blocking(
    s: &TcpStream,
    cfg: &ConnectServerConfig,
    stop: &AtomicBool,
    buf: &mut [u8],
    response: &[u8],
) -> bool {
    let deadline = Instant::now() + cfg.timeout;
    let late = || stop.load(Ordering::Acquire) || Instant::now() >= deadline;
    let mut got = 0;
    while got < cfg.request {
        let want = (cfg.request - got).min(buf.len());
        match (&*s).read(&mut buf[..want]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(e) if is_tick(&e) && !late() => {}
            Err(_) => return false,
        }
    }
    let mut sent = 0;
    while sent < cfg.response {
        match send(s, cfg, &response[sent..cfg.response]) {
            Ok(0) => return false,
            Ok(n) => sent += n,
            Err(e) if is_tick(&e) && !late() => {}
            Err(_) => return false,
        }
    }
    if cfg.closes_first {
        return true;
    }
    // The client's close ends it (a read of 0 for FIN, an error for RST); bytes it sends
    // meanwhile are read and dropped, within the time limit.
    loop {
        match (&*s).read(buf) {
            Ok(0) => break,
            Ok(_) if !late() => {}
            Err(e) if is_tick(&e) && !late() => {}
            _ => break,
        }
    }
    true
}

/// Writes response bytes; when the server closes first, so that its FIN leaves with the last
/// of them and the client is woken once ([`sys::send_before_close`]).
fn send(s: &TcpStream, cfg: &ConnectServerConfig, bytes: &[u8]) -> io::Result<usize> {
    if cfg.closes_first {
        sys::send_before_close(s, bytes)
    } else {
        (&*s).write(bytes)
    }
}

/// Where a connection is in its exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the request; bytes read so far.
    Request(usize),
    /// Writing the response; bytes written so far.
    Response(usize),
    /// Response sent; reading until the client's FIN or RST.
    Drain,
}

struct Conn {
    stream: TcpStream,
    phase: Phase,
    opened: Instant,
}

/// What a turn on a connection ended with.
enum Turn {
    /// Waiting for the socket.
    Wait,
    /// Closed after the whole exchange.
    Done,
    /// Closed before the whole exchange.
    Broken,
}

fn worker(
    cfg: &ConnectServerConfig,
    stop: &AtomicBool,
    listener: TcpListener,
    pin: Option<usize>,
    max_open: usize,
) -> ConnectServerCounts {
    let (peer, response, mut buf) = start_worker(cfg, pin);
    let mut counts = ConnectServerCounts::default();
    let mut conns: Vec<Conn> = Vec::new();
    let mut poll = sys::PollSet::new();
    let mut last_sweep = Instant::now();
    let mut accept_paused_until: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        let accepting =
            conns.len() < max_open && accept_paused_until.is_none_or(|t| Instant::now() >= t);
        let draining = conns.iter().any(|c| c.phase == Phase::Drain);
        wait_ready(
            &mut poll,
            &listener,
            accepting,
            &conns,
            if draining { DRAIN_WAIT } else { POLL_WAIT },
        );
        // Newest first, so swap_remove only moves connections already served this round.
        for i in (0..conns.len()).rev() {
            if !poll.ready(i + 1) && conns[i].phase != Phase::Drain {
                continue;
            }
            match turn(&mut conns[i], cfg, &mut buf, &response, &mut counts) {
                Turn::Wait => {}
                Turn::Done => {
                    conns.swap_remove(i);
                }
                Turn::Broken => {
                    counts.dropped += 1;
                    conns.swap_remove(i);
                }
            }
        }
        if accepting && poll.ready(0) {
            for _ in 0..ACCEPT_BURST {
                if conns.len() >= max_open {
                    break;
                }
                // One call for the socket and its non-blocking flag.
                match sys::accept_nonblocking(&listener) {
                    Ok((stream, from)) => {
                        if from.ip().to_canonical() != peer {
                            counts.foreign += 1;
                            // RST, so this end keeps no TIME_WAIT for a stranger.
                            let _ =
                                socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                            continue;
                        }
                        counts.accepted += 1;
                        // A response of one segment leaves at once without it (nothing is
                        // unacknowledged yet): no system call for TCP_NODELAY then.
                        if response.len() > ONE_SEGMENT {
                            let _ = stream.set_nodelay(true);
                        }
                        let mut c = Conn {
                            stream,
                            phase: Phase::Request(0),
                            opened: Instant::now(),
                        };
                        // The request is usually there already.
                        match turn(&mut c, cfg, &mut buf, &response, &mut counts) {
                            Turn::Wait => conns.push(c),
                            Turn::Done => {}
                            Turn::Broken => counts.dropped += 1,
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                        ) => {}
                    Err(e) => {
                        // Out of file descriptors and the like: the listener stays readable,
                        // so back off instead of spinning on it.
                        tracing::warn!("connect listener: accept failed: {e}");
                        accept_paused_until = Some(Instant::now() + Duration::from_millis(20));
                        break;
                    }
                }
            }
        }
        if last_sweep.elapsed() >= Duration::from_millis(100) {
            last_sweep = Instant::now();
            let before = conns.len();
            conns.retain(|c| c.opened.elapsed() < cfg.timeout);
            counts.dropped += (before - conns.len()) as u64;
        }
    }
    // Connections still waiting for their request or response did not complete.
    counts.dropped += conns.iter().filter(|c| c.phase != Phase::Drain).count() as u64;
    counts
}

/// Moves one connection as far as its socket allows.
fn turn(
    c: &mut Conn,
    cfg: &ConnectServerConfig,
    buf: &mut [u8],
    response: &[u8],
    counts: &mut ConnectServerCounts,
) -> Turn {
    for _ in 0..TURN_OPS {
        match c.phase {
            Phase::Request(got) => {
                let want = (cfg.request - got).min(buf.len());
                match (&c.stream).read(&mut buf[..want]) {
                    Ok(0) => return Turn::Broken,
                    Ok(n) if got + n >= cfg.request => c.phase = Phase::Response(0),
                    Ok(n) => c.phase = Phase::Request(got + n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Turn::Wait,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Turn::Broken,
                }
            }
            Phase::Response(sent) => match send(&c.stream, cfg, &response[sent..cfg.response]) {
                Ok(n) if sent + n >= cfg.response => {
                    counts.served += 1;
                    if cfg.closes_first {
                        return Turn::Done;
                    }
                    c.phase = Phase::Drain;
                    // The client's close cannot have come yet (it has not read the response):
                    // read it on the next round, not in a call that would find nothing.
                    return Turn::Wait;
                }
                Ok(n) => c.phase = Phase::Response(sent + n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Turn::Wait,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Turn::Broken,
            },
            Phase::Drain => match (&c.stream).read(buf) {
                // FIN, or RST with --rst: the exchange is over either way.
                Ok(0) => return Turn::Done,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Turn::Wait,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Turn::Done,
            },
        }
    }
    Turn::Wait
}

fn raw<T: sys::AsRawFd>(s: &T) -> sys::RawFd {
    s.as_raw_fd()
}

/// Fills `set` with the listener (index 0, when `accepting`) and each connection (index
/// i + 1) and waits until one is ready or `timeout`. Connections waiting for the client's close
/// are skipped: their FIN or RST would wake the worker once more per connection for nothing
/// urgent, so the caller reads them on every round instead (and waits at most [`DRAIN_WAIT`]
/// while there are any).
fn wait_ready(
    set: &mut sys::PollSet,
    listener: &TcpListener,
    accepting: bool,
    conns: &[Conn],
    timeout: Duration,
) {
    set.clear();
    let listen = if accepting {
        sys::Interest::Read
    } else {
        sys::Interest::Skip
    };
    set.push(raw(listener), listen);
    for c in conns {
        let interest = match c.phase {
            Phase::Drain => sys::Interest::Skip,
            Phase::Response(_) => sys::Interest::Write,
            Phase::Request(_) => sys::Interest::Read,
        };
        set.push(raw(&c.stream), interest);
    }
    set.wait(timeout.max(Duration::from_millis(1)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn config(timeout: Duration, connectors: usize) -> ConnectServerConfig {
        ConnectServerConfig {
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            peer: IpAddr::V4(Ipv4Addr::LOCALHOST),
            request: 3,
            response: 64 << 10,
            affinity: Vec::new(),
            connectors,
            timeout,
            max_open: 64,
            closes_first: false,
        }
    }

    /// One connector: blocking workers on Linux. Many: multiplexing workers everywhere.
    const MODES: [usize; 2] = [1, 64];

    fn server(timeout: Duration, connectors: usize) -> ConnectServer {
        ConnectServer::start(config(timeout, connectors)).unwrap()
    }

    #[test]
    fn workers_block_only_with_no_more_connectors_than_workers() {
        let t = Duration::from_secs(1);
        assert_eq!(
            blocking_workers(&config(t, 1), 1),
            sys::ACCEPT_INHERITS_TIMEOUTS
        );
        assert_eq!(
            blocking_workers(&config(t, 2), 2),
            sys::ACCEPT_INHERITS_TIMEOUTS
        );
        assert!(!blocking_workers(&config(t, 3), 2));
    }

    #[test]
    fn serves_whole_exchanges_and_counts_them() {
        for connectors in MODES {
            for closes_first in [true, false] {
                serves_whole_exchanges(connectors, closes_first);
            }
        }
    }

    fn serves_whole_exchanges(connectors: usize, closes_first: bool) {
        let s = ConnectServer::start(ConnectServerConfig {
            closes_first,
            ..config(Duration::from_secs(5), connectors)
        })
        .unwrap();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, s.port()));
        for i in 0..20 {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            // The request in two parts.
            c.write_all(b"a").unwrap();
            c.write_all(b"bc").unwrap();
            let mut got = vec![0u8; 64 << 10];
            c.read_exact(&mut got).unwrap();
            assert!(got.iter().all(|&b| b == b'r'));
            if i % 5 != 0 {
                continue;
            }
            // FIN tests: the server's close follows its response. RST tests: it waits for
            // the client's.
            let wait = if closes_first { 5000 } else { 100 };
            c.set_read_timeout(Some(Duration::from_millis(wait)))
                .unwrap();
            match c.read(&mut [0u8; 1]) {
                Ok(0) => assert!(closes_first, "the server closed first in an RST test"),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    assert!(
                        !closes_first,
                        "the server did not close first ({connectors})"
                    )
                }
                other => panic!("after the response: {other:?}"),
            }
        }
        // One that gives up before its request is whole.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"a").unwrap();
        drop(c);
        std::thread::sleep(Duration::from_millis(200));
        let counts = s.stop();
        assert_eq!(counts.accepted, 21);
        assert_eq!(counts.served, 20);
        assert_eq!(counts.dropped, 1);
        assert_eq!(counts.foreign, 0);
    }

    #[test]
    fn stalled_connections_time_out_and_stop_frees_everything() {
        for connectors in MODES {
            stalled_connection_times_out(connectors);
        }
    }

    fn stalled_connection_times_out(connectors: usize) {
        let s = server(Duration::from_millis(300), connectors);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, s.port()));
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // A third of the request, then nothing (with no data at all, TCP_DEFER_ACCEPT keeps the
        // connection from multiplexing workers in the kernel and it never reaches one).
        c.write_all(b"a").unwrap();
        let mut b = [0u8; 1];
        // The server closes the stalled connection after its time limit.
        match c.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            other => panic!("expected the server to close the connection, got {other:?}"),
        }
        let counts = s.stop();
        assert_eq!((counts.accepted, counts.dropped), (1, 1));
        // The listener is gone.
        assert!(TcpStream::connect(addr).is_err());
    }
}
