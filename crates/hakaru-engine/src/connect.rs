//! Connection rate at the client (`hakaru connect`, netperf TCP_CRR): connector threads in a
//! closed loop, each opening one connection at a time until the deadline: socket, connect,
//! request, whole response, close (with RST when asked). Each connector times the connect and
//! the whole transaction into its own histogram (merged at the end) and counts into its own
//! cache line, which a ticker thread reads every interval.
//!
//! Failures (refused, timed out, reset, short response) are counted by kind and the connector
//! pauses briefly, so a dead server does not turn into a busy loop. Running out of local ports
//! (EADDRNOTAVAIL) or file descriptors ends the test at once with an error saying why.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::{ConnectServerCounts, ConnectSpec, Dur, End, SideReport};
use socket2::{Domain, Protocol, Socket, Type};

use crate::hist::LatencyHistogram;
use crate::sys;

/// Pause after a failed connection, so a refusing or dead server costs little CPU.
const FAILURE_PAUSE: Duration = Duration::from_millis(1);
/// Most distinct failure kinds kept per connector; further kinds are counted as "other".
const MAX_ERROR_KINDS: usize = 16;

/// How the client side of a connection-rate test runs.
#[derive(Debug, Clone)]
pub struct ConnectConfig {
    /// The server's connect listener.
    pub addr: SocketAddr,
    /// Local address to connect from (`-B`); the port is still chosen per connection.
    pub bind: Option<IpAddr>,
    /// Concurrent connectors.
    pub connectors: u32,
    /// How long connectors start new connections.
    pub duration: Duration,
    /// Request bytes per connection.
    pub request: usize,
    /// Response bytes per connection.
    pub response: usize,
    /// Close with RST (SO_LINGER 0).
    pub rst: bool,
    /// The server closes each connection right after its response (FIN tests against a server
    /// that says so, and netserver): the client reads to that close, then closes, so TIME_WAIT
    /// stays at the server and this end's ports are free at once.
    pub server_closes: bool,
    /// Limit on each connect, send and receive.
    pub timeout: Duration,
    /// CPUs to pin connectors to, round robin; empty for none.
    pub affinity: Vec<usize>,
    /// Interval between ticks; zero for none.
    pub interval: Duration,
}

impl ConnectConfig {
    /// The client's configuration for `spec` against the listener at `addr`.
    pub fn from_spec(
        spec: &ConnectSpec,
        addr: SocketAddr,
        bind: Option<IpAddr>,
        affinity: Vec<usize>,
        server_closes: bool,
    ) -> ConnectConfig {
        ConnectConfig {
            addr,
            bind,
            server_closes: server_closes && !spec.rst,
            connectors: spec.connectors,
            duration: spec.duration.0,
            request: spec.request.0 as usize,
            response: spec.response.0 as usize,
            rst: spec.rst,
            timeout: spec.connect_timeout.0,
            affinity,
            interval: spec.interval.0,
        }
    }
}

/// Connections of one interval, all connectors added up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectTick {
    /// Interval number, from 0.
    pub index: u32,
    /// Start, seconds since the connectors started.
    pub start: f64,
    /// End, seconds since the connectors started.
    pub end: f64,
    /// Connections completed during the interval.
    pub connections: u64,
    /// Connections failed during the interval.
    pub failed: u64,
}

/// Everything the connectors measured.
#[derive(Debug)]
pub struct ConnectOutcome {
    /// Connections completed.
    pub connections: u64,
    /// Connections failed.
    pub failed: u64,
    /// Seconds from the start until the last connector finished.
    pub seconds: f64,
    /// connect() times.
    pub connect_time: LatencyHistogram,
    /// Whole-transaction times (socket to close).
    pub transaction_time: LatencyHistogram,
    /// Each failure kind with its count, most frequent first.
    pub errors: Vec<(String, u64)>,
    /// Why the test ended early, when it had to (no local ports left, no file descriptors).
    pub fatal: Option<String>,
    /// The server closed each connection first (see [`ConnectConfig::server_closes`]).
    pub server_closed_first: bool,
}

