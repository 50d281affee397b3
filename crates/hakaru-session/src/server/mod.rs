//! The native server session (hakaru's own protocol), as a machine.
//!
//! One machine per control connection, made once the dispatcher has read the client's hello.
//! It says the welcome, checks the key, takes the test request, asks its driver to admit the
//! test against the server's limits, waits for the data paths (and a held start's go), starts
//! and watches the test, and exchanges the results. The driver (hakaru-server's `session`)
//! owns the sockets, the registry of data paths and the engine's data plane.
//!
//! ```text
//! hello -> [auth] -> request -> admit -> paths ----------> [held] -> running -> results -> end
//!                                     \-> connect: [held] -> listener -> running -> stop -> end
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hakaru_model::{LatencyTransport, RemoteSpec, SideReport};
use hakaru_proto::auth::Psk;
use hakaru_proto::native::{silence_limit, KEEPALIVE_EVERY, MAX_START_AHEAD};
use hakaru_proto::{Message, ServerInfo, PROTOCOL_VERSION};

mod held;
mod paths;
#[cfg(test)]
mod tests;

use held::held_too_long;
use paths::Paths;

/// A client sends its key proof and its test request right after the welcome; this is for slow
/// paths, not for thinking.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the data paths of an admitted test may take to arrive.
pub const DATA_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a client may hold a set-up test before its go (`held_start`).
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the server waits for the client's results after its own.
pub const RESULTS_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client that fails authentication waits for the verdict, whatever went wrong:
/// guessing keys costs a second a try per connection, and the delay says nothing.
pub const AUTH_FAIL_DELAY: Duration = Duration::from_secs(1);
/// Grace past `--max-duration` for a byte or block count (time-based tests were checked
/// against it at admission) before the server cuts the test off.
pub const CUTOFF_GRACE: Duration = Duration::from_secs(5);

/// What the server is and allows, as far as the session needs to know.
#[derive(Debug, Clone)]
pub struct Config {
    /// The pre-shared key, when the server requires one.
    pub psk: Option<Psk>,
    /// The server's nonce for this connection (required with a key, from the OS's randomness).
    pub nonce: Option<String>,
    /// What the server says about itself: in the welcome without a key, after the key proof
    /// with one.
    pub info: ServerInfo,
    /// `--max-duration`: byte and block counts are cut off past it.
    pub max_duration: Option<Duration>,
    /// The server's UDP port (named when hellos do not arrive).
    pub udp_port: u16,
}

/// The client's hello, as the dispatcher read it.
#[derive(Debug, Clone)]
pub struct Hello {
    /// The client's protocol version.
    pub protocol: u32,
    /// The client's software and version.
    pub software: String,
    /// The client's authentication nonce.
    pub nonce: Option<String>,
}

/// What happens to a session: everything the driver tells its machine.
#[derive(Debug)]
pub enum Input {
    /// A decoded control message from the client.
    Message(Message),
    /// The client broke the framing or sent a frame that is not a message.
    Garbage(String),
    /// Reading the control connection failed (not a close).
    ReadFailed(String),
    /// The client closed the control connection.
    Closed,
    /// The answer to [`Output::Admit`]: the test fits, under this number and token.
    Admitted {
        /// Server-side test number (for logs).
        test_id: u64,
        /// The token the test's data paths carry.
        token: String,
    },
    /// The answer to [`Output::Admit`]: the test does not fit, and why.
    Refused(String),
    /// A data path of the test arrived (a TCP connection or a UDP flow's first hello).
    PathArrived {
        /// The flow it carries.
        flow: u32,
    },
    /// The answer to [`Output::OpenConnectListener`]: the test's listener is up on this port.
    ConnectListening {
        /// TCP port of the listener.
        port: u16,
    },
    /// Something the driver was asked to do failed on the server; the client is told why.
    /// The outputs the machine had queued after the one that failed are dropped.
    Failed(String),
    /// The data plane ended (or, in a connection-rate test, stopped when asked) with this
    /// end's report.
    SideDone(Box<SideReport>),
    /// The server is shutting down.
    Shutdown,
}

