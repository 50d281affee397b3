//! A stock `ntttcp -s` sender's sync connection on `hakaru server`, as a machine.
//!
//! The sync protocol is ntttcp-for-linux's (`hakaru_proto::ntttcp`, docs/protocol-notes.md):
//!
//! ```text
//! 'X' -> [join] -> state | duration -> [negotiate] -> seconds | data connections arrive
//!   | 'R' or 'L' -> [admit] -> 'R' (run) | 'W' ... 'R' | 'E' | the test | 'E' or close
//! ```
//!
//! The driver (hakaru-server's `ntttcp`) keeps what several sync connections share: the
//! group of senders a test belongs to (one per address, or with `--ntttcp-multi` every sender
//! until the one with `-L`), the data connections that arrive for it, admission through the
//! server's limits and budgets, and the engine that counts each connection. The sender that
//! starts the test (the only one, or the last) owns the data plane.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hakaru_proto::ntttcp::{self as wire, state, Request, Words};

/// How long the sender may take over each sync step before its start ('X', its duration).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the sender may take to open its data connections and ask to start.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// With several senders: how long one that was told 'W' waits for the last sender's 'L'.
pub const LAST_SENDER_TIMEOUT: Duration = Duration::from_secs(120);
/// Past the negotiated cycle, how long the test may run before the server gives up on it.
pub const GRACE: Duration = Duration::from_secs(10);
/// After the sender's end ('E' or its close), how long its data connections have to reach
/// their end before the receivers stop at what has arrived; and after the data plane ends,
/// how long the sync connection has to close.
pub const DRAIN: Duration = Duration::from_secs(2);
/// The cycle the server answers a sender that asks to run until stopped (0) or proposes a
/// negative time, when the server has no `--max-duration` (stock ntttcp's default `-t`).
pub const DEFAULT_CYCLE: i32 = 60;

/// The cycle a receiver without a time of its own answers: the sender's proposal, never more
/// than `max` (whole seconds); a sender that asks to run until stopped (0) or sends a negative
/// time gets `max`, or [`DEFAULT_CYCLE`] without one, so every test has an end.
pub fn negotiate(proposed: i32, max: Option<Duration>) -> i32 {
    let cap = max.map(|m| i32::try_from(m.as_secs().max(1)).unwrap_or(i32::MAX));
    match (proposed, cap) {
        (p, Some(c)) if p <= 0 || p > c => c,
        (p, None) if p <= 0 => DEFAULT_CYCLE,
        (p, _) => p,
    }
}

/// What happens to a session.
#[derive(Debug)]
pub enum Input {
    /// Bytes read from the sync connection.
    Bytes(Vec<u8>),
    /// Reading the sync connection failed (not a close).
    ReadFailed(String),
    /// The sender closed the sync connection.
    Closed,
    /// The answer to [`Output::Join`]: `busy` when the sender's group already runs a test (it
    /// hears "running" and gives up, as from a busy stock receiver).
    Joined {
        /// A test of the group is running.
        busy: bool,
    },
    /// The answer to [`Output::Negotiate`]: the cycle in seconds.
    Negotiated(i32),
    /// The answer to [`Output::Admit`], or later for a sender that was told to wait: run.
    /// `owner`: this session runs the data plane.
    Go {
        /// This session starts and watches the engine.
        owner: bool,
    },
    /// The answer to [`Output::Admit`]: wait for the last sender.
    Wait,
    /// The answer to [`Output::Admit`], or for a waiting sender: refused (the sender hears 'E').
    Refused(String),
    /// Something the driver was asked to do failed. The outputs queued after the one that
    /// failed are dropped.
    Failed(String),
    /// The data plane ended (every connection closed, or one failed).
    SideDone {
        /// The first connection error, if any.
        error: Option<String>,
    },
    /// The server is shutting down.
    Shutdown,
}

/// What the driver does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write this word.
    Send([u8; wire::WORD_LEN]),
    /// The sender asked the state: put it in a group (its data connections are taken from
    /// now on) and answer [`Input::Joined`].
    Join,
    /// The sender proposed this cycle: answer [`Input::Negotiated`].
    Negotiate(i32),
    /// The sender asks to start (`last`: it is the last of several): admit the group's test
    /// and answer [`Input::Go`], [`Input::Wait`] or [`Input::Refused`].
    Admit {
        /// The sender sent 'L'.
        last: bool,
    },
    /// Start counting the group's data connections ('R' went just before).
    StartSide,
    /// The sender has ended and its data connections had [`DRAIN`] to close: receivers stop
    /// at what has arrived.
    DrainSide,
    /// Tear the data plane down: the test ended early.
    AbortSide,
    /// The data plane is done: collect its report (before [`Ending::Finished`]).
    CollectReport,
    /// The session is over.
    End(Ending),
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The test ran and the sender ended it.
    Finished,
    /// Refused before the test ran (busy, limits, too many senders).
    Refused(String),
    /// Ended early.
    Failed(String),
}

