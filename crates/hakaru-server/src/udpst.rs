//! The udpst port (`--udpst-port`): serves stock OB-UDPST clients (`udpst -u`, `udpst -d`,
//! RFC 9946 protocol version 20), one connection per setup request, with authentication
//! (mode 1: signed control PDUs) when the server has keys.
//!
//! The control port answers setup requests (`proto::udpst`): a valid one from an allowed
//! address that the admission lets in gets a new UDP socket (the test port) and a thread that
//! sends the null request, takes the test activation from that same address only, and runs
//! the test through `session::udpst` (upstream: count load, send status feedback every trial
//! interval; downstream: send load at the machine's sending-rate row, read status feedback).
//! Garbage and datagrams from addresses that never set up a test get no answer at all (no
//! reflection); a setup request the server refuses gets the RFC's error response, which is
//! never larger than the request.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_proto::udpst::auth::{self, Keys};
use hakaru_proto::udpst::{self as u, Activation, LoadHdr, SetupCode, SetupRequest, Status};
use hakaru_session::udpst::{Dir, Limits, UdpstTest, Wall};
use hakaru_session::udpst_pace::{self, Pacer};

use hakaru_engine::sys::{self, AsRawFd};

use crate::Ctx;

/// How often blocked calls come back to check for shutdown.
const TICK: Duration = Duration::from_millis(200);
/// A test port that gets no activation within this long is closed.
const ACTIVATION_WAIT: Duration = Duration::from_secs(3);
/// Most connections one client may ask for in one setup (the reference's maximum).
const MAX_MC_COUNT: u8 = 24;
/// Most datagrams one sendmmsg call of the downstream sender carries.
const MAX_BATCH: usize = 256;
/// Room for one sendmmsg call's datagrams (at most 65535 bytes each).
const BATCH_BYTES: usize = 1 << 20;
/// Most bytes of one GSO message (the UDP length field's room, less the headers).
const GSO_BYTES: usize = 65_000;
/// SO_SNDBUF and SO_RCVBUF asked for on a test socket (the reference's default, 1,024,000
/// bytes; the kernel doubles it and caps it at net.core.wmem_max / rmem_max).
const TEST_SOCKET_BUF: usize = 1_024_000;
/// Most load datagrams one recvmmsg call of the upstream receiver takes (the reference's
/// RECVMMSG_SIZE: a receiver sharing a CPU with its sender drains the buffer in one call).
const RECV_BATCH: usize = 256;

/// The keys a udpst server checks setup requests with: the reference's key file (`KEYID,KEY`
/// lines: the request's key ID picks one) and one key for any ID (`-a`); with neither, a
/// signed request gets "authentication not configured", and with either an unsigned one gets
/// "authentication required".
#[derive(Clone, Default)]
pub struct UdpstKeys {
    /// Keys by key ID (`--udpst-key-file`).
    pub by_id: Vec<(u8, String)>,
    /// The key tried when the ID has none in the file, or its key fails (`--udpst-key`).
    pub any: Option<String>,
}

impl std::fmt::Debug for UdpstKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UdpstKeys({} by id, {} for any)",
            self.by_id.len(),
            u8::from(self.any.is_some())
        )
    }
}

impl UdpstKeys {
    /// Longest key (characters), as the reference's `-a`.
    pub const MAX_KEY_LEN: usize = auth::MAX_KEY_LEN;

    /// The keys from a key file's text (the reference's format) and a key for any ID.
    pub fn new(any: Option<String>, file_text: Option<&str>) -> Result<UdpstKeys, String> {
        if let Some(k) = &any {
            if k.is_empty() || k.len() > auth::MAX_KEY_LEN {
                return Err(format!(
                    "a udpst key has 1 to {} characters, this one {}",
                    auth::MAX_KEY_LEN,
                    k.len()
                ));
            }
        }
        let by_id = match file_text {
            None => Vec::new(),
            Some(t) => auth::parse_key_file(t).map_err(|e| e.to_string())?,
        };
        Ok(UdpstKeys { by_id, any })
    }

