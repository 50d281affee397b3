//! The server's side of round trips: one thread per flow echoes each request back unchanged.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::SideReport;
use hakaru_proto::datagram::FlowHello;

use super::{PingFlow, PingSocket};
use crate::sys;
use crate::tcp::SideConfig;

/// The server's side of a latency test: echoes every request back on its flow until stopped,
/// then reports this end's CPU, NIC and environment.
pub struct Echo {
    cfg: SideConfig,
    start: Instant,
    shared: Arc<Shared>,
    left: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
    /// Second handles on the TCP flows whose receives wait with no timeout: [`Echo::stop`]
    /// shuts them (both directions) to end those waits and any blocked send.
    cutters: Vec<TcpStream>,
}

/// What the echo threads share with their owner.
struct Shared {
    stop: AtomicBool,
    echoed: AtomicU64,
    /// A reply that moved nothing for this long ends its flow: the peer stopped reading.
    stall: Duration,
    /// The first flow that ended that way, for the session to fail the test by name.
    error: Mutex<Option<String>>,
}

impl Echo {
    /// Starts one echo thread per flow (pinned round robin to `cfg.affinity`).
    pub fn start(
        cfg: SideConfig,
        flows: Vec<PingFlow>,
        spin: bool,
        busy_poll: Option<u32>,
    ) -> io::Result<Echo> {
        Echo::start_with(cfg, flows, spin, busy_poll, None)
    }

    /// The echo of a bulk test's latency probes (one flow, blocking receives). `hello_ack`:
    /// a UDP flow sharing the server's port answers a hello repeated on it with these bytes
    /// (its first answer was lost, and the echo already owns the socket).
    pub fn start_probe(
        cfg: SideConfig,
        flow: PingFlow,
        hello_ack: Option<Vec<u8>>,
    ) -> io::Result<Echo> {
        Echo::start_with(cfg, vec![flow], false, None, hello_ack.map(Arc::from))
    }

    fn start_with(
        cfg: SideConfig,
        flows: Vec<PingFlow>,
        spin: bool,
        busy_poll: Option<u32>,
        hello_ack: Option<Arc<[u8]>>,
    ) -> io::Result<Echo> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            echoed: AtomicU64::new(0),
            stall: cfg.stall_timeout.max(MIN_STALL),
            error: Mutex::new(None),
        });
        let left = Arc::new(AtomicUsize::new(flows.len()));
        let mut threads = Vec::with_capacity(flows.len());
        let mut cutters = Vec::new();
        // A blocking receive waits and reads in one system call (receive, send per round trip).
        let blocking = !spin;
        for (i, f) in flows.into_iter().enumerate() {
            f.socket
                .prepare(busy_poll, blocking, Duration::from_millis(100))?;
            if f.socket.waits_forever(blocking) {
                cutters.push(f.socket.cutter()?);
            }
            let (sh, lf) = (Arc::clone(&shared), Arc::clone(&left));
            let ack = hello_ack.clone();
            let pin = (!cfg.affinity.is_empty()).then(|| cfg.affinity[i % cfg.affinity.len()]);
            let h = std::thread::Builder::new()
                .name(format!("hakaru-echo-{i}"))
                .stack_size(256 << 10)
                .spawn(move || {
                    if let Some(cpu) = pin {
                        let _ = sys::pin_current_thread(cpu);
                    }
                    if let Err(why) = echo(&f.socket, spin || blocking, &sh, ack.as_deref()) {
                        let why = format!("flow {}: {why}", f.id);
                        if let Ok(mut e) = sh.error.lock() {
                            e.get_or_insert(why);
                        }
                        // The peer sees the end too, and the socket's buffers go now.
                        f.socket.shut();
                    }
                    lf.fetch_sub(1, Ordering::AcqRel);
                });
            match h {
                Ok(h) => threads.push(h),
                Err(e) => {
                    shared.stop.store(true, Ordering::Release);
                    for c in &cutters {
                        let _ = c.shutdown(Shutdown::Both);
                    }
                    return Err(e);
                }
            }
        }
        Ok(Echo {
            cfg,
            start: Instant::now(),
            shared,
            left,
            threads,
            cutters,
        })
    }

    /// Requests answered so far, warm-up included (for the server's log).
    pub fn echoed(&self) -> u64 {
        self.shared.echoed.load(Ordering::Relaxed)
    }

    /// The first flow that failed (its peer stopped reading replies for the stall timeout).
    pub fn first_error(&self) -> Option<String> {
        self.shared.error.lock().ok().and_then(|e| e.clone())
    }

    /// Asks every echo thread to end (the client is done, or gone). TCP flows are shut in both
    /// directions, which ends a blocked receive and a blocked send at once; every thread is
    /// then done within [`SEND_WAIT`](super::SEND_WAIT) whatever the peer does.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        for c in &self.cutters {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// True once the echo threads have ended: stopped, or every TCP connection closed.
    pub fn is_done(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
    }

    /// Waits for the threads and reports this end.
    pub fn wait(mut self) -> SideReport {
        self.stop();
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
        bare_report(&self.cfg, self.start.elapsed().as_secs_f64(), "echo")
    }
}

