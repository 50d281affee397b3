//! The sockperf ports: answer stock `sockperf pp`, `ul` and `tp` clients like `sockperf sr`,
//! on one port or on every port of a range (the guides' packet-rate script starts one
//! `sockperf tp` per port, 64 of them, against one `sockperf sr` each).
//!
//! sockperf has no handshake and no control channel: every message is handled on its own
//! (`proto::sockperf`). Each port is a UDP socket answering each datagram to its sender, so any
//! number of clients share it, and a TCP listener. A few receiver threads (one per
//! [`PORTS_PER_THREAD`] ports by default, `--sockperf-threads`) each serve their share of the
//! UDP sockets (one socket: a blocking receive, as `sockperf sr`; several: poll), one thread
//! accepts on every TCP listener; a client's UDP figures are summarised once it has been silent for
//! [`UDP_CLIENT_IDLE`]. TCP gets a thread per connection and a summary when it closes; the
//! TCP connection limits and the reply budgets are per client across the whole range.
//! Malformed input is counted and ignored (UDP) or ends that one connection (TCP, where the
//! framing is lost); nothing a client sends can stop the port serving the others.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hakaru_proto::sockperf::{self as sp, make_reply, verdict, Reassembler, Verdict};
use socket2::{Domain, Protocol, Socket, Type};

use crate::limits::Admission;
use crate::Ctx;
use udp::{serve_udp, ClientKey, Wake};

mod udp;

/// A UDP client silent this long has finished its test: its summary is logged.
pub const UDP_CLIENT_IDLE: Duration = Duration::from_secs(2);
/// UDP clients tracked at once; beyond it the longest-silent one is summarised early.
const MAX_UDP_CLIENTS: usize = 4096;
/// TCP connections served at once; more are closed on accept with a warning.
const MAX_TCP_CONNS: usize = 1024;
/// TCP connections open at once from one address (a sockperf client opens one per thread).
const MAX_TCP_CONNS_PER_CLIENT: usize = 16;
/// A TCP connection that sends nothing for this long is closed: silent connections must not
/// hold the port's slots.
pub const TCP_IDLE: Duration = Duration::from_secs(30);
/// A TCP client that does not read its replies for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports one receiver thread serves by default (`--sockperf-threads`).
pub const PORTS_PER_THREAD: usize = 8;
/// Most receiver threads for the sockperf ports.
pub const MAX_THREADS: usize = 64;
/// A sockperf UDP socket's receive buffer when the range is small (capped by the kernel at
/// net.core.rmem_max).
pub const UDP_RCVBUF: usize = 8 << 20;
/// The receive buffers of all the sockperf UDP sockets together: a range of more than 16
/// ports gets smaller ones (at least 256 KiB each).
pub const UDP_RCVBUF_BUDGET: usize = 128 << 20;
/// How often blocked calls come back to check for shutdown.
const TICK: Duration = Duration::from_millis(200);

/// What one client sent and was answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SockperfCounts {
    /// Client messages counted (not warm-up).
    pub messages: u64,
    /// Bytes of those messages, headers included.
    pub bytes: u64,
    /// Replies sent.
    pub replies: u64,
    /// Well-formed messages that are not counted: warm-up, or without the client flag.
    pub ignored: u64,
    /// Input that is not a sockperf message (short, bad length field).
    pub malformed: u64,
    /// Replies withheld: the source address was over `--sockperf-reply-rate`.
    pub withheld: u64,
}

impl SockperfCounts {
    /// Adds another client's figures.
    pub fn add(&mut self, o: &SockperfCounts) {
        self.messages += o.messages;
        self.bytes += o.bytes;
        self.replies += o.replies;
        self.ignored += o.ignored;
        self.malformed += o.malformed;
        self.withheld += o.withheld;
    }
}

impl std::fmt::Display for SockperfCounts {
    // key=value so scripts (and the interop tests) can read the summaries.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "messages={} bytes={} replies={} ignored={} malformed={}",
            self.messages, self.bytes, self.replies, self.ignored, self.malformed
        )?;
        if self.withheld > 0 {
            write!(f, " withheld={}", self.withheld)?;
        }
        Ok(())
    }
}

