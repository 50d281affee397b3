//! Opening a connection to the test server, timed as the foreign probes need it: the TCP
//! handshake, then the TLS handshake (divided by its round trips: one for TLS 1.3, two for
//! TLS 1.2), then HTTP/2 over it, or HTTP/1.1 with `--http1`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::shallow::Shallow;
pub use crate::shallow::{Chunk, Io};

/// Stream window of every HTTP/2 stream, both ends: a download or upload on one stream must
/// not be limited by flow control below what TCP carries.
pub const STREAM_WINDOW: u32 = 8 << 20;
/// Connection window.
pub const CONN_WINDOW: u32 = 32 << 20;
/// Unsent bytes a socket may hold (TCP_NOTSENT_LOWAT) from its first byte, through the TLS
/// handshake; a load connection's own mark then follows its rate ([`crate::shallow`]).
pub const NOTSENT_LOWAT: u32 = 16 << 10;
/// Bytes HTTP/2 buffers per stream before it asks the load for more. HTTP/2 sends the streams'
/// buffered frames in turn, one frame each, so a probe's answer on another stream waits
/// behind one frame of this, not all of it.
pub const SEND_BUFFER: usize = 256 << 10;
/// Sends `n` bytes of `ZEROS` on `s` as DATA frames of the connection's [`Chunk::frame`]
/// bytes (with the frame's 9-byte header, one write and one TLS record: a frame of a full
/// 16 KiB would spill 9 bytes into a record and a write of their own, half the bytes per
/// system call), the last one ending the stream when `end`.
pub fn send_frames(
    s: &mut h2::SendStream<Bytes>,
    zeros: &'static [u8],
    n: usize,
    chunk: &Chunk,
    end: bool,
) -> Result<(), h2::Error> {
    let mut left = n;
    let frame = chunk.frame();
    while left > 0 {
        let k = left.min(frame).min(zeros.len());
        left -= k;
        s.send_data(Bytes::from_static(zeros).slice(..k), end && left == 0)?;
    }
    Ok(())
}
/// TLS records rustls may hold unsent, each end (its default is 64 KiB).
pub const TLS_BUFFER: usize = 16 << 10;
/// Bytes one receive call may take from the socket. rustls asks for 4 KiB at a time, which at
/// Gbit/s rates is a system call per few KiB; TLS reads from this buffer instead (the engine's
/// HTTPS client does the same, docs/BENCHMARKS.md).
pub const READ_BUFFER: usize = 256 << 10;
/// Most bytes of a response head (HTTP/1.1).
const MAX_HEAD: usize = 16 << 10;

/// How to reach the server.
#[derive(Clone)]
pub struct Dialer {
    /// The address connected to.
    pub addr: SocketAddr,
    /// `host[:port]` for the requests' authority and the TLS server name.
    pub host: String,
    /// The authority (`host:port`) of requests.
    pub authority: String,
    /// TLS, when the URLs are https.
    pub tls: Option<(
        tokio_rustls::TlsConnector,
        rustls_pki_types::ServerName<'static>,
    )>,
    /// HTTP/1.1 instead of HTTP/2.
    pub http1: bool,
    /// How long the handshakes may take.
    pub timeout: Duration,
    /// TCP congestion control of every connection, when asked for (`-C`).
    pub congestion: Option<String>,
}

/// A connection's handshake times, ms.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handshakes {
    /// TCP connect.
    pub tcp_ms: f64,
    /// TLS handshake per round trip.
    pub tls_ms: Option<f64>,
}

