//! `hakaru tcp HOST --ntttcp`: the sync connection to a stock `ntttcp -r`, as a machine.
//!
//! ```text
//! 'X' -> state | seconds -> negotiated | [open data connections] | 'R' -> 'R' (or 'W' ... 'R')
//!   | [the test] | 'E' -> state (only when the test ran less than the negotiated cycle)
//! ```
//!
//! The driver (hakaru-client's `ntttcp`) opens the data connections, runs the engine for the
//! test's own time and lets the sent data land before it reports the data plane done.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hakaru_proto::ntttcp::{self as wire, state, StartReply, Words};

/// How long the receiver may take to answer each sync word.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a receiver that said 'W' (it waits for the last of several senders) may take.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the receiver may take to answer the closing 'E'.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a session failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The receiver is running another test.
    Busy,
    /// The receiver answered 'R' with this word ('E' from a stock receiver).
    Refused(i32),
    /// The receiver sent a word that does not fit.
    Unexpected {
        /// The word.
        word: i32,
        /// What the client was waiting for.
        waiting_for: &'static str,
    },
    /// The sync connection closed, failed or stayed silent.
    Gone(String),
    /// The data plane failed (opening or running).
    Flow(String),
    /// The user stopped the test before it started.
    Interrupted,
}

/// What happens to a session.
#[derive(Debug)]
pub enum Input {
    /// Bytes read from the sync connection.
    Bytes(Vec<u8>),
    /// Reading the sync connection failed (not a close).
    ReadFailed(String),
    /// The receiver closed the sync connection.
    Closed,
    /// The answer to [`Output::OpenData`]: every data connection is open.
    Opened,
    /// The data plane is done (its time ran out, or the user stopped it) and its data has
    /// landed; `ran`: how long it sent.
    SideDone {
        /// The time the test sent for.
        ran: Duration,
    },
    /// The user stopped the test.
    Interrupt,
    /// Something the driver was asked to do failed; queued outputs are dropped.
    Failed(String),
}

/// What the driver does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write this word.
    Send([u8; wire::WORD_LEN]),
    /// Open the data connections; answer [`Input::Opened`]. The receiver's cycle is this
    /// many seconds (0: until stopped).
    OpenData(i32),
    /// Start the data plane ('R' came back).
    StartSide,
    /// Stop the data plane now (the user's stop); it still reports [`Input::SideDone`].
    StopSide,
    /// Tear the data plane down: the test ended early.
    AbortSide,
    /// The session is over: `Ok(interrupted)` once the test ran.
    End(Result<bool, Error>),
}

#[derive(Debug)]
enum Phase {
    State {
        deadline: Instant,
    },
    Cycle {
        deadline: Instant,
    },
    Opening,
    Start {
        deadline: Instant,
    },
    Running {
        interrupted: bool,
    },
    Exit {
        deadline: Instant,
        interrupted: bool,
    },
    Over,
}

/// The ntttcp sender's sync session machine.
#[derive(Debug)]
pub struct Session {
    proposed: i32,
    cycle: i32,
    words: Words,
    phase: Phase,
    out: VecDeque<Output>,
    side_up: bool,
}

impl Session {
    /// A session on a sync connection just opened, proposing a cycle of `proposed` seconds.
    /// The first output asks the receiver's state.
    pub fn new(proposed: i32, now: Instant) -> Session {
        let mut s = Session {
            proposed,
            cycle: 0,
            words: Words::new(),
            phase: Phase::State {
                deadline: now + STEP_TIMEOUT,
            },
            out: VecDeque::new(),
            side_up: false,
        };
        s.send(wire::QUERY);
        s
    }

