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

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::iperf3_control::{Iperf3Ctl, Iperf3CtlError};
use hakaru_engine::sockopt::{apply_tcp_options, apply_udp_options};
use hakaru_engine::sys;
use hakaru_engine::tcp::{FlowSocket, Payload, SideConfig, SideRun};
use hakaru_engine::udp::{UdpConfig, UdpFlowSocket, UdpRun};
use hakaru_engine::Running;
use hakaru_model::{
    Amount, BitRate, Bytes, Direction, Dur, End, FlowDir, IntervalSample, Role, TcpSpec, TestSpec,
    UdpRate, UdpSpec,
};
use hakaru_proto::datagram::Framing;
use hakaru_proto::iperf3::{
    self as wire, errno, report_from_results, results_from_report, Params, Protocol, State,
};
use socket2::SockRef;

use crate::limits::Slot;
use crate::registry::{canonical_ip, DataConn};
use crate::Ctx;

const PARAMS_TIMEOUT: Duration = Duration::from_secs(30);
const STREAMS_TIMEOUT: Duration = Duration::from_secs(30);
const RESULTS_TIMEOUT: Duration = Duration::from_secs(30);
const DONE_TIMEOUT: Duration = Duration::from_secs(10);
/// Past the test's own length, how long a timed test may run before the server gives up on
/// the client (stock iperf3's grace).
const GRACE: Duration = Duration::from_secs(40);
/// A test without a time limit (`-n`, `-k`) whose data stops moving this long is over.
const IDLE_LIMIT: Duration = Duration::from_secs(120);

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
        .deliver(&cookie, peer.ip(), DataConn::Tcp(seq, stream))
    {
        Ok(()) => return,
        Err((_, DataConn::Tcp(_, s))) => stream = s,
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
    let mut ctl = Iperf3Ctl::new(stream, first.get(wire::COOKIE_LEN..).unwrap_or_default());
    if ctx.shutdown.load(Ordering::Acquire) {
        tracing::warn!("iperf3: refused a test from {peer}: the server is shutting down");
        let _ = ctl.send_state(State::AccessDenied);
        return;
    }
    let id = ctx.next_test.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let mut s = Session {
        ctx,
        ctl,
        peer,
        id,
        cookie,
        handshake: Some(handshake),
        test_slot: None,
        memory: None,
    };
    let outcome = s.run();
    ctx.registry.remove(&s.cookie);
    ctx.iperf3.end(&s.cookie);
    match outcome {
        Ok(summary) => tracing::info!(
            "iperf3 test {id} from {peer} finished after {:.1} s: {summary}",
            started.elapsed().as_secs_f64()
        ),
        Err(Fail::Tell(code, why)) => {
            tracing::warn!("iperf3 test {id} from {peer} failed: {why}");
            let _ = s.ctl.send(&wire::server_error(code, 0));
        }
        Err(Fail::Quiet(why)) => tracing::warn!("iperf3 test {id} from {peer} ended: {why}"),
    }
}

fn deny(stream: &mut TcpStream) {
    use std::io::Write;
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = stream.write_all(&[State::AccessDenied.byte()]);
}

/// How a session failed.
pub(crate) enum Fail {
    /// Tell the client with SERVER_ERROR and this i_errno, then close.
    Tell(i32, String),
    /// The client is gone or misbehaved; log and close.
    Quiet(String),
}

fn quiet(what: &str) -> impl Fn(Iperf3CtlError) -> Fail + '_ {
    move |e| Fail::Quiet(format!("{what}: {e}"))
}

/// The test a client asked for, checked.
pub(crate) struct Plan {
    params: Params,
    spec: TestSpec,
    udp: bool,
    /// (hakaru flow id, direction), in iperf3's stream creation order.
    pub(crate) flows: Vec<(u32, FlowDir)>,
}

struct Session<'a> {
    ctx: &'a Ctx,
    ctl: Iperf3Ctl,
    peer: SocketAddr,
    id: u64,
    cookie: String,
    /// Given back once the test has its slot.
    handshake: Option<Slot>,
    /// Taken once the parameters are valid.
    test_slot: Option<Slot>,
    /// The test's buffer memory, reserved with its slot.
    memory: Option<crate::budget::Reservation>,
}

