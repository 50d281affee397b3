//! A stock iperf3 client's control session on `hakaru server`, as a machine.
//!
//! iperf3's control connection carries single state bytes and length-framed JSON documents
//! (`hakaru_proto::iperf3`); the machine takes the raw bytes as they arrive and keeps iperf3's
//! order of things:
//!
//! ```text
//! PARAM_EXCHANGE -> params -> [check, admit] -> CREATE_STREAMS -> streams -> TEST_START,
//!   TEST_RUNNING -> ... TEST_END -> EXCHANGE_RESULTS -> results both ways -> DISPLAY_RESULTS
//!   -> IPERF_DONE
//! ```
//!
//! The machine checks the parameters against iperf3's rules and the server's limits
//! ([`super::plan`]) and makes this end's results from the driver's report
//! ([`super::results`]). The driver (hakaru-server's `iperf3`) admits the test (memory, a
//! slot), holds the data streams and runs the engine; it answers what the machine asks.

use crate::Machine as _;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hakaru_proto::iperf3::{self as wire, encode_json, errno, Inbox, Params, State};

use super::plan::{check, Limits, Plan};
use super::results::{answer_results, Collected, ServerOutput};

/// How long the client may take to send its parameters.
pub const PARAMS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the data streams may take to arrive.
pub const STREAMS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the client may take to send its results.
pub const RESULTS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server waits for the client's IPERF_DONE.
pub const DONE_TIMEOUT: Duration = Duration::from_secs(10);
/// Past the test's own length, how long a timed test may run before the server gives up on
/// the client (stock iperf3's grace); also the grace past `--max-duration`.
pub const GRACE: Duration = Duration::from_secs(40);
/// A test without a time limit (`-n`, `-k`) whose data stops moving this long is over.
pub const IDLE_LIMIT: Duration = Duration::from_secs(120);

/// What the session needs to know of the server.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The server's limits; `--max-duration` also cuts a running test off that long (plus
    /// [`GRACE`]) after it starts.
    pub limits: Limits,
    /// How the server's output is written for a client that asks for it; `None`: such a
    /// client gets none.
    pub server_output: Option<ServerOutput>,
}

/// What happens to a session.
#[derive(Debug)]
pub enum Input {
    /// Bytes read from the control connection.
    Bytes(Vec<u8>),
    /// Reading the control connection failed (not a close).
    ReadFailed(String),
    /// The client closed the control connection.
    Closed,
    /// The answer to [`Output::Admit`]: the test fits; its data streams (as many as the
    /// plan's flows) may come.
    Admitted,
    /// The answer to [`Output::Admit`]: the test breaks a rule of the server (told to the
    /// client with SERVER_ERROR and this i_errno).
    Invalid(i32, String),
    /// The answer to [`Output::Admit`]: the test is valid but does not fit now (the client is
    /// told ACCESS_DENIED, as stock iperf3 says it is busy).
    Busy(String),
    /// A data stream of the test arrived.
    StreamArrived,
    /// Something the driver was asked to do failed; the client hears this i_errno. The
    /// outputs queued after the one that failed are dropped.
    Failed(i32, String),
    /// The data plane ended: its senders sent their share (or it drained after TEST_END), or
    /// a stream failed (`error`).
    SideDone {
        /// The first stream error, if any.
        error: Option<String>,
    },
    /// The answer to [`Output::CollectReport`]: this end's report of the test.
    Report(Box<Collected>),
    /// The server is shutting down.
    Shutdown,
}

/// What the driver does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write these bytes.
    Send(Vec<u8>),
    /// The parameters passed the checks: admit the test (its memory, a slot) and get ready
    /// for its streams; answer with [`Input::Admitted`], [`Input::Invalid`] or [`Input::Busy`].
    Admit(Box<Plan>),
    /// Every stream is here: set them up (socket options) for the engine. The test's token
    /// admits no more.
    SetUpStreams,
    /// Start the data plane (TEST_START and TEST_RUNNING went just before).
    StartSide,
    /// The client sent TEST_END: senders stop, receivers drain.
    PeerStopped,
    /// The data plane is done: collect its report, for the results, and answer with
    /// [`Input::Report`].
    CollectReport,
    /// Tear the data plane down: the test ended early.
    AbortSide,
    /// The session is over.
    End(Ending),
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Results exchanged.
    Finished,
    /// Refused before the test ran (busy, or invalid parameters).
    Refused(String),
    /// Ended early. `told`: the client got SERVER_ERROR.
    Failed {
        /// Why.
        why: String,
        /// The client was sent SERVER_ERROR with an i_errno.
        told: bool,
    },
}

