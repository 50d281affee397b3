//! One HTTP connection's thread (`Worker`): connecting, the TLS handshake, requests and the
//! body loop that only counts what it reads.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use super::*;

/// One connection's state and figures.
pub(super) struct Worker {
    /// Flow index (0-based).
    pub(super) i: usize,
    pub(super) conn: Option<Conn>,
    pub(super) stats: HttpConnection,
    pub(super) connect_ms: Vec<f64>,
    pub(super) tls_ms: Vec<f64>,
    pub(super) ttfb_ms: Vec<f64>,
    pub(super) failed: u64,
    /// Body bytes left with `-n`.
    pub(super) budget: Option<u64>,
    pub(super) buf: Vec<u8>,
}

impl Worker {
    pub(super) fn new(i: usize, spec: &HttpSpec) -> Worker {
        Worker {
            i,
            conn: None,
            stats: HttpConnection {
                id: i as u32 + 1,
                ..Default::default()
            },
            connect_ms: Vec::new(),
            tls_ms: Vec::new(),
            ttfb_ms: Vec::new(),
            failed: 0,
            budget: spec.bytes.map(|b| b.0),
            buf: vec![0u8; BUF],
        }
    }

    /// Fetches the items once, or in turn until the time or the byte budget is used up.
    pub(super) fn work(&mut self, sh: &Shared, items: &[(Url, Option<ByteRange>)]) {
        let repeat = sh.spec.duration.is_some() || sh.spec.bytes.is_some();
        if items.is_empty() {
            return;
        }
        let mut k = 0usize;
        loop {
            if sh.over() || self.budget == Some(0) {
                break;
            }
            let Some((url, range)) = items.get(k % items.len()) else {
                break;
            };
            let mut halt = self.request(sh, url.clone(), *range);
            if let Err(Halt::Stale(_)) = halt {
                self.conn = None;
                halt = self.request(sh, url.clone(), *range);
            }
            match halt {
                Ok(()) => {}
                Err(Halt::Cut) => break,
                Err(Halt::Failed(e)) | Err(Halt::Stale(e)) => {
                    self.failed += 1;
                    self.stats.error = Some(e);
                    break;
                }
            }
            k += 1;
            if !repeat && k >= items.len() {
                break;
            }
        }
        self.conn = None;
    }

