//! `hakaru tcp|udp|pps|latency|connect HOST --netperf`: a test against a stock netserver
//! (netperf 2.6 and 2.7).
//!
//! Each flow is one netperf test with a control connection of its own, as the cloud guides run
//! N netperf processes side by side (`hakaru_session::netperf::request` maps the test; the
//! machine `hakaru_session::netperf::client` runs each control session). The data moves
//! through hakaru's own engine (its counters, intervals and histograms); netperf's end of the
//! data is kept (the sender's FIN, three empty datagrams, the connection closed after the last
//! round trip), and netserver's results become the server's side of the result, as `--iperf3`
//! takes iperf3's.

mod bulk;
mod rr;

use hakaru_session::Machine as _;
use std::net::{SocketAddr, TcpStream};
use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_engine::control::{RawConn, Received, Transport};
use hakaru_engine::drive::{raw_input, Carrier, Drive, OnReset};
use hakaru_engine::Observer;
use hakaru_model::{Environment, RunResult, SideReport, TestSpec};
use hakaru_proto::netperf::{OmniRequest, OmniResponse, OmniResults, MSG_LEN};
use hakaru_session::netperf::client::{self as machine, errno_text, Input, Output};
use hakaru_session::netperf::request::{plan, Plan};

use crate::{connect_one, resolve, ClientError, ClientOptions};

/// netserver's control port (`--netperf` without -p).
pub const DEFAULT_PORT: u16 = hakaru_proto::netperf::DEFAULT_PORT;

/// The note every `--netperf` result carries.
fn peer_note(name: &str, tests: usize) -> String {
    let each = if tests == 1 {
        "1 {name} test on a control connection of its own".replace("{name}", name)
    } else {
        format!("{tests} {name} tests, each on a control connection of its own")
    };
    format!(
        "peer: a stock netserver (--netperf), {each}; the server figures are netserver's \
         results, so intervals show this end only"
    )
}

/// One netperf test: its session, driven a turn at a time (a run's tests share a thread).
struct Test {
    m: machine::Session,
    io: Link,
    drive: Drive,
}

/// One test's control connection and what its machine said.
struct Link {
    conn: RawConn,
    ready: Option<OmniResponse>,
    results: Option<OmniResults>,
    ended: Option<Result<(), machine::Error>>,
    /// The longest wait of the next turn.
    wait: Duration,
}

impl Test {
    fn new(conn: TcpStream, req: &OmniRequest, passphrase: Option<&[u8]>) -> Test {
        Test {
            m: machine::Session::new(req, passphrase, Instant::now()),
            io: Link {
                conn: RawConn::new(conn, Duration::from_secs(5), MSG_LEN),
                ready: None,
                results: None,
                ended: None,
                wait: Duration::from_millis(1),
            },
            drive: Drive::new(),
        }
    }

    /// One turn of the driver: reads what arrives within `wait` and acts on it and on the
    /// machine's deadline.
    fn step(&mut self, wait: Duration) {
        self.io.wait = wait;
        let _ = self.drive.turn(&mut self.m, &mut self.io);
    }
}

impl Carrier<machine::Session> for Link {
    type Conn = RawConn;
    type End = ();

    fn conn(&mut self) -> &mut RawConn {
        &mut self.conn
    }

    fn act(&mut self, _m: &mut machine::Session, out: Output) -> ControlFlow<()> {
        match out {
            // A write that fails is netserver gone: the next read says so.
            Output::Send(b) => {
                let _ = self.conn.send(&b);
            }
            Output::Ready(r) => self.ready = Some(*r),
            // The run's loop stops the data plane once a test has ended in a failure.
            Output::AbortData => {}
            Output::Results(r) => self.results = Some(*r),
            Output::End(how) => self.ended = Some(how),
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Vec<u8>>) -> Option<Input> {
        raw_input(
            got,
            OnReset::Fail,
            Input::Bytes,
            || Input::Closed,
            Input::ReadFailed,
        )
    }

    fn tick(&self) -> Duration {
        self.wait
    }

    fn finished(&mut self, _m: &mut machine::Session) {}
}

/// The tests of one run, their server and what is said about them.
pub(crate) struct Tests {
    list: Vec<Test>,
    server: SocketAddr,
    addr: String,
    name: &'static str,
    local_address: String,
    /// Notes for the result besides the peer's.
    notes: Vec<String>,
}

impl Tests {
    /// The data ports netserver named, in flow order.
    fn data_addrs(&self) -> Vec<SocketAddr> {
        self.list
            .iter()
            .map(|t| {
                SocketAddr::new(
                    self.server.ip(),
                    t.io.ready.as_ref().map_or(0, |r| r.data_port),
                )
            })
            .collect()
    }