impl Session<'_> {
    fn run(&mut self) -> Result<String, Fail> {
        self.ctl
            .send_state(State::ParamExchange)
            .map_err(quiet("sending PARAM_EXCHANGE"))?;
        let v = self
            .ctl
            .recv_json("parameters", wire::MAX_PARAMS_JSON, PARAMS_TIMEOUT)
            .map_err(|e| match e {
                Iperf3CtlError::Proto(p) => Fail::Tell(errno::IERECVPARAMS, p.to_string()),
                other => Fail::Quiet(format!("reading the parameters: {other}")),
            })?;
        let params =
            Params::from_json(&v).map_err(|e| Fail::Tell(errno::IERECVPARAMS, e.to_string()))?;
        let plan = plan(&params, &self.ctx.cfg)?;
        let cpus = sys::online_cpus();
        let memory = self.ctx.memory.reserve(
            &self.ctx.cfg.budgets,
            crate::budget::server_memory(&plan.spec, cpus),
        );
        match memory.and_then(|m| {
            Ok((
                self.ctx.admission.test(self.peer.ip(), plan.flows.len())?,
                m,
            ))
        }) {
            Ok((slot, memory)) => {
                self.test_slot = Some(slot);
                self.memory = Some(memory);
                self.handshake = None;
            }
            Err(why) => {
                // What a stock iperf3 server says when busy; the client reports "the server
                // is busy running a test".
                let _ = self.ctl.send_state(State::AccessDenied);
                return Err(Fail::Quiet(format!("refused: {why}")));
            }
        }
        tracing::info!(
            "iperf3 test {} from {} (client {}): {}, {} stream(s) per direction, {:?}, {}",
            self.id,
            self.peer,
            params.client_version.as_deref().unwrap_or("?"),
            if plan.udp { "UDP" } else { "TCP" },
            params.parallel,
            plan.spec.direction(),
            amount_words(&params)
        );
        let (tx, rx) = mpsc::channel();
        if !self
            .ctx
            .registry
            .insert(self.cookie.clone(), self.peer.ip(), plan.flows.len(), tx)
        {
            // Another session holds this cookie: a stock client never reuses one.
            let _ = self.ctl.send_state(State::AccessDenied);
            return Err(Fail::Quiet(
                "refused: its cookie belongs to another running test".into(),
            ));
        }
        self.ctx
            .iperf3
            .begin(self.peer.ip(), &self.cookie, plan.udp);
        self.ctl
            .send_state(State::CreateStreams)
            .map_err(quiet("sending CREATE_STREAMS"))?;
        let kind = plan.spec.name();
        self.ctx.metrics.test_started("iperf3", kind);
        let r = self.streams_and_results(&plan, &rx);
        self.ctx.metrics.test_finished("iperf3", kind, r.is_ok());
        r
    }

    /// Opens the streams, runs the test and exchanges the results.
    fn streams_and_results(
        &mut self,
        plan: &Plan,
        rx: &mpsc::Receiver<DataConn>,
    ) -> Result<String, Fail> {
        let (run, samples) = self.open_streams(plan, rx)?;
        self.ctx.registry.remove(&self.cookie);
        self.ctx.iperf3.end(&self.cookie);
        let report = self.supervise(plan, run)?;
        for f in &report.flows {
            let dir = match f.role {
                hakaru_model::Role::Receiver => "received",
                hakaru_model::Role::Sender => "sent",
            };
            self.ctx
                .metrics
                .bytes("iperf3", plan.spec.name(), dir, f.bytes + f.omitted_bytes);
        }
        self.exchange(plan, &report, samples)
    }

    /// Collects the data streams, sets them up, sends TEST_START and TEST_RUNNING and starts
    /// the engine.
    fn open_streams(
        &mut self,
        plan: &Plan,
        rx: &mpsc::Receiver<DataConn>,
    ) -> Result<(Running, Samples), Fail> {
        let want = plan.flows.len();
        // (accept order, stream): roles follow the order the client opened the streams in.
        let mut tcp: Vec<(u32, TcpStream)> = Vec::new();
        let mut udp: Vec<UdpSocket> = Vec::new();
        let deadline = Instant::now() + STREAMS_TIMEOUT;
        while tcp.len() + udp.len() < want {
            if Instant::now() > deadline || self.ctx.shutdown.load(Ordering::Acquire) {
                return Err(Fail::Quiet(format!(
                    "only {} of {want} data streams arrived within {} s",
                    tcp.len() + udp.len(),
                    STREAMS_TIMEOUT.as_secs()
                )));
            }
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(DataConn::Tcp(seq, s)) if !plan.udp => tcp.push((seq, s)),
                Ok(DataConn::Udp(_, from)) if plan.udp => {
                    let TestSpec::Udp(u) = &plan.spec else {
                        return Err(Fail::Quiet(
                            "internal error: UDP plan without UDP spec".into(),
                        ));
                    };
                    let s = open_udp_stream(self.ctx, u, from).map_err(|e| {
                        Fail::Tell(
                            errno::IESTREAMCONNECT,
                            format!("opening the UDP stream to {from}: {e}"),
                        )
                    })?;
                    let _ = s.send(&wire::UDP_REPLY);
                    udp.push(s);
                }
                Ok(DataConn::Tcp(_, mut s)) => deny(&mut s),
                Ok(DataConn::Udp(..)) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Fail::Quiet("internal error: registry closed".into()))
                }
            }
            match self.ctl.poll_state(Duration::ZERO) {
                Ok(None) => {}
                Ok(Some(st)) => {
                    return Err(Fail::Quiet(format!(
                        "the client sent state {st:?} while its streams were opening"
                    )))
                }
                Err(e) => return Err(quiet("while streams were opening")(e)),
            }
        }
        if let Some(&(r, _)) = tcp.first() {
            // Offsets from any one of them order them, across a wrap of the counter too.
            tcp.sort_by_key(|(q, _)| q.wrapping_sub(r) as i32);
        }
        let tcp: Vec<TcpStream> = tcp.into_iter().map(|(_, s)| s).collect();
        let server_sends = |dir: FlowDir| dir == FlowDir::Down;
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
        cfg.window_at_peer_end = matches!(plan.spec.amount(), hakaru_model::Amount::Time(_));
        cfg.stall_timeout = IDLE_LIMIT;
        cfg.payload = if p.repeating_payload {
            Payload::Digits
        } else {
            Payload::Random
        };
        if !plan.udp {
            cfg.pace_bps = p.bandwidth.filter(|&b| b > 0);
        }
        let samples = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&samples);
        let on_interval = Box::new(move |s: IntervalSample| {
            if let Ok(mut v) = keep.lock() {
                v.push(s);
            }
        });
        let run = if plan.udp {
            let TestSpec::Udp(u) = &plan.spec else {
                return Err(Fail::Quiet("internal error".into()));
            };
            let mut ucfg = UdpConfig::from_spec(u, hakaru_model::FlowDir::Down);
            ucfg.framing = Framing::Iperf3 {
                seq64: p.udp_counters_64bit,
            };
            let flows = plan
                .flows
                .iter()
                .zip(udp)
                .map(|(&(id, dir), socket)| UdpFlowSocket {
                    id,
                    dir,
                    role: if server_sends(dir) {
                        Role::Sender
                    } else {
                        Role::Receiver
                    },
                    socket,
                    quota: None,
                })
                .collect();
            self.start_signal()?;
            Running::Udp(
                UdpRun::start(
                    cfg,
                    ucfg,
                    flows,
                    on_interval,
                    Box::new(|| {}),
                    Box::new(|_| {}),
                )
                .map_err(|e| {
                    Fail::Tell(errno::IECREATESTREAM, format!("starting the streams: {e}"))
                })?,
            )
        } else {
            let TestSpec::Tcp(t) = &plan.spec else {
                return Err(Fail::Quiet("internal error".into()));
            };
            let mut flows = Vec::with_capacity(want);
            let mut down = 0u32;
            for (&(id, dir), stream) in plan.flows.iter().zip(tcp) {
                let ipv6 = stream.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
                apply_tcp_options(&SockRef::from(&stream), t, ipv6, false).map_err(|e| {
                    let code = if t.congestion.is_some() && e.to_string().contains("congestion") {
                        errno::IESETCONGESTION
                    } else {
                        errno::IESETBUF2
                    };
                    Fail::Tell(code, e.to_string())
                })?;
                let quota = server_sends(dir).then(|| {
                    down += 1;
                    t.bytes_for_flow(down - 1)
                });
                flows.push(FlowSocket {
                    id,
                    dir,
                    role: if server_sends(dir) {
                        Role::Sender
                    } else {
                        Role::Receiver
                    },
                    stream,
                    quota: quota.flatten(),
                });
            }
            self.start_signal()?;
            Running::Tcp(
                SideRun::start(cfg, flows, on_interval, Box::new(|| {})).map_err(|e| {
                    Fail::Tell(errno::IECREATESTREAM, format!("starting the streams: {e}"))
                })?,
            )
        };
        Ok((run, samples))
    }

    fn start_signal(&mut self) -> Result<(), Fail> {
        self.ctl
            .send(&[State::TestStart.byte(), State::TestRunning.byte()])
            .map_err(quiet("sending TEST_START"))
    }

    /// Runs the test until the client's TEST_END and the engine winds down.
    fn supervise(&mut self, plan: &Plan, run: Running) -> Result<hakaru_model::SideReport, Fail> {
        let limit = (plan.params.time > 0.0).then(|| {
            // plan() bounded both to finite, non-negative values under a day.
            Duration::try_from_secs_f64(plan.params.time + plan.params.omit)
                .unwrap_or(Duration::from_secs(86_400))
                + GRACE
        });
        // Byte and block counts stop at --max-duration.
        let cutoff = self.ctx.cfg.max_duration.map(|m| m + GRACE);
        let started = Instant::now();
        let mut ended = false;
        let mut idle_since: Option<Instant> = None;
        loop {
            if ended && run.is_done() {
                break;
            }
            if self.ctx.shutdown.load(Ordering::Acquire) {
                run.abort();
                let _ = self.ctl.send_state(State::ServerTerminate);
                return Err(Fail::Quiet("the server is shutting down".into()));
            }
            if cutoff.is_some_and(|c| started.elapsed() > c) {
                run.abort();
                return Err(Fail::Tell(
                    errno::IESERVERTESTDURATIONEXPIRED,
                    format!(
                        "the test ran past the server's limit of {:.0} s (--max-duration)",
                        self.ctx.cfg.max_duration.unwrap_or_default().as_secs_f64()
                    ),
                ));
            }
            if limit.is_some_and(|l| started.elapsed() > l) {
                run.abort();
                return Err(Fail::Tell(
                    errno::IESERVERTESTDURATIONEXPIRED,
                    format!(
                        "the client did not end its {} s test within {} s more",
                        plan.params.time,
                        GRACE.as_secs()
                    ),
                ));
            }
            if !ended && run.is_done() {
                // Senders that sent their share (-n, -k) wait for the client's word; streams
                // that failed or stalled end the test.
                if let Some(e) = run.first_error() {
                    run.abort();
                    return Err(Fail::Quiet(e));
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > IDLE_LIMIT {
                    return Err(Fail::Quiet(format!(
                        "no TEST_END within {} s of the last stream's end",
                        IDLE_LIMIT.as_secs()
                    )));
                }
            }
            match self.ctl.poll_state(Duration::from_millis(100)) {
                Ok(None) => {}
                Ok(Some(State::TestEnd)) if !ended => {
                    ended = true;
                    run.peer_stopped();
                }
                Ok(Some(State::ClientTerminate)) => {
                    run.abort();
                    return Err(Fail::Quiet(
                        "the client was interrupted (CLIENT_TERMINATE)".into(),
                    ));
                }
                Ok(Some(other)) => {
                    run.abort();
                    return Err(Fail::Quiet(format!(
                        "unexpected state {other:?} from the client during the test"
                    )));
                }
                Err(e) => {
                    run.abort();
                    return Err(Fail::Quiet(format!("the client went away mid-test ({e})")));
                }
            }
        }
        Ok(run.wait())
    }

    /// EXCHANGE_RESULTS, both results documents, DISPLAY_RESULTS, then IPERF_DONE.
    fn exchange(
        &mut self,
        plan: &Plan,
        report: &hakaru_model::SideReport,
        samples: Samples,
    ) -> Result<String, Fail> {
        self.ctl
            .send_state(State::ExchangeResults)
            .map_err(quiet("sending EXCHANGE_RESULTS"))?;
        let theirs = self
            .ctl
            .recv_results(wire::MAX_RESULTS_JSON, RESULTS_TIMEOUT)
            .map_err(|e| match e {
                Iperf3CtlError::Proto(p) => Fail::Tell(errno::IERECVRESULTS, p.to_string()),
                other => Fail::Quiet(format!("reading the client's results: {other}")),
            })?;
        let samples = samples
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        let local = self
            .ctl
            .stream()
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let mine = answer_results(
            plan,
            report,
            &theirs,
            &samples,
            self.peer,
            local,
            self.ctx.cfg.iperf3_json_output,
        )?;
        self.ctl
            .send_json(&mine.to_json())
            .map_err(quiet("sending the server's results"))?;
        self.ctl
            .send_state(State::DisplayResults)
            .map_err(quiet("sending DISPLAY_RESULTS"))?;
        // The client's last word; 3.21 clients then wait for this end to close.
        match self.ctl.recv_state(DONE_TIMEOUT) {
            Ok(State::IperfDone) | Err(Iperf3CtlError::Closed) => {}
            Ok(other) => {
                tracing::debug!("iperf3 test {}: {other:?} instead of IPERF_DONE", self.id)
            }
            Err(e) => tracing::debug!("iperf3 test {}: no IPERF_DONE ({e})", self.id),
        }
        let received: u64 = report
            .flows
            .iter()
            .filter(|f| f.role == Role::Receiver)
            .map(|f| f.bytes)
            .sum();
        let sent: u64 = report
            .flows
            .iter()
            .filter(|f| f.role == Role::Sender)
            .map(|f| f.bytes)
            .sum();
        Ok(format!(
            "received {received} bytes ({}), sent {sent} bytes ({}) at this end",
            Bytes(received),
            Bytes(sent)
        ))
    }
}

