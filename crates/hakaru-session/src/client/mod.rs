//! The native client session (hakaru's own protocol), as a machine.
//!
//! [`Session`] holds what the client says on the control connection and when: from the hello
//! to the final reports, for every kind a server runs (bulk TCP and UDP, latency and
//! connection-rate tests). Its driver
//! (hakaru-client) connects, opens the data flows, runs this end's side, reads and writes the
//! control socket and calls the observer. The session, in the order a test goes:
//!
//! 1. The machine opens with `hello` ([`Output::Open`]) and waits [`HANDSHAKE_TIMEOUT`] for
//!    the `welcome`; the server's clock offset is estimated from the welcome's (or, from a
//!    server with a key, the `auth_ok`'s) time against the middle of the round trip.
//! 2. With a key on both sides it proves it holds the key (`auth`) and checks the server's
//!    proof in `auth_ok`; a key on one side only is an error either way.
//! 3. It sends `test_request`; on `accepted` it gives [`Output::Accepted`] with the token and
//!    waits for [`Input::FlowsOpen`]. With a held start it then gives [`Output::WaitGate`] and
//!    waits for [`Input::GateOpen`]; a held start or a UDP test says `flows_ready`.
//! 4. On `start` it gives [`Output::StartLocal`] (for a connection-rate test, on
//!    `connect_port`, [`Output::StartConnecting`]). A bulk test runs in the machine: it pairs
//!    this end's
//!    interval samples with the server's into [`Output::Interval`] records, sends keepalives
//!    every `keepalive_every`, calls the server gone after `silence` without a word, and, once
//!    this end is done, gives the server [`RESULTS_TIMEOUT`] to send its report. A latency
//!    test runs the same way, with two differences: its interval records are this end's alone
//!    ([`Input::LocalInterval`]), and the server's echo runs until told: once the pinger is
//!    done the machine sends `stop` and waits for the echo's report. A connection-rate test
//!    has this end's records too, and its reports go the other way round: this end's first,
//!    then the server's answer (connect.rs).
//! 5. With both ends done it asks for this end's report ([`Output::CollectLocal`]), sends it
//!    in `finished` and ends with [`Output::End`].
//!
//! A failure after `start` first stops this end ([`Output::AbortLocal`]) and tells the server
//! why (`error`, "client gave up: ..."); before `start` the session just ends.

mod connect;
mod handshake;
mod running;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use hakaru_model::{ClockOffset, IntervalRecord, IntervalSample, SideReport, TestSpec};
use hakaru_proto::auth::Psk;
use hakaru_proto::{Message, ProtoError};

pub use running::Ended;

/// How long the server has for each step of the handshake (welcome, answer to the test
/// request, start).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server has to answer the key proof: it takes a second to say no.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(12);
/// How long the server has to send its report once this end is done.
pub const RESULTS_TIMEOUT: Duration = Duration::from_secs(20);

/// What the driver knows when it opens the control connection.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server's address, as error messages name it.
    pub peer: String,
    /// The test to ask for.
    pub spec: TestSpec,
    /// A held start (`--sync-start`, plans): the driver waits at a gate before `flows_ready`.
    pub held_start: bool,
    /// This client's software and version, for the hello.
    pub software: String,
    /// This machine's kernel boot id, for the hello (and to tell a server on this host).
    pub host: Option<String>,
    /// The client's nonce for key authentication, hex.
    pub nonce: String,
    /// The pre-shared key, if the user gave one.
    pub psk: Option<Psk>,
    /// The driver found the server on loopback with BBR the system default and no congestion
    /// control asked for: with a Linux server (or one that does not say), ask for cubic and
    /// add this note.
    pub cubic_on_loopback: Option<String>,
    /// How often to send a keepalive during the test.
    pub keepalive_every: Duration,
    /// How long the server may say nothing during the test before it counts as gone.
    pub silence: Duration,
}

