//! TCP_RR, UDP_RR and TCP_CRR: the pinger and the connectors on netserver's data ports.

use hakaru_engine::control::Transport as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use hakaru_engine::connect::{ConnectConfig, ConnectRun, ConnectTick, Usage};
use hakaru_engine::ping::{self, Framing, PingConfig, PingFlow, PingSocket, Pinger};
use hakaru_engine::tcp::SideConfig;
use hakaru_engine::{sys, Observer};
use hakaru_model::{
    ConnectServerCounts, ConnectSpec, End, LatencyServerCounts, LatencySpec, LatencyTransport,
    RunResult, SideReport, TestSpec,
};

use super::{empty_datagrams, Tests};
use crate::{connect_one, latency, ClientError, ClientOptions};

/// How often the connection-rate loop looks at the ticks and the control connections.
const POLL: Duration = Duration::from_millis(20);

/// The local interface of the first control connection, for its counters.
fn iface(tests: &Tests) -> Option<String> {
    tests
        .list
        .first()
        .and_then(|t| t.io.conn.stream().local_addr().ok())
        .and_then(|a| sys::interface_for_addr(a.ip()))
}

/// Opens one ping flow per test; UDP flows also give a duplicate for the empty datagrams.
fn open_flows(
    opts: &ClientOptions,
    l: &LatencySpec,
    tests: &Tests,
) -> Result<(Vec<PingFlow>, Vec<UdpSocket>), ClientError> {
    let mut flows = Vec::with_capacity(tests.list.len());
    let mut held = Vec::new();
    for (id, to) in (0u32..).zip(tests.data_addrs()) {
        let fail = |reason: String| ClientError::Data {
            flow: id,
            reason: format!("netserver's data port {}: {reason}", to.port()),
        };
        let socket = match l.transport {
            LatencyTransport::Tcp => {
                let s = connect_one(to, opts.bind, opts.connect_timeout, |_| Ok(()))
                    .map_err(|e| fail(e.to_string()))?;
                s.set_nodelay(true).map_err(|e| fail(e.to_string()))?;
                PingSocket::Tcp(s)
            }
            LatencyTransport::Udp => {
                let bind = opts.bind.unwrap_or(match to {
                    SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                });
                let s = UdpSocket::bind(SocketAddr::new(bind, 0))
                    .map_err(|e| fail(format!("binding a UDP socket to {bind}: {e}")))?;
                s.connect(to).map_err(|e| fail(e.to_string()))?;
                held.push(s.try_clone().map_err(|e| fail(e.to_string()))?);
                PingSocket::Udp(s)
            }
        };
        flows.push(PingFlow { id, socket });
    }
    Ok((flows, held))
}

