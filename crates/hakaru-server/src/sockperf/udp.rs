//! A sockperf port's UDP side: the receiver threads, their clients and the wake-ups that let
//! a lone port's receive wait with no timeout ([`Wake`]).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_proto::sockperf::{self as sp, make_reply, parse_datagram, verdict, Verdict};

use super::{Shared, SockperfCounts, BURST, TICK, UDP_CLIENT_IDLE};
use crate::Ctx;

/// A UDP client's address as the key of the client map: what identifies it in a
/// [`SocketAddr`] (the address, IPv4 as its IPv6-mapped form, the port and the scope) in one
/// 24-byte hash write, where `SocketAddr`'s own `Hash` makes four to six. The hasher stays
/// std's keyed SipHash: the keys come from strangers (docs/performance-notes.md, section 17).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct ClientKey([u8; 24]);

impl From<SocketAddr> for ClientKey {
    fn from(a: SocketAddr) -> ClientKey {
        let (ip, scope) = match a {
            SocketAddr::V4(v4) => (v4.ip().to_ipv6_mapped(), 0),
            SocketAddr::V6(v6) => (*v6.ip(), v6.scope_id()),
        };
        let mut k = [0u8; 24];
        k[..16].copy_from_slice(&ip.octets());
        k[16..18].copy_from_slice(&a.port().to_be_bytes());
        k[18..22].copy_from_slice(&scope.to_be_bytes());
        ClientKey(k)
    }
}

impl std::hash::Hash for ClientKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write(&self.0);
    }
}

struct UdpClient {
    /// Its address, for the log.
    from: SocketAddr,
    counts: SockperfCounts,
    /// When it was last seen sending, to a sweep's precision ([`refresh`]): the path of a
    /// datagram reads no clock.
    last: Instant,
    /// Its datagrams as of `last` ([`UdpClient::datagrams`]).
    seen: u64,
    /// The local port it sent to.
    port: u16,
}

impl UdpClient {
    /// Every datagram it sent (each is a message, ignored, or malformed).
    fn datagrams(&self) -> u64 {
        self.counts.messages + self.counts.ignored + self.counts.malformed
    }
}

/// The accept thread's hold on a lone port's receiver thread that waits with no receive
/// timeout. A receive with SO_RCVTIMEO arms a kernel timer each time it sleeps, and a port
/// answering `sockperf ul` or `pp` sleeps once per datagram (docs/performance-notes.md,
/// section 23); so the receiver waits untimed and the accept thread, which wakes every
/// [`TICK`] anyway, stands in for the timeout: an empty datagram every TICK (never closer
/// than half a TICK) sends the receiver round its loop (the client sweep, the shutdown flag), and at shutdown the
/// socket's receive side is shut, which ends a blocked receive at once and every later one
/// (Linux: [`hakaru_engine::sys::SHUTDOWN_WAKES_BLOCKED_RECV`]; elsewhere the receiver keeps
/// its timeout).
pub(super) struct Wake {
    /// Bound on the receiver's address (loopback of its family for a wildcard bind) and
    /// connected to it: only the receiver's address can send to it, and it never does.
    from: UdpSocket,
    /// A second handle on the receiver's socket, to shut its receive side.
    cut: UdpSocket,
    /// `from`'s address as the receiver sees it: a datagram from it is a wake-up, never a
    /// client's.
    key: ClientKey,
}

impl Wake {
    /// The wake-up for the receiver thread serving `share`: only a lone port's receiver
    /// (several ports are polled), only where shutting the receive side ends a blocked
    /// receive; `None` where it cannot be had (the receiver then keeps its timeout).
    pub(super) fn new(share: &[UdpSocket]) -> Option<Wake> {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let [sock] = share else { return None };
        if !hakaru_engine::sys::SHUTDOWN_WAKES_BLOCKED_RECV {
            return None;
        }
        let made = (|| {
            let mut to = sock.local_addr()?;
            if to.ip().is_unspecified() {
                to.set_ip(match to.ip() {
                    IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                });
            }
            let mut at = to;
            at.set_port(0);
            let from = UdpSocket::bind(at)?;
            from.connect(to)?;
            // A full receive buffer drops a wake-up; it must never hold the accept thread.
            from.set_nonblocking(true)?;
            let key = ClientKey::from(from.local_addr()?);
            let cut = sock.try_clone()?;
            io::Result::Ok(Wake { from, cut, key })
        })();
        made.map_err(|e| tracing::debug!("sockperf UDP: receive keeps its timeout: {e}"))
            .ok()
    }

    /// The wake-up's address as the receiver sees it.
    pub(super) fn key(&self) -> ClientKey {
        self.key
    }

    /// Sends the receiver round its loop once.
    pub(super) fn wake(&self) {
        // Lost (the receiver's buffer is full: it is busy and looks anyway) or not, the next
        // one follows.
        let _ = self.from.send(&[]);
    }

    /// Ends the receiver's wait for good: the server is stopping.
    pub(super) fn cut(&self) {
        // An unconnected UDP socket answers ENOTCONN and shuts the side all the same.
        let _ = socket2::SockRef::from(&self.cut).shutdown(std::net::Shutdown::Read);
    }
}

