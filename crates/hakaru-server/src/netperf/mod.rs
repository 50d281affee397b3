//! Serving stock netperf clients (2.6, 2.7) like netserver, on `--netperf-port PORT` or a
//! range `FIRST-LAST` (the guides' 64-netserver scripts then run against one process).
//!
//! Each port has a listener thread; each control connection a thread that drives
//! `hakaru_session::netperf::server` (the protocol) and, per test, admits it against the
//! server's limits and memory budget, binds its data socket on the control connection's local
//! address and runs the data phase (`data`). netperf tests are single-connection tests, and the
//! guides start 64 of them from one sender: they count against their own per-client limit
//! (`--max-netperf-per-client`, 16: raise it for those scripts) and their own total
//! (`--max-tests`), not against the native tests' 4 per client; their buffers share
//! `--max-memory` with every other test. A test whose data path moves nothing for
//! `--stall-timeout` fails; a wrong passphrase waits out a delay under a per-client budget
//! (`guard`).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

mod data;
mod guard;
mod sink;
mod sizes;

pub(crate) use guard::Guards;
pub(crate) use sink::UdpSink;

use hakaru_session::Machine as _;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_engine::control::{RawConn, Received, Transport};
use hakaru_engine::drive::{drive, raw_input, Carrier, OnReset, Wait};
use hakaru_proto::netperf::{OmniRequest, OmniResponse};
use hakaru_session::netperf::server::{self as machine, errno, Ending, Input, Output};
use socket2::{Domain, Protocol, Socket, Type};

use crate::limits::{Admission, Slot};
use crate::Ctx;

/// The UDP_STREAM receiver for a server with netperf ports (`None` without them, or where its
/// waker cannot be bound: each test then receives on its own thread).
pub(crate) fn sink_for(cfg: &crate::ServerConfig) -> Option<UdpSink> {
    cfg.netperf.ports?;
    UdpSink::new()
        .map_err(|e| tracing::debug!("netperf: one receive thread per UDP test: {e}"))
        .ok()
}

/// Tests (and control connections) one client may have on the netperf ports by default: a
/// quarter of the default `--max-tests`, so one address cannot take every netperf slot, and
/// enough for flent's rrul (11 netperf processes from one host; rrul_be 9). The guides'
/// packet-rate script, 64 netperf processes from one sender, needs it raised.
pub const DEFAULT_PER_CLIENT: usize = 16;
/// How long a netperf test's data path may move nothing before the test fails
/// (`--stall-timeout`; hakaru's own clients default to the same).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Wrong passphrases one client may send a minute (`--netperf-passphrase-failures`).
pub const DEFAULT_PASSPHRASE_FAILURES: u32 = 10;
/// How long a control read waits while a test runs (how soon its results go out).
const RUNNING_TICK: Duration = Duration::from_millis(20);
/// How long a control read waits between tests.
const IDLE_TICK: Duration = Duration::from_millis(200);

/// The netperf ports' listeners, bound and not yet served.
pub(crate) struct NetperfPorts {
    listeners: Vec<TcpListener>,
}

impl NetperfPorts {
    /// Binds `first..=last` on `ip` (port 0: one free port); at most
    /// [`crate::MAX_PORT_RANGE`] ports.
    pub fn bind(ip: IpAddr, first: u16, last: u16, v6_only: bool) -> io::Result<NetperfPorts> {
        let n = usize::from(last.max(first) - first) + 1;
        if n > usize::from(crate::MAX_PORT_RANGE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{n} ports; at most {} in one range", crate::MAX_PORT_RANGE),
            ));
        }
        let mut listeners = Vec::new();
        for port in first..=last.max(first) {
            let addr = SocketAddr::new(ip, port);
            let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
            hakaru_engine::sys::own_listen_port(&sock)?;
            if addr.is_ipv6() {
                let _ = sock.set_only_v6(v6_only);
            }
            sock.bind(&addr.into())
                .map_err(|e| io::Error::new(e.kind(), format!("binding {addr}: {e}")))?;
            sock.listen(256)?;
            let l: TcpListener = sock.into();
            l.set_nonblocking(true)?;
            listeners.push(l);
        }
        Ok(NetperfPorts { listeners })
    }

    /// What the listeners are bound to, for the log line scripts read.
    pub fn describe(&self) -> String {
        let addrs: Vec<SocketAddr> = self
            .listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        match (addrs.first(), addrs.last()) {
            (Some(a), Some(b)) if addrs.len() > 1 => format!("{a}-{}", b.port()),
            (Some(a), _) => a.to_string(),
            _ => String::new(),
        }
    }

    /// Serves every port on a thread of its own until the server shuts down.
    pub fn spawn(self, ctx: Arc<Ctx>) -> io::Result<Vec<JoinHandle<()>>> {
        let mut threads = Vec::new();
        for listener in self.listeners {
            let ctx = Arc::clone(&ctx);
            threads.push(
                std::thread::Builder::new()
                    .name("hakaru-netperf".into())
                    .spawn(move || accept_loop(&ctx, &listener))?,
            );
        }
        Ok(threads)
    }
}

