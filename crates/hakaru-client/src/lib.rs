//! hakaru-client: the client side of a test.
//!
//! Opens the control connection, asks for the test, opens the data connections, runs this
//! end's flows, merges the server's interval samples with its own as they arrive, and
//! assembles the [`RunResult`] from both ends' final reports.

mod connect;
pub mod find_max;
mod iperf3;
mod latency;
pub mod push;
mod sockperf;
mod udp;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::control::{ControlConn, ControlError};
use hakaru_engine::sockopt::{apply_tcp_options, SockoptError};
use hakaru_engine::tcp::{FlowSocket, SideConfig, SideError, SideRun};
use hakaru_engine::udp::{UdpConfig, UdpRun};
use hakaru_engine::{sys, Observer, Running};
use hakaru_model::{
    assemble, merge_interval, End, FlowDir, IntervalSample, Role, RunResult, SideReport, TcpSpec,
    TestSpec,
};
use hakaru_proto::{native::opening, Message, PROTOCOL_VERSION};
use socket2::{Domain, Protocol, Socket, Type};

pub use hakaru_model::Family;
pub use hakaru_proto::auth::{Psk, MAX_KEY_LEN as MAX_PSK_LEN};
pub use sockperf::NO_SERVER_REPORT as SOCKPERF_NOTE;

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
    /// Pre-shared key for a server that requires one (`--psk-file`, HAKARU_PSK).
    pub psk: Option<hakaru_proto::auth::Psk>,
}

/// A held start (`--sync-start`, `hakaru plan`): the client sets the test up (control
/// connection, data connections or flows acknowledged), then calls the gate, which may block
/// until a coordinator releases every client at once; an error calls the test off. The server
/// waits for the client's `flows_ready` before it starts (the native protocol's `held_start`).
#[derive(Clone)]
pub struct StartGate(pub Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

impl std::fmt::Debug for StartGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StartGate")
    }
}

/// Waits at the gate, if any (UDP set-ups then send their `flows_ready` as always).
pub(crate) fn wait_gate(opts: &ClientOptions) -> Result<(), ClientError> {
    match &opts.gate {
        Some(g) => (g.0)().map_err(ClientError::CalledOff),
        None => Ok(()),
    }
}

/// Passes the gate, if any, and tells the server to go.
pub(crate) fn pass_gate(
    opts: &ClientOptions,
    conn: &mut ControlConn,
    ctl_err: &dyn Fn(ControlError) -> ClientError,
) -> Result<(), ClientError> {
    if opts.gate.is_some() {
        wait_gate(opts)?;
        conn.send(&Message::FlowsReady).map_err(ctl_err)?;
    }
    Ok(())
}