/// One receiver thread: answers every datagram on its share of the ports until shutdown.
/// `wake`: the accept thread wakes it ([`Wake`]), so a lone port's receive waits untimed.
pub(super) fn serve_udp(
    ctx: &Arc<Ctx>,
    shared: &Shared,
    socks: &[UdpSocket],
    wake: Option<ClientKey>,
) {
    use hakaru_engine::sys::{AsRawFd, Interest, PollSet};
    let mut buf = vec![0u8; 65_536];
    let mut clients: HashMap<ClientKey, UdpClient> = HashMap::new();
    let mut total = SockperfCounts::default();
    let mut last_sweep = Instant::now();
    let rxs: Vec<Rx> = socks
        .iter()
        .map(|sock| Rx {
            ctx,
            shared,
            sock,
            port: sock.local_addr().map(|a| a.port()).unwrap_or(0),
            wake,
        })
        .collect();
    // One socket: a blocking receive that comes back at least every TICK, by its timeout or by
    // the accept thread's wake-up (the socket is this thread's alone). Several: poll them and
    // drain the ready ones.
    let blocking = match socks {
        [u] => u
            .set_nonblocking(false)
            .and_then(|_| u.set_read_timeout(wake.is_none().then_some(TICK)))
            .and_then(|_| u.set_write_timeout(Some(REPLY_WAIT)))
            .map_err(|e| tracing::debug!("sockperf UDP: blocking receive not set up: {e}"))
            .is_ok(),
        _ => false,
    };
    let mut set = PollSet::new();
    for u in socks {
        set.push(u.as_raw_fd(), Interest::Read);
    }
    let mut busy = vec![false; socks.len()];
    // Bounded by the shutdown flag, checked at least every TICK.
    while !ctx.shutdown.load(Ordering::Acquire) {
        if last_sweep.elapsed() >= TICK {
            sweep(&mut clients, &mut total, UDP_CLIENT_IDLE);
            shared.sweep_budgets();
            last_sweep = Instant::now();
        }
        if blocking {
            if let Some(rx) = rxs.first() {
                // At most BURST datagrams, or TICK without one, between the checks above.
                rx.burst(&mut buf, &mut clients, &mut total);
            }
            continue;
        }
        set.wait(TICK);
        for (i, b) in busy.iter_mut().enumerate() {
            *b = set.ready(i);
        }
        // Round after round over the ready sockets, BURST datagrams each, until all are
        // drained; the round is bounded by the time (sockets that keep filling are left for
        // the next wait after a TICK).
        let drain_start = Instant::now();
        while busy.iter().any(|&b| b) && drain_start.elapsed() < TICK {
            for (i, rx) in rxs.iter().enumerate() {
                if !busy.get(i).copied().unwrap_or(false) {
                    continue;
                }
                let more = rx.burst(&mut buf, &mut clients, &mut total);
                if let Some(b) = busy.get_mut(i) {
                    *b = more;
                }
            }
        }
    }
    sweep(&mut clients, &mut total, Duration::ZERO);
    if total != SockperfCounts::default() {
        tracing::info!("sockperf UDP total: {total}");
    }
}

/// How long a reply may wait for room in a full send buffer (twice at most).
const REPLY_WAIT: Duration = Duration::from_millis(10);

/// Sends one reply; when the socket's send buffer is full, waits for room a little (a
/// non-blocking socket polls for it, a blocking one has REPLY_WAIT as its send timeout).
fn send_reply(sock: &UdpSocket, msg: &[u8], to: SocketAddr) -> io::Result<usize> {
    use hakaru_engine::sys::{udp_send_to, wait_fd, AsRawFd, Interest};
    match udp_send_to(sock, msg, to) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            wait_fd(sock.as_raw_fd(), Interest::Write, REPLY_WAIT);
            udp_send_to(sock, msg, to)
        }
        r => r,
    }
}

/// One socket of a receiver thread, as [`Rx::burst`] reads it.
struct Rx<'a> {
    ctx: &'a Ctx,
    shared: &'a Shared,
    sock: &'a UdpSocket,
    /// Its local port, for the log.
    port: u16,
    /// The accept thread's address ([`Wake`]): its datagrams end the burst, counted nowhere.
    wake: Option<ClientKey>,
}

