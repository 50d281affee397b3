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
//! Limits: connections at once in total and per address, a TLS handshake time, an idle time
//! for a connection with no request in progress, a stall time for any transfer that makes no
//! progress and a lifetime per connection (docs/security.md).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conn::{
    Io, CONN_WINDOW, NOTSENT_LOWAT, READ_BUFFER, SEND_BUFFER, STREAM_WINDOW, TLS_BUFFER,
};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// Connections one address may hold at once (load connections, probes in flight).
pub const MAX_PER_ADDRESS: usize = 192;
/// Longest TLS handshake.
pub const HANDSHAKE: Duration = Duration::from_secs(10);
/// A connection with no request in progress is closed after this long.
pub const IDLE: Duration = Duration::from_secs(30);
/// A transfer that moves nothing for this long is reset.
pub const STALL: Duration = Duration::from_secs(30);
/// Longest a connection lives.
pub const LIFETIME: Duration = Duration::from_secs(600);
/// Size of `/large`.
pub const LARGE: u64 = 8 << 30;
/// Streams per HTTP/2 connection at once.
const MAX_STREAMS: u32 = 128;
/// Bytes per write.
const CHUNK: usize = 256 << 10;
/// Largest HTTP/1.1 request head.
const MAX_HEAD: usize = 16 << 10;

static ZEROS: [u8; CHUNK] = [0u8; CHUNK];

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
        hakaru_engine::sys::set_congestion(&socket2::SockRef::from(&listener), cc)
            .map_err(|e| format!("--rpm-congestion {cc}: {e}"))?;
    }
    let congestion = opts.congestion.clone();
    let addr = listener
        .local_addr()
        .map_err(|e| format!("--rpm-port {port}: {e}"))?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let permit = opts.permit.clone();
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
            rt.block_on(accept_loop(listener, acceptor, permit, congestion, rx));
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

/// Connections held per address and in total.
#[derive(Default)]
struct Held {
    per: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
}

/// Releases a connection's place when dropped.
struct Place(Arc<Held>, IpAddr);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.total.fetch_sub(1, Ordering::Relaxed);
        if let Ok(mut m) = self.0.per.lock() {
            if let Some(n) = m.get_mut(&self.1) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.1);
                }
            }
        }
    }
}

fn admit(held: &Arc<Held>, ip: IpAddr) -> Option<Place> {
    let mut m = held.per.lock().ok()?;
    let n = m.entry(ip).or_insert(0);
    if *n >= MAX_PER_ADDRESS || held.total.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
        return None;
    }
    *n += 1;
    held.total.fetch_add(1, Ordering::Relaxed);
    Some(Place(Arc::clone(held), ip))
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    permit: Option<Permit>,
    congestion: Option<String>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let held = Arc::new(Held::default());
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
        if permit.as_ref().is_some_and(|p| !p(peer.ip())) {
            continue;
        }
        let Some(place) = admit(&held, peer.ip()) else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    "rpm port: refused {refused} connection(s) over the limits (last from {})",
                    peer.ip()
                );
            }
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let sock = socket2::SockRef::from(&tcp);
        let _ = hakaru_engine::sys::set_notsent_lowat(&sock, NOTSENT_LOWAT);
        if let Some(cc) = &congestion {
            // Accepted sockets may inherit it from the listener; set it where they do not.
            let _ = hakaru_engine::sys::set_congestion(&sock, cc);
        }
        let local = tcp.local_addr().ok();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _place = place;
            let tcp = tokio::io::BufReader::with_capacity(READ_BUFFER, tcp);
            let Ok(Ok(mut tls)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await
            else {
                return;
            };
            tls.get_mut().1.set_buffer_limit(Some(TLS_BUFFER));
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let io: Box<dyn Io> = Box::new(tls);
            let _ = tokio::time::timeout(LIFETIME, async {
                if h2 {
                    let _ = serve_h2(io, local).await;
                } else {
                    let _ = serve_h1(io, local).await;
                }
            })
            .await;
        });
    }
}

