//! The driver of the native client session machine (`hakaru_session::client::Session`): the
//! control socket's I/O and time in, the machine's sends out, and the conversions between
//! the machine's errors and [`ClientError`].

use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hakaru_engine::control::{ControlConn, ControlError, Received};
use hakaru_engine::drive::{drive, Carrier, Wait};
use hakaru_engine::side::MAX_SCHEDULE_WAIT;
use hakaru_engine::Observer;
use hakaru_model::SideReport;
use hakaru_proto::native::opening;
use hakaru_proto::Message;
use hakaru_session::client::{Ended, Fault, Input, Output, Session, SessionError};
use hakaru_session::Machine as _;

use crate::{ClientError, StartGate};

/// The control connection and the session machine that decides what is said on it.
pub(crate) struct Control {
    pub conn: ControlConn,
    pub m: Session,
}

impl Control {
    /// Carries out the machine's sends and returns its first other output, reading the
    /// control connection (until the machine's next deadline) while it has none. For the
    /// handshake, while this thread reads the socket.
    pub fn next(&mut self) -> Output {
        drive(
            &mut self.m,
            &mut Pull {
                conn: &mut self.conn,
            },
        )
    }

    /// Tells the machine this end's flows are open, passes the held start's gate when it asks
    /// and returns its start: [`Output::StartLocal`] or [`Output::StartConnecting`].
    pub fn start(&mut self, gate: Option<&StartGate>) -> Result<Output, ClientError> {
        self.start_probed(gate, None)
    }

    /// [`Control::start`] for a test with latency probes: starts them when the machine says
    /// and takes their idle baseline when it is over.
    pub fn start_probed(
        &mut self,
        gate: Option<&StartGate>,
        mut probe: Option<&mut crate::probe::Probe>,
    ) -> Result<Output, ClientError> {
        self.m.handle(Input::FlowsOpen, Instant::now());
        loop {
            match (self.next(), probe.as_deref_mut()) {
                (Output::WaitGate, _) => {
                    let passed = gate.map_or(Ok(None), |g| (g.0)());
                    let input = match passed {
                        Ok(at) => Input::GateOpen {
                            at_unix: self.schedule(at),
                        },
                        Err(why) => Input::GateFailed(why),
                    };
                    self.m.handle(input, Instant::now());
                }
                (Output::StartProbes, Some(p)) => {
                    if let Err(e) = p.start() {
                        let _ = self.conn.send(&hakaru_proto::Message::Error {
                            message: format!("client gave up: {e}"),
                        });
                        return Err(ClientError::Flow(e));
                    }
                }
                (Output::BaselineDone, Some(p)) => p.end_baseline(),
                (o, _) => match o {
                    o @ (Output::StartLocal | Output::StartConnecting { .. }) => return Ok(o),
                    other => return Err(unexpected_output(other)),
                },
            }
        }
    }

    /// The gate's instant for the machine: a test whose data threads wait for it (bulk TCP
    /// and UDP) is scheduled; for any other the instant is waited for here (at most
    /// [`MAX_SCHEDULE_WAIT`]) and the test starts when the server says.
    fn schedule(&self, at: Option<f64>) -> Option<f64> {
        let at = at.filter(|t| t.is_finite() && *t > 0.0)?;
        if hakaru_session::client::can_schedule(self.m.spec()) {
            return Some(at);
        }
        sleep_to(at);
        None
    }

    /// Runs the handshake: the outputs up to the server's `accepted`, whose token it returns.
    pub fn handshake(&mut self) -> Result<String, ClientError> {
        loop {
            match self.next() {
                Output::Accepted { token } => return Ok(token),
                Output::Server(_) => {}
                other => return Err(unexpected_output(other)),
            }
        }
    }
}

/// Sleeps until the instant `at` (Unix seconds) by this machine's clock, at most
/// [`MAX_SCHEDULE_WAIT`]: a start that is not scheduled waits for its coordinator's instant.
pub(crate) fn sleep_to(at: f64) {
    std::thread::sleep(wait_for(at, hakaru_engine::sys::now_unix()));
}

