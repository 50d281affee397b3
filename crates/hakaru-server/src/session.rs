//! One control session: handshake, one test, results exchange.

use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hakaru_engine::connect::Usage;
use hakaru_engine::connect_server::{ConnectServer, ConnectServerConfig};
use hakaru_engine::control::{silence_limit, ControlConn, ControlError, KEEPALIVE_EVERY};
use hakaru_engine::ping::{Echo, PingFlow, PingSocket};
use hakaru_engine::sockopt::{apply_tcp_options, apply_udp_options};
use hakaru_engine::sys;
use hakaru_engine::tcp::{FlowSocket, SideConfig, SideRun};
use hakaru_engine::udp::{UdpConfig, UdpFlowSocket, UdpRun};
use hakaru_engine::Running;
use hakaru_model::{
    Amount, ConnectSpec, End, FlowDir, LatencyTransport, Role, TcpSpec, TestSpec, UdpSpec,
};
use hakaru_proto::datagram::{token_bytes, FlowHello};
use hakaru_proto::{Decoder, Message, PROTOCOL_VERSION};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::limits::Slot;
use crate::registry::DataConn;
use crate::Ctx;

/// A client sends its test request right after the welcome; this is for slow paths, not for
/// thinking.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const DATA_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a client may hold a set-up test before its go (`held_start`).
const HOLD_TIMEOUT: Duration = Duration::from_secs(120);
const RESULTS_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a test ended early.
#[derive(Debug)]
enum Abort {
    /// Tell the client this, then close.
    Tell(String),
    /// The client is gone or broke the protocol; just log.
    Quiet(String),
}

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

/// Runs a control session to its end. Never panics on peer input; logs how it ended.
pub(crate) fn control(ctx: &Ctx, o: Opening) {
    let Opening {
        stream,
        dec,
        peer,
        protocol,
        software,
        host: client_host,
        nonce: client_nonce,
        slot: handshake,
    } = o;
    let local_ip = stream.local_addr().map(|a| a.ip()).ok();
    let mut conn = ControlConn::with_decoder(stream, dec);
    let host = sys::host_id();
    let same_host = host.is_some() && host == client_host;
    let server_nonce = match &ctx.cfg.psk {
        Some(_) => match sys::auth_nonce() {
            Ok(n) => Some(n),
            Err(_) => {
                tracing::warn!("session with {peer}: no OS randomness for an authentication nonce");
                return;
            }
        },
        None => None,
    };
    let info = || hakaru_proto::ServerInfo {
        software: format!("hakaru {}", env!("CARGO_PKG_VERSION")),
        unix_time: Some(sys::now_unix()),
        host: host.clone(),
        os: Some(std::env::consts::OS.into()),
    };
    // With a key, a stranger learns that this is a hakaru server that wants one, and no more:
    // version, clock, OS and boot id follow the key proof.
    let welcome = hakaru_proto::native::opening(&match &server_nonce {
        Some(nonce) => Message::Welcome {
            protocol: PROTOCOL_VERSION,
            software: "hakaru".into(),
            unix_time: None,
            host: None,
            auth: Some(nonce.clone()),
            os: None,
        },
        None => {
            let i = info();
            Message::Welcome {
                protocol: PROTOCOL_VERSION,
                software: i.software,
                unix_time: i.unix_time,
                host: i.host,
                auth: None,
                os: i.os,
            }
        }
    });
    if protocol != PROTOCOL_VERSION {
        let why = format!(
            "protocol version mismatch: the client ({software}) speaks {protocol}, this server speaks {PROTOCOL_VERSION}"
        );
        tracing::warn!("rejected {peer}: {why}");
        let _ = conn.send_raw(&hakaru_proto::MAGIC);
        let _ = conn.send(&Message::Error { message: why });
        return;
    }
    if conn.send_raw(&welcome).is_err() {
        return;
    }
    if let (Some(psk), Some(sn)) = (&ctx.cfg.psk, &server_nonce) {
        if !authenticate(
            ctx,
            &mut conn,
            psk,
            sn,
            client_nonce.as_deref(),
            peer,
            info(),
        ) {
            ctx.metrics.refused("auth");
            return;
        }
    }
    let (spec, held) = match conn.recv(REQUEST_TIMEOUT) {
        Ok(Message::TestRequest { test, held_start }) => (*test, held_start),
        Ok(other) => {
            let why = format!("expected a test request, got {}", other.name());
            tracing::warn!("session with {peer}: {why}");
            let _ = conn.send(&Message::Error { message: why });
            return;
        }
        Err(e) => {
            tracing::warn!("session with {peer}: {e}");
            if matches!(e, ControlError::Proto(_)) {
                let _ = conn.send(&Message::Error {
                    message: e.to_string(),
                });
            }
            return;
        }
    };
    // The test slot frees itself however we leave; the handshake slot goes once it is taken.
    let paths = spec.flow_plan().len();
    // The test slot and the memory reservation free themselves however we leave.
    let _test_slot = match admit(ctx, &spec)
        .and_then(|memory| Ok((ctx.admission.test(peer.ip(), paths)?, memory)))
    {
        Ok(s) => s,
        Err(reason) => {
            ctx.metrics.refused("limits");
            tracing::warn!("refused test from {peer}: {reason}");
            let _ = conn.send(&Message::Refused { reason });
            return;
        }
    };
    drop(handshake);
    // An admitted client may send its final report, which can be large.
    conn.set_max_frame(hakaru_proto::native::MAX_FRAME);
    let id = ctx.next_test.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    let Some(token) = new_token().filter(|t| ctx.registry.insert(t.clone(), peer.ip(), paths, tx))
    else {
        let reason = "the server cannot make a test token: the OS gave it no randomness (getrandom failed); it runs no tests until it can".to_string();
        tracing::error!("refused test from {peer}: {reason}");
        let _ = conn.send(&Message::Refused { reason });
        return;
    };
    let started = Instant::now();
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
            spec.flows(),
            match spec.direction() {
                hakaru_model::Direction::Forward => "client -> server",
                hakaru_model::Direction::Reverse => "server -> client",
                hakaru_model::Direction::Bidir => "both ways",
            },
            describe_amount(&spec)
        ),
    }
    let test = Admitted {
        id,
        token: &token,
        rx: &rx,
        held,
        same_host,
    };
    ctx.metrics.test_started("hakaru", spec.name());
    let outcome = run_test(ctx, &mut conn, &spec, &test, local_ip);
    ctx.registry.remove(&token);
    ctx.metrics
        .test_finished("hakaru", spec.name(), outcome.is_ok());
    match outcome {
        Ok(summary) => tracing::info!(
            "test {id} from {peer} finished after {:.1} s: {summary}",
            started.elapsed().as_secs_f64()
        ),
        Err(Abort::Tell(why)) => {
            tracing::warn!("test {id} from {peer} aborted: {why}");
            let _ = conn.send(&Message::Error { message: why });
        }
        Err(Abort::Quiet(why)) => tracing::warn!("test {id} from {peer} aborted: {why}"),
    }
}

