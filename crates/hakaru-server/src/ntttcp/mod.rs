//! `--ntttcp-port PORT`: an `ntttcp -r` receiver for stock ntttcp-for-linux senders.
//!
//! The sync listener is on PORT - 1 and the `--ntttcp-ports` data listeners from PORT on, as
//! a stock receiver's (`-P`, `-m N,*,IP`: the sender opens its connections to the first N of
//! them). The sync dialogue is `hakaru_session::ntttcp::server`; this module keeps
//! what the sync connections share, the groups of senders (docs/protocol-notes.md, "ntttcp"):
//!
//! - without `--ntttcp-multi` a group is one sender, and senders on different addresses test
//!   at once; a second sender from an address whose group is still here hears "running" (busy),
//!   as from a stock receiver, because ntttcp's data connections carry no test id and can only
//!   be told apart by address;
//! - with `--ntttcp-multi` (`ntttcp -r -M`) every sender joins the one group until the sender
//!   with `-L` arrives; the others were told 'W' and all start together.
//!
//! A data connection is taken only from an address whose group is waiting for its connections
//! (a stranger's is closed at once), at most `--max-flows` per group. The test is admitted
//! through the server's limits and budgets when its sender asks to start; the engine then
//! counts every connection until the sender closes it, and the log gives each connection's
//! bytes and the total.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hakaru_proto::ntttcp::MAX_SENDERS;
use socket2::{Domain, Protocol, Socket, Type};

use crate::registry::canonical_ip;
use crate::Ctx;

mod session;

/// How long the accept loop sleeps when no listener had a connection.
const ACCEPT_IDLE: Duration = Duration::from_millis(2);
/// Longest a sender's 'R' waits for the accept loop to take the data connections still in
/// the listen queues.
const SETTLE_LIMIT: Duration = Duration::from_secs(1);

/// The bound sync and data listeners.
pub(crate) struct NtttcpPorts {
    sync: TcpListener,
    data: Vec<TcpListener>,
}

impl NtttcpPorts {
    /// Binds the sync port (`first - 1`) and `count` data ports from `first`.
    pub(crate) fn bind(ip: IpAddr, first: u16, count: u16, v6_only: bool) -> io::Result<Self> {
        let sync_port = first.checked_sub(1).filter(|&p| p > 0).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{first}: the sync port is the first data port minus one, so the first data port must be at least 2"),
            )
        })?;
        let last = u32::from(first) + u32::from(count.max(1)) - 1;
        if last > u32::from(u16::MAX) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{first} + {count} data ports goes past port 65535"),
            ));
        }
        let sync = bind_tcp(SocketAddr::new(ip, sync_port), v6_only)?;
        let data = (0..count.max(1))
            .map(|i| bind_tcp(SocketAddr::new(ip, first + i), v6_only))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(NtttcpPorts { sync, data })
    }

    /// The ports `--ntttcp-port` asks for, if it does; errors name the flag.
    pub(crate) fn bind_for(cfg: &crate::ServerConfig, ip: IpAddr) -> io::Result<Option<Self>> {
        let Some(p) = cfg.ntttcp_port else {
            return Ok(None);
        };
        let v6_only = cfg.family == crate::Family::V6;
        Self::bind(ip, p, cfg.ntttcp_ports, v6_only)
            .map(Some)
            .map_err(|e| {
                let hint = if e.kind() == io::ErrorKind::AddrInUse {
                    " (another program, or a stock ntttcp -r, holds one of the ports)"
                } else {
                    ""
                };
                io::Error::new(e.kind(), format!("--ntttcp-port {p}: {e}{hint}"))
            })
    }

    /// The sync listener's address.
    pub(crate) fn sync_addr(&self) -> io::Result<SocketAddr> {
        self.sync.local_addr()
    }

    /// Serves every listener on one thread until the server shuts down.
    pub(crate) fn spawn(
        self,
        ctx: Arc<Ctx>,
        multi: bool,
    ) -> io::Result<std::thread::JoinHandle<()>> {
        let front = Arc::new(Front {
            multi,
            max_conns: ctx.cfg.max_flows as usize,
            groups: Mutex::new(Vec::new()),
            next_group: AtomicU64::new(1),
            passes: AtomicU64::new(0),
        });
        std::thread::Builder::new()
            .name("hakaru-ntttcp".into())
            .spawn(move || self.serve(&ctx, &front))
    }

    fn serve(self, ctx: &Arc<Ctx>, front: &Arc<Front>) {
        let all = std::iter::once(&self.sync).chain(&self.data);
        for l in all {
            if let Err(e) = l.set_nonblocking(true) {
                tracing::warn!("ntttcp: {e}; not serving ntttcp");
                return;
            }
        }
        while !ctx.shutdown.load(Ordering::Acquire) {
            let mut any = false;
            while let Some((s, peer)) = accept(&self.sync) {
                any = true;
                if admit_peer(ctx, peer) {
                    session::spawn(Arc::clone(ctx), Arc::clone(front), s, peer);
                }
            }
            for l in &self.data {
                while let Some((s, peer)) = accept(l) {
                    any = true;
                    if admit_peer(ctx, peer) {
                        front.data_connection(ctx, s, peer);
                    }
                }
            }
            front.passes.fetch_add(1, Ordering::AcqRel);
            if !any {
                std::thread::sleep(ACCEPT_IDLE);
            }
        }
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

/// One connection from `l`, if one is waiting (errors are logged and wait for the next round).
fn accept(l: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    match l.accept() {
        Ok(v) => Some(v),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            None
        }
        Err(e) => {
            tracing::warn!("ntttcp accept failed: {e}");
            None
        }
    }
}

