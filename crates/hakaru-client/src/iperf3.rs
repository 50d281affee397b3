//! `--iperf3`: a TCP or UDP test against a stock iperf3 server (`iperf3 -s`, 3.12 and later).
//!
//! The control dialogue is iperf3's (cookie, parameters, stream creation, TEST_START, TEST_END,
//! results exchange); the data moves through the same engine as a native test, with iperf3's
//! UDP framing. iperf3 does not stream the server's interval figures, so live intervals show
//! this end's numbers only; the totals take the receiver's figures from the results exchange,
//! as iperf3's own client does.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::iperf3_control::{Iperf3Ctl, Iperf3CtlError};
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
    State,
};

use crate::{connect_one, ClientError, ClientOptions};
use hakaru_model::{assemble, merge_interval};

const STEP_TIMEOUT: Duration = Duration::from_secs(30);
const UDP_REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the client waits for its sent data to be acknowledged before TEST_END.
const LAND_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the server's advertised windows must stay unchanged: it has read what it will.
const LAND_STEADY: Duration = Duration::from_millis(100);
/// After TEST_END, how long TCP receivers wait for the server to close before taking what
/// has arrived.
const DRAIN_AFTER: Duration = Duration::from_secs(2);

fn ctl_err(addr: &str) -> impl Fn(Iperf3CtlError) -> ClientError + '_ {
    move |e| match e {
        Iperf3CtlError::Closed => ClientError::ServerGone {
            addr: addr.to_string(),
            what: "closed the control connection (is it an iperf3 server?)".into(),
        },
        other => ClientError::ServerGone {
            addr: addr.to_string(),
            what: other.to_string(),
        },
    }
}

/// What a state other than the expected one means, as an error.
fn unexpected(ctl: &mut Iperf3Ctl, st: State, waiting_for: &str, addr: &str) -> ClientError {
    match st {
        State::AccessDenied => ClientError::Refused(format!(
            "the iperf3 server at {addr} is busy running a test; try again later"
        )),
        State::ServerError => {
            let words = ctl.recv_exact(4, Duration::from_secs(2)).ok();
            let code = words
                .map(|w| i32::from_be_bytes([w[0], w[1], w[2], w[3]]))
                .unwrap_or(0);
            // errno follows in most versions; it adds nothing the code does not say.
            let _ = ctl.recv_exact(4, Duration::from_millis(200));
            ClientError::Server(format!("iperf3 server error: {}", error_text(code)))
        }
        State::ServerTerminate => ClientError::ServerGone {
            addr: addr.to_string(),
            what: "terminated the test (SERVER_TERMINATE)".into(),
        },
        other => ClientError::Server(format!(
            "iperf3 server sent state {other:?} while {waiting_for}"
        )),
    }
}

fn expect(
    ctl: &mut Iperf3Ctl,
    want: State,
    waiting_for: &str,
    addr: &str,
) -> Result<(), ClientError> {
    let st = ctl.recv_state(STEP_TIMEOUT).map_err(ctl_err(addr))?;
    if st == want {
        Ok(())
    } else {
        Err(unexpected(ctl, st, waiting_for, addr))
    }
}

/// TEST_START, then TEST_RUNNING: data may flow.
fn wait_running(ctl: &mut Iperf3Ctl, addr: &str) -> Result<(), ClientError> {
    expect(ctl, State::TestStart, "waiting for TEST_START", addr)?;
    expect(ctl, State::TestRunning, "waiting for TEST_RUNNING", addr)
}

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