/// What the server makes of a client's results: the client's side as a report (every stream
/// of the plan must be there), and this end's results document with the output the client
/// asked for, as iperf3's text or (`json_output`) `-J` document.
pub(crate) fn answer_results(
    plan: &Plan,
    report: &hakaru_model::SideReport,
    theirs: &wire::Results,
    samples: &[IntervalSample],
    peer: SocketAddr,
    local: String,
    json_output: bool,
) -> Result<wire::Results, Fail> {
    let client_sends = |dir: FlowDir| dir == FlowDir::Up;
    let client = report_from_results(
        End::Client,
        theirs,
        &plan.flows,
        client_sends,
        plan.udp,
        &format!(
            "iperf3 {}",
            plan.params.client_version.as_deref().unwrap_or("")
        ),
    )
    .map_err(|e| Fail::Tell(errno::IESTREAMID, e.to_string()))?;
    let mut mine = results_from_report(report, !plan.udp);
    if plan.params.get_server_output {
        let result = server_run(plan, report, &client, samples, peer, local);
        if json_output {
            mine.server_output_json = Some(crate::iperf3_output::json(&result));
        } else {
            mine.server_output_text = Some(crate::iperf3_output::text(&result));
        }
    }
    Ok(mine)
}

/// The run as a [`hakaru_model::RunResult`] seen from the server (`local` is its address on
/// the control connection), for the server output the client asked for.
fn server_run(
    plan: &Plan,
    report: &hakaru_model::SideReport,
    client: &hakaru_model::SideReport,
    samples: &[IntervalSample],
    peer: SocketAddr,
    local: String,
) -> hakaru_model::RunResult {
    let dirs: BTreeMap<u32, FlowDir> = plan.flows.iter().copied().collect();
    // The server's own samples, seen from the server: it is the local end here.
    let intervals = samples
        .iter()
        .map(|s| {
            let flipped: BTreeMap<u32, FlowDir> =
                dirs.iter().map(|(&id, &d)| (id, flip(d))).collect();
            hakaru_model::merge_interval(Some(s), None, &flipped)
        })
        .collect();
    let mut spec = plan.spec.clone();
    flip_spec(&mut spec);
    let mut mine = report.clone();
    let mut theirs = client.clone();
    for f in mine.flows.iter_mut().chain(theirs.flows.iter_mut()) {
        f.dir = flip(f.dir);
    }
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
        - report.flows.first().map_or(0.0, |f| f.seconds);
    hakaru_model::assemble(hakaru_model::AssembleInputs {
        ipv6: peer.ip().to_canonical().is_ipv6(),
        spec,
        server: peer.to_string(),
        embedded: false,
        local_address: local,
        remote_address: peer.to_string(),
        started_unix,
        intervals,
        local: mine,
        remote: theirs,
        interrupted: false,
        notes: vec![format!("iperf3 test from {peer}")],
    })
}