/// An open connection.
pub struct Opened {
    /// The stream.
    pub io: Box<dyn Io>,
    /// Its handshake times.
    pub times: Handshakes,
    /// TLS version and suite.
    pub tls: Option<String>,
    /// The socket's descriptor (for TCP_INFO).
    pub fd: hakaru_sys::RawFd,
    /// The load's frame size on this connection ([`crate::shallow`]).
    pub chunk: Chunk,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Dialer {
    /// A TLS connector for `http1` or h2, from a client configuration.
    pub fn connector(cfg: &Arc<rustls::ClientConfig>, http1: bool) -> tokio_rustls::TlsConnector {
        let mut cfg = (**cfg).clone();
        // Every connection is a new one with a full handshake, as the draft's foreign probes
        // are: a resumed TLS 1.2 session would take one round trip where a new one takes two.
        cfg.resumption = rustls::client::Resumption::disabled();
        cfg.alpn_protocols = vec![if http1 {
            b"http/1.1".to_vec()
        } else {
            b"h2".to_vec()
        }];
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
    }

    /// Connects and handshakes, timed.
    pub async fn open(&self) -> Result<Opened, String> {
        use hakaru_sys::AsRawFd;
        let t0 = Instant::now();
        let tcp = tokio::time::timeout(self.timeout, TcpStream::connect(self.addr))
            .await
            .map_err(|_| {
                format!(
                    "connecting to {}: no answer in {:?}",
                    self.addr, self.timeout
                )
            })?
            .map_err(|e| format!("connecting to {}: {e}", self.addr))?;
        let tcp_ms = ms(t0.elapsed());
        let _ = tcp.set_nodelay(true);
        let sock = socket2::SockRef::from(&tcp);
        let _ = hakaru_sys::set_notsent_lowat(&sock, NOTSENT_LOWAT);
        if let Some(cc) = &self.congestion {
            // Before any data; the handshake does not depend on it. Refused, not ignored.
            hakaru_sys::set_congestion(&sock, cc).map_err(|e| format!("-C {cc}: {e}"))?;
        }
        let fd = tcp.as_raw_fd();
        let Some((connector, name)) = &self.tls else {
            let (io, chunk) = Shallow::wrap(Box::new(tcp), fd);
            return Ok(Opened {
                io,
                times: Handshakes {
                    tcp_ms,
                    tls_ms: None,
                },
                tls: None,
                fd,
                chunk,
            });
        };
        let t1 = Instant::now();
        let tcp = tokio::io::BufReader::with_capacity(READ_BUFFER, tcp);
        let tls = tokio::time::timeout(self.timeout, connector.connect(name.clone(), tcp))
            .await
            .map_err(|_| format!("TLS with {}: no handshake in {:?}", self.host, self.timeout))?
            .map_err(|e| format!("TLS with {}: {e}", self.host))?;
        let took = ms(t1.elapsed());
        let mut tls = tls;
        tls.get_mut().1.set_buffer_limit(Some(TLS_BUFFER));
        let (_, session) = tls.get_ref();
        let v = session.protocol_version();
        let rtts = tls_round_trips(v, session.handshake_kind());
        let desc = format!(
            "{} {}",
            v.map(|v| format!("{v:?}")).unwrap_or_default(),
            session
                .negotiated_cipher_suite()
                .map(|s| format!("{:?}", s.suite()))
                .unwrap_or_default()
        );
        if !self.http1 && session.alpn_protocol() != Some(b"h2") {
            return Err(format!(
                "{} did not agree to HTTP/2 (ALPN); --http1 tests over HTTP/1.1",
                self.host
            ));
        }
        let (io, chunk) = Shallow::wrap(Box::new(tls), fd);
        Ok(Opened {
            io,
            times: Handshakes {
                tcp_ms,
                tls_ms: Some(took / rtts),
            },
            tls: Some(desc),
            fd,
            chunk,
        })
    }
}

/// Round trips a TLS handshake took: TLS 1.3 one (two after a HelloRetryRequest), TLS 1.2
/// two (one when resumed).
fn tls_round_trips(
    version: Option<rustls::ProtocolVersion>,
    kind: Option<rustls::HandshakeKind>,
) -> f64 {
    use rustls::HandshakeKind::{FullWithHelloRetryRequest, Resumed};
    match (version, kind) {
        (Some(rustls::ProtocolVersion::TLSv1_2), Some(Resumed)) => 1.0,
        (Some(rustls::ProtocolVersion::TLSv1_2), _) => 2.0,
        (_, Some(FullWithHelloRetryRequest)) => 2.0,
        _ => 1.0,
    }
}

/// An HTTP/2 client over `io`, its connection driven by a task of its own.
pub async fn h2_client(io: Box<dyn Io>) -> Result<h2::client::SendRequest<Bytes>, String> {
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .handshake(io)
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// A request for `path` on `d`'s server.
pub fn request(d: &Dialer, method: http::Method, path: &str) -> http::Request<()> {
    let scheme = if d.tls.is_some() { "https" } else { "http" };
    let mut r = http::Request::new(());
    *r.method_mut() = method;
    *r.uri_mut() = format!("{scheme}://{}{path}", d.authority)
        .parse()
        .unwrap_or_default();
    r.headers_mut().insert(
        http::header::ACCEPT_ENCODING,
        http::HeaderValue::from_static("identity"),
    );
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/octet-stream"),
    );
    r
}

/// GET `path` over HTTP/2 and read the whole body; the body's length.
pub async fn h2_get(
    send: &mut h2::client::SendRequest<Bytes>,
    req: http::Request<()>,
) -> Result<Vec<u8>, String> {
    let mut ready = send
        .clone()
        .ready()
        .await
        .map_err(|e| format!("HTTP/2: {e}"))?;
    let (resp, _) = ready
        .send_request(req, true)
        .map_err(|e| format!("HTTP/2 request: {e}"))?;
    let resp = resp.await.map_err(|e| format!("HTTP/2 response: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("the server answered {}", resp.status()));
    }
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| format!("HTTP/2 body: {e}"))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if out.len() < crate::config::MAX_CONFIG + 1 {
            out.extend_from_slice(&chunk);
        }
    }
    Ok(out)
}

