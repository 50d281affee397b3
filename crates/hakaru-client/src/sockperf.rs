//! `hakaru latency --sockperf`: ping-pong against a stock `sockperf sr`.
//!
//! sockperf has no control connection: the flows go straight to its port, requests carry
//! sockperf's header, and the test ends when the pinger's time is up. Only this end reports;
//! the server's CPU, NIC and environment are absent from the result (and a note says why).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hakaru_engine::ping::{self, Framing, PingConfig, PingFlow, PingSocket, Pinger};
use hakaru_engine::tcp::SideConfig;
use hakaru_engine::{sys, Observer};
use hakaru_model::{
    End, Environment, IntervalRecord, LatencySpec, LatencyTransport, RunResult, SideReport,
    TestSpec,
};
use socket2::{Domain, Protocol, Socket, Type};

use crate::{latency, resolve, ClientError, ClientOptions};
use hakaru_model::assemble;

/// The note every `--sockperf` result carries.
pub const NO_SERVER_REPORT: &str = "server: spoken to in sockperf's protocol (no control \
     connection), so its CPU, NIC and environment figures are absent; a stock sockperf sr prints \
     its own count (\"Total N messages received and handled\") when it exits";

/// Runs a latency test against `sockperf sr` at `opts.host:opts.port`.
pub(crate) fn run(
    opts: &ClientOptions,
    spec: &LatencySpec,
    observer: &mut dyn Observer,
    stop: Arc<AtomicBool>,
) -> Result<RunResult, ClientError> {
    let (flows, server) = connect(opts, spec)?;
    let addr_s = server.to_string();
    let local_ip = flows.first().and_then(|(_, ip)| *ip);
    let local_address = local_ip
        .map(|ip| SocketAddr::new(ip, 0).to_string())
        .unwrap_or_default();
    let flows: Vec<PingFlow> = flows.into_iter().map(|(f, _)| f).collect();
    let test = TestSpec::Latency(spec.clone());
    let iface = local_ip.and_then(sys::interface_for_addr);
    let cfg = SideConfig::for_spec(End::Client, &test, opts.affinity.clone(), iface);
    observer.on_start(&test, &addr_s, opts.embedded);
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let pinger = Pinger::start(
        PingConfig::for_spec(
            spec,
            opts.affinity.clone(),
            opts.full_log.is_some(),
            Framing::Sockperf,
        ),
        flows,
    )
    .map_err(|e| ClientError::Flow(format!("starting the ping flows: {e}")))?;
    let started = pinger.started();
    let (intervals, interrupted) = drive(&pinger, spec, observer, &stop);
    let outcome = pinger.wait();
    let wall = started.elapsed().as_secs_f64();
    if let Some(e) = &outcome.error {
        return Err(ClientError::Flow(format!(
            "{e} (sockperf server at {addr_s})"
        )));
    }
    let full_log = match &opts.full_log {
        Some(path) => {
            latency::write_full_log(path, &outcome)
                .map_err(|e| ClientError::Flow(format!("--full-log {}: {e}", path.display())))?;
            Some(path.display().to_string())
        }
        None => None,
    };
    let lat = latency::latency_result(spec, &outcome, opts.histogram, full_log);
    let mut result = assemble(hakaru_model::AssembleInputs {
        ipv6: server.ip().to_canonical().is_ipv6(),
        spec: test,
        server: addr_s.clone(),
        embedded: opts.embedded,
        local_address,
        remote_address: addr_s,
        started_unix,
        intervals,
        local: ping::bare_report(&cfg, wall, "ping"),
        remote: sockperf_report(),
        interrupted,
        notes: vec![NO_SERVER_REPORT.into()],
    });
    result.detail = hakaru_model::KindDetail::Latency(Box::new(lat));
    observer.on_end(&result);
    Ok(result)
}

/// Flows with the local address each one used.
type Opened = Vec<(PingFlow, Option<IpAddr>)>;

