//! Serving stock iperf3 clients (3.12 and later) on the shared port, each test isolated.
//!
//! A connection that opens with an iperf3 cookie is either a data stream of a test whose
//! streams are being created (its cookie is registered), a stray data stream with a wrong
//! cookie from an address whose test is creating streams (answered with ACCESS_DENIED and
//! closed, as stock iperf3 does), or a new control connection. Stock iperf3 serves one test
//! at a time; here every control connection gets its own session, so clients on different
//! addresses test at once. Two clients on one address can only be told apart by cookie, so a
//! second one that arrives while the first is opening its streams is refused as busy.
//!
//! Data moves through the same engine as hakaru's own tests (`SideRun`, `UdpRun`), with
//! iperf3's UDP framing and payload, and the results exchange turns reports into iperf3's
//! JSON and back (`hakaru_proto::iperf3`).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use hakaru_session::Machine as _;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use hakaru_engine::control::{RawConn, Received, Transport};
use hakaru_engine::drive::{drive, raw_input, Carrier, OnReset, Wait};
use hakaru_engine::sockopt::{apply_tcp_options, apply_udp_options};
use hakaru_engine::sys;
use hakaru_engine::tcp::{FlowSocket, Payload, SideConfig, SideRun};
use hakaru_engine::udp::{UdpConfig, UdpFlowSocket, UdpRun};
use hakaru_engine::Running;
use hakaru_model::{Bytes, End, FlowDir, IntervalSample, Role, TcpSpec, TestSpec, UdpSpec};
use hakaru_proto::datagram::Framing;
use hakaru_proto::iperf3::{self as wire, errno, State};
use socket2::SockRef;

use crate::limits::Slot;
use crate::registry::{canonical_ip, DataConn};
use crate::Ctx;

use hakaru_session::iperf3::plan::{self, Plan};
use hakaru_session::iperf3::results::{self, Collected, ServerOutput};
use hakaru_session::iperf3::server::{self as machine, IDLE_LIMIT};

/// The server's interval samples of a test, kept for the server output.
type Samples = Arc<Mutex<Vec<IntervalSample>>>;

/// Addresses whose iperf3 tests are opening their data streams right now.
#[derive(Default)]
pub(crate) struct Creating {
    inner: Mutex<Vec<(IpAddr, String, bool)>>,
}

impl Creating {
    fn begin(&self, ip: IpAddr, cookie: &str, udp: bool) {
        if let Ok(mut v) = self.inner.lock() {
            v.push((canonical_ip(ip), cookie.to_string(), udp));
        }
    }

    fn end(&self, cookie: &str) {
        if let Ok(mut v) = self.inner.lock() {
            v.retain(|(_, c, _)| c != cookie);
        }
    }

    /// True if a test from `ip` is opening its streams.
    fn from(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        self.inner
            .lock()
            .map(|v| v.iter().any(|(i, _, _)| *i == ip))
            .unwrap_or(false)
    }

    /// The cookie of the UDP test from `ip` waiting for its streams, if any.
    pub(crate) fn udp_test_of(&self, ip: IpAddr) -> Option<String> {
        let ip = canonical_ip(ip);
        self.inner.lock().ok().and_then(|v| {
            v.iter()
                .find(|(i, _, udp)| *i == ip && *udp)
                .map(|(_, c, _)| c.clone())
        })
    }
}