/// Why the control connection failed, as the driver saw it (the texts are
/// `hakaru_engine::control::ControlError`'s).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The peer closed the connection.
    Closed,
    /// Nothing complete arrived before a deadline of the driver's.
    Timeout(f64),
    /// The peer broke the protocol.
    Proto(ProtoError),
    /// The socket failed.
    Io(String),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Closed => f.write_str("the peer closed the control connection"),
            Fault::Timeout(s) => write!(f, "no control message within {s:.1} s"),
            Fault::Proto(e) => write!(f, "{e}"),
            Fault::Io(e) => write!(f, "control connection: {e}"),
        }
    }
}

/// What happened, as the driver tells the machine.
#[derive(Debug, Clone)]
pub enum Input {
    /// A control message from the server.
    Message(Message),
    /// Reading the control connection failed (the server closed it, broke the protocol...).
    Failed(Fault),
    /// Sending a message failed: which (its [`Message::name`]) and why.
    SendFailed {
        /// The message's name.
        what: &'static str,
        /// Why.
        fault: Fault,
    },
    /// The data flows asked for by [`Output::Accepted`] are open (TCP connections made and
    /// announced, UDP hellos acknowledged).
    FlowsOpen,
    /// The held start's gate opened. `at_unix`: the instant the data begins (Unix seconds, by
    /// this end's clock), for a test [`can_schedule`] says can wait for it: the machine tells
    /// the server (`start_at`) before `flows_ready`, and both ends' data threads wait for it.
    /// `None`: the data begins as soon as `start` comes.
    GateOpen {
        /// The instant, if the start is scheduled.
        at_unix: Option<f64>,
    },
    /// The held start was called off, and why.
    GateFailed(String),
    /// One of this end's interval samples.
    LocalSample(IntervalSample),
    /// Latency and connection-rate tests: one interval of this end's, a whole record (the
    /// server has no samples to pair it with).
    LocalInterval(Box<IntervalRecord>),
    /// UDP: this end's senders are done, with each flow's datagram count.
    LocalSendDone(Vec<(u32, u64)>),
    /// Every flow of this end finished; the first flow error, if any.
    LocalDone {
        /// The first flow error.
        error: Option<String>,
    },
    /// This end's final report, as asked for by [`Output::CollectLocal`].
    LocalReport(Box<SideReport>),
    /// The user asked to stop (Ctrl-C): senders stop, the ends exchange results as usual.
    Stop,
}

/// What the server told about itself in the handshake.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerFacts {
    /// The server's clock against this end's, when it said its time.
    pub clock: Option<ClockOffset>,
    /// The server runs on this kernel (same boot id).
    pub same_host: bool,
    /// The server's OS, when it said.
    pub os: Option<String>,
}

/// What the driver does next, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send the magic, then this message (the hello).
    Open(Message),
    /// Send this message.
    Send(Message),
    /// The handshake is done: what the server told about itself.
    Server(ServerFacts),
    /// The server accepted the test: open its data flows with this token, then give
    /// [`Input::FlowsOpen`].
    Accepted {
        /// The test's token.
        token: String,
    },
    /// Held start: wait at the gate, then give [`Input::GateOpen`] or [`Input::GateFailed`].
    WaitGate,
    /// Latency probes (`--latency-probe`): start the pinger on the probe flow now; its idle
    /// baseline runs until [`Output::BaselineDone`].
    StartProbes,
    /// The idle baseline is over: take the probes' figures so far as the baseline. The
    /// machine says `flows_ready` right after (with a held start, once the gate opens), and
    /// the server's `start` begins the load.
    BaselineDone,
    /// `start` came: start this end's side now (the senders, or the pinger).
    StartLocal,
    /// Connection-rate tests: the server's connect listener is up on this port; start the
    /// connectors now.
    StartConnecting {
        /// The listener's TCP port, on the server's address of the control connection.
        port: u16,
        /// The server closes each connection first (`connect_port`'s `server_closes`): the
        /// client reads to its close before closing.
        server_closes: bool,
    },
    /// Stop this end's senders (Ctrl-C), or its pinger; the test ends as usual.
    StopSending,
    /// Stop this end's side at once: the test failed.
    AbortLocal,
    /// The server's senders are done (UDP): their datagram counts, for this end's receivers.
    PeerSendDone(Vec<(u32, u64)>),
    /// An interval record, both ends' samples merged, for the observer.
    Interval(IntervalRecord),
    /// Both ends are done: wait for this end's side, give its samples still on the way and
    /// then its report ([`Input::LocalReport`]).
    CollectLocal,
    /// The session's end; nothing follows.
    End(Result<Box<Ended>, SessionError>),
}