/// The sockperf ports' sockets (TCP and UDP on each port of the range), bound and not yet
/// served.
pub(crate) struct SockperfPorts {
    ports: Vec<(TcpListener, UdpSocket)>,
    /// Each UDP socket's receive buffer, as asked of the kernel (bytes).
    rcvbuf: usize,
}

/// The receiver threads for `ports` ports: `asked`, else one per [`PORTS_PER_THREAD`] ports,
/// at most [`MAX_THREADS`]; never more than there are ports, never fewer than one.
pub fn threads_for(ports: usize, asked: Option<usize>) -> usize {
    asked
        .unwrap_or_else(|| ports.div_ceil(PORTS_PER_THREAD))
        .clamp(1, MAX_THREADS)
        .min(ports.max(1))
}

/// Each UDP socket's receive buffer for a range of `ports` ports: [`UDP_RCVBUF`], less when
/// the range would take more than [`UDP_RCVBUF_BUDGET`] together (at least 256 KiB).
pub fn rcvbuf_for(ports: usize) -> usize {
    (UDP_RCVBUF_BUDGET / ports.max(1)).clamp(256 << 10, UDP_RCVBUF)
}

impl SockperfPorts {
    /// Binds TCP and UDP on every port of `first..=last` on `ip`; port 0 picks one free port
    /// for both. A range longer than [`crate::MAX_PORT_RANGE`] is refused.
    pub fn bind(
        ip: std::net::IpAddr,
        first: u16,
        last: u16,
        v6_only: bool,
    ) -> io::Result<SockperfPorts> {
        if last < first {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{first}-{last}: FIRST is above LAST"),
            ));
        }
        let n = usize::from(last - first) + 1;
        if n > usize::from(crate::MAX_PORT_RANGE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{n} ports; at most {} in one range", crate::MAX_PORT_RANGE),
            ));
        }
        let rcvbuf = rcvbuf_for(n);
        let mut ports = Vec::with_capacity(n);
        for port in first..=last {
            ports.push(bind_pair(ip, port, v6_only, rcvbuf)?);
        }
        Ok(SockperfPorts { ports, rcvbuf })
    }

    /// The address of the first port (both sockets of a port share it).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self.ports.first() {
            Some((t, _)) => t.local_addr(),
            None => Err(io::Error::other("no sockperf port")),
        }
    }

    /// Number of ports.
    pub fn len(&self) -> usize {
        self.ports.len()
    }

    /// What is bound, for the log line scripts read: `ADDR:PORT` or `ADDR:FIRST-LAST`.
    pub fn describe(&self) -> String {
        let first = self.ports.first().and_then(|p| p.0.local_addr().ok());
        let last = self.ports.last().and_then(|p| p.0.local_addr().ok());
        match (first, last) {
            (Some(a), Some(b)) if self.ports.len() > 1 => format!("{a}-{}", b.port()),
            (Some(a), _) => a.to_string(),
            _ => String::new(),
        }
    }

    /// Serves every port until the server shuts down: `threads` receiver threads (see
    /// [`threads_for`]), port `i`'s UDP socket on thread `i % threads`, and one thread that
    /// accepts on every port's TCP listener (a connection is served by a thread of its own).
    /// A receiver thread with one socket waits in a blocking receive, like `sockperf sr`: one
    /// system call per datagram instead of a poll and two receives. The per-client limits (TCP connections, reply budgets) are
    /// shared by all of them: one client on every port of the range is still one client.
    pub fn spawn(
        self,
        ctx: Arc<Ctx>,
        threads: usize,
    ) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
        let threads = threads.clamp(1, self.ports.len().max(1));
        tracing::debug!(
            "sockperf: {} port(s) on {threads} receiver thread(s), UDP receive buffers of {} KiB asked",
            self.ports.len(),
            self.rcvbuf >> 10
        );
        let shared = Arc::new(Shared {
            tcp_open: Admission::for_connections(
                "sockperf TCP connections",
                MAX_TCP_CONNS_PER_CLIENT,
                MAX_TCP_CONNS,
            ),
            budgets: ctx
                .cfg
                .sockperf_reply_rate
                .map(|r| Mutex::new(ReplyBudgets::new(Some(r)))),
            max_udp_clients: (MAX_UDP_CLIENTS / threads).max(64),
        });
        let (listeners, udp): (Vec<TcpListener>, Vec<UdpSocket>) = self.ports.into_iter().unzip();
        let mut shares: Vec<Vec<UdpSocket>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, u) in udp.into_iter().enumerate() {
            if let Some(s) = shares.get_mut(i % threads) {
                s.push(u);
            }
        }
        // A lone port's receiver waits with no timeout where the accept thread can wake it.
        let mut wakes = Vec::new();
        let keys: Vec<Option<ClientKey>> = shares
            .iter()
            .map(|share| {
                let w = Wake::new(share)?;
                let key = w.key();
                wakes.push(w);
                Some(key)
            })
            .collect();
        let mut handles = Vec::with_capacity(threads + 1);
        {
            let ctx = Arc::clone(&ctx);
            let shared = Arc::clone(&shared);
            handles.push(
                std::thread::Builder::new()
                    .name("hakaru-sockperf-accept".into())
                    .spawn(move || serve_accept(&ctx, &shared, &listeners, &wakes))?,
            );
        }
        for (share, wake) in shares.into_iter().zip(keys) {
            let ctx = Arc::clone(&ctx);
            let shared = Arc::clone(&shared);
            handles.push(
                std::thread::Builder::new()
                    .name("hakaru-sockperf".into())
                    .spawn(move || serve_udp(&ctx, &shared, &share, wake))?,
            );
        }
        Ok(handles)
    }
}