/// The netperf ports' admission: the server's limits with `--max-netperf-per-client` for
/// what one client may have handshaking and running.
pub(crate) fn admission(cfg: &crate::ServerConfig) -> Admission {
    Admission::for_netperf(cfg.limits, cfg.netperf.per_client)
}

/// Accepts control connections until shutdown.
fn accept_loop(ctx: &Arc<Ctx>, l: &TcpListener) {
    let adm = &ctx.netperf_admission;
    let mut errors = crate::accept::AcceptErrors::new("netperf");
    // Bounded by the shutdown flag, checked every 200 ms.
    while !ctx.shutdown.load(Ordering::Acquire) {
        match l.accept() {
            Ok((stream, peer)) => {
                errors.accepted();
                if !ctx.cfg.acl.permits(peer.ip()) {
                    ctx.denied.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                ctx.metrics.connection("netperf");
                if locked_out(ctx, peer) {
                    continue;
                }
                let slot = match adm.pending(peer.ip()) {
                    Ok(s) => s,
                    Err(why) => {
                        ctx.log_refusal(peer, &format!("netperf: {why}"));
                        continue;
                    }
                };
                spawn_session(ctx, stream, peer, slot);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => crate::wait_readable(l),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => errors.failed(&e),
        }
    }
}

/// True (and the connection is to be closed at once, counted) when the peer's client has
/// used its budget of wrong passphrases.
fn locked_out(ctx: &Ctx, peer: SocketAddr) -> bool {
    if ctx.cfg.netperf.passphrase.is_none() {
        return false;
    }
    let client = ctx.cfg.limits.client_of(peer.ip());
    let budget = ctx.cfg.netperf.passphrase_failures;
    let Some(n) = ctx
        .netperf_guards
        .over_budget(client, budget, Instant::now())
    else {
        return false;
    };
    ctx.metrics.refused("auth_budget");
    ctx.log.warn("auth_budget", || {
        format!(
            "refused connection from {peer}: netperf: {client} sent {n} wrong passphrases within {} s; the server allows {budget} (--netperf-passphrase-failures), closed at once",
            guard::WINDOW.as_secs()
        )
    });
    true
}

fn spawn_session(ctx: &Arc<Ctx>, stream: TcpStream, peer: SocketAddr, slot: Slot) {
    ctx.threads.fetch_add(1, Ordering::AcqRel);
    let c = Arc::clone(ctx);
    let r = std::thread::Builder::new()
        .name("hakaru-netperf-conn".into())
        .stack_size(512 << 10)
        .spawn(move || {
            let _t = crate::dispatch::CountGuard(&c.threads);
            let _slot = slot;
            let mut d = Driver {
                ctx: &c,
                ctl: RawConn::new(stream, Duration::from_secs(10), 4096),
                peer,
                pending: None,
                running: None,
                told_shutdown: false,
            };
            d.serve();
        });
    if let Err(e) = r {
        ctx.threads.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!("netperf: could not start a thread for {peer}: {e}");
    }
}

/// A test admitted and set up, its data phase not started yet.
struct Pending {
    sock: data::DataSock,
    req: OmniRequest,
    slot: Slot,
    reservation: crate::budget::Reservation,
}

/// A data phase running on its own thread.
struct Running {
    stop: Arc<AtomicBool>,
    done: mpsc::Receiver<Result<hakaru_proto::netperf::OmniResults, data::DataError>>,
    thread: Option<JoinHandle<()>>,
    kind: &'static str,
    _slot: Slot,
    _reservation: crate::budget::Reservation,
}

impl Running {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Driver<'a> {
    ctx: &'a Ctx,
    ctl: RawConn,
    peer: SocketAddr,
    pending: Option<Pending>,
    running: Option<Running>,
    /// The machine has heard of the server's shutdown.
    told_shutdown: bool,
}

impl Carrier<machine::Session> for Driver<'_> {
    type Conn = RawConn;
    type End = ();

    fn conn(&mut self) -> &mut RawConn {
        &mut self.ctl
    }

    fn act(&mut self, m: &mut machine::Session, out: Output) -> ControlFlow<()> {
        if let Some(input) = self.carry(out) {
            m.handle(input, Instant::now());
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Vec<u8>>) -> Option<Input> {
        raw_input(
            got,
            OnReset::Fail,
            Input::Bytes,
            || Input::PeerClosed,
            Input::ReadFailed,
        )
    }

    fn tick(&self) -> Duration {
        if self.running.is_some() {
            RUNNING_TICK
        } else {
            IDLE_TICK
        }
    }

    /// The server's shutdown, the data phase's end.
    fn event(&mut self, m: &mut machine::Session, left: Duration) -> Wait {
        if self.ctx.shutdown_news(&mut self.told_shutdown) {
            m.handle(Input::Shutdown, Instant::now());
            return Wait::Handled;
        }
        match self.data_result() {
            Some(done) => {
                m.handle(done, Instant::now());
                Wait::Handled
            }
            None => Wait::Read(left),
        }
    }

    /// The machine's end has been carried out (its `End` output): nothing is left.
    fn finished(&mut self, _m: &mut machine::Session) {}
}

impl Driver<'_> {
    fn serve(&mut self) {
        let cfg = machine::Config {
            passphrase: self.ctx.cfg.netperf.passphrase.clone(),
            cpus: u32::try_from(hakaru_engine::sys::online_cpus().max(1)).unwrap_or(1),
            max_duration: self.ctx.cfg.max_duration,
            data_ports: self.ctx.cfg.netperf.data_ports,
        };
        let mut m = machine::Session::new(cfg, Instant::now());
        // Bounded: every phase of the machine has a deadline, and it ends the session.
        drive(&mut m, self);
    }

    /// The data phase's end, once it has come.
    fn data_result(&mut self) -> Option<Input> {
        let r = self.running.as_ref()?.done.try_recv().ok()?;
        let mut run = self.running.take()?;
        run.stop();
        let kind = run.kind;
        Some(match r {
            Ok(res) => {
                self.ctx.metrics.test_finished("netperf", kind, true);
                self.ctx
                    .metrics
                    .bytes("netperf", kind, "received", res.bytes_received);
                self.ctx
                    .metrics
                    .bytes("netperf", kind, "sent", res.bytes_sent);
                tracing::info!(
                    "netperf test from {} done: {kind} bytes_received={} bytes_sent={} recv_calls={} send_calls={} transactions={} elapsed={:.3}s",
                    self.peer, res.bytes_received, res.bytes_sent, res.recv_calls, res.send_calls, res.trans_received, res.elapsed_time
                );
                Input::DataDone(Box::new(res))
            }
            Err((errno, why)) => {
                self.ctx.metrics.test_finished("netperf", kind, false);
                Input::DataFailed { errno, why }
            }
        })
    }

    /// Carries out one output; gives the machine's answer when there is one.
    fn carry(&mut self, out: Output) -> Option<Input> {
        match out {
            Output::Send(bytes) => self
                .ctl
                .send(&bytes)
                .err()
                .map(|e| Input::Failed(format!("writing to the control connection: {e}"))),
            Output::SetUp(req) => Some(self.set_up(*req)),
            Output::StartData => self.start().err().map(Input::Failed),
            Output::StopData => {
                self.pending = None;
                if let Some(mut r) = self.running.take() {
                    r.stop();
                    self.ctx.metrics.test_finished("netperf", r.kind, false);
                }
                None
            }
            Output::End(how) => {
                match how {
                    Ending::Closed { tests } => {
                        tracing::debug!("netperf: {} closed after {tests} test(s)", self.peer)
                    }
                    Ending::Refused(why) => {
                        self.ctx
                            .log_refusal_as(self.peer, "limits", &format!("netperf: {why}"))
                    }
                    Ending::BadPassphrase(why) => {
                        self.ctx.netperf_guards.failed(self.ctx, self.peer, &why)
                    }
                    // Strangers' connections end this way by the hundred: one line a second.
                    Ending::Failed(why) => self.ctx.log.warn("netperf", || {
                        format!("netperf session from {} ended: {why}", self.peer)
                    }),
                }
                None
            }
        }
    }

    /// Admits the test and binds its data socket.
    fn set_up(&mut self, req: OmniRequest) -> Input {
        let refused = |errno: i32, why: String| Input::Refused { errno, why };
        if self.ctx.shutdown.load(Ordering::Acquire) {
            return refused(errno::EAGAIN, "the server is shutting down".into());
        }
        if req.xmit_only() && self.ctx.cfg.max_rate.is_some() {
            return refused(
                errno::EINVAL,
                "the test asks the server to send as fast as it can; it sends at most --max-rate, and netperf cannot pace it".into(),
            );
        }
        // No data paths: a netperf test's data connection goes to its own listener, never
        // through the handshake slots, so the test adds no room for more control connections.
        let slot = match self.ctx.netperf_admission.test(self.peer.ip(), 0) {
            Ok(s) => s,
            Err(why) => return refused(errno::EAGAIN, why),
        };
        let ip = self
            .ctl
            .stream()
            .local_addr()
            .map_or(self.peer.ip(), |a| a.ip());
        let opts = data::BindOpts {
            ports: self.ctx.cfg.netperf.data_ports,
            test_memory: self.ctx.cfg.budgets.test_memory,
        };
        // Bound first: the reservation is what the kernel granted, not what was asked.
        let bound = match data::bind(ip, &req, &opts) {
            Ok(b) => b,
            Err(e) => {
                return refused(
                    e.raw_os_error().unwrap_or(errno::EINVAL),
                    format!("setting up the data socket: {e}"),
                )
            }
        };
        let reservation = match self.ctx.memory.reserve(&self.ctx.cfg.budgets, bound.memory) {
            Ok(r) => r,
            Err(why) => return refused(errno::EAGAIN, why),
        };
        let resp: OmniResponse = bound.resp;
        self.pending = Some(Pending {
            sock: bound.sock,
            req,
            slot,
            reservation,
        });
        Input::Ready(resp)
    }

    fn start(&mut self) -> Result<(), String> {
        let p = self
            .pending
            .take()
            .ok_or_else(|| "internal: no test set up".to_string())?;
        let kind = kind_name(&p.req);
        self.ctx.metrics.test_started("netperf", kind);
        tracing::info!(
            "netperf test from {}: {kind}, length {}",
            self.peer,
            p.req.test_length
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let job = data::Job {
            req: p.req,
            peer_ip: self.peer.ip(),
            stop: Arc::clone(&stop),
            max: self.ctx.cfg.max_duration,
            stall: Some(self.ctx.cfg.netperf.stall_timeout).filter(|d| !d.is_zero()),
            max_rate: self.ctx.cfg.max_rate,
            sink: self.ctx.netperf_sink.clone(),
        };
        let sock = p.sock;
        let thread = std::thread::Builder::new()
            .name("hakaru-netperf-data".into())
            .spawn(move || {
                let _ = tx.send(data::run(sock, &job));
            })
            .map_err(|e| format!("starting the data phase: {e}"))?;
        self.running = Some(Running {
            stop,
            done: rx,
            thread: Some(thread),
            kind,
            _slot: p.slot,
            _reservation: p.reservation,
        });
        Ok(())
    }
}

/// The classic test name a request stands for, for logs and metrics.
fn kind_name(req: &OmniRequest) -> &'static str {
    let udp = req.protocol == hakaru_proto::netperf::PROTO_UDP;
    match (udp, req.is_rr(), req.connect_test(), req.xmit_only()) {
        (true, true, _, _) => "UDP_RR",
        (true, false, _, _) => "UDP_STREAM",
        (false, true, true, _) => "TCP_CRR",
        (false, true, false, _) => "TCP_RR",
        (false, false, _, true) => "TCP_MAERTS",
        (false, false, _, false) => "TCP_STREAM",
    }
}