#[derive(Debug)]
enum Phase {
    Query { deadline: Instant },
    Joining,
    Duration { deadline: Instant },
    Negotiating,
    Connecting { deadline: Instant },
    Admitting,
    Waiting { deadline: Instant },
    Running(Run),
    Over,
}

/// A running test's timers and progress.
#[derive(Debug)]
struct Run {
    /// The negotiated cycle plus [`GRACE`].
    limit: Instant,
    /// This session runs the data plane.
    owner: bool,
    /// The data plane is done (always, for a session that does not own it).
    side_done: bool,
    /// The sender ended ('E' or close).
    peer_done: bool,
    /// The next step of the end: drain the receivers, or give up on the sync close.
    step_at: Option<Instant>,
    /// The receivers were told to drain.
    drained: bool,
}

/// The ntttcp receiver's sync session machine.
#[derive(Debug)]
pub struct Session {
    words: Words,
    phase: Phase,
    out: VecDeque<Output>,
    /// The negotiated cycle, seconds.
    cycle: i32,
}

impl Session {
    /// A session for a sync connection just accepted.
    pub fn new(now: Instant) -> Session {
        Session {
            words: Words::new(),
            phase: Phase::Query {
                deadline: now + STEP_TIMEOUT,
            },
            out: VecDeque::new(),
            cycle: 0,
        }
    }

    /// The session waits for the last sender (the driver tells it [`Input::Go`] when that
    /// one arrives).
    pub fn is_waiting(&self) -> bool {
        matches!(self.phase, Phase::Waiting { .. })
    }

    /// The negotiated cycle in seconds (0 before it is).
    pub fn cycle(&self) -> i32 {
        self.cycle
    }

    fn run_timeout(&mut self, now: Instant) {
        let cycle = self.cycle;
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        if now >= r.limit {
            return self.fail(format!(
                "the test ran past its {cycle} s cycle by more than {} s",
                GRACE.as_secs()
            ));
        }
        if r.step_at.is_none_or(|s| now < s) {
            return;
        }
        r.step_at = None;
        if r.side_done {
            // The data plane is done and the sync connection stayed open: enough.
            return self.finish();
        }
        if !r.drained {
            r.drained = true;
            r.step_at = Some(now + DRAIN);
            self.out.push_back(Output::DrainSide);
            return;
        }
        self.fail(format!(
            "the data connections did not end within {} s of the sender's end",
            2 * DRAIN.as_secs()
        ));
    }

    fn go(&mut self, owner: bool, now: Instant) {
        self.send(wire::RUN);
        if owner {
            self.out.push_back(Output::StartSide);
        }
        let cycle = Duration::from_secs(u64::try_from(self.cycle.max(0)).unwrap_or(0));
        self.phase = Phase::Running(Run {
            limit: now + cycle + GRACE,
            owner,
            side_done: !owner,
            peer_done: false,
            step_at: None,
            drained: false,
        });
    }

    /// One word from the sender, as the phase reads it.
    fn word(&mut self, w: i32, now: Instant) {
        let req = Request::from_word(w);
        match (&mut self.phase, req) {
            (Phase::Query { .. }, Request::Query) => {
                self.phase = Phase::Joining;
                self.out.push_back(Output::Join);
            }
            (Phase::Duration { .. }, Request::Duration(secs)) => {
                self.phase = Phase::Negotiating;
                self.out.push_back(Output::Negotiate(secs));
            }
            (Phase::Connecting { .. }, Request::Run | Request::Last) => {
                self.phase = Phase::Admitting;
                self.out.push_back(Output::Admit {
                    last: req == Request::Last,
                });
            }
            (Phase::Running(_), Request::Exit) => {
                self.send(state::FINISHED);
                self.peer_ended(now);
            }
            (Phase::Running(_), Request::Query) => self.send(state::RUNNING),
            (_, Request::Exit) => {
                self.fail(format!("the sender stopped ('E') {}", self.phase_words()))
            }
            _ => self.fail(format!(
                "the sender sent {} {}",
                wire::word_name(w),
                self.phase_words()
            )),
        }
    }

