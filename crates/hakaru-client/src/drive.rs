//! The driver of the native client session machine (`hakaru_session::client::Session`): the
//! control socket's I/O and time in, the machine's sends out, and the conversions between
//! the machine's errors and [`ClientError`].

use std::io;
use std::time::{Duration, Instant};

use hakaru_engine::control::{ControlConn, ControlError};
use hakaru_engine::side::MAX_SCHEDULE_WAIT;
use hakaru_engine::Observer;
use hakaru_model::SideReport;
use hakaru_proto::native::opening;
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
        loop {
            while let Some(o) = self.m.poll_output() {
                match o {
                    Output::Open(msg) => {
                        let r = self.conn.send_raw(&opening(&msg));
                        self.sent(msg.name(), r);
                    }
                    Output::Send(msg) => {
                        let r = self.conn.send(&msg);
                        self.sent(msg.name(), r);
                    }
                    other => return other,
                }
            }
            if self.m.is_done() {
                return Output::End(Err(SessionError::Flow(
                    "internal error: the client session ended without saying how".into(),
                )));
            }
            let now = Instant::now();
            let wait = self.m.timeout().map_or(Duration::from_millis(200), |d| {
                d.saturating_duration_since(now)
            });
            match self.conn.poll(wait) {
                Ok(Some(msg)) => self.m.handle(Input::Message(msg), Instant::now()),
                Ok(None) => {}
                Err(e) => self.m.handle(Input::Failed(fault(e)), Instant::now()),
            }
            self.m.handle_timeout(Instant::now());
        }
    }

    /// Tells the machine that a send failed, if it did.
    pub fn sent(&mut self, what: &'static str, r: Result<(), ControlError>) {
        if let Err(e) = r {
            let fault = fault(e);
            self.m
                .handle(Input::SendFailed { what, fault }, Instant::now());
        }
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
}

impl Control {
    /// Carries out the machine's outputs in a latency or connection-rate test: sends, stops,
    /// this end's records to the observer and its report to the machine; the session's end
    /// once the machine gives it (this end stopped first).
    pub fn carry_out(
        &mut self,
        local: &mut dyn Local,
        observer: &mut dyn Observer,
    ) -> Option<Result<Box<Ended>, ClientError>> {
        while let Some(o) = self.m.poll_output() {
            match o {
                Output::Send(msg) => {
                    let r = self.conn.send(&msg);
                    self.sent(msg.name(), r);
                }
                Output::StopSending | Output::AbortLocal => local.stop(),
                Output::Interval(rec) => observer.on_interval(&rec),
                Output::CollectLocal => {
                    let report = Box::new(local.report());
                    self.m.handle(Input::LocalReport(report), Instant::now());
                }
                Output::End(end) => {
                    local.stop();
                    return Some(end.map_err(client_error));
                }
                other => {
                    local.stop();
                    return Some(Err(unexpected_output(other)));
                }
            }
        }
        None
    }

    /// Waits on the control connection no longer than `grain` or the machine's deadline, and
    /// hands the machine what arrived and the time.
    pub fn step(&mut self, grain: Duration) {
        let now = Instant::now();
        let wait = self
            .m
            .timeout()
            .map_or(grain, |d| d.saturating_duration_since(now).min(grain));
        match self.conn.poll(wait) {
            Ok(Some(msg)) => self.m.handle(Input::Message(msg), Instant::now()),
            Ok(None) => {}
            Err(e) => self.m.handle(Input::Failed(fault(e)), Instant::now()),
        }
        self.m.handle_timeout(Instant::now());
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