/// Opens the flows to the first of HOST's addresses that takes them.
fn connect(opts: &ClientOptions, spec: &LatencySpec) -> Result<(Opened, SocketAddr), ClientError> {
    let mut last = None;
    for a in resolve(&opts.host, opts.port, opts.family)? {
        match open_flows(opts, spec, a) {
            Ok(f) => return Ok((f, a)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(ClientError::Resolve {
        host: opts.host.clone(),
        reason: "no address".into(),
    }))
}

/// Reports intervals until the pinger is done (or Ctrl-C stops it); returns them and whether
/// the run was interrupted. `--netperf` runs its pinger through it too.
pub(crate) fn drive(
    pinger: &Pinger,
    spec: &LatencySpec,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> (Vec<IntervalRecord>, bool) {
    let started = pinger.started();
    let (mut intervals, mut interrupted) = (Vec::new(), false);
    let interval = spec.interval.0;
    let total = spec.warmup.0 + spec.duration.0;
    let (mut last_end, mut next_tick) = (spec.warmup.0, spec.warmup.0 + interval);
    while !pinger.is_done() {
        if !interrupted && stop.load(Ordering::Acquire) {
            interrupted = true;
            pinger.stop();
        }
        // No control connection to wait on: the pinger's own deadline ends this loop.
        std::thread::sleep(Duration::from_millis(20));
        if !interval.is_zero() && started.elapsed() >= next_tick && next_tick < total {
            latency::emit(pinger, &mut intervals, observer, last_end, next_tick, false);
            last_end = next_tick;
            next_tick += interval;
        }
    }
    let end = started.elapsed().min(total).max(last_end);
    if !interval.is_zero() && end > last_end {
        latency::emit(pinger, &mut intervals, observer, last_end, end, false);
    }
    (intervals, interrupted)
}

/// The server's side as far as it is known: it is sockperf, it echoes; nothing measured.
fn sockperf_report() -> SideReport {
    SideReport {
        env: Environment {
            software: "sockperf".into(),
            ..Environment::default()
        },
        send_mode: "echo".into(),
        recv_mode: "echo".into(),
        ..SideReport::flows_only(End::Server, Vec::new())
    }
}

/// Opens every flow to `server`, each with the local address it used.
fn open_flows(
    opts: &ClientOptions,
    spec: &LatencySpec,
    server: SocketAddr,
) -> Result<Opened, ClientError> {
    let fail = |reason: String| ClientError::Connect {
        addr: server.to_string(),
        reason,
    };
    let bind = opts.bind.unwrap_or(match server {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    });
    let mut out = Vec::with_capacity(spec.flows as usize);
    for id in 0..spec.flows {
        let socket = match spec.transport {
            LatencyTransport::Tcp => {
                let s = Socket::new(
                    Domain::for_address(server),
                    Type::STREAM,
                    Some(Protocol::TCP),
                )
                .map_err(|e| fail(e.to_string()))?;
                if opts.bind.is_some() {
                    s.bind(&SocketAddr::new(bind, 0).into())
                        .map_err(|e| fail(format!("-B/--bind {bind}: {e}")))?;
                }
                s.connect_timeout(&server.into(), opts.connect_timeout)
                    .map_err(|e| {
                        fail(match e.kind() {
                            std::io::ErrorKind::ConnectionRefused => {
                                "connection refused (is `sockperf sr --tcp` running there?)".into()
                            }
                            _ => e.to_string(),
                        })
                    })?;
                s.set_tcp_nodelay(true).map_err(|e| fail(e.to_string()))?;
                PingSocket::Tcp(TcpStream::from(s))
            }
            LatencyTransport::Udp => {
                let s = UdpSocket::bind(SocketAddr::new(bind, 0))
                    .map_err(|e| fail(format!("binding a UDP socket to {bind}: {e}")))?;
                s.connect(server).map_err(|e| fail(e.to_string()))?;
                PingSocket::Udp(s)
            }
        };
        let local = match &socket {
            PingSocket::Tcp(s) => s.local_addr().ok(),
            PingSocket::Udp(s) => s.local_addr().ok(),
        }
        .map(|a| a.ip());
        out.push((PingFlow { id, socket }, local));
    }
    Ok(out)
}
