//! The responsiveness server (`hakaru server --rpm-port PORT`, and the embedded endpoint of
//! `hakaru rpm` without a URL): the draft's four URLs over TLS, HTTP/2 or HTTP/1.1 as ALPN
//! picks.
//!
//! - `GET /.well-known/nq`: the configuration naming the three below on the host the client
//!   asked for;
//! - `GET /small`: 1 byte;
//! - `GET /large`: 8 GiB of zeros (generated, never read from disk), sent as the client's flow
//!   control allows;
//! - `POST /upload` (or PUT): the body is read and discarded, then 200.
//!
//! Limits ([`Limits`], docs/security.md): connections at once in total and per client, the
//! buffer memory they are counted at, a TLS handshake time, a time for the HTTP/2 preface and
//! each HTTP/1.1 request head, an idle time for a connection with no request in progress, a
//! stall time for any transfer that makes no progress and a lifetime per connection. A
//! request's body is read only on `/upload`, and released as it is read; every other
//! stream's is dropped unread at once, so HTTP/2 discards its DATA as it arrives.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::Digest;
use tokio::time::Instant;

use crate::conn::{Chunk, Io, NOTSENT_LOWAT, READ_BUFFER, SEND_BUFFER, TLS_BUFFER};
use crate::limits::{Admission, Place, CLOSE_GRACE, MAX_HEAD, RECV_WINDOW};
pub use crate::limits::{Limits, HANDSHAKE, IDLE, LIFETIME, STALL};
pub use crate::route::LARGE;
use crate::route::{nq_document, Route, ZEROS};
use crate::shallow::Shallow;

/// Streams per HTTP/2 connection at once.
const MAX_STREAMS: u32 = 128;
/// Streams the client reset before the server took them, waiting to be taken; more is a
/// connection error (h2's default is 20).
const PENDING_ACCEPT_RESETS: usize = 16;
/// Streams the server reset whose late frames it still recognises (h2's default is 50).
const RESET_STREAMS: usize = 32;
/// Streams reset for the client's protocol errors before the connection is closed with
/// ENHANCE_YOUR_CALM (h2's default is 1024).
const ERROR_RESETS: usize = 128;

/// What the port did, for `hakaru server --metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A connection was admitted.
    Accepted,
    /// A connection was closed at once: `rpm_limits`, `rpm_memory` or `acl`.
    Refused(&'static str),
}

/// Told every [`Event`].
pub type Events = Arc<dyn Fn(Event) + Send + Sync>;

/// Who may connect: `hakaru server`'s access list (`--allow`, `--deny`).
pub type Permit = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// Where the certificate comes from, who is served, and how the server sends.
#[derive(Clone, Default)]
pub struct ServerOptions {
    /// PEM files of the certificate chain and its key; `None` generates a self-signed one.
    pub files: Option<(String, String)>,
    /// Addresses not permitted are closed at once; `None` serves everyone.
    pub permit: Option<Permit>,
    /// TCP congestion control of every connection (the downloads' sender); `None` keeps the
    /// system's default.
    pub congestion: Option<String>,
    /// The port's bounds.
    pub limits: Limits,
    /// Told of admissions and refusals; `None` tells no one.
    pub events: Option<Events>,
}

