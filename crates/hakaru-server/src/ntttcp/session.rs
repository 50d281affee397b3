//! One ntttcp sender's sync connection: the driver of `hakaru_session::ntttcp::server`, and,
//! for the sender that starts the test, the engine that counts the group's connections.

use hakaru_engine::control::{RawConn, Received, Transport};
use hakaru_engine::drive::{drive, raw_input, Carrier, OnReset, Wait};
use hakaru_session::Machine as _;
use std::net::{SocketAddr, TcpStream};
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_engine::tcp::{FlowSocket, SideConfig, SideRun};
use hakaru_engine::{sys, Running};
use hakaru_model::{Amount, Bytes, Dur, End, FlowDir, Role, SideReport, TcpSpec, TestSpec};
use hakaru_session::ntttcp::server::{self as machine, Input, Output};

use super::{DataConn, Shared, Start};
use crate::dispatch::CountGuard;
use crate::limits::Slot;
use crate::Ctx;

/// Bytes per read (ntttcp's own receiver reads 64 KiB).
const READ_LEN: u64 = 128 << 10;
/// A connection that moves nothing this long fails.
const STALL: Duration = Duration::from_secs(30);
/// Longest wait for an event in the driver's loop.
const TICK: Duration = Duration::from_millis(20);

/// Starts a thread for a sync connection just accepted.
pub(super) fn spawn(ctx: Arc<Ctx>, shared: Arc<Shared>, s: TcpStream, peer: SocketAddr) {
    let handshake = match ctx.admission.pending(peer.ip()) {
        Ok(h) => h,
        Err(why) => return ctx.log_refusal(peer, &format!("ntttcp sync: {why}")),
    };
    ctx.metrics.connection("ntttcp");
    ctx.threads.fetch_add(1, Ordering::AcqRel);
    let c = Arc::clone(&ctx);
    let r = std::thread::Builder::new()
        .name("hakaru-ntttcp-sync".into())
        .stack_size(512 << 10)
        .spawn(move || {
            let _t = CountGuard(&c.threads);
            let id = c.next_test.fetch_add(1, Ordering::Relaxed);
            let mut d = Driver {
                ctx: &c,
                shared: &shared,
                // Sync words are 4 bytes: a short buffer serves.
                s: RawConn::new(s, Duration::from_secs(5), 64),
                peer,
                id,
                group: None,
                handshake: Some(handshake),
                slot: None,
                memory: None,
                conns: Vec::new(),
                pending: Vec::new(),
                run: None,
                side_done: false,
                report: None,
                started: Instant::now(),
                told_shutdown: false,
            };
            let mut m = machine::Session::new(Instant::now());
            drive(&mut m, &mut d);
            if let Some(g) = d.group {
                shared.front.leave(g);
            }
        });
    if let Err(e) = r {
        ctx.threads.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!("ntttcp: no thread for {peer}: {e}");
    }
}

/// The I/O half of one sync session.
struct Driver<'a> {
    ctx: &'a Ctx,
    shared: &'a Shared,
    s: RawConn,
    peer: SocketAddr,
    id: u64,
    group: Option<u64>,
    /// Held until the sender has a group (or the session ends).
    handshake: Option<Slot>,
    /// From the moment the sender joins a group: it counts as a test, whose data paths are
    /// the connections it may open (`--ntttcp-max-conns`).
    slot: Option<Slot>,
    memory: Option<crate::budget::Reservation>,
    /// The data connections, (sender address, port) per flow, for the log.
    conns: Vec<(SocketAddr, u16)>,
    /// The data connections, until the engine takes them.
    pending: Vec<TcpStream>,
    run: Option<Running>,
    side_done: bool,
    report: Option<SideReport>,
    started: Instant,
    /// The machine has heard of the server's shutdown.
    told_shutdown: bool,
}