/// Binds TCP and UDP on `ip:port`; port 0 picks one free for both.
fn bind_pair(
    ip: std::net::IpAddr,
    port: u16,
    v6_only: bool,
    rcvbuf: usize,
) -> io::Result<(TcpListener, UdpSocket)> {
    // With port 0 the TCP port the kernel picks may be taken for UDP: try a few.
    let tries = if port == 0 { 16 } else { 1 };
    let mut last = None;
    for _ in 0..tries {
        let tcp = bind_tcp(SocketAddr::new(ip, port), v6_only)?;
        let addr = tcp.local_addr()?;
        match bind_plain_udp(addr, v6_only, rcvbuf) {
            Ok(udp) => return Ok((tcp, udp)),
            Err(e) => last = Some((addr, e)),
        }
    }
    match last {
        Some((addr, e)) => Err(io::Error::new(e.kind(), format!("binding UDP {addr}: {e}"))),
        None => Err(io::Error::other("no port")),
    }
}

fn bind_tcp(addr: SocketAddr, v6_only: bool) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    hakaru_engine::sys::own_listen_port(&s)?;
    if addr.is_ipv6() {
        let _ = s.set_only_v6(v6_only);
    }
    s.bind(&addr.into())
        .map_err(|e| io::Error::new(e.kind(), format!("binding TCP {addr}: {e}")))?;
    s.listen(1024)?;
    let l: TcpListener = s.into();
    l.set_nonblocking(true)?;
    Ok(l)
}

/// No SO_REUSEADDR here: a second sockperf server on the port must fail, not share it.
fn bind_plain_udp(addr: SocketAddr, v6_only: bool, rcvbuf: usize) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        let _ = s.set_only_v6(v6_only);
    }
    // Bursts of `tp --mps max` outrun a thread briefly; a deep queue absorbs them. The
    // kernel caps it at net.core.rmem_max.
    let _ = s.set_recv_buffer_size(rcvbuf);
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// What the receiver threads share: the per-client limits across the whole range.
struct Shared {
    /// TCP connections open, per client and in total.
    tcp_open: Admission,
    /// Replies left per source address (`--sockperf-reply-rate`); `None`: no limit, no lock.
    budgets: Option<Mutex<ReplyBudgets>>,
    /// UDP clients one thread tracks at once (its share of [`MAX_UDP_CLIENTS`]).
    max_udp_clients: usize,
}