#[derive(Debug)]
enum Phase {
    Params {
        deadline: Instant,
    },
    Planning,
    Streams {
        deadline: Instant,
        arrived: usize,
        want: usize,
    },
    Running(Run),
    Results {
        deadline: Instant,
        /// The driver's report, once it has given it.
        got: Option<Box<Collected>>,
    },
    Done {
        deadline: Instant,
    },
    Over,
}

/// A running test's timers and progress.
#[derive(Debug)]
struct Run {
    /// The client must end a timed test by this.
    limit: Option<Instant>,
    /// `--max-duration` plus grace.
    cutoff: Option<Instant>,
    /// TEST_END arrived.
    ended: bool,
    /// The data plane finished before TEST_END: the client has until this to end the test.
    idle_until: Option<Instant>,
    /// The data plane is done.
    side_done: bool,
    /// The test's time, for the message when the client overruns it.
    time: f64,
}

/// The iperf3 server session machine.
#[derive(Debug)]
pub struct Session {
    cfg: Config,
    inbox: Inbox,
    phase: Phase,
    out: VecDeque<Output>,
    /// The test, once its parameters passed the checks.
    plan: Option<Box<Plan>>,
    /// The parameters' `-t` and `-O`, seconds: a timed test's limit.
    time_omit: (f64, f64),
    side_up: bool,
}

impl Session {
    /// A session for a connection that opened with a cookie; `after_cookie` holds whatever
    /// the client sent after it. The first output asks for the parameters.
    pub fn new(cfg: Config, after_cookie: &[u8], now: Instant) -> Session {
        let mut inbox = Inbox::new();
        inbox.feed(after_cookie);
        let mut s = Session {
            cfg,
            inbox,
            phase: Phase::Params {
                deadline: now + PARAMS_TIMEOUT,
            },
            out: VecDeque::new(),
            plan: None,
            time_omit: (0.0, 0.0),
            side_up: false,
        };
        s.state(State::ParamExchange);
        s.parse(now);
        s
    }

    fn run_timeout(&self, r: &Run, now: Instant) -> Option<(Option<i32>, String)> {
        if r.cutoff.is_some_and(|c| now >= c) {
            return Some((
                Some(errno::IESERVERTESTDURATIONEXPIRED),
                format!(
                    "the test ran past the server's limit of {:.0} s (--max-duration)",
                    self.cfg
                        .limits
                        .max_duration
                        .unwrap_or_default()
                        .as_secs_f64()
                ),
            ));
        }
        if r.limit.is_some_and(|l| now >= l) {
            return Some((
                Some(errno::IESERVERTESTDURATIONEXPIRED),
                format!(
                    "the client did not end its {} s test within {} s more",
                    r.time,
                    GRACE.as_secs()
                ),
            ));
        }
        if r.idle_until.is_some_and(|i| now >= i) {
            return Some((
                None,
                format!(
                    "no TEST_END within {} s of the last stream's end",
                    IDLE_LIMIT.as_secs()
                ),
            ));
        }
        None
    }

    /// Every stream here: set up, signal, start.
    fn streams_complete(&mut self, now: Instant) {
        let Phase::Streams { arrived, want, .. } = self.phase else {
            return;
        };
        if arrived < want {
            return;
        }
        let (time, omit) = self.time_omit;
        // The checks bounded both to finite, non-negative values under a day.
        let limit = (time > 0.0).then(|| {
            now + Duration::try_from_secs_f64(time + omit).unwrap_or(Duration::from_secs(86_400))
                + GRACE
        });
        self.out.push_back(Output::SetUpStreams);
        self.out.push_back(Output::Send(vec![
            State::TestStart.byte(),
            State::TestRunning.byte(),
        ]));
        self.out.push_back(Output::StartSide);
        self.side_up = true;
        self.phase = Phase::Running(Run {
            limit,
            cutoff: self.cfg.limits.max_duration.map(|m| now + m + GRACE),
            ended: false,
            idle_until: None,
            side_done: false,
            time,
        });
    }