/// One connector's counters, on its own cache lines.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Slot {
    ok: AtomicU64,
    failed: AtomicU64,
}

type DoneFn = Box<dyn FnOnce() + Send>;
type TickFn = Box<dyn FnMut(ConnectTick) + Send>;

struct Shared {
    cfg: ConnectConfig,
    start: Instant,
    slots: Vec<Slot>,
    stop: AtomicBool,
    fatal: Mutex<Option<String>>,
    remaining: AtomicUsize,
    /// Nanoseconds since start when the last connector finished (0 = not yet).
    end_ns: AtomicU64,
    on_done: Mutex<Option<DoneFn>>,
    wake: (Mutex<()>, Condvar),
}

impl Shared {
    fn totals(&self) -> (u64, u64) {
        self.slots.iter().fold((0, 0), |(o, f), s| {
            (
                o + s.ok.load(Ordering::Relaxed),
                f + s.failed.load(Ordering::Relaxed),
            )
        })
    }

    fn notify(&self) {
        let _g = self.wake.0.lock();
        self.wake.1.notify_all();
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.notify();
    }

    /// Records the first fatal error and stops every connector.
    fn set_fatal(&self, why: String) {
        if let Ok(mut f) = self.fatal.lock() {
            f.get_or_insert(why);
        }
        self.stop();
    }

    fn all_done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }

    /// One connector ended; the last one records the end and calls `on_done`.
    fn finish_one(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let ns = (self.start.elapsed().as_nanos() as u64).max(1);
            self.end_ns.store(ns, Ordering::Release);
            self.notify();
            let cb = self.on_done.lock().ok().and_then(|mut g| g.take());
            if let Some(cb) = cb {
                cb();
            }
        }
    }
}

/// What one connector hands back.
struct ConnectorOut {
    connect: LatencyHistogram,
    transaction: LatencyHistogram,
    errors: Vec<(String, u64)>,
}

impl ConnectorOut {
    fn new() -> ConnectorOut {
        ConnectorOut {
            connect: LatencyHistogram::new(),
            transaction: LatencyHistogram::new(),
            errors: Vec::new(),
        }
    }

    fn note(&mut self, kind: String) {
        add_error(&mut self.errors, kind, 1);
    }
}

fn add_error(errors: &mut Vec<(String, u64)>, kind: String, n: u64) {
    if let Some(e) = errors.iter_mut().find(|e| e.0 == kind) {
        e.1 += n;
    } else if errors.len() < MAX_ERROR_KINDS {
        errors.push((kind, n));
    } else {
        add_error_other(errors, n);
    }
}

fn add_error_other(errors: &mut [(String, u64)], n: u64) {
    // The table is full: the last slot becomes the catch-all.
    if let Some(last) = errors.last_mut() {
        if last.0 != "other errors" {
            last.0 = "other errors".into();
        }
        last.1 += n;
    }
}

/// A running client side of a connection-rate test.
pub struct ConnectRun {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<ConnectorOut>>,
    ticker: Option<JoinHandle<()>>,
}

