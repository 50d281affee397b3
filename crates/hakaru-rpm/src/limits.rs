//! The rpm port's bounds (`hakaru server --rpm-*`, docs/security.md) and its admission:
//! connections at once per client and in total, and the buffer memory they may take, each
//! connection counted at [`CONNECTION_MEMORY`] from `accept` until it closes. One lock guards
//! the counts, so a check and its increment are one step; a [`Place`] gives its share back
//! however its connection ends.
//!
//! A client is a source address, or a network of them: IPv4 by address and IPv6 by /64 by
//! default, as the main port counts clients (`--client-prefix-v4`, `--client-prefix-v6`),
//! since one host usually holds a whole /64.
//!
//! At its per-client limit a client's new connection is not refused while the client has an
//! idle HTTP/2 connection (no request in progress): the one idle longest is told to close
//! ([`Place::closing`]; the server sends GOAWAY) and the new one takes its place. Clients such
//! as Cloudflare's mach open a new connection for each latency probe and leave it open, so a
//! 12 s test holds hundreds of idle connections; refusing the next one would fail the test. A
//! connection told to close stops counting against its client at once, but still counts in the
//! total and the memory budget until it has closed, which it must within [`CLOSE_GRACE`]; at
//! most [`MAX_CLOSING`] of a client's connections are closing at once, so a client that opens
//! connections faster than its old ones close is refused as before.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes of HTTP/2 request bodies one connection may have received and not yet consumed:
/// its connection window and each stream's initial window (the server's receive side).
/// Uploads are read and released as they arrive and every other body is dropped unread, so
/// this bounds what a connection can make the server hold, not what it usually holds. Sized
/// for uploads: a window allows one connection window / RTT, 2 MiB is 168 Mbit/s at 100 ms
/// and 1.7 Gbit/s at 10 ms, and a responsiveness client uploads over many connections (up to
/// the draft's 16: 2.7 Gbit/s at 100 ms). The client's own windows (conn.rs) are larger: they
/// are its downloads' and cost only the client.
pub const RECV_WINDOW: u32 = 2 << 20;
/// Largest request header list, HTTP/2 (SETTINGS_MAX_HEADER_LIST_SIZE) and HTTP/1.1 alike.
pub const MAX_HEAD: usize = 16 << 10;
/// What one connection is counted at in the memory budget: [`RECV_WINDOW`], the socket's
/// read buffer ([`crate::conn::READ_BUFFER`]), and 256 KiB for TLS's records each way, the
/// HTTP/2 codec's frame buffers, a header block being received (at most five 16 KiB frames
/// with [`MAX_HEAD`]) and HTTP/1.1's read buffer. What the server sends is not counted:
/// `/large` is frames of one static buffer of zeros, so HTTP/2's send buffer holds
/// references, not copies.
pub const CONNECTION_MEMORY: u64 =
    RECV_WINDOW as u64 + crate::conn::READ_BUFFER as u64 + (256 << 10);

/// Longest TLS handshake.
pub const HANDSHAKE: Duration = Duration::from_secs(10);
/// A connection with no request in progress is closed after this long.
pub const IDLE: Duration = Duration::from_secs(30);
/// A transfer that moves nothing for this long is reset.
pub const STALL: Duration = Duration::from_secs(30);
/// Longest a connection lives.
pub const LIFETIME: Duration = Duration::from_secs(600);
/// Longest an idle connection told to close (to make room for its client's new one) may take
/// to close after its GOAWAY.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Most connections of one client closing at once to make room for its new ones; beyond, a
/// new connection at the per-client limit is refused.
pub const MAX_CLOSING: usize = 16;

/// The rpm port's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections at once, in total (`--rpm-max-connections`).
    pub connections: usize,
    /// Connections at once from one client (`--rpm-max-per-client`).
    pub per_client: usize,
    /// Buffer memory of all connections together, each counted at [`CONNECTION_MEMORY`]
    /// (`--rpm-max-memory`); `None` for no limit.
    pub memory: Option<u64>,
    /// IPv4 sources in one network of this length are one client.
    pub prefix_v4: u8,
    /// IPv6 sources in one network of this length are one client.
    pub prefix_v6: u8,
    /// An HTTP/1.1 request head, from its first byte, and the HTTP/2 connection preface, from
    /// the end of the TLS handshake, must arrive within this (`--rpm-head-timeout`).
    pub head_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 1024,
            per_client: 192,
            memory: Some(1 << 30),
            prefix_v4: 32,
            prefix_v6: 64,
            head_timeout: Duration::from_secs(10),
        }
    }
}

/// A client as counted: its network and the prefix length.
type Client = (IpAddr, u8);