impl Carrier<machine::Session> for Driver<'_> {
    type Conn = RawConn;
    type End = ();

    fn conn(&mut self) -> &mut RawConn {
        &mut self.s
    }

    fn act(&mut self, m: &mut machine::Session, out: Output) -> ControlFlow<()> {
        if let Output::End(how) = out {
            self.finish(how);
            return ControlFlow::Break(());
        }
        if let Err(why) = self.carry(m, out) {
            m.handle(Input::Failed(why), Instant::now());
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Vec<u8>>) -> Option<Input> {
        raw_input(
            got,
            OnReset::Fail,
            Input::Bytes,
            || Input::Closed,
            Input::ReadFailed,
        )
    }

    fn tick(&self) -> Duration {
        TICK
    }

    /// The server's shutdown, the group's verdict, the data plane's end.
    fn event(&mut self, m: &mut machine::Session, left: Duration) -> Wait {
        if self.ctx.shutdown_news(&mut self.told_shutdown) {
            m.handle(Input::Shutdown, Instant::now());
            return Wait::Handled;
        }
        if m.is_waiting() {
            if let Some(v) = self.group.and_then(|g| self.shared.front.verdict(g)) {
                let input = match v {
                    Ok(()) => Input::Go { owner: false },
                    Err(why) => {
                        Input::Refused(format!("the last sender's test was refused: {why}"))
                    }
                };
                m.handle(input, Instant::now());
                return Wait::Handled;
            }
        }
        if let Some(run) = &self.run {
            if !self.side_done && run.is_done() {
                self.side_done = true;
                let error = run.first_error();
                m.handle(Input::SideDone { error }, Instant::now());
                return Wait::Handled;
            }
        }
        Wait::Read(left)
    }

    fn finished(&mut self, _m: &mut machine::Session) {}
}

