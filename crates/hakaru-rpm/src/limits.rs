//! The rpm port's bounds (`hakaru server --rpm-*`, docs/security.md) and its admission:
//! connections at once per client and in total, and the buffer memory they may take, each
//! connection counted at [`CONNECTION_MEMORY`] from `accept` until it closes. One lock guards
//! the counts, so a check and its increment are one step; a [`Place`] gives its share back
//! however its connection ends.
//!
//! A client is a source address, or a network of them: IPv4 by address and IPv6 by /64 by
//! default, as the main port counts clients (`--client-prefix-v4`, `--client-prefix-v6`),
//! since one host usually holds a whole /64.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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

#[derive(Debug, Default)]
struct State {
    per: HashMap<Client, usize>,
    total: usize,
    memory: u64,
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
        let here = s.per.get(&client).copied().unwrap_or(0);
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
        *s.per.entry(client).or_insert(0) += 1;
        s.total += 1;
        s.memory += CONNECTION_MEMORY;
        Ok(Place {
            adm: Arc::clone(self),
            client,
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

impl Drop for Place {
    fn drop(&mut self) {
        if let Ok(mut s) = self.adm.state.lock() {
            s.total = s.total.saturating_sub(1);
            s.memory = s.memory.saturating_sub(CONNECTION_MEMORY);
            if let Some(n) = s.per.get_mut(&self.client) {
                *n = n.saturating_sub(1);
                if *n == 0 {
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
}
