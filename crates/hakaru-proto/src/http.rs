//! HTTP/1.1 for `hakaru http` and the server's HTTP endpoint, without I/O: URLs, request and
//! response heads (parsed by `httparse`), chunked bodies, byte ranges.
//!
//! Only what a throughput test needs: bodies are counted and discarded, so the chunked decoder
//! reports how many payload bytes a buffer held rather than copying them out.

use std::fmt;

/// Longest request or response head either end accepts.
pub const MAX_HEAD: usize = 64 << 10;
/// Largest `/bytes/SIZE` the server's endpoint serves.
pub const MAX_BYTES_SIZE: u64 = 1 << 50;
/// Most header lines in a head.
const MAX_HEADERS: usize = 64;

/// What is wrong with a URL, a head or a body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(pub String);

fn err<T>(m: impl Into<String>) -> Result<T, HttpError> {
    Err(HttpError(m.into()))
}

/// An `http://` or `https://` URL, split into what a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `https`.
    pub tls: bool,
    /// Host name or address, without brackets.
    pub host: String,
    /// Port (80 or 443 unless given).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    /// Parses an absolute URL; a missing path is `/`. Fragments are dropped.
    pub fn parse(s: &str) -> Result<Url, HttpError> {
        let (tls, rest) = if let Some(r) = strip_prefix_ci(s, "http://") {
            (false, r)
        } else if let Some(r) = strip_prefix_ci(s, "https://") {
            (true, r)
        } else {
            return err(format!(
                "URL '{s}': expected http://HOST[:PORT]/PATH or https://..."
            ));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = path.split('#').next().unwrap_or("");
        let path = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        if authority.contains('@') {
            return err(format!(
                "URL '{s}': user names and passwords are not supported"
            ));
        }
        let default = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let Some((h, after)) = v6.split_once(']') else {
                return err(format!("URL '{s}': '[' without ']' around an IPv6 address"));
            };
            let port = match after {
                "" => default,
                p => parse_port(s, p.strip_prefix(':').unwrap_or("x"))?,
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), parse_port(s, p)?),
                None => (authority.to_string(), default),
            }
        };
        if host.is_empty() {
            return err(format!("URL '{s}': no host"));
        }
        // Brackets belong around an IPv6 address only; control characters and spaces belong
        // in no host (the Host header is made of it).
        if host
            .chars()
            .any(|c| c == '[' || c == ']' || c.is_control() || c.is_whitespace())
        {
            return err(format!("URL '{s}': '{host}' is not a host name or address"));
        }
        Ok(Url {
            tls,
            host,
            port,
            path,
        })
    }

    /// The URL a `Location` header points to, relative to this one.
    pub fn join(&self, location: &str) -> Result<Url, HttpError> {
        let l = location.trim();
        if strip_prefix_ci(l, "http://").is_some() || strip_prefix_ci(l, "https://").is_some() {
            return Url::parse(l);
        }
        if let Some(rest) = l.strip_prefix("//") {
            let scheme = if self.tls { "https" } else { "http" };
            return Url::parse(&format!("{scheme}://{rest}"));
        }
        let path = if l.starts_with('/') {
            l.to_string()
        } else {
            let base = self.path.split('?').next().unwrap_or("/");
            let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{l}")
        };
        Ok(Url {
            path,
            ..self.clone()
        })
    }

    /// `host[:port]` as the Host header has it: the port only when not the scheme's default,
    /// IPv6 addresses in brackets.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority(), self.path)
    }
}

/// `s` without `prefix`, compared ignoring ASCII case. Compared as bytes: `s` may hold
/// multi-byte characters where the prefix would end (a server's `Location`), and slicing a
/// `&str` there would panic. A match means the prefix's last byte ends a character in `s`.
fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.as_bytes().get(..prefix.len())?;
    if !head.eq_ignore_ascii_case(prefix.as_bytes()) {
        return None;
    }
    s.get(prefix.len()..)
}

fn parse_port(url: &str, p: &str) -> Result<u16, HttpError> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => err(format!("URL '{url}': port '{p}' is not 1 to 65535")),
    }
}

/// A byte range, first and last byte included (as `Range: bytes=FIRST-LAST` has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub first: u64,
    /// Last byte, included.
    pub last: u64,
}