/// Takes a connection that opened with an iperf3 cookie (`first` holds at least the cookie);
/// `seq` is its place in accept order, which is how iperf3 assigns streams their roles.
/// `handshake` is the connection's handshake slot: a control connection holds it until its
/// parameters are valid and it has a test slot, so cookies that never send parameters do not
/// count as tests.
pub(crate) fn accept(
    ctx: &Ctx,
    mut stream: TcpStream,
    peer: SocketAddr,
    first: Vec<u8>,
    seq: u32,
    handshake: Slot,
) {
    let cookie = match wire::parse_cookie(&first) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("closed connection from {peer}: {e}");
            return;
        }
    };
    let _ = stream.set_read_timeout(None);
    match ctx
        .registry
        .deliver(&cookie, peer.ip(), DataConn::Tcp(seq, stream, Vec::new()))
    {
        Ok(()) => return,
        Err((_, DataConn::Tcp(_, s, _))) => stream = s,
        Err((_, DataConn::Udp(..))) => return,
    }
    if first.len() > wire::COOKIE_LEN {
        tracing::debug!("iperf3 connection from {peer} sent bytes after its cookie");
    }
    if ctx.iperf3.from(peer.ip()) {
        // A data stream with a wrong cookie, or a second client on an address whose test is
        // opening streams: stock iperf3 denies both.
        tracing::warn!("iperf3: denied a connection from {peer}: its cookie belongs to no test (another test from that address is opening its streams)");
        deny(&mut stream);
        return;
    }
    let _ = stream.set_nodelay(true);
    let mut ctl = RawConn::new(stream, Duration::from_secs(10), 16 << 10);
    if ctx.shutdown.load(Ordering::Acquire) {
        tracing::warn!("iperf3: refused a test from {peer}: the server is shutting down");
        let _ = ctl.send(&[State::AccessDenied.byte()]);
        return;
    }
    let id = ctx.next_test.fetch_add(1, Ordering::Relaxed);
    let cfg = machine::Config {
        limits: plan::Limits {
            max_duration: ctx.cfg.max_duration,
            max_rate: ctx.cfg.max_rate,
            max_flows: ctx.cfg.max_flows,
            congestion: sys::available_congestion(),
        },
        server_output: Some(if ctx.cfg.iperf3_json_output {
            ServerOutput::Json(hakaru_report::iperf3_json::document)
        } else {
            ServerOutput::Text(hakaru_report::iperf3_text::report)
        }),
    };
    let after_cookie = first.get(wire::COOKIE_LEN..).unwrap_or_default();
    let mut m = machine::Session::new(cfg, after_cookie, Instant::now());
    let mut d = Driver {
        ctx,
        ctl,
        peer,
        id,
        cookie,
        started: Instant::now(),
        handshake: Some(handshake),
        test_slot: None,
        memory: None,
        plan: None,
        rx: None,
        streams: Streams::default(),
        setup: None,
        run: None,
        side_done: false,
        report: None,
        samples: Arc::new(Mutex::new(Vec::new())),
        told_shutdown: false,
    };
    drive(&mut m, &mut d);
    ctx.registry.remove(&d.cookie);
    ctx.iperf3.end(&d.cookie);
}

fn deny(stream: &mut TcpStream) {
    use std::io::Write;
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = stream.write_all(&[State::AccessDenied.byte()]);
}

/// The data streams of a test as they arrive, in accept order.
#[derive(Default)]
struct Streams {
    /// (accept order, stream): roles follow the order the client opened the streams in.
    tcp: Vec<(u32, TcpStream)>,
    udp: Vec<UdpSocket>,
}

/// The flows set up for the engine, waiting for TEST_START to go out.
enum SetUp {
    Tcp(SideConfig, Vec<FlowSocket>),
    Udp(SideConfig, UdpConfig, Vec<UdpFlowSocket>),
}

/// The I/O half of one iperf3 session: the control socket, the server's limits, the data
/// streams and the engine. `hakaru_session::iperf3::server` holds the protocol.
struct Driver<'a> {
    ctx: &'a Ctx,
    ctl: RawConn,
    peer: SocketAddr,
    id: u64,
    cookie: String,
    started: Instant,
    /// Given back once the test has its slot.
    handshake: Option<Slot>,
    /// Taken once the parameters are valid.
    test_slot: Option<Slot>,
    /// The test's buffer memory, reserved with its slot.
    memory: Option<crate::budget::Reservation>,
    plan: Option<Plan>,
    /// Where the test's data streams arrive, while they do.
    rx: Option<mpsc::Receiver<DataConn>>,
    streams: Streams,
    setup: Option<SetUp>,
    run: Option<Running>,
    /// The machine has heard that the data plane is done.
    side_done: bool,
    report: Option<hakaru_model::SideReport>,
    samples: Samples,
    /// The machine has heard of the server's shutdown.
    told_shutdown: bool,
}

/// What failed on the server, with the i_errno the client hears.
type Failure = (i32, String);