fn describe_amount(spec: &TestSpec) -> String {
    match spec.amount() {
        Amount::Time(t) => format!("{t}"),
        Amount::Bytes(b) => format!("{} bytes", b.0),
        Amount::Blocks(k) => format!("{k} blocks of {} bytes", spec.length().0),
    }
}

/// How long a client that fails authentication waits for the verdict, whatever went wrong:
/// guessing keys costs a second a try per connection, and the delay says nothing.
const AUTH_FAIL_DELAY: Duration = Duration::from_secs(1);

/// Checks the client's key proof and sends the server's. False (after telling the client
/// and logging one line) when the client does not hold the key.
fn authenticate(
    ctx: &Ctx,
    conn: &mut ControlConn,
    psk: &hakaru_proto::auth::Psk,
    server_nonce: &str,
    client_nonce: Option<&str>,
    peer: SocketAddr,
    mut info: hakaru_proto::ServerInfo,
) -> bool {
    let why = match (client_nonce, conn.recv(REQUEST_TIMEOUT)) {
        (Some(cn), Ok(Message::Auth { proof }))
            if hakaru_proto::auth::is_nonce(cn) && psk.verify_client(server_nonce, cn, &proof) =>
        {
            let proof = psk.server_proof(cn, server_nonce);
            // The clock as the answer leaves: the client times the exchange around it.
            info.unix_time = Some(sys::now_unix());
            return conn
                .send(&Message::AuthOk {
                    proof,
                    server: Some(info),
                })
                .is_ok();
        }
        (_, Ok(Message::Auth { .. })) => "wrong key".to_string(),
        (_, Ok(Message::TestRequest { .. })) => {
            "no key (the server requires --psk-file or HAKARU_PSK)".to_string()
        }
        (_, Ok(other)) => format!("expected auth, got {}", other.name()),
        (_, Err(e)) => {
            ctx.log
                .warn("auth", || format!("authentication of {peer} failed: {e}"));
            return false;
        }
    };
    ctx.log
        .warn("auth", || format!("authentication of {peer} failed: {why}"));
    std::thread::sleep(AUTH_FAIL_DELAY);
    let _ = conn.send(&Message::Error {
        message: "authentication failed: the server requires a pre-shared key, and the client did not prove it holds it (--psk-file or HAKARU_PSK)".into(),
    });
    false
}