/// How long to wait for the instant `at` (Unix seconds) when the clock reads `now`: not at
/// all once it is past (or when it is not a number), at most [`MAX_SCHEDULE_WAIT`].
fn wait_for(at: f64, now: f64) -> Duration {
    let ahead = at - now;
    if ahead.is_nan() {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(ahead.clamp(0.0, MAX_SCHEDULE_WAIT.as_secs_f64()))
}

/// This end of a latency or connection-rate test, as the test loop's outputs need it.
pub(crate) trait Local {
    /// Stop at once (Ctrl-C, or the test failed).
    fn stop(&mut self);
    /// This end's report, once it is done.
    fn report(&mut self) -> SideReport;
    /// Hands the machine what this end has to say (records, its end): true if it did, and
    /// the driver then does not read the control connection this turn.
    fn news(&mut self, _m: &mut Session) -> bool {
        false
    }
}

impl Control {
    /// Runs a latency or connection-rate test to its end: the control connection, this end's
    /// news and the user's stop in, the machine's outputs carried out.
    pub fn run_local(
        &mut self,
        local: &mut dyn Local,
        observer: &mut dyn Observer,
        stop: &AtomicBool,
    ) -> Result<Box<Ended>, ClientError> {
        let mut c = Looped {
            conn: &mut self.conn,
            local,
            observer,
            stop,
        };
        drive(&mut self.m, &mut c)
    }

    /// Carries out what the machine has to say now (no read): its end, if it gave one.
    pub fn carry_out(
        &mut self,
        local: &mut dyn Local,
        observer: &mut dyn Observer,
    ) -> Option<Result<Box<Ended>, ClientError>> {
        let stop = AtomicBool::new(false);
        let mut c = Looped {
            conn: &mut self.conn,
            local,
            observer,
            stop: &stop,
        };
        match hakaru_engine::drive::carry_out(&mut self.m, &mut c) {
            ControlFlow::Break(end) => Some(end),
            ControlFlow::Continue(()) => None,
        }
    }
}

/// What a read of the native control connection tells the client machine.
fn native_input(got: Received<Message>) -> Option<Input> {
    Some(match got {
        Received::Got(msg) => Input::Message(msg),
        Received::Nothing => return None,
        Received::Closed | Received::Reset(_) => Input::Failed(Fault::Closed),
        Received::Garbage(e) => Input::Failed(Fault::Proto(e)),
        Received::Failed(e) => Input::Failed(Fault::Io(e)),
    })
}

/// Sends `msg`; a send that fails is told to the machine.
pub(crate) fn send(conn: &mut ControlConn, m: &mut Session, msg: &Message) {
    sent(m, msg.name(), conn.send(msg));
}

/// Tells the machine that the send of `what` failed, if it did.
fn sent(m: &mut Session, what: &'static str, r: Result<(), ControlError>) {
    if let Err(e) = r {
        let fault = fault(e);
        m.handle(Input::SendFailed { what, fault }, Instant::now());
    }
}

/// The handshake's and the start's carrier: sends carried out, the first other output ends
/// the drive (the caller acts on it).
struct Pull<'a> {
    conn: &'a mut ControlConn,
}

impl Carrier<Session> for Pull<'_> {
    type Conn = ControlConn;
    type End = Output;

    fn conn(&mut self) -> &mut ControlConn {
        self.conn
    }

    fn act(&mut self, m: &mut Session, out: Output) -> ControlFlow<Output> {
        match out {
            Output::Open(msg) => sent(m, msg.name(), self.conn.send_raw(&opening(&msg))),
            Output::Send(msg) => send(self.conn, m, &msg),
            other => return ControlFlow::Break(other),
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Message>) -> Option<Input> {
        native_input(got)
    }

    fn tick(&self) -> Duration {
        Duration::from_millis(200)
    }

    fn finished(&mut self, _m: &mut Session) -> Output {
        Output::End(Err(SessionError::Flow(
            "internal error: the client session ended without saying how".into(),
        )))
    }
}

/// A latency or connection-rate test's carrier.
struct Looped<'a> {
    conn: &'a mut ControlConn,
    local: &'a mut dyn Local,
    observer: &'a mut dyn Observer,
    stop: &'a AtomicBool,
}

impl Carrier<Session> for Looped<'_> {
    type Conn = ControlConn;
    type End = Result<Box<Ended>, ClientError>;

    fn conn(&mut self) -> &mut ControlConn {
        self.conn
    }

    fn act(&mut self, m: &mut Session, out: Output) -> ControlFlow<Self::End> {
        match out {
            Output::Send(msg) => send(self.conn, m, &msg),
            Output::StopSending | Output::AbortLocal => self.local.stop(),
            Output::Interval(rec) => self.observer.on_interval(&rec),
            Output::CollectLocal => {
                let report = Box::new(self.local.report());
                m.handle(Input::LocalReport(report), Instant::now());
            }
            Output::End(end) => {
                self.local.stop();
                return ControlFlow::Break(end.map_err(client_error));
            }
            other => {
                self.local.stop();
                return ControlFlow::Break(Err(unexpected_output(other)));
            }
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Message>) -> Option<Input> {
        native_input(got)
    }

    /// The interval clock's grain.
    fn tick(&self) -> Duration {
        Duration::from_millis(20)
    }

    /// The user's stop; this end's records and end.
    fn event(&mut self, m: &mut Session, left: Duration) -> Wait {
        if self.stop.load(Ordering::Acquire) {
            m.handle(Input::Stop, Instant::now());
        }
        if self.local.news(m) {
            return Wait::Handled;
        }
        Wait::Read(left)
    }

    fn finished(&mut self, _m: &mut Session) -> Self::End {
        Err(ClientError::Flow(
            "internal error: the test ended without saying how".into(),
        ))
    }
}

