//! hakaru-server: the daemon.
//!
//! One listening socket serves every client: control connections and data connections
//! arrive on the same port and are told apart by their first bytes. A UDP socket on the same
//! port number takes the hellos that open UDP flows. Each connection gets a
//! thread; each test owns its sockets and worker threads and frees them however it ends, so
//! one test's failure never touches another.

mod accept;
mod acl;
mod budget;
mod config;
mod dispatch;
pub mod http;
mod iperf3;
mod limits;
mod mesh;
mod metrics;
mod netperf;
mod ntttcp;
mod ratelog;
mod registry;
mod rpm;
mod session;
mod sockperf;
mod udp_dispatch;
mod udpst;
pub use udpst::UdpstKeys;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

pub use acl::Acl;
pub use budget::{server_memory, Budgets};
pub use config::{NetperfConfig, ServerConfig, NETPERF_DEFAULT_PORT, NETPERF_MAX_PASSPHRASE};
pub use limits::Limits;
pub use registry::Registry;
pub use rpm::RpmConfig;
pub use sockperf::{
    rcvbuf_for as sockperf_rcvbuf_for, threads_for as sockperf_threads_for, SockperfCounts,
    MAX_THREADS as SOCKPERF_MAX_THREADS, PORTS_PER_THREAD as SOCKPERF_PORTS_PER_THREAD,
    UDP_CLIENT_IDLE as SOCKPERF_UDP_CLIENT_IDLE, UDP_RCVBUF_BUDGET as SOCKPERF_UDP_RCVBUF_BUDGET,
};

/// Default control port (iperf3's, so firewalls already open for iperf3 work).
pub const DEFAULT_PORT: u16 = 5201;
/// Most ports in one `FIRST-LAST` range (`--sockperf-port`, `--netperf-port`): each port is a
/// socket or two and a share of a thread, so a range is bounded.
pub const MAX_PORT_RANGE: u16 = 1024;
/// sockperf's default port, for `--sockperf-port` and `latency --sockperf`.
pub const SOCKPERF_DEFAULT_PORT: u16 = hakaru_proto::sockperf::DEFAULT_PORT;

pub use hakaru_model::Family;

/// State shared by every connection thread.
pub(crate) struct Ctx {
    pub cfg: ServerConfig,
    pub registry: Registry,
    pub shutdown: Arc<AtomicBool>,
    pub next_test: AtomicU64,
    pub admission: limits::Admission,
    /// Admission of netperf tests: their own per-client limit (`--max-netperf-per-client`).
    pub netperf_admission: limits::Admission,
    /// Wrong netperf passphrases by client, and the failures waiting out their delay.
    pub netperf_guards: netperf::Guards,
    /// The one receiver of every UDP_STREAM test's datagrams (with `--netperf-port`; `None`
    /// where it could not be set up: each test then receives on its own thread).
    pub netperf_sink: Option<netperf::UdpSink>,
    pub threads: AtomicUsize,
    /// Address of the UDP port (same address and port number as the TCP listener).
    pub udp_addr: SocketAddr,
    /// The UDP port's socket, for answering a verified hello with the port its flow moved to
    /// (nothing else is ever sent from it).
    pub udp_port: UdpSocket,
    /// Datagrams on the UDP port that belonged to no test.
    pub strays: AtomicU64,
    /// iperf3 tests opening their data streams.
    pub iperf3: iperf3::Creating,
    /// TCP connections accepted so far.
    pub accepted: AtomicU32,
    /// Connections and datagrams turned away by the access list.
    pub denied: AtomicU64,
    /// Lines about strangers (refusals, strays, garbage), one a second per kind.
    pub log: ratelog::RateLog,
    /// What `--metrics` reports.
    pub metrics: metrics::Metrics,
    /// Buffer memory reserved by running tests (`--max-memory`).
    pub memory: budget::MemoryPool,
    /// The mesh agent (`--mesh`), for `/mesh` and its metric families.
    pub mesh: Option<hakaru_mesh::Agent>,
    /// `Ok` when the TCP listener is an MPTCP one (it accepts MPTCP and plain TCP
    /// connections); otherwise why it is plain TCP.
    pub mptcp: Result<(), String>,
}