impl ByteRange {
    /// Bytes in the range.
    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    /// Never true: a range holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Splits `size` bytes into `parts` ranges of nearly equal length (fewer when `size` is
/// smaller than `parts`).
pub fn split_ranges(size: u64, parts: u32) -> Vec<ByteRange> {
    let parts = u64::from(parts.max(1)).min(size);
    // In 128 bits: `size` may be as large as a server claims. `size * i / parts` is below
    // `size`, so it fits back in 64.
    let at = |i: u64| (u128::from(size) * u128::from(i) / u128::from(parts)) as u64;
    (0..parts)
        .map(|i| ByteRange {
            first: at(i),
            last: at(i + 1) - 1,
        })
        .collect()
}

/// A request head: the request line, Host, the caller's headers, a Content-Length when the
/// request has a body, a Range when asked.
pub fn request_head(
    method: &str,
    url: &Url,
    headers: &[(String, String)],
    content_length: Option<u64>,
    range: Option<ByteRange>,
) -> Vec<u8> {
    let mut h = format!("{method} {} HTTP/1.1\r\n", url.path);
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    if !has("host") {
        h += &format!("Host: {}\r\n", url.authority());
    }
    if !has("user-agent") {
        h += &format!("User-Agent: hakaru/{}\r\n", env!("CARGO_PKG_VERSION"));
    }
    if !has("accept") {
        h += "Accept: */*\r\n";
    }
    for (k, v) in headers {
        h += &format!("{k}: {v}\r\n");
    }
    if let Some(n) = content_length {
        h += &format!("Content-Length: {n}\r\n");
    }
    if let Some(r) = range {
        h += &format!("Range: bytes={}-{}\r\n", r.first, r.last);
    }
    h += "\r\n";
    h.into_bytes()
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body (HEAD, 204, 304, 1xx).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the peer closes (a response with neither length nor chunking).
    UntilClose,
}

/// What a response head says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Bytes of the head, blank line included.
    pub head_len: usize,
    /// How the body is delimited.
    pub body: BodyKind,
    /// The connection may carry another request.
    pub keep_alive: bool,
    /// The Location header.
    pub location: Option<String>,
    /// Content-Range: the range sent and the whole size, when given.
    pub content_range: Option<(ByteRange, Option<u64>)>,
}

fn header_str<'a>(h: &'a httparse::Header<'_>) -> &'a str {
    std::str::from_utf8(h.value).unwrap_or("").trim()
}

fn has_token(value: &str, token: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// What every head says about framing and the connection, and the headers one kind of head
/// reads besides (by lowercase name).
#[derive(Default)]
struct Framing {
    length: Option<u64>,
    chunked: bool,
    close: bool,
    keep: bool,
}

impl Framing {
    /// Reads Content-Length, Transfer-Encoding and Connection; hands every other header to
    /// `other`. Repeated Content-Lengths must agree.
    fn read(
        headers: &[httparse::Header<'_>],
        mut other: impl FnMut(&str, &str),
    ) -> Result<Framing, HttpError> {
        let mut f = Framing::default();
        for h in headers {
            let v = header_str(h);
            let name = h.name.to_ascii_lowercase();
            match name.as_str() {
                "content-length" => match v.parse::<u64>() {
                    Ok(n) if f.length.is_none_or(|l| l == n) => f.length = Some(n),
                    _ => return err(format!("bad Content-Length '{v}'")),
                },
                // Chunked must be the last coding applied.
                "transfer-encoding" => {
                    f.chunked = v
                        .rsplit(',')
                        .next()
                        .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"))
                }
                "connection" => {
                    f.close |= has_token(v, "close");
                    f.keep |= has_token(v, "keep-alive");
                }
                _ => other(&name, v),
            }
        }
        Ok(f)
    }

    /// The connection may carry another message (HTTP/1.0 only with keep-alive).
    fn keep_alive(&self, http10: bool) -> bool {
        !self.close && (!http10 || self.keep)
    }
}

/// Parses a response head at the start of `buf`; `Ok(None)` until the whole head is there.
/// `head_request` tells that the request was HEAD (no body whatever the headers say).
pub fn parse_response(buf: &[u8], head_request: bool) -> Result<Option<ResponseHead>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut headers);
    let head_len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return err(format!("response head longer than {MAX_HEAD} bytes"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return err(format!("malformed response head: {e}")),
    };
    let status = r.code.unwrap_or(0);
    let http10 = r.version == Some(0);
    let (mut location, mut content_range) = (None, None);
    let f = Framing::read(r.headers, |name, v| match name {
        "location" => location = Some(v.to_string()),
        "content-range" => content_range = parse_content_range(v),
        _ => {}
    })?;
    let body = if head_request || status < 200 || status == 204 || status == 304 {
        BodyKind::Empty
    } else if f.chunked {
        BodyKind::Chunked
    } else if let Some(n) = f.length {
        BodyKind::Length(n)
    } else {
        BodyKind::UntilClose
    };
    Ok(Some(ResponseHead {
        status,
        reason: r.reason.unwrap_or("").to_string(),
        head_len,
        body,
        keep_alive: f.keep_alive(http10) && body != BodyKind::UntilClose,
        location,
        content_range,
    }))
}

/// `bytes FIRST-LAST/SIZE` (SIZE may be `*`).
fn parse_content_range(v: &str) -> Option<(ByteRange, Option<u64>)> {
    let rest = v.strip_prefix("bytes")?.trim_start();
    let (range, size) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let r = ByteRange {
        first: a.trim().parse().ok()?,
        last: b.trim().parse().ok()?,
    };
    (r.last >= r.first).then_some((r, size.trim().parse().ok()))
}

/// Counts the payload of a chunked body as it arrives, without copying it.
#[derive(Debug, Clone, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// Digits and extensions of the size line read so far.
    line: Vec<u8>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ChunkState {
    /// Reading a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk: this many payload bytes left.
    Data(u64),
    /// The CRLF after a chunk's data: bytes of it seen.
    DataEnd(u8),
    /// Trailer lines after the last chunk: bytes of the current line seen.
    Trailer(usize),
    /// The body is complete.
    Done,
}

/// What one [`ChunkedDecoder::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkStep {
    /// Bytes of the input used; the rest belongs to the next message.
    pub consumed: usize,
    /// Payload bytes among them.
    pub payload: u64,
    /// The body ended.
    pub done: bool,
}