/// Runs `opts.spec` against a stock iperf3 server.
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
    let mut ctl = Iperf3Ctl::new(stream, &[]);
    let mut seed = [0u8; 36];
    seed.copy_from_slice(&Payload::Random.fill(36));
    let cookie = wire::make_cookie(&seed);
    ctl.send(&cookie).map_err(ctl_err(&addr))?;
    expect(
        &mut ctl,
        State::ParamExchange,
        "waiting for PARAM_EXCHANGE",
        &addr,
    )?;
    ctl.send_json(&params.to_json()).map_err(ctl_err(&addr))?;
    expect(
        &mut ctl,
        State::CreateStreams,
        "waiting for CREATE_STREAMS",
        &addr,
    )?;
    let plan = spec.flow_plan();
    let udp = matches!(spec, TestSpec::Udp(_));
    let role = |dir: FlowDir| match dir {
        FlowDir::Up => Role::Sender,
        FlowDir::Down => Role::Receiver,
    };
    let iface = local_ip.and_then(sys::interface_for_addr);
    let mut cfg = SideConfig::for_spec(End::Client, &spec, opts.affinity.clone(), iface);
    cfg.payload = Payload::Random;
    cfg.half_close = false;
    let (tx, rx) = mpsc::channel::<IntervalSample>();
    let on_interval = Box::new(move |s| {
        let _ = tx.send(s);
    });
    // iperf3's server closes its data sockets when the test ends; closing ours before the
    // results are shown would reset a server still writing. These duplicates keep every data
    // socket open until this function returns.
    let mut held_tcp = Vec::new();
    let mut held_udp = Vec::new();
    let run = match &spec {
        TestSpec::Tcp(t) => {
            let mut flows = Vec::with_capacity(plan.len());
            let mut up = 0u32;
            for &(id, dir) in &plan {
                let mut s = connect_one(server_addr, opts.bind, opts.connect_timeout, |sock| {
                    apply_tcp_options(sock, t, server_addr.is_ipv6(), true)
                        .map_err(ClientError::from)
                })
                .map_err(|e| ClientError::Data {
                    flow: id,
                    reason: e.to_string(),
                })?;
                s.write_all(&cookie).map_err(|e| ClientError::Data {
                    flow: id,
                    reason: e.to_string(),
                })?;
                if let Ok(dup) = s.try_clone() {
                    held_tcp.push(dup);
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
            wait_running(&mut ctl, &addr)?;
            Running::Tcp(SideRun::start(cfg, flows, on_interval, Box::new(|| {}))?)
        }
        TestSpec::Udp(u) => {
            let mut flows = Vec::with_capacity(plan.len());
            let mut up = 0u32;
            for &(id, dir) in &plan {
                let socket = open_udp_stream(opts, u, server_addr, id)?;
                if let Ok(dup) = socket.try_clone() {
                    held_udp.push(dup);
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
            wait_running(&mut ctl, &addr)?;
            Running::Udp(UdpRun::start(
                cfg,
                ucfg,
                flows,
                on_interval,
                Box::new(|| {}),
                Box::new(|_| {}),
            )?)
        }
        _ => unreachable!("params_for accepts only TCP and UDP"),
    };
    observer.on_start(&spec, &addr, opts.embedded);
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let started = Instant::now();
    let dirs: BTreeMap<u32, FlowDir> = plan.iter().copied().collect();
    let mut intervals = Vec::new();
    let mut show = |s: IntervalSample, observer: &mut dyn Observer| {
        let rec = merge_interval(Some(&s), None, &dirs);
        observer.on_interval(&rec);
        intervals.push(rec);
    };
    // Run until this end decides the test is over, as iperf3's client does.
    let total = params.num.max(params.blockcount * params.len.unwrap_or(0));
    let timed = match spec.amount() {
        Amount::Time(t) => t.0 + spec.omit().0,
        _ => Duration::ZERO,
    };
    let mut interrupted = false;
    loop {
        while let Ok(s) = rx.try_recv() {
            show(s, observer);
        }
        if stop.load(Ordering::Acquire) {
            interrupted = true;
            break;
        }
        let over = if params.time > 0.0 {
            started.elapsed() >= timed
        } else {
            run.is_done() || run.moved(Role::Sender) >= total || run.moved(Role::Receiver) >= total
        };
        if over {
            break;
        }
        if let Some(e) = run.first_error() {
            run.abort();
            let _ = ctl.send_state(State::ClientTerminate);
            return Err(ClientError::Flow(e));
        }
        match ctl.poll_state(Duration::from_millis(50)) {
            Ok(None) => {}
            Ok(Some(st)) => {
                run.abort();
                return Err(unexpected(&mut ctl, st, "the test ran", &addr));
            }
            Err(e) => {
                run.abort();
                return Err(ctl_err(&addr)(e));
            }
        }
    }
    if let Running::Tcp(r) = &run {
        // iperf3's server counts what it has read when TEST_END arrives: let the data in
        // flight land first (the senders have stopped; the queue only drains).
        // Then until the server's advertised windows have not grown for 100 ms: they reopen
        // as it reads (on kernels that report the window; otherwise the wait is short).
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
    ctl.send_state(State::TestEnd).map_err(ctl_err(&addr))?;
    // TCP: the server stops sending and closes its sockets, and the receivers read to that
    // end (the senders have stopped above). UDP has no end: receivers finish when quiet.
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
    while let Ok(s) = rx.try_recv() {
        show(s, observer);
    }
    expect(
        &mut ctl,
        State::ExchangeResults,
        "waiting for EXCHANGE_RESULTS",
        &addr,
    )?;
    ctl.send_json(&results_from_report(&local, !udp).to_json())
        .map_err(ctl_err(&addr))?;
    let theirs = ctl
        .recv_results(wire::MAX_RESULTS_JSON, STEP_TIMEOUT)
        .map_err(|e| match e {
            Iperf3CtlError::Proto(p) => {
                ClientError::Server(format!("iperf3 server's results: {p}"))
            }
            other => ctl_err(&addr)(other),
        })?;
    let remote = report_from_results(
        End::Server,
        &theirs,
        &plan,
        |d| d == FlowDir::Down,
        udp,
        "iperf3",
    )
    .map_err(|e| ClientError::Server(format!("iperf3 server's results: {e}")))?;
    expect(
        &mut ctl,
        State::DisplayResults,
        "waiting for DISPLAY_RESULTS",
        &addr,
    )?;
    // Our last word; then close (3.21 servers wait for the close).
    let _ = ctl.send_state(State::IperfDone);
    drop(ctl);
    drop(held_tcp);
    drop(held_udp);
    if let Some(e) = local.flows.iter().find_map(|f| f.error.clone()) {
        return Err(ClientError::Flow(e));
    }
    let result = finish(
        opts,
        spec,
        &addr,
        local_address,
        started_unix,
        intervals,
        local,
        remote,
        interrupted,
        &theirs,
    );
    observer.on_end(&result);
    Ok(result)
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