impl Rx<'_> {
    /// Reads and answers up to [`BURST`] datagrams; true when the socket may hold more.
    fn burst(
        &self,
        buf: &mut [u8],
        clients: &mut HashMap<ClientKey, UdpClient>,
        total: &mut SockperfCounts,
    ) -> bool {
        let Rx {
            ctx,
            shared,
            sock,
            port,
            wake,
        } = *self;
        for _ in 0..BURST {
            let (n, from) = match hakaru_engine::sys::udp_recv_from(sock, buf) {
                Ok(v) => v,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The accept thread shut the receive side: the server is stopping.
                Err(_) if ctx.shutdown.load(Ordering::Acquire) => return false,
                Err(e) => {
                    // ICMP port unreachable from a client that has gone, and the like.
                    tracing::debug!("sockperf UDP: {e}");
                    continue;
                }
            };
            let key = ClientKey::from(from);
            if wake == Some(key) {
                // A wake-up: back to the loop's checks.
                return false;
            }
            if !ctx.cfg.acl.permits(from.ip()) {
                ctx.denied.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let msg = buf.get_mut(..n).unwrap_or_default();
            // One lookup per datagram; a new client costs a second (and a clock read).
            if let Some(c) = clients.get_mut(&key) {
                answer(shared, sock, msg, from, c);
                continue;
            }
            if clients.len() >= shared.max_udp_clients {
                let oldest = oldest_idle(clients);
                sweep(clients, total, oldest);
            }
            tracing::debug!("sockperf UDP client {from}: first message (port {port})");
            let c = clients.entry(key).or_insert(UdpClient {
                from,
                counts: SockperfCounts::default(),
                last: Instant::now(),
                seen: 0,
                port,
            });
            answer(shared, sock, msg, from, c);
        }
        true
    }
}

/// Counts one datagram from client `c` at `from` and answers it if it asks for a reply.
fn answer(shared: &Shared, sock: &UdpSocket, msg: &mut [u8], from: SocketAddr, c: &mut UdpClient) {
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
                c.counts.bytes += msg.len() as u64;
                if v == Verdict::Reply && !shared.take_reply(from.ip()) {
                    c.counts.withheld += 1;
                } else if v == Verdict::Reply {
                    make_reply(msg);
                    match send_reply(sock, msg, from) {
                        Ok(_) => c.counts.replies += 1,
                        Err(e) => tracing::debug!("sockperf UDP client {from}: reply: {e}"),
                    }
                }
            }
        },
    }
}

/// Marks the clients that sent since the last look as seen `now`.
fn refresh(clients: &mut HashMap<ClientKey, UdpClient>, now: Instant) {
    for c in clients.values_mut() {
        let d = c.datagrams();
        if d != c.seen {
            c.seen = d;
            c.last = now;
        }
    }
}

fn oldest_idle(clients: &mut HashMap<ClientKey, UdpClient>) -> Duration {
    let now = Instant::now();
    refresh(clients, now);
    clients
        .values()
        .map(|c| now.saturating_duration_since(c.last))
        .max()
        .unwrap_or_default()
}

/// Summarises and forgets the clients silent for at least `idle`.
fn sweep(clients: &mut HashMap<ClientKey, UdpClient>, total: &mut SockperfCounts, idle: Duration) {
    let now = Instant::now();
    refresh(clients, now);
    clients.retain(|_, c| {
        if now.saturating_duration_since(c.last) < idle {
            return true;
        }
        tracing::info!(
            "sockperf UDP client {} (port {}) done: {}",
            c.from,
            c.port,
            c.counts
        );
        total.add(&c.counts);
        false
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's idleness is kept without a clock read per datagram: a sweep marks the
    /// clients that sent since the last look as seen, and forgets only the others.
    #[test]
    fn a_sweep_forgets_only_the_clients_that_sent_nothing_since_the_last_look() {
        let long_ago = Instant::now() - Duration::from_secs(10);
        let client = |messages| UdpClient {
            from: "127.0.0.1:1".parse().unwrap(),
            counts: SockperfCounts {
                messages,
                ..SockperfCounts::default()
            },
            last: long_ago,
            seen: 5,
            port: 1,
        };
        let busy: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let quiet: SocketAddr = "127.0.0.1:1001".parse().unwrap();
        let (busy, quiet) = (ClientKey::from(busy), ClientKey::from(quiet));
        let mut clients = HashMap::from([(busy, client(6)), (quiet, client(5))]);
        let mut total = SockperfCounts::default();
        assert!(oldest_idle(&mut clients) >= Duration::from_secs(10));
        sweep(&mut clients, &mut total, UDP_CLIENT_IDLE);
        assert!(
            clients.contains_key(&busy),
            "the client that sent was forgotten"
        );
        assert!(!clients.contains_key(&quiet), "the quiet client was kept");
        assert_eq!(total.messages, 5);
        assert!(oldest_idle(&mut clients) < UDP_CLIENT_IDLE);
        sweep(&mut clients, &mut total, Duration::ZERO);
        assert!(clients.is_empty());
        assert_eq!(total.messages, 11);
    }

    /// The map key tells apart what a socket address tells apart, and takes an IPv4 client
    /// and its IPv6-mapped form (a dual-stack socket's view of it) as one.
    #[test]
    fn a_client_key_is_its_address_port_and_scope() {
        let key = |s: &str| ClientKey::from(s.parse::<SocketAddr>().unwrap());
        assert!(key("192.0.2.1:5000") == key("[::ffff:192.0.2.1]:5000"));
        let distinct = [
            "192.0.2.1:5000",
            "192.0.2.1:5001",
            "192.0.2.2:5000",
            "[2001:db8::1]:5000",
            "[2001:db8::1]:5001",
            "[fe80::1%2]:5000",
            "[fe80::1%3]:5000",
            "[fe80::1]:5000",
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert!(key(a) != key(b), "{a} and {b} share a key");
            }
        }
    }
}
