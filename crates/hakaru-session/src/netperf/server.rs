//! A stock netperf client's control session on `hakaru server`, as a machine.
//!
//! netperf's control connection carries fixed 656-byte records (`hakaru_proto::netperf`). The
//! session keeps netserver's order of things:
//!
//! ```text
//! [PASSPHRASE, when the server has one] -> { housekeeping request -> answer
//!                                          | DO_OMNI -> [set up] -> OMNI_RESPONSE
//!                                              -> data phase -> results } ...
//! ```
//!
//! netserver answers an unknown request type with errno 998 and keeps serving; a passphrase
//! that does not match (or a first message that is not one) closes the connection without an
//! answer, as netserver built without SEND_PASSPHRASE_RESPONSE does. The driver (hakaru-server's
//! `netperf`) admits each test against the server's limits, binds its data socket and runs the
//! data phase; the machine decides what is said and when, and how long each phase may take.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hakaru_proto::netperf::{
    self as wire, encode_cpu_calibrate, encode_debug_ok, encode_error, encode_sysinfo, kind,
    OmniRequest, OmniResponse, OmniResults, Request, MSG_LEN,
};

/// How long netserver waits for the passphrase when it has one.
pub const PASSPHRASE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a control connection may sit between tests (netserver waits forever; a server
/// that strangers reach must not). Only progress restarts it: the passphrase accepted, a
/// test's results sent; housekeeping requests (CPU_CALIBRATE, DEBUG, ...) do not.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Housekeeping requests (CPU_CALIBRATE, DEBUG, SYSINFO, unknown types) answered between two
/// tests; netperf sends one or two. One more ends the session.
pub const MAX_REQUESTS_BETWEEN_TESTS: u32 = 16;
/// The UDP_RR response the server sends whatever the request's size: one Ethernet frame's
/// payload (1500 - 20 - 8). A larger response must not be larger than the request.
pub const UDP_RR_FREE_RESPONSE: usize = 1472;
/// The data ports a test may ask for (`-P ,PORT`) by default: none of the privileged ones.
pub const DEFAULT_DATA_PORTS: (u16, u16) = (1024, 65535);
/// How long the driver may take to set a test up.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Past the data phase's own end (its length plus netserver's pad, or `--max-duration`), how
/// long the machine waits for the data plane's report before it gives up on the test.
pub const GRACE: Duration = Duration::from_secs(30);
/// The CPU rate netserver's /proc/stat method reports (a percentage scale, not a loop rate).
pub const CPU_RATE: f32 = 100.0;
/// Control bytes buffered while a test runs (netperf sends none then).
const MAX_INBOX: usize = 4 * MSG_LEN;

/// errno values netserver would answer with (Linux numbering, as the client prints them).
pub mod errno {
    /// Invalid argument: a test the server's limits refuse (the log names the limit).
    pub const EINVAL: i32 = 22;
    /// Protocol not supported (SCTP, DCCP, ...).
    pub const EPROTONOSUPPORT: i32 = 93;
    /// Operation not supported (a UDP test in which the server would send first).
    pub const EOPNOTSUPP: i32 = 95;
    /// Address family not supported.
    pub const EAFNOSUPPORT: i32 = 97;
    /// Resource temporarily unavailable: the server is busy.
    pub const EAGAIN: i32 = 11;
    /// Permission denied: a data port outside `--netperf-data-ports`.
    pub const EACCES: i32 = 13;
    /// Timed out: the data path moved nothing for `--stall-timeout`.
    pub const ETIMEDOUT: i32 = 110;
}

/// What the session needs to know of the server.
#[derive(Debug, Clone)]
pub struct Config {
    /// The `-Z` passphrase every connection must send first; `None`: none asked.
    pub passphrase: Option<Vec<u8>>,
    /// CPUs the server measures over (CPU_CALIBRATE's answer).
    pub cpus: u32,
    /// `--max-duration`: longer timed tests are refused, counted ones stopped there.
    pub max_duration: Option<Duration>,
    /// `--netperf-data-ports`: the data ports a test may ask for (first and last).
    pub data_ports: (u16, u16),
}

impl Default for Config {
    fn default() -> Self {
        Config {
            passphrase: None,
            cpus: 0,
            max_duration: None,
            data_ports: DEFAULT_DATA_PORTS,
        }
    }
}

/// What happens to a session.
#[derive(Debug)]
pub enum Input {
    /// Bytes read from the control connection.
    Bytes(Vec<u8>),
    /// The client closed the control connection.
    PeerClosed,
    /// Reading the control connection failed.
    ReadFailed(String),
    /// The answer to [`Output::SetUp`]: admitted, the data socket is bound.
    Ready(OmniResponse),
    /// The answer to [`Output::SetUp`]: refused or failed; the client hears `errno`.
    Refused {
        /// What the client is told.
        errno: i32,
        /// What the log says.
        why: String,
    },
    /// The data phase ended with these figures.
    DataDone(Box<OmniResults>),
    /// The data phase failed; the client hears `errno`.
    DataFailed {
        /// What the client is told.
        errno: i32,
        /// What the log says.
        why: String,
    },
    /// Something the driver was asked to do failed (a write): queued outputs are dropped.
    Failed(String),
    /// The server is shutting down.
    Shutdown,
}

/// What the driver does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write these bytes (one message).
    Send(Vec<u8>),
    /// Admit the test and bind its data socket; answer [`Input::Ready`] or [`Input::Refused`].
    SetUp(Box<OmniRequest>),
    /// Start the data phase (the response went just before).
    StartData,
    /// Tear the data phase down: the session ends early.
    StopData,
    /// The session is over.
    End(Ending),
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The client closed after `tests` tests.
    Closed {
        /// Tests whose results went out.
        tests: u32,
    },
    /// Refused: a test the server does not run (the client was told).
    Refused(String),
    /// A wrong passphrase, or none where the server asks for one: closed without an answer
    /// (the driver may first wait, and counts it against the client's budget).
    BadPassphrase(String),
    /// Ended early.
    Failed(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Passphrase,
    Idle,
    SettingUp,
    Running,
    Done,
}

/// One control connection.
#[derive(Debug)]
pub struct Session {
    cfg: Config,
    phase: Phase,
    inbox: Vec<u8>,
    out: VecDeque<Output>,
    deadline: Instant,
    tests: u32,
    /// Housekeeping requests since the last test (or the start).
    requests: u32,
}

impl Session {
    /// A session for a connection accepted at `now`.
    pub fn new(cfg: Config, now: Instant) -> Session {
        let (phase, wait) = if cfg.passphrase.is_some() {
            (Phase::Passphrase, PASSPHRASE_TIMEOUT)
        } else {
            (Phase::Idle, IDLE_TIMEOUT)
        };
        Session {
            cfg,
            phase,
            inbox: Vec::new(),
            out: VecDeque::new(),
            deadline: now + wait,
            tests: 0,
            requests: 0,
        }
    }

    /// The longest a data phase may run before the machine gives up on its report.
    fn running_limit(&self) -> Duration {
        GRACE
            + self
                .cfg
                .max_duration
                .unwrap_or(Duration::from_secs(24 * 3600))
    }

    /// Handles every whole message in the inbox while the session is between tests. Only
    /// progress (the passphrase accepted, a test set up) moves the deadline.
    fn parse(&mut self, now: Instant) {
        while matches!(self.phase, Phase::Idle | Phase::Passphrase) && self.inbox.len() >= MSG_LEN {
            let msg: Vec<u8> = self.inbox.drain(..MSG_LEN).collect();
            let Ok(req) = Request::decode(&msg) else {
                continue;
            };
            if self.phase == Phase::Passphrase {
                self.check_passphrase(req, now);
                continue;
            }
            if !matches!(req, Request::Omni(_)) {
                self.requests = self.requests.saturating_add(1);
                if self.requests > MAX_REQUESTS_BETWEEN_TESTS {
                    self.end(Ending::Failed(format!(
                        "{} requests without a test (netperf sends one or two; at most {MAX_REQUESTS_BETWEEN_TESTS})",
                        self.requests
                    )));
                    return;
                }
            }
            match req {
                // netserver ignores a passphrase after the first message.
                Request::Passphrase(_) => {}
                Request::CpuCalibrate => self
                    .out
                    .push_back(Output::Send(encode_cpu_calibrate(CPU_RATE, self.cfg.cpus))),
                Request::Debug => self.out.push_back(Output::Send(encode_debug_ok())),
                Request::Sysinfo => self.out.push_back(Output::Send(encode_sysinfo())),
                Request::Other(_) => self
                    .out
                    .push_back(Output::Send(encode_error(0, wire::ERRNO_UNKNOWN_TEST))),
                Request::Omni(o) => match self.check(&o) {
                    Ok(()) => {
                        self.out.push_back(Output::SetUp(o));
                        self.phase = Phase::SettingUp;
                        self.deadline = now + SETUP_TIMEOUT;
                    }
                    Err((errno, why)) => {
                        self.out
                            .push_back(Output::Send(encode_error(kind::OMNI_RESPONSE, errno)));
                        self.end(Ending::Refused(why));
                    }
                },
            }
        }
    }

    fn check_passphrase(&mut self, req: Request, now: Instant) {
        let want = self.cfg.passphrase.as_deref().unwrap_or_default();
        match req {
            Request::Passphrase(p) if constant_time_eq(&p, want) => {
                self.phase = Phase::Idle;
                self.deadline = now + IDLE_TIMEOUT;
            }
            Request::Passphrase(_) => {
                self.end(Ending::BadPassphrase("wrong passphrase (-Z)".into()))
            }
            _ => self.end(Ending::BadPassphrase(
                "no passphrase (-Z) in the first message; the server asks for one".into(),
            )),
        }
    }

    /// What the machine itself refuses, before the driver sees the test.
    fn check(&self, o: &OmniRequest) -> Result<(), (i32, String)> {
        match o.protocol {
            wire::PROTO_TCP | wire::PROTO_UDP => {}
            p => {
                return Err((
                    errno::EPROTONOSUPPORT,
                    format!("protocol {p} (only TCP and UDP are served)"),
                ))
            }
        }
        if !matches!(o.ipfamily, wire::NF_UNSPEC | wire::NF_INET | wire::NF_INET6) {
            return Err((
                errno::EAFNOSUPPORT,
                format!("address family {}", o.ipfamily),
            ));
        }
        let udp = o.protocol == wire::PROTO_UDP;
        if udp && (o.xmit_only() || o.connect_test()) {
            return Err((
                errno::EOPNOTSUPP,
                "a UDP test in which the server sends first (it would send to an address the request names)".into(),
            ));
        }
        if udp && o.test_length < 0 {
            return Err((errno::EINVAL, "a counted UDP test".into()));
        }
        if udp && o.is_rr() {
            check_udp_rr_sizes(o)?;
        }
        check_data_port(o.data_port, self.cfg.data_ports)?;
        if let (Some(max), Ok(secs)) = (self.cfg.max_duration, u64::try_from(o.test_length)) {
            if Duration::from_secs(secs) > max {
                return Err((
                    errno::EINVAL,
                    format!(
                        "the test would run {secs} s; the server runs tests of at most {} s (--max-duration)",
                        max.as_secs()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn end(&mut self, how: Ending) {
        self.out.push_back(Output::End(how));
        self.phase = Phase::Done;
        self.inbox = Vec::new();
    }
}

impl crate::Machine for Session {
    type Input = Input;
    type Output = Output;

    /// Takes what happened.
    fn handle(&mut self, input: Input, now: Instant) {
        if self.phase == Phase::Done {
            return;
        }
        match input {
            Input::Bytes(b) => {
                self.inbox.extend_from_slice(&b);
                if self.phase == Phase::Running || self.phase == Phase::SettingUp {
                    if self.inbox.len() > MAX_INBOX {
                        self.out.push_back(Output::StopData);
                        self.end(Ending::Failed(format!(
                            "the client sent {} control bytes during a test (netperf sends none)",
                            self.inbox.len()
                        )));
                    }
                    return;
                }
                self.parse(now);
            }
            Input::PeerClosed => match self.phase {
                Phase::Idle if self.inbox.is_empty() => {
                    self.end(Ending::Closed { tests: self.tests })
                }
                Phase::Idle | Phase::Passphrase => self.end(Ending::Failed(format!(
                    "the client closed with {} bytes of a message unsent",
                    self.inbox.len()
                ))),
                Phase::SettingUp | Phase::Running => {
                    self.out.push_back(Output::StopData);
                    self.end(Ending::Failed("the client closed during a test".into()))
                }
                Phase::Done => {}
            },
            Input::ReadFailed(e) => {
                if self.phase == Phase::Running || self.phase == Phase::SettingUp {
                    self.out.push_back(Output::StopData);
                }
                self.end(Ending::Failed(format!("control connection: {e}")))
            }
            Input::Ready(resp) if self.phase == Phase::SettingUp => {
                self.out.push_back(Output::Send(resp.encode()));
                self.out.push_back(Output::StartData);
                self.phase = Phase::Running;
                // The data plane keeps the test's own clock; this only bounds a stuck one.
                self.deadline = now + self.running_limit();
            }
            Input::Refused { errno, why } if self.phase == Phase::SettingUp => {
                self.out
                    .push_back(Output::Send(encode_error(kind::OMNI_RESPONSE, errno)));
                self.end(Ending::Refused(why));
            }
            Input::DataDone(results) if self.phase == Phase::Running => {
                self.out.push_back(Output::Send(results.encode()));
                self.tests = self.tests.saturating_add(1);
                self.phase = Phase::Idle;
                self.deadline = now + IDLE_TIMEOUT;
                self.requests = 0;
                self.parse(now);
            }
            Input::DataFailed { errno, why } if self.phase == Phase::Running => {
                self.out
                    .push_back(Output::Send(encode_error(kind::OMNI_RESPONSE, errno)));
                self.end(Ending::Failed(why));
            }
            Input::Failed(why) => {
                let running = self.phase == Phase::Running || self.phase == Phase::SettingUp;
                self.out.clear();
                if running {
                    self.out.push_back(Output::StopData);
                }
                self.end(Ending::Failed(why));
            }
            Input::Shutdown => {
                if self.phase == Phase::Running || self.phase == Phase::SettingUp {
                    self.out.push_back(Output::StopData);
                }
                self.end(Ending::Failed("the server is shutting down".into()));
            }
            other => {
                // An answer the machine did not ask for: a driver bug, never the peer's doing.
                let why = format!("internal: {other:?} in phase {:?}", self.phase);
                if self.phase == Phase::Running {
                    self.out.push_back(Output::StopData);
                }
                self.end(Ending::Failed(why));
            }
        }
    }

    /// Call once `now` has reached [`Session::timeout`].
    fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Done || now < self.deadline {
            return;
        }
        let why = match self.phase {
            Phase::Passphrase => format!("no passphrase within {} s", PASSPHRASE_TIMEOUT.as_secs()),
            Phase::Idle => format!("no request for {} s", IDLE_TIMEOUT.as_secs()),
            Phase::SettingUp => format!(
                "setting the test up took over {} s",
                SETUP_TIMEOUT.as_secs()
            ),
            Phase::Running => "the data phase overran its length".to_string(),
            Phase::Done => return,
        };
        if self.phase == Phase::Running {
            self.out.push_back(Output::StopData);
        }
        self.end(Ending::Failed(why));
    }

    /// When [`Session::handle_timeout`] is due.
    fn timeout(&self) -> Option<Instant> {
        (self.phase != Phase::Done).then_some(self.deadline)
    }

    /// The next action, until `None`.
    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// True once the session has given its end.
    fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }
}

/// A UDP_RR test's response may be larger than its request only up to
/// [`UDP_RR_FREE_RESPONSE`]: one small datagram must not buy a large one.
fn check_udp_rr_sizes(o: &OmniRequest) -> Result<(), (i32, String)> {
    let size = |n: i32| usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1);
    let (req, resp) = (size(o.request_size), size(o.response_size));
    if resp > req.max(UDP_RR_FREE_RESPONSE) {
        return Err((
            errno::EINVAL,
            format!(
                "UDP_RR with {resp}-byte responses to {req}-byte requests (-r {req},{resp}): the server answers a UDP request with at most {UDP_RR_FREE_RESPONSE} bytes or the request's size, whichever is larger (fixed limit)"
            ),
        ));
    }
    Ok(())
}

/// A data port the test asks for (`-P ,PORT`; 0: any) must lie in `--netperf-data-ports`.
fn check_data_port(port: u32, (lo, hi): (u16, u16)) -> Result<(), (i32, String)> {
    if port == 0 || (u32::from(lo)..=u32::from(hi)).contains(&port) {
        return Ok(());
    }
    Err((
        errno::EACCES,
        format!(
            "data port {port} asked (-P ,{port}): the server binds netperf data ports only in {lo}-{hi} (--netperf-data-ports)"
        ),
    ))
}

/// Compares without stopping at the first difference (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
