//! `hakaru ... --netperf`: one netperf test's control connection to a stock netserver, as a
//! machine.
//!
//! ```text
//! [PASSPHRASE] DO_OMNI -> OMNI_RESPONSE (errno 0: the data port) | [the data phase]
//!   -> results (after netperf's end of the data: FIN, three empty datagrams, or the
//!      server's own timer for TCP_CRR and TCP_MAERTS)
//! ```
//!
//! netserver sends its results once its data loop has ended, which for a test in which it
//! sends (TCP_MAERTS) can be before this end's receivers have read the last byte: results that
//! arrive while the data phase runs are kept until the driver says the data phase is done.
//! An answer with a nonzero errno word is a refusal (before the data phase) or a failure
//! (during it). The driver (hakaru-client's `netperf`) opens the data path to the port the
//! response names, runs the engine and ends the data as netperf does.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hakaru_proto::netperf::{
    decode_response, decode_results, encode_passphrase, OmniRequest, OmniResponse, OmniResults,
    MSG_LEN, PAD_TIME_SECS,
};

/// How long netserver may take to answer the test request.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long netserver may take to send its results once this end's data phase is over: its
/// timer ends TCP_CRR (and catches a lost end) up to its pad later, plus a margin.
pub const RESULTS_TIMEOUT: Duration = Duration::from_secs(PAD_TIME_SECS as u64 + 10);

/// Why a test failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// netserver answered the request with this errno (a test it does not run, a data port it
    /// could not bind, ...).
    Refused(i32),
    /// netserver reported this errno during the data phase.
    DataFailed(i32),
    /// The control connection closed, failed or stayed silent.
    Gone(String),
    /// The data plane failed.
    Flow(String),
}

/// What happens to a session.
#[derive(Debug)]
pub enum Input {
    /// Bytes read from the control connection.
    Bytes(Vec<u8>),
    /// netserver closed the control connection.
    Closed,
    /// Reading it failed.
    ReadFailed(String),
    /// This end's data phase is over and its end was signalled (FIN, empty datagrams).
    DataDone,
    /// Something the driver was asked to do failed; queued outputs are dropped.
    Failed(String),
}

/// What the driver does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write these bytes (whole messages).
    Send(Vec<u8>),
    /// netserver set the test up: open the data path to `data_port` and run the data phase;
    /// answer [`Input::DataDone`] when it is over.
    Ready(Box<OmniResponse>),
    /// Tear the data phase down: the test failed.
    AbortData,
    /// netserver's figures for the test.
    Results(Box<OmniResults>),
    /// The session is over.
    End(Result<(), Error>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Response { deadline: Instant },
    Running,
    Results { deadline: Instant },
    Over,
}

/// One netperf test's control session.
#[derive(Debug)]
pub struct Session {
    phase: Phase,
    inbox: Vec<u8>,
    out: VecDeque<Output>,
    early: Option<Box<OmniResults>>,
}

impl Session {
    /// A session on a control connection just opened: the passphrase (netperf `-Z`), if any,
    /// then the request go out first.
    pub fn new(request: &OmniRequest, passphrase: Option<&[u8]>, now: Instant) -> Session {
        let mut out = VecDeque::new();
        if let Some(p) = passphrase {
            out.push_back(Output::Send(encode_passphrase(p)));
        }
        out.push_back(Output::Send(request.encode()));
        Session {
            phase: Phase::Response {
                deadline: now + RESPONSE_TIMEOUT,
            },
            inbox: Vec::new(),
            out,
            early: None,
        }
    }