/// The access list, checked before any byte is read.
fn admit_peer(ctx: &Ctx, peer: SocketAddr) -> bool {
    if ctx.cfg.acl.permits(peer.ip()) {
        return true;
    }
    ctx.denied.fetch_add(1, Ordering::Relaxed);
    tracing::debug!("ntttcp: closed connection from {peer}: not allowed (--allow/--deny)");
    false
}

/// A data connection waiting for its test: (stream, the sender's address, the port it came to).
pub(crate) type DataConn = (TcpStream, SocketAddr, u16);

/// The senders of one test and the data connections that arrived for it.
struct Group {
    id: u64,
    /// The senders' addresses (canonical).
    ips: Vec<IpAddr>,
    /// Sync sessions in the group that have not ended.
    senders: usize,
    /// Senders told 'W'.
    waiting: usize,
    conns: Vec<DataConn>,
    /// The cycle every sender of a multi-sender group gets (the first one's, capped).
    cycle: Option<i32>,
    /// The test runs: no more connections or senders.
    running: bool,
    /// For waiting senders: the last sender's test was admitted, or why not.
    go: Option<Result<(), String>>,
}

/// What the sync sessions share.
pub(crate) struct Front {
    multi: bool,
    max_conns: usize,
    groups: Mutex<Vec<Group>>,
    next_group: AtomicU64,
    /// Rounds of the accept loop over every listener so far.
    passes: AtomicU64,
}

/// The answer to a sender's 'R' or 'L'.
pub(crate) enum Start {
    /// Run the test on these connections (this session owns the data plane).
    Own(Vec<DataConn>),
    /// Wait for the last sender.
    Wait,
    /// Refused, with why.
    Refused(String),
}

impl Front {
    fn with<T>(&self, f: impl FnOnce(&mut Vec<Group>) -> T) -> Option<T> {
        self.groups.lock().ok().map(|mut g| f(&mut g))
    }

    /// Puts a sender from `ip` in a group: `Some(group id)`, or `None` when busy.
    pub(crate) fn join(&self, ip: IpAddr) -> Option<u64> {
        let ip = canonical_ip(ip);
        let multi = self.multi;
        self.with(|groups| {
            if multi {
                if let Some(g) = groups.first_mut() {
                    if g.running {
                        return None;
                    }
                    if !g.ips.contains(&ip) {
                        g.ips.push(ip);
                    }
                    g.senders += 1;
                    return Some(g.id);
                }
            } else if groups.iter().any(|g| g.ips.contains(&ip)) {
                return None;
            }
            let id = self.next_group.fetch_add(1, Ordering::Relaxed);
            groups.push(Group {
                id,
                ips: vec![ip],
                senders: 1,
                waiting: 0,
                conns: Vec::new(),
                cycle: None,
                running: false,
                go: None,
            });
            Some(id)
        })
        .flatten()
    }

