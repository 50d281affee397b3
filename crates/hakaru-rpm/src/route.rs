//! What the server does with a request, apart from the sockets: which of the four URLs a
//! method and path name ([`route`], for HTTP/2 and HTTP/1.1 alike), the HTTP/1.1 request
//! head ([`parse_head`]) and the configuration a request's host gets ([`nq_document`]).
//! Sans-IO, so the fuzz target `rpm_request` drives them with any bytes.

use std::net::SocketAddr;

/// Size of `/large`.
pub const LARGE: u64 = 8 << 30;
/// Bytes per write of a body.
pub(crate) const CHUNK: usize = 256 << 10;
/// What `/large` is made of.
pub(crate) static ZEROS: [u8; CHUNK] = [0u8; CHUNK];

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /.well-known/nq`: the configuration.
    Config,
    /// `GET /small`: 1 byte.
    Small,
    /// `GET /large`: the large object.
    Large,
    /// `POST` or `PUT /upload`: the body read and discarded.
    Upload,
    /// One of the four paths with another method: 405.
    MethodNotAllowed,
    /// Anything else: 404.
    NotFound,
}

impl Route {
    /// Whether the request's body is read: only an upload's is; every other stream's is
    /// dropped unread at once.
    pub fn reads_body(self) -> bool {
        self == Route::Upload
    }
}

/// The route of `method` and `path` (a query is ignored).
pub fn route(method: &str, path: &str) -> Route {
    let path = path.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET", "/.well-known/nq") => Route::Config,
        ("GET", "/small") => Route::Small,
        ("GET", "/large") => Route::Large,
        ("POST" | "PUT", "/upload") => Route::Upload,
        (_, "/.well-known/nq" | "/small" | "/large" | "/upload") => Route::MethodNotAllowed,
        _ => Route::NotFound,
    }
}

/// The configuration for a request that named `authority` (or the local address).
pub fn nq_document(authority: Option<&str>, local: Option<SocketAddr>) -> String {
    // A plain host name or address with an optional port, which a client can parse back
    // (an IPv6 address without its ']' passes the characters but not that).
    let ok = |a: &&str| {
        !a.is_empty()
            && a.len() < 256
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
            && crate::config::Target::parse(&format!("https://{a}")).is_ok_and(|t| t.path == "/")
    };
    let host = match (authority.filter(ok), local) {
        (Some(a), _) => a.to_string(),
        (None, Some(l)) => l.to_string(),
        (None, None) => "localhost".into(),
    };
    crate::config::document(&format!("https://{host}"))
}

/// An HTTP/1.1 request head, as the server needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The method.
    pub method: String,
    /// The request target (path and query).
    pub path: String,
    /// `Host`, when given.
    pub host: Option<String>,
    /// `Content-Length` (0 when absent).
    pub length: u64,
    /// A `Transfer-Encoding` was given: the body's length is not known up front.
    pub chunked: bool,
    /// `Connection: close`.
    pub close: bool,
}

/// What [`parse_head`] made of the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A whole head, and how many bytes of the input it took.
    Complete(Head, usize),
    /// Not yet a whole head, and still within the limit.
    Partial,
    /// More than the limit without a whole head.
    TooLong,
    /// Not an HTTP/1.1 request head; why.
    Bad(String),
}

/// Headers one request head may carry.
const MAX_HEADERS: usize = 64;

/// Parses the head at the start of `buf`, of at most `max` bytes.
pub fn parse_head(buf: &[u8], max: usize) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let n = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max => n,
        Ok(httparse::Status::Complete(_)) => return Parsed::TooLong,
        Ok(httparse::Status::Partial) if buf.len() > max => return Parsed::TooLong,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(e) => return Parsed::Bad(e.to_string()),
    };
    let mut length: Option<u64> = None;
    let (mut host, mut chunked, mut close) = (None, false, false);
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value).map(str::trim);
        if h.name.eq_ignore_ascii_case("content-length") {
            let Some(v) = value.ok().and_then(|v| v.parse::<u64>().ok()) else {
                return Parsed::Bad("a Content-Length that is not a number".into());
            };
            if length.is_some_and(|l| l != v) {
                return Parsed::Bad("two different Content-Lengths".into());
            }
            length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("host") {
            host = value.ok().map(str::to_string);
        } else if h.name.eq_ignore_ascii_case("connection") {
            close |=
                value.is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
        }
    }
    Parsed::Complete(
        Head {
            method: req.method.unwrap_or_default().to_string(),
            path: req.path.unwrap_or("/").to_string(),
            host,
            length: length.unwrap_or(0),
            chunked,
            close,
        },
        n,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_urls_route_by_method_and_path() {
        assert_eq!(route("GET", "/.well-known/nq"), Route::Config);
        assert_eq!(route("GET", "/small?x=1"), Route::Small);
        assert_eq!(route("GET", "/large"), Route::Large);
        assert_eq!(route("POST", "/upload"), Route::Upload);
        assert_eq!(route("PUT", "/upload"), Route::Upload);
        assert_eq!(route("POST", "/large"), Route::MethodNotAllowed);
        assert_eq!(route("GET", "/upload"), Route::MethodNotAllowed);
        assert_eq!(route("GET", "/"), Route::NotFound);
        assert_eq!(route("GET", ""), Route::NotFound);
        assert!(Route::Upload.reads_body());
        for r in [Route::Config, Route::Small, Route::Large, Route::NotFound] {
            assert!(!r.reads_body());
        }
    }

    #[test]
    fn heads_parse_or_are_refused_by_name() {
        let h = b"POST /upload HTTP/1.1\r\nHost: a:1\r\nContent-Length: 7\r\n\r\nbody";
        let Parsed::Complete(head, n) = parse_head(h, 1024) else {
            panic!("{:?}", parse_head(h, 1024));
        };
        assert_eq!(n, h.len() - 4);
        assert_eq!(
            (
                head.method.as_str(),
                head.path.as_str(),
                head.host.as_deref()
            ),
            ("POST", "/upload", Some("a:1"))
        );
        assert_eq!((head.length, head.chunked, head.close), (7, false, false));
        let h = b"GET /small HTTP/1.1\r\nConnection: keep-alive, close\r\nTransfer-Encoding: chunked\r\n\r\n";
        let Parsed::Complete(head, _) = parse_head(h, 1024) else {
            panic!()
        };
        assert!(head.close && head.chunked);
        assert_eq!(
            parse_head(b"GET /small HTTP/1.1\r\nHo", 1024),
            Parsed::Partial
        );
        assert_eq!(parse_head(&[b'a'; 100], 50), Parsed::TooLong);
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "x".repeat(100));
        assert_eq!(parse_head(long.as_bytes(), 50), Parsed::TooLong);
        for bad in [
            &b"\x00\x01 / HTTP/1.1\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        ] {
            assert!(matches!(parse_head(bad, 1024), Parsed::Bad(_)), "{bad:?}");
        }
    }

    #[test]
    fn the_configuration_names_the_asked_host_or_the_local_address() {
        let d = nq_document(Some("example.com:4443"), None);
        let c = crate::config::parse(d.as_bytes()).unwrap();
        assert_eq!(c.large.url(), "https://example.com:4443/large");
        let local: SocketAddr = "127.0.0.1:9".parse().unwrap();
        for bad in ["evil\"},{\"x", "[2001:db8::13", "h:", "h:99999"] {
            let d = nq_document(Some(bad), Some(local));
            let c = crate::config::parse(d.as_bytes()).unwrap();
            assert_eq!(c.small.url(), "https://127.0.0.1:9/small", "{bad}");
        }
        let d = nq_document(Some("[2001:db8::13]:8443"), None);
        let c = crate::config::parse(d.as_bytes()).unwrap();
        assert_eq!(c.upload.url(), "https://[2001:db8::13]:8443/upload");
    }
}