impl Driver<'_> {
    /// Carries out one output of the machine.
    fn carry(&mut self, m: &mut machine::Session, out: Output) -> Result<(), String> {
        match out {
            // A write that fails is the sender gone: the next read says so.
            Output::Send(w) => {
                let _ = self.s.send(&w);
            }
            Output::Join => {
                let busy = !self.join();
                m.handle(Input::Joined { busy }, Instant::now());
            }
            Output::Negotiate(p) => {
                let max = self.ctx.cfg.max_duration;
                let secs = match self.group {
                    Some(g) => self.shared.front.negotiate(g, p, max),
                    None => machine::negotiate(p, max),
                };
                m.handle(Input::Negotiated(secs), Instant::now());
            }
            Output::Admit { last } => {
                let answer = self.admit(last, m.cycle());
                m.handle(answer, Instant::now());
            }
            Output::StartSide => self.start(m.cycle())?,
            Output::DrainSide => {
                if let Some(run) = &self.run {
                    run.peer_stopped();
                }
            }
            Output::AbortSide => {
                if let Some(run) = self.run.take() {
                    run.abort();
                }
            }
            Output::CollectReport => {
                if let Some(run) = self.run.take() {
                    self.report = Some(run.wait());
                }
            }
            Output::End(_) => {}
        }
        Ok(())
    }

    /// The test's spec: every connection a flow into this server.
    fn spec(flows: usize, cycle: i32) -> TestSpec {
        TestSpec::Tcp(TcpSpec {
            flows: u32::try_from(flows).unwrap_or(u32::MAX),
            amount: Amount::Time(Dur::from_secs(u64::try_from(cycle.max(1)).unwrap_or(1))),
            length: Bytes(READ_LEN),
            stall_timeout: Dur(STALL),
            ..TcpSpec::default()
        })
    }

    /// Seats the sender in a group, as a test of its client: false (busy) when its client's
    /// group is running or gathering, or the server's test limits are reached (logged).
    fn join(&mut self) -> bool {
        let (ctx, peer) = (self.ctx, self.peer);
        let slot = match ctx
            .admission
            .test(peer.ip(), self.shared.front.per_sender())
        {
            Ok(s) => s,
            Err(why) => {
                ctx.metrics.refused("limits");
                ctx.log.warn("ntttcp-sync", || {
                    format!("ntttcp sender {peer} told busy: {why}")
                });
                return false;
            }
        };
        self.group = self.shared.front.join(peer.ip());
        if self.group.is_some() {
            self.slot = Some(slot);
            self.handshake = None;
        }
        self.group.is_some()
    }

    /// The sender's 'R' or 'L': admit the group's test through the server's budgets (its
    /// test slot is the one it took when it joined).
    fn admit(&mut self, last: bool, cycle: i32) -> Input {
        let Some(g) = self.group else {
            return Input::Refused("internal error: no group".into());
        };
        self.shared.settle(self.ctx);
        let ctx = self.ctx;
        let mut taken = None;
        let verdict = self.shared.front.start(g, last, |conns| {
            let spec = Self::spec(conns.len(), cycle);
            taken = Some(ctx.memory.reserve(
                &ctx.cfg.budgets,
                crate::budget::server_memory(&spec, sys::online_cpus()),
            )?);
            Ok(())
        });
        match verdict {
            Start::Own(conns) => {
                self.memory = taken;
                self.take(conns);
                Input::Go { owner: true }
            }
            Start::Wait => Input::Wait,
            Start::Refused(why) => Input::Refused(why),
        }
    }

    /// Keeps the connections for the engine until StartSide; their handshake slots go back.
    fn take(&mut self, conns: Vec<DataConn>) {
        self.conns = conns.iter().map(|c| (c.peer, c.port)).collect();
        self.pending = conns.into_iter().map(|c| c.stream).collect();
    }

    /// Starts the engine: every connection a receiving flow, counted until its sender
    /// closes it.
    fn start(&mut self, cycle: i32) -> Result<(), String> {
        let streams = std::mem::take(&mut self.pending);
        let spec = Self::spec(streams.len(), cycle);
        let iface = self
            .s
            .stream()
            .local_addr()
            .ok()
            .and_then(|a| sys::interface_for_addr(a.ip()));
        let mut cfg = SideConfig::for_spec(End::Server, &spec, Vec::new(), iface);
        // The sender decides when the test ends (it closes its connections).
        cfg.duration = None;
        cfg.half_close = false;
        cfg.stall_timeout = STALL;
        // `ntttcp -r` receives each connection on a thread of its own (one per port); with a
        // worker per CPU, a sender of more connections than CPUs on the same machine got the
        // larger share of the CPUs (docs/performance-notes.md, section 11).
        cfg.thread_per_flow = true;
        let flows = streams
            .into_iter()
            .zip(0u32..)
            .map(|(stream, id)| FlowSocket {
                id,
                dir: FlowDir::Up,
                role: Role::Receiver,
                stream,
                quota: None,
            })
            .collect();
        let run = SideRun::start(cfg, flows, Box::new(|_| {}), Box::new(|| {}))
            .map_err(|e| format!("starting the data connections: {e}"))?;
        self.ctx.metrics.test_started("ntttcp", "tcp");
        let senders = self.conns.len();
        tracing::info!(
            "ntttcp test {} from {}: {} data connection(s), {} s cycle",
            self.id,
            self.peer.ip(),
            senders,
            cycle
        );
        self.run = Some(Running::Tcp(run));
        Ok(())
    }

    /// Logs how the session ended: for the test's owner, each connection's bytes and the
    /// total.
    fn finish(&mut self, how: machine::Ending) {
        if let Some(run) = self.run.take() {
            run.abort();
            self.report.get_or_insert(run.wait());
        }
        let (id, peer) = (self.id, self.peer);
        let owner = self.report.is_some();
        if owner {
            let ok = how == machine::Ending::Finished;
            self.ctx.metrics.test_finished("ntttcp", "tcp", ok);
        }
        if let Some(r) = &self.report {
            self.log_report(r);
        }
        match how {
            machine::Ending::Finished if owner => tracing::info!(
                "ntttcp test {id} from {peer} finished after {:.1} s",
                self.started.elapsed().as_secs_f64()
            ),
            machine::Ending::Finished => {
                tracing::info!("ntttcp sender {peer} (test {id}) finished")
            }
            // A sender with no test of its own may be anyone: one line a second.
            machine::Ending::Refused(why) => self.ctx.log.warn("ntttcp-sync", || {
                format!("ntttcp sender {peer} refused: {why}")
            }),
            machine::Ending::Failed(why) if owner => {
                tracing::warn!("ntttcp test {id} from {peer} ended: {why}")
            }
            machine::Ending::Failed(why) => self.ctx.log.warn("ntttcp-sync", || {
                format!("ntttcp sender {peer} (test {id}) ended: {why}")
            }),
        }
    }

    fn log_report(&self, r: &SideReport) {
        let mut total = 0u64;
        let mut seconds = 0f64;
        for (f, (from, port)) in r.flows.iter().zip(&self.conns) {
            let b = f.bytes + f.omitted_bytes;
            total += b;
            seconds = seconds.max(f.seconds);
            tracing::info!(
                "ntttcp test {}: connection {} from {from} to port {port}: received {b} bytes ({}) in {:.2} s{}",
                self.id,
                f.id,
                Bytes(b),
                f.seconds,
                f.error.as_deref().map(|e| format!(", {e}")).unwrap_or_default()
            );
        }
        self.ctx.metrics.bytes("ntttcp", "tcp", "received", total);
        let rate = if seconds > 0.0 {
            format!(", {}", hakaru_model::BitRate(total as f64 * 8.0 / seconds))
        } else {
            String::new()
        };
        tracing::info!(
            "ntttcp test {}: total received {total} bytes ({}) on {} connection(s) in {seconds:.2} s{rate}",
            self.id,
            Bytes(total),
            r.flows.len()
        );
    }
}