impl ChunkedDecoder {
    /// Feeds the next bytes of the body.
    pub fn feed(&mut self, buf: &[u8]) -> Result<ChunkStep, HttpError> {
        let (mut i, mut payload) = (0usize, 0u64);
        while let Some(&b) = buf.get(i) {
            match self.state {
                ChunkState::Done => break,
                ChunkState::Size => {
                    i += 1;
                    if b == b'\n' {
                        let size = self.size_line()?;
                        self.line.clear();
                        self.state = if size == 0 {
                            ChunkState::Trailer(0)
                        } else {
                            ChunkState::Data(size)
                        };
                    } else if self.line.len() >= 1024 {
                        return err("chunk-size line longer than 1024 bytes");
                    } else {
                        self.line.push(b);
                    }
                }
                ChunkState::Data(left) => {
                    let n = left.min((buf.len() - i) as u64);
                    payload += n;
                    i += n as usize;
                    self.state = if n == left {
                        ChunkState::DataEnd(0)
                    } else {
                        ChunkState::Data(left - n)
                    };
                }
                ChunkState::DataEnd(seen) => {
                    let want = if seen == 0 { b'\r' } else { b'\n' };
                    if b != want {
                        return err("chunk data not followed by CRLF");
                    }
                    i += 1;
                    self.state = if seen == 0 {
                        ChunkState::DataEnd(1)
                    } else {
                        ChunkState::Size
                    };
                }
                ChunkState::Trailer(len) => {
                    i += 1;
                    self.state = match b {
                        b'\n' if len == 0 => ChunkState::Done,
                        b'\n' => ChunkState::Trailer(0),
                        // A CR alone does not start a trailer line's content.
                        b'\r' => ChunkState::Trailer(len),
                        _ if len >= MAX_HEAD => return err("chunked trailer too long"),
                        _ => ChunkState::Trailer(len + 1),
                    };
                }
            }
        }
        Ok(ChunkStep {
            consumed: i,
            payload,
            done: self.state == ChunkState::Done,
        })
    }

    fn size_line(&self) -> Result<u64, HttpError> {
        let line = std::str::from_utf8(&self.line).unwrap_or("");
        let digits = line.split(';').next().unwrap_or("").trim();
        u64::from_str_radix(digits, 16)
            .map_err(|_| HttpError(format!("bad chunk size '{}'", line.trim_end())))
    }
}

/// What a request head asks of the server endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// Method, as sent.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Bytes of the head.
    pub head_len: usize,
    /// How the request body is delimited (`Empty` when it has none).
    pub body: BodyKind,
    /// The client will send another request on this connection.
    pub keep_alive: bool,
    /// The Range header's value, when given.
    pub range: Option<String>,
    /// The client waits for `100 Continue` before its body.
    pub expect_continue: bool,
}