    /// The first test that failed, as the client says it.
    fn failure(&self) -> Option<ClientError> {
        self.list.iter().find_map(|t| match &t.io.ended {
            Some(Err(e)) => Some(self.error(e.clone())),
            _ => None,
        })
    }

    /// Reads every control connection once, briefly: netserver says nothing during a test
    /// unless it fails. `Err` when a test failed (the data plane must stop).
    fn check(&mut self) -> Result<(), ClientError> {
        for t in &mut self.list {
            t.step(Duration::from_millis(1));
        }
        match self.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// This end's data phase is over: netserver's results, test by test.
    fn results(&mut self) -> Result<Vec<OmniResults>, ClientError> {
        for t in &mut self.list {
            t.m.handle(Input::DataDone, Instant::now());
        }
        let wait = Duration::from_millis((20 / self.list.len().max(1) as u64).max(1));
        // Bounded: each machine ends by its results or its results deadline.
        while self.list.iter().any(|t| t.io.ended.is_none()) {
            for t in self.list.iter_mut().filter(|t| t.io.ended.is_none()) {
                t.step(wait);
            }
        }
        if let Some(e) = self.failure() {
            return Err(e);
        }
        Ok(self
            .list
            .iter_mut()
            .map(|t| t.io.results.take().unwrap_or_default())
            .collect())
    }

    /// A machine's error as the client says it.
    fn error(&self, e: machine::Error) -> ClientError {
        let addr = self.addr.clone();
        match e {
            machine::Error::Refused(errno) => ClientError::Refused(format!(
                "netserver at {addr} refused the {} test: {}",
                self.name,
                errno_text(errno)
            )),
            machine::Error::DataFailed(errno) => ClientError::Server(format!(
                "netserver at {addr} failed during the {} test: {}",
                self.name,
                errno_text(errno)
            )),
            machine::Error::Gone(what) => ClientError::ServerGone {
                addr,
                what: format!("(netserver) {what}"),
            },
            machine::Error::Flow(e) => ClientError::Flow(e),
        }
    }

    /// The server's side of the result: netserver, with the flows given.
    fn report(&self, flows: Vec<hakaru_model::FlowSide>) -> SideReport {
        SideReport {
            env: Environment {
                software: "netserver".into(),
                ..Environment::default()
            },
            ..SideReport::flows_only(hakaru_model::End::Server, flows)
        }
    }

    fn note(&self) -> String {
        peer_note(self.name, self.list.len())
    }
}

/// Runs `opts.spec` against a stock netserver at `opts.host:opts.port`.
pub(crate) fn run(
    opts: &ClientOptions,
    observer: &mut dyn Observer,
    stop: Arc<AtomicBool>,
) -> Result<RunResult, ClientError> {
    opts.spec
        .validate()
        .map_err(|e| ClientError::Refused(format!("(checked locally) {}", e.0)))?;
    // Checked before any connection; the address family is set once the server resolves.
    plan(&opts.spec, false).map_err(refused_locally)?;
    let (first, server) = connect_netserver(opts)?;
    // As for a hakaru server: on loopback, cubic rather than a BBR that paces with timers.
    let cubic = crate::loopback_congestion(&opts.spec, server.ip());
    let with_cc;
    let opts = match (&cubic, &opts.spec) {
        (Some(_), TestSpec::Tcp(t)) => {
            with_cc = ClientOptions {
                spec: TestSpec::Tcp(hakaru_model::TcpSpec {
                    congestion: Some("cubic".into()),
                    ..t.clone()
                }),
                ..opts.clone()
            };
            &with_cc
        }
        _ => opts,
    };
    let p = plan(&opts.spec, server.is_ipv6()).map_err(refused_locally)?;
    let mut tests = set_up(opts, first, server, &p)?;
    tests.notes.extend(cubic);
    match &opts.spec {
        TestSpec::Tcp(_) | TestSpec::Udp(_) => bulk::run(opts, &mut tests, observer, &stop),
        TestSpec::Latency(l) => rr::latency(opts, l, &mut tests, observer, &stop),
        TestSpec::Connect(c) => rr::connect(opts, c, &mut tests, observer, &stop),
        _ => Err(refused_locally(
            "only tcp, udp, pps, latency and connect".into(),
        )),
    }
}

fn refused_locally(why: String) -> ClientError {
    ClientError::Refused(format!("(checked locally) --netperf: {why}"))
}

/// The first control connection, to the first of the host's addresses that answers.
fn connect_netserver(opts: &ClientOptions) -> Result<(TcpStream, SocketAddr), ClientError> {
    let mut last = None;
    for a in resolve(&opts.host, opts.port, opts.family)? {
        match connect_one(a, opts.bind, opts.connect_timeout, |_| Ok(())) {
            Ok(s) => return Ok((s, a)),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(ClientError::Connect { addr, reason }) if reason.starts_with("connection refused") => {
            ClientError::Connect {
                addr,
                reason: format!(
                    "connection refused (is netserver running there? --netperf talks to its control port, -p, {DEFAULT_PORT} by default)"
                ),
            }
        }
        Some(e) => e,
        None => ClientError::Resolve {
            host: opts.host.clone(),
            reason: "no address".into(),
        },
    })
}

/// Opens every test's control connection, then asks for the tests one after the other, each
/// answered with its data port. A held start (`--sync-start`) waits between the two: the
/// connections prove netserver is there, and netserver starts a test's timer only when it
/// answers the request.
fn set_up(
    opts: &ClientOptions,
    first: TcpStream,
    server: SocketAddr,
    p: &Plan,
) -> Result<Tests, ClientError> {
    let local_address = first
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let mut tests = Tests {
        list: Vec::with_capacity(p.requests.len()),
        server,
        addr: server.to_string(),
        name: p.name,
        local_address,
        notes: Vec::new(),
    };
    let mut conns = vec![first];
    for _ in 1..p.requests.len() {
        conns.push(connect_one(
            server,
            opts.bind,
            opts.connect_timeout,
            |_| Ok(()),
        )?);
    }
    if let Some(gate) = &opts.gate {
        // netperf's tests start when their requests go out: an instant is waited for here.
        if let Some(at) = (gate.0)().map_err(ClientError::CalledOff)? {
            crate::drive::sleep_to(at);
        }
    }
    for (conn, req) in conns.into_iter().zip(&p.requests) {
        let _ = conn.set_nodelay(true);
        let mut t = Test::new(conn, req, opts.netperf_passphrase.as_deref());
        // Bounded by the machine's response deadline.
        while t.io.ready.is_none() && t.io.ended.is_none() {
            t.step(Duration::from_millis(50));
        }
        if let Some(Err(e)) = t.io.ended.take() {
            return Err(tests.error(e));
        }
        tests.list.push(t);
    }
    Ok(tests)
}

/// Sends netperf's end of a UDP test: three empty datagrams (netserver ends its data loop at
/// the first).
fn empty_datagrams(socks: &[std::net::UdpSocket]) {
    for s in socks {
        for _ in 0..3 {
            let _ = s.send(&[]);
        }
    }
}

/// The result, with the notes every `--netperf` run carries.
fn assemble(
    opts: &ClientOptions,
    tests: &Tests,
    started_unix: f64,
    parts: (
        Vec<hakaru_model::IntervalRecord>,
        SideReport,
        SideReport,
        bool,
    ),
    mut notes: Vec<String>,
) -> RunResult {
    let (intervals, local, remote, interrupted) = parts;
    notes.splice(
        0..0,
        std::iter::once(tests.note()).chain(tests.notes.iter().cloned()),
    );
    hakaru_model::assemble(hakaru_model::AssembleInputs {
        ipv6: tests.server.is_ipv6(),
        spec: opts.spec.clone(),
        server: tests.addr.clone(),
        embedded: opts.embedded,
        local_address: tests.local_address.clone(),
        remote_address: tests.addr.clone(),
        started_unix,
        intervals,
        local,
        remote,
        interrupted,
        notes,
    })
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