/// The client `ip` belongs to under the prefix lengths (IPv4-mapped IPv6 as IPv4).
pub fn client_of(ip: IpAddr, prefix_v4: u8, prefix_v6: u8) -> (IpAddr, u8) {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let len = prefix_v4.min(32);
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            (IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask)), len)
        }
        IpAddr::V6(v6) => {
            let len = prefix_v6.min(128);
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            (IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)), len)
        }
    }
}

/// "127.0.0.1", or "2001:db8::/64".
fn name(c: Client) -> String {
    let full = if c.0.is_ipv4() { 32 } else { 128 };
    if c.1 == full {
        c.0.to_string()
    } else {
        format!("{}/{}", c.0, c.1)
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Over a connection limit.
    Connections(String),
    /// Over the memory budget.
    Memory(String),
}

impl Refusal {
    /// The metrics' reason label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Connections(_) => "rpm_limits",
            Refusal::Memory(_) => "rpm_memory",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Connections(s) | Refusal::Memory(s) => f.write_str(s),
        }
    }
}

/// One client's connections.
#[derive(Debug, Default)]
struct Held {
    /// Counted against the per-client limit: all but those told to close.
    count: usize,
    /// Told to close and not closed yet.
    closing: usize,
    /// The idle ones that may be told to close, by when they became idle (oldest first).
    idle: BTreeMap<u64, Arc<Closing>>,
}

#[derive(Debug, Default)]
struct State {
    per: HashMap<Client, Held>,
    total: usize,
    memory: u64,
    /// Stamps the order in which connections became idle.
    ticks: u64,
    /// Connections told to close so far.
    closed_for_room: u64,
}

/// A connection's signal to close, set when its place was given to a new connection.
#[derive(Debug, Default)]
pub struct Closing {
    told: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Closing {
    /// True once told.
    pub fn told(&self) -> bool {
        self.told.load(Ordering::Acquire)
    }

    /// Returns once told (at once if told already).
    pub async fn wait(&self) {
        loop {
            let n = self.notify.notified();
            if self.told() {
                return;
            }
            n.await;
        }
    }

    fn tell(&self) {
        self.told.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

/// Places handed out under [`Limits`].
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    state: Mutex<State>,
}

/// A connection's place; gives itself back when dropped.
#[derive(Debug)]
pub struct Place {
    adm: Arc<Admission>,
    client: Client,
    /// Where it stands among its client's idle connections, while it is idle.
    idle_since: Option<u64>,
    closing: Arc<Closing>,
}

impl Admission {
    /// No connection yet.
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// A place for a connection from `ip`, or why not.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Place, Refusal> {
        let l = &self.limits;
        let client = client_of(ip, l.prefix_v4, l.prefix_v6);
        let mut s = self
            .state
            .lock()
            .map_err(|_| Refusal::Connections("the rpm port's counts are unusable".into()))?;
        let s = &mut *s;
        let here = s.per.get(&client).map_or(0, |h| h.count);
        let room = here >= l.per_client
            && s.total < l.connections
            && l.memory
                .is_none_or(|max| s.memory + CONNECTION_MEMORY <= max)
            && s.per.get_mut(&client).is_some_and(|h| {
                if h.closing >= MAX_CLOSING {
                    return false;
                }
                let Some((_, c)) = h.idle.pop_first() else {
                    return false;
                };
                c.tell();
                h.count -= 1;
                h.closing += 1;
                true
            });
        if room {
            s.closed_for_room += 1;
            if s.closed_for_room.is_power_of_two() {
                tracing::info!(
                    "rpm port: closed {} idle connection(s) so far to make room for new ones of the same client (--rpm-max-per-client {}); the last of {}",
                    s.closed_for_room,
                    l.per_client,
                    name(client)
                );
            }
        }
        let here = s.per.get(&client).map_or(0, |h| h.count);
        if here >= l.per_client {
            let one = if client.1 == if client.0.is_ipv4() { 32 } else { 128 } {
                "one address".to_string()
            } else {
                format!("one /{} network", client.1)
            };
            return Err(Refusal::Connections(format!(
                "the rpm port allows {} connections from {one}; {} has {here} (--rpm-max-per-client)",
                l.per_client,
                name(client)
            )));
        }
        if s.total >= l.connections {
            return Err(Refusal::Connections(format!(
                "the rpm port allows {} connections; {} are open (--rpm-max-connections)",
                l.connections, s.total
            )));
        }
        if let Some(max) = l.memory {
            if s.memory + CONNECTION_MEMORY > max {
                return Err(Refusal::Memory(format!(
                    "the rpm port's {} connections hold {} KiB of buffers, one more would take {} KiB more, and it allows {} KiB (--rpm-max-memory)",
                    s.total,
                    s.memory >> 10,
                    CONNECTION_MEMORY >> 10,
                    max >> 10
                )));
            }
        }
        s.per.entry(client).or_default().count += 1;
        s.total += 1;
        s.memory += CONNECTION_MEMORY;
        Ok(Place {
            adm: Arc::clone(self),
            client,
            idle_since: None,
            closing: Arc::new(Closing::default()),
        })
    }

    /// Connections open now, and the memory they are counted at.
    pub fn held(&self) -> (usize, u64) {
        self.state
            .lock()
            .map(|s| (s.total, s.memory))
            .unwrap_or_default()
    }
}

impl Place {
    /// Says whether the connection is idle (HTTP/2 with no request in progress): an idle
    /// one may be told to close to make room for its client's new connection.
    pub fn set_idle(&mut self, idle: bool) {
        if idle == self.idle_since.is_some() || self.closing.told() {
            return;
        }
        let Ok(mut s) = self.adm.state.lock() else {
            return;
        };
        let s = &mut *s;
        let Some(h) = s.per.get_mut(&self.client) else {
            return;
        };
        if let Some(t) = self.idle_since.take() {
            h.idle.remove(&t);
        }
        if idle {
            s.ticks += 1;
            h.idle.insert(s.ticks, Arc::clone(&self.closing));
            self.idle_since = Some(s.ticks);
        }
    }