/// How long a time-based test asks to run, warm-up included; `None` for byte and block counts
/// (the server stops those at --max-duration instead).
fn asked_duration(spec: &TestSpec) -> Option<Duration> {
    match spec.amount() {
        Amount::Time(t) => Some(t.0.saturating_add(spec.omit().0)),
        Amount::Bytes(_) | Amount::Blocks(_) => None,
    }
}

/// Checks what the spec's own validation cannot: this host's limits, budgets and
/// capabilities. The test's memory is reserved when it fits.
fn admit(ctx: &Ctx, spec: &TestSpec) -> Result<crate::budget::Reservation, String> {
    spec.validate().map_err(|e| e.0)?;
    if let TestSpec::Raw(_) = spec {
        return Err(
            "sink and source runs are local to one hakaru; a server does not run them".into(),
        );
    }
    if ctx.shutdown.load(Ordering::Acquire) {
        return Err("the server is shutting down".into());
    }
    if spec.flows() > ctx.cfg.max_flows {
        return Err(format!(
            "the test asks for {} flows per direction; the server allows {} (--max-flows)",
            spec.flows(),
            ctx.cfg.max_flows
        ));
    }
    if let Some((rate, flows)) = crate::budget::server_send_rate(spec) {
        crate::check_send_rate(ctx.cfg.max_rate, true, rate, flows)?;
    }
    if let Some(max) = ctx.cfg.max_duration {
        if let Some(asked) = asked_duration(spec) {
            if asked > max {
                return Err(format!(
                    "the test would run {:.0} s (warm-up included); the server runs tests of at most {:.0} s (--max-duration)",
                    asked.as_secs_f64(),
                    max.as_secs_f64()
                ));
            }
        }
    }
    if let Some(cc) = match spec {
        TestSpec::Tcp(t) => t.congestion.as_ref(),
        _ => None,
    } {
        let avail = sys::available_congestion();
        if !avail.is_empty() && !avail.iter().any(|a| a == cc) {
            return Err(format!(
                "-C/--congestion {cc}: not available on the server (available: {})",
                avail.join(" ")
            ));
        }
    }
    let cpus = sys::online_cpus();
    if let Some(&bad) = spec.server_affinity().iter().find(|&&c| c >= cpus) {
        return Err(format!(
            "--server-affinity: CPU {bad} does not exist on the server (it has {cpus})"
        ));
    }
    crate::budget::check_busy_poll(&ctx.cfg.budgets, spec, cpus)?;
    ctx.memory
        .reserve(&ctx.cfg.budgets, crate::budget::server_memory(spec, cpus))
}

/// A test's token: 16 bytes from the OS. `None` without OS randomness: a token guessed from
/// the clock would let anyone who can guess the time join a test, so the server refuses tests.
fn new_token() -> Option<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).ok()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A test the server took on: its number, its token, where its data paths arrive, and
/// whether the client holds the start.
struct Admitted<'a> {
    id: u64,
    token: &'a str,
    rx: &'a mpsc::Receiver<DataConn>,
    held: bool,
    /// The client runs on this kernel (its hello carried our boot id).
    same_host: bool,
}

/// With a held start, waits for the client's `flows_ready` (its go) after the data paths are
/// set up. The wait is long (a synchronised run waits for its slowest host) but bounded, and
/// a client that dies or errs ends it at once.
fn wait_go(ctx: &Ctx, conn: &mut ControlConn) -> Result<(), Abort> {
    let deadline = Instant::now() + HOLD_TIMEOUT;
    loop {
        if ctx.shutdown.load(Ordering::Acquire) {
            return Err(Abort::Tell("the server is shutting down".into()));
        }
        if Instant::now() > deadline {
            return Err(Abort::Tell(format!(
                "the client held the start for more than {} s",
                HOLD_TIMEOUT.as_secs()
            )));
        }
        match conn.poll(Duration::from_millis(100)) {
            Ok(Some(Message::FlowsReady)) => return Ok(()),
            Ok(Some(Message::Keepalive)) | Ok(None) => {}
            Ok(Some(Message::Error { message })) => {
                return Err(Abort::Quiet(format!("client: {message}")))
            }
            Ok(Some(other)) => {
                return Err(Abort::Tell(format!(
                    "unexpected {} message while the start was held",
                    other.name()
                )))
            }
            Err(e) => return Err(Abort::Quiet(format!("while the start was held: {e}"))),
        }
    }
}