    /// Whether the server has any key (and so requires authentication).
    pub fn any_key(&self) -> bool {
        self.any.is_some() || !self.by_id.is_empty()
    }

    /// Checks a signed setup request: the keys of its test, or the refusal and why.
    fn check(&self, req: &SetupRequest, now: u32) -> Result<(Keys, u8), (SetupCode, String)> {
        let (time, id) = auth::stamp(&req.raw, auth::SETUP)
            .ok_or((SetupCode::AuthFail, "no authentication fields".to_string()))?;
        let candidates = self
            .by_id
            .iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, k)| k)
            .chain(self.any.as_ref());
        let keys = candidates
            .map(|k| auth::derive(k.as_bytes(), time))
            .find(|k| auth::verify(&req.raw, auth::SETUP, &k.client))
            .ok_or((
                SetupCode::AuthFail,
                format!("the digest does not verify under key ID {id}"),
            ))?;
        let skew = i64::from(time) - i64::from(now);
        if skew.abs() > auth::TIME_WINDOW_S {
            return Err((
                SetupCode::AuthTime,
                format!(
                    "timestamp {skew:+} s from this clock (at most {} s)",
                    auth::TIME_WINDOW_S
                ),
            ));
        }
        Ok((keys, id))
    }
}

/// The bound udpst control port.
pub struct UdpstPort {
    sock: UdpSocket,
}

impl UdpstPort {
    /// Binds the control port on `ip`.
    pub fn bind(ip: IpAddr, port: u16) -> io::Result<UdpstPort> {
        Ok(UdpstPort {
            sock: UdpSocket::bind(SocketAddr::new(ip, port))?,
        })
    }

    /// The control port's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Serves the control port on its own thread until shutdown.
    pub(crate) fn spawn(self, ctx: Arc<Ctx>) -> io::Result<std::thread::JoinHandle<()>> {
        self.sock.set_read_timeout(Some(TICK))?;
        std::thread::Builder::new()
            .name("hakaru-udpst".into())
            .spawn(move || serve(&ctx, &self.sock))
    }
}

fn wall() -> Wall {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as u32, d.subsec_nanos())
}

fn serve(ctx: &Arc<Ctx>, sock: &UdpSocket) {
    let mut buf = [0u8; 2048];
    while !ctx.shutdown.load(Ordering::Acquire) {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue, // timeout, or an ICMP error from an earlier send
        };
        if !ctx.cfg.acl.permits(peer.ip()) {
            ctx.denied.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let req = match SetupRequest::parse(buf.get(..n).unwrap_or_default()) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("udpst: ignored datagram from {peer}: {e}");
                continue;
            }
        };
        if let Some(reply) = setup(ctx, &req, peer) {
            let _ = sock.send_to(&reply, peer);
        }
    }
}

/// A request's authentication mode that this server's keys do not allow, and why.
fn auth_mismatch(mode: u8, keyed: bool) -> Option<(SetupCode, String)> {
    if mode != 0 && !keyed {
        return Some((
            SetupCode::AuthNotConfigured,
            format!(
                "authentication mode {mode} asked for; this server has no udpst keys (--udpst-key)"
            ),
        ));
    }
    if mode == 0 && keyed {
        return Some((
            SetupCode::AuthRequired,
            "no authentication; this server requires it (--udpst-key)".to_string(),
        ));
    }
    (mode > auth::MODE_CONTROL).then(|| {
        (
            SetupCode::AuthInvalid,
            format!("authentication mode {mode} (this server knows 1)"),
        )
    })
}