impl Ctx {
    /// True once, for a session that has not yet heard it (`told` remembers): the server is
    /// shutting down. The session's driver tells its machine then.
    pub(crate) fn shutdown_news(&self, told: &mut bool) -> bool {
        if *told || !self.shutdown.load(Ordering::Acquire) {
            return false;
        }
        *told = true;
        true
    }

    /// `Ok` when data connections can arrive over MPTCP; otherwise the refusal for a test that
    /// asks for it, naming why.
    pub(crate) fn mptcp_listener(&self) -> Result<(), String> {
        self.mptcp.clone().map_err(|why| {
            format!("the test asks for MPTCP but the server listens with plain TCP: {why}")
        })
    }

    /// The data plane's check of MPTCP subflows: the access list applies to every subflow
    /// of a flow's connection, not only to the first one that `accept` saw. `None` when
    /// nothing can join (a plain TCP listener) or every address is allowed.
    pub(crate) fn subflow_guard(&self) -> Option<hakaru_engine::tcp::SubflowGuard> {
        if self.mptcp.is_err() || self.cfg.acl.is_open() {
            return None;
        }
        let acl = self.cfg.acl.clone();
        Some(hakaru_engine::tcp::SubflowGuard(Arc::new(move |ip| {
            (!acl.permits(ip))
                .then(|| "the server's access list denies it (--allow, --deny)".into())
        })))
    }

    /// Logs why a connection was refused: at most one line a second, with how many more
    /// were refused in between, so a flood cannot fill the log.
    pub(crate) fn log_refusal(&self, peer: SocketAddr, why: &str) {
        self.log_refusal_as(peer, "limits", why);
    }

    /// [`Ctx::log_refusal`], counted in the metrics under `reason`.
    pub(crate) fn log_refusal_as(&self, peer: SocketAddr, reason: &str, why: &str) {
        self.metrics.refused(reason);
        self.log.warn("refused", || {
            format!("refused connection from {peer}: {why}")
        });
    }
}

/// The optional ports beside the control port: sockperf's, HTTP's and the metrics'.
#[allow(clippy::type_complexity)]
fn bind_side_ports(
    cfg: &ServerConfig,
    bound: SocketAddr,
) -> io::Result<(
    Option<sockperf::SockperfPorts>,
    Option<http::HttpPort>,
    Option<TcpListener>,
)> {
    let v6 = cfg.family == Family::V6;
    let named = |flag: String| {
        move |e: io::Error| io::Error::new(e.kind(), format!("{flag}: {e}{}", in_use_hint(&e)))
    };
    let sockperf = match cfg.sockperf_ports {
        Some((first, last)) => Some(
            sockperf::SockperfPorts::bind(bound.ip(), first, last, v6).map_err(named(
                if first == last {
                    format!("--sockperf-port {first}")
                } else {
                    format!("--sockperf-port {first}-{last}")
                },
            ))?,
        ),
        None => None,
    };
    let http = match cfg.http_port {
        Some(p) => Some(
            http::HttpPort::bind(bound.ip(), p, v6).map_err(named(format!("--http-port {p}")))?,
        ),
        None => None,
    };
    let metrics = match cfg.metrics {
        Some(a) => Some(TcpListener::bind(a).map_err(named(format!("--metrics {a}")))?),
        None => None,
    };
    Ok((sockperf, http, metrics))
}

/// Picks of a free port (`-p 0`, `--mesh-port 0`) tried before the server gives up on one
/// free for both TCP and UDP.
pub(crate) const FREE_PORT_TRIES: usize = 16;