/// What the driver does for a session, in the order the machine gives them.
#[derive(Debug, PartialEq)]
pub enum Output {
    /// Write these bytes as they are (the opening: magic and welcome, or magic alone).
    SendRaw(Vec<u8>),
    /// Send this message. The driver stamps an `auth_ok`'s `server.unix_time` with its clock
    /// as it writes it (the client times the exchange around it).
    Send(Message),
    /// Check the test against the server's limits, budgets and capabilities, and answer with
    /// [`Input::Admitted`] or [`Input::Refused`].
    Admit {
        /// The test.
        spec: Box<RemoteSpec>,
        /// The client holds the start (synchronised runs).
        held: bool,
    },
    /// Every data path arrived (and a UDP client heard every answer): the token admits no
    /// more.
    PathsComplete,
    /// Read the machine-wide counters (CPU, the interface, UDP) this end's figures start
    /// from. The `start` message follows, so nothing the client sends after it escapes them.
    TakeBaseline,
    /// The latency probes' path arrived: start the echo on it now, before the client's
    /// idle baseline (it runs until the session ends).
    StartProbe {
        /// The probe flow's id.
        flow: u32,
    },
    /// Start this end's data plane (the `start` message went just before).
    StartSide,
    /// Connection-rate test: open the test's listener and answer [`Input::ConnectListening`]
    /// (or [`Input::Failed`]).
    OpenConnectListener,
    /// The client asked to stop: this end's senders stop, the receivers drain.
    StopSending,
    /// The client's senders are done: (flow id, datagrams sent) per flow.
    PeerDone(Vec<(u32, u64)>),
    /// Connection-rate test: the client's report arrived; stop the listener and answer with
    /// [`Input::SideDone`].
    StopSide,
    /// Tear the data plane down: the test ended early.
    AbortSide,
    /// The session is over.
    End(Ending),
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The test ran and the results were exchanged.
    Finished,
    /// The session ended before a test was admitted (wrong version, wrong first message, a
    /// refused test, a client that left).
    Rejected(String),
    /// The client did not prove it holds the key.
    AuthFailed(String),
    /// An admitted test ended early. `told`: the client was sent the reason.
    Aborted {
        /// Why.
        why: String,
        /// The reason went to the client in an `error` message.
        told: bool,
    },
}

/// What kind of data paths the test has.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// TCP connections (tcp, latency over TCP).
    Tcp,
    /// UDP flows that say hello and end their set-up with `flows_ready` (udp, pps, latency
    /// over UDP).
    Udp,
    /// A connection-rate test: the test's own listener, no data paths.
    Connect,
}

fn shape(spec: &RemoteSpec) -> Shape {
    match spec {
        RemoteSpec::Connect(_) => Shape::Connect,
        RemoteSpec::Udp(_) => Shape::Udp,
        RemoteSpec::Latency(l) if l.transport == LatencyTransport::Udp => Shape::Udp,
        RemoteSpec::Latency(_) | RemoteSpec::Tcp(_) => Shape::Tcp,
    }
}

/// Where the session stands.
#[derive(Debug)]
enum State {
    /// Welcome sent; the key proof is due.
    AwaitAuth { deadline: Instant },
    /// The key proof failed; the verdict goes out at `until`.
    AuthDelay { until: Instant, why: String },
    /// The test request is due.
    AwaitRequest { deadline: Instant },
    /// The driver is checking the test against the limits.
    Admitting,
    /// The data paths are arriving.
    Paths(Paths),
    /// Set up; the client holds the start until its `flows_ready`.
    Held { deadline: Instant },
    /// Connection-rate test: the driver opens the listener.
    Listening,
    /// The test runs.
    Running(Watch),
    /// Connection-rate test: the client's report arrived; the driver stops the listener.
    Stopping,
    /// This end's results went out; the client's are due (for the log).
    AwaitResults { deadline: Instant },
    /// Over: all input is ignored.
    Done,
}

/// The timers of a running test.
#[derive(Debug)]
struct Watch {
    last_heard: Instant,
    last_sent: Instant,
    silence: Duration,
    /// The test ends early when it reaches this.
    limit: Option<Instant>,
}

/// The native server session machine. See the crate's documentation for the contract.
#[derive(Debug)]
pub struct Session {
    cfg: Config,
    client_nonce: Option<String>,
    state: State,
    out: VecDeque<Output>,
    spec: Option<RemoteSpec>,
    held: bool,
    /// The test's latency probes arrive on this flow (`--latency-probe`).
    probe_flow: Option<u32>,
    /// The data plane runs (or the connect listener is up): an early end tears it down.
    side_up: bool,
    /// The client's scheduled start (`start_at`), Unix seconds.
    start_at: Option<f64>,
}