/// Proves this client holds the server's key and checks that the server holds it too; a key
/// on one side only is an error either way (authentication is mutual). With a key, what the
/// server told about itself after the proofs, with the client's clock when it sent its proof
/// and when the answer came (`None` without a key, or from a server that said it in its
/// welcome).
fn authenticate(
    conn: &mut ControlConn,
    opts: &ClientOptions,
    addr: &str,
    client_nonce: &str,
    server_nonce: Option<&str>,
) -> Result<Option<(hakaru_proto::ServerInfo, f64, f64)>, ClientError> {
    let (psk, sn) = match (&opts.psk, server_nonce) {
        (None, None) => return Ok(None),
        (None, Some(_)) => {
            return Err(ClientError::Auth(format!(
                "{addr} requires a pre-shared key: give it with --psk-file FILE or HAKARU_PSK"
            )))
        }
        (Some(_), None) => {
            return Err(ClientError::Auth(format!(
                "{addr} does not ask for a key, so it cannot prove it holds yours; not running against it (drop --psk-file/HAKARU_PSK for a server without one)"
            )))
        }
        (Some(k), Some(sn)) => (k, sn),
    };
    let sent_at = sys::now_unix();
    let ctl = |source| ClientError::Control {
        addr: addr.to_string(),
        source,
    };
    conn.send(&Message::Auth {
        proof: psk.client_proof(sn, client_nonce),
    })
    .map_err(ctl)?;
    // The server takes a second to say no.
    match conn.recv(HANDSHAKE_TIMEOUT + Duration::from_secs(2)) {
        Ok(Message::AuthOk { proof, server }) if psk.verify_server(client_nonce, sn, &proof) => {
            Ok(server.map(|i| (i, sent_at, sys::now_unix())))
        }
        Ok(Message::AuthOk { .. }) => Err(ClientError::Auth(format!(
            "{addr} accepted our proof but could not prove it holds the same key"
        ))),
        Ok(Message::Error { .. }) => Err(ClientError::Auth(format!(
            "{addr} does not accept this key (--psk-file or HAKARU_PSK differs from the server's)"
        ))),
        Ok(other) => Err(ClientError::Auth(format!(
            "{addr} answered the key proof with {}",
            other.name()
        ))),
        Err(e) => Err(ctl(e)),
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

pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) use hakaru_engine::control::{silence_limit, KEEPALIVE_EVERY};

pub(crate) const RESULTS_TIMEOUT: Duration = Duration::from_secs(20);

enum Event {
    Remote(Message),
    RemoteFailed(ControlError),
    Local(IntervalSample),
    LocalDone,
    /// UDP: this end's senders are done, with their datagram counts.
    LocalSendDone(Vec<(u32, u64)>),
}

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
    let fail = |reason: String| ClientError::Connect {
        addr: addr.to_string(),
        reason,
    };
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| fail(e.to_string()))?;
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
/// path, sets the rate (reference/performance.md §3: 28 against 51 Gbit/s). When the user did
/// not pick an algorithm, the server is on loopback and the system default is BBR, use cubic
/// and say so. `-C bbr` keeps BBR. Only for a Linux server (one that says it is, or an older
/// one that does not say): elsewhere no congestion control can be set per socket.
fn loopback_congestion(
    spec: &mut TcpSpec,
    server: IpAddr,
    server_os: Option<&str>,
) -> Option<String> {
    if spec.congestion.is_some()
        || !server.is_loopback()
        || server_os.is_some_and(|os| os != "linux")
    {
        return None;
    }
    let env = sys::environment(None);
    let default = env.default_congestion?;
    if default != "bbr" || !sys::available_congestion().iter().any(|c| c == "cubic") {
        return None;
    }
    spec.congestion = Some("cubic".into());
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
    if opts.gate.is_some() && opts.iperf3 {
        return Err(ClientError::Refused(
            "(checked locally) a synchronised start needs a hakaru server; an iperf3 server cannot hold its start".into(),
        ));
    }
    if opts.iperf3 {
        return iperf3::run(opts, observer, stop);
    }
    opts.spec
        .validate()
        .map_err(|e| ClientError::Refused(format!("(checked locally) {}", e.0)))?;
    if let TestSpec::Latency(lat) = &opts.spec {
        if lat.peer == hakaru_model::LatencyPeer::Sockperf {
            if opts.gate.is_some() {
                return Err(ClientError::Refused(
                    "(checked locally) a synchronised start needs a hakaru server; sockperf has no control connection".into(),
                ));
            }
            return sockperf::run(opts, lat, observer, stop);
        }
    }
    let (stream, server_addr) = connect_control(opts)?;
    let addr_s = server_addr.to_string();
    let ctl_err = |source: ControlError| ClientError::Control {
        addr: addr_s.clone(),
        source,
    };
    let local_address = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let local_ip = stream.local_addr().ok().map(|a| a.ip());
    let mut conn = ControlConn::new(stream);
    let hello_at = sys::now_unix();
    let host_id = sys::host_id();
    let client_nonce = sys::auth_nonce()
        .map_err(|e| ClientError::Auth(format!("no OS randomness for a nonce: {e}")))?;
    conn.send_raw(&opening(&Message::Hello {
        protocol: PROTOCOL_VERSION,
        software: format!("hakaru {}", env!("CARGO_PKG_VERSION")),
        host: host_id.clone(),
        nonce: Some(client_nonce.clone()),
    }))
    .map_err(ctl_err)?;
    let (clock, same_host, server_os) = match conn.recv(HANDSHAKE_TIMEOUT) {
        Ok(Message::Welcome {
            unix_time,
            host,
            auth,
            os,
            ..
        }) => {
            let back = sys::now_unix();
            // A server with a key tells who it is only after the key proofs.
            let (unix_time, host, os, asked, back) =
                match authenticate(&mut conn, opts, &addr_s, &client_nonce, auth.as_deref())? {
                    Some((i, asked, answered)) => (i.unix_time, i.host, i.os, asked, answered),
                    None => (unix_time, host, os, hello_at, back),
                };
            let clock = unix_time.map(|t| hakaru_model::ClockOffset {
                offset_s: t - (asked + back) / 2.0,
                round_trip_s: back - asked,
            });
            (clock, host.is_some() && host == host_id, os)
        }
        Ok(Message::Error { message }) => return Err(ClientError::Server(message)),
        Ok(other) => {
            return Err(ClientError::NotHakaru {
                addr: addr_s,
                detail: format!("it answered the hello with {}", other.name()),
            })
        }
        Err(ControlError::Proto(e)) => {
            return Err(ClientError::NotHakaru {
                addr: addr_s,
                detail: e.to_string(),
            })
        }
        Err(ControlError::Timeout(_)) => {
            return Err(ClientError::NotHakaru {
                addr: addr_s,
                detail: format!(
                    "it sent no greeting within {} s",
                    HANDSHAKE_TIMEOUT.as_secs()
                ),
            })
        }
        Err(ControlError::Closed) => {
            return Err(ClientError::NotHakaru {
                addr: addr_s,
                detail: "it closed the connection without a greeting".into(),
            })
        }
        Err(e) => return Err(ctl_err(e)),
    };
    let mut spec = opts.spec.clone();
    let mut notes = Vec::new();
    if let TestSpec::Tcp(tcp) = &mut spec {
        if let Some(note) = loopback_congestion(tcp, server_addr.ip(), server_os.as_deref()) {
            notes.push(note);
        }
    }
    conn.send(&Message::TestRequest {
        test: Box::new(spec.clone()),
        held_start: opts.gate.is_some(),
    })
    .map_err(ctl_err)?;
    let token = match conn.recv(HANDSHAKE_TIMEOUT).map_err(ctl_err)? {
        Message::Accepted { token, .. } => token,
        Message::Refused { reason } => return Err(ClientError::Refused(reason)),
        Message::Error { message } => return Err(ClientError::Server(message)),
        other => {
            return Err(ClientError::Server(format!(
                "unexpected {} message instead of an answer to the test request",
                other.name()
            )))
        }
    };
    observer.on_start(&spec, &addr_s, opts.embedded);
    let iface = local_ip.and_then(sys::interface_for_addr);
    if let TestSpec::Latency(lat) = &spec {
        let started_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let out = latency::run(
            latency::Session {
                conn: &mut conn,
                opts,
                spec: lat,
                server_addr,
                token: &token,
                iface,
                addr: &addr_s,
            },
            observer,
            &stop,
        )
        .inspect_err(|e| {
            let _ = conn.send(&Message::Error {
                message: format!("client gave up: {e}"),
            });
        })?;
        let mut result = assemble(hakaru_model::AssembleInputs {
            ipv6: server_addr.is_ipv6() && server_addr.ip().to_canonical().is_ipv6(),
            spec: spec.clone(),
            server: addr_s.clone(),
            embedded: opts.embedded,
            local_address,
            remote_address: addr_s,
            started_unix,
            intervals: out.intervals,
            local: out.local,
            remote: out.remote,
            interrupted: out.interrupted,
            notes,
        });
        result.latency = Some(out.result);
        result.server_clock_offset = clock;
        result.server_on_this_host = same_host;
        observer.on_end(&result);
        return Ok(result);
    }
    let (tx, rx) = mpsc::channel::<Event>();
    let (t1, t2) = (tx.clone(), tx.clone());
    let on_interval = Box::new(move |s| {
        let _ = t1.send(Event::Local(s));
    });
    let on_done = Box::new(move || {
        let _ = t2.send(Event::LocalDone);
    });
    let run = match &spec {
        TestSpec::Connect(_) => {
            return connect::run(
                connect::Setup {
                    conn,
                    opts,
                    spec: spec.clone(),
                    server_addr,
                    local_address,
                    local_ip,
                    clock,
                    same_host,
                },
                observer,
                &stop,
            );
        }
        TestSpec::Latency(_) => unreachable!("latency tests returned above"),
        TestSpec::Raw(_) | TestSpec::Http(_) => return Err(ClientError::Refused(
            "sink, source and http runs are local (hakaru sink, source, http), not client tests"
                .into(),
        )),
        TestSpec::Tcp(tcp) => {
            let flows = open_tcp_flows(opts, tcp, server_addr, &token)?;
            // Counters first: nothing the server sends after `start` escapes them.
            let cfg = SideConfig::for_spec(End::Client, &spec, opts.affinity.clone(), iface);
            pass_gate(opts, &mut conn, &ctl_err)?;
            wait_start(&mut conn, &ctl_err)?;
            Running::Tcp(SideRun::start(cfg, flows, on_interval, on_done)?)
        }
        TestSpec::Udp(u) => {
            let (flows, moved) = udp::open_flows(opts, u, server_addr, &token)?;
            if moved {
                notes.push(format!(
                    "each flow has a UDP port of its own on the server ({})",
                    if u.server_ports == hakaru_model::ServerPorts::PerFlow {
                        "--port-per-flow"
                    } else {
                        "the server runs on Windows, which needs it"
                    }
                ));
            }
            let mut cfg = SideConfig::for_spec(End::Client, &spec, opts.affinity.clone(), iface);
            cfg.shares_host = same_host;
            let ucfg = UdpConfig::from_spec(u, hakaru_model::FlowDir::Up);
            wait_gate(opts)?;
            conn.send(&Message::FlowsReady).map_err(&ctl_err)?;
            wait_start(&mut conn, &ctl_err)?;
            let t3 = tx.clone();
            Running::Udp(UdpRun::start(
                cfg,
                ucfg,
                flows,
                on_interval,
                on_done,
                Box::new(move |sent| {
                    let _ = t3.send(Event::LocalSendDone(sent));
                }),
            )?)
        }
    };
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    // A reader thread turns control messages into events so one loop sees everything.
    let reader_stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stream = conn.stream().try_clone().map_err(|e| ctl_err(e.into()))?;
        let stop_r = Arc::clone(&reader_stop);
        let tx = tx.clone();
        let dec = conn.take_decoder();
        std::thread::Builder::new()
            .name("hakaru-control".into())
            .spawn(move || {
                let mut c = ControlConn::with_decoder(stream, dec);
                while !stop_r.load(Ordering::Acquire) {
                    match c.poll(Duration::from_millis(200)) {
                        Ok(Some(m)) => {
                            let fin = matches!(m, Message::Finished { .. } | Message::Error { .. });
                            if tx.send(Event::Remote(m)).is_err() || fin {
                                return;
                            }
                        }
                        Ok(None) => {}
                        Err(e) => {
                            let _ = tx.send(Event::RemoteFailed(e));
                            return;
                        }
                    }
                }
            })
            .map_err(|e| ctl_err(e.into()))?
    };
    drop(tx);
    let outcome = event_loop(&mut conn, &run, &rx, &spec, observer, &stop, &addr_s);
    reader_stop.store(true, Ordering::Release);
    let (remote, intervals, interrupted) = match outcome {
        Ok(v) => v,
        Err(e) => {
            run.abort();
            let _ = conn.send(&Message::Error {
                message: format!("client gave up: {e}"),
            });
            let _ = reader.join();
            drop(run);
            return Err(e);
        }
    };
    let local = run.wait();
    let _ = conn.send(&Message::Finished {
        report: Box::new(local.clone()),
    });
    let _ = reader.join();
    if let Some(e) = local
        .flows
        .iter()
        .chain(remote.flows.iter())
        .find_map(|f| f.error.clone())
    {
        return Err(ClientError::Flow(e));
    }
    let remote_address = addr_s.clone();
    let mut result = assemble(hakaru_model::AssembleInputs {
        ipv6: server_addr.is_ipv6() && server_addr.ip().to_canonical().is_ipv6(),
        spec,
        server: addr_s,
        embedded: opts.embedded,
        local_address,
        remote_address,
        started_unix,
        intervals,
        local,
        remote,
        interrupted,
        notes,
    });
    result.server_clock_offset = clock;
    result.server_on_this_host = same_host;
    observer.on_end(&result);
    Ok(result)
}

