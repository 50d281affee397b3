//! `hakaru tcp HOST --ntttcp`: a TCP test into a stock `ntttcp -r` (ntttcp-for-linux).
//!
//! The sync dialogue is ntttcp's (`hakaru_session::ntttcp::client`, on the receiver's first
//! data port minus one); flow i connects to the first data port plus i, as `ntttcp -s -m
//! P,*,HOST` does, so the receiver must listen on at least `-P` ports (its `-P` or `-m`,
//! 16 by default). ntttcp carries no results on the wire: the receiver prints its own total,
//! and the receiver figures in hakaru's result are this end's sender view (the result's notes
//! say so).

use hakaru_engine::control::{RawConn, Received, Transport};
use hakaru_engine::drive::{raw_input, Carrier, OnReset, Wait};
use hakaru_session::Machine as _;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::sockopt::apply_tcp_options;
use hakaru_engine::tcp::{FlowSocket, SideConfig, SideRun};
use hakaru_engine::{sys, Observer};
use hakaru_model::{
    assemble, Amount, Direction, End, Environment, FlowDir, FlowSide, IntervalSample, Role,
    RunResult, SideReport, TcpSpec, TestSpec,
};
use hakaru_proto::ntttcp::{command_duration, word_name, MAX_PORTS};
use hakaru_session::ntttcp::client::{self as machine, Input, Output};

use crate::{connect_one, ClientError, ClientOptions};

/// The note every `--ntttcp` result carries.
pub const NO_RECEIVER_REPORT: &str = "peer: a stock ntttcp receiver (--ntttcp); ntttcp carries \
     no results on the wire, so the receiver figures here are this end's sender view (bytes \
     written and acknowledged); the receiver prints its own total";
/// A stock receiver zeroes its counters just after it answers 'R'; data that beat the reset
/// would be missing from its total, so the flows start this much later.
const START_DELAY: Duration = Duration::from_millis(20);
/// Longest the client waits for its sent data to be read before it tells the receiver.
const LAND_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the receiver's advertised windows must stay unchanged: it has read what it will.
const LAND_STEADY: Duration = Duration::from_millis(100);

/// The TCP test `spec` as ntttcp can run it: forward, timed, at most 512 flows.
fn check(spec: &TestSpec) -> Result<(&TcpSpec, i32), ClientError> {
    let refuse = |why: String| {
        Err(ClientError::Refused(format!(
            "(checked locally) --ntttcp: {why}"
        )))
    };
    let TestSpec::Tcp(t) = spec else {
        return refuse("only `hakaru tcp` runs against an ntttcp receiver".into());
    };
    if t.direction != Direction::Forward {
        return refuse(
            "an ntttcp receiver only receives: -R and --bidir need a hakaru server".into(),
        );
    }
    let Amount::Time(time) = t.amount else {
        return refuse("ntttcp tests are timed: use -t, not -n or -k".into());
    };
    if t.flows > u32::from(MAX_PORTS) {
        return refuse(format!(
            "-P {}: flow i goes to data port PORT + i, and an ntttcp receiver listens on at most {MAX_PORTS} ports",
            t.flows
        ));
    }
    let secs = (time.0 + t.omit.0).as_secs_f64().ceil().max(1.0);
    let proposed = i32::try_from(secs as i64).unwrap_or(i32::MAX);
    if let Some(c) = command_duration(proposed) {
        return refuse(format!(
            "a test of {proposed} s reads as the command '{c}' in ntttcp's sync protocol (stock ntttcp has the same flaw); pick another -t"
        ));
    }
    Ok((t, proposed))
}

