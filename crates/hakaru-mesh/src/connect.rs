//! `--mesh-connect-interval`: the time a TCP connect to each peer's mesh port takes (the
//! SYN, the SYN-ACK, and the kernel's accept queue on the far side), beside the UDP round
//! trips. A connect is a probe whose reply is the established connection, so the same
//! sans-IO [`Prober`] schedules them under their own rate cap, counts the ones that do not
//! complete within `--mesh-timeout` (refused, unreachable, silent) as lost, and keeps their
//! window. This driver starts non-blocking connects, waits for them with one poll set, and
//! closes each as soon as it is established: no byte is sent.
//!
//! It probes exactly the peers the UDP prober probes (the list, less this agent's own
//! addresses), following its generation.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::groups::Groups;
use crate::prober::Prober;
use crate::wire::Header;

/// How the connect probes run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectConfig {
    /// Each peer at most once per this.
    pub interval: Duration,
    /// Connects a second from this agent, all peers together.
    pub max_rate: u32,
}

/// Most connects under way at once (each holds a socket until it completes or times out).
pub const MAX_IN_FLIGHT: usize = 256;

/// The connect prober's state, beside the UDP one.
pub(crate) struct Connect {
    pub(crate) prober: Mutex<Prober>,
    pub(crate) groups: Mutex<Groups>,
}

struct InFlight {
    stream: TcpStream,
    addr: SocketAddr,
    header: Header,
    deadline: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the driver shares with the agent: the UDP prober whose peers it follows, the agent's
/// clock, the timeout, and the label that groups metric series.
pub(crate) struct Shared<'a> {
    pub(crate) udp: &'a Mutex<Prober>,
    pub(crate) epoch: Instant,
    pub(crate) timeout: Duration,
    pub(crate) group_by: &'a str,
}

/// The connect driver: runs until `stop` is set.
pub(crate) fn run(a: &Shared<'_>, c: &Connect, stop: &AtomicBool) {
    use hakaru_sys::AsRawFd;
    let clock = || a.epoch.elapsed().as_nanos() as u64;
    let timeout = a.timeout.as_nanos() as u64;
    let mut seen = None;
    let mut flight: Vec<InFlight> = Vec::new();
    let mut set = hakaru_sys::PollSet::new();
    while !stop.load(Ordering::Acquire) {
        let now = clock();
        let (peers, generation) = {
            let udp = lock(a.udp);
            if seen == Some(udp.generation()) {
                (None, udp.generation())
            } else {
                let (p, g) = udp.peers();
                (Some(p), g)
            }
        };
        let wake = {
            let mut p = lock(&c.prober);
            if let Some(peers) = peers {
                seen = Some(generation);
                let gone = p.set_peers(peers);
                let mut g = lock(&c.groups);
                for (peer, totals) in gone {
                    g.depart(&peer, &totals, a.group_by);
                }
            }
            // A connect past its time is closed; the prober counts it lost.
            flight.retain(|f| f.deadline > now);
            p.handle_timeout(now);
            // At the cap, nothing more is started (and counted) until connects end.
            while flight.len() < MAX_IN_FLIGHT {
                let Some((addr, header)) = p.poll_send(now) else {
                    break;
                };
                match hakaru_sys::connect_start(addr) {
                    Ok(stream) => flight.push(InFlight {
                        stream,
                        addr,
                        header,
                        deadline: now + timeout,
                    }),
                    // Not started (out of descriptors or ports): not established, so
                    // counted lost at its deadline, like a refused one.
                    Err(e) => tracing::debug!("mesh: connect to {addr}: {e}"),
                }
            }
            if flight.len() >= MAX_IN_FLIGHT {
                // Full: the next thing to do is the first connect's end or deadline.
                flight.iter().map(|f| f.deadline).min()
            } else {
                p.timeout()
            }
        };
        let wait = wake
            .map(|w| Duration::from_nanos(w.saturating_sub(clock())))
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(100));
        if flight.is_empty() {
            std::thread::sleep(wait);
            continue;
        }
        set.clear();
        for f in &flight {
            set.push(f.stream.as_raw_fd(), hakaru_sys::Interest::Write);
        }
        set.wait(wait);
        let now = clock();
        let mut p = lock(&c.prober);
        for i in (0..flight.len()).rev() {
            if !set.ready(i) {
                continue;
            }
            let f = flight.swap_remove(i);
            // Writable: the handshake ended. Established if no error is pending and the
            // stream has a peer, within the timeout; refused or unreachable otherwise (lost
            // at its deadline).
            if now < f.deadline
                && matches!(f.stream.take_error(), Ok(None))
                && f.stream.peer_addr().is_ok()
            {
                p.on_reply(f.addr, &f.header.reply(0), now);
            }
        }
    }
}
