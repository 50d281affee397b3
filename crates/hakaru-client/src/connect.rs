//! The client side of a connection-rate test (`hakaru connect`): after `accepted` (and the
//! observer's start) the server
//! names its connect listener (`connect_port`); the connectors run until the deadline while
//! this thread prints their ticks and keeps the control connection alive; then this end sends
//! its report and the server answers with its own.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::connect::{ConnectConfig, ConnectOutcome, ConnectRun, ConnectTick, Usage};
use hakaru_engine::control::{ControlConn, ControlError};
use hakaru_engine::{sys, Observer};
use hakaru_model::{
    rfc3339_utc, ConnectInterval, ConnectResult, ConnectSpec, End, IntervalRecord, RunResult,
    SideReport, TestSpec, SCHEMA_VERSION,
};
use hakaru_proto::Message;

use crate::drive::{unexpected_output, Control};
use crate::{ClientError, ClientOptions, KEEPALIVE_EVERY, RESULTS_TIMEOUT};
use hakaru_model::end_result;
use hakaru_session::client::Output;

/// Buckets of the `--histogram` distribution.
const HISTOGRAM_BUCKETS: usize = 24;

/// What [`run`] needs from the handshake.
pub(crate) struct Setup<'a> {
    /// The control connection and its session machine, past `accepted`.
    pub ctl: Control,
    /// The run's options.
    pub opts: &'a ClientOptions,
    /// The test, as sent.
    pub spec: TestSpec,
    /// The server's control address.
    pub server_addr: SocketAddr,
    /// The local address of the control connection.
    pub local_address: String,
    /// Its IP, for the interface counters.
    pub local_ip: Option<IpAddr>,
    /// The server's clock against ours, from its welcome.
    pub clock: Option<hakaru_model::ClockOffset>,
    /// The server runs on this kernel.
    pub same_host: bool,
}

/// Runs a connection-rate test past the handshake.
pub(crate) fn run(
    s: Setup<'_>,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<RunResult, ClientError> {
    let Setup {
        mut ctl,
        opts,
        spec,
        server_addr,
        local_address,
        local_ip,
        clock,
        same_host,
    } = s;
    let TestSpec::Connect(cs) = &spec else {
        return Err(ClientError::Flow(
            "internal error: not a connection-rate test".into(),
        ));
    };
    let addr_s = server_addr.to_string();
    let gone = |what: String| ClientError::ServerGone {
        addr: addr_s.clone(),
        what,
    };
    // The machine passes the gate and waits for the connect port; its part ends there.
    let port = match ctl.start(opts.gate.as_ref())? {
        Output::StartConnecting { port } => port,
        other => return Err(unexpected_output(other)),
    };
    let mut conn = ctl.conn;
    let target = SocketAddr::new(server_addr.ip(), port);
    let usage = Usage::take(local_ip.and_then(sys::interface_for_addr));
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let (tx, rx) = mpsc::channel::<ConnectTick>();
    let cfg = ConnectConfig::from_spec(cs, target, opts.bind, opts.affinity.clone());
    let run = ConnectRun::start(
        cfg,
        Box::new(move |t| {
            let _ = tx.send(t);
        }),
        Box::new(|| {}),
    )
    .map_err(|e| ClientError::Flow(format!("starting the connector threads: {e}")))?;
    let mut records = Vec::new();
    let silence = crate::silence_limit(cs.connect_timeout.0);
    let interrupted = match control_loop(
        &mut conn,
        &run,
        &rx,
        (&mut records, silence),
        observer,
        stop,
    ) {
        Ok(i) => i,
        Err(e) => {
            run.stop();
            drop(run);
            let e = match e {
                LoopError::Client(e) => e,
                LoopError::Gone(what) => gone(what),
            };
            let _ = conn.send(&Message::Error {
                message: format!("client gave up: {e}"),
            });
            return Err(e);
        }
    };
    let outcome = run.wait();
    while let Ok(t) = rx.try_recv() {
        push_tick(&mut records, observer, t);
    }
    if let Some(why) = outcome
        .fatal
        .clone()
        .or_else(|| all_failed(&outcome, target))
    {
        let _ = conn.send(&Message::Error {
            message: format!("client gave up: {why}"),
        });
        return Err(ClientError::Flow(why));
    }
    let local = usage.report(End::Client, None);
    conn.send(&Message::Finished {
        report: Box::new(local.clone()),
    })
    .map_err(|e| gone(format!("is unreachable: {e}")))?;
    let remote = wait_results(&mut conn).map_err(|e| match e {
        LoopError::Client(e) => e,
        LoopError::Gone(what) => gone(what),
    })?;
    let mut notes = Vec::new();
    if !cs.rst {
        notes.push(fin_note(sys::local_port_range()));
    }
    let connect = connect_result(cs, &outcome, remote.connect);
    let result = RunResult {
        schema_version: SCHEMA_VERSION,
        tool: "hakaru".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        test: spec.name().into(),
        started_at: rfc3339_utc(started_unix),
        started_at_unix: started_unix,
        server: addr_s.clone(),
        embedded_server: opts.embedded,
        local_address,
        remote_address: addr_s,
        spec: spec.clone(),
        intervals: records,
        flows: Vec::new(),
        totals: Vec::new(),
        client: no_bytes(end_result(&local)),
        server_end: no_bytes(end_result(&remote)),
        interrupted,
        notes,
        connect: Some(connect),
        latency: None,
        raw: None,
        http: None,
        server_clock_offset: clock,
        server_on_this_host: same_host,
    };
    observer.on_end(&result);
    Ok(result)
}

