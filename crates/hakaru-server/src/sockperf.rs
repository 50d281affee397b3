//! The sockperf port: answers stock `sockperf pp`, `ul` and `tp` clients like `sockperf sr`.
//!
//! sockperf has no handshake and no control channel: every message is handled on its own
//! (`proto::sockperf`). UDP is one socket answering each datagram to its sender, so any number
//! of clients share it; a client's figures are summarised once it has been silent for
//! [`UDP_CLIENT_IDLE`]. TCP gets a thread per connection and a summary when it closes.
//! Malformed input is counted and ignored (UDP) or ends that one connection (TCP, where the
//! framing is lost); nothing a client sends can stop the port serving the others.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_proto::sockperf::{
    self as sp, make_reply, parse_datagram, verdict, Reassembler, Verdict,
};
use socket2::{Domain, Protocol, Socket, Type};

use crate::limits::Admission;
use crate::Ctx;

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

/// The sockperf port's two sockets, bound and not yet served.
pub(crate) struct SockperfPort {
    pub tcp: TcpListener,
    pub udp: UdpSocket,
}

impl SockperfPort {
    /// Binds TCP and UDP on `ip:port`; port 0 picks one free for both.
    pub fn bind(ip: std::net::IpAddr, port: u16, v6_only: bool) -> io::Result<SockperfPort> {
        // With port 0 the TCP port the kernel picks may be taken for UDP: try a few.
        let tries = if port == 0 { 16 } else { 1 };
        let mut last = None;
        for _ in 0..tries {
            let tcp = bind_tcp(SocketAddr::new(ip, port), v6_only)?;
            let addr = tcp.local_addr()?;
            match bind_plain_udp(addr, v6_only) {
                Ok(udp) => return Ok(SockperfPort { tcp, udp }),
                Err(e) => last = Some(e),
            }
        }
        let e = last.unwrap_or_else(|| io::Error::other("no port"));
        Err(io::Error::new(e.kind(), format!("binding UDP: {e}")))
    }

    /// The address both sockets are bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Serves both sockets on their own threads until the server shuts down.
    pub fn spawn(self, ctx: Arc<Ctx>) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
        let SockperfPort { tcp, udp } = self;
        let c1 = Arc::clone(&ctx);
        let u = std::thread::Builder::new()
            .name("hakaru-sockperf-udp".into())
            .spawn(move || serve_udp(&c1, &udp))?;
        let t = std::thread::Builder::new()
            .name("hakaru-sockperf-tcp".into())
            .spawn(move || serve_tcp(&ctx, &tcp))?;
        Ok(vec![u, t])
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
    Ok(s.into())
}

/// No SO_REUSEADDR here: a second sockperf server on the port must fail, not share it.
fn bind_plain_udp(addr: SocketAddr, v6_only: bool) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        let _ = s.set_only_v6(v6_only);
    }
    // Bursts of `tp --mps max` outrun one thread briefly; a deep queue absorbs them.
    let _ = s.set_recv_buffer_size(8 << 20);
    s.bind(&addr.into())?;
    Ok(s.into())
}

struct UdpClient {
    counts: SockperfCounts,
    last: Instant,
}