/// A bound server, ready to run.
pub struct Server {
    listener: TcpListener,
    udp: UdpSocket,
    sockperf: Option<sockperf::SockperfPorts>,
    http: Option<http::HttpPort>,
    metrics: Option<TcpListener>,
    ntttcp: Option<ntttcp::NtttcpPorts>,
    netperf: Option<netperf::NetperfPorts>,
    udpst: Option<udpst::UdpstPort>,
    mesh: Option<mesh::MeshPort>,
    /// The responsiveness port, serving from bind on (its own runtime); stops when dropped.
    rpm: Option<hakaru_rpm::RpmServer>,
    ctx: Arc<Ctx>,
}

impl Server {
    /// Binds the listening socket.
    pub fn bind(cfg: ServerConfig) -> io::Result<Server> {
        Server::bind_try(cfg, &mut Vec::new())
    }

    /// [`Server::bind`], with `held` the listeners of earlier picks of a free port (`-p 0`)
    /// whose number another program holds for UDP: they stay open until a pick free for both
    /// is found, so the kernel picks another number each time (it would pick the same free
    /// one again).
    fn bind_try(cfg: ServerConfig, held: &mut Vec<TcpListener>) -> io::Result<Server> {
        let ip = match (cfg.bind, cfg.family) {
            (Some(ip), _) => ip,
            (None, Family::V4) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            (None, _) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        let addr = SocketAddr::new(ip, cfg.port);
        let (sock, mptcp) = listen_socket(addr)?;
        hakaru_engine::sys::own_listen_port(&sock)?;
        if addr.is_ipv6() {
            let only_v6 = cfg.family == Family::V6;
            if let Err(e) = sock.set_only_v6(only_v6) {
                if only_v6 {
                    return Err(e);
                }
            }
        }
        let bound = sock.bind(&addr.into());
        if let Err(e) = bound {
            // A host without IPv6: fall back to the IPv4 wildcard (a port in use is in use
            // for both families).
            if cfg.bind.is_none()
                && cfg.family == Family::Any
                && e.kind() != io::ErrorKind::AddrInUse
            {
                return Server::bind_try(
                    ServerConfig {
                        family: Family::V4,
                        ..cfg
                    },
                    held,
                );
            }
            return Err(io::Error::new(
                e.kind(),
                format!("binding {addr}: {e}{}", in_use_hint(&e)),
            ));
        }
        sock.listen(1024)?;
        let listener: TcpListener = sock.into();
        let bound = listener.local_addr()?;
        let udp = match bind_udp(bound, cfg.family) {
            Ok(u) => u,
            Err(e)
                if cfg.port == 0
                    && e.kind() == io::ErrorKind::AddrInUse
                    && held.len() < FREE_PORT_TRIES =>
            {
                held.push(listener);
                return Server::bind_try(cfg, held);
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("binding UDP {bound}: {e}{}", in_use_hint(&e)),
                ))
            }
        };
        Server::with_ports(cfg, listener, udp, mptcp)
    }

    /// The server on its main port's TCP listener and UDP socket: binds the other ports the
    /// configuration asks for.
    fn with_ports(
        cfg: ServerConfig,
        listener: TcpListener,
        udp: UdpSocket,
        mptcp: Result<(), String>,
    ) -> io::Result<Server> {
        let bound = listener.local_addr()?;
        let (sockperf, http, metrics) = bind_side_ports(&cfg, bound)?;
        let ntttcp = ntttcp::NtttcpPorts::bind_for(&cfg, bound.ip())?;
        let netperf = bind_netperf(&cfg, bound.ip())?;
        let udp_port = udp.try_clone()?;
        let udpst = match cfg.udpst_port {
            Some(p) => Some(udpst::UdpstPort::bind(bound.ip(), p).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("--udpst-port {p}: {e}{}", in_use_hint(&e)),
                )
            })?),
            None => None,
        };
        let mesh = mesh::MeshPort::bind(&cfg, bound.ip())?;
        let mut server = Server {
            udpst,
            ntttcp,
            netperf,
            listener,
            udp,
            sockperf,
            http,
            metrics,
            ctx: Arc::new(Ctx {
                admission: limits::Admission::new(cfg.limits),
                netperf_admission: netperf::admission(&cfg),
                netperf_guards: netperf::Guards::default(),
                netperf_sink: netperf::sink_for(&cfg),
                cfg,
                registry: Registry::default(),
                shutdown: Arc::new(AtomicBool::new(false)),
                next_test: AtomicU64::new(1),
                threads: AtomicUsize::new(0),
                udp_addr: bound,
                udp_port,
                strays: AtomicU64::new(0),
                iperf3: iperf3::Creating::default(),
                accepted: AtomicU32::new(0),
                denied: AtomicU64::new(0),
                log: ratelog::RateLog::default(),
                metrics: metrics::Metrics::default(),
                memory: budget::MemoryPool::default(),
                mesh: mesh.as_ref().map(|m| m.agent.clone()),
                mptcp,
            }),
            mesh,
            rpm: None,
        };
        server.rpm = rpm::start(&server.ctx, bound.ip())?;
        Ok(server)
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Starts serving the udpst port, when there is one: its address and thread.
    fn spawn_udpst(&mut self) -> io::Result<Option<(SocketAddr, JoinHandle<()>)>> {
        match self.udpst.take() {
            Some(u) => Ok(Some((u.local_addr()?, u.spawn(Arc::clone(&self.ctx))?))),
            None => Ok(None),
        }
    }

    /// The address of the udpst control port, when there is one.
    pub fn udpst_addr(&self) -> Option<SocketAddr> {
        self.udpst.as_ref().and_then(|s| s.local_addr().ok())
    }

    /// The mesh port's address (UDP and TCP), when the server is a mesh agent.
    pub fn mesh_addr(&self) -> Option<SocketAddr> {
        self.ctx.mesh.as_ref().and_then(|a| a.local_addr().ok())
    }

    /// The address of the sockperf port, when there is one.
    pub fn sockperf_addr(&self) -> Option<SocketAddr> {
        self.sockperf.as_ref().and_then(|s| s.local_addr().ok())
    }

    /// The address of the HTTP port, when there is one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|h| h.local_addr().ok())
    }

    /// The address of the responsiveness port, when there is one.
    pub fn rpm_addr(&self) -> Option<SocketAddr> {
        self.rpm.as_ref().map(|r| r.local_addr())
    }

    /// The address `/metrics` is served on, when it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Flag that stops the server when set (wire it to SIGINT/SIGTERM).
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.ctx.shutdown)
    }

    /// Tests running right now.
    pub fn active_tests(&self) -> usize {
        self.ctx.admission.tests_running() + self.ctx.netperf_admission.tests_running()
    }

    /// Serves until the shutdown flag is set, then waits up to 5 s for tests to wind down.
    pub fn run(mut self) -> io::Result<()> {
        self.listener.set_nonblocking(true)?;
        let (mut threads, lines) = self.spawn_side_ports()?;
        threads.push({
            let ctx = Arc::clone(&self.ctx);
            let sock = self.udp.try_clone()?;
            std::thread::Builder::new()
                .name("hakaru-udp-port".into())
                .spawn(move || udp_dispatch::run(ctx, sock))?
        });
        // Said only once both the TCP and the UDP side are being served.
        tracing::info!("listening on {}", self.local_addr()?);
        match &self.ctx.mptcp {
            Ok(()) => tracing::info!("TCP listener takes MPTCP connections too"),
            Err(why) => tracing::info!("TCP listener is plain TCP, no MPTCP: {why}"),
        }
        // After the line above, which scripts read the control port from.
        for l in lines {
            tracing::info!("{l}");
        }
        self.accept_until_shutdown();
        tracing::info!("shutting down");
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.ctx.threads.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for t in threads {
            let _ = t.join();
        }
        Ok(())
    }

    /// Starts every port beside the control port: their threads, and a line each saying
    /// where it listens.
    fn spawn_side_ports(&mut self) -> io::Result<(Vec<JoinHandle<()>>, Vec<String>)> {
        let ctx = Arc::clone(&self.ctx);
        let mut threads = Vec::new();
        let mut lines = Vec::new();
        if let Some(sp) = self.sockperf.take() {
            let n = sockperf::threads_for(sp.len(), ctx.cfg.sockperf_threads);
            lines.push(format!(
                "sockperf listening on {} (UDP and TCP, {n} receiver thread{})",
                sp.describe(),
                if n == 1 { "" } else { "s" }
            ));
            threads.extend(sp.spawn(Arc::clone(&ctx), n)?);
        }
        if let Some(n) = self.ntttcp.take() {
            if let Ok(a) = n.sync_addr() {
                lines.push(format!(
                    "ntttcp receiver: sync on {a}, data on ports {}-{}",
                    a.port() + 1,
                    u32::from(a.port()) + u32::from(ctx.cfg.ntttcp_ports.max(1))
                ));
            }
            threads.push(n.spawn(Arc::clone(&ctx), ctx.cfg.ntttcp_multi)?);
        }
        if let Some(n) = self.netperf.take() {
            lines.push(format!("netperf listening on {}", n.describe()));
            threads.extend(n.spawn(Arc::clone(&ctx))?);
        }
        if let Some((a, t)) = self.spawn_udpst()? {
            lines.push(format!(
                "udpst listening on {a} (UDP, OB-UDPST protocol version 20)"
            ));
            threads.push(t);
        }
        if let Some(m) = self.mesh.take() {
            if let Some(a) = self.mesh_addr() {
                lines.push(format!(
                    "mesh agent on {a} (UDP probes; /mesh and /metrics over TCP)"
                ));
            }
            threads.extend(m.spawn(Arc::clone(&ctx))?);
        }
        if let Some(r) = &self.rpm {
            let self_signed = ctx.cfg.rpm.as_ref().is_some_and(|c| c.files.is_none());
            lines.push(rpm::describe(r, self_signed));
        }
        if let Some(l) = self.metrics.take() {
            if let Ok(a) = l.local_addr() {
                lines.push(format!("metrics at http://{a}/metrics"));
            }
            threads.push(metrics::spawn(Arc::clone(&ctx), l)?);
        }
        if let Some(h) = self.http.take() {
            if let Ok(a) = h.local_addr() {
                lines.push(format!(
                    "http listening on {a} (GET /bytes/SIZE, PUT and POST bodies)"
                ));
            }
            threads.push(h.spawn(Arc::clone(&ctx))?);
        }
        Ok((threads, lines))
    }

    /// Accepts control connections (every protocol's first bytes go to dispatch) until the
    /// shutdown flag is set.
    fn accept_until_shutdown(&self) {
        let mut errors = accept::AcceptErrors::new("control port");
        while !self.ctx.shutdown.load(Ordering::Acquire) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    errors.accepted();
                    if !self.ctx.cfg.acl.permits(peer.ip()) {
                        // Closed before any byte is read; a flood of these is not worth a
                        // log line each.
                        self.ctx.denied.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            "closed connection from {peer}: not allowed (--allow/--deny)"
                        );
                        continue;
                    }
                    let _ = stream.set_nonblocking(false);
                    // Accept order, for protocols that tell streams apart only by it (iperf3);
                    // the threads that read first bytes may finish in any order.
                    let seq = self.ctx.accepted.fetch_add(1, Ordering::Relaxed);
                    dispatch::spawn(Arc::clone(&self.ctx), stream, peer, seq);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_readable(&self.listener),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Out of file descriptors and the like: back off, log once a second, keep
                // serving.
                Err(e) => errors.failed(&e),
            }
        }
    }

    /// Runs the server on a background thread (the embedded loopback server).
    pub fn spawn(self) -> io::Result<ServerHandle> {
        let addr = self.local_addr()?;
        let sockperf = self.sockperf_addr();
        let http = self.http_addr();
        let udpst = self.udpst_addr();
        let rpm = self.rpm_addr();
        let flag = self.shutdown_flag();
        let thread = std::thread::Builder::new()
            .name("hakaru-server".into())
            .spawn(move || self.run())?;
        Ok(ServerHandle {
            addr,
            sockperf,
            http,
            udpst,
            rpm,
            flag,
            thread: Some(thread),
        })
    }
}

