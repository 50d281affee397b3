//! hakaru-client: the client side of a test.
//!
//! Opens the control connection, asks for the test, opens the data connections, runs this
//! end's flows, merges the server's interval samples with its own as they arrive, and
//! assembles the [`RunResult`] from both ends' final reports.

mod bulk;
mod connect;
mod drive;
pub mod find_max;
mod iperf3;
mod latency;
pub mod local;
mod netperf;
mod ntttcp;
mod probe;
pub mod push;
mod sockperf;
mod udp;
pub mod udpst;

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::control::{ControlConn, ControlError};
use hakaru_engine::sockopt::{apply_tcp_options, SockoptError};
use hakaru_engine::tcp::{FlowSocket, SideError};
use hakaru_engine::{sys, Observer};
use hakaru_model::{
    assemble, FlowDir, IntervalRecord, RemoteSpec, Role, RunResult, SideReport, TcpSpec, TestSpec,
};
use hakaru_proto::{native::opening, Message};
use hakaru_session::client::{Config as SessionConfig, Session};
use socket2::{Domain, Protocol, Socket, Type};

pub use hakaru_model::Family;
pub use hakaru_proto::auth::{Psk, MAX_KEY_LEN as MAX_PSK_LEN};
pub use ntttcp::NO_RECEIVER_REPORT as NTTTCP_NOTE;
pub use sockperf::NO_SERVER_REPORT as SOCKPERF_NOTE;
/// A stock netserver's control port (`--netperf` without -p).
pub const NETPERF_DEFAULT_PORT: u16 = netperf::DEFAULT_PORT;
/// The longest passphrase a netperf message carries (`--netperf-passphrase`).
pub const NETPERF_MAX_PASSPHRASE: usize = hakaru_proto::netperf::SPEC_BYTES - 1;
/// A stock ntttcp receiver's first data port (`--ntttcp` without -p).
pub const NTTTCP_DEFAULT_PORT: u16 = hakaru_proto::ntttcp::DEFAULT_PORT;

/// Where to run a test and how.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Server host name or address.
    pub host: String,
    /// Server control port.
    pub port: u16,
    /// Family restriction.
    pub family: Family,
    /// Local address to bind control and data sockets to (`-B`).
    pub bind: Option<IpAddr>,
    /// The test.
    pub spec: TestSpec,
    /// CPUs to pin this end's workers to (`-A`).
    pub affinity: Vec<usize>,
    /// True when the server is the in-process loopback one.
    pub embedded: bool,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// Latency tests: write every sample to this CSV file.
    pub full_log: Option<std::path::PathBuf>,
    /// Latency tests: include the round-trip distribution in the result.
    pub histogram: bool,
    /// The server is a stock iperf3 server: speak its protocol (`--iperf3`).
    pub iperf3: bool,
    /// Synchronised start: called once the test is set up, just before it starts.
    pub gate: Option<StartGate>,
    /// The server is a stock ntttcp receiver (`ntttcp -r`) whose first data port is `port`:
    /// speak its sync protocol (`--ntttcp`).
    pub ntttcp: bool,
    /// The server is a stock netserver (netperf 2.6, 2.7) whose control port is `port`: run
    /// the test as netperf tests (`--netperf`).
    pub netperf: bool,
    /// `--netperf`: the passphrase of a netserver started with `-Z WORD`.
    pub netperf_passphrase: Option<Vec<u8>>,
    /// Pre-shared key for a server that requires one (`--psk-file`, HAKARU_PSK).
    pub psk: Option<hakaru_proto::auth::Psk>,
}

/// A held start (`--sync-start`, `hakaru plan`): the client sets the test up (control
/// connection, data connections or flows acknowledged), then calls the gate, which may block
/// until a coordinator releases every client at once; an error calls the test off. The server
/// waits for the client's `flows_ready` before it starts (the native protocol's `held_start`).
///
/// The gate may give an instant (Unix seconds) for the data to begin at, without waiting for
/// it: a bulk TCP or UDP test tells the server (`start_at`) and both ends' data threads wait
/// for it, so the work of starting them is done before; any other test waits for it before
/// `flows_ready`. Either way at most a second (`MAX_SCHEDULE_WAIT`).
#[derive(Clone)]
pub struct StartGate(pub Arc<dyn Fn() -> Result<Option<f64>, String> + Send + Sync>);

impl std::fmt::Debug for StartGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StartGate")
    }
}