fn run_test(
    ctx: &Ctx,
    conn: &mut ControlConn,
    spec: &TestSpec,
    test: &Admitted<'_>,
    local_ip: Option<IpAddr>,
) -> Result<String, Abort> {
    let (id, token) = (test.id, test.token);
    conn.send(&Message::Accepted {
        test_id: id,
        token: token.to_string(),
    })
    .map_err(|e| Abort::Quiet(e.to_string()))?;
    let iface = local_ip.and_then(sys::interface_for_addr);
    let strays_before = ctx.strays.load(Ordering::Acquire);
    let writer = conn
        .stream()
        .try_clone()
        .map_err(|e| Abort::Tell(format!("cloning the control socket: {e}")))?;
    let writer = Arc::new(Mutex::new(ControlConn::new(writer)));
    let w = Arc::clone(&writer);
    let on_interval = Box::new(move |sample| {
        if let Ok(mut w) = w.lock() {
            let _ = w.send(&Message::Interval { sample });
        }
    });
    let run = match spec {
        TestSpec::Connect(c) => {
            if test.held {
                wait_go(ctx, conn)?;
            }
            return run_connect(ctx, conn, c, local_ip, iface);
        }
        TestSpec::Raw(_) | TestSpec::Http(_) => {
            return Err(Abort::Tell(
                "sink, source and http runs are local to one hakaru; a server does not run them"
                    .into(),
            ))
        }
        TestSpec::Tcp(tcp) => {
            let flows = collect_tcp(ctx, conn, tcp, test)?;
            if test.held {
                wait_go(ctx, conn)?;
            }
            // Counters first: nothing the client sends after `start` escapes them.
            let cfg = SideConfig::for_spec(End::Server, spec, tcp.server_affinity.clone(), iface);
            conn.send(&Message::Start)
                .map_err(|e| Abort::Quiet(e.to_string()))?;
            Running::Tcp(
                SideRun::start(cfg, flows, on_interval, Box::new(|| {}))
                    .map_err(|e| Abort::Tell(format!("on the server: {e}")))?,
            )
        }
        TestSpec::Udp(udp) => {
            let flows = collect_udp(ctx, conn, udp, test)?;
            let mut cfg =
                SideConfig::for_spec(End::Server, spec, udp.server_affinity.clone(), iface);
            cfg.shares_host = test.same_host;
            let ucfg = UdpConfig::from_spec(udp, hakaru_model::FlowDir::Down);
            conn.send(&Message::Start)
                .map_err(|e| Abort::Quiet(e.to_string()))?;
            let w = Arc::clone(&writer);
            Running::Udp(
                UdpRun::start(
                    cfg,
                    ucfg,
                    flows,
                    on_interval,
                    Box::new(|| {}),
                    Box::new(move |sent| {
                        if let Ok(mut w) = w.lock() {
                            let _ = w.send(&Message::SendDone { sent });
                        }
                    }),
                )
                .map_err(|e| Abort::Tell(format!("on the server: {e}")))?,
            )
        }
        TestSpec::Latency(lat) => {
            let flows: Vec<PingFlow> = match lat.transport {
                LatencyTransport::Tcp => collect_tcp(ctx, conn, &lat.as_tcp(), test)?
                    .into_iter()
                    .map(|f| PingFlow {
                        id: f.id,
                        socket: PingSocket::Tcp(f.stream),
                    })
                    .collect(),
                LatencyTransport::Udp => collect_udp(ctx, conn, &lat.as_udp(), test)?
                    .into_iter()
                    .map(|f| PingFlow {
                        id: f.id,
                        socket: PingSocket::Udp(f.socket),
                    })
                    .collect(),
            };
            if test.held && lat.transport == LatencyTransport::Tcp {
                wait_go(ctx, conn)?;
            }
            let cfg = SideConfig::for_spec(End::Server, spec, lat.server_affinity.clone(), iface);
            conn.send(&Message::Start)
                .map_err(|e| Abort::Quiet(e.to_string()))?;
            Running::Echo(Box::new(
                Echo::start(cfg, flows, lat.spin, lat.busy_poll)
                    .map_err(|e| Abort::Tell(format!("on the server: {e}")))?,
            ))
        }
    };
    let mut last_heard = Instant::now();
    let mut last_sent = Instant::now();
    let running_since = Instant::now();
    // The client's keepalives come every couple of seconds; its --stall-timeout says how long
    // a dead path may go unnoticed.
    let silence = silence_limit(spec.stall_timeout().0);
    // A byte or block count that has not finished by then is cut off; time-based tests were
    // checked at admission and get a grace for the end of test exchange.
    let cutoff = ctx.cfg.max_duration.map(|m| m + Duration::from_secs(5));
    while !run.is_done() {
        if ctx.shutdown.load(Ordering::Acquire) {
            run.abort();
            return Err(Abort::Tell("the server is shutting down".into()));
        }
        if cutoff.is_some_and(|c| running_since.elapsed() > c) {
            run.abort();
            return Err(Abort::Tell(format!(
                "the test ran past the server's limit of {:.0} s (--max-duration)",
                ctx.cfg.max_duration.unwrap_or_default().as_secs_f64()
            )));
        }
        match conn.poll(Duration::from_millis(100)) {
            Ok(Some(Message::Keepalive)) => last_heard = Instant::now(),
            Ok(Some(Message::Stop)) => {
                last_heard = Instant::now();
                run.stop_sending();
            }
            Ok(Some(Message::SendDone { sent })) => {
                last_heard = Instant::now();
                run.peer_done(&sent);
            }
            Ok(Some(Message::Error { message })) => {
                run.abort();
                return Err(Abort::Quiet(format!("the client reported: {message}")));
            }
            Ok(Some(other)) => {
                run.abort();
                return Err(Abort::Tell(format!(
                    "unexpected {} message during the test",
                    other.name()
                )));
            }
            Ok(None) => {}
            Err(ControlError::Closed) => {
                run.abort();
                return Err(Abort::Quiet(
                    "the client closed the control connection mid-test".into(),
                ));
            }
            Err(e) => {
                run.abort();
                return Err(Abort::Tell(e.to_string()));
            }
        }
        if last_heard.elapsed() > silence {
            run.abort();
            return Err(Abort::Tell(format!(
                "the client sent nothing for {:.0} s (--stall-timeout): the path or the client is down",
                silence.as_secs_f64()
            )));
        }
        if last_sent.elapsed() > KEEPALIVE_EVERY {
            if let Ok(mut w) = writer.lock() {
                let _ = w.send(&Message::Keepalive);
            }
            last_sent = Instant::now();
        }
    }
    let echoed = run.echoed();
    let mut report = run.wait();
    if spec.udp().is_some() {
        report.stray_datagrams = Some(
            ctx.strays
                .load(Ordering::Acquire)
                .saturating_sub(strays_before),
        );
    }
    for f in &report.flows {
        let dir = match f.role {
            hakaru_model::Role::Receiver => "received",
            hakaru_model::Role::Sender => "sent",
        };
        ctx.metrics
            .bytes("hakaru", spec.name(), dir, f.bytes + f.omitted_bytes);
    }
    let moved: u64 = report.flows.iter().map(|f| f.bytes).sum();
    let first_error = report.flows.iter().find_map(|f| f.error.clone());
    let seconds = report.flows.first().map_or(0.0, |f| f.seconds);
    {
        let mut w = writer
            .lock()
            .map_err(|_| Abort::Quiet("control writer poisoned".into()))?;
        w.send(&Message::Finished {
            report: Box::new(report),
        })
        .map_err(|e| Abort::Quiet(format!("sending results: {e}")))?;
    }
    // The client answers with its own report; wait for it briefly, for the log.
    let deadline = Instant::now() + RESULTS_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match conn.poll(left) {
            Ok(Some(Message::Finished { .. })) | Ok(None) | Err(_) => break,
            Ok(Some(_)) if left.is_zero() => break,
            Ok(Some(_)) => {}
        }
    }
    if let Some(n) = echoed {
        // A latency test moves messages, not a byte stream: its log line counts them.
        return Ok(format!("{n} echo replies sent (one per receive)"));
    }
    let rate = hakaru_model::BitRate::from_bytes(moved, seconds);
    match first_error {
        Some(e) => Ok(format!(
            "{} moved at this end ({rate}); {e}",
            hakaru_model::Bytes(moved)
        )),
        None => Ok(format!(
            "{} moved at this end ({rate})",
            hakaru_model::Bytes(moved)
        )),
    }
}