/// The configuration for a request that named `authority` (or the local address).
fn nq_document(authority: Option<&str>, local: Option<SocketAddr>) -> String {
    let ok = |a: &&str| {
        !a.is_empty()
            && a.len() < 256
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
    };
    let host = match (authority.filter(ok), local) {
        (Some(a), _) => a.to_string(),
        (None, Some(l)) => l.to_string(),
        (None, None) => "localhost".into(),
    };
    crate::config::document(&format!("https://{host}"))
}

async fn serve_h2(io: Box<dyn Io>, local: Option<SocketAddr>) -> Result<(), h2::Error> {
    let mut conn = h2::server::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_concurrent_streams(MAX_STREAMS)
        .max_send_buffer_size(SEND_BUFFER)
        .handshake(io)
        .await?;
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let next = match tokio::time::timeout(IDLE, conn.accept()).await {
            Ok(n) => n,
            // Idle only if nothing is in progress; a long download keeps it open.
            Err(_) if active.load(Ordering::Relaxed) == 0 => return Ok(()),
            Err(_) => continue,
        };
        let Some(r) = next else { return Ok(()) };
        let (req, respond) = r?;
        let active = Arc::clone(&active);
        active.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _ = h2_request(req, respond, local).await;
            active.fetch_sub(1, Ordering::Relaxed);
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
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    local: Option<SocketAddr>,
) -> Result<(), h2::Error> {
    let path = req.uri().path().to_string();
    let get = req.method() == http::Method::GET;
    let upload = req.method() == http::Method::POST || req.method() == http::Method::PUT;
    match (path.as_str(), get, upload) {
        ("/.well-known/nq", true, _) => {
            let doc = nq_document(req.uri().authority().map(|a| a.as_str()), local);
            let mut s = respond.send_response(head(200, Some(doc.len() as u64), true), false)?;
            s.send_data(Bytes::from(doc), true)
        }
        ("/small", true, _) => {
            let mut s = respond.send_response(head(200, Some(1), false), false)?;
            s.send_data(Bytes::from_static(b"x"), true)
        }
        ("/large", true, _) => {
            let mut s = respond.send_response(head(200, Some(LARGE), false), false)?;
            let mut left = LARGE;
            while left > 0 {
                s.reserve_capacity(SEND_BUFFER.min(left as usize));
                let cap = match tokio::time::timeout(
                    STALL,
                    std::future::poll_fn(|cx| s.poll_capacity(cx)),
                )
                .await
                {
                    Ok(Some(Ok(n))) => n.min(SEND_BUFFER),
                    Ok(Some(Err(e))) => return Err(e),
                    Ok(None) => return Ok(()),
                    Err(_) => {
                        s.send_reset(h2::Reason::CANCEL);
                        return Ok(());
                    }
                };
                left -= cap as u64;
                crate::conn::send_frames(&mut s, &ZEROS, cap, left == 0)?;
            }
            Ok(())
        }
        ("/upload", _, true) => {
            let mut body = req.into_body();
            loop {
                match tokio::time::timeout(STALL, body.data()).await {
                    Ok(Some(Ok(chunk))) => {
                        let _ = body.flow_control().release_capacity(chunk.len());
                    }
                    Ok(None) => break,
                    Ok(Some(Err(e))) => return Err(e),
                    Err(_) => {
                        respond.send_reset(h2::Reason::CANCEL);
                        return Ok(());
                    }
                }
            }
            respond
                .send_response(head(200, Some(0), false), true)
                .map(|_| ())
        }
        ("/.well-known/nq" | "/small" | "/large" | "/upload", _, _) => respond
            .send_response(head(405, Some(0), false), true)
            .map(|_| ()),
        _ => respond
            .send_response(head(404, Some(0), false), true)
            .map(|_| ()),
    }
}

