//! `--iperf3`: a TCP or UDP test against a stock iperf3 server (`iperf3 -s`, 3.12 and later).
//!
//! The control dialogue is iperf3's (cookie, parameters, stream creation, TEST_START, TEST_END,
//! results exchange); the data moves through the same engine as a native test, with iperf3's
//! UDP framing. iperf3 does not stream the server's interval figures, so live intervals show
//! this end's numbers only; the totals take the receiver's figures from the results exchange,
//! as iperf3's own client does.

use hakaru_session::Machine as _;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::control::{RawConn, Received, Transport};
use hakaru_engine::drive::{raw_input, Carrier, OnReset, Wait};
use hakaru_engine::sockopt::apply_tcp_options;
use hakaru_engine::tcp::{FlowSocket, Payload, SideConfig, SideRun};
use hakaru_engine::udp::{UdpConfig, UdpFlowSocket, UdpRun};
use hakaru_engine::{sys, Observer, Running};
use hakaru_model::{
    Amount, Direction, End, FlowDir, IntervalSample, Role, RunResult, SideReport, TestSpec, UdpRate,
};
use hakaru_proto::datagram::Framing;
use hakaru_proto::iperf3::{
    self as wire, error_text, report_from_results, results_from_report, Params, Protocol, Results,
};

use crate::{connect_one, ClientError, ClientOptions};
use hakaru_model::assemble;

use hakaru_session::iperf3::client::{self as machine, STEP_TIMEOUT};
const UDP_REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the client waits for its sent data to be acknowledged before TEST_END.
const LAND_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the server's advertised windows must stay unchanged: it has read what it will.
const LAND_STEADY: Duration = Duration::from_millis(100);
/// After TEST_END, how long TCP receivers wait for the server to close before taking what
/// has arrived.
const DRAIN_AFTER: Duration = Duration::from_secs(2);

/// The parameters that ask a stock server for `spec`.
fn params_for(spec: &TestSpec) -> Result<Params, ClientError> {
    let (udp, flows, direction, amount, omit, length) = match spec {
        TestSpec::Tcp(t) => (false, t.flows, t.direction, t.amount, t.omit, t.length),
        TestSpec::Udp(u) => (true, u.flows, u.direction, u.amount, u.omit, u.length),
        _ => {
            return Err(ClientError::Refused(
                "--iperf3: only tcp, udp and pps tests run against an iperf3 server".into(),
            ))
        }
    };
    if flows > 128 {
        return Err(ClientError::Refused(format!(
            "--iperf3: -P {flows}: iperf3 servers take at most 128 streams"
        )));
    }
    let mut p = Params {
        protocol: Some(if udp { Protocol::Udp } else { Protocol::Tcp }),
        omit: omit.0.as_secs_f64(),
        parallel: flows,
        reverse: direction == Direction::Reverse,
        bidirectional: direction == Direction::Bidir,
        len: Some(length.0),
        pacing_timer: Some(1000),
        client_version: Some(format!("hakaru-{}", env!("CARGO_PKG_VERSION"))),
        ..Params::default()
    };
    match amount {
        Amount::Time(t) => p.time = t.0.as_secs_f64().max(1.0).round(),
        Amount::Bytes(b) => p.num = b.0,
        Amount::Blocks(k) => p.blockcount = k,
    }
    match spec {
        TestSpec::Tcp(t) => {
            p.window = t.window.map(|w| w.0);
            p.mss = t.mss;
            p.nodelay = t.nodelay;
            p.tos = t.tos.map(u32::from);
            p.congestion = t.congestion.clone();
            p.zerocopy = t.zerocopy;
            // iperf3 paces its TCP senders to `bandwidth` per stream, as -b does here.
            p.bandwidth = t.rate.map(|r| r.0 as u64);
        }
        TestSpec::Udp(u) => {
            p.window = u.window.map(|w| w.0);
            p.tos = u.tos.map(u32::from);
            p.bandwidth = Some(match u.rate {
                UdpRate::Unlimited => 0,
                UdpRate::Bits(b) => b.0 as u64,
                UdpRate::Packets(pps) => (pps * length.0 as f64 * 8.0) as u64,
            });
        }
        _ => {}
    }
    Ok(p)
}