impl Session {
    /// A session for a client that said `hello`: the welcome (or, for another protocol
    /// version, the refusal) is the first output.
    pub fn new(cfg: Config, hello: Hello, now: Instant) -> Session {
        let mut s = Session {
            cfg,
            client_nonce: hello.nonce,
            state: State::AwaitRequest {
                deadline: now + REQUEST_TIMEOUT,
            },
            out: VecDeque::new(),
            spec: None,
            held: false,
            probe_flow: None,
            side_up: false,
            start_at: None,
        };
        if hello.protocol != PROTOCOL_VERSION {
            let why = format!(
                "protocol version mismatch: the client ({}) speaks {}, this server speaks {PROTOCOL_VERSION}",
                hello.software, hello.protocol
            );
            s.out
                .push_back(Output::SendRaw(hakaru_proto::MAGIC.to_vec()));
            s.send(Message::Error {
                message: why.clone(),
            });
            s.end(Ending::Rejected(why));
            return s;
        }
        let welcome = s.welcome();
        s.out
            .push_back(Output::SendRaw(hakaru_proto::native::opening(&welcome)));
        if s.cfg.psk.is_some() {
            s.state = State::AwaitAuth {
                deadline: now + REQUEST_TIMEOUT,
            };
        }
        s
    }

    /// With a key, a stranger learns that this is a hakaru server that wants one, and no
    /// more: version, clock, OS and boot id follow the key proof.
    fn welcome(&self) -> Message {
        match (&self.cfg.psk, &self.cfg.nonce) {
            (Some(_), nonce) => Message::Welcome {
                protocol: PROTOCOL_VERSION,
                software: "hakaru".into(),
                unix_time: None,
                host: None,
                auth: Some(nonce.clone().unwrap_or_default()),
                os: None,
            },
            (None, _) => {
                let i = self.cfg.info.clone();
                Message::Welcome {
                    protocol: PROTOCOL_VERSION,
                    software: i.software,
                    unix_time: i.unix_time,
                    host: i.host,
                    auth: None,
                    os: i.os,
                }
            }
        }
    }

    /// The test, once requested.
    pub fn spec(&self) -> Option<&RemoteSpec> {
        self.spec.as_ref()
    }

    /// The instant the client scheduled the data to begin at (`start_at`, Unix seconds by the
    /// client's clock, which the server's side takes as its own): the side the driver starts
    /// on [`Output::StartSide`] waits for it.
    pub fn start_at(&self) -> Option<f64> {
        self.start_at
    }

    /// Why a running test hit its limit.
    fn past_limit(&self) -> String {
        match &self.spec {
            Some(RemoteSpec::Connect(c)) => format!(
                "the client sent no results within {} s of the end of the test",
                (connect_limit(c) - c.duration.0).as_secs()
            ),
            _ => format!(
                "the test ran past the server's limit of {:.0} s (--max-duration)",
                self.cfg.max_duration.unwrap_or_default().as_secs_f64()
            ),
        }
    }

    fn on_auth(&mut self, input: Input, deadline: Instant, now: Instant) {
        let why = match input {
            Input::Message(Message::Auth { proof }) => {
                if let (Some(psk), Some(sn), Some(cn)) =
                    (&self.cfg.psk, &self.cfg.nonce, &self.client_nonce)
                {
                    if hakaru_proto::auth::is_nonce(cn) && psk.verify_client(sn, cn, &proof) {
                        let proof = psk.server_proof(cn, sn);
                        let server = Some(self.cfg.info.clone());
                        self.send(Message::AuthOk { proof, server });
                        self.state = State::AwaitRequest {
                            deadline: now + REQUEST_TIMEOUT,
                        };
                        return;
                    }
                }
                "wrong key".to_string()
            }
            Input::Message(Message::TestRequest { .. }) => {
                "no key (the server requires --psk-file or HAKARU_PSK)".to_string()
            }
            Input::Message(other) => format!("expected auth, got {}", other.name()),
            Input::Closed => return self.end(Ending::AuthFailed(closed_early())),
            Input::Garbage(e) | Input::ReadFailed(e) => return self.end(Ending::AuthFailed(e)),
            _ => {
                self.state = State::AwaitAuth { deadline };
                return;
            }
        };
        self.state = State::AuthDelay {
            until: now + AUTH_FAIL_DELAY,
            why,
        };
    }