/// Why a client run failed. Each message names the peer or the flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The host name did not resolve.
    #[error("cannot resolve host '{host}': {reason}")]
    Resolve {
        /// Host as given.
        host: String,
        /// Why.
        reason: String,
    },
    /// The TCP connection failed.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// Address tried last.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The peer is not a hakaru server.
    #[error("{addr} is not a hakaru server: {detail}")]
    NotHakaru {
        /// Server address.
        addr: String,
        /// What was seen.
        detail: String,
    },
    /// The server refused the test.
    #[error("the server refused the test: {0}")]
    Refused(String),
    /// The server reported an error.
    #[error("the server reported: {0}")]
    Server(String),
    /// Key authentication failed or could not happen.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The control connection failed.
    #[error("control connection to {addr}: {source}")]
    Control {
        /// Server address.
        addr: String,
        /// What failed.
        #[source]
        source: ControlError,
    },
    /// A socket option was refused locally.
    #[error(transparent)]
    Sockopt(#[from] SockoptError),
    /// A data connection could not be opened.
    #[error("opening data connection for flow {flow}: {reason}")]
    Data {
        /// Flow id.
        flow: u32,
        /// Why.
        reason: String,
    },
    /// This end's flows could not be started.
    #[error(transparent)]
    Side(#[from] SideError),
    /// A flow failed mid-test.
    #[error("{0}")]
    Flow(String),
    /// The server sent a message that has no place at this point of the test.
    #[error("the server at {addr} sent an unexpected {what}")]
    Unexpected {
        /// Server address.
        addr: String,
        /// Which message, and when.
        what: String,
    },
    /// A held start was called off before the test began.
    #[error("the synchronised start was called off: {0}")]
    CalledOff(String),
    /// The server went away mid-test.
    #[error("the server at {addr} {what}")]
    ServerGone {
        /// Server address.
        addr: String,
        /// What happened.
        what: String,
    },
}

pub(crate) use hakaru_engine::control::{silence_limit, KEEPALIVE_EVERY};

/// Resolves `host:port` honouring the family restriction.
pub fn resolve(host: &str, port: u16, family: Family) -> Result<Vec<SocketAddr>, ClientError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| ClientError::Resolve {
            host: host.to_string(),
            reason: e.to_string(),
        })?
        .filter(|a| match family {
            Family::Any => true,
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
        })
        .collect();
    if addrs.is_empty() {
        return Err(ClientError::Resolve {
            host: host.to_string(),
            reason: match family {
                Family::V4 => "no IPv4 address (-4)".into(),
                Family::V6 => "no IPv6 address (-6)".into(),
                Family::Any => "no address".into(),
            },
        });
    }
    Ok(addrs)
}

fn connect_one(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    timeout: Duration,
    prepare: impl FnOnce(&Socket) -> Result<(), ClientError>,
) -> Result<TcpStream, ClientError> {
    connect_stream(addr, bind, timeout, false, prepare)
}

/// [`connect_one`], over Multipath TCP when `mptcp` is set (`--mptcp`).
fn connect_stream(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    timeout: Duration,
    mptcp: bool,
    prepare: impl FnOnce(&Socket) -> Result<(), ClientError>,
) -> Result<TcpStream, ClientError> {
    let fail = |reason: String| ClientError::Connect {
        addr: addr.to_string(),
        reason,
    };
    let sock = if mptcp {
        sys::mptcp_socket(Domain::for_address(addr)).map_err(|e| fail(format!("--mptcp: {e}")))?
    } else {
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| fail(e.to_string()))?
    };
    if let Some(ip) = bind {
        sock.bind(&SocketAddr::new(ip, 0).into())
            .map_err(|e| fail(format!("-B/--bind {ip}: {e}")))?;
    }
    prepare(&sock)?;
    sock.connect_timeout(&addr.into(), timeout).map_err(|e| {
        fail(match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                "connection refused (is `hakaru server` running there?)".into()
            }
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                format!("no answer within {} s", timeout.as_secs())
            }
            _ => e.to_string(),
        })
    })?;
    Ok(sock.into())
}