/// A connection-rate test: the test's own listener and accept workers (the main port's
/// dispatcher spends a thread per connection, far too slow), announced with `connect_port`.
/// The client counts the connections and ends the test by sending its report; the server then
/// stops its workers and answers with its own, carrying CPU and its accept counts.
fn run_connect(
    ctx: &Ctx,
    conn: &mut ControlConn,
    spec: &ConnectSpec,
    local_ip: Option<IpAddr>,
    iface: Option<String>,
) -> Result<String, Abort> {
    let ip = local_ip.ok_or_else(|| {
        Abort::Tell("on the server: the control connection has no local address".into())
    })?;
    let peer = conn
        .stream()
        .peer_addr()
        .map_err(|e| Abort::Quiet(format!("control connection: {e}")))?
        .ip();
    let usage = Usage::take(iface);
    let server = ConnectServer::start(ConnectServerConfig {
        ip,
        peer,
        request: spec.request.0 as usize,
        response: spec.response.0 as usize,
        affinity: spec.server_affinity.clone(),
        connectors: spec.connectors as usize,
        // Generous: the client's own limits apply to each step of a connection.
        timeout: spec.connect_timeout.0 * 2 + Duration::from_secs(1),
        max_open: spec.connectors as usize * 4 + 256,
    })
    .map_err(|e| {
        Abort::Tell(format!(
            "on the server: opening the connect listener on {ip}: {e}"
        ))
    })?;
    conn.send(&Message::ConnectPort {
        port: server.port(),
    })
    .map_err(|e| Abort::Quiet(e.to_string()))?;
    // However this loop ends, dropping `server` stops its workers and closes every socket.
    // A connection started just before the end may take a connect, a send and a receive timeout.
    let limit = spec.duration.0
        + spec.connect_timeout.0 * 3
        + RESULTS_TIMEOUT
        + silence_limit(spec.connect_timeout.0);
    let started = Instant::now();
    let mut last_heard = Instant::now();
    let mut last_sent = Instant::now();
    let silence = silence_limit(spec.connect_timeout.0);
    loop {
        if ctx.shutdown.load(Ordering::Acquire) {
            return Err(Abort::Tell("the server is shutting down".into()));
        }
        match conn.poll(Duration::from_millis(100)) {
            Ok(Some(Message::Keepalive | Message::Stop)) => last_heard = Instant::now(),
            Ok(Some(Message::Finished { .. })) => break,
            Ok(Some(Message::Error { message })) => {
                return Err(Abort::Quiet(format!("the client reported: {message}")))
            }
            Ok(Some(other)) => {
                return Err(Abort::Tell(format!(
                    "unexpected {} message during the test",
                    other.name()
                )))
            }
            Ok(None) => {}
            Err(ControlError::Closed) => {
                return Err(Abort::Quiet(
                    "the client closed the control connection mid-test".into(),
                ))
            }
            Err(e) => return Err(Abort::Tell(e.to_string())),
        }
        if last_heard.elapsed() > silence {
            return Err(Abort::Tell(format!(
                "the client sent nothing for {:.0} s (--connect-timeout): the path or the client is down",
                silence.as_secs_f64()
            )));
        }
        if started.elapsed() > limit {
            return Err(Abort::Tell(format!(
                "the client sent no results within {} s of the end of the test",
                (limit - spec.duration.0).as_secs()
            )));
        }
        if last_sent.elapsed() > KEEPALIVE_EVERY {
            conn.send(&Message::Keepalive)
                .map_err(|e| Abort::Quiet(e.to_string()))?;
            last_sent = Instant::now();
        }
    }
    let counts = server.stop();
    let report = usage.report(End::Server, Some(counts));
    conn.send(&Message::Finished {
        report: Box::new(report),
    })
    .map_err(|e| Abort::Quiet(format!("sending results: {e}")))?;
    Ok(format!(
        "{} connections served, close {} ({} accepted, {} dropped, {} from other addresses)",
        counts.served,
        spec.close_name(),
        counts.accepted,
        counts.dropped,
        counts.foreign
    ))
}

