//! One control session: the driver of `hakaru_session::server::Session`, the machine that
//! holds the protocol. This side does the I/O: it reads the control connection and the
//! registry of data paths, carries out the machine's outputs (send, admit, start, stop) with
//! the server's limits, sockets and the engine, and logs how the session ended.

use hakaru_session::Machine as _;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hakaru_engine::connect::Usage;
use hakaru_engine::connect_server::{ConnectServer, ConnectServerConfig};
use hakaru_engine::control::{ControlConn, Received};
use hakaru_engine::drive::{drive, Carrier, Wait};
use hakaru_engine::ping::{Echo, PingFlow, PingSocket};
use hakaru_engine::sys;
use hakaru_engine::tcp::{SideConfig, SideRun};
use hakaru_engine::udp::{UdpConfig, UdpRun};
use hakaru_engine::{CounterBase, Running};
use hakaru_model::{End, LatencyTransport, RemoteSpec, SideReport, TestSpec};
use hakaru_proto::{Decoder, Message};
use hakaru_session::server::{Config, Ending, Hello, Input, Output, Session};

use crate::limits::Slot;
use crate::registry::DataConn;
use crate::Ctx;

mod admit;
mod data;
mod probe;

pub(crate) use data::open_udp_flow_with;
use data::Paths;

/// A control connection that has said hello.
pub(crate) struct Opening {
    pub stream: TcpStream,
    /// The decoder, holding whatever followed the hello.
    pub dec: Decoder,
    pub peer: SocketAddr,
    pub protocol: u32,
    pub software: String,
    /// The client's kernel boot id.
    pub host: Option<String>,
    /// The client's authentication nonce.
    pub nonce: Option<String>,
    /// The connection's handshake slot, given back once its test is admitted.
    pub slot: Slot,
}

/// A test the server took on. Dropping it frees its test slot and memory reservation.
struct Admitted {
    id: u64,
    token: String,
    rx: mpsc::Receiver<DataConn>,
    started: Instant,
    _slot: Slot,
    _memory: crate::budget::Reservation,
}

/// What runs on this end's data plane.
enum Side {
    None,
    Paths(Paths),
    Running(Running),
    Connect(ConnectServer, Usage),
}

/// The I/O half of one session.
struct Driver<'a> {
    ctx: &'a Ctx,
    peer: SocketAddr,
    software: String,
    /// Reads the control connection (the decoder lives here).
    conn: ControlConn,
    /// Writes it: shared with the data plane's interval and send-done callbacks.
    writer: Arc<Mutex<ControlConn>>,
    local_ip: Option<IpAddr>,
    same_host: bool,
    handshake: Option<Slot>,
    test: Option<Admitted>,
    side: Side,
    /// The latency probes' path and echo (`--latency-probe`).
    probe: Option<probe::ProbePath>,
    /// The machine has heard of the server's shutdown.
    told_shutdown: bool,
    strays_before: u64,
    /// The end's log line, once the data plane has reported.
    summary: String,
    /// The test was refused (and that logged).
    refused: bool,
    /// Data paths are arriving (from admission to the machine's `PathsComplete`).
    collecting: bool,
    /// The test's interface and the counters read before `start` went out.
    baseline: Option<(Option<String>, CounterBase)>,
}