/// Answers one setup request: the response to send (always the request's size).
fn setup(ctx: &Arc<Ctx>, req: &SetupRequest, peer: SocketAddr) -> Option<Vec<u8>> {
    let now = wall().0;
    let mut signer: Option<(Keys, u8)> = None;
    let sign = |mut r: Vec<u8>, signer: &Option<(Keys, u8)>| {
        match signer {
            Some((k, id)) => auth::sign(&mut r, auth::SETUP, &k.server, *id, now),
            None => auth::clear(&mut r, auth::SETUP),
        }
        r
    };
    let refuse = |code: SetupCode, why: String, signer: &Option<(Keys, u8)>| {
        tracing::warn!("udpst: refused setup request from {peer}: {why}");
        Some(sign(req.response(code, 0), signer))
    };
    let keys = &ctx.cfg.udpst_keys;
    if req.auth_mode == auth::MODE_CONTROL && keys.any_key() {
        match keys.check(req, now) {
            Ok(k) => signer = Some(k),
            Err((code, why)) => return refuse(code, format!("authentication: {why}"), &None),
        }
    }
    let refuse = |code: SetupCode, why: String| refuse(code, why, &signer);
    if req.version != u::PROTOCOL_VER {
        return refuse(
            SetupCode::BadVersion,
            format!(
                "protocol version {} (this server speaks {})",
                req.version,
                u::PROTOCOL_VER
            ),
        );
    }
    if req.mc_count == 0 || req.mc_count > MAX_MC_COUNT || req.mc_index >= req.mc_count {
        return refuse(
            SetupCode::BadMultiConn,
            format!(
                "connection {} of {} (at most {MAX_MC_COUNT})",
                req.mc_index, req.mc_count
            ),
        );
    }
    if let Some((code, why)) = auth_mismatch(req.auth_mode, keys.any_key()) {
        return refuse(code, why);
    }
    if let Some(max) = ctx.cfg.udpst_max_mbps {
        if u32::from(req.max_bandwidth) > max {
            return refuse(
                SetupCode::CapacityExceeded,
                format!(
                    "{} Mbit/s required, --udpst-max-rate allows {max}",
                    req.max_bandwidth
                ),
            );
        }
    }
    let slot = match ctx.admission.test(peer.ip(), 1) {
        Ok(s) => s,
        Err(why) => return refuse(SetupCode::ConnFail, why),
    };
    let local = SocketAddr::new(ctx.udpst_ip(), 0);
    let test = match UdpSocket::bind(local) {
        Ok(s) => s,
        Err(e) => return refuse(SetupCode::ConnFail, format!("no test socket: {e}")),
    };
    // The reference's socket buffers: a top row's burst (100 jumbo datagrams every 100 us)
    // overflows the kernel's default and reads as loss (docs/performance-notes.md, section 10).
    let sref = socket2::SockRef::from(&test);
    let _ = sref.set_send_buffer_size(TEST_SOCKET_BUF);
    let _ = sref.set_recv_buffer_size(TEST_SOCKET_BUF);
    let port = test.local_addr().map(|a| a.port()).unwrap_or(0);
    let jumbo = req.modifiers & u::MOD_JUMBO != 0;
    let trad = req.modifiers & u::MOD_TRADITIONAL != 0;
    let version = req.version;
    let test_keys = signer.clone();
    let ctx2 = Arc::clone(ctx);
    ctx.threads.fetch_add(1, Ordering::AcqRel);
    let spawned = std::thread::Builder::new()
        .name("hakaru-udpst-test".into())
        .spawn(move || {
            let _slot = slot;
            let how = TestSetup {
                peer,
                version,
                jumbo,
                trad,
                keys: test_keys,
            };
            if let Err(e) = run_test(&ctx2, &test, &how) {
                tracing::warn!("udpst: test with {peer} failed: {e}");
            }
            ctx2.threads.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        ctx.threads.fetch_sub(1, Ordering::AcqRel);
        return refuse(SetupCode::ConnFail, format!("no test thread: {e}"));
    }
    Some(sign(req.response(SetupCode::Ack, port), &signer))
}

fn limits(ctx: &Ctx, jumbo: bool, trad: bool) -> Limits {
    let max_duration_s = ctx
        .cfg
        .max_duration
        .map_or(3600, |d| d.as_secs().clamp(5, 3600) as u16);
    let (table, _) = u::sending_rates(jumbo, trad);
    let cap_bps = [
        ctx.cfg.max_rate,
        ctx.cfg.udpst_max_mbps.map(|m| f64::from(m) * 1e6),
    ]
    .into_iter()
    .flatten()
    .fold(f64::INFINITY, f64::min);
    let max_row = table
        .iter()
        .rposition(|r| r.l3_bps() <= cap_bps)
        .unwrap_or(0);
    Limits {
        max_duration_s,
        max_row,
    }
}

/// What a setup request settled for its test.
struct TestSetup {
    peer: SocketAddr,
    version: u16,
    jumbo: bool,
    trad: bool,
    /// The test's keys and key ID when the setup was signed.
    keys: Option<(Keys, u8)>,
}

impl TestSetup {
    /// Whether an activation request comes from the test's client: signed with its key and
    /// within the time window when the setup was signed.
    fn trusts(&self, pdu: &[u8]) -> Result<(), &'static str> {
        let Some((k, _)) = &self.keys else {
            return Ok(());
        };
        if !auth::verify(pdu, auth::ACTIVATION, &k.client) {
            return Err("authentication failure");
        }
        let (time, _) = auth::stamp(pdu, auth::ACTIVATION).unwrap_or_default();
        if (i64::from(time) - i64::from(wall().0)).abs() > auth::TIME_WINDOW_S {
            return Err("authentication time outside the window");
        }
        Ok(())
    }

    /// Signs a PDU the server sends (null request, activation response), or clears its
    /// authentication fields.
    fn sign(&self, pdu: &mut [u8], at: auth::AuthAt) {
        match &self.keys {
            Some((k, id)) => auth::sign(pdu, at, &k.server, *id, wall().0),
            None => auth::clear(pdu, at),
        }
    }
}