    /// The signal telling this connection to close.
    pub fn closing(&self) -> Arc<Closing> {
        Arc::clone(&self.closing)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Ok(mut s) = self.adm.state.lock() {
            s.total = s.total.saturating_sub(1);
            s.memory = s.memory.saturating_sub(CONNECTION_MEMORY);
            if let Some(h) = s.per.get_mut(&self.client) {
                if let Some(t) = self.idle_since {
                    h.idle.remove(&t);
                }
                if self.closing.told() {
                    h.closing = h.closing.saturating_sub(1);
                } else {
                    h.count = h.count.saturating_sub(1);
                }
                if h.count == 0 && h.closing == 0 {
                    s.per.remove(&self.client);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn places_are_limited_per_client_and_given_back() {
        let adm = Admission::new(Limits {
            per_client: 3,
            ..Limits::default()
        });
        let places: Vec<Place> = (0..3)
            .map(|_| adm.admit(ip("192.0.2.1")).unwrap())
            .collect();
        let e = adm.admit(ip("192.0.2.1")).unwrap_err();
        assert_eq!(e.reason(), "rpm_limits");
        assert!(
            e.to_string()
                .contains("3 connections from one address; 192.0.2.1 has 3 (--rpm-max-per-client)"),
            "{e}"
        );
        // The IPv4-mapped form is the same client.
        assert!(adm.admit(ip("::ffff:192.0.2.1")).is_err());
        assert!(adm.admit(ip("192.0.2.2")).is_ok());
        drop(places);
        assert!(adm.admit(ip("192.0.2.1")).is_ok());
        assert_eq!(adm.held(), (0, 0));
    }

    #[test]
    fn an_ipv6_64_is_one_client_by_default() {
        let adm = Admission::new(Limits {
            per_client: 2,
            ..Limits::default()
        });
        let _a = adm.admit(ip("2001:db8:1:2::1")).unwrap();
        let _b = adm.admit(ip("2001:db8:1:2::ffff")).unwrap();
        let e = adm.admit(ip("2001:db8:1:2:3::9")).unwrap_err();
        assert!(
            e.to_string()
                .contains("one /64 network; 2001:db8:1:2::/64 has 2"),
            "{e}"
        );
        assert!(adm.admit(ip("2001:db8:1:3::1")).is_ok());
        // --client-prefix-v6 128: each address is a client.
        let adm = Admission::new(Limits {
            per_client: 1,
            prefix_v6: 128,
            ..Limits::default()
        });
        let _a = adm.admit(ip("2001:db8::1")).unwrap();
        assert!(adm.admit(ip("2001:db8::2")).is_ok());
    }

    #[test]
    fn the_total_and_the_memory_budget_refuse_by_name() {
        let adm = Admission::new(Limits {
            connections: 2,
            ..Limits::default()
        });
        let _p: Vec<Place> = ["10.0.0.1", "10.0.0.2"]
            .iter()
            .map(|a| adm.admit(ip(a)).unwrap())
            .collect();
        let e = adm.admit(ip("10.0.0.3")).unwrap_err();
        assert!(e.to_string().contains("(--rpm-max-connections)"), "{e}");
        let adm = Admission::new(Limits {
            memory: Some(2 * CONNECTION_MEMORY + 1),
            ..Limits::default()
        });
        let _p: Vec<Place> = ["10.0.0.1", "10.0.0.2"]
            .iter()
            .map(|a| adm.admit(ip(a)).unwrap())
            .collect();
        assert_eq!(adm.held(), (2, 2 * CONNECTION_MEMORY));
        let e = adm.admit(ip("10.0.0.3")).unwrap_err();
        assert_eq!(e.reason(), "rpm_memory");
        assert!(e.to_string().contains("(--rpm-max-memory)"), "{e}");
        let free = Admission::new(Limits {
            memory: None,
            ..Limits::default()
        });
        assert!(free.admit(ip("10.0.0.3")).is_ok());
    }

    #[test]
    fn at_the_per_client_limit_the_longest_idle_connection_makes_room() {
        let adm = Admission::new(Limits {
            per_client: 3,
            ..Limits::default()
        });
        let mut p: Vec<Place> = (0..3)
            .map(|_| adm.admit(ip("192.0.2.1")).unwrap())
            .collect();
        // None idle: refused as before.
        assert!(adm.admit(ip("192.0.2.1")).is_err());
        // 1 became idle before 0; 2 was idle and is busy again.
        p[2].set_idle(true);
        p[1].set_idle(true);
        p[0].set_idle(true);
        p[2].set_idle(false);
        let (c0, c1, c2) = (p[0].closing(), p[1].closing(), p[2].closing());
        let new = adm.admit(ip("192.0.2.1")).expect("room made");
        assert!(c1.told() && !c0.told() && !c2.told());
        // The one closing still counts in the total until it has closed.
        assert_eq!(adm.held().0, 4);
        let newer = adm.admit(ip("192.0.2.1")).expect("room made");
        assert!(c0.told() && !c2.told());
        // Nothing idle is left: refused, and another client is not touched.
        assert!(adm.admit(ip("192.0.2.1")).is_err());
        let other = adm.admit(ip("192.0.2.2")).unwrap();
        // A connection told to close no longer goes idle; once it closes, its client's count
        // is what it was.
        p[1].set_idle(true);
        drop(p.remove(1));
        drop(p.remove(0));
        assert_eq!(adm.held().0, 4);
        assert!(adm.admit(ip("192.0.2.1")).is_err());
        drop((p, new, newer, other));
        assert_eq!(adm.held(), (0, 0));
        assert!(adm.state.lock().unwrap().per.is_empty());
    }

    #[test]
    fn a_client_whose_closing_connections_linger_is_refused() {
        let adm = Admission::new(Limits {
            per_client: MAX_CLOSING,
            ..Limits::default()
        });
        let mut held: Vec<Place> = Vec::new();
        for _ in 0..MAX_CLOSING {
            let mut p = adm.admit(ip("192.0.2.1")).unwrap();
            p.set_idle(true);
            held.push(p);
        }
        // Each new one makes room by telling an idle one to close, none of which closes.
        for _ in 0..MAX_CLOSING {
            let mut p = adm.admit(ip("192.0.2.1")).expect("room made");
            p.set_idle(true);
            held.push(p);
        }
        assert!(held[..MAX_CLOSING].iter().all(|p| p.closing.told()));
        let e = adm.admit(ip("192.0.2.1")).unwrap_err();
        assert!(e.to_string().contains("(--rpm-max-per-client)"), "{e}");
        // One closes: room again.
        drop(held.remove(0));
        assert!(adm.admit(ip("192.0.2.1")).is_ok());
    }

    #[test]
    fn the_total_limit_is_not_bent_to_make_room() {
        let adm = Admission::new(Limits {
            per_client: 1,
            connections: 1,
            ..Limits::default()
        });
        let mut p = adm.admit(ip("192.0.2.1")).unwrap();
        p.set_idle(true);
        let e = adm.admit(ip("192.0.2.1")).unwrap_err();
        assert!(!p.closing.told());
        assert!(e.to_string().contains("--rpm-max-per-client"), "{e}");
    }

    #[test]
    fn a_told_connection_wakes_its_waiter() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let adm = Admission::new(Limits {
            per_client: 1,
            ..Limits::default()
        });
        let mut p = adm.admit(ip("192.0.2.1")).unwrap();
        p.set_idle(true);
        let c = p.closing();
        let waiter = std::thread::spawn(move || rt.block_on(c.wait()));
        let _new = adm.admit(ip("192.0.2.1")).unwrap();
        waiter.join().unwrap();
        // Told before waiting: returns at once.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(p.closing().wait());
    }
}