    /// The data phase runs (between [`Output::Ready`] and [`Input::DataDone`]).
    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    fn message(&mut self, msg: &[u8]) {
        let Some((errno, resp)) = decode_response(msg) else {
            return;
        };
        match self.phase {
            Phase::Response { .. } if errno != 0 => self.end(Err(Error::Refused(errno))),
            Phase::Response { .. } => {
                self.phase = Phase::Running;
                self.out.push_back(Output::Ready(Box::new(resp)));
            }
            Phase::Running | Phase::Results { .. } if errno != 0 => {
                self.fail(Error::DataFailed(errno))
            }
            Phase::Running if self.early.is_none() => {
                self.early = decode_results(msg).map(Box::new);
            }
            // netserver sends one answer per test; a second one changes nothing.
            Phase::Running => {}
            Phase::Results { .. } => {
                if let Some(r) = decode_results(msg) {
                    self.finish(Box::new(r));
                }
            }
            Phase::Over => {}
        }
    }

    fn finish(&mut self, r: Box<OmniResults>) {
        self.out.push_back(Output::Results(r));
        self.end(Ok(()));
    }

    fn lost(&mut self, why: String) {
        match self.phase {
            // The results are in; netserver going away afterwards changes nothing.
            Phase::Running if self.early.is_some() => {}
            Phase::Response { .. } => self.fail(Error::Gone(format!(
                "{why} before answering the test request (a netserver started with -Z closes \
                 without a word when the passphrase is missing or wrong)"
            ))),
            _ => self.fail(Error::Gone(why)),
        }
    }

    fn fail(&mut self, e: Error) {
        if self.phase == Phase::Running {
            self.out.push_back(Output::AbortData);
        }
        self.end(Err(e));
    }

    fn end(&mut self, how: Result<(), Error>) {
        self.out.push_back(Output::End(how));
        self.phase = Phase::Over;
        self.inbox = Vec::new();
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
                self.inbox.extend_from_slice(&b);
                while self.inbox.len() >= MSG_LEN && !self.is_done() {
                    let msg: Vec<u8> = self.inbox.drain(..MSG_LEN).collect();
                    self.message(&msg);
                }
            }
            Input::Closed => self.lost("closed the control connection".into()),
            Input::ReadFailed(e) => self.lost(format!("control connection: {e}")),
            Input::DataDone => {
                if self.phase != Phase::Running {
                    return;
                }
                match self.early.take() {
                    Some(r) => self.finish(r),
                    None => {
                        self.phase = Phase::Results {
                            deadline: now + RESULTS_TIMEOUT,
                        }
                    }
                }
            }
            Input::Failed(e) => {
                self.out.clear();
                self.fail(Error::Flow(e));
            }
        }
    }

    /// Acts on whatever deadline `now` has reached.
    fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Response { deadline } if now >= deadline => self.end(Err(Error::Gone(format!(
                "did not answer the test request within {} s",
                RESPONSE_TIMEOUT.as_secs()
            )))),
            Phase::Results { deadline } if now >= deadline => self.end(Err(Error::Gone(format!(
                "sent no results within {} s of the end of the data",
                RESULTS_TIMEOUT.as_secs()
            )))),
            _ => {}
        }
    }

    /// When the machine next needs [`Session::handle_timeout`]; none while the data phase
    /// runs (the engine keeps the test's clock).
    fn timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Response { deadline } | Phase::Results { deadline } => Some(deadline),
            Phase::Running | Phase::Over => None,
        }
    }

    /// The next action, until `None`.
    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The session is over.
    fn is_done(&self) -> bool {
        self.phase == Phase::Over
    }
}

/// What an errno from netserver means, for the user (Linux numbering, as netserver runs on
/// Linux almost everywhere).
pub fn errno_text(errno: i32) -> String {
    let what = match errno {
        hakaru_proto::netperf::ERRNO_UNKNOWN_TEST => {
            "it does not know the test (a netserver built without omni tests?)"
        }
        11 => "resource temporarily unavailable (busy)",
        13 => "permission denied",
        22 => "invalid argument (a test or option it refuses)",
        93 => "protocol not supported",
        95 => "operation not supported",
        97 => "address family not supported",
        98 => "address already in use (the data port asked for is taken)",
        99 => "cannot assign the requested address",
        _ => "",
    };
    if what.is_empty() {
        format!("errno {errno}")
    } else {
        format!("errno {errno}: {what}")
    }
}