/// A running server; dropping it stops it.
pub struct RpmServer {
    addr: SocketAddr,
    fingerprint: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RpmServer {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
    /// SHA-256 of the certificate, hex pairs with colons (as browsers and openssl print it).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

impl Drop for RpmServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The certificate chain and key: from the files, or a new self-signed one for `localhost`
/// and `names`.
fn certificate(
    opts: &ServerOptions,
    names: &[String],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    use rustls_pki_types::pem::PemObject;
    if let Some((cert, key)) = &opts.files {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| format!("--tls-cert {cert}: {e}"))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("--tls-cert {cert}: {e}"))?;
        if chain.is_empty() {
            return Err(format!("--tls-cert {cert}: no certificate in the file"));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--tls-key {key}: {e}"))?;
        return Ok((chain, key));
    }
    let mut all = vec!["localhost".to_string()];
    all.extend(names.iter().cloned());
    let ck = rcgen::generate_simple_self_signed(all)
        .map_err(|e| format!("generating a certificate: {e}"))?;
    let key = PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
    Ok((vec![ck.cert.der().clone()], key))
}

/// Binds `ip:port` and serves on a thread of its own.
pub fn start(ip: IpAddr, port: u16, opts: &ServerOptions) -> Result<RpmServer, String> {
    let (chain, key) = certificate(opts, &[ip.to_string()])?;
    let fingerprint = chain
        .first()
        .map(|c| {
            sha2::Sha256::digest(c.as_ref())
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<Vec<_>>()
                .join(":")
        })
        .unwrap_or_default();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("TLS certificate: {e}"))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // No session tickets: nothing resumes here, and a ticket sent as the handshake ends sits
    // in a full bottleneck queue when the first request arrives; the kernel's TCP small
    // queues then hold the answer until the ticket has left, so a foreign probe's GET would
    // take two passes through the queue instead of one.
    cfg.send_tls13_tickets = 0;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind(SocketAddr::new(ip, port))
        .map_err(|e| format!("--rpm-port {port}: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("--rpm-port {port}: {e}"))?;
    // Set on the listener first: a name the kernel does not have is refused at start, by name.
    if let Some(cc) = &opts.congestion {
        hakaru_sys::set_congestion(&socket2::SockRef::from(&listener), cc)
            .map_err(|e| format!("--rpm-congestion {cc}: {e}"))?;
    }
    let addr = listener
        .local_addr()
        .map_err(|e| format!("--rpm-port {port}: {e}"))?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let port = Port {
        acceptor,
        permit: opts.permit.clone(),
        congestion: opts.congestion.clone(),
        admission: Admission::new(opts.limits),
        head_timeout: opts.limits.head_timeout,
        events: opts.events.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("hakaru-rpm-port".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(
                    std::thread::available_parallelism()
                        .map_or(2, |n| n.get())
                        .min(8),
                )
                .thread_name("hakaru-rpm")
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("rpm port: starting the runtime: {e}");
                    return;
                }
            };
            rt.block_on(accept_loop(listener, port, rx));
            rt.shutdown_timeout(Duration::from_millis(200));
        })
        .map_err(|e| format!("starting the rpm port's thread: {e}"))?;
    Ok(RpmServer {
        addr,
        fingerprint,
        stop: Some(tx),
        thread: Some(thread),
    })
}

/// What the accept loop needs besides the listener.
struct Port {
    acceptor: tokio_rustls::TlsAcceptor,
    permit: Option<Permit>,
    congestion: Option<String>,
    admission: Arc<Admission>,
    head_timeout: Duration,
    events: Option<Events>,
}

impl Port {
    fn tell(&self, e: Event) {
        if let Some(f) = &self.events {
            f(e);
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    port: Port,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let mut refused = 0u64;
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        if port.permit.as_ref().is_some_and(|p| !p(peer.ip())) {
            port.tell(Event::Refused("acl"));
            continue;
        }
        let place = match port.admission.admit(peer.ip()) {
            Ok(p) => p,
            Err(why) => {
                port.tell(Event::Refused(why.reason()));
                refused += 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        "rpm port: refused {refused} connection(s) so far; the last from {}: {why}",
                        peer.ip()
                    );
                }
                continue;
            }
        };
        port.tell(Event::Accepted);
        let _ = tcp.set_nodelay(true);
        let sock = socket2::SockRef::from(&tcp);
        let _ = hakaru_sys::set_notsent_lowat(&sock, NOTSENT_LOWAT);
        if let Some(cc) = &port.congestion {
            // Accepted sockets may inherit it from the listener; set it where they do not.
            let _ = hakaru_sys::set_congestion(&sock, cc);
        }
        let local = tcp.local_addr().ok();
        let fd = hakaru_sys::AsRawFd::as_raw_fd(&tcp);
        let acceptor = port.acceptor.clone();
        let head_timeout = port.head_timeout;
        tokio::spawn(async move {
            let mut place = place;
            let tcp = tokio::io::BufReader::with_capacity(READ_BUFFER, tcp);
            let Ok(Ok(mut tls)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await
            else {
                return;
            };
            tls.get_mut().1.set_buffer_limit(Some(TLS_BUFFER));
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let (io, chunk) = Shallow::wrap(Box::new(tls), fd);
            let until = Instant::now() + LIFETIME;
            if h2 {
                let _ = serve_h2(io, chunk, local, head_timeout, until, &mut place).await;
            } else {
                let _ =
                    tokio::time::timeout_at(until, crate::http1::serve(io, local, head_timeout))
                        .await;
            }
        });
    }
}