/// HTTP/1.1 (a client that did not offer h2): the same four URLs, one request at a time.
async fn serve_h1(mut io: Box<dyn Io>, local: Option<SocketAddr>) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut tmp = vec![0u8; CHUNK];
    loop {
        // The head, within the idle time.
        let (method, path, host, len) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let find = |name: &str| {
                    req.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .and_then(|h| std::str::from_utf8(h.value).ok())
                        .map(str::to_string)
                };
                let len: u64 = find("content-length")
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let r = (
                    req.method.unwrap_or("").to_string(),
                    req.path.unwrap_or("/").to_string(),
                    find("host"),
                    len,
                );
                buf.drain(..n);
                break r;
            }
            if buf.len() > MAX_HEAD {
                return Ok(());
            }
            let n = match tokio::time::timeout(IDLE, io.read(&mut tmp)).await {
                Ok(r) => r?,
                Err(_) => return Ok(()),
            };
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(tmp.get(..n).unwrap_or_default());
        };
        let path = path.split('?').next().unwrap_or("/").to_string();
        let reply = |status: &str, ty: &str, len: u64| {
            format!("HTTP/1.1 {status}\r\nContent-Type: {ty}\r\nContent-Length: {len}\r\n\r\n")
        };
        match (method.as_str(), path.as_str()) {
            ("GET", "/.well-known/nq") => {
                let doc = nq_document(host.as_deref(), local);
                io.write_all(reply("200 OK", "application/json", doc.len() as u64).as_bytes())
                    .await?;
                io.write_all(doc.as_bytes()).await?;
            }
            ("GET", "/small") => {
                io.write_all(reply("200 OK", "application/octet-stream", 1).as_bytes())
                    .await?;
                io.write_all(b"x").await?;
            }
            ("GET", "/large") => {
                io.write_all(reply("200 OK", "application/octet-stream", LARGE).as_bytes())
                    .await?;
                let mut left = LARGE;
                while left > 0 {
                    let n = CHUNK.min(left as usize);
                    match tokio::time::timeout(STALL, io.write(ZEROS.get(..n).unwrap_or_default()))
                        .await
                    {
                        Ok(Ok(w)) if w > 0 => left -= w as u64,
                        _ => return Ok(()),
                    }
                }
            }
            ("POST" | "PUT", "/upload") => {
                let mut left = len.saturating_sub(buf.len() as u64);
                buf.clear();
                while left > 0 {
                    let n = match tokio::time::timeout(STALL, io.read(&mut tmp)).await {
                        Ok(Ok(n)) if n > 0 => n,
                        _ => return Ok(()),
                    };
                    left = left.saturating_sub(n as u64);
                }
                io.write_all(reply("200 OK", "application/octet-stream", 0).as_bytes())
                    .await?;
            }
            _ => {
                io.write_all(reply("404 Not Found", "text/plain", 0).as_bytes())
                    .await?;
            }
        }
        io.flush().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_names_the_asked_host_or_the_local_address() {
        let d = nq_document(Some("example.com:4443"), None);
        let c = crate::config::parse(d.as_bytes()).unwrap();
        assert_eq!(c.large.url(), "https://example.com:4443/large");
        let local: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let d = nq_document(Some("evil\"},{\"x"), Some(local));
        let c = crate::config::parse(d.as_bytes()).unwrap();
        assert_eq!(c.small.url(), "https://127.0.0.1:9/small");
    }

    #[test]
    fn places_are_limited_per_address_and_given_back() {
        let held = Arc::new(Held::default());
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let places: Vec<Place> = (0..MAX_PER_ADDRESS)
            .map(|_| admit(&held, ip).unwrap())
            .collect();
        assert!(admit(&held, ip).is_none());
        assert!(admit(&held, "192.0.2.2".parse().unwrap()).is_some());
        drop(places);
        assert!(admit(&held, ip).is_some());
        assert_eq!(held.total.load(Ordering::Relaxed), 0);
    }
}
