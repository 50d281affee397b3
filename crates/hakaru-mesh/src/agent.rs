//! The agent: the prober's driver and the responder, on one UDP socket, and the thread that
//! reads the peer list again every refresh. `hakaru server --mesh` starts one beside its
//! listeners; its view and metrics are served by the server's HTTP endpoints.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::peers::Peer;
use crate::prober::{ProbeConfig, Prober};
use crate::wire::{Header, Type, WireError, MAX_LEN};
use crate::MeshConfig;

/// Counters of the responder and of what it refused.
#[derive(Default)]
pub(crate) struct Responder {
    pub(crate) answered: AtomicU64,
    pub(crate) acl: AtomicU64,
    pub(crate) stranger: AtomicU64,
    pub(crate) tag: AtomicU64,
    pub(crate) rate: AtomicU64,
    pub(crate) malformed: AtomicU64,
}

/// A token bucket: at most `rate` a second, a second's worth at once.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: u64,
}

impl Bucket {
    fn new(rate: u32) -> Bucket {
        Bucket {
            rate: f64::from(rate),
            tokens: f64::from(rate),
            at: 0,
        }
    }

    fn take(&mut self, now: u64) -> bool {
        let dt = now.saturating_sub(self.at) as f64 / 1e9;
        self.at = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub(crate) struct Inner {
    pub(crate) cfg: MeshConfig,
    pub(crate) prober: Mutex<Prober>,
    /// Addresses whose probes are answered (the listed peers' IPs), without a key.
    allowed: Mutex<HashSet<IpAddr>>,
    /// A list read by the refresher, for the probing thread to take.
    pending: Mutex<Option<Vec<Peer>>>,
    /// The last refresh's error, if it failed (the old list is kept).
    pub(crate) peers_error: Mutex<Option<String>>,
    /// Readings of the list that failed.
    pub(crate) list_errors: AtomicU64,
    /// Metric groups: the totals of peers no longer listed, by their group, and the groups
    /// that have a series of their own (so group counters never go down).
    pub(crate) groups: Mutex<crate::groups::Groups>,
    pub(crate) responder: Responder,
    pub(crate) epoch: Instant,
    /// The instance id (the prober's), read without its lock.
    id: u64,
    socket: UdpSocket,
    /// The server's access list: datagrams from elsewhere are dropped unread.
    permits: Permits,
    /// The TCP connect probes, when asked for.
    pub(crate) connect: Option<crate::connect::Connect>,
    /// The throughput slices, when asked for.
    pub(crate) slices: Option<crate::slice::Slices>,
}

/// Whether the server's access list lets an address in.
pub type Permits = Box<dyn Fn(IpAddr) -> bool + Send + Sync>;

impl Inner {
    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// What the connect and slice drivers share with the agent.
    fn shared(&self) -> crate::connect::Shared<'_> {
        crate::connect::Shared {
            udp: &self.prober,
            epoch: self.epoch,
            timeout: self.cfg.probe.timeout,
            group_by: &self.cfg.group_by,
        }
    }
}

/// A running (or ready) agent.
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<Inner>,
}

fn random_id() -> u64 {
    let hex = hakaru_sys::random_hex(8).unwrap_or_default();
    u64::from_str_radix(&hex, 16)
        .unwrap_or_else(|_| u64::from(std::process::id()) << 32 | 1)
        .max(1)
}