impl Shared {
    fn take_reply(&self, ip: std::net::IpAddr) -> bool {
        match &self.budgets {
            None => true,
            Some(b) => b.lock().map(|mut b| b.take(ip)).unwrap_or(true),
        }
    }

    fn sweep_budgets(&self) {
        if let Some(Ok(mut b)) = self.budgets.as_ref().map(|b| b.lock()) {
            b.sweep();
        }
    }
}

/// Datagrams read from one socket before the thread turns to its next ready socket, so one
/// busy port cannot starve the others of the thread.
const BURST: usize = 64;

/// The accept thread: takes the connections of every port's TCP listener until shutdown, and
/// wakes the receivers that wait with no timeout ([`Wake`]).
fn serve_accept(ctx: &Arc<Ctx>, shared: &Shared, listeners: &[TcpListener], wakes: &[Wake]) {
    use hakaru_engine::sys::{AsRawFd, Interest, PollSet};
    let mut errors = crate::accept::AcceptErrors::new("sockperf TCP");
    let mut set = PollSet::new();
    for l in listeners {
        set.push(l.as_raw_fd(), Interest::Read);
    }
    let mut woken = Instant::now();
    // Bounded by the shutdown flag, checked at least every TICK.
    while !ctx.shutdown.load(Ordering::Acquire) {
        set.wait(TICK);
        for (i, l) in listeners.iter().enumerate() {
            if set.ready(i) {
                accept_all(ctx, shared, l, &mut errors);
            }
        }
        // Half a TICK: a wait that comes back a hair early must not skip a wake-up.
        if woken.elapsed() >= TICK / 2 {
            for w in wakes {
                w.wake();
            }
            woken = Instant::now();
        }
    }
    for w in wakes {
        w.cut();
    }
}

/// Replies per source address (`--sockperf-reply-rate`): a token bucket of one second's
/// replies per address, so a spoofed source cannot turn the port into a reflector of more than
/// that rate at its victim. `None`: every message asking for a reply gets one, as from
/// `sockperf sr` (one reply per message, the same size: no amplification).
struct ReplyBudgets {
    rate: Option<u32>,
    buckets: HashMap<std::net::IpAddr, (f64, Instant)>,
}

impl ReplyBudgets {
    fn new(rate: Option<u32>) -> ReplyBudgets {
        ReplyBudgets {
            rate,
            buckets: HashMap::new(),
        }
    }