/// Opens the control connection to the first of the host's addresses that answers.
pub(crate) fn connect_control(
    opts: &ClientOptions,
) -> Result<(TcpStream, SocketAddr), ClientError> {
    let mut last_err = None;
    for a in resolve(&opts.host, opts.port, opts.family)? {
        match connect_one(a, opts.bind, opts.connect_timeout, |_| Ok(())) {
            Ok(s) => return Ok((s, a)),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or(ClientError::Resolve {
        host: opts.host.clone(),
        reason: "no address".into(),
    }))
}

/// On loopback, BBR without the fq qdisc paces with kernel timers, and that pacing, not the
/// path, sets the rate (docs/performance-notes.md §2: 28 against 51 Gbit/s). When the user did
/// not pick an algorithm, the server is on loopback and the system default is BBR, use cubic
/// and say so (the note returned). `-C bbr` keeps BBR. Only for a Linux server (one that says
/// it is, or an older one that does not say), which the session machine checks: elsewhere no
/// congestion control can be set per socket.
fn loopback_congestion(spec: &TestSpec, server: IpAddr) -> Option<String> {
    let TestSpec::Tcp(tcp) = spec else {
        return None;
    };
    if tcp.congestion.is_some() || !server.is_loopback() {
        return None;
    }
    let env = sys::environment(None);
    let default = env.default_congestion?;
    if default != "bbr" || !sys::available_congestion().iter().any(|c| c == "cubic") {
        return None;
    }
    Some(format!(
        "congestion control: cubic on loopback instead of the system default {default} \
         (without the fq qdisc BBR paces with timers, which on loopback measures the timers, \
         not the path); pass -C {default} to keep it"
    ))
}

/// Runs one test against a hakaru server. `stop` ends the test early (Ctrl-C): senders
/// stop, the ends exchange results as usual, and the result is marked interrupted.
pub fn run_test(
    opts: &ClientOptions,
    observer: &mut dyn Observer,
    stop: Arc<AtomicBool>,
) -> Result<RunResult, ClientError> {
    if let Some(r) = run_elsewhere(opts, observer, &stop) {
        return r;
    }
    // A local kind (sink, source, http) is no server's test: refused before any connection.
    let refused = |e: hakaru_model::NotRemote| ClientError::Refused(e.to_string());
    RemoteSpec::try_from(opts.spec.clone()).map_err(refused)?;
    let (stream, server_addr) = connect_control(opts)?;
    let addr = server_addr.to_string();
    let local_address = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let local_ip = stream.local_addr().ok().map(|a| a.ip());
    let mut ctl = open_session(opts, stream, server_addr)?;
    let token = ctl.handshake()?;
    let spec = ctl.m.spec().clone();
    let facts = ctl.m.server();
    let at = Peer {
        opts,
        server_addr,
        addr: addr.clone(),
        local_address: local_address.clone(),
        clock: facts.and_then(|f| f.clock),
        same_host: facts.is_some_and(|f| f.same_host),
    };
    observer.on_start(&spec, &addr, opts.embedded);
    let iface = local_ip.and_then(sys::interface_for_addr);
    match RemoteSpec::try_from(spec.clone()).map_err(refused)? {
        RemoteSpec::Latency(lat) => latency_test(ctl, &at, &lat, &token, iface, observer, &stop),
        RemoteSpec::Connect(_) => connect::run(
            connect::Setup {
                ctl,
                opts,
                spec: spec.clone(),
                server_addr,
                local_address,
                local_ip,
                clock: at.clock,
                same_host: at.same_host,
            },
            observer,
            &stop,
        ),
        RemoteSpec::Tcp(_) | RemoteSpec::Udp(_) => {
            let setup = bulk::Setup {
                ctl: &mut ctl,
                opts,
                spec: &spec,
                server_addr,
                token: &token,
                iface,
                same_host: at.same_host,
            };
            let out = bulk::run(setup, observer, &stop)?;
            let e = *out.ended;
            let parts = (e.intervals, e.local, e.remote, e.interrupted);
            let mut result = at.assemble(&spec, out.started_unix, parts, out.notes);
            result.detail = hakaru_model::KindDetail::bulk(out.probe);
            observer.on_end(&result);
            Ok(result)
        }
    }
}

/// The runs that are not native hakaru sessions (`--iperf3`, sockperf), and what is refused
/// before any connection; `None` for a native session.
fn run_elsewhere(
    opts: &ClientOptions,
    observer: &mut dyn Observer,
    stop: &Arc<AtomicBool>,
) -> Option<Result<RunResult, ClientError>> {
    if opts.gate.is_some() && opts.iperf3 {
        return Some(Err(ClientError::Refused(
            "(checked locally) a synchronised start needs a hakaru server; an iperf3 server cannot hold its start".into(),
        )));
    }
    if opts.iperf3 {
        return Some(iperf3::run(opts, observer, Arc::clone(stop)));
    }
    if opts.ntttcp {
        if opts.gate.is_some() {
            return Some(Err(ClientError::Refused(
                "(checked locally) a synchronised start needs a hakaru server; an ntttcp receiver cannot hold its start".into(),
            )));
        }
        return Some(ntttcp::run(opts, observer, Arc::clone(stop)));
    }
    if opts.netperf {
        return Some(netperf::run(opts, observer, Arc::clone(stop)));
    }
    if let Err(e) = opts.spec.validate() {
        return Some(Err(ClientError::Refused(format!(
            "(checked locally) {}",
            e.0
        ))));
    }
    if let TestSpec::Latency(lat) = &opts.spec {
        if lat.peer == hakaru_model::LatencyPeer::Sockperf {
            if opts.gate.is_some() {
                return Some(Err(ClientError::Refused(
                    "(checked locally) a synchronised start needs a hakaru server; sockperf has no control connection".into(),
                )));
            }
            return Some(sockperf::run(opts, lat, observer, Arc::clone(stop)));
        }
    }
    None
}

/// The session machine for a control connection just opened, with its hello on the way.
fn open_session(
    opts: &ClientOptions,
    stream: TcpStream,
    server_addr: SocketAddr,
) -> Result<drive::Control, ClientError> {
    let nonce = sys::random_hex(hakaru_proto::auth::NONCE_LEN)
        .map_err(|e| ClientError::Auth(format!("no OS randomness for a nonce: {e}")))?;
    let cfg = SessionConfig {
        peer: server_addr.to_string(),
        spec: opts.spec.clone(),
        held_start: opts.gate.is_some(),
        software: format!("hakaru {}", env!("CARGO_PKG_VERSION")),
        host: sys::host_id(),
        nonce,
        psk: opts.psk.clone(),
        cubic_on_loopback: loopback_congestion(&opts.spec, server_addr.ip()),
        keepalive_every: KEEPALIVE_EVERY,
        silence: silence_limit(opts.spec.common().stall_timeout.0),
    };
    Ok(drive::Control {
        conn: ControlConn::new(stream),
        m: Session::new(cfg, Instant::now(), sys::now_unix()),
    })
}

/// A latency test past `accepted` (its control loop is still `latency::run`'s own).
fn latency_test(
    mut ctl: drive::Control,
    at: &Peer<'_>,
    lat: &hakaru_model::LatencySpec,
    token: &str,
    iface: Option<String>,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<RunResult, ClientError> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let out = latency::run(
        latency::Session {
            ctl: &mut ctl,
            opts: at.opts,
            spec: lat,
            server_addr: at.server_addr,
            token,
            iface,
        },
        observer,
        stop,
    )?;
    let spec = TestSpec::Latency(lat.clone());
    let parts = (out.intervals, out.local, out.remote, out.interrupted);
    let mut result = at.assemble(&spec, started_unix, parts, ctl.m.notes().to_vec());
    result.detail = hakaru_model::KindDetail::Latency(Box::new(out.result));
    observer.on_end(&result);
    Ok(result)
}

/// Where a native test ran, for its result.
struct Peer<'a> {
    opts: &'a ClientOptions,
    server_addr: SocketAddr,
    addr: String,
    local_address: String,
    clock: Option<hakaru_model::ClockOffset>,
    same_host: bool,
}