    /// The data plane runs.
    pub fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running { .. })
    }

    /// The receiver's cycle in seconds (0 before it answered, or for "until stopped").
    pub fn cycle(&self) -> i32 {
        self.cycle
    }

    fn waiting_for(&self) -> &'static str {
        match self.phase {
            Phase::State { .. } => "to 'X' (the receiver's state)",
            Phase::Cycle { .. } => "to the proposed test time",
            Phase::Start { .. } => "to 'R' (start)",
            Phase::Exit { .. } => "to 'E' (the sender's end)",
            Phase::Opening | Phase::Running { .. } | Phase::Over => "",
        }
    }

    fn word(&mut self, w: i32, now: Instant) {
        match self.phase {
            Phase::State { .. } => match w {
                state::RUNNING => self.fail(Error::Busy),
                state::UNKNOWN | state::NOT_STARTED | state::FINISHED => {
                    self.send(self.proposed);
                    self.phase = Phase::Cycle {
                        deadline: now + STEP_TIMEOUT,
                    };
                }
                _ => self.unexpected(w),
            },
            Phase::Cycle { .. } if w >= 0 => {
                self.cycle = w;
                self.phase = Phase::Opening;
                self.out.push_back(Output::OpenData(w));
            }
            Phase::Start { .. } => match StartReply::from_word(w) {
                StartReply::Run => {
                    self.side_up = true;
                    self.out.push_back(Output::StartSide);
                    self.phase = Phase::Running { interrupted: false };
                }
                StartReply::Wait => {
                    self.phase = Phase::Start {
                        deadline: now + WAIT_TIMEOUT,
                    }
                }
                StartReply::Refused(n) => self.fail(Error::Refused(n)),
            },
            // A stock receiver says nothing during the test (a second 'R' after an 'L' is
            // its only extra word); nothing it could say changes the run.
            Phase::Running { .. } => {}
            Phase::Exit { interrupted, .. } => self.end(Ok(interrupted)),
            _ => self.unexpected(w),
        }
    }

    fn unexpected(&mut self, word: i32) {
        let waiting_for = match self.phase {
            Phase::State { .. } => "the receiver's state",
            Phase::Cycle { .. } => "the negotiated test time",
            _ => "nothing",
        };
        self.fail(Error::Unexpected { word, waiting_for });
    }

    /// The data plane ran its time and its data landed: tell a receiver whose cycle is longer
    /// that the sender is done ('E'), as a stock sender does.
    fn side_done(&mut self, ran: Duration, now: Instant) {
        let Phase::Running { interrupted } = self.phase else {
            return;
        };
        self.side_up = false;
        let cycle = Duration::from_secs(u64::try_from(self.cycle).unwrap_or(0));
        if self.cycle == 0 || ran < cycle {
            self.send(wire::EXIT);
            self.phase = Phase::Exit {
                deadline: now + EXIT_TIMEOUT,
                interrupted,
            };
        } else {
            self.end(Ok(interrupted));
        }
    }

    fn lost(&mut self, e: String) {
        match self.phase {
            // A stock receiver that has finished exits: its close ends nothing here, the
            // data plane runs its time (a receiver gone early fails the data connections).
            Phase::Running { .. } => {}
            Phase::Exit { interrupted, .. } => self.end(Ok(interrupted)),
            _ => {
                let what = self.waiting_for();
                let why = if what.is_empty() {
                    e
                } else {
                    format!("{e} (waiting for an answer {what})")
                };
                self.fail(Error::Gone(why));
            }
        }
    }

    fn send(&mut self, word: i32) {
        self.out.push_back(Output::Send(wire::encode(word)));
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
                for w in self.words.feed(&b) {
                    self.word(w, now);
                    if self.is_done() {
                        return;
                    }
                }
            }
            Input::Closed => self.lost("the receiver closed the sync connection".into()),
            Input::ReadFailed(e) => self.lost(format!("sync connection: {e}")),
            Input::Opened if matches!(self.phase, Phase::Opening) => {
                self.send(wire::RUN);
                self.phase = Phase::Start {
                    deadline: now + STEP_TIMEOUT,
                };
            }
            Input::SideDone { ran } => self.side_done(ran, now),
            Input::Interrupt => match &mut self.phase {
                Phase::Running { interrupted } if !*interrupted => {
                    *interrupted = true;
                    self.out.push_back(Output::StopSide);
                }
                Phase::Running { .. } | Phase::Exit { .. } => {}
                _ => self.fail(Error::Interrupted),
            },
            Input::Failed(e) => {
                self.out.clear();
                self.fail(Error::Flow(e));
            }
            _ => {}
        }
    }

    /// Acts on whatever deadline `now` has reached.
    fn handle_timeout(&mut self, now: Instant) {
        let Some(deadline) = self.timeout() else {
            return;
        };
        if now < deadline {
            return;
        }
        if let Phase::Exit { interrupted, .. } = self.phase {
            // The test ran; a receiver that does not answer the 'E' changes nothing.
            return self.end(Ok(interrupted));
        }
        let what = self.waiting_for();
        self.fail(Error::Gone(format!("no answer {what} in time")));
    }

    /// When the machine next needs [`Session::handle_timeout`].
    fn timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::State { deadline }
            | Phase::Cycle { deadline }
            | Phase::Start { deadline }
            | Phase::Exit { deadline, .. } => Some(*deadline),
            Phase::Opening | Phase::Running { .. } | Phase::Over => None,
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
