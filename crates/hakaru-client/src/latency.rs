//! The client's half of a latency test: open the flows, ping, report intervals as they end,
//! then stop the server's echo and exchange reports.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hakaru_engine::control::{ControlConn, ControlError};
use hakaru_engine::ping::{self, PingConfig, PingFlow, PingOutcome, PingSocket, Pinger};
use hakaru_engine::tcp::SideConfig;
use hakaru_engine::Observer;
use hakaru_model::{
    End, IntervalRecord, LatencyResult, LatencySpec, LatencyTransport, SideReport, TestSpec,
};
use hakaru_proto::Message;

use crate::drive::Control;
use crate::{udp, ClientError, ClientOptions};

const RESULTS_TIMEOUT: Duration = Duration::from_secs(20);
const KEEPALIVE_EVERY: Duration = Duration::from_secs(2);

/// What the latency side hands back for assembly.
pub(crate) struct LatencyOut {
    pub local: SideReport,
    pub remote: SideReport,
    pub intervals: Vec<IntervalRecord>,
    pub interrupted: bool,
    pub result: LatencyResult,
}

/// Everything [`run`] needs from the control session.
pub(crate) struct Session<'a> {
    pub ctl: &'a mut Control,
    pub opts: &'a ClientOptions,
    pub spec: &'a LatencySpec,
    pub server_addr: SocketAddr,
    pub token: &'a str,
    pub iface: Option<String>,
    pub addr: &'a str,
}

/// Runs the client end of a latency test after the server accepted it.
pub(crate) fn run(
    s: Session<'_>,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<LatencyOut, ClientError> {
    let ctl_err = |source: ControlError| ClientError::Control {
        addr: s.addr.to_string(),
        source,
    };
    let spec = s.spec;
    let flows: Vec<PingFlow> = match spec.transport {
        LatencyTransport::Tcp => {
            crate::open_tcp_flows(s.opts, &spec.as_tcp(), s.server_addr, s.token)?
                .into_iter()
                .map(|f| PingFlow {
                    id: f.id,
                    socket: PingSocket::Tcp(f.stream),
                })
                .collect()
        }
        LatencyTransport::Udp => {
            let (f, _) = udp::open_flows(s.opts, &spec.as_udp(), s.server_addr, s.token)?;
            f.into_iter()
                .map(|f| PingFlow {
                    id: f.id,
                    socket: PingSocket::Udp(f.socket),
                })
                .collect()
        }
    };
    let cfg = SideConfig::for_spec(
        End::Client,
        &TestSpec::Latency(spec.clone()),
        s.opts.affinity.clone(),
        s.iface.clone(),
    );
    // The machine passes the gate and says `flows_ready` as the transport needs; its part
    // ends at `start`.
    s.ctl.start(s.opts.gate.as_ref())?;
    let conn = &mut s.ctl.conn;
    let pinger = Pinger::start(
        PingConfig {
            length: spec.length.0 as usize,
            warmup: spec.warmup.0,
            duration: spec.duration.0,
            rate: spec.rate,
            spin: spec.spin,
            busy_poll: spec.busy_poll,
            timeout: spec.timeout.0,
            affinity: s.opts.affinity.clone(),
            keep_samples: s.opts.full_log.is_some(),
            framing: ping::Framing::Hakaru,
        },
        flows,
    )
    .map_err(|e| ClientError::Flow(format!("starting the ping flows: {e}")))?;
    let started = pinger.started();
    let gone = |what: String| ClientError::ServerGone {
        addr: s.addr.to_string(),
        what,
    };
    let mut intervals = Vec::new();
    let mut interrupted = false;
    let interval = spec.interval.0;
    let mut last_end = spec.warmup.0;
    let mut next_tick = spec.warmup.0 + interval;
    let mut last_sent = Instant::now();
    let total = spec.warmup.0 + spec.duration.0;
    // The server's echo ends when this end's flows close, which they do as the test ends,
    // possibly before the pinger counts itself done: its report can arrive in this loop.
    let mut remote: Option<SideReport> = None;
    let mut last_heard = Instant::now();
    let silence = crate::silence_limit(spec.timeout.0);
    while !pinger.is_done() {
        if !interrupted && stop.load(Ordering::Acquire) {
            interrupted = true;
            pinger.stop();
        }
        match conn.poll(Duration::from_millis(20)) {
            Ok(None) => {}
            Ok(Some(Message::Keepalive)) => last_heard = Instant::now(),
            Ok(Some(Message::Finished { report })) if remote.is_none() => {
                last_heard = Instant::now();
                remote = Some(*report);
            }
            Ok(Some(Message::Error { message })) => {
                pinger.stop();
                return Err(ClientError::Server(message));
            }
            Ok(Some(other)) => {
                pinger.stop();
                return Err(ClientError::Unexpected {
                    addr: s.addr.to_string(),
                    what: format!("{} message during the test", other.name()),
                });
            }
            Err(ControlError::Closed) => {
                pinger.stop();
                return Err(gone(
                    "closed the control connection mid-test (did it exit?)".into(),
                ));
            }
            Err(e) => {
                pinger.stop();
                return Err(gone(format!("failed mid-test: {e}")));
            }
        }
        if remote.is_none() && last_heard.elapsed() > silence {
            pinger.stop();
            return Err(gone(format!(
                "sent nothing for {:.0} s (--timeout): the path or the server is down",
                silence.as_secs_f64()
            )));
        }
        let elapsed = started.elapsed();
        // The interval that ends the test is emitted after the last reply, below.
        if !interval.is_zero() && elapsed >= next_tick && next_tick < total {
            emit(
                &pinger,
                &mut intervals,
                observer,
                last_end,
                next_tick,
                false,
            );
            last_end = next_tick;
            next_tick += interval;
        }
        if last_sent.elapsed() > KEEPALIVE_EVERY {
            conn.send(&Message::Keepalive)
                .map_err(|e| gone(format!("is unreachable: {e}")))?;
            last_sent = Instant::now();
        }
    }
    let end = started.elapsed().min(total).max(last_end);
    if !interval.is_zero() && end > last_end {
        emit(&pinger, &mut intervals, observer, last_end, end, false);
    }
    let outcome = pinger.wait();
    let wall = started.elapsed().as_secs_f64();
    if let Some(e) = &outcome.error {
        // A TCP flow got no reply within --timeout: the path is as good as down, so say why
        // and stop here rather than wait for a report that may never cross it.
        let _ = conn.send(&Message::Error { message: e.clone() });
        return Err(ClientError::Flow(e.clone()));
    }
    // The measurement is over: stop the echo and take the server's report (unless it came
    // already, the echo having seen this end's flows close).
    let remote = match remote {
        Some(r) => r,
        None => wait_report(conn, silence, &gone, ctl_err)?,
    };
    let local = ping::bare_report(&cfg, wall, "ping");
    let _ = conn.send(&Message::Finished {
        report: Box::new(local.clone()),
    });
    let full_log = match &s.opts.full_log {
        Some(path) => {
            write_full_log(path, &outcome)
                .map_err(|e| ClientError::Flow(format!("--full-log {}: {e}", path.display())))?;
            Some(path.display().to_string())
        }
        None => None,
    };
    let result = latency_result(spec, &outcome, s.opts.histogram, full_log);
    Ok(LatencyOut {
        local,
        remote,
        intervals,
        interrupted,
        result,
    })
}