/// What closing with FIN costs, with the ceiling the local port range sets.
fn fin_note(range: Option<(u16, u16)>) -> String {
    let ceiling = range.map_or_else(String::new, |(lo, hi)| {
        let ports = u32::from(hi) - u32::from(lo) + 1;
        format!(
            ", so FIN closes to one server port top out near {ports} ports / 2 s = {} \
             connections/s",
            ports / 2
        )
    });
    format!(
        "closed with FIN: each connection leaves a socket in TIME_WAIT at the client for 60 s, \
         holding its local port; Linux reuses such a port for a new connection only where \
         net.ipv4.tcp_tw_reuse allows (by default on loopback only) and only once it is 1 to 2 s \
         old{ceiling}; --rst closes with RST and leaves none"
    )
}

/// A connection-rate test moves no bulk data: bytes per CPU-second would read 0.
fn no_bytes(mut e: hakaru_model::EndResult) -> hakaru_model::EndResult {
    e.bytes_per_cpu_second = None;
    e
}

/// Every attempt failed: the test measured nothing, and the first error says why.
fn all_failed(o: &ConnectOutcome, target: SocketAddr) -> Option<String> {
    if o.connections > 0 || o.failed == 0 {
        return None;
    }
    let why = o
        .errors
        .first()
        .map_or_else(|| "unknown error".to_string(), |e| e.0.clone());
    Some(format!(
        "no connection to the server's connect listener at {target} succeeded: {why} ({} attempts)",
        o.failed
    ))
}

/// The figures of the test from the connectors' outcome and the server's counts.
fn connect_result(
    spec: &ConnectSpec,
    o: &ConnectOutcome,
    server: Option<hakaru_model::ConnectServerCounts>,
) -> ConnectResult {
    ConnectResult {
        connections: o.connections,
        failed: o.failed,
        seconds: o.seconds,
        connections_per_second: if o.seconds > 0.0 {
            o.connections as f64 / o.seconds
        } else {
            0.0
        },
        close: spec.close_name().into(),
        connect_time: o.connect_time.stats(),
        transaction_time: o.transaction_time.stats(),
        histogram: if spec.histogram {
            o.connect_time.buckets(HISTOGRAM_BUCKETS)
        } else {
            Vec::new()
        },
        errors: o.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect(),
        server,
    }
}