impl Carrier<machine::Session> for Driver<'_> {
    type Conn = RawConn;
    type End = ();

    fn conn(&mut self) -> &mut RawConn {
        &mut self.ctl
    }

    fn act(&mut self, m: &mut machine::Session, out: machine::Output) -> ControlFlow<()> {
        if let machine::Output::End(how) = out {
            self.finish(how);
            return ControlFlow::Break(());
        }
        if let Err((code, why)) = self.carry(m, out) {
            m.handle(machine::Input::Failed(code, why), Instant::now());
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Vec<u8>>) -> Option<machine::Input> {
        raw_input(
            got,
            OnReset::Close,
            machine::Input::Bytes,
            || machine::Input::Closed,
            |e| machine::Input::ReadFailed(format!("control connection: {e}")),
        )
    }

    fn tick(&self) -> Duration {
        Duration::from_millis(100)
    }

    /// The server's shutdown, arriving data streams, the data plane's end.
    fn event(&mut self, m: &mut machine::Session, left: Duration) -> Wait {
        if self.ctx.shutdown_news(&mut self.told_shutdown) {
            m.handle(machine::Input::Shutdown, Instant::now());
            return Wait::Handled;
        }
        if let Some(rx) = &self.rx {
            let mut next = rx.recv_timeout(left.min(Duration::from_millis(50))).ok();
            while let Some(c) = next.take() {
                match self.take_stream(c) {
                    Ok(true) => m.handle(machine::Input::StreamArrived, Instant::now()),
                    Ok(false) => {}
                    Err((code, why)) => {
                        m.handle(machine::Input::Failed(code, why), Instant::now());
                        return Wait::Handled;
                    }
                }
                next = self.rx.as_ref().and_then(|rx| rx.try_recv().ok());
            }
            return Wait::Read(Duration::ZERO);
        }
        if let Some(run) = &self.run {
            if !self.side_done && run.is_done() {
                self.side_done = true;
                let error = run.first_error();
                m.handle(machine::Input::SideDone { error }, Instant::now());
                return Wait::Handled;
            }
        }
        Wait::Read(left)
    }

    fn finished(&mut self, _m: &mut machine::Session) {}
}