/// Runs `opts.spec` into a stock `ntttcp -r` whose first data port is `opts.port`.
pub(crate) fn run(
    opts: &ClientOptions,
    observer: &mut dyn Observer,
    stop: Arc<AtomicBool>,
) -> Result<RunResult, ClientError> {
    let (t, proposed) = check(&opts.spec)?;
    let sync_port = opts.port.checked_sub(1).ok_or_else(|| {
        ClientError::Refused("(checked locally) --ntttcp: the first data port cannot be 0".into())
    })?;
    let sync_opts = ClientOptions {
        port: sync_port,
        ..opts.clone()
    };
    let (stream, sync_addr) = crate::connect_control(&sync_opts)?;
    let server = SocketAddr::new(sync_addr.ip(), opts.port);
    let local_address = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let iface = stream
        .local_addr()
        .ok()
        .and_then(|a| sys::interface_for_addr(a.ip()));
    let (tx, rx) = mpsc::channel();
    let mut d = Driver {
        opts,
        t,
        // Sync words are 4 bytes: a short buffer serves.
        sync: RawConn::new(stream, Duration::from_secs(5), 64),
        server,
        addr: server.to_string(),
        cfg: Some(SideConfig::for_spec(
            End::Client,
            &opts.spec,
            opts.affinity.clone(),
            iface,
        )),
        tx: Some(tx),
        rx,
        flows: Vec::new(),
        held: Vec::new(),
        run: None,
        started: None,
        started_unix: 0.0,
        intervals: Vec::new(),
        dirs: opts.spec.flow_plan().into_iter().collect(),
        local: None,
    };
    let mut m = machine::Session::new(proposed, Instant::now());
    let driven = d.drive(&mut m, observer, &stop);
    drop(std::mem::take(&mut d.held));
    let interrupted = driven?;
    let local = d.local.take().ok_or_else(|| {
        ClientError::Flow("internal error: the ntttcp session ended without a report".into())
    })?;
    if let Some(e) = local.flows.iter().find_map(|f| f.error.clone()) {
        return Err(ClientError::Flow(e));
    }
    let mut notes = vec![NO_RECEIVER_REPORT.to_string()];
    if m.cycle() != proposed {
        notes.push(format!(
            "the ntttcp receiver's cycle was {} s (this end proposed {proposed} s and sent for its own -t)",
            m.cycle()
        ));
    }
    let result = assemble(hakaru_model::AssembleInputs {
        ipv6: server.is_ipv6(),
        spec: opts.spec.clone(),
        server: d.addr.clone(),
        embedded: opts.embedded,
        local_address,
        remote_address: d.addr.clone(),
        started_unix: d.started_unix,
        intervals: std::mem::take(&mut d.intervals),
        remote: receiver_view(&local),
        local,
        interrupted,
        notes,
    });
    observer.on_end(&result);
    Ok(result)
}

/// The receiver's side as far as the sender knows it: what it wrote, flow by flow.
fn receiver_view(local: &SideReport) -> SideReport {
    let flows = local
        .flows
        .iter()
        .map(|f| FlowSide {
            role: Role::Receiver,
            tcp_info: None,
            ..f.clone()
        })
        .collect();
    SideReport {
        env: Environment {
            software: "ntttcp".into(),
            ..Environment::default()
        },
        window_start_unix: local.window_start_unix,
        window_end_unix: local.window_end_unix,
        ..SideReport::flows_only(End::Server, flows)
    }
}

/// The I/O half of a `--ntttcp` run.
struct Driver<'a> {
    opts: &'a ClientOptions,
    t: &'a TcpSpec,
    sync: RawConn,
    server: SocketAddr,
    addr: String,
    cfg: Option<SideConfig>,
    tx: Option<mpsc::Sender<IntervalSample>>,
    rx: mpsc::Receiver<IntervalSample>,
    flows: Vec<FlowSocket>,
    /// Duplicates of the data sockets, closed only when the sync session is over: a stock
    /// receiver's threads wait for the next event on their sockets without a timeout and look
    /// at the test's state only then, so the connections must end after its test has (after
    /// our 'E' and its answer), or those threads never see the end and it never exits.
    held: Vec<TcpStream>,
    run: Option<SideRun>,
    started: Option<Instant>,
    started_unix: f64,
    intervals: Vec<hakaru_model::IntervalRecord>,
    dirs: BTreeMap<u32, FlowDir>,
    local: Option<SideReport>,
}

/// A run's driver with what only the run has: its observer and the user's stop.
struct Carried<'d, 'a> {
    d: &'d mut Driver<'a>,
    observer: &'d mut dyn Observer,
    stop: &'d AtomicBool,
    told_stop: bool,
}

impl Carrier<machine::Session> for Carried<'_, '_> {
    type Conn = RawConn;
    /// `Ok(interrupted)`.
    type End = Result<bool, ClientError>;

    fn conn(&mut self) -> &mut RawConn {
        &mut self.d.sync
    }