/// Opens one UDP stream: a connected socket, "9876" to the server's port, its "6789".
fn open_udp_stream(
    opts: &ClientOptions,
    spec: &hakaru_model::UdpSpec,
    server: SocketAddr,
    flow: u32,
) -> Result<UdpSocket, ClientError> {
    let sock = crate::udp::open_socket(opts, spec, server, flow)?;
    let fail = |reason: String| ClientError::Data { flow, reason };
    sock.send(&wire::UDP_CONNECT)
        .map_err(|e| fail(e.to_string()))?;
    let deadline = Instant::now() + UDP_REPLY_TIMEOUT;
    let mut buf = vec![0u8; 65_536];
    loop {
        match sock.recv(&mut buf) {
            // In reverse mode data may overtake the reply; skip it.
            Ok(4) if buf[..4] == wire::UDP_REPLY || buf[..4] == wire::UDP_REPLY_LEGACY => {
                return Ok(sock)
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(fail(format!(
                    "UDP to {server} refused (ICMP port unreachable)"
                )))
            }
            Err(e) => return Err(fail(e.to_string())),
        }
        if Instant::now() > deadline {
            return Err(fail(format!(
                "the iperf3 server did not answer the UDP stream's greeting within {} s (is UDP to port {} blocked?)",
                UDP_REPLY_TIMEOUT.as_secs(),
                server.port()
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `opts.spec` against a stock iperf3 server: the driver of
/// `hakaru_session::iperf3::client`.
pub(crate) fn run(
    opts: &ClientOptions,
    observer: &mut dyn Observer,
    stop: Arc<AtomicBool>,
) -> Result<RunResult, ClientError> {
    let spec = opts.spec.clone();
    spec.validate()
        .map_err(|e| ClientError::Refused(format!("(checked locally) {}", e.0)))?;
    let params = params_for(&spec)?;
    let (stream, server_addr) = crate::connect_control(opts)?;
    let addr = server_addr.to_string();
    let local_address = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let local_ip = stream.local_addr().ok().map(|a| a.ip());
    let mut seed = [0u8; 36];
    seed.copy_from_slice(&Payload::Random.fill(36));
    let cookie = wire::make_cookie(&seed);
    let timed = match spec.common().amount {
        Amount::Time(t) => Some(t.0 + spec.common().omit.0),
        _ => None,
    };
    let mut m = machine::Session::new(&cookie, params.to_json(), timed, Instant::now());
    let iface = local_ip.and_then(sys::interface_for_addr);
    let (tx, rx) = mpsc::channel::<IntervalSample>();
    let mut d = Driver {
        opts,
        spec: &spec,
        ctl: {
            let _ = stream.set_nodelay(true);
            RawConn::new(stream, Duration::from_secs(10), 16 << 10)
        },
        addr: &addr,
        server_addr,
        cookie,
        cfg: Some(SideConfig::for_spec(
            End::Client,
            &spec,
            opts.affinity.clone(),
            iface,
        )),
        tx: Some(tx),
        rx,
        flows: None,
        run: None,
        held_tcp: Vec::new(),
        held_udp: Vec::new(),
        total: params.num.max(params.blockcount * params.len.unwrap_or(0)),
        dirs: spec.flow_plan().into_iter().collect(),
        intervals: Vec::new(),
        local: None,
        remote: None,
        theirs: None,
        started_unix: 0.0,
    };
    let interrupted = d.drive(&mut m, observer, &stop)?;
    let (Some(local), Some(remote), Some(theirs)) =
        (d.local.take(), d.remote.take(), d.theirs.take())
    else {
        return Err(ClientError::Server(
            "internal error: the iperf3 session ended without results".into(),
        ));
    };
    // The server closes its data sockets when it is done; ours close only now, after the
    // results are in.
    drop(d.held_tcp);
    drop(d.held_udp);
    if let Some(e) = local.flows.iter().find_map(|f| f.error.clone()) {
        return Err(ClientError::Flow(e));
    }
    let result = finish(
        opts,
        spec.clone(),
        &addr,
        local_address,
        d.started_unix,
        d.intervals,
        local,
        remote,
        interrupted,
        &theirs,
    );
    observer.on_end(&result);
    Ok(result)
}

/// The flows opened for the engine, before it starts.
enum Opened {
    Tcp(Vec<FlowSocket>),
    Udp(UdpConfig, Vec<UdpFlowSocket>),
}

/// The I/O half of a `--iperf3` run.
struct Driver<'a> {
    opts: &'a ClientOptions,
    spec: &'a TestSpec,
    ctl: RawConn,
    addr: &'a str,
    server_addr: SocketAddr,
    cookie: [u8; wire::COOKIE_LEN],
    cfg: Option<SideConfig>,
    tx: Option<mpsc::Sender<IntervalSample>>,
    rx: mpsc::Receiver<IntervalSample>,
    flows: Option<Opened>,
    run: Option<Running>,
    // iperf3's server closes its data sockets when the test ends; closing ours before the
    // results are shown would reset a server still writing. These duplicates keep every data
    // socket open until the run returns.
    held_tcp: Vec<std::net::TcpStream>,
    held_udp: Vec<UdpSocket>,
    /// An amount test's bytes (`-n`, or `-k` blocks).
    total: u64,
    dirs: BTreeMap<u32, FlowDir>,
    intervals: Vec<hakaru_model::IntervalRecord>,
    local: Option<SideReport>,
    remote: Option<SideReport>,
    theirs: Option<Results>,
    started_unix: f64,
}

/// A run's driver with what only the run has: its observer and the user's stop.
struct Carried<'d, 'a> {
    d: &'d mut Driver<'a>,
    observer: &'d mut dyn Observer,
    stop: &'d AtomicBool,
}

impl Carrier<machine::Session> for Carried<'_, '_> {
    type Conn = RawConn;
    /// `Ok(interrupted)`.
    type End = Result<bool, ClientError>;

    fn conn(&mut self) -> &mut RawConn {
        &mut self.d.ctl
    }

    fn act(&mut self, m: &mut machine::Session, out: machine::Output) -> ControlFlow<Self::End> {
        if let machine::Output::End(how) = out {
            if let Some(run) = self.d.run.take() {
                run.abort();
            }
            return ControlFlow::Break(how.map_err(|e| self.d.error(e)));
        }
        if let Err(e) = self.d.act(m, out, self.observer) {
            m.handle(machine::Input::Failed(e), Instant::now());
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
        Duration::from_millis(50)
    }

    /// Live intervals; while the test runs, the user's stop, a failed stream, an amount moved.
    fn event(&mut self, m: &mut machine::Session, left: Duration) -> Wait {
        self.d.show(self.observer);
        if m.is_running() {
            if let Some(input) = self.d.check_run(self.stop) {
                m.handle(input, Instant::now());
                return Wait::Handled;
            }
        }
        Wait::Read(left)
    }

    fn finished(&mut self, _m: &mut machine::Session) -> Self::End {
        Err(ClientError::Flow(
            "internal error: the iperf3 session ended without saying how".into(),
        ))
    }
}

impl Driver<'_> {
    /// Runs the session to its end: `Ok(interrupted)`.
    fn drive(
        &mut self,
        m: &mut machine::Session,
        observer: &mut dyn Observer,
        stop: &AtomicBool,
    ) -> Result<bool, ClientError> {
        let mut c = Carried {
            d: self,
            observer,
            stop,
        };
        hakaru_engine::drive::drive(m, &mut c)
    }

    /// What the running engine says: the user's stop, a failed stream, an amount moved.
    fn check_run(&self, stop: &AtomicBool) -> Option<machine::Input> {
        let run = self.run.as_ref()?;
        if stop.load(Ordering::Acquire) {
            return Some(machine::Input::Interrupt);
        }
        if self.total > 0
            && (run.is_done()
                || run.moved(Role::Sender) >= self.total
                || run.moved(Role::Receiver) >= self.total)
        {
            return Some(machine::Input::AmountDone);
        }
        run.first_error().map(machine::Input::SideFailed)
    }

    /// Live intervals: this end's numbers only (iperf3 does not stream the server's).
    fn show(&mut self, observer: &mut dyn Observer) {
        crate::drive::show_local(&self.rx, &self.dirs, observer, &mut self.intervals);
    }

    fn act(
        &mut self,
        m: &mut machine::Session,
        out: machine::Output,
        observer: &mut dyn Observer,
    ) -> Result<(), machine::Error> {
        use machine::Output as O;
        match out {
            O::Send(b) => {
                // A write that fails is the server gone: the next read says so.
                let _ = self.ctl.send(&b);
            }
            O::OpenStreams => {
                self.flows = Some(self.open_streams().map_err(|e| match e {
                    ClientError::Data { flow, reason } => {
                        machine::Error::Flow(format!("flow {flow}: {reason}"))
                    }
                    other => machine::Error::Flow(other.to_string()),
                })?);
                m.handle(machine::Input::StreamsOpen, Instant::now());
            }
            O::StartSide => {
                self.start()
                    .map_err(|e| machine::Error::Flow(e.to_string()))?;
                observer.on_start(self.spec, self.addr, self.opts.embedded);
                self.started_unix = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
            }
            O::Land => {
                self.land();
                m.handle(machine::Input::Landed, Instant::now());
            }
            O::Drain => {
                let mine = self.drain(observer)?;
                m.handle(machine::Input::SideDone(Box::new(mine)), Instant::now());
            }
            O::Results(theirs) => {
                let udp = matches!(self.spec, TestSpec::Udp(_));
                let plan: Vec<(u32, FlowDir)> = self.dirs.iter().map(|(&k, &v)| (k, v)).collect();
                let remote = report_from_results(
                    End::Server,
                    &theirs,
                    &plan,
                    |d| d == FlowDir::Down,
                    udp,
                    "iperf3",
                )
                .map_err(|e| machine::Error::BadResults(e.to_string()))?;
                self.remote = Some(remote);
                self.theirs = Some(*theirs);
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

    /// Opens every data stream with the test's cookie.
    fn open_streams(&mut self) -> Result<Opened, ClientError> {
        let (opts, server_addr) = (self.opts, self.server_addr);
        let role = |dir: FlowDir| match dir {
            FlowDir::Up => Role::Sender,
            FlowDir::Down => Role::Receiver,
        };
        let plan: Vec<(u32, FlowDir)> = self.spec.flow_plan();
        let mut up = 0u32;
        match self.spec {
            TestSpec::Tcp(t) => {
                let mut flows = Vec::with_capacity(plan.len());
                for &(id, dir) in &plan {
                    let data = |e: &dyn std::fmt::Display| ClientError::Data {
                        flow: id,
                        reason: e.to_string(),
                    };
                    let mut s = connect_one(server_addr, opts.bind, opts.connect_timeout, |sock| {
                        apply_tcp_options(sock, t, server_addr.is_ipv6(), true)
                            .map_err(ClientError::from)
                    })
                    .map_err(|e| data(&e))?;
                    s.write_all(&self.cookie).map_err(|e| data(&e))?;
                    if let Ok(dup) = s.try_clone() {
                        self.held_tcp.push(dup);
                    }
                    let quota = (dir == FlowDir::Up).then(|| {
                        up += 1;
                        t.bytes_for_flow(up - 1)
                    });
                    flows.push(FlowSocket {
                        id,
                        dir,
                        role: role(dir),
                        stream: s,
                        quota: quota.flatten(),
                    });
                }
                Ok(Opened::Tcp(flows))
            }
            TestSpec::Udp(u) => {
                let mut flows = Vec::with_capacity(plan.len());
                for &(id, dir) in &plan {
                    let socket = open_udp_stream(opts, u, server_addr, id)?;
                    if let Ok(dup) = socket.try_clone() {
                        self.held_udp.push(dup);
                    }
                    let quota = (dir == FlowDir::Up).then(|| {
                        up += 1;
                        u.datagrams_for_flow(up - 1)
                    });
                    flows.push(UdpFlowSocket {
                        id,
                        dir,
                        role: role(dir),
                        socket,
                        quota: quota.flatten(),
                    });
                }
                let mut ucfg = UdpConfig::from_spec(u, hakaru_model::FlowDir::Up);
                ucfg.framing = Framing::Iperf3 { seq64: false };
                Ok(Opened::Udp(ucfg, flows))
            }
            _ => Err(ClientError::Refused(
                "--iperf3: only tcp, udp and pps tests run against an iperf3 server".into(),
            )),
        }
    }

    /// Starts the engine on the opened streams.
    fn start(&mut self) -> Result<(), ClientError> {
        let (Some(mut cfg), Some(tx), Some(flows)) =
            (self.cfg.take(), self.tx.take(), self.flows.take())
        else {
            return Err(ClientError::Server("internal error: started twice".into()));
        };
        cfg.payload = Payload::Random;
        cfg.half_close = false;
        let on_interval = Box::new(move |s| {
            let _ = tx.send(s);
        });
        self.run = Some(match flows {
            Opened::Tcp(flows) => {
                Running::Tcp(SideRun::start(cfg, flows, on_interval, Box::new(|| {}))?)
            }
            Opened::Udp(ucfg, flows) => Running::Udp(UdpRun::start(
                cfg,
                ucfg,
                flows,
                on_interval,
                Box::new(|| {}),
                Box::new(|_| {}),
            )?),
        });
        Ok(())
    }

    /// iperf3's server counts what it has read when TEST_END arrives: the TCP senders stop
    /// and the data in flight lands first, until the server's advertised windows have not
    /// grown for 100 ms (they reopen as it reads; on kernels that do not report the window
    /// the wait is short), at most 1 s.
    fn land(&self) {
        let Some(Running::Tcp(r)) = &self.run else {
            return;
        };
        r.stop_sending();
        let t = Instant::now();
        let mut last_window = 0;
        let mut steady_since = Instant::now();
        while t.elapsed() < LAND_TIMEOUT && steady_since.elapsed() < LAND_STEADY {
            std::thread::sleep(Duration::from_millis(2));
            let (unacked, window) = r.send_state();
            if unacked > 0 || window > last_window {
                steady_since = Instant::now();
            }
            last_window = window;
        }
    }

    /// After TEST_END: TCP receivers read to the server's close (the senders have stopped);
    /// UDP has no end, so its receivers finish when quiet. This end's results document.
    fn drain(&mut self, observer: &mut dyn Observer) -> Result<Results, machine::Error> {
        let Some(run) = self.run.take() else {
            return Err(machine::Error::Flow("internal error: nothing ran".into()));
        };
        if !matches!(run, Running::Tcp(_)) {
            run.peer_stopped();
        }
        let ended_at = Instant::now();
        let mut drained = false;
        while !run.is_done() && ended_at.elapsed() < STEP_TIMEOUT {
            if !drained && ended_at.elapsed() > DRAIN_AFTER {
                // A server that keeps its sockets open: take what has arrived.
                run.peer_stopped();
                drained = true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let local = run.wait();
        self.show(observer);
        let udp = matches!(self.spec, TestSpec::Udp(_));
        let mine = results_from_report(&local, !udp);
        self.local = Some(local);
        Ok(mine)
    }

    /// The machine's error as the client says it.
    fn error(&self, e: machine::Error) -> ClientError {
        let addr = self.addr;
        let gone = |what: String| ClientError::ServerGone {
            addr: addr.to_string(),
            what,
        };
        match e {
            machine::Error::Busy => ClientError::Refused(format!(
                "the iperf3 server at {addr} is busy running a test; try again later"
            )),
            // errno follows in most versions; it adds nothing the code does not say.
            machine::Error::ServerError(code) => {
                ClientError::Server(format!("iperf3 server error: {}", error_text(code)))
            }
            machine::Error::Terminated => gone("terminated the test (SERVER_TERMINATE)".into()),
            machine::Error::Unexpected { state, waiting_for } => ClientError::Server(format!(
                "iperf3 server sent state {state:?} while {waiting_for}"
            )),
            machine::Error::Gone(what) => gone(what),
            machine::Error::BadResults(why) => {
                ClientError::Server(format!("iperf3 server's results: {why}"))
            }
            machine::Error::Flow(e) => ClientError::Flow(e),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn finish(
    opts: &ClientOptions,
    spec: TestSpec,
    addr: &str,
    local_address: String,
    started_unix: f64,
    intervals: Vec<hakaru_model::IntervalRecord>,
    local: SideReport,
    remote: SideReport,
    interrupted: bool,
    theirs: &Results,
) -> RunResult {
    let mut notes = vec![format!(
        "peer: an iperf3 server (--iperf3); its figures come from iperf3's results exchange, so intervals show this end only and the server's CPU is its process's ({:.1} % total, {:.1} % user, {:.1} % system), not its machine's",
        theirs.cpu_util_total, theirs.cpu_util_user, theirs.cpu_util_system
    )];
    if let Some(cc) = &theirs.congestion_used {
        notes.push(format!("iperf3 server congestion control: {cc}"));
    }
    let ipv6 = addr.starts_with('[');
    assemble(hakaru_model::AssembleInputs {
        ipv6,
        spec,
        server: addr.to_string(),
        embedded: opts.embedded,
        local_address,
        remote_address: addr.to_string(),
        started_unix,
        intervals,
        local,
        remote,
        interrupted,
        notes,
    })
}