impl Driver<'_> {
    /// A data stream from the registry: `Ok(true)` when it is one of the test's.
    fn take_stream(&mut self, c: DataConn) -> Result<bool, Failure> {
        let udp = self.plan.as_ref().is_some_and(|p| p.udp);
        match c {
            DataConn::Tcp(seq, s, _) if !udp => self.streams.tcp.push((seq, s)),
            DataConn::Udp(_, from) if udp => {
                let Some(TestSpec::Udp(u)) = self.plan.as_ref().map(|p| &p.spec) else {
                    return Err((errno::IESTREAMCONNECT, "internal error: no UDP plan".into()));
                };
                let s = open_udp_stream(self.ctx, u, from).map_err(|e| {
                    (
                        errno::IESTREAMCONNECT,
                        format!("opening the UDP stream to {from}: {e}"),
                    )
                })?;
                let _ = s.send(&wire::UDP_REPLY);
                self.streams.udp.push(s);
            }
            DataConn::Tcp(_, mut s, _) => {
                deny(&mut s);
                return Ok(false);
            }
            DataConn::Udp(..) => return Ok(false),
        }
        Ok(true)
    }

    /// Carries out one output of the machine.
    fn carry(&mut self, m: &mut machine::Session, out: machine::Output) -> Result<(), Failure> {
        use machine::Output as O;
        match out {
            // A write that fails is the client gone: the next read says so.
            O::Send(bytes) => {
                let _ = self.ctl.send(&bytes);
            }
            O::Admit(plan) => {
                let answer = self.admit(*plan);
                m.handle(answer, Instant::now());
            }
            O::SetUpStreams => {
                self.rx = None;
                self.ctx.registry.remove(&self.cookie);
                self.ctx.iperf3.end(&self.cookie);
                self.setup = Some(self.set_up()?);
            }
            O::StartSide => self.start()?,
            O::PeerStopped => {
                if let Some(run) = &self.run {
                    run.peer_stopped();
                }
            }
            O::CollectReport => {
                let got = self.collect()?;
                m.handle(machine::Input::Report(Box::new(got)), Instant::now());
            }
            O::AbortSide => {
                if let Some(run) = self.run.take() {
                    run.abort();
                }
            }
            O::End(_) => {}
        }
        Ok(())
    }

    /// Takes the checked test's slot and memory.
    fn admit(&mut self, plan: Plan) -> machine::Input {
        let params = &plan.params;
        if params.mptcp && !plan.udp {
            if let Err(why) = self.ctx.mptcp_listener() {
                return machine::Input::Invalid(
                    errno::IESTREAMLISTEN,
                    format!("-m/--mptcp: {why}"),
                );
            }
        }
        let need = crate::budget::server_memory(&plan.spec, sys::online_cpus());
        if let Err(why) = crate::budget::check_test_memory(&self.ctx.cfg.budgets, need) {
            return machine::Input::Invalid(errno::IEBLOCKSIZE, why);
        }
        let memory = self.ctx.memory.reserve(&self.ctx.cfg.budgets, need);
        let admitted = memory.and_then(|m| {
            Ok((
                self.ctx.admission.test(self.peer.ip(), plan.flows.len())?,
                m,
            ))
        });
        match admitted {
            Ok((slot, memory)) => {
                self.test_slot = Some(slot);
                self.memory = Some(memory);
                self.handshake = None;
            }
            Err(why) => return machine::Input::Busy(why),
        }
        tracing::info!(
            "iperf3 test {} from {} (client {}): {}, {} stream(s) per direction, {:?}, {}{}",
            self.id,
            self.peer,
            params.client_version.as_deref().unwrap_or("?"),
            if plan.udp { "UDP" } else { "TCP" },
            params.parallel,
            plan.spec.common().direction,
            plan::amount_words(params),
            plan::mode_words(params, plan.udp)
        );
        let streams = plan.flows.len();
        let (tx, rx) = mpsc::sync_channel(crate::registry::queue_len(streams));
        if !self
            .ctx
            .registry
            .insert(self.cookie.clone(), self.peer.ip(), streams, tx)
        {
            // Another session holds this cookie: a stock client never reuses one.
            return machine::Input::Busy("its cookie belongs to another running test".into());
        }
        self.ctx
            .iperf3
            .begin(self.peer.ip(), &self.cookie, plan.udp);
        self.ctx.metrics.test_started("iperf3", plan.spec.name());
        self.rx = Some(rx);
        self.plan = Some(plan);
        machine::Input::Admitted
    }

    /// The engine's configuration and flows for the streams that arrived.
    fn set_up(&mut self) -> Result<SetUp, Failure> {
        let plan = self
            .plan
            .as_ref()
            .ok_or((errno::IECREATESTREAM, "internal error: no plan".to_string()))?;
        let streams = std::mem::take(&mut self.streams);
        let p = &plan.params;
        let iface = self
            .ctl
            .stream()
            .local_addr()
            .ok()
            .and_then(|a| sys::interface_for_addr(a.ip()));
        let affinity: Vec<usize> = p
            .server_affinity
            .map(|a| vec![a as usize])
            .unwrap_or_default();
        let mut cfg = SideConfig::for_spec(End::Server, &plan.spec, affinity, iface);
        // The client decides when the test ends; the server sends until told, or (-n, -k) its
        // share of the amount, as stock iperf3 does.
        cfg.duration = None;
        cfg.half_close = false;
        cfg.window_at_peer_end = match plan.spec.common().amount {
            hakaru_model::Amount::Time(t) => Some(t.0),
            _ => None,
        };
        cfg.stall_timeout = IDLE_LIMIT;
        // iperf3 -s (3.16 and later) receives and sends each stream on a thread of its own.
        cfg.thread_per_flow = matches!(plan.spec, hakaru_model::TestSpec::Tcp(_));
        cfg.subflow_guard = self.ctx.subflow_guard();
        cfg.payload = if p.repeating_payload {
            Payload::Digits
        } else {
            Payload::Random
        };
        let role = |dir: FlowDir| {
            if dir == FlowDir::Down {
                Role::Sender
            } else {
                Role::Receiver
            }
        };
        match &plan.spec {
            TestSpec::Udp(u) => {
                let mut ucfg = UdpConfig::from_spec(u, hakaru_model::FlowDir::Down);
                ucfg.framing = Framing::Iperf3 {
                    seq64: p.udp_counters_64bit,
                };
                let flows = plan
                    .flows
                    .iter()
                    .zip(streams.udp)
                    .map(|(&(id, dir), socket)| UdpFlowSocket {
                        id,
                        dir,
                        role: role(dir),
                        socket,
                        quota: None,
                    })
                    .collect();
                Ok(SetUp::Udp(cfg, ucfg, flows))
            }
            TestSpec::Tcp(t) => {
                cfg.pace_bps = p.bandwidth.filter(|&b| b > 0);
                let flows = tcp_flows(&plan.flows, t, streams.tcp, role)?;
                Ok(SetUp::Tcp(cfg, flows))
            }
            _ => Err((
                errno::IECREATESTREAM,
                "internal error: not TCP or UDP".into(),
            )),
        }
    }

    /// Starts the engine on the set-up flows.
    fn start(&mut self) -> Result<(), Failure> {
        let keep = Arc::clone(&self.samples);
        let on_interval = Box::new(move |s: IntervalSample| {
            if let Ok(mut v) = keep.lock() {
                v.push(s);
            }
        });
        let failed = |e: hakaru_engine::tcp::SideError| {
            (errno::IECREATESTREAM, format!("starting the streams: {e}"))
        };
        let run = match self.setup.take() {
            Some(SetUp::Tcp(cfg, flows)) => Running::Tcp(
                SideRun::start(cfg, flows, on_interval, Box::new(|| {})).map_err(failed)?,
            ),
            Some(SetUp::Udp(cfg, ucfg, flows)) => Running::Udp(
                UdpRun::start(
                    cfg,
                    ucfg,
                    flows,
                    on_interval,
                    Box::new(|| {}),
                    Box::new(|_| {}),
                )
                .map_err(failed)?,
            ),
            None => return Err((errno::IECREATESTREAM, "internal error: no streams".into())),
        };
        self.run = Some(run);
        Ok(())
    }

    /// The engine's report, counted into the metrics, with what the results need.
    fn collect(&mut self) -> Result<Collected, Failure> {
        let Some(run) = self.run.take() else {
            return Err((errno::IERECVRESULTS, "internal error: no test ran".into()));
        };
        let report = run.wait();
        let kind = self.plan.as_ref().map_or("tcp", |p| p.spec.name());
        for f in &report.flows {
            let dir = match f.role {
                Role::Receiver => "received",
                Role::Sender => "sent",
            };
            self.ctx
                .metrics
                .bytes("iperf3", kind, dir, f.bytes + f.omitted_bytes);
        }
        self.report = Some(report.clone());
        let samples = self
            .samples
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        let local = self
            .ctl
            .stream()
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Ok(Collected {
            report,
            samples,
            peer: self.peer,
            local,
            now_unix,
        })
    }

    /// Logs how the session ended and lets go of the test.
    fn finish(&mut self, how: machine::Ending) {
        if let Some(run) = self.run.take() {
            run.abort();
        }
        let (id, peer) = (self.id, self.peer);
        if let Some(plan) = &self.plan {
            let ok = how == machine::Ending::Finished;
            self.ctx
                .metrics
                .test_finished("iperf3", plan.spec.name(), ok);
        }
        match how {
            machine::Ending::Finished => tracing::info!(
                "iperf3 test {id} from {peer} finished after {:.1} s: {}{}",
                self.started.elapsed().as_secs_f64(),
                self.report.as_ref().map_or_else(String::new, moved_words),
                self.report
                    .as_ref()
                    .map_or_else(String::new, results::how_words)
            ),
            machine::Ending::Failed { why, told: true } => {
                tracing::warn!("iperf3 test {id} from {peer} failed: {why}")
            }
            machine::Ending::Refused(why) | machine::Ending::Failed { why, .. } => {
                tracing::warn!("iperf3 test {id} from {peer} ended: {why}")
            }
        }
    }
}