    fn act(&mut self, m: &mut machine::Session, out: Output) -> ControlFlow<Self::End> {
        if let Output::End(how) = out {
            if let Some(run) = self.d.run.take() {
                run.abort();
                self.d.local.get_or_insert(run.wait());
            }
            self.d.show(self.observer);
            return ControlFlow::Break(how.map_err(|e| self.d.error(e)));
        }
        if let Err(e) = self.d.act(m, out, self.observer) {
            m.handle(Input::Failed(e), Instant::now());
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Vec<u8>>) -> Option<Input> {
        raw_input(
            got,
            OnReset::Fail,
            Input::Bytes,
            || Input::Closed,
            Input::ReadFailed,
        )
    }

    fn tick(&self) -> Duration {
        Duration::from_millis(20)
    }

    /// Live intervals, the user's stop, this end's side done.
    fn event(&mut self, m: &mut machine::Session, left: Duration) -> Wait {
        self.d.show(self.observer);
        if !self.told_stop && self.stop.load(Ordering::Acquire) {
            self.told_stop = true;
            m.handle(Input::Interrupt, Instant::now());
            return Wait::Handled;
        }
        if self.d.run.as_ref().is_some_and(|r| r.is_done()) {
            let ran = self.d.finish_side();
            m.handle(Input::SideDone { ran }, Instant::now());
            return Wait::Handled;
        }
        Wait::Read(left)
    }

    fn finished(&mut self, _m: &mut machine::Session) -> Self::End {
        Err(ClientError::Flow(
            "internal error: the ntttcp session ended without saying how".into(),
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
            told_stop: false,
        };
        hakaru_engine::drive::drive(m, &mut c)
    }

    /// Live intervals: this end's numbers only.
    fn show(&mut self, observer: &mut dyn Observer) {
        crate::drive::show_local(&self.rx, &self.dirs, observer, &mut self.intervals);
    }

    fn act(
        &mut self,
        m: &mut machine::Session,
        out: Output,
        observer: &mut dyn Observer,
    ) -> Result<(), String> {
        match out {
            // A write that fails is the receiver gone: the next read says so.
            Output::Send(w) => {
                let _ = self.sync.send(&w);
            }
            Output::OpenData(_) => {
                self.open().map_err(|e| e.to_string())?;
                m.handle(Input::Opened, Instant::now());
            }
            Output::StartSide => {
                std::thread::sleep(START_DELAY);
                self.start().map_err(|e| e.to_string())?;
                observer.on_start(&self.opts.spec, &self.addr, self.opts.embedded);
            }
            Output::StopSide => {
                if let Some(run) = &self.run {
                    run.stop_sending();
                }
            }
            Output::AbortSide => {
                if let Some(run) = self.run.take() {
                    run.abort();
                    self.local = Some(run.wait());
                }
            }
            Output::End(_) => {}
        }
        Ok(())
    }

    /// Opens flow i to the first data port plus i.
    fn open(&mut self) -> Result<(), ClientError> {
        let opts = self.opts;
        for (i, (id, _)) in (0u32..).zip(opts.spec.flow_plan()) {
            let port = u16::try_from(u32::from(self.server.port()) + i).map_err(|_| {
                ClientError::Data {
                    flow: id,
                    reason: "its data port would be past 65535".into(),
                }
            })?;
            let to = SocketAddr::new(self.server.ip(), port);
            let stream = connect_one(to, opts.bind, opts.connect_timeout, |sock| {
                apply_tcp_options(sock, self.t, to.is_ipv6(), true).map_err(ClientError::from)
            })
            .map_err(|e| ClientError::Data {
                flow: id,
                reason: format!("ntttcp data port {port}: {e}"),
            })?;
            if let Ok(dup) = stream.try_clone() {
                self.held.push(dup);
            }
            self.flows.push(FlowSocket {
                id,
                dir: FlowDir::Up,
                role: Role::Sender,
                stream,
                quota: None,
            });
        }
        Ok(())
    }

    fn start(&mut self) -> Result<(), ClientError> {
        let (Some(mut cfg), Some(tx)) = (self.cfg.take(), self.tx.take()) else {
            return Err(ClientError::Flow("internal error: started twice".into()));
        };
        // No FIN when the time is up: the connections end with the session (`held`).
        cfg.half_close = false;
        let on_interval = Box::new(move |s| {
            let _ = tx.send(s);
        });
        let flows = std::mem::take(&mut self.flows);
        self.run = Some(SideRun::start(cfg, flows, on_interval, Box::new(|| {}))?);
        self.started = Some(Instant::now());
        self.started_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Ok(())
    }

    /// The senders are done: let what they sent be read (a stock receiver counts what it has
    /// read when the sender says 'E'), then take this end's report. How long it sent.
    fn finish_side(&mut self) -> Duration {
        let ran = self.started.map_or(Duration::ZERO, |s| s.elapsed());
        let Some(run) = self.run.take() else {
            return ran;
        };
        let t = Instant::now();
        let mut last_window = 0;
        let mut steady_since = Instant::now();
        while t.elapsed() < LAND_TIMEOUT && steady_since.elapsed() < LAND_STEADY {
            std::thread::sleep(Duration::from_millis(2));
            let (unacked, window) = run.send_state();
            if unacked > 0 || window > last_window {
                steady_since = Instant::now();
            }
            last_window = window;
        }
        self.local = Some(run.wait());
        ran
    }

    /// The machine's error as the client says it.
    fn error(&self, e: machine::Error) -> ClientError {
        let addr = self.addr.clone();
        match e {
            machine::Error::Busy => ClientError::Refused(format!(
                "the ntttcp receiver at {addr} is busy running a test; try again later"
            )),
            machine::Error::Refused(w) => ClientError::Refused(format!(
                "the ntttcp receiver at {addr} answered {} to 'R' (not ready for this sender; with -M it waits for a sender with -L)",
                word_name(w)
            )),
            machine::Error::Unexpected { word, waiting_for } => ClientError::Unexpected {
                addr,
                what: format!("sync word {} while waiting for {waiting_for}", word_name(word)),
            },
            machine::Error::Gone(what) => ClientError::ServerGone { addr, what },
            machine::Error::Flow(e) => ClientError::Flow(e),
            machine::Error::Interrupted => {
                ClientError::Flow("interrupted before the test started".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{Bytes, Dur};

    fn tcp(f: impl FnOnce(&mut TcpSpec)) -> TestSpec {
        let mut t = TcpSpec::default();
        f(&mut t);
        TestSpec::Tcp(t)
    }

    fn refusal(spec: &TestSpec) -> String {
        match check(spec) {
            Err(ClientError::Refused(why)) => why,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_proposal_is_the_whole_cycle_in_whole_seconds() {
        let spec = tcp(|t| {
            t.amount = Amount::Time(Dur::from_secs(5));
            t.omit = Dur(Duration::from_millis(1500));
        });
        assert_eq!(check(&spec).map(|(_, p)| p).ok(), Some(7));
        let short = tcp(|t| t.amount = Amount::Time(Dur(Duration::from_millis(300))));
        assert_eq!(check(&short).map(|(_, p)| p).ok(), Some(1));
    }

    #[test]
    fn what_ntttcp_cannot_run_is_refused_by_name() {
        let r = refusal(&tcp(|t| t.amount = Amount::Time(Dur::from_secs(82))));
        assert!(r.contains("82 s") && r.contains("'R'"), "{r}");
        let r = refusal(&tcp(|t| t.direction = Direction::Reverse));
        assert!(r.contains("only receives"), "{r}");
        let r = refusal(&tcp(|t| t.amount = Amount::Bytes(Bytes(1 << 20))));
        assert!(r.contains("-n"), "{r}");
        let r = refusal(&tcp(|t| t.flows = 513));
        assert!(r.contains("-P 513") && r.contains("512"), "{r}");
    }

    #[test]
    fn the_receiver_view_is_this_ends_bytes_as_received() {
        let f = FlowSide {
            id: 3,
            dir: FlowDir::Up,
            role: Role::Sender,
            bytes: 1234,
            omitted_bytes: 0,
            late_bytes: 0,
            late_seconds: 0.0,
            calls: 2,
            seconds: 2.0,
            tcp_info: None,
            udp: None,
            mptcp: None,
            error: None,
        };
        let local = SideReport::flows_only(End::Client, vec![f]);
        let v = receiver_view(&local);
        assert_eq!(v.end, End::Server);
        assert_eq!(v.env.software, "ntttcp");
        let g = v.flows.first().expect("one flow");
        assert_eq!((g.id, g.role, g.bytes), (3, Role::Receiver, 1234));
    }
}