/// One test: null request, activation, then the test until it ends.
fn run_test(ctx: &Ctx, sock: &UdpSocket, how: &TestSetup) -> io::Result<()> {
    let (peer, jumbo, trad) = (how.peer, how.jumbo, how.trad);
    let mut null = u::null_request(how.version);
    how.sign(&mut null, auth::NULL);
    sock.send_to(&null, peer)?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = vec![0u8; 65536];
    let until = Instant::now() + ACTIVATION_WAIT;
    let (act, from) = loop {
        if Instant::now() >= until || ctx.shutdown.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no test activation within 3 s",
            ));
        }
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if from.ip() != peer.ip() {
            continue; // only the address that set the test up may activate it
        }
        let pdu = buf.get(..n).unwrap_or_default();
        match Activation::parse(pdu) {
            Ok(a) => match how.trusts(pdu) {
                Ok(()) => break (a, from),
                Err(why) => tracing::warn!("udpst: ignored test activation from {from}: {why}"),
            },
            Err(e) => tracing::debug!("udpst: ignored datagram from {from}: {e}"),
        }
    };
    sock.connect(from)?;
    let (mut t, mut resp) =
        UdpstTest::new(act, jumbo, trad, limits(ctx, jumbo, trad), Instant::now());
    how.sign(&mut resp, auth::ACTIVATION);
    sock.send(&resp)?;
    let a = t.activation();
    tracing::info!(
        "udpst: {} test from {from} for {} s (trial {} ms, algorithm {})",
        if t.dir == Dir::Up {
            "upstream"
        } else {
            "downstream"
        },
        a.test_int_time,
        a.trial_int,
        if a.rate_adj_algo == 1 { "C" } else { "B" },
    );
    match t.dir {
        Dir::Up => upstream(ctx, sock, &mut t)?,
        // A dual-stack socket sees IPv4 clients as ::ffff:a.b.c.d: their datagrams carry
        // IPv4 headers, so the sizes are IPv4's (20 bytes more payload than over IPv6).
        Dir::Down => downstream(ctx, sock, &mut t, u::ipv6_on_wire(from))?,
    }
    tracing::info!(
        "udpst: test from {from} ended at sending-rate row {}",
        t.row()
    );
    Ok(())
}