    /// The cycle a sender of group `id` gets for its proposal.
    pub(crate) fn negotiate(&self, id: u64, proposed: i32, max: Option<Duration>) -> i32 {
        let mine = hakaru_session::ntttcp::server::negotiate(proposed, max);
        if !self.multi {
            return mine;
        }
        self.with(|groups| match groups.iter_mut().find(|g| g.id == id) {
            Some(g) => *g.cycle.get_or_insert(mine),
            None => mine,
        })
        .unwrap_or(mine)
    }

    /// A sender of group `id` asks to start (`last`: with 'L'). `admit` takes the test's
    /// slot and budget for the connections gathered; its refusal refuses every waiting sender.
    pub(crate) fn start(
        &self,
        id: u64,
        last: bool,
        admit: impl FnOnce(&[DataConn]) -> Result<(), String>,
    ) -> Start {
        let multi = self.multi;
        self.with(|groups| {
            let Some(g) = groups.iter_mut().find(|g| g.id == id) else {
                return Start::Refused("internal error: the sender's group is gone".into());
            };
            if g.running {
                return Start::Refused("the group's test has already started".into());
            }
            if multi && !last {
                if g.waiting + 1 >= MAX_SENDERS {
                    return Start::Refused(format!(
                        "too many senders: a multi-sender test takes at most {} senders plus the last ('-L')",
                        MAX_SENDERS - 1
                    ));
                }
                g.waiting += 1;
                return Start::Wait;
            }
            if !multi && last {
                return Start::Refused(
                    "the sender says it is the last of several ('-L'), but this server takes one sender per test (start it with --ntttcp-multi)".into(),
                );
            }
            let verdict = if g.conns.is_empty() {
                Err("no data connection arrived before the sender asked to start".into())
            } else {
                admit(&g.conns)
            };
            g.go = Some(verdict.clone());
            match verdict {
                Ok(()) => {
                    g.running = true;
                    Start::Own(std::mem::take(&mut g.conns))
                }
                Err(why) => Start::Refused(why),
            }
        })
        .unwrap_or_else(|| Start::Refused("internal error: poisoned lock".into()))
    }