/// Answers every datagram until shutdown.
fn serve_udp(ctx: &Ctx, sock: &UdpSocket) {
    let _ = sock.set_read_timeout(Some(TICK));
    let mut buf = vec![0u8; 65_536];
    let mut clients: HashMap<SocketAddr, UdpClient> = HashMap::new();
    let mut budgets = ReplyBudgets::new(ctx.cfg.sockperf_reply_rate);
    let mut total = SockperfCounts::default();
    let mut last_sweep = Instant::now();
    while !ctx.shutdown.load(Ordering::Acquire) {
        if last_sweep.elapsed() >= TICK {
            sweep(&mut clients, &mut total, UDP_CLIENT_IDLE);
            budgets.sweep();
            last_sweep = Instant::now();
        }
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(v) => v,
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
                // ICMP port unreachable from a client that has gone, and the like.
                tracing::debug!("sockperf UDP: {e}");
                continue;
            }
        };
        if !ctx.cfg.acl.permits(from.ip()) {
            ctx.denied.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if !clients.contains_key(&from) && clients.len() >= MAX_UDP_CLIENTS {
            let oldest = oldest_idle(&clients);
            sweep(&mut clients, &mut total, oldest);
        }
        let c = clients.entry(from).or_insert_with(|| {
            tracing::debug!("sockperf UDP client {from}: first message");
            UdpClient {
                counts: SockperfCounts::default(),
                last: Instant::now(),
            }
        });
        c.last = Instant::now();
        let msg = buf.get_mut(..n).unwrap_or_default();
        match parse_datagram(msg, sp::MAX_UDP_MESSAGE) {
            Err(e) => {
                c.counts.malformed += 1;
                if c.counts.malformed <= 3 {
                    tracing::debug!("sockperf UDP client {from}: ignored: {e}");
                }
            }
            Ok(h) => match verdict(&h) {
                Verdict::Ignore => c.counts.ignored += 1,
                v => {
                    c.counts.messages += 1;
                    c.counts.bytes += n as u64;
                    if v == Verdict::Reply && !budgets.take(from.ip()) {
                        c.counts.withheld += 1;
                    } else if v == Verdict::Reply {
                        make_reply(msg);
                        match sock.send_to(msg, from) {
                            Ok(_) => c.counts.replies += 1,
                            Err(e) => tracing::debug!("sockperf UDP client {from}: reply: {e}"),
                        }
                    }
                }
            },
        }
    }
    sweep(&mut clients, &mut total, Duration::ZERO);
    tracing::info!("sockperf UDP total: {total}");
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

fn oldest_idle(clients: &HashMap<SocketAddr, UdpClient>) -> Duration {
    clients
        .values()
        .map(|c| c.last.elapsed())
        .max()
        .unwrap_or_default()
}

/// Summarises and forgets the clients silent for at least `idle`.
fn sweep(clients: &mut HashMap<SocketAddr, UdpClient>, total: &mut SockperfCounts, idle: Duration) {
    clients.retain(|addr, c| {
        if c.last.elapsed() < idle {
            return true;
        }
        tracing::info!("sockperf UDP client {addr} done: {}", c.counts);
        total.add(&c.counts);
        false
    });
}

/// Accepts TCP connections until shutdown, one thread each.
fn serve_tcp(ctx: &Arc<Ctx>, l: &TcpListener) {
    if let Err(e) = l.set_nonblocking(true) {
        tracing::warn!("sockperf TCP: {e}; not serving TCP");
        return;
    }
    let open = Admission::for_connections(
        "sockperf TCP connections",
        MAX_TCP_CONNS_PER_CLIENT,
        MAX_TCP_CONNS,
    );
    let mut errors = crate::accept::AcceptErrors::new("sockperf TCP");
    while !ctx.shutdown.load(Ordering::Acquire) {
        let (stream, peer) = match l.accept() {
            Ok(v) => {
                errors.accepted();
                v
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_readable(l);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                errors.failed(&e);
                continue;
            }
        };
        if !ctx.cfg.acl.permits(peer.ip()) {
            ctx.denied.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("sockperf TCP client {peer}: not allowed (--allow/--deny)");
            continue;
        }
        let slot = match open.pending(peer.ip()) {
            Ok(s) => s,
            Err(why) => {
                ctx.log_refusal(peer, &format!("sockperf TCP: {why}"));
                continue;
            }
        };
        ctx.metrics.connection("sockperf");
        ctx.threads.fetch_add(1, Ordering::AcqRel);
        let c = Arc::clone(ctx);
        let spawned = std::thread::Builder::new()
            .name("hakaru-sockperf-conn".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let _slot = slot;
                let counts = serve_conn(&c, stream, peer);
                tracing::info!("sockperf TCP client {peer} done: {counts}");
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

fn wait_readable(l: &TcpListener) {
    crate::wait_readable_for(l, TICK);
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
            sockperf_port: Some(0),
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