/// Tells the server's echo to stop and waits for its report: at most [`RESULTS_TIMEOUT`],
/// and no longer than `silence` without a word (the server sends keepalives meanwhile).
fn wait_report(
    conn: &mut ControlConn,
    silence: Duration,
    gone: &dyn Fn(String) -> ClientError,
    ctl_err: impl Fn(ControlError) -> ClientError,
) -> Result<SideReport, ClientError> {
    conn.send(&Message::Stop).map_err(ctl_err)?;
    let deadline = Instant::now() + RESULTS_TIMEOUT;
    let mut heard = Instant::now();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(gone(format!(
                "sent no results within {} s of the end",
                RESULTS_TIMEOUT.as_secs()
            )));
        }
        if heard.elapsed() > silence {
            return Err(gone(format!(
                "sent nothing for {:.0} s (--timeout): the path or the server is down",
                silence.as_secs_f64()
            )));
        }
        match conn.poll(left.min(Duration::from_millis(200))) {
            Ok(Some(Message::Finished { report })) => return Ok(*report),
            Ok(Some(Message::Error { message })) => return Err(ClientError::Server(message)),
            Ok(Some(_)) => heard = Instant::now(),
            Ok(None) => {}
            Err(e) => return Err(gone(format!("failed while sending results: {e}"))),
        }
    }
}

pub(crate) fn emit(
    pinger: &Pinger,
    intervals: &mut Vec<IntervalRecord>,
    observer: &mut dyn Observer,
    start: Duration,
    end: Duration,
    omitted: bool,
) {
    let iv = pinger.take_interval();
    let rec = IntervalRecord {
        index: intervals.len() as u32,
        start: start.as_secs_f64(),
        end: end.as_secs_f64(),
        omitted,
        flows: Vec::new(),
        sums: Vec::new(),
        latency: Some(iv),
        connect: None,
        client_nic: None,
        server_nic: None,
    };
    observer.on_interval(&rec);
    intervals.push(rec);
}

/// The result's latency figures from what the pinger measured.
pub(crate) fn latency_result(
    spec: &LatencySpec,
    o: &PingOutcome,
    histogram: bool,
    full_log: Option<String>,
) -> LatencyResult {
    let rtt = o.hist.stats();
    let sum = |f: fn(&hakaru_model::LatencyFlow) -> u64| o.flows.iter().map(f).sum::<u64>();
    let replies = sum(|f| f.replies);
    LatencyResult {
        transport: spec.transport,
        mode: if spec.rate.is_some() {
            "open_loop"
        } else {
            "closed_loop"
        }
        .into(),
        wait: if spec.spin {
            "spin"
        } else if spec.busy_poll.is_some() {
            "busy_poll"
        } else {
            "blocking"
        }
        .into(),
        seconds: o.seconds,
        requests: sum(|f| f.requests),
        replies,
        lost: sum(|f| f.lost),
        late: sum(|f| f.late),
        transactions_per_second: if o.seconds > 0.0 {
            replies as f64 / o.seconds
        } else {
            0.0
        },
        warmup_discarded: o.warmup_discarded,
        rtt,
        one_way_estimate: rtt.halved(),
        flows: o.flows.clone(),
        histogram: if histogram {
            o.hist.buckets(24)
        } else {
            Vec::new()
        },
        full_log,
        under_load: None,
    }
}

/// Writes every sample as CSV: flow, sequence, send and receive time (microseconds since the
/// test started), round trip (microseconds).
pub(crate) fn write_full_log(path: &std::path::Path, o: &PingOutcome) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(w, "flow,seq,send_us,recv_us,rtt_us")?;
    for s in &o.samples {
        writeln!(
            w,
            "{},{},{:.3},{:.3},{:.3}",
            s.flow,
            s.seq,
            s.send_ns as f64 / 1000.0,
            s.recv_ns as f64 / 1000.0,
            s.recv_ns.saturating_sub(s.send_ns) as f64 / 1000.0
        )?;
    }
    w.flush()
}