/// The TCP flows, in the order the client opened its streams, with the test's socket options.
fn tcp_flows(
    plan: &[(u32, FlowDir)],
    t: &TcpSpec,
    mut tcp: Vec<(u32, TcpStream)>,
    role: impl Fn(FlowDir) -> Role,
) -> Result<Vec<FlowSocket>, Failure> {
    if let Some(&(r, _)) = tcp.first() {
        // Offsets from any one of them order them, across a wrap of the counter too.
        tcp.sort_by_key(|(q, _)| q.wrapping_sub(r) as i32);
    }
    let mut flows = Vec::with_capacity(plan.len());
    let mut down = 0u32;
    for (&(id, dir), (_, stream)) in plan.iter().zip(tcp) {
        let ipv6 = stream.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
        apply_tcp_options(&SockRef::from(&stream), t, ipv6, false).map_err(|e| {
            let code = if t.congestion.is_some() && e.to_string().contains("congestion") {
                errno::IESETCONGESTION
            } else {
                errno::IESETBUF2
            };
            (code, e.to_string())
        })?;
        let quota = (role(dir) == Role::Sender).then(|| {
            down += 1;
            t.bytes_for_flow(down - 1)
        });
        flows.push(FlowSocket {
            id,
            dir,
            role: role(dir),
            stream,
            quota: quota.flatten(),
        });
    }
    Ok(flows)
}

/// What moved at this end, for the log.
fn moved_words(report: &hakaru_model::SideReport) -> String {
    let sum = |role: Role| -> u64 {
        report
            .flows
            .iter()
            .filter(|f| f.role == role)
            .map(|f| f.bytes)
            .sum()
    };
    let (received, sent) = (sum(Role::Receiver), sum(Role::Sender));
    format!(
        "received {received} bytes ({}), sent {sent} bytes ({}) at this end",
        Bytes(received),
        Bytes(sent)
    )
}

/// A socket on the server's port connected to a UDP stream's client socket (the reply and
/// the data must come from the port the client connected its socket to).
fn open_udp_stream(ctx: &Ctx, spec: &UdpSpec, to: SocketAddr) -> std::io::Result<UdpSocket> {
    crate::session::open_udp_flow_with(ctx, to, false, |sock, v6| {
        apply_udp_options(sock, spec, v6).map_err(|e| std::io::Error::other(e.to_string()))
    })
}