/// The HTTP/2 server's settings: header lists as large as an HTTP/1.1 head may be, receive
/// windows of [`RECV_WINDOW`] (what a connection may make the server hold), and bounds on the
/// reset streams h2 keeps.
fn h2_builder() -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.initial_window_size(RECV_WINDOW)
        .initial_connection_window_size(RECV_WINDOW)
        .max_header_list_size(MAX_HEAD as u32)
        .max_concurrent_streams(MAX_STREAMS)
        .max_send_buffer_size(SEND_BUFFER)
        .max_pending_accept_reset_streams(PENDING_ACCEPT_RESETS)
        .max_concurrent_reset_streams(RESET_STREAMS)
        .max_local_error_reset_streams(Some(ERROR_RESETS));
    b
}

async fn serve_h2(
    io: Box<dyn Io>,
    chunk: Chunk,
    local: Option<SocketAddr>,
    head_timeout: Duration,
    until: Instant,
    place: &mut Place,
) -> Result<(), h2::Error> {
    // The client's preface and SETTINGS within the head timeout.
    let Ok(conn) = tokio::time::timeout(head_timeout, h2_builder().handshake(io)).await else {
        return Ok(());
    };
    let mut conn = conn?;
    let mut streams = tokio::task::JoinSet::new();
    let end = accept_h2(&mut conn, &mut streams, &chunk, local, until, place).await;
    // The streams' tasks, and their handles, end before the connection is dropped: h2 does
    // not expect streams still held when its connection goes (a debug assertion).
    streams.shutdown().await;
    drop(conn);
    end
}

/// Takes the connection's requests, each served by a task in `streams`, until the client
/// closes, nothing is in progress for [`IDLE`], or `until`. While nothing is in progress the
/// connection is idle in its `place`: told to close then (to make room for its client's new
/// connection, [`crate::limits`]), it sends GOAWAY and has [`CLOSE_GRACE`] to finish.
async fn accept_h2(
    conn: &mut h2::server::Connection<Box<dyn Io>, Bytes>,
    streams: &mut tokio::task::JoinSet<()>,
    chunk: &Chunk,
    local: Option<SocketAddr>,
    mut until: Instant,
    place: &mut Place,
) -> Result<(), h2::Error> {
    let closing = place.closing();
    let mut told = false;
    loop {
        while streams.try_join_next().is_some() {}
        place.set_idle(streams.is_empty());
        let idle_at = (Instant::now() + IDLE).min(until);
        let next = tokio::select! {
            n = conn.accept() => n,
            // A stream ended: the connection may be idle now.
            Some(_) = streams.join_next(), if !streams.is_empty() => continue,
            () = closing.wait(), if !told => {
                told = true;
                until = until.min(Instant::now() + CLOSE_GRACE);
                conn.graceful_shutdown();
                continue;
            }
            () = tokio::time::sleep_until(idle_at) => {
                if Instant::now() >= until || streams.is_empty() {
                    return Ok(());
                }
                // Idle only if nothing is in progress; a long download keeps it open.
                continue;
            }
        };
        let Some(r) = next else { return Ok(()) };
        place.set_idle(false);
        let (req, respond) = r?;
        // Only an upload's body is read; any other is dropped here, unread: h2 then discards
        // what it had buffered and whatever DATA still comes for the stream, giving the
        // connection's window back as it goes (and, once the answer is sent, resets the
        // stream with NO_ERROR to tell the client to stop).
        let (parts, body) = req.into_parts();
        let route = crate::route::route(parts.method.as_str(), parts.uri.path());
        let body = if route.reads_body() {
            Some(body)
        } else {
            drop(body);
            None
        };
        let authority = match route {
            Route::Config => parts.uri.authority().map(|a| a.to_string()),
            _ => None,
        };
        drop(parts);
        let chunk = chunk.clone();
        streams.spawn(async move {
            let _ = h2_request(route, authority, body, respond, &chunk, local).await;
        });
    }
}