impl Agent {
    /// An agent on `socket` (the mesh port) with its peer list read once. A file that cannot
    /// be read is an error here, so a server does not start with a mesh it cannot probe; a DNS
    /// name that does not resolve yet (the first member of a Service) starts the agent with no
    /// peers, says why, and is looked up again every refresh. Datagrams from addresses
    /// `permits` refuses are dropped before they are read.
    pub fn new(cfg: MeshConfig, socket: UdpSocket, permits: Permits) -> Result<Agent, String> {
        let (peers, first_error) = match cfg.source.load(cfg.port, cfg.max_peers) {
            Ok(p) => (p, None),
            Err(e) if matches!(cfg.source, crate::PeerSource::Dns { .. }) => {
                tracing::warn!(
                    "mesh: {e}; no peers until the name resolves (looked up every --mesh-refresh)"
                );
                (Vec::new(), Some(e))
            }
            Err(e) => return Err(e),
        };
        let id = random_id();
        let mut prober = Prober::new(cfg.probe, id, 0);
        let allowed = peers.iter().map(|p| p.addr.ip()).collect();
        prober.set_peers(peers);
        let connect = cfg.connect.map(|c| crate::connect::Connect {
            prober: Mutex::new(Prober::new(
                ProbeConfig {
                    interval: c.interval,
                    max_pps: c.max_rate,
                    ..cfg.probe
                },
                id,
                0,
            )),
            groups: Mutex::new(crate::groups::Groups::default()),
        });
        let slices = cfg.slice.clone().map(|c| crate::slice::Slices {
            cfg: c,
            results: Mutex::new(std::collections::HashMap::new()),
            runs: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        Ok(Agent {
            inner: Arc::new(Inner {
                cfg,
                prober: Mutex::new(prober),
                allowed: Mutex::new(allowed),
                pending: Mutex::new(None),
                list_errors: AtomicU64::new(u64::from(first_error.is_some())),
                peers_error: Mutex::new(first_error),
                groups: Mutex::new(crate::groups::Groups::default()),
                responder: Responder::default(),
                epoch: Instant::now(),
                id,
                socket,
                permits,
                connect,
                slices,
            }),
        })
    }

    /// The mesh port's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.socket.local_addr()
    }

    /// Starts probing, answering and refreshing until `stop` is set: two threads, and a
    /// third for the TCP connect probes when asked for.
    pub fn spawn(&self, stop: Arc<AtomicBool>) -> io::Result<Vec<JoinHandle<()>>> {
        let mut threads = Vec::new();
        if self.inner.connect.is_some() {
            let a = Arc::clone(&self.inner);
            let s = Arc::clone(&stop);
            threads.push(
                std::thread::Builder::new()
                    .name("hakaru-mesh-tcp".into())
                    .spawn(move || {
                        if let Some(c) = &a.connect {
                            crate::connect::run(&a.shared(), c, &s);
                        }
                    })?,
            );
        }
        if self.inner.slices.is_some() {
            let a = Arc::clone(&self.inner);
            let s = Arc::clone(&stop);
            threads.push(
                std::thread::Builder::new()
                    .name("hakaru-mesh-slice".into())
                    .spawn(move || {
                        if let Some(sl) = &a.slices {
                            crate::slice::run(&a.shared(), sl, &s);
                        }
                    })?,
            );
        }
        let a = Arc::clone(&self.inner);
        let s = Arc::clone(&stop);
        threads.push(
            std::thread::Builder::new()
                .name("hakaru-mesh".into())
                .spawn(move || run_socket(&a, &s))?,
        );
        let a = Arc::clone(&self.inner);
        threads.push(
            std::thread::Builder::new()
                .name("hakaru-mesh-peers".into())
                .spawn(move || run_refresh(&a, &stop))?,
        );
        Ok(threads)
    }
}

/// An address as the peer list writes it: an IPv4-mapped IPv6 source (a dual-stack socket's
/// view of an IPv4 peer) as plain IPv4.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => a,
        },
        v4 => v4,
    }
}

/// A destination as `socket` can send to it: an IPv4 peer as IPv4-mapped IPv6 from a
/// dual-stack (IPv6) socket.
fn sendable(socket_v6: bool, a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(v4) if socket_v6 => {
            SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port())
        }
        other => other,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads the list again every refresh; a failure keeps the old list and is logged once per
/// distinct error.
fn run_refresh(a: &Inner, stop: &AtomicBool) {
    let mut last = Instant::now();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if last.elapsed() < a.cfg.refresh {
            continue;
        }
        last = Instant::now();
        match a.cfg.source.load(a.cfg.port, a.cfg.max_peers) {
            Ok(peers) => {
                *lock(&a.allowed) = peers.iter().map(|p| p.addr.ip()).collect();
                *lock(&a.pending) = Some(peers);
                *lock(&a.peers_error) = None;
            }
            Err(e) => {
                a.list_errors.fetch_add(1, Ordering::Relaxed);
                let mut err = lock(&a.peers_error);
                if err.as_deref() != Some(e.as_str()) {
                    tracing::warn!("mesh: {e}; probing the last list read");
                }
                *err = Some(e);
            }
        }
    }
}

/// Datagrams read per wake-up at most, so a flood cannot hold the probes back.
const READS_PER_WAKE: usize = 256;