/// Why a session failed; the texts are those of `hakaru_client::ClientError`'s variants of
/// the same names.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionError {
    /// The peer is not a hakaru server.
    NotHakaru {
        /// Server address.
        addr: String,
        /// What was seen.
        detail: String,
    },
    /// The server refused the test.
    Refused(String),
    /// The server reported an error (or answered out of turn in the handshake).
    Server(String),
    /// Key authentication failed or could not happen.
    Auth(String),
    /// The control connection failed during the handshake.
    Control {
        /// Server address.
        addr: String,
        /// What failed.
        fault: Fault,
    },
    /// The server sent a message that has no place during the test.
    Unexpected {
        /// Server address.
        addr: String,
        /// Which message, and when.
        what: String,
    },
    /// The server went away mid-test.
    Gone {
        /// Server address.
        addr: String,
        /// What happened.
        what: String,
    },
    /// A flow failed.
    Flow(String),
    /// A held start was called off before the test began.
    CalledOff(String),
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::NotHakaru { addr, detail } => {
                write!(f, "{addr} is not a hakaru server: {detail}")
            }
            SessionError::Refused(r) => write!(f, "the server refused the test: {r}"),
            SessionError::Server(m) => write!(f, "the server reported: {m}"),
            SessionError::Auth(m) => write!(f, "authentication failed: {m}"),
            SessionError::Control { addr, fault } => {
                write!(f, "control connection to {addr}: {fault}")
            }
            SessionError::Unexpected { addr, what } => {
                write!(f, "the server at {addr} sent an unexpected {what}")
            }
            SessionError::Gone { addr, what } => write!(f, "the server at {addr} {what}"),
            SessionError::Flow(m) => f.write_str(m),
            SessionError::CalledOff(m) => {
                write!(f, "the synchronised start was called off: {m}")
            }
        }
    }
}

impl std::error::Error for SessionError {}

/// Where the session is.
#[derive(Debug)]
enum State {
    /// The hello is out; the welcome is due by the deadline.
    Welcome { deadline: Instant },
    /// The key proof is out; `auth_ok` is due by the deadline.
    Auth(Box<handshake::AuthWait>),
    /// The test request is out; its answer is due by the deadline.
    Accepting { deadline: Instant },
    /// The driver is opening the data flows.
    Flows,
    /// The driver waits at the held start's gate.
    Gate,
    /// The latency probes run alone (the idle baseline) until the deadline.
    Baseline { until: Instant },
    /// Set up; `start` is due by the deadline.
    Starting { deadline: Instant },
    /// The test runs.
    Running(Box<running::Test>),
    /// Both ends are done; this end's report is on its way.
    Collecting(Box<running::Test>),
    /// A connection-rate test runs.
    Connecting(Box<connect::Run>),
    /// The final output is given: every input is ignored.
    Ended,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Welcome { .. } => "waiting for the welcome",
            State::Auth(_) => "waiting for the key proof's answer",
            State::Accepting { .. } => "waiting for the answer to the test request",
            State::Flows => "opening the data flows",
            State::Gate => "waiting at the gate",
            State::Baseline { .. } => "measuring the probes' idle baseline",
            State::Starting { .. } => "waiting for start",
            State::Running(_) => "running",
            State::Collecting(_) => "collecting this end's report",
            State::Connecting(_) => "running a connection-rate test",
            State::Ended => "ended",
        }
    }
}