/// Notices a client that gives up while the server waits for its data paths.
fn check_client(conn: &mut ControlConn) -> Result<Option<Message>, Abort> {
    match conn.poll(Duration::ZERO) {
        Err(e) => Err(Abort::Quiet(format!("while waiting for data paths: {e}"))),
        Ok(Some(Message::Error { message })) => Err(Abort::Quiet(format!("client: {message}"))),
        Ok(m) => Ok(m),
    }
}

/// Waits for every TCP data connection of the test.
fn collect_tcp(
    ctx: &Ctx,
    conn: &mut ControlConn,
    spec: &TcpSpec,
    test: &Admitted<'_>,
) -> Result<Vec<FlowSocket>, Abort> {
    let (id, rx) = (test.id, test.rx);
    let plan = spec.flow_plan();
    let mut socks: Vec<Option<TcpStream>> = (0..plan.len()).map(|_| None).collect();
    let deadline = Instant::now() + DATA_TIMEOUT;
    let mut arrived = 0;
    while arrived < plan.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || ctx.shutdown.load(Ordering::Acquire) {
            return Err(Abort::Tell(format!(
                "only {arrived} of {} data connections arrived within {} s",
                plan.len(),
                DATA_TIMEOUT.as_secs()
            )));
        }
        match rx.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok(DataConn::Tcp(flow, stream)) => match socks.get_mut(flow as usize) {
                Some(slot @ None) => {
                    *slot = Some(stream);
                    arrived += 1;
                }
                _ => tracing::warn!(
                    "test {id}: ignored a data connection for unknown or repeated flow {flow}"
                ),
            },
            Ok(DataConn::Udp(flow, from)) => {
                tracing::warn!(
                    "test {id}: ignored a UDP hello for flow {flow} from {from} in a TCP test"
                )
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                check_client(conn)?;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Abort::Tell("internal error: registry closed".into()))
            }
        }
    }
    // Every path is here: the token admits nothing more.
    ctx.registry.remove(test.token);
    let mut flows = Vec::with_capacity(plan.len());
    let mut down_index = 0u32;
    for ((fid, dir), s) in plan.iter().zip(socks) {
        let Some(stream) = s else {
            return Err(Abort::Tell(
                "internal error: missing data connection".into(),
            ));
        };
        let ipv6 = stream.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
        apply_tcp_options(&SockRef::from(&stream), spec, ipv6, false)
            .map_err(|e| Abort::Tell(format!("on the server: {e}")))?;
        let (role, quota) = match dir {
            FlowDir::Up => (Role::Receiver, None),
            FlowDir::Down => {
                down_index += 1;
                (Role::Sender, spec.bytes_for_flow(down_index - 1))
            }
        };
        flows.push(FlowSocket {
            id: *fid,
            dir: *dir,
            role,
            stream,
            quota,
        });
    }
    Ok(flows)
}

