//! The client's half of a latency test, the driver of the session machine's latency run:
//! open the flows, ping, hand the machine each interval's record and the pinger's end; the
//! machine keeps the time, stops the server's echo and exchanges the reports.

use hakaru_session::Machine as _;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use hakaru_engine::ping::{self, PingConfig, PingFlow, PingOutcome, PingSocket, Pinger};
use hakaru_engine::tcp::SideConfig;
use hakaru_engine::Observer;
use hakaru_model::{
    End, IntervalRecord, LatencyResult, LatencySpec, LatencyTransport, SideReport, TestSpec,
};
use hakaru_proto::Message;

use hakaru_session::client::Input;

use crate::drive::{Control, Local};
use crate::{udp, ClientError, ClientOptions};

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
}

/// Runs the client end of a latency test after the server accepted it: opens the flows,
/// starts the pinger on the machine's `start`, and feeds the machine the control messages,
/// this end's interval records and the pinger's end until it ends the session.
pub(crate) fn run(
    s: Session<'_>,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<LatencyOut, ClientError> {
    let spec = s.spec;
    let flows: Vec<PingFlow> = open_flows(&s).inspect_err(|e| gave_up(s.ctl, e))?;
    let cfg = SideConfig::for_spec(
        End::Client,
        &TestSpec::Latency(spec.clone()),
        s.opts.affinity.clone(),
        s.iface.clone(),
    );
    // The machine passes the gate and says `flows_ready` as the transport needs.
    s.ctl
        .start(s.opts.gate.as_ref())
        .inspect_err(|e| gave_up(s.ctl, e))?;
    let pinger = Pinger::start(
        PingConfig::for_spec(
            spec,
            s.opts.affinity.clone(),
            s.opts.full_log.is_some(),
            ping::Framing::Hakaru,
        ),
        flows,
    );
    let mut me = Me {
        pinger: None,
        outcome: None,
        cfg,
    };
    let mut clock = match pinger {
        Ok(p) => {
            let clock = Ticks::new(spec, p.started());
            me.pinger = Some(p);
            clock
        }
        Err(e) => {
            let error = Some(format!("starting the ping flows: {e}"));
            s.ctl.m.handle(Input::LocalDone { error }, Instant::now());
            return Err(match s.ctl.carry_out(&mut me, observer) {
                Some(Err(e)) => e,
                _ => ClientError::Flow(
                    "internal error: the pinger's failure did not end the test".into(),
                ),
            });
        }
    };
    let mut pinging = Pinging {
        me: &mut me,
        clock: &mut clock,
    };
    let ended = s.ctl.run_local(&mut pinging, observer, stop)?;
    let (outcome, _) = me.outcome.ok_or_else(|| {
        ClientError::Flow("internal error: the latency test ended without the pinger".into())
    })?;
    let full_log = match &s.opts.full_log {
        Some(path) => {
            write_full_log(path, &outcome)
                .map_err(|e| ClientError::Flow(format!("--full-log {}: {e}", path.display())))?;
            Some(path.display().to_string())
        }
        None => None,
    };
    let result = latency_result(spec, &outcome, s.opts.histogram, full_log);
    let e = *ended;
    Ok(LatencyOut {
        local: e.local,
        remote: e.remote,
        intervals: e.intervals,
        interrupted: e.interrupted,
        result,
    })
}

/// This end of a running latency test, as the driver feeds it to the machine: the pinger and
/// its interval clock.
struct Pinging<'a> {
    me: &'a mut Me,
    clock: &'a mut Ticks,
}

impl Local for Pinging<'_> {
    fn stop(&mut self) {
        self.me.stop();
    }

    fn report(&mut self) -> SideReport {
        self.me.report()
    }

    /// This end's interval records, and the pinger's end.
    fn news(&mut self, m: &mut hakaru_session::client::Session) -> bool {
        let Some(p) = &self.me.pinger else {
            return false;
        };
        if p.is_done() {
            // The interval that ends the test, after the last reply.
            if let Some(rec) = self.clock.last(p) {
                m.handle(Input::LocalInterval(rec), Instant::now());
            }
            let started = p.started();
            let o = self
                .me
                .pinger
                .take()
                .map(|p| (p.wait(), started.elapsed().as_secs_f64()));
            let error = o.as_ref().and_then(|o| o.0.error.clone());
            self.me.outcome = o;
            m.handle(Input::LocalDone { error }, Instant::now());
            return true;
        }
        if let Some(rec) = self.clock.tick(p) {
            m.handle(Input::LocalInterval(rec), Instant::now());
        }
        false
    }
}

