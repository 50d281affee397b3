//! TLS under `hakaru http`: the connection's stream (plain or rustls), a socket read in large
//! chunks beneath rustls, the bounded handshake, and the client configuration (roots, or
//! `--cacert`'s, or none with `--insecure`).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hakaru_model::HttpSpec;
use hakaru_proto::http::Url;

use super::{retry, BUF};

/// A connection's byte stream, plain or TLS.
pub(super) enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TlsSock>>),
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            // A peer that closes without close_notify ends the stream like a plain close.
            Stream::Tls(s) => match s.read(b) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                r => r,
            },
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// The socket under TLS, read in large chunks: rustls reads records a few KiB at a time, which
/// at several Gbit/s is a receive system call per record; from this buffer it is a copy.
pub(super) struct TlsSock {
    pub(super) tcp: TcpStream,
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl TlsSock {
    fn new(tcp: TcpStream) -> TlsSock {
        TlsSock {
            tcp,
            buf: vec![0u8; BUF],
            at: 0,
            len: 0,
        }
    }
}

impl Read for TlsSock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        if self.at == self.len {
            self.len = self.tcp.read(&mut self.buf)?;
            self.at = 0;
        }
        let have = self.buf.get(self.at..self.len).unwrap_or_default();
        let n = have.len().min(b.len());
        if let (Some(to), Some(from)) = (b.get_mut(..n), have.get(..n)) {
            to.copy_from_slice(from);
        }
        self.at += n;
        Ok(n)
    }
}

impl Write for TlsSock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.tcp.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// The TLS handshake, bounded by `timeout`.
pub(super) fn handshake(
    cfg: &Arc<rustls::ClientConfig>,
    url: &Url,
    tcp: TcpStream,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TlsSock>, String> {
    let mut tcp = TlsSock::new(tcp);
    let name = rustls_pki_types::ServerName::try_from(url.host.clone())
        .map_err(|e| format!("'{}' is not a TLS server name: {e}", url.host))?;
    let mut conn = rustls::ClientConnection::new(Arc::clone(cfg), name)
        .map_err(|e| format!("starting TLS: {e}"))?;
    let until = Instant::now() + timeout;
    while conn.is_handshaking() {
        match conn.complete_io(&mut tcp) {
            Ok((0, 0)) if conn.wants_read() => {
                return Err("TLS handshake: the server closed the connection".into())
            }
            Ok(_) => {}
            Err(e) if retry(&e) => {}
            Err(e) => return Err(format!("TLS handshake: {e}")),
        }
        if Instant::now() >= until || stop.load(Ordering::Acquire) {
            return Err(format!(
                "TLS handshake: not done after {} s (--connect-timeout)",
                timeout.as_secs_f64()
            ));
        }
    }
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// The TLS settings: the system's roots, or `--cacert`'s, or none with `--insecure`.
pub(super) fn tls_config(spec: &HttpSpec) -> Result<Arc<rustls::ClientConfig>, String> {
    client_tls_config(spec.insecure, spec.cacert.as_deref())
}

/// A TLS client configuration (no ALPN): the system's roots, or those in the PEM file
/// `cacert`, or no verification at all with `insecure`. Errors name the flag.
pub fn client_tls_config(
    insecure: bool,
    cacert: Option<&str>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    // AES-128-GCM first (as browsers order it): a quarter fewer AES rounds than AES-256, so
    // the client's decryption is less often the limit; the suite in use is in the result.
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| !format!("{:?}", s.suite()).contains("AES_128_GCM"));
    let provider = Arc::new(provider);
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let cfg = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(path) = cacert {
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("--cacert {path}: {e}"))?;
            for c in certs {
                let c = c.map_err(|e| format!("--cacert {path}: {e}"))?;
                roots.add(c).map_err(|e| format!("--cacert {path}: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("--cacert {path}: no certificate in the file"));
            }
        } else {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(Arc::new(cfg))
}

/// `--insecure`: any certificate is accepted; signatures are still checked so the handshake
/// is a real one.
#[derive(Debug)]
pub(super) struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