/// Parses a request head; `Ok(None)` until the whole head is there.
pub fn parse_request(buf: &[u8]) -> Result<Option<RequestInfo>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Request::new(&mut headers);
    let head_len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return err(format!("request head longer than {MAX_HEAD} bytes"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return err(format!("malformed request head: {e}")),
    };
    let http10 = r.version == Some(0);
    let (mut range, mut expect_continue) = (None, false);
    let f = Framing::read(r.headers, |name, v| match name {
        "range" => range = Some(v.to_string()),
        "expect" => expect_continue = v.eq_ignore_ascii_case("100-continue"),
        _ => {}
    })?;
    if f.chunked && f.length.is_some() {
        return err("both Content-Length and Transfer-Encoding: chunked");
    }
    let body = match (f.chunked, f.length) {
        (true, _) => BodyKind::Chunked,
        (false, Some(0)) | (false, None) => BodyKind::Empty,
        (false, Some(n)) => BodyKind::Length(n),
    };
    Ok(Some(RequestInfo {
        method: r.method.unwrap_or("").to_string(),
        path: r.path.unwrap_or("").to_string(),
        head_len,
        body,
        keep_alive: f.keep_alive(http10),
        range,
        expect_continue,
    }))
}

/// What a Range header asks of a resource of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAnswer {
    /// No usable range (absent, not bytes, several ranges): send the whole resource.
    Whole,
    /// Send this part (206).
    Part(ByteRange),
    /// The range starts past the end (416).
    Unsatisfiable,
}