/// Opens the test's ping flows: TCP connections, or UDP sockets whose hellos were answered.
fn open_flows(s: &Session<'_>) -> Result<Vec<PingFlow>, ClientError> {
    let spec = s.spec;
    Ok(match spec.transport {
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
    })
}

/// Before `start` the machine ends without a word: the server hears why from here.
fn gave_up(ctl: &mut Control, e: &ClientError) {
    let _ = ctl.conn.send(&Message::Error {
        message: format!("client gave up: {e}"),
    });
}

/// This end of a latency test: the pinger while it runs, then what it measured and the wall
/// time it ran.
struct Me {
    pinger: Option<Pinger>,
    outcome: Option<(PingOutcome, f64)>,
    cfg: SideConfig,
}

impl Local for Me {
    fn stop(&mut self) {
        self.pinger.iter().for_each(Pinger::stop);
    }

    fn report(&mut self) -> SideReport {
        let wall = self.outcome.as_ref().map_or(0.0, |o| o.1);
        ping::bare_report(&self.cfg, wall, "ping")
    }
}

/// When this end's interval records are due: every `interval` from the end of the warm-up,
/// the last one at the test's end.
struct Ticks {
    started: Instant,
    interval: Duration,
    total: Duration,
    last_end: Duration,
    next: Duration,
    index: u32,
}

impl Ticks {
    fn new(spec: &LatencySpec, started: Instant) -> Ticks {
        Ticks {
            started,
            interval: spec.interval.0,
            total: spec.warmup.0 + spec.duration.0,
            last_end: spec.warmup.0,
            next: spec.warmup.0 + spec.interval.0,
            index: 0,
        }
    }

    /// The record of an interval that has ended, if one has (not the last: see [`Ticks::last`]).
    fn tick(&mut self, p: &Pinger) -> Option<Box<IntervalRecord>> {
        let due = !self.interval.is_zero()
            && self.started.elapsed() >= self.next
            && self.next < self.total;
        if !due {
            return None;
        }
        let (start, end) = (self.last_end, self.next);
        self.last_end = end;
        self.next += self.interval;
        Some(self.record(p, start, end))
    }

    /// The interval that ends the test, after the pinger is done.
    fn last(&mut self, p: &Pinger) -> Option<Box<IntervalRecord>> {
        let end = self.started.elapsed().min(self.total).max(self.last_end);
        if self.interval.is_zero() || end <= self.last_end {
            return None;
        }
        let start = self.last_end;
        self.last_end = end;
        Some(self.record(p, start, end))
    }

    fn record(&mut self, p: &Pinger, start: Duration, end: Duration) -> Box<IntervalRecord> {
        let rec = interval_record(p, self.index, start, end, false);
        self.index += 1;
        Box::new(rec)
    }
}

/// One interval's record of what the pinger measured since the last one.
fn interval_record(
    pinger: &Pinger,
    index: u32,
    start: Duration,
    end: Duration,
    omitted: bool,
) -> IntervalRecord {
    IntervalRecord {
        index,
        start: start.as_secs_f64(),
        end: end.as_secs_f64(),
        omitted,
        flows: Vec::new(),
        sums: Vec::new(),
        latency: Some(pinger.take_interval()),
        connect: None,
        client_nic: None,
        server_nic: None,
        probe: None,
    }
}

/// Gives the observer the record of an interval of `pinger`'s, and keeps it (sockperf's
/// client, which runs no session machine).
pub(crate) fn emit(
    pinger: &Pinger,
    intervals: &mut Vec<IntervalRecord>,
    observer: &mut dyn Observer,
    start: Duration,
    end: Duration,
    omitted: bool,
) {
    let rec = interval_record(pinger, intervals.len() as u32, start, end, omitted);
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
        server: None,
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