fn push_tick(records: &mut Vec<IntervalRecord>, observer: &mut dyn Observer, t: ConnectTick) {
    let secs = t.end - t.start;
    let rec = IntervalRecord {
        index: t.index,
        start: t.start,
        end: t.end,
        omitted: false,
        flows: Vec::new(),
        sums: Vec::new(),
        connect: Some(ConnectInterval {
            connections: t.connections,
            failed: t.failed,
            connections_per_second: if secs > 0.0 {
                t.connections as f64 / secs
            } else {
                0.0
            },
        }),
        latency: None,
        client_nic: None,
        server_nic: None,
    };
    observer.on_interval(&rec);
    records.push(rec);
}

enum LoopError {
    /// Fail with this.
    Client(ClientError),
    /// The server went away: what happened.
    Gone(String),
}

/// Until the connectors are done: their ticks, keepalives both ways, Ctrl-C. Returns whether
/// the test was interrupted.
fn control_loop(
    conn: &mut ControlConn,
    run: &ConnectRun,
    rx: &mpsc::Receiver<ConnectTick>,
    (records, silence): (&mut Vec<IntervalRecord>, Duration),
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<bool, LoopError> {
    let mut interrupted = false;
    let mut last_heard = Instant::now();
    let mut last_sent = Instant::now();
    loop {
        if !interrupted && stop.load(Ordering::Acquire) {
            interrupted = true;
            run.stop();
            conn.send(&Message::Stop)
                .map_err(|e| LoopError::Gone(format!("could not be told to stop: {e}")))?;
        }
        while let Ok(t) = rx.try_recv() {
            push_tick(records, observer, t);
        }
        if run.is_done() {
            return Ok(interrupted);
        }
        match conn.poll(Duration::from_millis(20)) {
            Ok(Some(Message::Keepalive)) => last_heard = Instant::now(),
            Ok(Some(Message::Error { message })) => {
                return Err(LoopError::Client(ClientError::Server(message)))
            }
            Ok(Some(other)) => {
                return Err(LoopError::Client(ClientError::Server(format!(
                    "unexpected {} message during the test",
                    other.name()
                ))))
            }
            Ok(None) => {}
            Err(ControlError::Closed) => {
                return Err(LoopError::Gone(
                    "closed the control connection mid-test (did it exit?)".into(),
                ))
            }
            Err(e) => return Err(LoopError::Gone(format!("failed mid-test: {e}"))),
        }
        if last_heard.elapsed() > silence {
            return Err(LoopError::Gone(format!(
                "sent nothing for {:.0} s (--connect-timeout): the path or the server is down",
                silence.as_secs_f64()
            )));
        }
        if last_sent.elapsed() > KEEPALIVE_EVERY {
            conn.send(&Message::Keepalive)
                .map_err(|e| LoopError::Gone(format!("is unreachable: {e}")))?;
            last_sent = Instant::now();
        }
    }
}

/// Waits for the server's report.
fn wait_results(conn: &mut ControlConn) -> Result<SideReport, LoopError> {
    let deadline = Instant::now() + RESULTS_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LoopError::Gone(format!(
                "sent no results within {} s of the end",
                RESULTS_TIMEOUT.as_secs()
            )));
        }
        match conn.poll(left) {
            Ok(Some(Message::Finished { report })) => return Ok(*report),
            Ok(Some(Message::Keepalive)) | Ok(None) => {}
            Ok(Some(Message::Error { message })) => {
                return Err(LoopError::Client(ClientError::Server(message)))
            }
            Ok(Some(other)) => {
                return Err(LoopError::Client(ClientError::Server(format!(
                    "unexpected {} message instead of results",
                    other.name()
                ))))
            }
            Err(ControlError::Closed) => {
                return Err(LoopError::Gone(
                    "closed the control connection before sending results".into(),
                ))
            }
            Err(e) => return Err(LoopError::Gone(format!("failed sending results: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fin_note_gives_the_ceiling_of_the_port_range() {
        let n = fin_note(Some((32768, 60999)));
        assert!(n.contains("TIME_WAIT") && n.contains("--rst"), "{n}");
        assert!(n.contains("28232 ports / 2 s = 14116 connections/s"), "{n}");
        assert!(!fin_note(None).contains("ports / 2 s"));
    }
}