type LoopOut = (SideReport, Vec<hakaru_model::IntervalRecord>, bool);

fn event_loop(
    conn: &mut ControlConn,
    run: &Running,
    rx: &mpsc::Receiver<Event>,
    spec: &TestSpec,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
    addr: &str,
) -> Result<LoopOut, ClientError> {
    let dirs: BTreeMap<u32, FlowDir> = spec.flow_plan().into_iter().collect();
    let mut local_s: BTreeMap<u32, IntervalSample> = BTreeMap::new();
    let mut remote_s: BTreeMap<u32, IntervalSample> = BTreeMap::new();
    let mut records = Vec::new();
    let mut remote_report: Option<SideReport> = None;
    let mut local_done = run.is_done();
    let mut interrupted = false;
    let mut last_heard = Instant::now();
    let mut last_sent = Instant::now();
    let mut results_deadline: Option<Instant> = None;
    let silence = silence_limit(spec.stall_timeout().0);
    let gone = |what: String| ClientError::ServerGone {
        addr: addr.to_string(),
        what,
    };
    loop {
        if local_done && remote_report.is_some() {
            break;
        }
        if !interrupted && stop.load(Ordering::Acquire) {
            interrupted = true;
            run.stop_sending();
            conn.send(&Message::Stop)
                .map_err(|e| gone(format!("could not be told to stop: {e}")))?;
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Event::Local(s)) => {
                local_s.insert(s.index, s);
            }
            Ok(Event::LocalSendDone(sent)) => {
                conn.send(&Message::SendDone { sent })
                    .map_err(|e| gone(format!("is unreachable: {e}")))?;
            }
            Ok(Event::LocalDone) => {
                if let Some(e) = run.first_error() {
                    return Err(ClientError::Flow(e));
                }
                local_done = true;
                results_deadline = Some(Instant::now() + RESULTS_TIMEOUT);
            }
            Ok(Event::Remote(m)) => {
                last_heard = Instant::now();
                match m {
                    Message::Interval { sample } => {
                        remote_s.insert(sample.index, sample);
                    }
                    Message::Keepalive => {}
                    Message::SendDone { sent } => run.peer_done(&sent),
                    Message::Finished { report } => remote_report = Some(*report),
                    Message::Error { message } => return Err(ClientError::Server(message)),
                    other => {
                        return Err(ClientError::Unexpected {
                            addr: addr.to_string(),
                            what: format!("{} message during the test", other.name()),
                        })
                    }
                }
            }
            Ok(Event::RemoteFailed(ControlError::Closed)) => {
                return Err(gone(
                    "closed the control connection mid-test (did it exit?)".into(),
                ))
            }
            Ok(Event::RemoteFailed(e)) => return Err(gone(format!("failed mid-test: {e}"))),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if remote_report.is_none() {
                    return Err(gone("stopped answering".into()));
                }
            }
        }
        // Emit every interval both ends have reported.
        while let Some((&k, _)) = local_s.iter().next() {
            if !remote_s.contains_key(&k) {
                break;
            }
            let (l, r) = (local_s.remove(&k), remote_s.remove(&k));
            let rec = merge_interval(l.as_ref(), r.as_ref(), &dirs);
            observer.on_interval(&rec);
            records.push(rec);
        }
        if last_heard.elapsed() > silence {
            return Err(gone(format!(
                "sent nothing for {:.0} s (--stall-timeout): the path or the server is down",
                silence.as_secs_f64()
            )));
        }
        if results_deadline.is_some_and(|d| Instant::now() > d) && remote_report.is_none() {
            return Err(gone(format!(
                "sent no results within {} s of the end",
                RESULTS_TIMEOUT.as_secs()
            )));
        }
        if last_sent.elapsed() > KEEPALIVE_EVERY {
            conn.send(&Message::Keepalive)
                .map_err(|e| gone(format!("is unreachable: {e}")))?;
            last_sent = Instant::now();
        }
    }
    // Drain samples that arrived with the end, then intervals only one end reported.
    while let Ok(ev) = rx.try_recv() {
        if let Event::Local(s) = ev {
            local_s.insert(s.index, s);
        }
    }
    let keys: std::collections::BTreeSet<u32> =
        local_s.keys().chain(remote_s.keys()).copied().collect();
    for k in keys {
        let rec = merge_interval(local_s.get(&k), remote_s.get(&k), &dirs);
        observer.on_interval(&rec);
        records.push(rec);
    }
    let report = remote_report.ok_or_else(|| gone("sent no results".into()))?;
    Ok((report, records, interrupted))
}

/// Waits for the server's start signal.
pub(crate) fn wait_start(
    conn: &mut ControlConn,
    ctl_err: &dyn Fn(ControlError) -> ClientError,
) -> Result<(), ClientError> {
    match conn.recv(HANDSHAKE_TIMEOUT).map_err(ctl_err)? {
        Message::Start => Ok(()),
        Message::Error { message } => Err(ClientError::Server(message)),
        other => Err(ClientError::Server(format!(
            "unexpected {} message instead of start",
            other.name()
        ))),
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
        let mut s = connect_one(server_addr, opts.bind, opts.connect_timeout, |sock| {
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