/// The head of an HTTP/1.1 response: status and content length.
pub async fn h1_head(
    io: &mut Box<dyn Io>,
    buf: &mut Vec<u8>,
) -> Result<(u16, Option<u64>), String> {
    buf.clear();
    let mut tmp = [0u8; 4096];
    loop {
        let n = io
            .read(&mut tmp)
            .await
            .map_err(|e| format!("HTTP/1.1: {e}"))?;
        if n == 0 {
            return Err("HTTP/1.1: the server closed before a response".into());
        }
        buf.extend_from_slice(tmp.get(..n).unwrap_or_default());
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(buf) {
            Ok(httparse::Status::Complete(len)) => {
                let status = resp.code.unwrap_or(0);
                let cl = resp
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok());
                buf.drain(..len);
                return Ok((status, cl));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Err("HTTP/1.1: response head too long".into()),
            Err(e) => return Err(format!("HTTP/1.1: bad response head: {e}")),
        }
    }
}

/// An HTTP/1.1 request head.
pub fn h1_request(d: &Dialer, method: &str, path: &str, body: Option<u64>) -> Vec<u8> {
    let mut h = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept-Encoding: identity\r\nUser-Agent: hakaru\r\n",
        d.authority
    );
    if let Some(n) = body {
        h += &format!("Content-Type: application/octet-stream\r\nContent-Length: {n}\r\n");
    }
    h += "\r\n";
    h.into_bytes()
}

/// GET over HTTP/1.1 on `io` and read a body of its content length (at most `cap` kept).
pub async fn h1_get(d: &Dialer, io: &mut Box<dyn Io>, path: &str) -> Result<Vec<u8>, String> {
    io.write_all(&h1_request(d, "GET", path, None))
        .await
        .map_err(|e| format!("HTTP/1.1: {e}"))?;
    let mut buf = Vec::new();
    let (status, len) = h1_head(io, &mut buf).await?;
    if !(200..300).contains(&status) {
        return Err(format!("the server answered {status}"));
    }
    let len = len.ok_or("HTTP/1.1: a response without Content-Length")?;
    if len > crate::config::MAX_CONFIG as u64 {
        return Err(format!(
            "HTTP/1.1: a {len}-byte answer where a small one was due"
        ));
    }
    let mut tmp = [0u8; 4096];
    while (buf.len() as u64) < len {
        let n = io
            .read(&mut tmp)
            .await
            .map_err(|e| format!("HTTP/1.1: {e}"))?;
        if n == 0 {
            return Err("HTTP/1.1: the body was cut short".into());
        }
        buf.extend_from_slice(tmp.get(..n).unwrap_or_default());
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::HandshakeKind::{Full, FullWithHelloRetryRequest, Resumed};
    use rustls::ProtocolVersion::{TLSv1_2, TLSv1_3};

    #[test]
    fn a_handshake_counts_the_round_trips_it_took() {
        assert_eq!(tls_round_trips(Some(TLSv1_3), Some(Full)), 1.0);
        assert_eq!(
            tls_round_trips(Some(TLSv1_3), Some(FullWithHelloRetryRequest)),
            2.0
        );
        assert_eq!(tls_round_trips(Some(TLSv1_2), Some(Full)), 2.0);
        assert_eq!(tls_round_trips(Some(TLSv1_2), Some(Resumed)), 1.0);
    }
}
