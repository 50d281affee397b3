//! hakaru's `--iperf3` client session against a stock iperf3 server, as a machine.
//!
//! ```text
//! cookie -> PARAM_EXCHANGE -> params -> CREATE_STREAMS -> [streams] -> TEST_START, TEST_RUNNING
//!   -> [test] -> [land] -> TEST_END -> [drain] -> EXCHANGE_RESULTS -> results both ways
//!   -> DISPLAY_RESULTS -> IPERF_DONE
//! ```
//!
//! The bracketed steps are the driver's (hakaru-client's `iperf3`): it opens the streams, runs
//! the engine, decides with the engine when an amount (`-n`, `-k`) is done, lets sent data land
//! before TEST_END and drains the receivers after it. This end decides when the test is over,
//! as iperf3's own client does.

use crate::Machine as _;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hakaru_proto::iperf3::{self as wire, encode_json, Inbox, Results, State};
use serde_json::Value;

/// How long each step of the dialogue may take.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the i_errno after a SERVER_ERROR may take.
pub const ERRNO_TIMEOUT: Duration = Duration::from_secs(2);

/// What happens to a session.
#[derive(Debug)]
pub enum Input {
    /// Bytes read from the control connection.
    Bytes(Vec<u8>),
    /// Reading the control connection failed (not a close).
    ReadFailed(String),
    /// The server closed the control connection.
    Closed,
    /// The answer to [`Output::OpenStreams`]: every stream is open.
    StreamsOpen,
    /// A test of an amount (`-n`, `-k`): the engine moved it.
    AmountDone,
    /// The user stopped the test (Ctrl-C): it ends as if its time were up.
    Interrupt,
    /// A data stream failed.
    SideFailed(String),
    /// The answer to [`Output::Land`].
    Landed,
    /// The answer to [`Output::Drain`]: this end's results.
    SideDone(Box<Results>),
    /// Something the driver was asked to do failed. Queued outputs are dropped.
    Failed(Error),
}

/// What the driver does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write these bytes.
    Send(Vec<u8>),
    /// Open the data streams (with the cookie) and answer [`Input::StreamsOpen`].
    OpenStreams,
    /// Start the engine: data may flow.
    StartSide,
    /// The test is over at this end: senders stop; let sent data land at the server (a stock
    /// server counts what it has read when TEST_END arrives) and answer [`Input::Landed`].
    Land,
    /// TEST_END went: let the receivers finish and answer [`Input::SideDone`].
    Drain,
    /// The server's results, for the remote side of the result (a driver that cannot read
    /// them answers [`Input::Failed`]).
    Results(Box<Results>),
    /// Tear the engine down: the test failed.
    AbortSide,
    /// The session is over: `Ok(interrupted)` after the results exchange.
    End(Result<bool, Error>),
}

/// Why a session failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// ACCESS_DENIED: the server is busy with another test.
    Busy,
    /// SERVER_ERROR with this i_errno.
    ServerError(i32),
    /// SERVER_TERMINATE.
    Terminated,
    /// A state that does not fit the step.
    Unexpected {
        /// The state.
        state: State,
        /// What the client was waiting for.
        waiting_for: &'static str,
    },
    /// The control connection closed, failed or went quiet.
    Gone(String),
    /// The server's results do not read.
    BadResults(String),
    /// A data stream failed.
    Flow(String),
}

#[derive(Debug)]
enum Phase {
    /// Waiting for a state byte.
    Await {
        want: State,
        waiting_for: &'static str,
        deadline: Instant,
    },
    /// The driver opens the streams.
    Opening,
    /// The test runs; a timed one ends at `end_at`.
    Running {
        end_at: Option<Instant>,
    },
    /// The driver lets the data land.
    Landing,
    /// The driver drains the receivers.
    Draining,
    /// The server's results are due.
    Results {
        deadline: Instant,
    },
    /// SERVER_ERROR arrived; its i_errno is due.
    Errno {
        deadline: Instant,
    },
    Over,
}