/// Runs a control session to its end. Never panics on peer input; logs how it ended.
pub(crate) fn control(ctx: &Ctx, o: Opening) {
    let local_ip = o.stream.local_addr().map(|a| a.ip()).ok();
    let host = sys::host_id();
    let same_host = host.is_some() && host == o.host;
    let nonce = match &ctx.cfg.psk {
        Some(_) => match sys::random_hex(hakaru_proto::auth::NONCE_LEN) {
            Ok(n) => Some(n),
            Err(_) => {
                tracing::warn!(
                    "session with {}: no OS randomness for an authentication nonce",
                    o.peer
                );
                return;
            }
        },
        None => None,
    };
    let writer = match o.stream.try_clone() {
        Ok(w) => Arc::new(Mutex::new(ControlConn::new(w))),
        Err(e) => {
            tracing::warn!("session with {}: cloning the control socket: {e}", o.peer);
            return;
        }
    };
    let cfg = Config {
        psk: ctx.cfg.psk.clone(),
        nonce,
        info: hakaru_proto::ServerInfo {
            software: format!("hakaru {}", env!("CARGO_PKG_VERSION")),
            unix_time: Some(sys::now_unix()),
            host,
            os: Some(std::env::consts::OS.into()),
        },
        max_duration: ctx.cfg.max_duration,
        udp_port: ctx.udp_addr.port(),
    };
    let hello = Hello {
        protocol: o.protocol,
        software: o.software.clone(),
        nonce: o.nonce,
    };
    let mut machine = Session::new(cfg, hello, Instant::now());
    let mut d = Driver {
        ctx,
        peer: o.peer,
        software: o.software,
        conn: ControlConn::with_decoder(o.stream, o.dec),
        writer,
        local_ip,
        same_host,
        handshake: Some(o.slot),
        test: None,
        side: Side::None,
        probe: None,
        told_shutdown: false,
        strays_before: 0,
        summary: String::new(),
        refused: false,
        collecting: false,
        baseline: None,
    };
    drive(&mut machine, &mut d);
}

impl Carrier<Session> for Driver<'_> {
    type Conn = ControlConn;
    type End = ();

    fn conn(&mut self) -> &mut ControlConn {
        &mut self.conn
    }

    fn act(&mut self, m: &mut Session, out: Output) -> ControlFlow<()> {
        if let Output::End(how) = out {
            self.finish(m, how);
            return ControlFlow::Break(());
        }
        if let Err(why) = self.carry(m, out) {
            m.handle(Input::Failed(why), Instant::now());
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Message>) -> Option<Input> {
        Some(match got {
            Received::Got(msg) => Input::Message(msg),
            Received::Nothing => return None,
            Received::Closed | Received::Reset(_) => Input::Closed,
            Received::Garbage(e) => Input::Garbage(e.to_string()),
            Received::Failed(e) => Input::ReadFailed(format!("control connection: {e}")),
        })
    }

    fn tick(&self) -> Duration {
        Duration::from_millis(100)
    }

    /// The server's shutdown, a data path, the data plane's end, a failed echo.
    fn event(&mut self, m: &mut Session, left: Duration) -> Wait {
        if self.ctx.shutdown_news(&mut self.told_shutdown) {
            m.handle(Input::Shutdown, Instant::now());
            return Wait::Handled;
        }
        if let (Side::Paths(paths), Some(test), true) =
            (&mut self.side, &self.test, self.collecting)
        {
            // Paths arrive through the registry. Once every UDP flow is here, the wait is on
            // the control connection instead, so the client's flows_ready starts the test
            // without a polling delay.
            let udp_all_here = paths.is_udp() && paths.all_here();
            let step = Duration::from_millis(if paths.is_udp() { 20 } else { 200 });
            let mut next = if udp_all_here {
                test.rx.try_recv().ok()
            } else {
                test.rx.recv_timeout(left.min(step)).ok()
            };
            while let Some(c) = next.take() {
                let taken = match self.probe.as_mut().filter(|p| p.is_mine(&c)) {
                    Some(p) => p.take(self.ctx, test.id, c),
                    None => paths.take(self.ctx, test.id, c),
                };
                match taken {
                    Ok(Some(flow)) => m.handle(Input::PathArrived { flow }, Instant::now()),
                    Ok(None) => {}
                    Err(why) => {
                        m.handle(Input::Failed(why), Instant::now());
                        return Wait::Handled;
                    }
                }
                next = test.rx.try_recv().ok();
            }
            paths.drain(self.ctx, test.id);
            let wait = if udp_all_here {
                left.min(step)
            } else {
                Duration::ZERO
            };
            return Wait::Read(wait);
        }
        // An echo whose peer stopped reading its replies (a latency test's flow, or the
        // latency probes of a bulk test) fails the test within its stall timeout.
        let echo_failed = match &self.side {
            Side::Running(run) if run.echoed().is_some() => run
                .first_error()
                .map(|e| format!("{e} (--timeout, at least 5 s)")),
            _ => None,
        }
        .or_else(|| self.probe.as_ref().and_then(probe::ProbePath::failed));
        if let Some(why) = echo_failed {
            m.handle(Input::Failed(why), Instant::now());
            return Wait::Handled;
        }
        if matches!(&self.side, Side::Running(run) if run.is_done()) {
            if let Side::Running(run) = std::mem::replace(&mut self.side, Side::None) {
                let report = self.report(run, m.spec());
                m.handle(Input::SideDone(Box::new(report)), Instant::now());
                return Wait::Handled;
            }
        }
        Wait::Read(left)
    }

    fn finished(&mut self, _m: &mut Session) {}
}