impl ConnectRun {
    /// Starts the connectors and the ticker now. `on_interval` gets each tick (from the ticker
    /// thread); `on_done` is called once when every connector has ended.
    pub fn start(
        cfg: ConnectConfig,
        on_interval: TickFn,
        on_done: DoneFn,
    ) -> io::Result<ConnectRun> {
        let n = cfg.connectors.max(1) as usize;
        let shared = Arc::new(Shared {
            start: Instant::now(),
            slots: (0..n).map(|_| Slot::default()).collect(),
            stop: AtomicBool::new(false),
            fatal: Mutex::new(None),
            remaining: AtomicUsize::new(n),
            end_ns: AtomicU64::new(0),
            on_done: Mutex::new(Some(on_done)),
            wake: (Mutex::new(()), Condvar::new()),
            cfg,
        });
        let mut run = ConnectRun {
            shared: Arc::clone(&shared),
            workers: Vec::with_capacity(n),
            ticker: None,
        };
        if !shared.cfg.interval.is_zero() {
            let s = Arc::clone(&shared);
            run.ticker = Some(
                std::thread::Builder::new()
                    .name("hakaru-cps-tick".into())
                    .spawn(move || ticker(&s, on_interval))?,
            );
        }
        for i in 0..n {
            let s = Arc::clone(&shared);
            let pin =
                (!s.cfg.affinity.is_empty()).then(|| s.cfg.affinity[i % s.cfg.affinity.len()]);
            let h = std::thread::Builder::new()
                .name(format!("hakaru-connect-{i}"))
                .stack_size(256 << 10)
                .spawn(move || connector(&s, i, pin));
            match h {
                Ok(h) => run.workers.push(h),
                Err(e) => {
                    // Those already started see the stop; the ones never started must still
                    // count as finished so the ticker and `on_done` see the end.
                    shared.stop();
                    for _ in i..n {
                        shared.finish_one();
                    }
                    return Err(e);
                }
            }
        }
        Ok(run)
    }

    /// Connectors finish the connection they are on and end (Ctrl-C).
    pub fn stop(&self) {
        self.shared.stop();
    }

    /// True once every connector has ended.
    pub fn is_done(&self) -> bool {
        self.shared.all_done()
    }

    /// Why the test had to end early, if it did.
    pub fn fatal(&self) -> Option<String> {
        self.shared.fatal.lock().ok().and_then(|f| f.clone())
    }

    /// Waits for the connectors and the ticker and merges what they measured.
    pub fn wait(mut self) -> ConnectOutcome {
        let mut connect = LatencyHistogram::new();
        let mut transaction = LatencyHistogram::new();
        let mut errors: Vec<(String, u64)> = Vec::new();
        for w in self.workers.drain(..) {
            if let Ok(out) = w.join() {
                connect.merge(&out.connect);
                transaction.merge(&out.transaction);
                for (k, c) in out.errors {
                    add_error(&mut errors, k, c);
                }
            }
        }
        self.shared.stop();
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        errors.sort_by_key(|e| std::cmp::Reverse(e.1));
        let (connections, failed) = self.shared.totals();
        let end_ns = match self.shared.end_ns.load(Ordering::Acquire) {
            0 => self.shared.start.elapsed().as_nanos() as u64,
            e => e,
        };
        ConnectOutcome {
            connections,
            failed,
            seconds: end_ns as f64 / 1e9,
            connect_time: connect,
            transaction_time: transaction,
            errors,
            fatal: self.fatal(),
            server_closed_first: self.shared.cfg.server_closes,
        }
    }
}