impl Drop for Echo {
    /// An echo dropped without [`Echo::wait`] (an aborted test) still ends its threads: they
    /// return on their own within a send wait, closing their sockets.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shortest stall timeout an echo applies: a latency test's `--timeout` can be shorter
/// than a reply takes to drain on a slow path; the dead-peer rule of every kind is never
/// shorter than this (docs/security.md, "A peer that goes away").
const MIN_STALL: Duration = Duration::from_secs(5);

/// The report of an end that has no per-flow byte counts (latency tests): CPU and NIC use since
/// the configuration's counter base, over `wall` seconds, and the environment.
pub fn bare_report(cfg: &SideConfig, wall: f64, mode: &str) -> SideReport {
    let iface = cfg.iface.as_deref();
    let (cpu, nic) = cfg
        .base
        .as_ref()
        .map_or((None, None), |b| b.usage_since(iface, wall));
    let mut env = sys::environment(iface);
    env.software = env!("CARGO_PKG_VERSION").to_string();
    SideReport {
        end: cfg.end,
        flows: Vec::new(),
        cpu,
        nic,
        env,
        send_mode: mode.into(),
        recv_mode: mode.into(),
        udp_paths: None,
        udp_kernel: None,
        stray_datagrams: None,
        connect: None,
        window_start_unix: Some(sys::now_unix() - wall),
        window_end_unix: Some(sys::now_unix()),
        began_unix: None,
    }
}

/// Echoes until stopped. `no_wait`: the socket spins or blocks in its receive itself, so an
/// empty receive goes straight back to receiving. An error: the peer stopped reading replies
/// for the stall timeout.
fn echo(
    sock: &PingSocket,
    no_wait: bool,
    sh: &Shared,
    hello_ack: Option<&[u8]>,
) -> Result<(), String> {
    let mut buf = vec![0u8; 65_536];
    let mut replied = false;
    while !sh.stop.load(Ordering::Acquire) {
        // Right after a reply the next request cannot be there yet: wait before receiving
        // (poll, receive, send per round trip).
        if replied && !no_wait {
            sys::wait_fd(sock.fd(), sys::Interest::Read, Duration::from_millis(100));
        }
        replied = false;
        match sock.recv(&mut buf) {
            Ok(0) if sock.is_tcp() => return Ok(()),
            Ok(n) => {
                let got = buf.get(..n).unwrap_or_default();
                // A hello repeated after the flow opened is not a request.
                if !sock.is_tcp() && FlowHello::decode(got).is_some() {
                    if let Some(a) = hello_ack {
                        let _ = sock.send(a);
                    }
                    continue;
                }
                if !reply(sock, got, sh)? {
                    return Ok(());
                }
                replied = true;
                // Counted per receive: TCP may coalesce open-loop requests into one.
                sh.echoed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if !no_wait {
                    sys::wait_fd(sock.fd(), sys::Interest::Read, Duration::from_millis(100));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // UDP: an ICMP error from the client's port (it has gone); keep serving until
            // the session stops us. TCP: the connection is over.
            Err(_) if !sock.is_tcp() => {
                sys::wait_fd(sock.fd(), sys::Interest::Read, Duration::from_millis(100))
            }
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

/// Sends one reply whole. `Ok(false)`: stopped, or the connection is over. A reply that moves
/// no byte for the stall timeout is an error: the peer stopped reading (every wait in a send
/// is bounded, by SO_SNDTIMEO on a blocking socket or by the poll here).
fn reply(sock: &PingSocket, msg: &[u8], sh: &Shared) -> Result<bool, String> {
    let mut off = 0;
    let mut moved = Instant::now();
    while let Some(rest) = msg.get(off..).filter(|r| !r.is_empty()) {
        if sh.stop.load(Ordering::Acquire) {
            return Ok(false);
        }
        match sock.send(rest) {
            Ok(m) if sock.is_tcp() => {
                off += m;
                if m > 0 {
                    moved = Instant::now();
                }
            }
            Ok(_) => return Ok(true),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                if moved.elapsed() > sh.stall {
                    return Err(format!(
                        "the peer stopped reading replies for {:.1} s",
                        sh.stall.as_secs_f64()
                    ));
                }
                sys::wait_fd(sock.fd(), sys::Interest::Write, Duration::from_millis(10));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(false),
        }
    }
    Ok(true)
}
