//! The client side of a connection-rate test (`hakaru connect`), the driver of the session
//! machine's connection-rate run: after `accepted` the server names its connect listener
//! (`connect_port`); the connectors run until the deadline while this thread hands the
//! machine their ticks and the control messages; the machine keeps the connection alive,
//! sends this end's report and takes the server's answer.

use hakaru_session::Machine as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::connect::{ConnectConfig, ConnectOutcome, ConnectRun, ConnectTick, Usage};
use hakaru_engine::{sys, Observer};
use hakaru_model::{
    ConnectInterval, ConnectResult, ConnectSpec, End, IntervalRecord, RunResult, SideReport,
    TestSpec,
};

use crate::drive::{unexpected_output, Control, Local};
use crate::{ClientError, ClientOptions};
use hakaru_model::end_result;
use hakaru_session::client::{Ended, Input, Output};

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
    let (port, server_closes) = match ctl.start(opts.gate.as_ref())? {
        Output::StartConnecting {
            port,
            server_closes,
        } => (port, server_closes),
        other => return Err(unexpected_output(other)),
    };
    let target = SocketAddr::new(server_addr.ip(), port);
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let (tx, rx) = mpsc::channel::<ConnectTick>();
    let cfg = ConnectConfig::from_spec(cs, target, opts.bind, opts.affinity.clone(), server_closes);
    let mut me = Me {
        run: None,
        usage: Usage::take(local_ip.and_then(sys::interface_for_addr)),
    };
    match ConnectRun::start(
        cfg,
        Box::new(move |t| {
            let _ = tx.send(t);
        }),
        Box::new(|| {}),
    ) {
        Ok(run) => me.run = Some(run),
        Err(e) => {
            let error = Some(format!("starting the connector threads: {e}"));
            ctl.m.handle(Input::LocalDone { error }, Instant::now());
        }
    }
    let mut connecting = Connecting {
        me: &mut me,
        rx: &rx,
        target,
        outcome: None,
    };
    let ended = ctl.run_local(&mut connecting, observer, stop)?;
    let outcome = connecting.outcome;
    let outcome = outcome.ok_or_else(|| {
        ClientError::Flow(
            "internal error: the connection-rate test ended without its connectors".into(),
        )
    })?;
    let Ended {
        local,
        remote,
        intervals: records,
        interrupted,
    } = *ended;
    let result = run_result(
        (&spec, cs),
        &outcome,
        (local, remote),
        (records, interrupted),
        Where {
            addr: addr_s,
            embedded: opts.embedded,
            local_address,
            started_unix,
            clock,
            same_host,
        },
    );
    observer.on_end(&result);
    Ok(result)
}

/// This end of a running connection-rate test, as the driver feeds it to the machine: the
/// connectors' ticks and their end, and the connectors' outcome once they are done.
struct Connecting<'a> {
    me: &'a mut Me,
    rx: &'a mpsc::Receiver<ConnectTick>,
    target: SocketAddr,
    outcome: Option<ConnectOutcome>,
}

impl Local for Connecting<'_> {
    fn stop(&mut self) {
        self.me.stop();
    }

    fn report(&mut self) -> SideReport {
        self.me.report()
    }

    fn news(&mut self, m: &mut hakaru_session::client::Session) -> bool {
        while let Ok(t) = self.rx.try_recv() {
            m.handle(Input::LocalInterval(record(t)), Instant::now());
        }
        if !self.me.run.as_ref().is_some_and(ConnectRun::is_done) {
            return false;
        }
        let o = self.me.run.take().map(ConnectRun::wait);
        while let Ok(t) = self.rx.try_recv() {
            m.handle(Input::LocalInterval(record(t)), Instant::now());
        }
        let error = o
            .as_ref()
            .and_then(|o| o.fatal.clone().or_else(|| all_failed(o, self.target)));
        self.outcome = o;
        m.handle(Input::LocalDone { error }, Instant::now());
        true
    }
}

/// Where and when the test ran, for its result.
pub(crate) struct Where {
    pub addr: String,
    pub embedded: bool,
    pub local_address: String,
    pub started_unix: f64,
    pub clock: Option<hakaru_model::ClockOffset>,
    pub same_host: bool,
}

/// The test's result from the connectors' outcome and both ends' reports.
pub(crate) fn run_result(
    (spec, cs): (&TestSpec, &ConnectSpec),
    outcome: &ConnectOutcome,
    (local, remote): (SideReport, SideReport),
    (records, interrupted): (Vec<IntervalRecord>, bool),
    at: Where,
) -> RunResult {
    let mut notes = Vec::new();
    if !cs.rst {
        notes.push(if outcome.server_closed_first {
            "closed with FIN, the server first (right after its response, as netserver in \
             TCP_CRR): TIME_WAIT stays at the server, and the client's local ports are free \
             as soon as each connection ends"
                .into()
        } else {
            fin_note(sys::local_port_range())
        });
    }
    let connect = connect_result(cs, outcome, remote.connect);
    RunResult {
        embedded_server: at.embedded,
        local_address: at.local_address,
        remote_address: at.addr.clone(),
        intervals: records,
        client: no_bytes(end_result(&local)),
        server_end: no_bytes(end_result(&remote)),
        interrupted,
        notes,
        detail: hakaru_model::KindDetail::Connect(Box::new(connect)),
        server_clock_offset: at.clock,
        server_on_this_host: at.same_host,
        ..RunResult::begin(spec.clone(), at.started_unix, at.addr)
    }
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
        "closed with FIN, the client first (the server waits for its close): each connection \
         leaves a socket in TIME_WAIT at the client for 60 s, \
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
        first_close: if o.server_closed_first {
            "server"
        } else {
            "client"
        }
        .into(),
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

/// The record of one interval of the connectors.
pub(crate) fn record(t: ConnectTick) -> Box<IntervalRecord> {
    let secs = t.end - t.start;
    Box::new(IntervalRecord {
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
        probe: None,
    })
}

/// This end of a connection-rate test: the connectors while they run, and the interface and
/// CPU counters from the start.
struct Me {
    run: Option<ConnectRun>,
    usage: Usage,
}

impl Local for Me {
    fn stop(&mut self) {
        self.run.iter().for_each(ConnectRun::stop);
    }

    fn report(&mut self) -> SideReport {
        self.usage.report(End::Client, None)
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
