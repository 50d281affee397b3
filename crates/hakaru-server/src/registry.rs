//! Tests waiting for their data connections and UDP flows, found by token.
//!
//! A token admits only what its test asked for: data paths from the address of the test's
//! control connection (TCP and UDP alike), at most as many as the test has flows (a UDP hello
//! repeated from the same socket is the same path), and only while the test collects them:
//! the session retires the token as soon as every path has arrived.
//!
//! A test's queue is bounded ([`queue_len`]): a UDP hello repeated faster than the session
//! takes them is dropped when the queue is full (the client repeats its hellos until
//! answered), and counted.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
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
    /// The test's queue is full (hellos repeated faster than the session takes them).
    QueueFull,
}

/// Room in a test's queue of arriving data paths: every path it opens, plus this many
/// repeated UDP hellos not yet taken.
pub const QUEUE_REPEATS: usize = 64;

/// The length of the queue for a test opening `paths` data paths.
pub fn queue_len(paths: usize) -> usize {
    paths.saturating_add(QUEUE_REPEATS)
}

struct Entry {
    peer: IpAddr,
    tx: SyncSender<DataConn>,
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
    /// Paths dropped because their test's queue was full.
    dropped: AtomicU64,
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
    /// `tx` is the sending end of a `sync_channel` of [`queue_len`]`(paths)`.
    pub fn insert(
        &self,
        token: String,
        peer: IpAddr,
        paths: usize,
        tx: SyncSender<DataConn>,
    ) -> bool {
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
        match e.tx.try_send(conn) {
            Ok(()) => {}
            Err(TrySendError::Full(back)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Err((Undelivered::QueueFull, back));
            }
            Err(TrySendError::Disconnected(back)) => return Err((Undelivered::UnknownToken, back)),
        }
        if is_tcp {
            e.tcp += 1;
        }
        if let Some(k) = new_udp {
            e.udp.insert(k);
        }
        Ok(())
    }

    /// Data paths dropped so far because their test's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
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
        let (tx, rx) = mpsc::sync_channel(queue_len(4));
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
        let (tx2, _rx2) = mpsc::sync_channel(1);
        assert!(!r.insert("t".into(), stranger.ip(), 1, tx2));
    }

    #[test]
    fn no_more_paths_than_flows() {
        let r = Registry::default();
        let (tx, rx) = mpsc::sync_channel(queue_len(2));
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
        let (tx, rx) = mpsc::sync_channel(queue_len(2));
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

    #[test]
    fn repeated_hellos_are_dropped_and_counted_when_the_queue_is_full() {
        let r = Registry::default();
        let (tx, rx) = mpsc::sync_channel(queue_len(1));
        let client = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        assert!(r.insert("h".into(), client, 1, tx));
        let a: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let mut queued = 0;
        for _ in 0..10_000 {
            match r.deliver("h", client, DataConn::Udp(0, a)) {
                Ok(()) => queued += 1,
                Err((why, _)) => assert_eq!(why, Undelivered::QueueFull),
            }
        }
        assert_eq!(
            queued,
            queue_len(1),
            "the queue holds its length and no more"
        );
        assert_eq!(r.dropped(), 10_000 - queue_len(1) as u64);
        // Once the session takes them, hellos are queued again.
        assert_eq!(rx.try_iter().count(), queue_len(1));
        r.deliver("h", client, DataConn::Udp(0, a)).unwrap();
    }
}