/// Upstream: load datagrams are taken up to [`RECV_BATCH`] per recvmmsg call, only their
/// headers copied (the machine counts the size the header names, as the stock server does
/// with MSG_TRUNC).
fn upstream(ctx: &Ctx, sock: &UdpSocket, t: &mut UdpstTest) -> io::Result<()> {
    sock.set_read_timeout(Some(Duration::from_millis(2)))?;
    let mut batch = sys::RecvBatch::new(RECV_BATCH, u::LOAD_HDR_LEN);
    while !t.ended() && !ctx.shutdown.load(Ordering::Acquire) {
        if let Ok(n) = sys::recv_batch(sock.as_raw_fd(), &mut batch, true) {
            let (now, stamp) = (Instant::now(), wall());
            for i in 0..n {
                match LoadHdr::parse(batch.data(i)) {
                    Ok(h) => t.on_load(&h, now, stamp),
                    Err(e) => tracing::debug!("udpst: ignored datagram: {e}"),
                }
            }
        }
        if let Some(s) = t.on_tick(Instant::now(), wall()) {
            let _ = sock.send(&s);
        }
    }
    Ok(())
}

/// The downstream sender's buffers and its GSO state.
struct Burst {
    /// The datagrams of one sendmmsg call, back to back.
    batch: Vec<u8>,
    /// The messages of the call: start, end and datagrams in each.
    msgs: Vec<(usize, usize, usize)>,
    /// The socket's UDP_SEGMENT size now (0: off), or `None` once GSO failed.
    gso: Option<u16>,
    /// The call's largest datagram size, and how many of them one message carries.
    seg: usize,
    per_msg: usize,
    /// Datagrams of the largest size in the last message so far.
    run: usize,
}

impl Burst {
    fn new() -> Burst {
        Burst {
            batch: vec![0u8; BATCH_BYTES],
            msgs: Vec::with_capacity(MAX_BATCH),
            gso: Some(0),
            seg: 0,
            per_msg: 1,
            run: 0,
        }
    }

    /// Starts a call whose largest datagram is `seg` bytes: the socket's segment size is set
    /// to it when it changes, and up to 64 segments and 64 KB of it make one GSO message.
    fn start(&mut self, fd: sys::RawFd, seg: usize) {
        self.msgs.clear();
        self.seg = seg;
        self.per_msg = 1;
        self.run = 0;
        if let Some(cur) = self.gso {
            let want = u16::try_from(seg).unwrap_or(0);
            if want != cur && sys::udp_set_gso(fd, want).is_err() {
                self.gso = None;
            } else {
                self.gso = Some(want);
                self.per_msg = (GSO_BYTES / seg.max(1)).clamp(1, sys::MAX_GSO_SEGMENTS);
            }
        }
    }

    /// Room for the next datagram of `len` bytes: it extends the last message when both are
    /// of the largest size and the message has room, else it opens a message of its own.
    fn place(&mut self, len: usize) -> Option<&mut [u8]> {
        let start = self.msgs.last().map_or(0, |m| m.1);
        let extend = len == self.seg && self.run > 0 && self.run < self.per_msg;
        let slot = self.batch.get_mut(start..start + len)?;
        match self.msgs.last_mut() {
            Some(m) if extend => {
                m.1 = start + len;
                m.2 += 1;
                self.run += 1;
            }
            _ => {
                self.msgs.push((start, start + len, 1));
                self.run = usize::from(len == self.seg);
            }
        }
        Some(slot)
    }
}