/// Opens the server's socket for one UDP flow, connected to the client's socket for the flow:
/// on the server's UDP port, or with `own_port` on a port of its own.
fn open_udp_flow(
    ctx: &Ctx,
    spec: &UdpSpec,
    to: SocketAddr,
    own_port: bool,
) -> std::io::Result<UdpSocket> {
    open_udp_flow_with(ctx, to, own_port, |sock, v6| {
        apply_udp_options(sock, spec, v6).map_err(|e| std::io::Error::other(e.to_string()))
    })
}

/// Opens a socket connected to `to` on the server's UDP port (sharing it) or, with
/// `own_port`, on a free port of the same address, with socket options applied by `options`
/// (given the socket and whether the path is IPv6) before it is bound.
pub(crate) fn open_udp_flow_with(
    ctx: &Ctx,
    to: SocketAddr,
    own_port: bool,
    options: impl FnOnce(&Socket, bool) -> std::io::Result<()>,
) -> std::io::Result<UdpSocket> {
    let local = if own_port {
        SocketAddr::new(ctx.udp_addr.ip(), 0)
    } else {
        ctx.udp_addr
    };
    let sock = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
    if !own_port {
        sock.set_reuse_address(true)?;
    }
    if local.is_ipv6() {
        let _ = sock.set_only_v6(false);
    }
    options(&sock, to.is_ipv6() && to.ip().to_canonical().is_ipv6())?;
    sock.bind(&local.into())?;
    let to = match (local, to) {
        (SocketAddr::V6(_), SocketAddr::V4(v4)) => {
            SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port())
        }
        _ => to,
    };
    sock.connect(&to.into())?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// Waits for every UDP flow's hello, answers each from the flow's own socket (or, for a flow