impl Peer<'_> {
    /// The result from both ends' reports: (intervals, local, remote, interrupted).
    fn assemble(
        &self,
        spec: &TestSpec,
        started_unix: f64,
        (intervals, local, remote, interrupted): (
            Vec<IntervalRecord>,
            SideReport,
            SideReport,
            bool,
        ),
        notes: Vec<String>,
    ) -> RunResult {
        let ip = self.server_addr.ip();
        let mut result = assemble(hakaru_model::AssembleInputs {
            ipv6: self.server_addr.is_ipv6() && ip.to_canonical().is_ipv6(),
            spec: spec.clone(),
            server: self.addr.clone(),
            embedded: self.opts.embedded,
            local_address: self.local_address.clone(),
            remote_address: self.addr.clone(),
            started_unix,
            intervals,
            local,
            remote,
            interrupted,
            notes,
        });
        result.server_clock_offset = self.clock;
        result.server_on_this_host = self.same_host;
        result
    }
}

/// Opens the TCP data connections, each announcing the test token and its flow id.
pub(crate) fn open_tcp_flows(
    opts: &ClientOptions,
    spec: &TcpSpec,
    server_addr: SocketAddr,
    token: &str,
) -> Result<Vec<FlowSocket>, ClientError> {
    let plan = spec.flow_plan();
    let ipv6 = server_addr.is_ipv6();
    let mut flows = Vec::with_capacity(plan.len());
    let mut up_i = 0u32;
    for (fid, dir) in &plan {
        let (bind, wait) = (opts.bind, opts.connect_timeout);
        let mut s = connect_stream(server_addr, bind, wait, spec.mptcp, |sock| {
            apply_tcp_options(sock, spec, ipv6, true).map_err(ClientError::from)
        })
        .map_err(|e| match e {
            ClientError::Sockopt(_) => e,
            other => ClientError::Data {
                flow: *fid,
                reason: other.to_string(),
            },
        })?;
        use std::io::Write;
        s.write_all(&opening(&Message::DataHello {
            token: token.to_string(),
            flow: *fid,
        }))
        .map_err(|e| ClientError::Data {
            flow: *fid,
            reason: e.to_string(),
        })?;
        let (role, quota) = match dir {
            FlowDir::Up => {
                up_i += 1;
                (Role::Sender, spec.bytes_for_flow(up_i - 1))
            }
            FlowDir::Down => (Role::Receiver, None),
        };
        flows.push(FlowSocket {
            id: *fid,
            dir: *dir,
            role,
            stream: s,
            quota,
        });
    }
    Ok(flows)
}