/// Sends a burst's datagrams with as few sendmmsg calls as the batch's room allows and runs
/// of equal size as GSO messages (the stock server does both). Datagrams the socket does not
/// take are not sent at all: their sequence numbers are used again (`unsent`), and the rest
/// of the burst is dropped, as a full socket buffer means the sender is ahead of the kernel.
fn send_burst(sock: &UdpSocket, t: &mut UdpstTest, b: &mut Burst, sizes: &[u32]) {
    let fd = sock.as_raw_fd();
    let mut rest = sizes;
    while !rest.is_empty() {
        // The datagrams that fit in the batch, and the largest of them.
        let (mut count, mut room, mut seg) = (0, 0, 0);
        for &s in rest.iter().take(MAX_BATCH) {
            let len = (s as usize).clamp(u::LOAD_HDR_LEN, u16::MAX as usize);
            if room + len > BATCH_BYTES {
                break;
            }
            (count, room, seg) = (count + 1, room + len, seg.max(len));
        }
        if count == 0 {
            return;
        }
        b.start(fd, seg);
        // One header per sendmmsg call; each datagram gets its own sequence number and size.
        let first = t.next_load(0, Instant::now(), wall());
        let template = first.to_bytes();
        let mut seq = Some(first.seq);
        for &s in rest.iter().take(count) {
            let len = (s as usize).clamp(u::LOAD_HDR_LEN, u16::MAX as usize);
            let Some(slot) = b.place(len) else {
                break;
            };
            let n = seq.take().unwrap_or_else(|| t.next_seq());
            LoadHdr::stamp(&template, n, len as u16, slot);
        }
        if seq.is_some() {
            t.unsent(); // not even the first datagram was placed
        }
        let placed: usize = b.msgs.iter().map(|m| m.2).sum();
        let slices: Vec<IoSlice<'_>> = b
            .msgs
            .iter()
            .map(|&(s, e, _)| IoSlice::new(b.batch.get(s..e).unwrap_or_default()))
            .collect();
        let sent_msgs = match sys::send_batch(fd, &slices, false) {
            Ok(k) => k,
            Err(e) => {
                if sys::is_gso_refused(&e) && b.gso.is_some_and(|g| g > 0) {
                    // A device that cannot segment: plain datagrams from now on.
                    let _ = sys::udp_set_gso(fd, 0);
                    b.gso = None;
                }
                0
            }
        };
        let sent: usize = b.msgs.iter().take(sent_msgs).map(|m| m.2).sum();
        for _ in sent..placed {
            t.unsent();
        }
        if sent < placed || placed == 0 {
            return;
        }
        rest = rest.get(placed..).unwrap_or_default();
    }
}

// hot loop: the downstream sender's load (`session::udpst_pace`) and the status feedback.
// Between bursts the thread waits on the socket until the next one is due, so a status PDU
// (every 50 ms) is read when it comes and no wake-up costs a receive that finds nothing.
fn downstream(ctx: &Ctx, sock: &UdpSocket, t: &mut UdpstTest, v6: bool) -> io::Result<()> {
    sock.set_nonblocking(true)?;
    let mut pacer = Pacer::new(
        Instant::now() + Duration::from_millis(5),
        u64::from(wall().1),
        udpst_pace::CATCH_UP_TIGHT,
    );
    let mut rx = [0u8; 512];
    let mut sizes = Vec::with_capacity(128);
    let mut burst = Burst::new();
    let mut wait = sys::PollSet::new();
    wait.push(sock.as_raw_fd(), sys::Interest::Read);
    let mut readable = true;
    sys::tighten_timer_slack();
    while !t.ended() && !ctx.shutdown.load(Ordering::Acquire) {
        sizes.clear();
        pacer.due(&t.rate(), Instant::now(), v6, t.stopping(), &mut sizes);
        send_burst(sock, t, &mut burst, &sizes);
        while let Some(Ok(n)) = readable.then(|| sock.recv(&mut rx)) {
            match Status::parse(rx.get(..n).unwrap_or_default()) {
                Ok(s) => t.on_status(&s, Instant::now()),
                Err(e) => tracing::debug!("udpst: ignored datagram: {e}"),
            }
        }
        let _ = t.on_tick(Instant::now(), wall());
        let wake = pacer.next_wake();
        let now = Instant::now();
        readable = if wake > now {
            wait.wait((wake - now).min(Duration::from_millis(5)));
            wait.ready(0)
        } else {
            true
        };
    }
    Ok(())
}

impl Ctx {
    /// The address test sockets bind to: the server's own.
    fn udpst_ip(&self) -> IpAddr {
        self.udp_addr.ip()
    }
}