/// The `--iperf3` client session machine.
#[derive(Debug)]
pub struct Session {
    inbox: Inbox,
    phase: Phase,
    out: VecDeque<Output>,
    params: Value,
    /// The test's time (warm-up included); `None` for an amount.
    timed: Option<Duration>,
    interrupted: bool,
    side_up: bool,
}

impl Session {
    /// A session that sends `cookie` and then, when asked, the parameter document `params`.
    pub fn new(cookie: &[u8], params: Value, timed: Option<Duration>, now: Instant) -> Session {
        let mut s = Session {
            inbox: Inbox::new(),
            phase: Phase::Over,
            out: VecDeque::new(),
            params,
            timed,
            interrupted: false,
            side_up: false,
        };
        s.out.push_back(Output::Send(cookie.to_vec()));
        s.expect(State::ParamExchange, "waiting for PARAM_EXCHANGE", now);
        s
    }

    /// The test runs (the engine is started and the results are not yet due).
    pub fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running { .. })
    }

    /// The test is over at this end.
    fn over(&mut self) {
        self.out.push_back(Output::Land);
        self.phase = Phase::Landing;
    }

    fn expect(&mut self, want: State, waiting_for: &'static str, now: Instant) {
        self.phase = Phase::Await {
            want,
            waiting_for,
            deadline: now + STEP_TIMEOUT,
        };
        self.parse(now);
    }

    /// Takes what the inbox holds, as the phase reads it.
    fn parse(&mut self, now: Instant) {
        loop {
            let before = self.inbox.buffered();
            match &self.phase {
                Phase::Await {
                    want, waiting_for, ..
                } => {
                    let (want, waiting_for) = (*want, *waiting_for);
                    let Some(st) = self.inbox.take_state() else {
                        return;
                    };
                    if st == want {
                        self.step(st, now);
                    } else {
                        self.unexpected(st, waiting_for, now);
                    }
                }
                Phase::Running { .. } => {
                    let Some(st) = self.inbox.take_state() else {
                        return;
                    };
                    self.unexpected(st, "the test ran", now);
                }
                Phase::Results { .. } => match self.inbox.take_results(wire::MAX_RESULTS_JSON) {
                    Ok(Some(r)) => {
                        self.out.push_back(Output::Results(Box::new(r)));
                        self.expect(State::DisplayResults, "waiting for DISPLAY_RESULTS", now);
                    }
                    Ok(None) => return,
                    Err(e) => return self.fail(Error::BadResults(e.to_string())),
                },
                Phase::Errno { .. } => {
                    let Some(w) = self.inbox.take_exact(4) else {
                        return;
                    };
                    let code = <[u8; 4]>::try_from(w.as_slice()).map_or(0, i32::from_be_bytes);
                    return self.fail(Error::ServerError(code));
                }
                // Bytes wait in the inbox while the driver works.
                Phase::Opening | Phase::Landing | Phase::Draining | Phase::Over => return,
            }
            if self.is_done() || self.inbox.buffered() == before {
                return;
            }
        }
    }

    /// The expected state arrived.
    fn step(&mut self, st: State, now: Instant) {
        match st {
            State::ParamExchange => {
                self.out.push_back(Output::Send(encode_json(&self.params)));
                self.expect(State::CreateStreams, "waiting for CREATE_STREAMS", now);
            }
            State::CreateStreams => {
                self.out.push_back(Output::OpenStreams);
                self.phase = Phase::Opening;
            }
            State::TestStart => self.expect(State::TestRunning, "waiting for TEST_RUNNING", now),
            State::TestRunning => {
                self.out.push_back(Output::StartSide);
                self.side_up = true;
                self.phase = Phase::Running {
                    end_at: self.timed.map(|t| now + t),
                };
            }
            State::ExchangeResults => {
                let mine = std::mem::take(&mut self.params);
                self.out.push_back(Output::Send(encode_json(&mine)));
                self.phase = Phase::Results {
                    deadline: now + STEP_TIMEOUT,
                };
            }
            State::DisplayResults => {
                // Our last word; then the driver closes (3.21 servers wait for the close).
                self.out
                    .push_back(Output::Send(vec![State::IperfDone.byte()]));
                let interrupted = self.interrupted;
                self.end(Ok(interrupted));
            }
            _ => {}
        }
    }

    fn unexpected(&mut self, st: State, waiting_for: &'static str, now: Instant) {
        match st {
            State::AccessDenied => self.fail(Error::Busy),
            State::ServerTerminate => self.fail(Error::Terminated),
            State::ServerError => {
                self.phase = Phase::Errno {
                    deadline: now + ERRNO_TIMEOUT,
                };
            }
            state => self.fail(Error::Unexpected { state, waiting_for }),
        }
    }

    fn fail(&mut self, e: Error) {
        if self.side_up {
            self.side_up = false;
            self.out.push_back(Output::AbortSide);
        }
        self.end(Err(e));
    }

    fn end(&mut self, how: Result<bool, Error>) {
        self.out.push_back(Output::End(how));
        self.phase = Phase::Over;
    }
}