/// The native client session: messages, data-plane events and time in, actions out.
#[derive(Debug)]
pub struct Session {
    cfg: Config,
    state: State,
    out: VecDeque<Output>,
    /// The machine's clock at creation, and the wall clock then (Unix seconds): wall times
    /// of later events are taken on the monotonic clock from there.
    epoch: (Instant, f64),
    /// The test as asked for (with cubic on loopback, if so).
    spec: TestSpec,
    notes: Vec<String>,
    server: Option<ServerFacts>,
    /// Ctrl-C came before the test ran: stop as soon as it does.
    stop_early: bool,
    /// `start` (or `connect_port`) came while the driver was still opening the flows.
    early_start: Option<Message>,
    /// The scheduled start the server was told (`start_at`), Unix seconds.
    start_at: Option<f64>,
}

/// Whether a test's data threads can wait for a scheduled instant (`start_at`): bulk TCP and
/// UDP tests, whose sides both ends start with the engine's side. Latency and
/// connection-rate tests start when `start` (or `connect_port`) comes, and a bulk test with
/// latency probes starts its loaded probes then: for those a coordinator's instant is waited
/// for before the gate opens.
pub fn can_schedule(spec: &TestSpec) -> bool {
    matches!(spec, TestSpec::Tcp(_) | TestSpec::Udp(_)) && spec.latency_probe().is_none()
}

impl Session {
    /// A session that opens with the hello now; `unix_now` is the wall clock at `now`.
    pub fn new(cfg: Config, now: Instant, unix_now: f64) -> Session {
        let hello = Message::Hello {
            protocol: hakaru_proto::PROTOCOL_VERSION,
            software: cfg.software.clone(),
            host: cfg.host.clone(),
            nonce: Some(cfg.nonce.clone()),
        };
        let spec = cfg.spec.clone();
        Session {
            cfg,
            state: State::Welcome {
                deadline: now + HANDSHAKE_TIMEOUT,
            },
            out: VecDeque::from([Output::Open(hello)]),
            epoch: (now, unix_now),
            spec,
            notes: Vec::new(),
            server: None,
            stop_early: false,
            early_start: None,
            start_at: None,
        }
    }

    /// The test as asked for (the configured one, with cubic on loopback if so).
    pub fn spec(&self) -> &TestSpec {
        &self.spec
    }

    /// Notes for the result, from the handshake.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// What the server told about itself, once the handshake is done.
    pub fn server(&self) -> Option<&ServerFacts> {
        self.server.as_ref()
    }

    /// The scheduled start this end's side waits for (Unix seconds), once the gate gave one.
    pub fn start_at(&self) -> Option<f64> {
        self.start_at
    }

    /// The wall clock (Unix seconds) at `now`, by the monotonic clock since creation.
    fn unix_at(&self, now: Instant) -> f64 {
        self.epoch.1 + now.saturating_duration_since(self.epoch.0).as_secs_f64()
    }

    fn control(&self, fault: Fault) -> SessionError {
        SessionError::Control {
            addr: self.cfg.peer.clone(),
            fault,
        }
    }

    fn gone(&self, what: String) -> SessionError {
        SessionError::Gone {
            addr: self.cfg.peer.clone(),
            what,
        }
    }

    fn send(&mut self, m: Message) {
        self.out.push_back(Output::Send(m));
    }

    /// Ends the session with an error. After `start` this end's side stops first and the
    /// server is told why; pending actions are dropped either way.
    fn end(&mut self, e: SessionError) {
        if matches!(self.state, State::Ended) {
            return;
        }
        self.out.clear();
        if matches!(
            self.state,
            State::Running(_) | State::Collecting(_) | State::Connecting(_)
        ) {
            self.out.push_back(Output::AbortLocal);
            self.send(Message::Error {
                message: format!("client gave up: {e}"),
            });
        }
        self.state = State::Ended;
        self.out.push_back(Output::End(Err(e)));
    }