/// Gives the observer, and keeps, a record of each of this end's samples waiting in `rx`,
/// alone: for the peer protocols that do not stream the other end's (iperf3, ntttcp).
pub(crate) fn show_local(
    rx: &std::sync::mpsc::Receiver<hakaru_model::IntervalSample>,
    dirs: &std::collections::BTreeMap<u32, hakaru_model::FlowDir>,
    observer: &mut dyn Observer,
    intervals: &mut Vec<hakaru_model::IntervalRecord>,
) {
    while let Ok(s) = rx.try_recv() {
        let rec = hakaru_model::merge_interval(Some(&s), None, dirs);
        observer.on_interval(&rec);
        intervals.push(rec);
    }
}

/// An output a driver did not expect at that point: the session's error, or an internal one.
pub(crate) fn unexpected_output(o: Output) -> ClientError {
    match o {
        Output::End(Err(e)) => client_error(e),
        other => ClientError::Flow(format!(
            "internal error: the client session asked for {other:?} out of turn"
        )),
    }
}

/// What the machine is told about a failed read or write.
pub(crate) fn fault(e: ControlError) -> Fault {
    match e {
        ControlError::Closed => Fault::Closed,
        ControlError::Timeout(s) => Fault::Timeout(s),
        ControlError::Proto(p) => Fault::Proto(p),
        ControlError::Io(e) => Fault::Io(e.to_string()),
    }
}

fn control_error(f: Fault) -> ControlError {
    match f {
        Fault::Closed => ControlError::Closed,
        Fault::Timeout(s) => ControlError::Timeout(s),
        Fault::Proto(p) => ControlError::Proto(p),
        Fault::Io(e) => ControlError::Io(io::Error::other(e)),
    }
}

/// The machine's error as the client's (same variants, same texts).
pub(crate) fn client_error(e: SessionError) -> ClientError {
    match e {
        SessionError::NotHakaru { addr, detail } => ClientError::NotHakaru { addr, detail },
        SessionError::Refused(r) => ClientError::Refused(r),
        SessionError::Server(m) => ClientError::Server(m),
        SessionError::Auth(m) => ClientError::Auth(m),
        SessionError::Control { addr, fault } => ClientError::Control {
            addr,
            source: control_error(fault),
        },
        SessionError::Unexpected { addr, what } => ClientError::Unexpected { addr, what },
        SessionError::Gone { addr, what } => ClientError::ServerGone { addr, what },
        SessionError::Flow(m) => ClientError::Flow(m),
        SessionError::CalledOff(m) => ClientError::CalledOff(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_proto::ProtoError;

    #[test]
    fn an_instant_is_waited_for_but_never_past_the_cap() {
        assert_eq!(wait_for(100.25, 100.0), Duration::from_millis(250));
        assert_eq!(wait_for(99.0, 100.0), Duration::ZERO);
        // A clock far behind the coordinator's holds the start back by the cap only.
        assert_eq!(wait_for(500.0, 100.0), MAX_SCHEDULE_WAIT);
        // Whatever a gate gives (StartGate is public): no panic.
        assert_eq!(wait_for(f64::NAN, 100.0), Duration::ZERO);
        assert_eq!(wait_for(f64::INFINITY, 100.0), MAX_SCHEDULE_WAIT);
        assert_eq!(wait_for(f64::NEG_INFINITY, 100.0), Duration::ZERO);
    }

    #[test]
    fn the_machines_errors_read_as_the_clients() {
        let addr = || "192.0.2.1:5201".to_string();
        let all = [
            SessionError::NotHakaru {
                addr: addr(),
                detail: "it answered the hello with start".into(),
            },
            SessionError::Refused("no".into()),
            SessionError::Server("boom".into()),
            SessionError::Auth("wrong key".into()),
            SessionError::Control {
                addr: addr(),
                fault: Fault::Closed,
            },
            SessionError::Control {
                addr: addr(),
                fault: Fault::Timeout(10.0),
            },
            SessionError::Control {
                addr: addr(),
                fault: Fault::Proto(ProtoError::Malformed("eof".into())),
            },
            SessionError::Control {
                addr: addr(),
                fault: Fault::Io("Broken pipe (os error 32)".into()),
            },
            SessionError::Unexpected {
                addr: addr(),
                what: "start message during the test".into(),
            },
            SessionError::Gone {
                addr: addr(),
                what: "sent no results within 20 s of the end".into(),
            },
            SessionError::Flow("flow 1: reset".into()),
            SessionError::CalledOff("stdin closed".into()),
        ];
        for e in all {
            assert_eq!(client_error(e.clone()).to_string(), e.to_string());
        }
        // And a read failure reaches the machine with the transport's own words.
        let io = ControlError::Io(io::Error::new(io::ErrorKind::BrokenPipe, "gone"));
        let text = io.to_string();
        assert_eq!(fault(io).to_string(), text);
        assert_eq!(
            control_error(Fault::Timeout(12.0)).to_string(),
            "no control message within 12.0 s"
        );
    }
}
