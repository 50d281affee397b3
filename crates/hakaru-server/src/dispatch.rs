//! First contact: read a new connection's first bytes and hand it to the right handler.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_proto::preamble::{classify, Preamble};
use hakaru_proto::{Decoder, Message};

use crate::limits::Slot;
use crate::registry::{DataConn, Undelivered};
use crate::{session, Ctx};

/// How long a new connection has to say what it is.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);

/// Decrements a counter when dropped, however the thread ends.
pub(crate) struct CountGuard<'a>(pub &'a std::sync::atomic::AtomicUsize);

impl Drop for CountGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts a thread for a freshly accepted connection.
/// `seq` is the connection's place in accept order.
pub(crate) fn spawn(ctx: Arc<Ctx>, mut stream: TcpStream, peer: SocketAddr, seq: u32) {
    let slot = match ctx.admission.pending(peer.ip()) {
        Ok(s) => s,
        Err(why) => {
            ctx.log_refusal(peer, &why);
            // Said without waiting: a hakaru client reads it as the server's error, where
            // a silent close would read as "not a hakaru server".
            let _ = stream.set_nonblocking(true);
            let _ = std::io::Write::write_all(&mut stream, &error_frame(&why));
            return;
        }
    };
    ctx.threads.fetch_add(1, Ordering::AcqRel);
    let c = Arc::clone(&ctx);
    let r = std::thread::Builder::new()
        .name("hakaru-conn".into())
        .stack_size(512 << 10)
        .spawn(move || {
            let _t = CountGuard(&c.threads);
            handle(&c, stream, peer, seq, slot);
        });
    if let Err(e) = r {
        ctx.threads.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!("could not start a thread for {peer}: {e}");
    }
}

/// The bytes that tell a hakaru peer why it is turned away: the magic, then an error frame.
fn error_frame(why: &str) -> Vec<u8> {
    let mut out = hakaru_proto::MAGIC.to_vec();
    out.extend(
        Message::Error {
            message: why.to_string(),
        }
        .encode(),
    );
    out
}

fn handle(ctx: &Ctx, mut stream: TcpStream, peer: SocketAddr, seq: u32, slot: Slot) {
    let deadline = Instant::now() + FIRST_BYTES_TIMEOUT;
    let Some((kind, mut first)) = first_bytes(ctx, &mut stream, peer, deadline) else {
        return;
    };
    match kind {
        Preamble::Hakaru => ctx.metrics.connection("hakaru"),
        Preamble::Iperf3Cookie if !ctx.cfg.iperf3 => {
            ctx.metrics.refused("iperf3_off");
            ctx.log.warn("iperf3_off", || format!(
                "closed connection from {peer}: an iperf3 client, and iperf3 clients are off (they cannot authenticate; --iperf3 allow turns them on)"
            ));
            // A stock client reads this as "the server is busy", its only refusal.
            let _ = std::io::Write::write_all(
                &mut stream,
                &[hakaru_proto::iperf3::State::AccessDenied.byte()],
            );
            return;
        }
        Preamble::Iperf3Cookie => {
            if iperf3_cookie(ctx, &mut stream, peer, &mut first, deadline) {
                ctx.metrics.connection("iperf3");
                crate::iperf3::accept(ctx, stream, peer, first, seq, slot);
            }
            return;
        }
        Preamble::Unknown => {
            ctx.metrics.refused("not_a_client");
            ctx.log.warn("not_a_client", || {
                format!(
                    "rejected connection from {peer}: not a hakaru client (first bytes {:02x?})",
                    first.get(..8).unwrap_or(&first)
                )
            });
            return;
        }
    }
    native(ctx, stream, peer, &first, deadline, slot);
}