impl crate::Machine for Session {
    type Input = Input;
    type Output = Output;

    /// Takes one input.
    fn handle(&mut self, input: Input, now: Instant) {
        if self.is_done() {
            return;
        }
        match input {
            Input::Bytes(b) => {
                self.inbox.feed(&b);
                self.parse(now);
            }
            Input::Closed => self.fail(Error::Gone(
                "closed the control connection (is it an iperf3 server?)".into(),
            )),
            Input::ReadFailed(e) => self.fail(Error::Gone(format!("control connection: {e}"))),
            Input::StreamsOpen if matches!(self.phase, Phase::Opening) => {
                self.expect(State::TestStart, "waiting for TEST_START", now)
            }
            Input::AmountDone if self.is_running() => self.over(),
            Input::Interrupt if self.is_running() => {
                self.interrupted = true;
                self.over();
            }
            Input::SideFailed(e) if self.is_running() => {
                self.out
                    .push_back(Output::Send(vec![State::ClientTerminate.byte()]));
                self.fail(Error::Flow(e));
            }
            Input::Landed if matches!(self.phase, Phase::Landing) => {
                self.out
                    .push_back(Output::Send(vec![State::TestEnd.byte()]));
                self.out.push_back(Output::Drain);
                self.phase = Phase::Draining;
            }
            Input::SideDone(mine) if matches!(self.phase, Phase::Draining) => {
                self.side_up = false;
                self.params = mine.to_json();
                self.expect(State::ExchangeResults, "waiting for EXCHANGE_RESULTS", now);
            }
            Input::Failed(e) => {
                self.out.clear();
                self.fail(e);
            }
            _ => {}
        }
    }

    /// Acts on whatever deadline `now` has reached.
    fn handle_timeout(&mut self, now: Instant) {
        match &self.phase {
            Phase::Await { deadline, .. } | Phase::Results { deadline } if now >= *deadline => {
                self.fail(Error::Gone(format!(
                    "nothing arrived on the control connection within {:.1} s",
                    STEP_TIMEOUT.as_secs_f64()
                )));
            }
            Phase::Errno { deadline } if now >= *deadline => self.fail(Error::ServerError(0)),
            Phase::Running { end_at: Some(t) } if now >= *t => self.over(),
            _ => {}
        }
    }

    /// When the machine next needs [`Session::handle_timeout`].
    fn timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Await { deadline, .. }
            | Phase::Results { deadline }
            | Phase::Errno { deadline } => Some(*deadline),
            Phase::Running { end_at } => *end_at,
            Phase::Opening | Phase::Landing | Phase::Draining | Phase::Over => None,
        }
    }

    /// The next action, until `None`.
    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The session is over.
    fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Over)
    }
}