impl Drop for ConnectRun {
    fn drop(&mut self) {
        self.shared.stop();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

/// Why one connection did not complete.
enum Failure {
    /// No local port left (EADDRNOTAVAIL, or EADDRINUSE when binding -B): the test cannot go on.
    NoPorts(io::Error),
    /// The test cannot go on for another reason (no file descriptors, a bad -B address).
    Fatal(String),
    /// This connection failed; count it and go on.
    Failed(String),
}

fn connector(sh: &Shared, i: usize, pin: Option<usize>) -> ConnectorOut {
    let mut out = ConnectorOut::new();
    if let Some(cpu) = pin {
        if let Err(e) = sys::pin_current_thread(cpu) {
            sh.set_fatal(format!("-A/--affinity: {e}"));
            sh.finish_one();
            return out;
        }
    }
    let request = vec![b'q'; sh.cfg.request.max(1)];
    let mut buf = vec![0u8; sh.cfg.response.max(1)];
    let deadline = sh.start + sh.cfg.duration;
    let slot = &sh.slots[i];
    let (mut ok, mut failed) = (0u64, 0u64);
    while !sh.stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        match transaction(&sh.cfg, &request, &mut buf) {
            Ok((connect_ns, total_ns)) => {
                out.connect.record_ns(connect_ns);
                out.transaction.record_ns(total_ns);
                ok += 1;
                slot.ok.store(ok, Ordering::Relaxed);
            }
            Err(Failure::NoPorts(e)) => {
                sh.set_fatal(ports_exhausted(&sh.cfg, &e, sh.totals().0));
                break;
            }
            Err(Failure::Fatal(why)) => {
                sh.set_fatal(format!("{why} (after {} connections)", sh.totals().0));
                break;
            }
            Err(Failure::Failed(kind)) => {
                failed += 1;
                slot.failed.store(failed, Ordering::Relaxed);
                out.note(kind);
                std::thread::sleep(FAILURE_PAUSE);
            }
        }
    }
    sh.finish_one();
    out
}

/// One connection: socket, connect, request, whole response, close. Returns the connect time
/// and the whole transaction time in nanoseconds.
fn transaction(cfg: &ConnectConfig, request: &[u8], buf: &mut [u8]) -> Result<(u64, u64), Failure> {
    let t0 = Instant::now();
    let sock = Socket::new(
        Domain::for_address(cfg.addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(socket_failure)?;
    prepare(&sock, cfg)?;
    let c0 = Instant::now();
    // Bounded by SO_SNDTIMEO (set in `prepare`) where the OS honours it: one system call.
    let r = sys::connect_bounded(&sock, &cfg.addr.into(), cfg.timeout);
    if let Err(e) = r {
        return Err(connect_failure(e, cfg));
    }
    let connect_ns = c0.elapsed().as_nanos() as u64;
    let mut sent = 0;
    while sent < request.len() {
        match (&sock).write(&request[sent..]) {
            Ok(0) => {
                return Err(Failure::Failed(
                    "sending the request: connection closed".into(),
                ))
            }
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_failure("sending the request", &e, cfg)),
        }
    }
    let mut got = 0;
    while got < cfg.response {
        let want = (cfg.response - got).min(buf.len());
        match (&sock).read(&mut buf[..want]) {
            Ok(0) => {
                return Err(Failure::Failed(
                    "the server closed the connection before the whole response".into(),
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_failure("waiting for the response", &e, cfg)),
        }
    }
    if cfg.server_closes {
        // The server closes first: its FIN follows the response. Closing after it leaves no
        // TIME_WAIT here, only at the server, as with netperf TCP_CRR.
        loop {
            match (&sock).read(buf) {
                Ok(0) => break,
                Ok(_) => {
                    return Err(Failure::Failed(
                        "the server sent more than the response".into(),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_failure("waiting for the server's close", &e, cfg)),
            }
        }
    }
    // With SO_LINGER 0 this close sends RST; otherwise FIN, and TIME_WAIT stays here unless
    // the server closed first.
    drop(sock);
    Ok((connect_ns, t0.elapsed().as_nanos() as u64))
}

/// Socket options of one connection: no Nagle delay, RST on close with --rst, timeouts on
/// connect (SO_SNDTIMEO also bounds a blocking connect on Linux) and reads, and the -B address.
fn prepare(sock: &Socket, cfg: &ConnectConfig) -> Result<(), Failure> {
    let opt = |r: io::Result<()>, what: &str| {
        r.map_err(|e| Failure::Failed(format!("setting {what}: {e}")))
    };
    // A request of one segment leaves at once without it: one system call less then.
    if cfg.request > crate::connect_server::ONE_SEGMENT {
        opt(sock.set_tcp_nodelay(true), "TCP_NODELAY")?;
    }
    if cfg.rst {
        opt(sock.set_linger(Some(Duration::ZERO)), "SO_LINGER 0 (--rst)")?;
    }
    opt(sock.set_write_timeout(Some(cfg.timeout)), "SO_SNDTIMEO")?;
    opt(sock.set_read_timeout(Some(cfg.timeout)), "SO_RCVTIMEO")?;
    if let Some(ip) = cfg.bind {
        // Take the port at connect time, unique per 4-tuple, not at bind time, where every
        // port in TIME_WAIT would be off limits.
        let _ = sys::bind_address_no_port(sys::AsRawFd::as_raw_fd(sock));
        if let Err(e) = sock.bind(&SocketAddr::new(ip, 0).into()) {
            return Err(match e.kind() {
                io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable => Failure::NoPorts(e),
                _ => Failure::Fatal(format!("-B/--bind {ip}: {e}")),
            });
        }
    }
    Ok(())
}

fn socket_failure(e: io::Error) -> Failure {
    if sys::is_out_of_descriptors(&e) {
        return Failure::Fatal(format!(
            "cannot open a socket: {e}; raise the open-file limit (ulimit -n) or use fewer -P connectors"
        ));
    }
    Failure::Failed(format!("opening a socket: {e}"))
}

fn timed_out(e: &io::Error) -> bool {
    if sys::is_connect_cut_short(e) {
        // A blocking connect cut short by SO_SNDTIMEO.
        return true;
    }
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn connect_failure(e: io::Error, cfg: &ConnectConfig) -> Failure {
    match e.kind() {
        io::ErrorKind::AddrNotAvailable | io::ErrorKind::AddrInUse => Failure::NoPorts(e),
        io::ErrorKind::ConnectionRefused => Failure::Failed("connection refused".into()),
        io::ErrorKind::ConnectionReset => {
            Failure::Failed("connection reset while connecting".into())
        }
        _ if timed_out(&e) => Failure::Failed(format!(
            "connect timed out after {} (--connect-timeout)",
            Dur(cfg.timeout)
        )),
        _ => Failure::Failed(format!("connect: {e}")),
    }
}

fn io_failure(what: &str, e: &io::Error, cfg: &ConnectConfig) -> Failure {
    match e.kind() {
        io::ErrorKind::ConnectionReset => {
            Failure::Failed(format!("{what}: connection reset by the server"))
        }
        io::ErrorKind::BrokenPipe => {
            Failure::Failed(format!("{what}: the server closed the connection"))
        }
        _ if timed_out(e) => Failure::Failed(format!(
            "{what}: nothing within {} (--connect-timeout)",
            Dur(cfg.timeout)
        )),
        _ => Failure::Failed(format!("{what}: {e}")),
    }
}

/// The error for an exhausted local port range, with the cause and the ways out.
fn ports_exhausted(cfg: &ConnectConfig, e: &io::Error, done: u64) -> String {
    let range = match sys::local_port_range() {
        Some((lo, hi)) => format!(
            "the local port range {lo}-{hi} ({} ports)",
            u32::from(hi) - u32::from(lo) + 1
        ),
        None => "the local port range".into(),
    };
    let why = if cfg.rst || cfg.server_closes {
        format!(
            "{range} is taken by other sockets (this test's {} open connections, other \
             connections, or TIME_WAIT left by connections this host closed first in the last \
             60 s); wait a minute, use fewer -P connectors, or widen \
             net.ipv4.ip_local_port_range",
            cfg.connectors
        )
    } else {
        format!(
            "each connection closed with FIN holds its port in TIME_WAIT for 60 s, and {range} \
             is used up; use --rst (close with RST, leaving no TIME_WAIT), or widen \
             net.ipv4.ip_local_port_range"
        )
    };
    format!(
        "out of local ports after {done} connections to {} ({e}): {why}",
        cfg.addr
    )
}

fn ticker(sh: &Shared, mut on_interval: TickFn) {
    let interval = sh.cfg.interval;
    let mut next = interval;
    let (mut prev_ok, mut prev_failed) = (0u64, 0u64);
    let mut last_ns = 0u64;
    let mut index = 0u32;
    loop {
        {
            // The tick that leaves less than 5 % of -i before the deadline is the last: it
            // waits for the connectors, whose last connections end after the deadline, so
            // the intervals add up to the totals.
            let last = next + interval / 20 >= sh.cfg.duration;
            let Ok(mut g) = sh.wake.0.lock() else { return };
            while !sh.all_done() {
                let elapsed = sh.start.elapsed();
                if elapsed >= next && !last {
                    break;
                }
                if elapsed >= next {
                    g = match sh.wake.1.wait(g) {
                        Ok(g) => g,
                        Err(_) => return,
                    };
                    continue;
                }
                g = match sh.wake.1.wait_timeout(g, next - elapsed) {
                    Ok((g, _)) => g,
                    Err(_) => return,
                };
            }
        }
        let done = sh.all_done();
        let now_ns = match sh.end_ns.load(Ordering::Acquire) {
            e if done && e > 0 => e,
            _ => sh.start.elapsed().as_nanos() as u64,
        };
        let tick_ns = next.as_nanos() as u64;
        let end_ns = if done { now_ns } else { tick_ns.min(now_ns) };
        // A last interval shorter than 5 % of -i is too short to be worth a line, unless it
        // counted something (a stop just after a tick): the intervals must add up.
        let (ok, failed) = sh.totals();
        let counted = ok > prev_ok || failed > prev_failed;
        if end_ns.saturating_sub(last_ns) * 20 >= interval.as_nanos() as u64 || counted {
            on_interval(ConnectTick {
                index,
                start: last_ns as f64 / 1e9,
                end: end_ns as f64 / 1e9,
                connections: ok - prev_ok,
                failed: failed - prev_failed,
            });
            (prev_ok, prev_failed) = (ok, failed);
            index += 1;
            last_ns = end_ns;
        }
        if done {
            return;
        }
        next += interval;
    }
}

/// Machine counters at the start of one end's part in a connection-rate test, for its report.
#[derive(Debug, Clone)]
pub struct Usage {
    start: Instant,
    iface: Option<String>,
    cpu: Option<sys::CpuSnapshot>,
    nic: Option<sys::NicSnapshot>,
}

impl Usage {
    /// Reads the CPU and `iface` counters now.
    pub fn take(iface: Option<String>) -> Usage {
        Usage {
            start: Instant::now(),
            cpu: sys::cpu_snapshot(),
            nic: iface.as_deref().and_then(sys::nic_snapshot),
            iface,
        }
    }

    /// This end's report: CPU and interface use since [`Usage::take`], the environment, and
    /// the server's counts. A connection-rate test has no flows.
    pub fn report(&self, end: End, connect: Option<ConnectServerCounts>) -> SideReport {
        let wall = self.start.elapsed().as_secs_f64();
        let cpu_now = sys::cpu_snapshot();
        let nic_now = self.iface.as_deref().and_then(sys::nic_snapshot);
        let mut env = sys::environment(self.iface.as_deref());
        env.software = env!("CARGO_PKG_VERSION").to_string();
        SideReport {
            end,
            flows: Vec::new(),
            cpu: self
                .cpu
                .as_ref()
                .zip(cpu_now.as_ref())
                .map(|(a, b)| sys::cpu_usage(a, b, wall)),
            nic: self
                .nic
                .as_ref()
                .zip(nic_now.as_ref())
                .map(|(a, b)| sys::nic_usage(a, b, wall)),
            env,
            send_mode: "copy".into(),
            recv_mode: "copy".into(),
            udp_paths: None,
            udp_kernel: None,
            stray_datagrams: None,
            connect,
            window_start_unix: Some(sys::now_unix() - wall),
            window_end_unix: Some(sys::now_unix()),
            began_unix: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(addr: SocketAddr) -> ConnectConfig {
        ConnectConfig {
            addr,
            bind: None,
            connectors: 2,
            duration: Duration::from_millis(300),
            request: 3,
            response: 5,
            rst: true,
            server_closes: false,
            timeout: Duration::from_secs(2),
            affinity: Vec::new(),
            interval: Duration::from_millis(100),
        }
    }

    #[test]
    fn refused_connections_are_counted_not_fatal() {
        // A port nobody listens on: every connect is refused. The socket stays bound (not
        // listening) for the whole test, so no test running beside it can take the port.
        let holder =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        holder
            .bind(
                &"127.0.0.1:0"
                    .parse::<std::net::SocketAddr>()
                    .unwrap()
                    .into(),
            )
            .unwrap();
        let addr = holder.local_addr().unwrap().as_socket().unwrap();
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let t = Arc::clone(&ticks);
        let run = ConnectRun::start(
            cfg(addr),
            Box::new(move |tick| t.lock().unwrap().push(tick)),
            Box::new(|| {}),
        )
        .unwrap();
        let out = run.wait();
        assert_eq!(out.connections, 0);
        assert!(out.failed > 0);
        assert!(out.fatal.is_none());
        assert_eq!(out.errors[0].0, "connection refused");
        assert_eq!(out.errors[0].1, out.failed);
        // The 1 ms pause bounds the failure rate.
        assert!(out.failed < 2 * 1000, "{}", out.failed);
        let ticks = ticks.lock().unwrap();
        assert!(!ticks.is_empty());
        assert_eq!(ticks.iter().map(|t| t.failed).sum::<u64>(), out.failed);
    }

    /// A FIN test against a connect server that closes first: every connection completes,
    /// the client reading to the server's close. Against one that waits for the client's
    /// close instead, each connection fails naming the wait, within the time limit.
    #[test]
    fn a_client_told_the_server_closes_first_reads_to_its_close() {
        use crate::connect_server::{ConnectServer, ConnectServerConfig};
        for closes_first in [true, false] {
            let ip = std::net::IpAddr::from([127, 0, 0, 1]);
            let s = ConnectServer::start(ConnectServerConfig {
                ip,
                peer: ip,
                request: 3,
                response: 5,
                affinity: Vec::new(),
                connectors: 1,
                timeout: Duration::from_secs(5),
                max_open: 16,
                closes_first,
            })
            .unwrap();
            let run = ConnectRun::start(
                ConnectConfig {
                    connectors: 1,
                    rst: false,
                    server_closes: true,
                    timeout: Duration::from_millis(100),
                    ..cfg(SocketAddr::new(ip, s.port()))
                },
                Box::new(|_| {}),
                Box::new(|| {}),
            )
            .unwrap();
            let out = run.wait();
            let counts = s.stop();
            assert!(out.server_closed_first);
            if closes_first {
                assert!(out.connections > 0, "{out:?}");
                assert_eq!(out.failed, 0, "{:?}", out.errors);
                assert!(counts.served >= out.connections);
            } else {
                assert_eq!(out.connections, 0, "{out:?}");
                assert!(out.failed > 0);
                assert!(
                    out.errors[0]
                        .0
                        .starts_with("waiting for the server's close: nothing within"),
                    "{:?}",
                    out.errors
                );
            }
        }
    }

    #[test]
    fn ports_exhausted_names_cause_and_cure() {
        let c = ConnectConfig {
            rst: false,
            ..cfg("127.0.0.1:9".parse().unwrap())
        };
        let e = io::Error::from(io::ErrorKind::AddrNotAvailable);
        let m = ports_exhausted(&c, &e, 98);
        assert!(m.contains("out of local ports after 98 connections"), "{m}");
        assert!(m.contains("TIME_WAIT") && m.contains("--rst"), "{m}");
        assert!(m.contains("ip_local_port_range"), "{m}");
        // When the server closes first, TIME_WAIT is not what holds this end's ports.
        let c = ConnectConfig {
            server_closes: true,
            ..c
        };
        let m = ports_exhausted(&c, &e, 98);
        assert!(m.contains("2 open connections") && m.contains("-P"), "{m}");
        assert!(!m.contains("use --rst"), "{m}");
    }

    #[test]
    fn error_table_is_bounded() {
        let mut errs = Vec::new();
        for i in 0..40 {
            add_error(&mut errs, format!("kind {i}"), 1);
        }
        add_error(&mut errs, "kind 0".into(), 1);
        assert_eq!(errs.len(), MAX_ERROR_KINDS);
        assert_eq!(errs.iter().map(|e| e.1).sum::<u64>(), 41);
        assert_eq!(errs.last().unwrap().0, "other errors");
    }
}
