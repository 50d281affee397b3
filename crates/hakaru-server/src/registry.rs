//! Tests waiting for their data connections and UDP flows, found by token.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::mpsc::Sender;
use std::sync::Mutex;

/// A data path arriving for a test.
#[derive(Debug)]
pub enum DataConn {
    /// A TCP data connection: its flow id and socket.
    Tcp(u32, TcpStream),
    /// A UDP flow's hello: its flow id and the address it came from.
    Udp(u32, SocketAddr),
}

/// Why a data path was not handed to a test.
#[derive(Debug, PartialEq, Eq)]
pub enum Undelivered {
    /// No test has that token.
    UnknownToken,
    /// The token is right but the sender is not the test's client.
    WrongPeer(IpAddr),
}

struct Entry {
    peer: IpAddr,
    tx: Sender<DataConn>,
}

/// Maps test tokens to the channel their session collects data paths from.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<HashMap<String, Entry>>,
}

/// The address as IPv4 when it is an IPv4-mapped IPv6 address, so a dual-stack socket's view
/// and an IPv4 socket's view of one peer compare equal.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Registry {
    /// Registers a test's token and the address of its client's control connection.
    pub fn insert(&self, token: String, peer: IpAddr, tx: Sender<DataConn>) {
        if let Ok(mut m) = self.inner.lock() {
            m.insert(
                token,
                Entry {
                    peer: canonical_ip(peer),
                    tx,
                },
            );
        }
    }

    /// Removes a token (the test ended or never started).
    pub fn remove(&self, token: &str) {
        if let Ok(mut m) = self.inner.lock() {
            m.remove(token);
        }
    }

    /// Hands a data path from `from` to its test. UDP flows are only accepted from the test's
    /// client address, so the server never answers a third party (no reflection).
    pub fn deliver(
        &self,
        token: &str,
        from: IpAddr,
        conn: DataConn,
    ) -> Result<(), (Undelivered, DataConn)> {
        let found = self
            .inner
            .lock()
            .ok()
            .and_then(|m| m.get(token).map(|e| (e.peer, e.tx.clone())));
        match found {
            None => Err((Undelivered::UnknownToken, conn)),
            Some((peer, _)) if matches!(conn, DataConn::Udp(..)) && peer != canonical_ip(from) => {
                Err((Undelivered::WrongPeer(from), conn))
            }
            Some((_, tx)) => tx.send(conn).map_err(|e| (Undelivered::UnknownToken, e.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::mpsc;

    #[test]
    fn udp_flows_only_from_the_client() {
        let r = Registry::default();
        let (tx, rx) = mpsc::channel();
        let client = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
        r.insert("t".into(), client, tx);
        let stranger: SocketAddr = "127.0.0.2:9".parse().unwrap();
        let e = r
            .deliver("t", stranger.ip(), DataConn::Udp(0, stranger))
            .unwrap_err();
        assert_eq!(e.0, Undelivered::WrongPeer(stranger.ip()));
        let e = r
            .deliver("nope", client, DataConn::Udp(0, stranger))
            .unwrap_err();
        assert_eq!(e.0, Undelivered::UnknownToken);
        // The same client seen through a dual-stack socket is accepted.
        let mapped = IpAddr::V6(Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped());
        let from = SocketAddr::new(mapped, 4000);
        r.deliver("t", mapped, DataConn::Udp(3, from)).unwrap();
        assert!(matches!(rx.try_recv(), Ok(DataConn::Udp(3, a)) if a == from));
        assert_eq!(
            canonical_ip(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        );
    }
}