    fn on_request(&mut self, input: Input, deadline: Instant, now: Instant) {
        match input {
            Input::Message(Message::TestRequest { test, held_start }) => {
                // The one place a local kind is refused: past here the test is a RemoteSpec.
                let test = match RemoteSpec::try_from(*test) {
                    Ok(t) => t,
                    Err(e) => {
                        let reason = e.to_string();
                        self.send(Message::Refused {
                            reason: reason.clone(),
                        });
                        return self.end(Ending::Rejected(reason));
                    }
                };
                // Probes hold the start: the client says `flows_ready` after their idle
                // baseline.
                let spec = test.to_spec();
                let probe = spec.latency_probe().is_some();
                self.probe_flow = probe.then(|| spec.probe_flow());
                self.held = held_start || probe;
                self.spec = Some(test.clone());
                self.out.push_back(Output::Admit {
                    spec: Box::new(test),
                    held: self.held,
                });
                self.state = State::Admitting;
            }
            Input::Message(other) => {
                let why = format!("expected a test request, got {}", other.name());
                self.send(Message::Error {
                    message: why.clone(),
                });
                self.end(Ending::Rejected(why));
            }
            Input::Garbage(e) => {
                self.send(Message::Error { message: e.clone() });
                self.end(Ending::Rejected(e));
            }
            Input::ReadFailed(e) => self.end(Ending::Rejected(e)),
            Input::Closed => self.end(Ending::Rejected(closed_early())),
            _ => {
                let _ = now;
                self.state = State::AwaitRequest { deadline };
            }
        }
    }

    fn on_admission(&mut self, input: Input, now: Instant) {
        let Some(spec) = self.spec.clone() else {
            return self.end(Ending::Rejected("internal error: no test".into()));
        };
        match input {
            Input::Admitted { test_id, token } => {
                let probe_flow = self.probe_flow;
                self.send(Message::Accepted {
                    test_id,
                    token,
                    probe_flow,
                });
                match shape(&spec) {
                    Shape::Connect if self.held => self.hold(now),
                    Shape::Connect => self.open_listener(),
                    s => {
                        let udp = s == Shape::Udp;
                        let held = self.held;
                        let count = spec.to_spec().data_paths();
                        self.state = State::Paths(Paths::new(count, udp, held, now));
                    }
                }
            }
            Input::Refused(reason) => {
                self.send(Message::Refused {
                    reason: reason.clone(),
                });
                self.end(Ending::Rejected(reason));
            }
            // Messages wait in the socket until the driver reads again; what arrives here
            // is the client giving up.
            Input::Message(Message::Error { message }) => {
                self.end(Ending::Rejected(format!("client: {message}")))
            }
            Input::Closed => self.end(Ending::Rejected(closed_early())),
            Input::Garbage(e) | Input::ReadFailed(e) => self.end(Ending::Rejected(e)),
            _ => self.state = State::Admitting,
        }
    }

    fn on_paths(&mut self, mut p: Paths, input: Input, now: Instant) {
        let step = match input {
            Input::PathArrived { flow } => {
                if Some(flow) == self.probe_flow && !p.has(flow) {
                    self.out.push_back(Output::StartProbe { flow });
                }
                p.arrived(flow, now)
            }
            Input::Message(Message::StartAt { at_unix }) => self.schedule(at_unix).map(|()| false),
            Input::Message(m) => p.message(m),
            Input::Closed => Err((
                format!("while waiting for data paths: {}", closed_text()),
                false,
            )),
            Input::Garbage(e) | Input::ReadFailed(e) => {
                Err((format!("while waiting for data paths: {e}"), false))
            }
            _ => Ok(false),
        };
        match step {
            Err((why, tell)) => self.abort(why, tell),
            Ok(true) => {
                self.out.push_back(Output::PathsComplete);
                if self.held && !p.udp() && !p.go() {
                    self.hold(now)
                } else {
                    self.start(now)
                }
            }
            Ok(false) => self.state = State::Paths(p),
        }
    }