/// Directions seen from the other end.
fn flip(d: FlowDir) -> FlowDir {
    match d {
        FlowDir::Up => FlowDir::Down,
        FlowDir::Down => FlowDir::Up,
    }
}

fn flip_spec(spec: &mut TestSpec) {
    let flip_dir = |d: Direction| match d {
        Direction::Forward => Direction::Reverse,
        Direction::Reverse => Direction::Forward,
        Direction::Bidir => Direction::Bidir,
    };
    match spec {
        TestSpec::Tcp(t) => t.direction = flip_dir(t.direction),
        TestSpec::Udp(u) => u.direction = flip_dir(u.direction),
        _ => {}
    }
}

fn amount_words(p: &Params) -> String {
    if p.time > 0.0 {
        format!("{} s", p.time)
    } else if p.num > 0 {
        format!("{} bytes", p.num)
    } else {
        format!("{} blocks", p.blockcount)
    }
}

/// Checks the parameters as iperf3 3.18+ does and turns them into a hakaru test spec.
pub(crate) fn plan(p: &Params, limits: &crate::ServerConfig) -> Result<Plan, Fail> {
    let (max_duration, max_rate) = (limits.max_duration, limits.max_rate);
    let tell = |code: i32, why: String| Err(Fail::Tell(code, why));
    if p.authtoken.is_some() {
        return tell(
            errno::IEAUTHTEST,
            "the client sent credentials; hakaru does not support iperf3 authentication".into(),
        );
    }
    let udp = match p.protocol {
        Some(Protocol::Tcp) => false,
        Some(Protocol::Udp) => true,
        Some(Protocol::Sctp) => return tell(errno::IEPROTOCOL, "SCTP is not supported".into()),
        None => return tell(errno::IEPROTOCOL, "the parameters name no protocol".into()),
    };
    if !(1..=128).contains(&p.parallel) {
        return tell(errno::IENUMSTREAMS, format!("-P {} (1 to 128)", p.parallel));
    }
    if p.parallel > limits.max_flows {
        return tell(
            errno::IENUMSTREAMS,
            format!(
                "-P {}: the server allows {} (--max-flows)",
                p.parallel, limits.max_flows
            ),
        );
    }
    // Params::from_json refuses negative and non-finite numbers; checked again here because
    // these become Durations, which panic on them.
    if !(p.time.is_finite() && p.omit.is_finite() && p.time >= 0.0 && p.omit >= 0.0) {
        return tell(
            errno::IEDURATION,
            format!("-t {} -O {}: not a duration", p.time, p.omit),
        );
    }
    if p.time > 86_400.0 {
        return tell(errno::IEDURATION, format!("-t {} (at most 86400)", p.time));
    }
    if p.omit > 600.0 {
        return tell(errno::IEOMIT, format!("-O {} (at most 600)", p.omit));
    }
    if let Some(max) = max_duration {
        if p.time + p.omit > max.as_secs_f64() {
            return tell(
                errno::IEDURATION,
                format!(
                    "-t {} -O {}: the server runs tests of at most {:.0} s (--max-duration)",
                    p.time,
                    p.omit,
                    max.as_secs_f64()
                ),
            );
        }
    }
    if p.window.is_some_and(|w| w > 512 << 20) {
        return tell(errno::IEBUFSIZE, format!("-w {:?}", p.window));
    }
    if p.mss.is_some_and(|m| m > 9216) {
        return tell(errno::IEMSS, format!("-M {:?} (at most 9216)", p.mss));
    }
    if p.tos.is_some_and(|t| t > 255) {
        return tell(errno::IEBADTOS, format!("-S {:?}", p.tos));
    }
    if p.time == 0.0 && p.num == 0 && p.blockcount == 0 {
        return tell(
            errno::IEDURATION,
            "no -t, -n or -k: the test would never end".into(),
        );
    }
    let length = match (udp, p.len) {
        (false, None | Some(0)) => 128 * 1024,
        (false, Some(l)) if l > 1 << 20 => {
            return tell(errno::IEBLOCKSIZE, format!("-l {l} (at most 1048576)"))
        }
        (true, None | Some(0)) => 1460,
        (true, Some(l)) => {
            let min = if p.udp_counters_64bit { 16 } else { 12 };
            if !(min..=65_507).contains(&l) {
                return tell(
                    errno::IEUDPBLOCKSIZE,
                    format!("-l {l} ({min} to 65507 for UDP)"),
                );
            }
            l
        }
        (false, Some(l)) => l,
    };
    if let Some(cc) = &p.congestion {
        let avail = sys::available_congestion();
        if !avail.is_empty() && !avail.iter().any(|a| a == cc) {
            return tell(
                errno::IESETCONGESTION,
                format!(
                    "-C {cc}: not available here (available: {})",
                    avail.join(" ")
                ),
            );
        }
    }
    let direction = if p.bidirectional {
        Direction::Bidir
    } else if p.reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    };
    let amount = if p.time > 0.0 {
        Amount::Time(Dur(
            Duration::try_from_secs_f64(p.time).unwrap_or(Duration::from_secs(86_400))
        ))
    } else if p.num > 0 {
        Amount::Bytes(Bytes(p.num))
    } else {
        Amount::Blocks(p.blockcount)
    };
    let omit = Dur(Duration::try_from_secs_f64(p.omit).unwrap_or_default());
    let window = p.window.map(Bytes);
    let tos = p.tos.map(|t| t as u8);
    let spec = if udp {
        TestSpec::Udp(UdpSpec {
            flows: p.parallel,
            direction,
            amount,
            omit,
            length: Bytes(length),
            rate: match p.bandwidth {
                Some(0) => UdpRate::Unlimited,
                Some(b) => UdpRate::Bits(BitRate(b as f64)),
                None => UdpRate::Bits(BitRate(1_048_576.0)),
            },
            window,
            tos,
            ..UdpSpec::default()
        })
    } else {
        TestSpec::Tcp(TcpSpec {
            flows: p.parallel,
            direction,
            amount,
            omit,
            length: Bytes(length),
            window,
            mss: p.mss,
            congestion: p.congestion.clone(),
            nodelay: p.nodelay,
            tos,
            zerocopy: p.zerocopy,
            ..TcpSpec::default()
        })
    };
    if let TestSpec::Udp(u) = &spec {
        let rate = match u.rate {
            UdpRate::Bits(b) if b.0 > 0.0 => Some(b.0),
            _ => None,
        };
        let server_sends = p.reverse || p.bidirectional;
        if let Err(why) = crate::check_send_rate(max_rate, server_sends, rate, u.flows) {
            return tell(errno::IEUDPBLOCKSIZE, why);
        }
    } else {
        // TCP: -b paces each stream; without it the server sends as fast as it can.
        let server_sends = p.reverse || p.bidirectional;
        let rate = p.bandwidth.filter(|&b| b > 0).map(|b| b as f64);
        if let Err(why) = crate::check_send_rate(max_rate, server_sends, rate, p.parallel) {
            return tell(errno::IETOTALRATE, why);
        }
    }
    let need = crate::budget::server_memory(&spec, sys::online_cpus());
    if let Err(why) = crate::budget::check_test_memory(&limits.budgets, need) {
        return tell(errno::IEBLOCKSIZE, why);
    }
    let flows = spec.flow_plan();
    Ok(Plan {
        params: p.clone(),
        spec,
        udp,
        flows,
    })
}

/// A socket on the server's port connected to a UDP stream's client socket (the reply and
/// the data must come from the port the client connected its socket to).
fn open_udp_stream(ctx: &Ctx, spec: &UdpSpec, to: SocketAddr) -> std::io::Result<UdpSocket> {
    crate::session::open_udp_flow_with(ctx, to, false, |sock, v6| {
        apply_udp_options(sock, spec, v6).map_err(|e| std::io::Error::other(e.to_string()))
    })
}