    /// Takes one reply from `ip`'s budget; false when it has none left.
    fn take(&mut self, ip: std::net::IpAddr) -> bool {
        let Some(rate) = self.rate.map(f64::from) else {
            return true;
        };
        let now = Instant::now();
        if !self.buckets.contains_key(&ip) && self.buckets.len() >= MAX_UDP_CLIENTS {
            // Full of sources: the oldest one forgets its bucket (and starts full again).
            if let Some(k) = self
                .buckets
                .iter()
                .min_by_key(|(_, v)| v.1)
                .map(|(k, _)| *k)
            {
                self.buckets.remove(&k);
            }
        }
        let (tokens, last) = self.buckets.entry(ip).or_insert((rate, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(rate);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Forgets sources quiet for a second (their buckets would be full again).
    fn sweep(&mut self) {
        self.buckets
            .retain(|_, v| v.1.elapsed() < Duration::from_secs(1));
    }
}

/// Accepts the TCP connections waiting on `l` (at most [`BURST`]), one thread each.
fn accept_all(
    ctx: &Arc<Ctx>,
    shared: &Shared,
    l: &TcpListener,
    errors: &mut crate::accept::AcceptErrors,
) {
    for _ in 0..BURST {
        let (stream, peer) = match l.accept() {
            Ok(v) => {
                errors.accepted();
                v
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                errors.failed(&e);
                return;
            }
        };
        if !ctx.cfg.acl.permits(peer.ip()) {
            ctx.denied.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("sockperf TCP client {peer}: not allowed (--allow/--deny)");
            continue;
        }
        let slot = match shared.tcp_open.pending(peer.ip()) {
            Ok(s) => s,
            Err(why) => {
                ctx.log_refusal(peer, &format!("sockperf TCP: {why}"));
                continue;
            }
        };
        ctx.metrics.connection("sockperf");
        ctx.threads.fetch_add(1, Ordering::AcqRel);
        let c = Arc::clone(ctx);
        let port = stream.local_addr().map(|a| a.port()).unwrap_or(0);
        let spawned = std::thread::Builder::new()
            .name("hakaru-sockperf-conn".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let _slot = slot;
                let counts = serve_conn(&c, stream, peer);
                tracing::info!("sockperf TCP client {peer} (port {port}) done: {counts}");
                c.threads.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            tracing::warn!("sockperf TCP client {peer}: no thread: {e}");
            ctx.threads.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Serves one TCP connection until it closes, fails or the server shuts down.
fn serve_conn(ctx: &Ctx, mut s: TcpStream, peer: SocketAddr) -> SockperfCounts {
    let mut counts = SockperfCounts::default();
    let setup = s
        .set_nonblocking(false)
        .and_then(|_| s.set_nodelay(true))
        .and_then(|_| s.set_read_timeout(Some(TICK)))
        .and_then(|_| s.set_write_timeout(Some(WRITE_TIMEOUT)));
    if let Err(e) = setup {
        tracing::debug!("sockperf TCP client {peer}: {e}");
        return counts;
    }
    tracing::debug!("sockperf TCP client {peer}: connected");
    let mut r = Reassembler::new(sp::MAX_TCP_MESSAGE);
    let mut out = Vec::new();
    let mut last_data = Instant::now();
    while !ctx.shutdown.load(Ordering::Acquire) {
        if last_data.elapsed() > TCP_IDLE {
            tracing::info!(
                "sockperf TCP client {peer}: closed, nothing received for {} s",
                TCP_IDLE.as_secs()
            );
            break;
        }
        match s.read(r.spare()) {
            Ok(0) => break,
            Ok(n) => {
                last_data = Instant::now();
                r.filled(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                // sockperf closes with its last reply unread, which resets the connection.
                tracing::debug!("sockperf TCP client {peer}: {e}");
                break;
            }
        }
        out.clear();
        let mut replies = 0;
        loop {
            match r.next_message() {
                Ok(None) => break,
                Ok(Some(msg)) => {
                    let Ok(h) = sp::parse(msg, sp::MAX_TCP_MESSAGE) else {
                        break;
                    };
                    match verdict(&h) {
                        Verdict::Ignore => counts.ignored += 1,
                        v => {
                            counts.messages += 1;
                            counts.bytes += msg.len() as u64;
                            if v == Verdict::Reply {
                                make_reply(msg);
                                out.extend_from_slice(msg);
                                replies += 1;
                            }
                        }
                    }
                }
                Err(e) => {
                    counts.malformed += 1;
                    tracing::info!("sockperf TCP client {peer}: closing: {e}");
                    if s.write_all(&out).is_ok() {
                        counts.replies += replies;
                    }
                    return counts;
                }
            }
        }
        if !out.is_empty() {
            if let Err(e) = s.write_all(&out) {
                tracing::debug!("sockperf TCP client {peer}: reply: {e}");
                break;
            }
            counts.replies += replies;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Server, ServerConfig};
    use hakaru_proto::sockperf::Header;

    fn server() -> (crate::ServerHandle, SocketAddr) {
        server_with(None)
    }

    fn server_with(reply_rate: Option<u32>) -> (crate::ServerHandle, SocketAddr) {
        let s = Server::bind(ServerConfig {
            bind: Some("127.0.0.1".parse().unwrap()),
            port: 0,
            sockperf_ports: Some((0, 0)),
            sockperf_reply_rate: reply_rate,
            ..ServerConfig::default()
        })
        .unwrap();
        let h = s.spawn().unwrap();
        let a = h.sockperf_addr().unwrap();
        (h, a)
    }

    fn msg(seq: u64, flags: u16, len: usize) -> Vec<u8> {
        let mut m = vec![0xabu8; len];
        Header {
            seq,
            flags,
            length: len as u32,
        }
        .write(&mut m);
        m
    }

    #[test]
    fn udp_answers_requests_and_ignores_garbage() {
        let (_h, addr) = server();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        // Garbage, a warm-up and a throughput message first: none may be answered.
        c.send_to(&[1, 2, 3], addr).unwrap();
        c.send_to(&msg(0, 0x5, 14), addr).unwrap();
        c.send_to(&msg(1, 0x1, 100), addr).unwrap();
        let mut bad_len = msg(2, 0x3, 30);
        bad_len[10..14].copy_from_slice(&31u32.to_be_bytes());
        c.send_to(&bad_len, addr).unwrap();
        for (seq, len) in [(3u64, 14usize), (4, 1472), (5, 65_000)] {
            c.send_to(&msg(seq, 0x3, len), addr).unwrap();
            let mut buf = vec![0u8; 70_000];
            let n = c.recv(&mut buf).unwrap();
            assert_eq!(n, len);
            let h = sp::parse(&buf[..n], sp::MAX_UDP_MESSAGE).unwrap();
            assert_eq!((h.seq, h.flags, h.length as usize), (seq, 0x2, len));
            assert!(buf[14..n].iter().all(|&b| b == 0xab));
        }
    }

    #[test]
    fn tcp_reassembles_split_messages_and_closes_on_bad_framing() {
        let (_h, addr) = server();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut stream = Vec::new();
        for seq in 1..=3u64 {
            stream.extend(msg(seq, 0x3, 3000));
        }
        stream.extend(msg(4, 0x1, 50)); // no reply wanted
        for part in stream.chunks(7) {
            s.write_all(part).unwrap();
        }
        let mut back = vec![0u8; 9000];
        s.read_exact(&mut back).unwrap();
        for (i, m) in back.chunks(3000).enumerate() {
            let h = sp::parse(m, sp::MAX_TCP_MESSAGE).unwrap();
            assert_eq!((h.seq, h.flags), (i as u64 + 1, 0x2));
        }
        // A length below the header size breaks the framing: the server hangs up.
        let mut bad = msg(5, 0x3, 14);
        bad[10..14].copy_from_slice(&2u32.to_be_bytes());
        s.write_all(&bad).unwrap();
        let mut one = [0u8; 1];
        assert!(matches!(s.read(&mut one), Ok(0) | Err(_)));
        // Others are still served.
        let mut s2 = TcpStream::connect(addr).unwrap();
        s2.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s2.write_all(&msg(1, 0x3, 14)).unwrap();
        let mut r = [0u8; 14];
        s2.read_exact(&mut r).unwrap();
        assert_eq!(&r[8..10], &[0, 2]);
    }

    #[test]
    fn replies_to_one_source_stay_within_its_budget() {
        let (_h, addr) = server_with(Some(20));
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        // 200 requests at once: a second's budget (20) is answered, the rest withheld.
        for seq in 0..200u64 {
            c.send_to(&msg(seq, 0x3, 64), addr).unwrap();
        }
        let mut buf = [0u8; 128];
        let mut replies = 0;
        while c.recv(&mut buf).is_ok() {
            replies += 1;
        }
        assert!((20..=32).contains(&replies), "{replies} replies");
        // The budget refills with time.
        std::thread::sleep(Duration::from_millis(300));
        c.send_to(&msg(500, 0x3, 64), addr).unwrap();
        assert!(c.recv(&mut buf).is_ok());
        let mut b = ReplyBudgets::new(Some(2));
        let ip = "10.0.0.1".parse().unwrap();
        assert!(b.take(ip) && b.take(ip) && !b.take(ip));
        assert!(ReplyBudgets::new(None).take(ip));
    }

    /// A server on `n` consecutive ports (found free by trying), `threads` receiver threads.
    fn range_server(
        n: u16,
        threads: usize,
        reply_rate: Option<u32>,
    ) -> (crate::ServerHandle, Vec<SocketAddr>) {
        for _ in 0..50 {
            let base = UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let Some(last) = base.checked_add(n - 1) else {
                continue;
            };
            let Ok(s) = Server::bind(ServerConfig {
                bind: Some("127.0.0.1".parse().unwrap()),
                port: 0,
                sockperf_ports: Some((base, last)),
                sockperf_threads: Some(threads),
                sockperf_reply_rate: reply_rate,
                ..ServerConfig::default()
            }) else {
                continue;
            };
            let h = s.spawn().unwrap();
            let addrs = (base..=last)
                .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
                .collect();
            return (h, addrs);
        }
        panic!("no {n} consecutive free ports");
    }

    #[test]
    fn every_port_of_a_range_answers_udp_and_tcp() {
        let (_h, addrs) = range_server(5, 2, None);
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        for (i, a) in addrs.iter().enumerate() {
            let seq = 10 + i as u64;
            c.send_to(&msg(seq, 0x3, 64), a).unwrap();
            let mut buf = [0u8; 128];
            let (n, from) = c.recv_from(&mut buf).unwrap();
            assert_eq!((n, from), (64, *a));
            let h = sp::parse(&buf[..n], sp::MAX_UDP_MESSAGE).unwrap();
            assert_eq!((h.seq, h.flags), (seq, 0x2));
            let mut s = TcpStream::connect(a).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s.write_all(&msg(seq, 0x3, 14)).unwrap();
            let mut r = [0u8; 14];
            s.read_exact(&mut r).unwrap();
            assert_eq!(&r[8..10], &[0, 2]);
        }
    }

    #[test]
    fn the_reply_budget_is_per_client_across_the_range() {
        let (_h, addrs) = range_server(4, 4, Some(20));
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        // 50 requests to each of 4 ports, each port on its own thread: one budget of 20.
        for seq in 0..200u64 {
            c.send_to(&msg(seq, 0x3, 64), addrs[seq as usize % 4])
                .unwrap();
        }
        let mut buf = [0u8; 128];
        let mut replies = 0;
        while c.recv(&mut buf).is_ok() {
            replies += 1;
        }
        assert!((20..=32).contains(&replies), "{replies} replies");
    }

    #[test]
    fn threads_and_buffers_follow_the_range() {
        assert_eq!(threads_for(1, None), 1);
        assert_eq!(threads_for(8, None), 1);
        assert_eq!(threads_for(9, None), 2);
        assert_eq!(threads_for(64, None), 8);
        assert_eq!(threads_for(1024, None), MAX_THREADS);
        assert_eq!(threads_for(4, Some(16)), 4);
        assert_eq!(threads_for(64, Some(3)), 3);
        assert_eq!(threads_for(64, Some(0)), 1);
        assert_eq!(rcvbuf_for(1), UDP_RCVBUF);
        assert_eq!(rcvbuf_for(16), UDP_RCVBUF);
        assert_eq!(rcvbuf_for(64), 2 << 20);
        assert_eq!(rcvbuf_for(1024), 256 << 10);
        assert!(rcvbuf_for(1024) * 1024 <= 2 * UDP_RCVBUF_BUDGET);
    }

    #[test]
    fn a_range_over_the_limit_is_refused() {
        let ip = "127.0.0.1".parse().unwrap();
        let e = SockperfPorts::bind(ip, 2000, 2000 + crate::MAX_PORT_RANGE, false)
            .err()
            .unwrap();
        assert!(e.to_string().contains("at most 1024"), "{e}");
        assert!(SockperfPorts::bind(ip, 5, 3, false).is_err());
    }

    #[test]
    fn counts_display_as_key_values() {
        let mut c = SockperfCounts {
            messages: 2,
            bytes: 28,
            replies: 1,
            ignored: 0,
            malformed: 3,
            withheld: 0,
        };
        c.add(&c.clone());
        assert_eq!(
            c.to_string(),
            "messages=4 bytes=56 replies=2 ignored=0 malformed=6"
        );
    }
}