    /// Sends `start` and starts the data plane (tcp, udp, latency).
    fn start(&mut self, now: Instant) {
        let Some(spec) = &self.spec else { return };
        let silence = silence_limit(spec.kind().common().stall_timeout.0);
        // A scheduled start's data begins up to MAX_START_AHEAD later: the grace stays whole.
        let ahead = if self.start_at.is_some() {
            MAX_START_AHEAD
        } else {
            Duration::ZERO
        };
        let limit = self
            .cfg
            .max_duration
            .map(|m| now + ahead + m + CUTOFF_GRACE);
        self.out.push_back(Output::TakeBaseline);
        self.send(Message::Start);
        self.out.push_back(Output::StartSide);
        self.side_up = true;
        self.state = State::Running(Watch {
            last_heard: now,
            last_sent: now,
            silence,
            limit,
        });
    }

    fn open_listener(&mut self) {
        self.out.push_back(Output::OpenConnectListener);
        self.state = State::Listening;
    }

    fn on_listening(&mut self, input: Input, now: Instant) {
        let Some(RemoteSpec::Connect(c)) = &self.spec else {
            return self.abort("internal error: not a connection-rate test".into(), true);
        };
        match input {
            Input::ConnectListening { port } => {
                let (silence, limit) = (silence_limit(c.connect_timeout.0), connect_limit(c));
                self.side_up = true;
                let server_closes = c.server_closes_first();
                self.send(Message::ConnectPort {
                    port,
                    server_closes,
                });
                self.state = State::Running(Watch {
                    last_heard: now,
                    last_sent: now,
                    silence,
                    limit: Some(now + limit),
                });
            }
            Input::Closed => self.abort(closed_mid_test(), false),
            Input::Garbage(e) | Input::ReadFailed(e) => self.abort(e, true),
            _ => self.state = State::Listening,
        }
    }

    fn on_running(&mut self, mut w: Watch, input: Input, now: Instant) {
        let connect = matches!(self.spec, Some(RemoteSpec::Connect(_)));
        match input {
            Input::Message(m @ (Message::Keepalive | Message::Stop | Message::SendDone { .. })) => {
                w.last_heard = now;
                match m {
                    Message::Stop if !connect => self.out.push_back(Output::StopSending),
                    Message::SendDone { sent } if !connect => {
                        self.out.push_back(Output::PeerDone(sent))
                    }
                    Message::SendDone { .. } => return self.unexpected(&m),
                    _ => {}
                }
                self.state = State::Running(w);
            }
            Input::Message(Message::Finished { .. }) if connect => {
                self.out.push_back(Output::StopSide);
                self.state = State::Stopping;
            }
            Input::Message(Message::Error { message }) => {
                self.abort(format!("the client reported: {message}"), false)
            }
            Input::Message(other) => self.unexpected(&other),
            Input::Closed => self.abort(closed_mid_test(), false),
            Input::Garbage(e) | Input::ReadFailed(e) => self.abort(e, true),
            Input::SideDone(report) if !connect => {
                self.side_up = false;
                self.send(Message::Finished { report });
                self.state = State::AwaitResults {
                    deadline: now + RESULTS_TIMEOUT,
                };
            }
            _ => self.state = State::Running(w),
        }
    }

    fn unexpected(&mut self, m: &Message) {
        self.abort(
            format!("unexpected {} message during the test", m.name()),
            true,
        )
    }

    fn on_stopping(&mut self, input: Input) {
        match input {
            Input::SideDone(report) => {
                self.side_up = false;
                self.send(Message::Finished { report });
                self.end(Ending::Finished);
            }
            _ => self.state = State::Stopping,
        }
    }

    fn on_results(&mut self, input: Input, deadline: Instant) {
        match input {
            Input::Message(Message::Finished { .. })
            | Input::Closed
            | Input::Garbage(_)
            | Input::ReadFailed(_) => self.end(Ending::Finished),
            _ => self.state = State::AwaitResults { deadline },
        }
    }

    fn send(&mut self, msg: Message) {
        self.out.push_back(Output::Send(msg));
    }

    /// Ends an admitted test early: the data plane goes, and with `tell` the client hears why.
    fn abort(&mut self, why: String, tell: bool) {
        if self.side_up {
            self.side_up = false;
            self.out.push_back(Output::AbortSide);
        }
        if tell {
            self.send(Message::Error {
                message: why.clone(),
            });
        }
        self.end(Ending::Aborted { why, told: tell });
    }