    fn phase_words(&self) -> &'static str {
        match self.phase {
            Phase::Query { .. } => "where its first word, 'X', belongs",
            Phase::Duration { .. } => "where its test time belongs",
            Phase::Connecting { .. } => "where 'R' or 'L' belongs",
            Phase::Joining | Phase::Negotiating | Phase::Admitting => {
                "before the server had answered its last word"
            }
            Phase::Waiting { .. } => "while it waited for the last sender",
            Phase::Running(_) => "during the test",
            Phase::Over => "after the end",
        }
    }

    /// The sender ended the test: the data plane gets [`DRAIN`] to see its connections end.
    fn peer_ended(&mut self, now: Instant) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        r.peer_done = true;
        if r.side_done {
            return self.finish();
        }
        if r.step_at.is_none() && !r.drained {
            r.step_at = Some(now + DRAIN);
        }
    }

    fn side_done(&mut self, error: Option<String>, now: Instant) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        if r.side_done {
            return;
        }
        r.side_done = true;
        if let Some(e) = error {
            return self.fail(format!("a data connection failed: {e}"));
        }
        if r.peer_done {
            return self.finish();
        }
        r.step_at = Some(now + DRAIN);
    }

    fn finish(&mut self) {
        if let Phase::Running(r) = &self.phase {
            if r.owner {
                self.out.push_back(Output::CollectReport);
            }
        }
        self.end(Ending::Finished);
    }

    /// The sync connection is gone.
    fn lost(&mut self, e: String, now: Instant) {
        if matches!(self.phase, Phase::Running(_)) {
            return self.peer_ended(now);
        }
        let why = format!("{e} {}", self.phase_words());
        self.fail(why);
    }

    fn send(&mut self, word: i32) {
        self.out.push_back(Output::Send(wire::encode(word)));
    }

    /// Ends the session early; a running data plane goes.
    fn fail(&mut self, why: String) {
        if let Phase::Running(r) = &self.phase {
            if r.owner && !r.side_done {
                self.out.push_back(Output::AbortSide);
            }
        }
        self.end(Ending::Failed(why));
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
                for w in self.words.feed(&b) {
                    self.word(w, now);
                    if self.is_done() {
                        return;
                    }
                }
            }
            Input::Closed => self.lost("the sender closed the sync connection".into(), now),
            Input::ReadFailed(e) => self.lost(format!("sync connection: {e}"), now),
            Input::Joined { busy } if matches!(self.phase, Phase::Joining) => {
                if busy {
                    self.send(state::RUNNING);
                    return self.end(Ending::Refused(
                        "busy: a test from the same sender group is running (the sender hears \"running\")".into(),
                    ));
                }
                self.send(state::NOT_STARTED);
                self.phase = Phase::Duration {
                    deadline: now + STEP_TIMEOUT,
                };
            }
            Input::Negotiated(secs) if matches!(self.phase, Phase::Negotiating) => {
                self.cycle = secs;
                self.send(secs);
                self.phase = Phase::Connecting {
                    deadline: now + CONNECT_TIMEOUT,
                };
            }
            Input::Go { owner }
                if matches!(self.phase, Phase::Admitting | Phase::Waiting { .. }) =>
            {
                self.go(owner, now)
            }
            Input::Wait if matches!(self.phase, Phase::Admitting) => {
                self.send(wire::WAIT);
                self.phase = Phase::Waiting {
                    deadline: now + LAST_SENDER_TIMEOUT,
                };
            }
            Input::Refused(why)
                if matches!(self.phase, Phase::Admitting | Phase::Waiting { .. }) =>
            {
                self.send(wire::EXIT);
                self.end(Ending::Refused(why));
            }
            Input::Failed(why) => {
                self.out.clear();
                self.fail(why);
            }
            Input::SideDone { error } => self.side_done(error, now),
            Input::Shutdown => self.fail("the server is shutting down".into()),
            _ => {}
        }
    }

    /// Acts on whatever deadline `now` has reached.
    fn handle_timeout(&mut self, now: Instant) {
        let why = match &self.phase {
            Phase::Query { deadline } if now >= *deadline => format!(
                "the sender asked nothing ('X') within {} s of connecting",
                STEP_TIMEOUT.as_secs()
            ),
            Phase::Duration { deadline } if now >= *deadline => format!(
                "the sender proposed no test time within {} s",
                STEP_TIMEOUT.as_secs()
            ),
            Phase::Connecting { deadline } if now >= *deadline => format!(
                "the sender did not ask to start ('R' or 'L') within {} s",
                CONNECT_TIMEOUT.as_secs()
            ),
            Phase::Waiting { deadline } if now >= *deadline => {
                self.out.push_back(Output::Send(wire::encode(wire::EXIT)));
                return self.end(Ending::Failed(format!(
                    "no last sender ('-L') arrived within {} s",
                    LAST_SENDER_TIMEOUT.as_secs()
                )));
            }
            Phase::Running(_) => return self.run_timeout(now),
            _ => return,
        };
        self.fail(why);
    }

    /// When the machine next needs [`Session::handle_timeout`].
    fn timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Query { deadline }
            | Phase::Duration { deadline }
            | Phase::Connecting { deadline }
            | Phase::Waiting { deadline } => Some(*deadline),
            Phase::Running(r) => Some(r.step_at.map_or(r.limit, |s| s.min(r.limit))),
            Phase::Joining | Phase::Negotiating | Phase::Admitting | Phase::Over => None,
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