/// A server running on a background thread; stops when dropped.
pub struct ServerHandle {
    addr: SocketAddr,
    sockperf: Option<SocketAddr>,
    http: Option<SocketAddr>,
    udpst: Option<SocketAddr>,
    rpm: Option<SocketAddr>,
    flag: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl ServerHandle {
    /// Address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Address of the sockperf port, when the server has one.
    pub fn sockperf_addr(&self) -> Option<SocketAddr> {
        self.sockperf
    }

    /// Address of the HTTP port, when the server has one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    /// Address of the udpst control port, when the server has one.
    pub fn udpst_addr(&self) -> Option<SocketAddr> {
        self.udpst
    }

    /// Address of the responsiveness port, when the server has one.
    pub fn rpm_addr(&self) -> Option<SocketAddr> {
        self.rpm
    }

    /// Stops the server and waits for it.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.flag.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// The TCP listener's socket: an MPTCP one where the kernel has MPTCP (it accepts plain TCP
/// connections as plain TCP sockets, and MPTCP ones, iperf3 -m and hakaru tcp --mptcp, as
/// MPTCP), otherwise plain TCP with the reason there is no MPTCP.
fn listen_socket(addr: SocketAddr) -> io::Result<(Socket, Result<(), String>)> {
    match hakaru_engine::sys::mptcp_socket(Domain::for_address(addr)) {
        Ok(s) => Ok((s, Ok(()))),
        Err(e) => Ok((
            Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?,
            Err(e.to_string()),
        )),
    }
}

/// Binds the UDP port beside the TCP listener. SO_REUSEADDR lets each UDP flow of a test bind
/// a socket to this same address and port and connect it to its client: the kernel prefers
/// the connected socket for that client's datagrams.
pub(crate) fn bind_udp(addr: SocketAddr, family: Family) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        let only_v6 = family == Family::V6;
        if let Err(e) = sock.set_only_v6(only_v6) {
            if only_v6 {
                return Err(e);
            }
        }
    }
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

/// Binds the `--netperf-port` listeners, if asked.
fn bind_netperf(cfg: &ServerConfig, ip: IpAddr) -> io::Result<Option<netperf::NetperfPorts>> {
    let Some((first, last)) = cfg.netperf.ports else {
        return Ok(None);
    };
    netperf::NetperfPorts::bind(ip, first, last, cfg.family == Family::V6)
        .map(Some)
        .map_err(|e| io::Error::new(e.kind(), format!("--netperf-port: {e}{}", in_use_hint(&e))))
}

/// Waits until a listener has a connection to accept, at most 200 ms (a short timeout keeps
/// shutdown prompt).
pub(crate) fn wait_readable(l: &TcpListener) {
    wait_readable_for(l, Duration::from_millis(200));
}

/// Waits until a listener has a connection to accept, at most `timeout`.
pub(crate) fn wait_readable_for(l: &TcpListener, timeout: Duration) {
    hakaru_engine::sys::wait_listener(l, timeout);
}

pub(crate) use hakaru_session::limits::check_send_rate;

/// What to try when a port is taken.
fn in_use_hint(e: &io::Error) -> &'static str {
    if e.kind() == io::ErrorKind::AddrInUse {
        " (is another server running there? choose another port with -p)"
    } else {
        ""
    }
}