fn run_socket(a: &Inner, stop: &AtomicBool) {
    use hakaru_sys::AsRawFd;
    let mut buf = vec![0u8; MAX_LEN + 1];
    let mut out = Vec::with_capacity(MAX_LEN);
    let mut bucket = Bucket::new(a.cfg.max_reply_pps);
    if let Err(e) = a.socket.set_nonblocking(true) {
        tracing::warn!("mesh: the socket cannot be made non-blocking ({e}); the agent stops");
        return;
    }
    // Probes go out on a schedule of a few ms per slot with many peers: wake on time.
    hakaru_sys::tighten_timer_slack();
    let fd = a.socket.as_raw_fd();
    let v6 = a.socket.local_addr().is_ok_and(|l| l.is_ipv6());
    // When the socket was last read empty: every reply that came before then has been
    // matched, so a probe whose deadline had passed by then is lost. Expiring up to `now`
    // instead would count a reply still queued (a wake-up cut at READS_PER_WAKE after the
    // agent was held off the CPU) as a loss on the path.
    let mut drained = a.now();
    while !stop.load(Ordering::Acquire) {
        let now = a.now();
        let wake = {
            let mut p = lock(&a.prober);
            if let Some(peers) = lock(&a.pending).take() {
                let gone = p.set_peers(peers);
                if !gone.is_empty() {
                    let mut g = lock(&a.groups);
                    for (peer, totals) in gone {
                        g.depart(&peer, &totals, &a.cfg.group_by);
                    }
                }
            }
            // A flood that never lets the socket drain still expires probes a timeout late.
            let held =
                now.saturating_sub(a.cfg.probe.timeout.as_nanos().min(u128::from(u64::MAX)) as u64);
            p.handle_timeout(drained.max(held));
            while let Some((addr, h)) = p.poll_send(now) {
                h.encode(a.cfg.key.as_ref(), &mut out);
                if let Err(e) = a.socket.send_to(&out, sendable(v6, addr)) {
                    tracing::debug!("mesh: probe to {addr}: {e}");
                }
            }
            p.timeout()
        };
        // Wake for the next send or expiry, and at least every 100 ms for the stop flag.
        let wait = wake
            .map(|w| Duration::from_nanos(w.saturating_sub(a.now())))
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(100));
        hakaru_sys::wait_fd(fd, hakaru_sys::Interest::Read, wait);
        for _ in 0..READS_PER_WAKE {
            // Taken before the read: what arrived before it is in the socket now.
            let before = a.now();
            match a.socket.recv_from(&mut buf) {
                Ok((n, from)) => datagram(a, &buf[..n], from, &mut bucket, &mut out),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    drained = before;
                    break;
                }
                // An ICMP error reported on the socket (taken by this read): nothing to act
                // on; the datagrams behind it are read on.
                Err(_) => {}
            }
        }
    }
}

fn datagram(a: &Inner, b: &[u8], raw_from: SocketAddr, bucket: &mut Bucket, out: &mut Vec<u8>) {
    let r = &a.responder;
    let from = canonical(raw_from);
    if !(a.permits)(from.ip()) {
        r.acl.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let h = match Header::decode(b, a.cfg.key.as_ref()) {
        Ok(h) => h,
        Err(WireError::Tag) => {
            r.tag.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(_) => {
            r.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    match h.kind {
        Type::Reply => lock(&a.prober).on_reply(from, &h, a.now()),
        Type::Probe => {
            // Only listed peers are answered; with a key, only with a valid tag (checked above).
            if !lock(&a.allowed).contains(&from.ip()) {
                r.stranger.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if !bucket.take(a.now()) {
                r.rate.fetch_add(1, Ordering::Relaxed);
                return;
            }
            h.reply(a.id).encode(a.cfg.key.as_ref(), out);
            if a.socket.send_to(out, raw_from).is_ok() {
                r.answered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_read_as_the_list_writes_them() {
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:5209".parse().unwrap();
        let v4: SocketAddr = "10.0.0.1:5209".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:5209".parse().unwrap();
        assert_eq!(canonical(mapped), v4);
        assert_eq!(canonical(v6), v6);
        assert_eq!(sendable(true, v4), mapped);
        assert_eq!(sendable(false, v4), v4);
        assert_eq!(sendable(true, v6), v6);
    }

    #[test]
    fn the_bucket_allows_its_rate_and_a_second_of_burst() {
        let mut b = Bucket::new(10);
        let taken = (0..100).filter(|_| b.take(0)).count();
        assert_eq!(taken, 10);
        // Half a second later: five more.
        let taken = (0..100).filter(|_| b.take(500_000_000)).count();
        assert_eq!(taken, 5);
    }
}
