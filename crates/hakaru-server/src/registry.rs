//! Tests waiting for their data connections and UDP flows, found by token.
//!
//! A token admits only what its test asked for: data paths from the address of the test's
//! control connection (TCP and UDP alike), at most as many as the test has flows (a UDP hello
//! repeated from the same socket is the same path), and only while the test collects them:
//! the session retires the token as soon as every path has arrived.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::mpsc::Sender;
use std::sync::Mutex;

/// A data path arriving for a test.
#[derive(Debug)]
pub enum DataConn {
    /// A TCP data connection: its flow id, socket, and the bytes read past its hello (a
    /// latency probe path may send its first request before the server has read the hello;
    /// a bulk flow sends nothing before `start`).
    Tcp(u32, TcpStream, Vec<u8>),
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
    /// The test already has every data path it asked for.
    Full(usize),
}

struct Entry {
    peer: IpAddr,
    tx: Sender<DataConn>,
    /// Data paths the test opens.
    paths: usize,
    /// TCP connections handed over so far.
    tcp: usize,
    /// UDP paths seen so far: (flow, sender), so a repeated hello is not a new path.
    udp: HashSet<(u32, SocketAddr)>,
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
    /// Registers a test's token, the address of its client's control connection and how
    /// many data paths the test opens. False (nothing registered) when the token is taken.
    pub fn insert(&self, token: String, peer: IpAddr, paths: usize, tx: Sender<DataConn>) -> bool {
        let Ok(mut m) = self.inner.lock() else {
            return false;
        };
        if m.contains_key(&token) {
            return false;
        }
        m.insert(
            token,
            Entry {
                peer: canonical_ip(peer),
                tx,
                paths,
                tcp: 0,
                udp: HashSet::new(),
            },
        );
        true
    }

    /// Removes a token (the test ended or never started).
    pub fn remove(&self, token: &str) {
        if let Ok(mut m) = self.inner.lock() {
            m.remove(token);
        }
    }

    /// Hands a data path from `from` to its test: only from the test's client address (so
    /// the server never answers a third party, and a token seen on the path is no use from
    /// elsewhere), and no more paths than the test has flows.
    pub fn deliver(
        &self,
        token: &str,
        from: IpAddr,
        conn: DataConn,
    ) -> Result<(), (Undelivered, DataConn)> {
        let Ok(mut m) = self.inner.lock() else {
            return Err((Undelivered::UnknownToken, conn));
        };
        let Some(e) = m.get_mut(token) else {
            return Err((Undelivered::UnknownToken, conn));
        };
        if e.peer != canonical_ip(from) {
            return Err((Undelivered::WrongPeer(from), conn));
        }
        // The path this delivery would add: none for a hello repeated from the same socket.
        let new_udp = match &conn {
            DataConn::Tcp(..) => None,
            DataConn::Udp(flow, addr) => Some((*flow, *addr)).filter(|k| !e.udp.contains(k)),
        };
        let adds = matches!(conn, DataConn::Tcp(..)) || new_udp.is_some();
        if adds && e.tcp + e.udp.len() >= e.paths {
            return Err((Undelivered::Full(e.paths), conn));
        }
        let is_tcp = matches!(conn, DataConn::Tcp(..));
        if let Err(back) = e.tx.send(conn) {
            return Err((Undelivered::UnknownToken, back.0));
        }
        if is_tcp {
            e.tcp += 1;
        }
        if let Some(k) = new_udp {
            e.udp.insert(k);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::mpsc;

    #[test]
    fn data_paths_only_from_the_client() {
        let r = Registry::default();
        let (tx, rx) = mpsc::channel();
        let client = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
        assert!(r.insert("t".into(), client, 4, tx));
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
        // A token is not a second test's: the first registration keeps it.
        let (tx2, _rx2) = mpsc::channel();
        assert!(!r.insert("t".into(), stranger.ip(), 1, tx2));
    }

    #[test]
    fn no_more_paths_than_flows() {
        let r = Registry::default();
        let (tx, rx) = mpsc::channel();
        let client = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        assert!(r.insert("u".into(), client, 2, tx));
        let a: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let b: SocketAddr = "10.0.0.1:4001".parse().unwrap();
        let c: SocketAddr = "10.0.0.1:4002".parse().unwrap();
        // Hellos repeat until answered: the same flow from the same socket is one path.
        for _ in 0..5 {
            r.deliver("u", client, DataConn::Udp(0, a)).unwrap();
        }
        r.deliver("u", client, DataConn::Udp(1, b)).unwrap();
        r.deliver("u", client, DataConn::Udp(1, b)).unwrap();
        let e = r.deliver("u", client, DataConn::Udp(2, c)).unwrap_err();
        assert_eq!(e.0, Undelivered::Full(2));
        let e = r.deliver("u", client, DataConn::Udp(0, c)).unwrap_err();
        assert_eq!(e.0, Undelivered::Full(2));
        assert_eq!(rx.try_iter().count(), 7);
        // TCP: every connection is a path; the third of two is refused and handed back.
        let (tx, rx) = mpsc::channel();
        assert!(r.insert("t".into(), client, 2, tx));
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = || std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        r.deliver("t", client, DataConn::Tcp(0, conn(), Vec::new()))
            .unwrap();
        r.deliver("t", client, DataConn::Tcp(0, conn(), Vec::new()))
            .unwrap();
        let e = r
            .deliver("t", client, DataConn::Tcp(1, conn(), Vec::new()))
            .unwrap_err();
        assert_eq!(e.0, Undelivered::Full(2));
        assert!(matches!(e.1, DataConn::Tcp(1, ..)));
        assert_eq!(rx.try_iter().count(), 2);
        // Retired: nothing more is delivered at all.
        r.remove("t");
        let e = r
            .deliver("t", client, DataConn::Tcp(1, conn(), Vec::new()))
            .unwrap_err();
        assert_eq!(e.0, Undelivered::UnknownToken);
    }
}