    fn side_done(&mut self, error: Option<String>, now: Instant) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        r.side_done = true;
        if r.ended {
            return self.collect(now);
        }
        // Senders that sent their share (-n, -k) wait for the client's word; streams that
        // failed or stalled end the test.
        match error {
            Some(e) => self.fail(None, e),
            None => r.idle_until = Some(now + IDLE_LIMIT),
        }
    }

    fn collect(&mut self, now: Instant) {
        self.side_up = false;
        self.out.push_back(Output::CollectReport);
        self.state(State::ExchangeResults);
        self.phase = Phase::Results {
            deadline: now + RESULTS_TIMEOUT,
            got: None,
        };
    }

    /// Takes what the inbox holds, as the phase reads it.
    fn parse(&mut self, now: Instant) {
        loop {
            let progressed = match &self.phase {
                Phase::Params { .. } => self.parse_params(),
                Phase::Streams { .. } => self.parse_during_streams(),
                Phase::Running(_) => self.parse_running(now),
                Phase::Results { .. } => self.parse_results(now),
                Phase::Done { .. } => {
                    if self.inbox.take_state().is_some() {
                        self.end(Ending::Finished);
                    }
                    false
                }
                Phase::Planning | Phase::Over => false,
            };
            if !progressed || self.is_done() {
                return;
            }
        }
    }

    fn parse_params(&mut self) -> bool {
        let v = match self.inbox.take_json("parameters", wire::MAX_PARAMS_JSON) {
            Ok(Some(v)) => v,
            Ok(None) => return false,
            Err(e) => {
                self.fail(Some(errno::IERECVPARAMS), e.to_string());
                return false;
            }
        };
        let p = match Params::from_json(&v) {
            Ok(p) => p,
            Err(e) => {
                self.fail(Some(errno::IERECVPARAMS), e.to_string());
                return false;
            }
        };
        match check(&p, &self.cfg.limits) {
            Ok(plan) => {
                self.time_omit = (p.time, p.omit);
                let plan = Box::new(plan);
                self.plan = Some(plan.clone());
                self.out.push_back(Output::Admit(plan));
                self.phase = Phase::Planning;
            }
            Err((code, why)) => self.refuse(code, why),
        }
        false
    }

    fn parse_during_streams(&mut self) -> bool {
        if let Some(st) = self.inbox.take_state() {
            self.fail(
                None,
                format!("the client sent state {st:?} while its streams were opening"),
            );
        }
        false
    }

    fn parse_running(&mut self, now: Instant) -> bool {
        let Some(st) = self.inbox.take_state() else {
            return false;
        };
        let Phase::Running(r) = &mut self.phase else {
            return false;
        };
        match st {
            State::TestEnd if !r.ended => {
                r.ended = true;
                r.idle_until = None;
                self.out.push_back(Output::PeerStopped);
                if r.side_done {
                    self.collect(now);
                }
                true
            }
            State::ClientTerminate => {
                self.fail(None, "the client was interrupted (CLIENT_TERMINATE)".into());
                false
            }
            other => {
                self.fail(
                    None,
                    format!("unexpected state {other:?} from the client during the test"),
                );
                false
            }
        }
    }

    /// The client's results, once the driver's report is here: this end's answer.
    fn parse_results(&mut self, now: Instant) -> bool {
        let Phase::Results { got: Some(got), .. } = &self.phase else {
            return false;
        };
        let theirs = match self.inbox.take_results(wire::MAX_RESULTS_JSON) {
            Ok(Some(r)) => r,
            Ok(None) => return false,
            Err(e) => {
                self.fail(Some(errno::IERECVRESULTS), e.to_string());
                return false;
            }
        };
        let Some(plan) = &self.plan else {
            // A test reaches its results only through a plan.
            self.fail(Some(errno::IERECVRESULTS), "no plan for the results".into());
            return false;
        };
        match answer_results(plan, got, &theirs, self.cfg.server_output) {
            Ok(mine) => {
                self.out
                    .push_back(Output::Send(encode_json(&mine.to_json())));
                self.state(State::DisplayResults);
                self.phase = Phase::Done {
                    deadline: now + DONE_TIMEOUT,
                };
                // The client's last word may already be here.
                true
            }
            Err((code, why)) => {
                self.fail(Some(code), why);
                false
            }
        }
    }

    /// The control connection is gone.
    fn lost(&mut self, e: String) {
        let why = match &self.phase {
            Phase::Params { .. } => format!("reading the parameters: {e}"),
            Phase::Streams { .. } => format!("while streams were opening: {e}"),
            Phase::Running(_) => format!("the client went away mid-test ({e})"),
            Phase::Results { .. } => {
                format!("reading the client's results: {e}")
            }
            // The client may close instead of its IPERF_DONE.
            Phase::Done { .. } => return self.end(Ending::Finished),
            Phase::Planning | Phase::Over => e,
        };
        self.fail(None, why);
    }

    /// Refuses the test before it runs: SERVER_ERROR with this i_errno.
    fn refuse(&mut self, code: i32, why: String) {
        self.out
            .push_back(Output::Send(wire::server_error(code, 0).to_vec()));
        self.end(Ending::Refused(why));
    }

    fn state(&mut self, s: State) {
        self.out.push_back(Output::Send(vec![s.byte()]));
    }

    /// Ends the test early: the data plane goes, and with an i_errno the client hears it.
    fn fail(&mut self, code: Option<i32>, why: String) {
        if self.side_up {
            self.side_up = false;
            self.out.push_back(Output::AbortSide);
        }
        if let Some(code) = code {
            self.out
                .push_back(Output::Send(wire::server_error(code, 0).to_vec()));
        }
        self.end(Ending::Failed {
            why,
            told: code.is_some(),
        });
    }

    fn end(&mut self, how: Ending) {
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
            Input::Closed => self.lost("the peer closed the control connection".into()),
            Input::ReadFailed(e) => self.lost(format!("control connection: {e}")),
            Input::Admitted if matches!(self.phase, Phase::Planning) => {
                let streams = self.plan.as_ref().map_or(0, |p| p.flows.len());
                self.state(State::CreateStreams);
                self.phase = Phase::Streams {
                    deadline: now + STREAMS_TIMEOUT,
                    arrived: 0,
                    want: streams,
                };
                self.streams_complete(now);
            }
            Input::Invalid(code, why) if matches!(self.phase, Phase::Planning) => {
                self.refuse(code, why);
            }
            Input::Busy(why) if matches!(self.phase, Phase::Planning) => {
                // What a stock iperf3 server says when busy; the client reports "the server
                // is busy running a test".
                self.state(State::AccessDenied);
                self.end(Ending::Refused(format!("refused: {why}")));
            }
            Input::StreamArrived => {
                if let Phase::Streams { arrived, .. } = &mut self.phase {
                    *arrived += 1;
                    self.streams_complete(now);
                }
            }
            Input::Failed(code, why) => {
                self.out.clear();
                self.fail(Some(code), why);
            }
            Input::SideDone { error } => self.side_done(error, now),
            Input::Report(c) => {
                if let Phase::Results {
                    got: got @ None, ..
                } = &mut self.phase
                {
                    *got = Some(c);
                    // The client's results may already be here.
                    self.parse(now);
                }
            }
            Input::Shutdown => {
                if self.side_up {
                    self.side_up = false;
                    self.out.push_back(Output::AbortSide);
                }
                self.state(State::ServerTerminate);
                self.end(Ending::Failed {
                    why: "the server is shutting down".into(),
                    told: false,
                });
            }
            _ => {}
        }
    }

    /// Acts on whatever deadline `now` has reached.
    fn handle_timeout(&mut self, now: Instant) {
        let why = match &self.phase {
            Phase::Params { deadline } if now >= *deadline => Some((
                None,
                format!(
                    "reading the parameters: nothing arrived on the control connection within {:.1} s",
                    PARAMS_TIMEOUT.as_secs_f64()
                ),
            )),
            Phase::Streams {
                deadline, arrived, want,
            } if now >= *deadline => Some((
                None,
                format!(
                    "only {arrived} of {want} data streams arrived within {} s",
                    STREAMS_TIMEOUT.as_secs()
                ),
            )),
            Phase::Running(r) => self.run_timeout(r, now),
            Phase::Results { deadline, .. } if now >= *deadline => Some((
                None,
                format!(
                    "reading the client's results: nothing arrived on the control connection within {:.1} s",
                    RESULTS_TIMEOUT.as_secs_f64()
                ),
            )),
            Phase::Done { deadline } if now >= *deadline => {
                return self.end(Ending::Finished);
            }
            _ => None,
        };
        if let Some((code, why)) = why {
            self.fail(code, why);
        }
    }

    /// When the machine next needs [`Session::handle_timeout`].
    fn timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Params { deadline }
            | Phase::Streams { deadline, .. }
            | Phase::Results { deadline, .. }
            | Phase::Done { deadline } => Some(*deadline),
            Phase::Running(r) => [r.limit, r.cutoff, r.idle_until]
                .into_iter()
                .flatten()
                .min(),
            Phase::Planning | Phase::Over => None,
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