/// Reads until the first bytes say which client this is; `None` when the connection closes
/// or fails, or (logged) says nothing recognisable by `deadline`.
fn first_bytes(
    ctx: &Ctx,
    stream: &mut TcpStream,
    peer: SocketAddr,
    deadline: Instant,
) -> Option<(Preamble, Vec<u8>)> {
    let mut first = Vec::with_capacity(64);
    let mut buf = [0u8; 4096];
    loop {
        if let Some(k) = classify(&first) {
            return Some((k, first));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || ctx.shutdown.load(Ordering::Acquire) {
            ctx.log.info("silent", || {
                format!("closed connection from {peer}: it sent nothing recognisable within 10 s")
            });
            return None;
        }
        let n = read_some(stream, &mut buf, left.min(Duration::from_millis(500)))?;
        first.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
}

/// Completes an iperf3 client's cookie in `first`; false (logged) when it does not come by
/// `deadline`.
fn iperf3_cookie(
    ctx: &Ctx,
    stream: &mut TcpStream,
    peer: SocketAddr,
    first: &mut Vec<u8>,
    deadline: Instant,
) -> bool {
    let mut buf = [0u8; hakaru_proto::iperf3::COOKIE_LEN];
    while first.len() < hakaru_proto::iperf3::COOKIE_LEN {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || ctx.shutdown.load(Ordering::Acquire) {
            ctx.log.info("silent", || {
                format!("closed connection from {peer}: no complete iperf3 cookie within 10 s")
            });
            return false;
        }
        let want = hakaru_proto::iperf3::COOKIE_LEN - first.len();
        let Some(n) = read_some(stream, buf.get_mut(..want).unwrap_or_default(), left) else {
            return false;
        };
        first.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    true
}

/// A hakaru client: its first frame says whether this is a control or a data connection.
fn native(
    ctx: &Ctx,
    mut stream: TcpStream,
    peer: SocketAddr,
    first: &[u8],
    deadline: Instant,
    slot: Slot,
) {
    let mut buf = [0u8; 4096];
    let mut dec = Decoder::with_max(hakaru_proto::native::MAX_FIRST_FRAMES);
    dec.feed(first);
    let msg = loop {
        match dec.next_message() {
            Ok(Some(m)) => break m,
            Ok(None) => {}
            Err(e) => {
                reject(ctx, &mut stream, peer, &e.to_string());
                return;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            ctx.log.info("silent", || {
                format!("closed connection from {peer}: no complete hello within 10 s")
            });
            return;
        }
        match read_some(&mut stream, &mut buf, left) {
            Some(n) => dec.feed(buf.get(..n).unwrap_or_default()),
            None => return,
        }
    };
    match msg {
        Message::Hello {
            protocol,
            software,
            host,
            nonce,
        } => {
            session::control(
                ctx,
                session::Opening {
                    stream,
                    dec,
                    peer,
                    protocol,
                    software,
                    host,
                    nonce,
                    slot,
                },
            );
        }
        Message::DataHello { token, flow } => {
            let early = dec.take_buffered();
            let _ = stream.set_read_timeout(None);
            if let Err((why, DataConn::Tcp(_, mut stream, _))) =
                ctx.registry
                    .deliver(&token, peer.ip(), DataConn::Tcp(flow, stream, early))
            {
                let why = match why {
                    Undelivered::UnknownToken => {
                        "a data connection for no test collecting its data connections (unknown or retired token)".to_string()
                    }
                    Undelivered::WrongPeer(_) => "a data connection from an address that is not the test's client".to_string(),
                    Undelivered::Full(n) => format!("a data connection beyond its test's {n} flow(s)"),
                    Undelivered::QueueFull => "a data connection while its test's queue is full of repeated UDP hellos".to_string(),
                };
                ctx.log_refusal_as(peer, "data_path", &why);
                let _ = stream.set_nonblocking(true);
                let _ = std::io::Write::write_all(&mut stream, &error_frame(&why));
            }
        }
        other => reject(
            ctx,
            &mut stream,
            peer,
            &format!("expected hello or data_hello first, got {}", other.name()),
        ),
    }
}

/// Reads what arrives within `wait`: `Some(0)` on a timeout, `None` once the peer is gone.
fn read_some(stream: &mut TcpStream, buf: &mut [u8], wait: Duration) -> Option<usize> {
    let _ = stream.set_read_timeout(Some(wait));
    match stream.read(buf) {
        Ok(0) => None,
        Ok(n) => Some(n),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Some(0)
        }
        Err(_) => None,
    }
}

fn reject(ctx: &Ctx, stream: &mut TcpStream, peer: SocketAddr, why: &str) {
    use std::io::Write;
    ctx.log.warn("rejected", || {
        format!("rejected connection from {peer}: {why}")
    });
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = stream.write_all(&error_frame(why));
}