impl Driver<'_> {
    fn send(&self, mut msg: Message) -> Result<(), String> {
        // The clock as the answer leaves: the client times the exchange around it.
        if let Message::AuthOk {
            server: Some(info), ..
        } = &mut msg
        {
            info.unix_time = Some(sys::now_unix());
        }
        let mut w = self
            .writer
            .lock()
            .map_err(|_| "internal error: control writer poisoned".to_string())?;
        // A write that fails is the client gone: the next read says so.
        let _ = w.send(&msg);
        Ok(())
    }

    /// Carries out one output. An error is something that failed on the server; the machine
    /// tells the client and ends the test.
    fn carry(&mut self, m: &mut Session, out: Output) -> Result<(), String> {
        match out {
            Output::SendRaw(bytes) => {
                let mut w = self
                    .writer
                    .lock()
                    .map_err(|_| "internal error".to_string())?;
                let _ = w.send_raw(&bytes);
            }
            Output::Send(msg) => self.send(msg)?,
            Output::Admit { spec, held: _ } => {
                let answer = self.admit(&spec.to_spec());
                m.handle(answer, Instant::now());
            }
            Output::PathsComplete => {
                self.collecting = false;
                if let Some(t) = &self.test {
                    self.ctx.registry.remove(&t.token);
                }
            }
            Output::TakeBaseline => {
                let iface = self.local_ip.and_then(sys::interface_for_addr);
                let udp = matches!(m.spec(), Some(RemoteSpec::Udp(_)));
                let base = CounterBase::take(iface.as_deref(), udp);
                self.baseline = Some((iface, base));
            }
            Output::StartProbe { .. } => self
                .probe
                .as_mut()
                .ok_or("internal error: no latency probe path")?
                .start()?,
            Output::StartSide => self.start(m.spec(), m.start_at())?,
            Output::OpenConnectListener => {
                let port = self.open_listener(m.spec())?;
                m.handle(Input::ConnectListening { port }, Instant::now());
            }
            Output::StopSending => {
                if let Side::Running(run) = &self.side {
                    run.stop_sending();
                }
            }
            Output::PeerDone(sent) => {
                if let Side::Running(run) = &self.side {
                    run.peer_done(&sent);
                }
            }
            Output::StopSide => {
                let report = self.stop_connect(m.spec())?;
                m.handle(Input::SideDone(Box::new(report)), Instant::now());
            }
            Output::AbortSide => {
                if let Side::Running(run) = &self.side {
                    run.abort();
                }
                // Dropping a connect listener stops its workers and closes every socket.
                self.side = Side::None;
            }
            Output::End(_) => {}
        }
        Ok(())
    }

    /// Checks the test against this server; on success reserves its slot, memory and token.
    fn admit(&mut self, spec: &TestSpec) -> Input {
        let (ctx, peer) = (self.ctx, self.peer);
        let paths = spec.data_paths();
        let admitted = admit::admit(ctx, spec)
            .and_then(|memory| Ok((ctx.admission.test(peer.ip(), paths)?, memory)));
        let (slot, memory) = match admitted {
            Ok(s) => s,
            Err(reason) => {
                ctx.metrics.refused("limits");
                tracing::warn!("refused test from {peer}: {reason}");
                self.refused = true;
                return Input::Refused(reason);
            }
        };
        self.handshake = None;
        // An admitted client may send its final report, which can be large.
        self.conn.set_max_frame(hakaru_proto::native::MAX_FRAME);
        let id = ctx.next_test.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(crate::registry::queue_len(paths));
        let Some(token) =
            admit::new_token().filter(|t| ctx.registry.insert(t.clone(), peer.ip(), paths, tx))
        else {
            let reason = "the server cannot make a test token: the OS gave it no randomness (getrandom failed); it runs no tests until it can".to_string();
            tracing::error!("refused test from {peer}: {reason}");
            self.refused = true;
            return Input::Refused(reason);
        };
        let side = match data_paths(spec, &token, spec.flow_plan().len()) {
            Ok(side) => side,
            Err(reason) => {
                ctx.registry.remove(&token);
                tracing::warn!("refused test from {peer}: {reason}");
                self.refused = true;
                return Input::Refused(reason);
            }
        };
        self.probe = match probe::ProbePath::of(spec, &token) {
            Ok(p) => p,
            Err(reason) => {
                ctx.registry.remove(&token);
                tracing::warn!("refused test from {peer}: {reason}");
                self.refused = true;
                return Input::Refused(reason);
            }
        };
        self.collecting = matches!(side, Side::Paths(_));
        self.side = side;
        self.log_start(id, spec);
        ctx.metrics.test_started("hakaru", spec.name());
        self.strays_before = ctx.strays.load(Ordering::Acquire);
        self.test = Some(Admitted {
            id,
            token: token.clone(),
            rx,
            started: Instant::now(),
            _slot: slot,
            _memory: memory,
        });
        Input::Admitted { test_id: id, token }
    }

    fn log_start(&self, id: u64, spec: &TestSpec) {
        let (peer, software) = (self.peer, &self.software);
        match spec.connect() {
            Some(c) => tracing::info!(
                "test {id} from {peer} ({software}): connect, {} connector(s), {}, close {}",
                c.connectors,
                c.duration,
                c.close_name()
            ),
            None => tracing::info!(
                "test {id} from {peer} ({software}): {}, {} flow(s) {}, {}",
                spec.name(),
                spec.common().flows,
                match spec.common().direction {
                    hakaru_model::Direction::Forward => "client -> server",
                    hakaru_model::Direction::Reverse => "server -> client",
                    hakaru_model::Direction::Bidir => "both ways",
                },
                admit::describe_amount(spec)
            ),
        }
    }

    /// Starts this end's data plane on the paths that arrived.
    fn start(&mut self, spec: Option<&RemoteSpec>, start_at: Option<f64>) -> Result<(), String> {
        let remote = spec.ok_or("internal error: no test")?;
        let spec = &remote.to_spec();
        let Side::Paths(paths) = std::mem::replace(&mut self.side, Side::None) else {
            return Err("internal error: no data paths".into());
        };
        // The counters were read before `start` went out: nothing the client sent after it
        // escapes them (a scheduled side reads its interface's again just before its
        // instant, when the client's data begins: engine::side::first_nic).
        let (iface, base) = self
            .baseline
            .take()
            .ok_or("internal error: no counter baseline")?;
        // A scheduled start (`start_at`): the data threads wait for the client's instant.
        let with_base = |mut cfg: SideConfig| {
            cfg.base = Some(base);
            cfg.start_at = start_at;
            cfg
        };
        let w = Arc::clone(&self.writer);
        let on_interval = Box::new(move |sample| {
            if let Ok(mut w) = w.lock() {
                let _ = w.send(&Message::Interval { sample });
            }
        });
        let run = match remote {
            RemoteSpec::Tcp(tcp) => {
                let flows = paths.tcp_flows(tcp)?;
                let mut cfg = with_base(SideConfig::for_spec(
                    End::Server,
                    spec,
                    tcp.server_affinity.clone(),
                    iface,
                ));
                cfg.subflow_guard = self.ctx.subflow_guard();
                Running::Tcp(
                    SideRun::start(cfg, flows, on_interval, Box::new(|| {}))
                        .map_err(|e| e.to_string())?,
                )
            }
            RemoteSpec::Udp(udp) => {
                let flows = paths.udp_flows()?;
                let mut cfg = with_base(SideConfig::for_spec(
                    End::Server,
                    spec,
                    udp.server_affinity.clone(),
                    iface,
                ));
                cfg.shares_host = self.same_host;
                let ucfg = UdpConfig::from_spec(udp, hakaru_model::FlowDir::Down);
                let w = Arc::clone(&self.writer);
                let on_sent = Box::new(move |sent| {
                    if let Ok(mut w) = w.lock() {
                        let _ = w.send(&Message::SendDone { sent });
                    }
                });
                Running::Udp(
                    UdpRun::start(cfg, ucfg, flows, on_interval, Box::new(|| {}), on_sent)
                        .map_err(|e| e.to_string())?,
                )
            }
            RemoteSpec::Latency(lat) => {
                let flows: Vec<PingFlow> = match lat.transport {
                    LatencyTransport::Tcp => paths
                        .tcp_flows(&lat.as_tcp())?
                        .into_iter()
                        .map(|f| PingFlow {
                            id: f.id,
                            socket: PingSocket::Tcp(f.stream),
                        })
                        .collect(),
                    LatencyTransport::Udp => paths
                        .udp_flows()?
                        .into_iter()
                        .map(|f| PingFlow {
                            id: f.id,
                            socket: PingSocket::Udp(f.socket),
                        })
                        .collect(),
                };
                let cfg = with_base(SideConfig::for_spec(
                    End::Server,
                    spec,
                    lat.server_affinity.clone(),
                    iface,
                ));
                Running::Echo(Box::new(
                    Echo::start(cfg, flows, lat.spin, lat.busy_poll).map_err(|e| e.to_string())?,
                ))
            }
            RemoteSpec::Connect(_) => {
                return Err("internal error: a connection-rate test has no data paths".into())
            }
        };
        self.side = Side::Running(run);
        Ok(())
    }

    /// The data plane's report, with what only the server knows, counted into the metrics;
    /// the log line is made from it.
    fn report(&mut self, run: Running, spec: Option<&RemoteSpec>) -> SideReport {
        let echoed = run.echoed();
        let mut report = run.wait();
        let ctx = self.ctx;
        if matches!(spec, Some(RemoteSpec::Udp(_))) {
            report.stray_datagrams = Some(
                ctx.strays
                    .load(Ordering::Acquire)
                    .saturating_sub(self.strays_before),
            );
        }
        let name = spec.map_or("test", |s| s.kind().name());
        for f in &report.flows {
            let dir = match f.role {
                hakaru_model::Role::Receiver => "received",
                hakaru_model::Role::Sender => "sent",
            };
            ctx.metrics
                .bytes("hakaru", name, dir, f.bytes + f.omitted_bytes);
        }
        self.summary = summary(&report, echoed);
        report
    }

    fn open_listener(&mut self, spec: Option<&RemoteSpec>) -> Result<u16, String> {
        let Some(RemoteSpec::Connect(spec)) = spec else {
            return Err("internal error: not a connection-rate test".into());
        };
        let ip = self
            .local_ip
            .ok_or("the control connection has no local address")?;
        let usage = Usage::take(sys::interface_for_addr(ip));
        let server = ConnectServer::start(ConnectServerConfig {
            ip,
            peer: self.peer.ip(),
            request: spec.request.0 as usize,
            response: spec.response.0 as usize,
            affinity: spec.server_affinity.clone(),
            connectors: spec.connectors as usize,
            // Generous: the client's own limits apply to each step of a connection.
            timeout: spec.connect_timeout.0 * 2 + Duration::from_secs(1),
            max_open: spec.connectors as usize * 4 + 256,
            closes_first: spec.server_closes_first(),
        })
        .map_err(|e| format!("opening the connect listener on {ip}: {e}"))?;
        let port = server.port();
        self.side = Side::Connect(server, usage);
        Ok(port)
    }

    fn stop_connect(&mut self, spec: Option<&RemoteSpec>) -> Result<SideReport, String> {
        let Side::Connect(server, usage) = std::mem::replace(&mut self.side, Side::None) else {
            return Err("internal error: no connect listener".into());
        };
        let counts = server.stop();
        let close = match spec {
            Some(RemoteSpec::Connect(c)) if c.server_closes_first() => "fin, server first",
            Some(RemoteSpec::Connect(c)) => c.close_name(),
            _ => "",
        };
        self.summary = format!(
            "{} connections served, close {close} ({} accepted, {} dropped, {} from other addresses)",
            counts.served, counts.accepted, counts.dropped, counts.foreign
        );
        Ok(usage.report(End::Server, Some(counts)))
    }

    /// Logs how the session ended, and lets go of the test: its slot and memory go back
    /// before any data-plane thread is joined (a thread blocked on a peer that stopped reading
    /// must never hold them).
    fn finish(&mut self, m: &Session, how: Ending) {
        if let Side::Running(run) = &self.side {
            run.abort();
        }
        let side = std::mem::replace(&mut self.side, Side::None);
        let probe_echo = self.probe.as_mut().and_then(probe::ProbePath::stop);
        if let Some(echo) = &probe_echo {
            self.summary
                .push_str(&format!("; {} latency probes echoed", echo.echoed()));
        }
        self.release(m, how);
        drop(side);
        if let Some(echo) = probe_echo {
            echo.wait();
        }
    }

    /// Logs how the session ended; the test (slot, memory reservation, token) goes with it.
    fn release(&mut self, m: &Session, how: Ending) {
        let (ctx, peer) = (self.ctx, self.peer);
        let Some(test) = self.test.take() else {
            match how {
                Ending::AuthFailed(why) => {
                    ctx.metrics.refused("auth");
                    ctx.log
                        .warn("auth", || format!("authentication of {peer} failed: {why}"));
                }
                Ending::Rejected(_) if self.refused => {}
                Ending::Rejected(why) | Ending::Aborted { why, .. } => {
                    tracing::warn!("session with {peer}: {why}")
                }
                Ending::Finished => {}
            }
            return;
        };
        ctx.registry.remove(&test.token);
        let name = m.spec().map_or("test", |s| s.kind().name());
        let ok = how == Ending::Finished;
        ctx.metrics.test_finished("hakaru", name, ok);
        let id = test.id;
        match how {
            Ending::Finished => tracing::info!(
                "test {id} from {peer} finished after {:.1} s: {}",
                test.started.elapsed().as_secs_f64(),
                self.summary
            ),
            Ending::Aborted { why, .. } | Ending::Rejected(why) | Ending::AuthFailed(why) => {
                tracing::warn!("test {id} from {peer} aborted: {why}")
            }
        }
    }
}