fn head(status: u16, len: Option<u64>, json: bool) -> http::Response<()> {
    let mut r = http::Response::new(());
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    let ty = if json {
        "application/json"
    } else {
        "application/octet-stream"
    };
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ty),
    );
    if let Some(n) = len {
        r.headers_mut()
            .insert(http::header::CONTENT_LENGTH, n.into());
    }
    r
}

async fn h2_request(
    route: Route,
    authority: Option<String>,
    body: Option<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    chunk: &Chunk,
    local: Option<SocketAddr>,
) -> Result<(), h2::Error> {
    match (route, body) {
        (Route::Config, _) => {
            let doc = nq_document(authority.as_deref(), local);
            let mut s = respond.send_response(head(200, Some(doc.len() as u64), true), false)?;
            s.send_data(Bytes::from(doc), true)
        }
        (Route::Small, _) => {
            let mut s = respond.send_response(head(200, Some(1), false), false)?;
            s.send_data(Bytes::from_static(b"x"), true)
        }
        (Route::Large, _) => {
            let s = respond.send_response(head(200, Some(LARGE), false), false)?;
            send_large(s, chunk).await
        }
        (Route::Upload, Some(body)) => {
            if !discard(body).await? {
                respond.send_reset(h2::Reason::CANCEL);
                return Ok(());
            }
            respond
                .send_response(head(200, Some(0), false), true)
                .map(|_| ())
        }
        (Route::MethodNotAllowed, _) => respond
            .send_response(head(405, Some(0), false), true)
            .map(|_| ()),
        _ => respond
            .send_response(head(404, Some(0), false), true)
            .map(|_| ()),
    }
}

/// Sends `/large` as the client's flow control allows; a stream that takes nothing for
/// [`STALL`] is reset.
async fn send_large(mut s: h2::SendStream<Bytes>, chunk: &Chunk) -> Result<(), h2::Error> {
    let mut left = LARGE;
    while left > 0 {
        s.reserve_capacity(chunk.ahead(SEND_BUFFER).min(left as usize));
        let cap = match tokio::time::timeout(STALL, std::future::poll_fn(|cx| s.poll_capacity(cx)))
            .await
        {
            Ok(Some(Ok(n))) => n.min(chunk.ahead(SEND_BUFFER)),
            Ok(Some(Err(e))) => return Err(e),
            Ok(None) => return Ok(()),
            Err(_) => {
                s.send_reset(h2::Reason::CANCEL);
                return Ok(());
            }
        };
        left -= cap as u64;
        crate::conn::send_frames(&mut s, &ZEROS, cap, chunk, left == 0)?;
    }
    Ok(())
}

/// Reads an upload's body to its end, releasing the window as each piece arrives; `false`
/// when nothing came for [`STALL`].
async fn discard(mut body: h2::RecvStream) -> Result<bool, h2::Error> {
    loop {
        match tokio::time::timeout(STALL, body.data()).await {
            Ok(Some(Ok(chunk))) => {
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            Ok(None) => return Ok(true),
            Ok(Some(Err(e))) => return Err(e),
            Err(_) => return Ok(false),
        }
    }
}