    fn stop(&mut self) {
        match &mut self.state {
            // The pinger stops; the echo is told once it has (running.rs).
            State::Running(t) if !t.interrupted && t.ping => {
                t.interrupted = true;
                self.out.push_back(Output::StopSending);
            }
            State::Running(t) if !t.interrupted => {
                t.interrupted = true;
                self.out.push_back(Output::StopSending);
                self.send(Message::Stop);
            }
            State::Connecting(r) if !r.interrupted => {
                r.interrupted = true;
                self.out.push_back(Output::StopSending);
                self.send(Message::Stop);
            }
            State::Running(_) | State::Collecting(_) | State::Connecting(_) | State::Ended => {}
            _ => self.stop_early = true,
        }
    }

    fn send_failed(&mut self, what: &'static str, fault: Fault) {
        let e = match &self.state {
            State::Ended | State::Collecting(_) => return,
            State::Running(_) | State::Connecting(_) if what == "stop" => {
                self.gone(format!("could not be told to stop: {fault}"))
            }
            State::Running(_) | State::Connecting(_) => {
                self.gone(format!("is unreachable: {fault}"))
            }
            _ => self.control(fault),
        };
        self.end(e);
    }
}

impl crate::Machine for Session {
    type Input = Input;
    type Output = Output;

    /// Takes one input that happened at `now`.
    fn handle(&mut self, input: Input, now: Instant) {
        match input {
            Input::Stop => return self.stop(),
            Input::SendFailed { what, fault } => return self.send_failed(what, fault),
            _ => {}
        }
        match &self.state {
            State::Welcome { .. } => self.on_welcome(input, now),
            State::Auth(_) => self.on_auth(input, now),
            State::Accepting { .. } => self.on_answer(input),
            State::Flows | State::Gate | State::Baseline { .. } => self.on_setup(input, now),
            State::Starting { .. } => self.on_start(input, now),
            State::Running(_) | State::Collecting(_) => self.on_test(input, now),
            State::Connecting(_) => self.on_connect(input, now),
            State::Ended => {}
        }
    }

    /// Acts on the deadline given by [`Session::timeout`], if `now` has reached it.
    fn handle_timeout(&mut self, now: Instant) {
        if self.timeout().is_none_or(|d| now < d) {
            return;
        }
        let timed_out = |t: Duration| Fault::Timeout(t.as_secs_f64());
        match &self.state {
            State::Welcome { .. } => self.end(SessionError::NotHakaru {
                addr: self.cfg.peer.clone(),
                detail: format!(
                    "it sent no greeting within {} s",
                    HANDSHAKE_TIMEOUT.as_secs()
                ),
            }),
            State::Auth(_) => self.end(self.control(timed_out(AUTH_TIMEOUT))),
            State::Accepting { .. } | State::Starting { .. } => {
                self.end(self.control(timed_out(HANDSHAKE_TIMEOUT)))
            }
            State::Running(_) => self.test_timeout(now),
            State::Connecting(_) => self.connect_timeout(now),
            State::Baseline { .. } => self.baseline_done(now),
            _ => {}
        }
    }

    /// The next instant at which [`Session::handle_timeout`] has something to do.
    fn timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Welcome { deadline }
            | State::Accepting { deadline }
            | State::Starting { deadline } => Some(*deadline),
            State::Auth(a) => Some(a.deadline),
            State::Baseline { until } => Some(*until),
            State::Running(t) => Some(t.next_deadline(&self.cfg)),
            State::Connecting(r) => Some(r.next_deadline(&self.cfg)),
            _ => None,
        }
    }

    /// The next action, in order; `None` when there is nothing to do until the next input.
    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// True once the final output has been given (or queued).
    fn is_done(&self) -> bool {
        matches!(self.state, State::Ended)
    }
}