    /// Opens a connection for `url` unless the current one serves it.
    pub(super) fn connection(&mut self, sh: &Shared, url: &Url) -> Result<&mut Conn, Halt> {
        let key = (url.tls, url.host.clone(), url.port);
        if self.conn.as_ref().is_some_and(|c| c.key != key) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let c = self.open(sh, url, key)?;
            self.conn = Some(c);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| Halt::Failed("no connection".into()))
    }

    fn open(&mut self, sh: &Shared, url: &Url, key: (bool, String, u16)) -> Result<Conn, Halt> {
        let timeout = sh.spec.connect_timeout.0;
        let fail = |m: String| Halt::Failed(format!("{url}: {m}"));
        let addrs: Vec<SocketAddr> = (url.host.as_str(), url.port)
            .to_socket_addrs()
            .map_err(|e| fail(format!("cannot resolve {}: {e}", url.host)))?
            .filter(|a| match sh.spec.ip_version {
                Some(4) => a.is_ipv4(),
                Some(6) => a.is_ipv6(),
                _ => true,
            })
            .collect();
        if addrs.is_empty() {
            return Err(fail(format!(
                "{} has no IPv{} address",
                url.host,
                sh.spec.ip_version.unwrap_or(4)
            )));
        }
        let t0 = Instant::now();
        let mut last = None;
        let mut tcp = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => {
                    tcp = Some((s, *a));
                    break;
                }
                Err(e) => last = Some(format!("connecting to {a}: {e}")),
            }
        }
        let Some((tcp, peer)) = tcp else {
            return Err(fail(last.unwrap_or_default()));
        };
        self.connect_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        self.stats.connects += 1;
        self.stats.peer = Some(peer.to_string());
        let setup = |e: io::Error| fail(format!("setting up the socket: {e}"));
        tcp.set_nodelay(true).map_err(setup)?;
        tcp.set_read_timeout(Some(TICK)).map_err(setup)?;
        tcp.set_write_timeout(Some(TICK)).map_err(setup)?;
        let stream = match (&sh.tls, url.tls) {
            (Some(cfg), true) => {
                let t1 = Instant::now();
                let s = handshake(cfg, url, tcp, timeout, sh.stop).map_err(fail)?;
                self.tls_ms.push(t1.elapsed().as_secs_f64() * 1e3);
                let c = &s.conn;
                self.stats.tls = Some(format!(
                    "{} {}",
                    c.protocol_version()
                        .map_or("?".into(), |v| format!("{v:?}")),
                    c.negotiated_cipher_suite()
                        .map_or("?".into(), |s| format!("{:?}", s.suite()))
                ));
                Stream::Tls(Box::new(s))
            }
            _ => Stream::Plain(tcp),
        };
        Ok(Conn {
            stream,
            key,
            pending: Vec::new(),
            used: 0,
        })
    }

    /// One request and its response, following redirects.
    fn request(&mut self, sh: &Shared, mut url: Url, range: Option<ByteRange>) -> Result<(), Halt> {
        let method = sh.spec.method;
        let mut redirects = 0;
        loop {
            self.stats.url = url.to_string();
            let upload = sh.spec.upload.map(|b| b.0);
            let head = wire::request_head(method.as_str(), &url, &sh.headers, upload, range);
            let reused = self.connection(sh, &url)?.used > 0;
            if redirects == 0 {
                self.stats.requests += 1;
            }
            let what = format!("{} {url}", method.as_str());
            let stale_or = |reused: bool, m: String| {
                if reused {
                    Halt::Stale(m)
                } else {
                    Halt::Failed(m)
                }
            };
            if let Some(c) = self.conn.as_mut() {
                c.used += 1;
            }
            self.write_all(sh, &head, false)
                .map_err(|h| restale(h, reused, &what))?;
            if let Some(n) = upload {
                self.upload(sh, n).map_err(|h| named(h, &what))?;
            }
            // Time to first byte runs from the request's last byte.
            let t0 = Instant::now();
            let resp = match self.read_head(sh, t0, false)? {
                Some(r) => r,
                None => {
                    self.conn = None;
                    return Err(stale_or(
                        reused,
                        format!("{what}: the server closed the connection before answering"),
                    ));
                }
            };
            *self.stats.status.entry(resp.status).or_insert(0) += 1;
            let redirect = (300..400).contains(&resp.status)
                && resp.status != 304
                && resp.location.is_some()
                && method == HttpMethod::Get;
            if redirect && redirects < sh.spec.max_redirects {
                self.body(sh, &resp, false).map_err(|h| named(h, &what))?;
                if !resp.keep_alive {
                    self.conn = None;
                }
                let loc = resp.location.unwrap_or_default();
                url = url
                    .join(&loc)
                    .map_err(|e| Halt::Failed(format!("{what}: redirect to '{loc}': {e}")))?;
                redirects += 1;
                continue;
            }
            if !(200..300).contains(&resp.status) {
                self.conn = None;
                let more = if redirect {
                    format!(" (more than {} redirects)", sh.spec.max_redirects)
                } else {
                    String::new()
                };
                return Err(Halt::Failed(format!(
                    "{what}: {} {}{more}",
                    resp.status, resp.reason
                )));
            }
            if let Some(r) = range {
                let ok = resp.status == 206 && resp.content_range.is_some_and(|(cr, _)| cr == r);
                if !ok {
                    self.conn = None;
                    return Err(Halt::Failed(format!(
                        "{what}: asked for bytes {}-{} and got status {} {}",
                        r.first,
                        r.last,
                        resp.status,
                        resp.content_range.map_or(
                            "without Content-Range".into(),
                            |(c, _)| format!("with bytes {}-{}", c.first, c.last)
                        )
                    )));
                }
            }
            self.body(sh, &resp, method == HttpMethod::Get)
                .map_err(|h| named(h, &what))?;
            self.stats.completed += 1;
            if !resp.keep_alive {
                self.conn = None;
            }
            return Ok(());
        }
    }

    /// Writes `data`; `count` adds it to the flow's counter (upload bodies).
    pub(super) fn write_all(
        &mut self,
        sh: &Shared,
        mut data: &[u8],
        count: bool,
    ) -> Result<(), Halt> {
        let mut last = Instant::now();
        let Some(c) = self.conn.as_mut() else {
            return Err(Halt::Failed("no connection".into()));
        };
        while !data.is_empty() {
            match c.stream.write(data) {
                Ok(0) => return Err(Halt::Failed("the connection closed while sending".into())),
                Ok(n) => {
                    if let Some(counter) = sh.core.counters.get(self.i).filter(|_| count) {
                        counter.add(n as u64, sh.core.now_ns());
                    }
                    data = data.get(n..).unwrap_or_default();
                    last = Instant::now();
                }
                Err(e) if retry(&e) => sh.still_waiting(last, "took")?,
                Err(e) => return Err(Halt::Failed(format!("sending: {e}"))),
            }
        }
        if let Stream::Tls(s) = &mut c.stream {
            // Push out what rustls still holds.
            let _ = s.flush();
        }
        Ok(())
    }

    /// Sends a generated body of `n` bytes, counting it.
    fn upload(&mut self, sh: &Shared, n: u64) -> Result<(), Halt> {
        let mut left = n;
        while left > 0 {
            let k = left.min(BUF as u64) as usize;
            let k = match self.budget {
                Some(0) => return Err(Halt::Cut),
                Some(b) => k.min(b.min(usize::MAX as u64) as usize),
                None => k,
            };
            if sh.over() {
                return Err(Halt::Cut);
            }
            let Some(chunk) = sh.payload.get(..k) else {
                return Err(Halt::Failed("no payload to send".into()));
            };
            self.write_all(sh, chunk, true)?;
            left -= k as u64;
            if let Some(b) = self.budget.as_mut() {
                *b -= k as u64;
            }
        }
        Ok(())
    }

    /// Reads some bytes into the buffer; `Ok(0)` at the end of the stream.
    fn read_some(&mut self, sh: &Shared) -> Result<usize, Halt> {
        let since = Instant::now();
        let Some(c) = self.conn.as_mut() else {
            return Ok(0);
        };
        loop {
            match c.stream.read(&mut self.buf) {
                Ok(n) => return Ok(n),
                Err(e) if retry(&e) => sh.still_waiting(since, "sent")?,
                Err(e) => return Err(Halt::Failed(format!("receiving: {e}"))),
            }
        }
    }

    /// Reads a response head; `None` if the connection closed before its first byte.
    pub(super) fn read_head(
        &mut self,
        sh: &Shared,
        sent: Instant,
        head_request: bool,
    ) -> Result<Option<wire::ResponseHead>, Halt> {
        let mut acc = self
            .conn
            .as_mut()
            .map(|c| std::mem::take(&mut c.pending))
            .unwrap_or_default();
        let mut first = !acc.is_empty();
        if first {
            self.ttfb_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        }
        loop {
            if !acc.is_empty() {
                match wire::parse_response(&acc, head_request) {
                    Ok(Some(h)) if h.status == 100 => {
                        acc.drain(..h.head_len);
                        continue;
                    }
                    Ok(Some(h)) => {
                        if let Some(c) = self.conn.as_mut() {
                            c.pending = acc.split_off(h.head_len);
                        }
                        return Ok(Some(h));
                    }
                    Ok(None) => {}
                    Err(e) => return Err(Halt::Failed(e.0)),
                }
            }
            let n = self.read_some(sh)?;
            if n == 0 {
                if acc.is_empty() {
                    return Ok(None);
                }
                return Err(Halt::Failed(
                    "the server closed the connection inside the response head".into(),
                ));
            }
            if !first {
                first = true;
                self.ttfb_ms.push(sent.elapsed().as_secs_f64() * 1e3);
            }
            acc.extend_from_slice(self.buf.get(..n).unwrap_or_default());
        }
    }

    /// Reads a body to its end; `count` adds its bytes to the flow (downloads).
    fn body(&mut self, sh: &Shared, h: &wire::ResponseHead, count: bool) -> Result<(), Halt> {
        let mut state = match h.body {
            BodyKind::Empty => return Ok(()),
            BodyKind::Length(0) => return Ok(()),
            BodyKind::Length(n) => Body::Length { left: n, total: n },
            BodyKind::Chunked => Body::Chunked(ChunkedDecoder::default()),
            BodyKind::UntilClose => Body::UntilClose,
        };
        let pending = self
            .conn
            .as_mut()
            .map(|c| std::mem::take(&mut c.pending))
            .unwrap_or_default();
        if !pending.is_empty() {
            let (used, done) = self.account(sh, &mut state, &pending, count)?;
            if done {
                if let Some(c) = self.conn.as_mut() {
                    c.pending = pending.get(used..).unwrap_or_default().to_vec();
                }
                return Ok(());
            }
        }
        let held = match self.conn.as_ref().map(|c| &c.stream) {
            Some(Stream::Tls(_)) => TLS_HELD,
            _ => 0,
        };
        let mut raised = match state {
            Body::Length { left, .. } if left > 4 * u64::from(BODY_LOWAT) + held => {
                self.set_lowat(BODY_LOWAT)
            }
            _ => false,
        };
        loop {
            // A body that never makes the reads wait (a fast path, a large file) must still
            // end at the run's time: the waits check it, this checks it between reads.
            if sh.over() {
                return Err(Halt::Cut);
            }
            if raised
                && matches!(state, Body::Length { left, .. } if left < u64::from(BODY_LOWAT) + held)
            {
                raised = !self.set_lowat(1);
            }
            let n = self.read_some(sh)?;
            if n == 0 {
                return match state {
                    Body::UntilClose => {
                        self.conn = None;
                        Ok(())
                    }
                    Body::Length { left, total } => Err(Halt::Failed(format!(
                        "the connection closed after {} of {total} body bytes",
                        total - left
                    ))),
                    Body::Chunked(_) => Err(Halt::Failed(
                        "the connection closed inside a chunked body".into(),
                    )),
                };
            }
            let data = std::mem::take(&mut self.buf);
            let r = self.account(sh, &mut state, data.get(..n).unwrap_or_default(), count);
            let leftover = match &r {
                Ok((used, true)) if *used < n => data.get(*used..n).unwrap_or_default().to_vec(),
                _ => Vec::new(),
            };
            self.buf = data;
            let (_, done) = r?;
            if done {
                if let Some(c) = self.conn.as_mut() {
                    c.pending = leftover;
                }
                return Ok(());
            }
        }
    }

    /// Sets the connection's receive low-water mark ([`BODY_LOWAT`]); true if it was set.
    /// Under TLS the caller allows for the body bytes TLS holds ([`TLS_HELD`]), which the
    /// socket no longer has.
    fn set_lowat(&mut self, bytes: u32) -> bool {
        let tcp = match self.conn.as_ref().map(|c| &c.stream) {
            Some(Stream::Plain(s)) => s,
            Some(Stream::Tls(s)) => &s.sock.tcp,
            None => return false,
        };
        crate::sys::set_recv_lowat(&socket2::SockRef::from(tcp), bytes).is_ok()
    }

    /// Counts the body bytes in `data`; returns the bytes used and whether the body ended.
    fn account(
        &mut self,
        sh: &Shared,
        state: &mut Body,
        data: &[u8],
        count: bool,
    ) -> Result<(usize, bool), Halt> {
        let (used, payload, done) = match state {
            Body::Length { left, .. } => {
                let k = (*left).min(data.len() as u64);
                *left -= k;
                (k as usize, k, *left == 0)
            }
            Body::Chunked(d) => {
                let s = d.feed(data).map_err(|e| Halt::Failed(e.0))?;
                (s.consumed, s.payload, s.done)
            }
            Body::UntilClose => (data.len(), data.len() as u64, false),
        };
        if count && payload > 0 {
            let take = self.budget.map_or(payload, |b| b.min(payload));
            if let Some(counter) = sh.core.counters.get(self.i) {
                counter.add(take, sh.core.now_ns());
            }
            if let Some(b) = self.budget.as_mut() {
                *b -= take;
                // A body that ends with the budget is a completed request.
                if *b == 0 && !done {
                    self.conn = None;
                    return Err(Halt::Cut);
                }
            }
        }
        Ok((used, done))
    }
}

/// Where a body stands.
enum Body {
    Length { left: u64, total: u64 },
    Chunked(ChunkedDecoder),
    UntilClose,
}