/// Reads `bytes=FIRST-[LAST]` or `bytes=-SUFFIX` against a resource of `size` bytes. Several
/// ranges are answered with the whole resource, which RFC 9110 allows.
pub fn answer_range(value: Option<&str>, size: u64) -> RangeAnswer {
    let Some(spec) = value.and_then(|v| v.trim().strip_prefix("bytes=")) else {
        return RangeAnswer::Whole;
    };
    if spec.contains(',') {
        return RangeAnswer::Whole;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeAnswer::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    let range = if a.is_empty() {
        match b.parse::<u64>() {
            Ok(0) => return RangeAnswer::Unsatisfiable,
            Ok(n) if size > 0 => ByteRange {
                first: size.saturating_sub(n),
                last: size - 1,
            },
            Ok(_) => return RangeAnswer::Unsatisfiable,
            Err(_) => return RangeAnswer::Whole,
        }
    } else {
        let Ok(first) = a.parse::<u64>() else {
            return RangeAnswer::Whole;
        };
        if first >= size {
            return RangeAnswer::Unsatisfiable;
        }
        let last = match b {
            "" => size - 1,
            b => match b.parse::<u64>() {
                Ok(l) if l >= first => l.min(size - 1),
                _ => return RangeAnswer::Whole,
            },
        };
        ByteRange { first, last }
    };
    RangeAnswer::Part(range)
}

/// A response head with the given status and headers, and a Content-Length.
pub fn response_head(
    status: u16,
    reason: &str,
    content_length: u64,
    headers: &[(&str, String)],
    keep_alive: bool,
) -> Vec<u8> {
    let mut h = format!("HTTP/1.1 {status} {reason}\r\nServer: hakaru\r\n");
    for (k, v) in headers {
        h += &format!("{k}: {v}\r\n");
    }
    h += &format!("Content-Length: {content_length}\r\n");
    if !keep_alive {
        h += "Connection: close\r\n";
    }
    h += "\r\n";
    h.into_bytes()
}

/// The size a server path `/bytes/SIZE` asks for (`1K`, `10M`, ... as hakaru reads sizes);
/// `None` for another path, an error naming the path when the size does not read or is over
/// [`MAX_BYTES_SIZE`].
pub fn bytes_size(path: &str) -> Option<Result<u64, String>> {
    let s = path.strip_prefix("/bytes/")?;
    Some(match s.parse::<hakaru_model::Bytes>() {
        Ok(b) if b.0 <= MAX_BYTES_SIZE => Ok(b.0),
        Ok(_) => Err(format!("/bytes/{s}: at most 1P")),
        Err(e) => Err(format!("/bytes/{s}: {e}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_come_from_the_path() {
        assert_eq!(bytes_size("/bytes/1K"), Some(Ok(1024)));
        assert_eq!(bytes_size("/bytes/10"), Some(Ok(10)));
        assert!(matches!(bytes_size("/bytes/xyz"), Some(Err(_))));
        assert!(matches!(bytes_size("/bytes/2P"), Some(Err(_))));
        assert_eq!(bytes_size("/other"), None);
    }

    #[test]
    fn urls_split_into_their_parts() {
        let u = Url::parse("http://example.test/a/b?c=1#frag").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port),
            (false, "example.test", 80)
        );
        assert_eq!(u.path, "/a/b?c=1");
        let u = Url::parse("HTTPS://[::1]:8443").unwrap();
        assert_eq!((u.tls, u.host.as_str(), u.port), (true, "::1", 8443));
        assert_eq!(u.path, "/");
        assert_eq!(u.authority(), "[::1]:8443");
        assert_eq!(u.to_string(), "https://[::1]:8443/");
        let u = Url::parse("https://h:443/x").unwrap();
        assert_eq!(u.authority(), "h");
        assert_eq!(Url::parse("http://h?q").unwrap().path, "/?q");
        for bad in [
            "ftp://h/",
            "http://",
            "http://h:0/",
            "http://h:99999/",
            "http://[::1/",
            "http://u:p@h/",
            "h/x",
            // Found by the http fuzz target: printed, these did not parse back.
            "https://\0[::1]:84/",
            "http://a[b/",
            "http://[[::1]/",
            "http://h h/",
            "http://h\t/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn locations_resolve_against_the_request() {
        let base = Url::parse("https://h:8443/dir/file?x").unwrap();
        assert_eq!(
            base.join("/other").unwrap().to_string(),
            "https://h:8443/other"
        );
        assert_eq!(
            base.join("next").unwrap().to_string(),
            "https://h:8443/dir/next"
        );
        assert_eq!(base.join("//g/p").unwrap().to_string(), "https://g/p");
        assert_eq!(
            base.join("http://g:81/p").unwrap().to_string(),
            "http://g:81/p"
        );
    }

    #[test]
    fn a_location_with_a_character_across_the_scheme_length_does_not_panic() {
        // 'é' takes bytes 6 and 7: "http://" is 7 bytes long, and slicing there panicked.
        let base = Url::parse("http://h/dir/file").unwrap();
        assert_eq!(
            base.join("abcdeféx").unwrap().to_string(),
            "http://h/dir/abcdeféx"
        );
        // Byte 8 ("https://"), and a redirect straight to such a URL.
        assert_eq!(base.join("/abcdeféx").unwrap().path, "/abcdeféx");
        assert!(base.join("abcdefgé").is_ok());
        assert!(Url::parse("abcdeféx").is_err());
        assert!(Url::parse("http:/é/h").is_err());
        let r = parse_response(
            "HTTP/1.1 302 Found\r\nLocation: abcdeféx\r\nContent-Length: 0\r\n\r\n".as_bytes(),
            false,
        )
        .unwrap()
        .unwrap();
        let loc = r.location.unwrap();
        assert_eq!(base.join(&loc).unwrap().path, "/dir/abcdeféx");
    }

    #[test]
    fn request_heads_carry_host_length_and_range() {
        let u = Url::parse("http://h:8080/f").unwrap();
        let h = request_head(
            "PUT",
            &u,
            &[("X-A".into(), "1".into())],
            Some(10),
            Some(ByteRange { first: 5, last: 9 }),
        );
        let h = String::from_utf8(h).unwrap();
        assert!(h.starts_with("PUT /f HTTP/1.1\r\nHost: h:8080\r\n"), "{h}");
        assert!(h.contains("X-A: 1\r\n") && h.contains("Content-Length: 10\r\n"));
        assert!(h.contains("Range: bytes=5-9\r\n") && h.ends_with("\r\n\r\n"));
        // A Host given by the user replaces ours.
        let h = request_head("GET", &u, &[("host".into(), "v".into())], None, None);
        assert_eq!(String::from_utf8(h).unwrap().matches("ost:").count(), 1);
    }

    #[test]
    fn response_heads_tell_the_body() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nbody", false)
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.status, r.body, r.keep_alive),
            (200, BodyKind::Length(12), true)
        );
        assert_eq!(r.head_len, 39);
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Le", false),
            Ok(None)
        );
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!((r.body, r.keep_alive), (BodyKind::Chunked, false));
        let r = parse_response(b"HTTP/1.0 200 OK\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!((r.body, r.keep_alive), (BodyKind::UntilClose, false));
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(r.body, BodyKind::Empty);
        let r = parse_response(
            b"HTTP/1.1 206 Partial\r\nContent-Range: bytes 10-19/100\r\nContent-Length: 10\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            r.content_range,
            Some((
                ByteRange {
                    first: 10,
                    last: 19
                },
                Some(100)
            ))
        );
        let r = parse_response(
            b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.location.as_deref(), Some("/x"));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false).is_err());
        assert!(parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            false
        )
        .is_err());
        assert!(parse_response(b"NOT HTTP\r\n\r\n", false).is_err());
        assert!(parse_response(&vec![b'a'; MAX_HEAD], false).is_err());
    }

    #[test]
    fn chunked_bodies_count_their_payload_across_any_split() {
        let body = b"5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for split in 0..body.len() {
            let mut d = ChunkedDecoder::default();
            let a = d.feed(&body[..split]).unwrap();
            let b = d.feed(&body[a.consumed..]).unwrap();
            assert_eq!(a.payload + b.payload, 21, "split at {split}");
            assert!(b.done, "split at {split}");
            assert_eq!(
                &body[a.consumed + b.consumed..],
                b"NEXT",
                "split at {split}"
            );
        }
        let mut d = ChunkedDecoder::default();
        assert!(d.feed(b"zz\r\n").is_err());
        let mut d = ChunkedDecoder::default();
        assert!(d.feed(b"2\r\nabXY").is_err());
        let mut d = ChunkedDecoder::default();
        assert!(d.feed(&[b'1'; 2000]).is_err());
    }

    #[test]
    fn request_heads_for_the_endpoint() {
        let r = parse_request(b"GET /bytes/1M HTTP/1.1\r\nHost: h\r\nRange: bytes=0-9\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/bytes/1M"));
        assert_eq!((r.body, r.keep_alive), (BodyKind::Empty, true));
        assert_eq!(r.range.as_deref(), Some("bytes=0-9"));
        let r = parse_request(
            b"PUT /u HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (r.body, r.keep_alive, r.expect_continue),
            (BodyKind::Length(5), false, true)
        );
        let r = parse_request(b"POST /u HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((r.body, r.keep_alive), (BodyKind::Chunked, false));
        assert!(parse_request(
            b"POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
        )
        .is_err());
        assert!(parse_request(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n").is_err());
    }

    #[test]
    fn ranges_are_answered_against_the_size() {
        let p = |first, last| RangeAnswer::Part(ByteRange { first, last });
        assert_eq!(answer_range(None, 100), RangeAnswer::Whole);
        assert_eq!(answer_range(Some("bytes=0-9"), 100), p(0, 9));
        assert_eq!(answer_range(Some("bytes=90-"), 100), p(90, 99));
        assert_eq!(answer_range(Some("bytes=90-500"), 100), p(90, 99));
        assert_eq!(answer_range(Some("bytes=-10"), 100), p(90, 99));
        assert_eq!(answer_range(Some("bytes=-500"), 100), p(0, 99));
        assert_eq!(
            answer_range(Some("bytes=100-"), 100),
            RangeAnswer::Unsatisfiable
        );
        assert_eq!(
            answer_range(Some("bytes=-0"), 100),
            RangeAnswer::Unsatisfiable
        );
        assert_eq!(answer_range(Some("bytes=0-1,5-6"), 100), RangeAnswer::Whole);
        assert_eq!(answer_range(Some("bytes=9-1"), 100), RangeAnswer::Whole);
        assert_eq!(answer_range(Some("items=0-1"), 100), RangeAnswer::Whole);
    }

    #[test]
    fn ranges_split_a_size_exactly() {
        let r = split_ranges(10, 3);
        assert_eq!(r.iter().map(ByteRange::len).sum::<u64>(), 10);
        assert_eq!((r[0].first, r[2].last), (0, 9));
        for w in r.windows(2) {
            assert_eq!(w[0].last + 1, w[1].first);
        }
        assert_eq!(split_ranges(2, 8).len(), 2);
    }

    /// The size comes from a server's `Content-Range: bytes 0-0/SIZE`; `size * (i + 1)`
    /// overflowed (a panic in debug builds, wrong ranges in release) for a size near 2^64.
    #[test]
    fn ranges_split_the_largest_size_a_server_can_claim() {
        let r = split_ranges(u64::MAX, 4);
        assert_eq!(r.len(), 4);
        assert_eq!((r[0].first, r[3].last), (0, u64::MAX - 1));
        for w in r.windows(2) {
            assert_eq!(w[0].last + 1, w[1].first);
        }
        assert_eq!(
            split_ranges(u64::MAX, 1),
            [ByteRange {
                first: 0,
                last: u64::MAX - 1
            }]
        );
    }
}
