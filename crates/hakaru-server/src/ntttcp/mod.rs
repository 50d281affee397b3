//! `--ntttcp-port PORT`: an `ntttcp -r` receiver for stock ntttcp-for-linux senders.
//!
//! The sync listener is on PORT - 1 and the `--ntttcp-ports` data listeners from PORT on, as
//! a stock receiver's (`-P`, `-m N,*,IP`: the sender opens its connections to the first N of
//! them). The sync dialogue is `hakaru_session::ntttcp::server`; this module keeps
//! what the sync connections share, the groups of senders (docs/protocol-notes.md, "ntttcp"):
//!
//! - without `--ntttcp-multi` a group is one sender, and senders of different clients (an
//!   address, or a network under `--client-prefix-v4`/`-v6`) test at once; a second sender
//!   from a client whose group is still here hears "running" (busy), as from a stock
//!   receiver, because ntttcp's data connections carry no test id and can only be told apart
//!   by where they come from;
//! - with `--ntttcp-multi` (`ntttcp -r -M`) every sender joins the one group until the sender
//!   with `-L` arrives; the others were told 'W' and all start together.
//!
//! A data connection holds a handshake slot from the moment it is accepted, as every
//! connection on the main port does (`--max-pending-per-client`, `--max-pending`): one over
//! the limits is closed at once. A synced sender counts as a test (`--max-tests-per-client`,
//! `--max-tests`) whose data paths are `--ntttcp-max-conns`, so its client may have that many
//! more connections handshaking, as a hakaru test's client may for its flows. A data
//! connection is kept only for a group of its client that is waiting for its connections (a
//! stranger's is closed at once), at most `--ntttcp-max-conns` per sender and `--max-flows`
//! per test (`front`). The test's memory is budgeted when its sender asks to start; the
//! engine then counts every connection until the sender closes it, and the log gives each
//! connection's bytes and the total.
//!
//! One thread waits on every listener at once (poll, waking at least every 200 ms to see the
//! shutdown flag), so an idle receiver costs nothing; accept errors back off (`accept`).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hakaru_engine::sys::{AsRawFd, Interest, PollSet};
use socket2::{Domain, Protocol, Socket, Type};

use crate::accept::{is_idle, AcceptErrors};
use crate::limits::Slot;
use crate::Ctx;

mod session;

pub(crate) use hakaru_session::ntttcp::front::{Front, Start};

/// Longest wait for a connection before the accept loop looks at the shutdown flag.
const ACCEPT_WAIT: Duration = Duration::from_millis(200);
/// Most connections taken from one listener in one pass: a flood on one port cannot keep the
/// loop from the others.
const PASS_MOST: usize = 256;

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
        for l in std::iter::once(&self.sync).chain(&self.data) {
            l.set_nonblocking(true)?;
        }
        let shared = Arc::new(Shared {
            front: Front::new(
                multi,
                ctx.cfg.ntttcp_max_conns as usize,
                ctx.cfg.max_flows as usize,
                ctx.cfg.limits.prefixes(),
            ),
            data: self.data,
            taking: Mutex::new(()),
        });
        let sync = self.sync;
        std::thread::Builder::new()
            .name("hakaru-ntttcp".into())
            .spawn(move || serve(&ctx, &shared, &sync))
    }
}

/// Waits on every listener at once and takes what arrives, until the server shuts down.
fn serve(ctx: &Arc<Ctx>, shared: &Arc<Shared>, sync: &TcpListener) {
    let mut set = PollSet::new();
    let (mut sync_errors, mut data_errors) = (
        AcceptErrors::new("ntttcp sync port"),
        AcceptErrors::new("ntttcp data port"),
    );
    while !ctx.shutdown.load(Ordering::Acquire) {
        set.clear();
        set.push(sync.as_raw_fd(), Interest::Read);
        for l in &shared.data {
            set.push(l.as_raw_fd(), Interest::Read);
        }
        set.wait(ACCEPT_WAIT);
        if set.ready(0) {
            for _ in 0..PASS_MOST {
                match sync.accept() {
                    Ok((s, peer)) => {
                        sync_errors.accepted();
                        if admit_peer(ctx, peer) {
                            session::spawn(Arc::clone(ctx), Arc::clone(shared), s, peer);
                        }
                    }
                    Err(e) if is_idle(&e) => break,
                    Err(e) => {
                        sync_errors.failed(&e);
                        break;
                    }
                }
            }
        }
        if (1..set.len()).any(|i| set.ready(i)) {
            match shared.take_data(ctx) {
                Ok(()) => data_errors.accepted(),
                Err(e) => data_errors.failed(&e),
            }
        }
    }
}

/// What the accept thread and the sync sessions share.
pub(crate) struct Shared {
    front: Front<DataConn>,
    data: Vec<TcpListener>,
    /// Held while data connections are taken from the listeners: a sender's 'R' takes what
    /// is queued itself, and finds nothing half-taken by the accept thread.
    taking: Mutex<()>,
}

impl Shared {
    /// Takes the data connections queued on every data listener (at most [`PASS_MOST`]
    /// each); an accept error (other than "none left") ends the pass.
    fn take_data(&self, ctx: &Ctx) -> io::Result<()> {
        let _one = self.taking.lock().unwrap_or_else(|e| e.into_inner());
        for l in &self.data {
            for _ in 0..PASS_MOST {
                match l.accept() {
                    Ok((s, peer)) => self.data_connection(ctx, s, peer),
                    Err(e) if is_idle(&e) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Takes what the data listeners hold now. A stock sender asks to start as soon as its
    /// connections are established, which the kernel does before they are accepted: after
    /// this, every connection it opened before its 'R' is in its group.
    pub(crate) fn settle(&self, ctx: &Ctx) {
        let _ = self.take_data(ctx);
    }

    /// A data connection: it takes a handshake slot, then is kept for the group of its client
    /// if that group is gathering.
    fn data_connection(&self, ctx: &Ctx, s: TcpStream, peer: SocketAddr) {
        if !admit_peer(ctx, peer) {
            return;
        }
        let port = s.local_addr().map_or(0, |a| a.port());
        let slot = match ctx.admission.pending(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                return ctx.log_refusal_as(
                    peer,
                    "ntttcp",
                    &format!("ntttcp data port {port}: {why}"),
                )
            }
        };
        let conn = DataConn {
            stream: s,
            peer,
            port,
            _slot: slot,
        };
        if let Err((why, _closed)) = self.front.place(peer.ip(), conn) {
            ctx.log_refusal_as(peer, "ntttcp", &format!("ntttcp data port {port}: {why}"));
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

/// The access list, checked before any byte is read.
fn admit_peer(ctx: &Ctx, peer: SocketAddr) -> bool {
    if ctx.cfg.acl.permits(peer.ip()) {
        return true;
    }
    ctx.denied.fetch_add(1, Ordering::Relaxed);
    tracing::debug!("ntttcp: closed connection from {peer}: not allowed (--allow/--deny)");
    false
}

/// A data connection waiting for its test.
pub(crate) struct DataConn {
    pub(crate) stream: TcpStream,
    /// The sender's address.
    pub(crate) peer: SocketAddr,
    /// The port it came to.
    pub(crate) port: u16,
    /// Its handshake slot, given back when the test takes the connection (or it closes).
    _slot: Slot,
}