    /// Waits until the accept loop has gone over every listener once since now (at most
    /// [`SETTLE_LIMIT`]). A stock sender asks to start as soon as its connections are
    /// established, which the kernel does before the accept loop has taken them: after this,
    /// every connection it opened before its 'R' is in its group.
    pub(crate) fn settle(&self) {
        let start = self.passes.load(Ordering::Acquire);
        let deadline = std::time::Instant::now() + SETTLE_LIMIT;
        while self.passes.load(Ordering::Acquire) < start + 2
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// For a waiting sender of group `id`: the last sender's verdict, once there is one.
    pub(crate) fn verdict(&self, id: u64) -> Option<Result<(), String>> {
        self.with(|groups| {
            groups
                .iter()
                .find(|g| g.id == id)
                .and_then(|g| g.go.clone())
        })
        .flatten()
    }

    /// A sync session of group `id` ended; the last one out removes the group (and closes
    /// connections nobody took).
    pub(crate) fn leave(&self, id: u64) {
        let _ = self.with(|groups| {
            if let Some(g) = groups.iter_mut().find(|g| g.id == id) {
                g.senders = g.senders.saturating_sub(1);
            }
            groups.retain(|g| g.senders > 0);
        });
    }

    /// A data connection: kept for the group of its address if that group is gathering.
    fn data_connection(&self, ctx: &Ctx, s: TcpStream, peer: SocketAddr) {
        let ip = canonical_ip(peer.ip());
        let port = s.local_addr().map_or(0, |a| a.port());
        let max = self.max_conns;
        let refused = self.with(|groups| {
            let Some(g) = groups.iter_mut().find(|g| g.ips.contains(&ip)) else {
                return Some("no ntttcp sender from that address is synced (ntttcp -s without -N syncs first; -N is not supported)".to_string());
            };
            if g.running {
                return Some("its sender's test has started".into());
            }
            if g.conns.len() >= max {
                return Some(format!("the test already has {max} data connections (--max-flows)"));
            }
            g.conns.push((s, peer, port));
            None
        });
        if let Some(Some(why)) = refused {
            ctx.log_refusal_as(peer, "ntttcp", &format!("ntttcp data port {port}: {why}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn front(multi: bool) -> Front {
        Front {
            multi,
            max_conns: 8,
            groups: Mutex::new(Vec::new()),
            next_group: AtomicU64::new(1),
            passes: AtomicU64::new(0),
        }
    }

    /// A connected loopback pair's accepted end, as a data connection of `g`.
    fn add_conn(f: &Front, g: u64) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let peer = c.local_addr().unwrap();
        let mut groups = f.groups.lock().unwrap();
        let grp = groups.iter_mut().find(|x| x.id == g).unwrap();
        grp.conns.push((s, peer, 5001));
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn one_sender_per_address_and_addresses_at_once() {
        let f = front(false);
        let a = f.join(A).expect("first sender");
        assert_eq!(f.join(A), None, "a second sender from one address is busy");
        let b = f.join(B).expect("another address tests at once");
        assert_ne!(a, b);
        assert_eq!(f.negotiate(a, 0, None), 60);
        assert!(
            matches!(f.start(a, false, |_| Ok(())), Start::Refused(w) if w.contains("no data connection"))
        );
        add_conn(&f, a);
        add_conn(&f, a);
        match f.start(a, false, |c| {
            if c.len() == 2 {
                Ok(())
            } else {
                Err("count".into())
            }
        }) {
            Start::Own(c) => assert_eq!(c.len(), 2),
            _ => panic!("the sender owns its test"),
        }
        assert!(
            matches!(f.start(a, false, |_| Ok(())), Start::Refused(w) if w.contains("already started"))
        );
        assert!(
            matches!(f.start(b, true, |_| Ok(())), Start::Refused(w) if w.contains("--ntttcp-multi"))
        );
        f.leave(a);
        assert!(
            f.join(A).is_some(),
            "the address is free once its sender left"
        );
    }

    #[test]
    fn several_senders_wait_for_the_last_and_share_its_verdict() {
        let f = front(true);
        let g = f.join(A).unwrap();
        assert_eq!(f.join(B), Some(g), "every sender joins the one group");
        assert_eq!(f.negotiate(g, 7, None), 7);
        assert_eq!(
            f.negotiate(g, 30, None),
            7,
            "the first sender's time holds for all"
        );
        add_conn(&f, g);
        assert!(matches!(f.start(g, false, |_| Ok(())), Start::Wait));
        assert_eq!(f.verdict(g), None);
        add_conn(&f, g);
        match f.start(g, true, |_| Ok(())) {
            Start::Own(c) => assert_eq!(c.len(), 2),
            _ => panic!("the last sender owns the test"),
        }
        assert_eq!(f.verdict(g), Some(Ok(())));
        assert_eq!(f.join(A), None, "a running group takes no one");
        f.leave(g);
        f.leave(g);
        assert!(f.join(A).is_some());
    }

    #[test]
    fn a_refused_last_sender_refuses_the_waiting_ones_and_seats_are_bounded() {
        let f = front(true);
        let g = f.join(A).unwrap();
        for _ in 0..MAX_SENDERS - 1 {
            assert!(matches!(f.start(g, false, |_| Ok(())), Start::Wait));
        }
        assert!(
            matches!(f.start(g, false, |_| Ok(())), Start::Refused(w) if w.contains("too many senders"))
        );
        add_conn(&f, g);
        assert!(
            matches!(f.start(g, true, |_| Err("over budget".into())), Start::Refused(w) if w == "over budget")
        );
        assert_eq!(f.verdict(g), Some(Err("over budget".into())));
    }
}