/// `hakaru latency --netperf`: TCP_RR, or UDP_RR with `--udp`.
pub(super) fn latency(
    opts: &ClientOptions,
    l: &LatencySpec,
    tests: &mut Tests,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<RunResult, ClientError> {
    let (flows, held) = open_flows(opts, l, tests)?;
    let test = TestSpec::Latency(l.clone());
    let cfg = SideConfig::for_spec(End::Client, &test, opts.affinity.clone(), iface(tests));
    observer.on_start(&test, &tests.addr, opts.embedded);
    let started_unix = super::now_unix();
    let pinger = Pinger::start(
        // netserver's responses are its own bytes: no header to match.
        PingConfig::for_spec(
            l,
            opts.affinity.clone(),
            opts.full_log.is_some(),
            Framing::Opaque,
        ),
        flows,
    )
    .map_err(|e| ClientError::Flow(format!("starting the ping flows: {e}")))?;
    let started = pinger.started();
    let (intervals, interrupted) = crate::sockperf::drive(&pinger, l, observer, stop);
    // The flows' threads close their TCP connections as they end: netserver's end of TCP_RR.
    let outcome = pinger.wait();
    let wall = started.elapsed().as_secs_f64();
    if let Some(e) = &outcome.error {
        return Err(ClientError::Flow(format!(
            "{e} (netserver at {})",
            tests.addr
        )));
    }
    empty_datagrams(&held);
    let theirs = tests.results()?;
    drop(held);
    let full_log = match &opts.full_log {
        Some(path) => {
            latency::write_full_log(path, &outcome)
                .map_err(|e| ClientError::Flow(format!("--full-log {}: {e}", path.display())))?;
            Some(path.display().to_string())
        }
        None => None,
    };
    let mut lat = latency::latency_result(l, &outcome, opts.histogram, full_log);
    let counts = LatencyServerCounts {
        transactions: theirs.iter().map(|r| u64::from(r.trans_received)).sum(),
        bytes_received: theirs.iter().map(|r| r.bytes_received).sum(),
        bytes_sent: theirs.iter().map(|r| r.bytes_sent).sum(),
        seconds: theirs
            .iter()
            .map(|r| f64::from(r.elapsed_time))
            .fold(0.0, f64::max),
    };
    lat.server = Some(counts);
    let note = format!(
        "netserver counted {} transactions in {:.2} s, warm-up included ({} here: {} timed, {} in the warm-up)",
        counts.transactions,
        counts.seconds,
        lat.replies + lat.warmup_discarded,
        lat.replies,
        lat.warmup_discarded
    );
    let remote = tests.report(Vec::new());
    let local = ping::bare_report(&cfg, wall, "ping");
    let mut result = super::assemble(
        opts,
        tests,
        started_unix,
        (intervals, local, remote, interrupted),
        vec![note],
    );
    result.detail = hakaru_model::KindDetail::Latency(Box::new(lat));
    observer.on_end(&result);
    Ok(result)
}

/// `hakaru connect --netperf`: TCP_CRR. netserver ends a TCP_CRR only at its timer, the
/// test's length plus its 4 s pad, so its results come that much after the connectors end.
pub(super) fn connect(
    opts: &ClientOptions,
    c: &ConnectSpec,
    tests: &mut Tests,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<RunResult, ClientError> {
    let target = tests
        .data_addrs()
        .first()
        .copied()
        .ok_or_else(|| ClientError::Flow("internal error: no TCP_CRR test".into()))?;
    let (tx, rx) = mpsc::channel::<ConnectTick>();
    // netserver closes each TCP_CRR connection right after its response.
    let cfg = ConnectConfig::from_spec(c, target, opts.bind, opts.affinity.clone(), true);
    let usage = Usage::take(iface(tests));
    observer.on_start(&opts.spec, &tests.addr, opts.embedded);
    let started_unix = super::now_unix();
    let run = ConnectRun::start(
        cfg,
        Box::new(move |t| {
            let _ = tx.send(t);
        }),
        Box::new(|| {}),
    )
    .map_err(|e| ClientError::Flow(format!("starting the connector threads: {e}")))?;
    let mut intervals = Vec::new();
    let mut interrupted = false;
    let show = |observer: &mut dyn Observer, intervals: &mut Vec<_>| {
        while let Ok(t) = rx.try_recv() {
            let rec = *crate::connect::record(t);
            observer.on_interval(&rec);
            intervals.push(rec);
        }
    };
    // Bounded by the connectors' own deadline.
    while !run.is_done() {
        show(observer, &mut intervals);
        if !interrupted && stop.load(Ordering::Acquire) {
            interrupted = true;
            run.stop();
        }
        if let Err(e) = tests.check() {
            run.stop();
            let _ = run.wait();
            return Err(e);
        }
        std::thread::sleep(POLL);
    }
    let outcome = run.wait();
    show(observer, &mut intervals);
    if let Some(f) = &outcome.fatal {
        return Err(ClientError::Flow(f.clone()));
    }
    let theirs = tests.results()?;
    let served: u64 = theirs.iter().map(|r| u64::from(r.trans_received)).sum();
    let remote = SideReport {
        connect: Some(ConnectServerCounts {
            accepted: served,
            served,
            dropped: 0,
            foreign: 0,
        }),
        ..tests.report(Vec::new())
    };
    let mut result = crate::connect::run_result(
        (&opts.spec, c),
        &outcome,
        (usage.report(End::Client, None), remote),
        (intervals, interrupted),
        crate::connect::Where {
            addr: tests.addr.clone(),
            embedded: opts.embedded,
            local_address: tests.local_address.clone(),
            started_unix,
            clock: None,
            same_host: false,
        },
    );
    result.notes.insert(0, tests.note());
    observer.on_end(&result);
    Ok(result)
}