    fn end(&mut self, how: Ending) {
        self.out.push_back(Output::End(how));
        self.state = State::Done;
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
        let input = match input {
            Input::Shutdown => {
                if self.spec.is_some() {
                    self.abort("the server is shutting down".into(), true);
                } else {
                    self.end(Ending::Rejected("the server is shutting down".into()));
                }
                return;
            }
            Input::Failed(why) => {
                // What the machine queued after the action that failed is moot.
                self.out.clear();
                self.abort(format!("on the server: {why}"), true);
                return;
            }
            other => other,
        };
        match std::mem::replace(&mut self.state, State::Done) {
            State::AwaitAuth { deadline } => self.on_auth(input, deadline, now),
            s @ State::AuthDelay { .. } => self.state = s,
            State::AwaitRequest { deadline } => self.on_request(input, deadline, now),
            State::Admitting => self.on_admission(input, now),
            State::Paths(p) => self.on_paths(p, input, now),
            State::Held { deadline } => self.on_held(input, deadline, now),
            State::Listening => self.on_listening(input, now),
            State::Running(w) => self.on_running(w, input, now),
            State::Stopping => self.on_stopping(input),
            State::AwaitResults { deadline } => self.on_results(input, deadline),
            State::Done => {}
        }
    }

    /// Acts on whatever deadline `now` has reached.
    fn handle_timeout(&mut self, now: Instant) {
        match &mut self.state {
            State::AwaitAuth { deadline } if now >= *deadline => {
                let why = format!("no key proof within {} s", REQUEST_TIMEOUT.as_secs());
                self.end(Ending::AuthFailed(why));
            }
            State::AuthDelay { until, why } if now >= *until => {
                let why = std::mem::take(why);
                self.send(Message::Error {
                    message: "authentication failed: the server requires a pre-shared key, and the client did not prove it holds it (--psk-file or HAKARU_PSK)".into(),
                });
                self.end(Ending::AuthFailed(why));
            }
            State::AwaitRequest { deadline } if now >= *deadline => {
                let why = format!("no test request within {} s", REQUEST_TIMEOUT.as_secs());
                self.end(Ending::Rejected(why));
            }
            State::Paths(p) if now >= p.deadline() => {
                let why = p.timed_out(self.cfg.udp_port);
                self.abort(why, true);
            }
            State::Held { deadline } if now >= *deadline => self.abort(held_too_long(), true),
            State::AwaitResults { deadline } if now >= *deadline => self.end(Ending::Finished),
            State::Running(w) => {
                if w.limit.is_some_and(|l| now >= l) {
                    let why = self.past_limit();
                    self.abort(why, true);
                } else if now >= w.last_heard + w.silence {
                    let why = format!(
                        "the client sent nothing for {:.0} s ({}): the path or the client is down",
                        w.silence.as_secs_f64(),
                        match self.spec.as_ref().map(shape) {
                            Some(Shape::Connect) => "--connect-timeout",
                            _ => "--stall-timeout",
                        }
                    );
                    self.abort(why, true);
                } else if now >= w.last_sent + KEEPALIVE_EVERY {
                    w.last_sent = now;
                    self.send(Message::Keepalive);
                }
            }
            _ => {}
        }
    }

    /// When the machine next needs [`Session::handle_timeout`].
    fn timeout(&self) -> Option<Instant> {
        match &self.state {
            State::AwaitAuth { deadline }
            | State::AwaitRequest { deadline }
            | State::Held { deadline }
            | State::AwaitResults { deadline } => Some(*deadline),
            State::AuthDelay { until, .. } => Some(*until),
            State::Paths(p) => Some(p.deadline()),
            State::Running(w) => {
                let t = (w.last_heard + w.silence).min(w.last_sent + KEEPALIVE_EVERY);
                Some(w.limit.map_or(t, |l| l.min(t)))
            }
            State::Admitting | State::Listening | State::Stopping | State::Done => None,
        }
    }

    /// The next action, until `None`.
    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The session is over (its `End` has been given).
    fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

/// A connection-rate test's whole allowance: the test, a connection started just before its
/// end (a connect, a send and a receive timeout), the results, and the silence limit.
fn connect_limit(c: &hakaru_model::ConnectSpec) -> Duration {
    c.duration.0 + c.connect_timeout.0 * 3 + RESULTS_TIMEOUT + silence_limit(c.connect_timeout.0)
}

fn closed_text() -> &'static str {
    "the peer closed the control connection"
}

fn closed_early() -> String {
    closed_text().to_string()
}

fn closed_mid_test() -> String {
    "the client closed the control connection mid-test".into()
}