/// on a server port of its own, from the server's UDP port, naming that port), then waits for
/// the client to confirm it heard every answer (re-answering hellos that cross a lost ack).
fn collect_udp(
    ctx: &Ctx,
    conn: &mut ControlConn,
    spec: &UdpSpec,
    test: &Admitted<'_>,
) -> Result<Vec<UdpFlowSocket>, Abort> {
    let (id, token, rx, held) = (test.id, test.token, test.rx, test.held);
    let plan = spec.flow_plan();
    let token_b =
        token_bytes(token).ok_or_else(|| Abort::Tell("internal error: bad token".into()))?;
    let mut socks: Vec<Option<UdpSocket>> = (0..plan.len()).map(|_| None).collect();
    let mut deadline = Instant::now() + DATA_TIMEOUT;
    let mut held_long = false;
    let mut arrived = 0;
    let own_ports = spec
        .server_ports
        .per_flow_on(!sys::UDP_SHARED_PORT_DEMUX)
        .map_err(|e| Abort::Tell(e.to_string()))?;
    // A flow sharing the port answers from its own socket (on that port); a flow on a port of
    // its own answers from the server's port, where the client's socket is still connected.
    let ack = |flow: u32, s: &UdpSocket, to: SocketAddr| {
        let f = flow as u16;
        let sent = if own_ports {
            let port = s.local_addr().map(|a| a.port()).unwrap_or(0);
            let moved = FlowHello::Moved {
                flow: f,
                token: token_b,
                port,
            };
            ctx.udp_port.send_to(&moved.encode(), to)
        } else {
            s.send(
                &FlowHello::Ack {
                    flow: f,
                    token: token_b,
                }
                .encode(),
            )
        };
        if let Err(e) = sent {
            tracing::debug!("test {id}: answering the hello of UDP flow {flow}: {e}");
        }
    };
    let mut ready = false;
    let mut buf = [0u8; 64];
    let mut last_drain = Instant::now();
    while arrived < plan.len() || !ready {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() && held_long {
            return Err(Abort::Tell(format!(
                "the client held the start for more than {} s",
                HOLD_TIMEOUT.as_secs()
            )));
        }
        if left.is_zero() || ctx.shutdown.load(Ordering::Acquire) {
            return Err(Abort::Tell(format!(
                "only {arrived} of {} UDP flows said hello within {} s (is UDP to port {} blocked?)",
                plan.len(),
                DATA_TIMEOUT.as_secs(),
                ctx.udp_addr.port()
            )));
        }
        // Once every flow said hello, wait on the control connection instead, so the client's
        // flows_ready (its go, with a held start) starts the test without a polling delay.
        let all_here = arrived == plan.len();
        let mut msg = None;
        if all_here {
            if held && !held_long {
                held_long = true;
                deadline = Instant::now() + HOLD_TIMEOUT;
            }
            msg = match conn.poll(left.min(Duration::from_millis(20))) {
                Err(e) => return Err(Abort::Quiet(format!("while waiting for data paths: {e}"))),
                Ok(Some(Message::Error { message })) => {
                    return Err(Abort::Quiet(format!("client: {message}")))
                }
                Ok(m) => m,
            };
        }
        let mut next = if all_here {
            rx.try_recv().ok()
        } else {
            match rx.recv_timeout(left.min(Duration::from_millis(20))) {
                Ok(c) => Some(c),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Abort::Tell("internal error: registry closed".into()))
                }
            }
        };
        // Take every hello already queued before the (per-socket) drain below.
        while let Some(c) = next.take() {
            match c {
                DataConn::Udp(flow, from) => match socks.get_mut(flow as usize) {
                    Some(slot @ None) => {
                        let s = open_udp_flow(ctx, spec, from, own_ports).map_err(|e| {
                            Abort::Tell(format!("on the server: opening UDP flow {flow}: {e}"))
                        })?;
                        ack(flow, &s, from);
                        *slot = Some(s);
                        arrived += 1;
                    }
                    // A repeated hello that reached the port before the flow's socket existed,
                    // or any repeated hello of a flow on a port of its own.
                    Some(Some(s)) => ack(flow, s, from),
                    None => {
                        tracing::warn!("test {id}: ignored a UDP hello for unknown flow {flow}")
                    }
                },
                DataConn::Tcp(flow, _) => tracing::warn!(
                    "test {id}: closed a TCP data connection for flow {flow} in a UDP test"
                ),
            }
            next = rx.try_recv().ok();
        }
        // Hellos repeated after the flow's socket was connected land on that socket; the
        // client repeats every 100 ms, so looking every 50 ms is enough.
        if !own_ports && last_drain.elapsed() >= Duration::from_millis(50) {
            last_drain = Instant::now();
            for (flow, s) in socks.iter().enumerate() {
                let Some(s) = s else { continue };
                while let Ok(n) = s.recv(&mut buf) {
                    if matches!(FlowHello::decode(&buf[..n]), Some(FlowHello::Hello { .. })) {
                        if let Ok(to) = s.peer_addr() {
                            ack(flow as u32, s, to);
                        }
                    }
                }
            }
        }
        if !all_here {
            msg = check_client(conn)?;
        }
        match msg {
            Some(Message::Keepalive) => {}
            Some(Message::FlowsReady) if arrived == plan.len() => ready = true,
            Some(Message::FlowsReady) => {
                return Err(Abort::Tell(format!(
                "the client reported every UDP flow ready, but only {arrived} of {} hellos arrived",
                plan.len()
            )))
            }
            Some(other) => {
                return Err(Abort::Tell(format!(
                    "unexpected {} message while UDP flows open",
                    other.name()
                )))
            }
            None => {}
        }
    }
    // Every flow said hello and the client heard every answer: the token admits nothing more.
    ctx.registry.remove(token);
    let mut flows = Vec::with_capacity(plan.len());
    let mut down_index = 0u32;
    for ((fid, dir), s) in plan.iter().zip(socks) {
        let Some(socket) = s else {
            return Err(Abort::Tell("internal error: missing UDP flow".into()));
        };
        let (role, quota) = match dir {
            FlowDir::Up => (Role::Receiver, None),
            FlowDir::Down => {
                down_index += 1;
                (Role::Sender, spec.datagrams_for_flow(down_index - 1))
            }
        };
        flows.push(UdpFlowSocket {
            id: *fid,
            dir: *dir,
            role,
            socket,
            quota,
        });
    }
    Ok(flows)
}