/// The data paths a test waits for.
fn data_paths(spec: &TestSpec, token: &str, count: usize) -> Result<Side, String> {
    Ok(match spec {
        TestSpec::Udp(u) => Side::Paths(Paths::udp(u, count, token)?),
        TestSpec::Latency(l) if l.transport == LatencyTransport::Udp => {
            Side::Paths(Paths::udp(&l.as_udp(), count, token)?)
        }
        TestSpec::Connect(_) => Side::None,
        _ => Side::Paths(Paths::tcp(count)),
    })
}

/// The log line of a finished test, from this end's report.
fn summary(report: &SideReport, echoed: Option<u64>) -> String {
    if let Some(n) = echoed {
        // A latency test moves messages, not a byte stream: its log line counts them.
        return format!("{n} echo replies sent (one per receive)");
    }
    let moved: u64 = report.flows.iter().map(|f| f.bytes).sum();
    let seconds = report.flows.first().map_or(0.0, |f| f.seconds);
    let rate = hakaru_model::BitRate::from_bytes(moved, seconds);
    match report.flows.iter().find_map(|f| f.error.clone()) {
        Some(e) => format!(
            "{} moved at this end ({rate}); {e}",
            hakaru_model::Bytes(moved)
        ),
        None => format!("{} moved at this end ({rate})", hakaru_model::Bytes(moved)),
    }
}
