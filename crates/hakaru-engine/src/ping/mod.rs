//! Request/response round trips: the client's pinger and the server's echo.
//!
//! Each flow has its own thread and socket. Closed loop sends the next request when the reply
//! to the last one arrives, waiting in a blocking receive (send, receive: two system calls
//! per round trip, as netperf makes; the echo makes receive, send). Over TCP, where the
//! platform lets another thread end a blocked receive ([`sys::SHUTDOWN_WAKES_BLOCKED_RECV`]),
//! those receives have no timeout, so no kernel timer is armed per round trip: a watchdog
//! thread ends them instead on a stop or a request unanswered for `--timeout` ([`watch`]). Open loop (`rate`)
//! sends request `k` at `k / rate` seconds and times its reply from that scheduled instant,
//! so a stall shows up in the percentiles instead of silently delaying later requests (no
//! coordinated omission); it waits in `poll` with a nanosecond timeout on a non-blocking
//! socket. `spin` busy-loops on non-blocking sockets at both ends. Every request
//! carries flow, sequence number and send time in the datagram header format of
//! `proto::datagram`, and the echo returns the bytes unchanged; against a stock `sockperf sr`
//! requests carry sockperf's header instead ([`Framing`]).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::{LatencyFlow, LatencyInterval, LatencySpec};
use hakaru_proto::datagram::FlowHello;

mod echo;
mod watch;

pub use self::echo::{bare_report, Echo};
use self::watch::{Cutters, Watch};
pub use crate::framing::Framing;
use crate::hist::LatencyHistogram;
use crate::sys::{self, AsRawFd, RawFd};

/// Longest wait in one blocking TCP send of a round trip (SO_SNDTIMEO): the sender then looks
/// at its stop flag and its deadline before trying again.
const SEND_WAIT: Duration = Duration::from_millis(100);

/// A flow's connected socket.
#[derive(Debug)]
pub enum PingSocket {
    /// TCP connection (TCP_NODELAY set by the caller).
    Tcp(TcpStream),
    /// Connected UDP socket.
    Udp(UdpSocket),
}

impl PingSocket {
    fn fd(&self) -> RawFd {
        match self {
            PingSocket::Tcp(s) => s.as_raw_fd(),
            PingSocket::Udp(s) => s.as_raw_fd(),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            PingSocket::Tcp(s) => s.set_nonblocking(true),
            PingSocket::Udp(s) => s.set_nonblocking(true),
        }
    }

    /// Blocking receives that give up after `t`, or never (`None`).
    fn set_blocking_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            PingSocket::Tcp(s) => {
                s.set_nonblocking(false)?;
                // A send never blocks for long either: a peer that stops reading must not
                // hold the thread (the callers retry, watching their stop flag and deadline).
                s.set_write_timeout(Some(SEND_WAIT))?;
                s.set_read_timeout(t)
            }
            PingSocket::Udp(s) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(t)
            }
        }
    }

    /// True if a blocking receive on this socket can wait with no timeout: TCP, where another
    /// thread can end the wait by shutting the receive side (UDP needs its timeout to count a
    /// lost reply).
    fn waits_forever(&self, blocking: bool) -> bool {
        blocking && self.is_tcp() && sys::SHUTDOWN_WAKES_BLOCKED_RECV
    }

    /// A second handle on a TCP socket, for the thread that ends its blocked receives.
    fn cutter(&self) -> io::Result<TcpStream> {
        match self {
            PingSocket::Tcp(s) => s.try_clone(),
            PingSocket::Udp(_) => Err(io::Error::other("no cutter for a UDP flow")),
        }
    }

    /// Ends a TCP flow in both directions (its peer sees the end; a UDP flow has none).
    fn shut(&self) {
        if let PingSocket::Tcp(s) = self {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Prepares the socket for the wait mode: SO_BUSY_POLL works inside blocking receives,
    /// everything else waits in poll (or spins) on a non-blocking socket. A blocking receive
    /// gives up after `t`, or never where [`PingSocket::waits_forever`].
    fn prepare(&self, busy_poll: Option<u32>, blocking: bool, t: Duration) -> io::Result<()> {
        if let Some(us) = busy_poll {
            sys::set_busy_poll(self.fd(), us)
                .map_err(|e| io::Error::new(e.kind(), format!("--busy-poll {us}: {e}")))?;
        }
        if blocking {
            let forever = self.waits_forever(blocking);
            self.set_blocking_timeout((!forever).then_some(t))
        } else {
            self.set_nonblocking()
        }
    }

    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            PingSocket::Tcp(s) => (&*s).write(buf),
            PingSocket::Udp(s) => s.send(buf),
        }
    }

    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            PingSocket::Tcp(s) => (&*s).read(buf),
            PingSocket::Udp(s) => s.recv(buf),
        }
    }

    fn is_tcp(&self) -> bool {
        matches!(self, PingSocket::Tcp(_))
    }
}

/// One flow handed to the pinger or the echo.
#[derive(Debug)]
pub struct PingFlow {
    /// Flow id.
    pub id: u32,
    /// Its socket.
    pub socket: PingSocket,
}

/// How the pinger runs.
#[derive(Debug, Clone)]
pub struct PingConfig {
    /// Bytes per request and reply.
    pub length: usize,
    /// Round trips started in this first part are discarded.
    pub warmup: Duration,
    /// Measured time after the warm-up.
    pub duration: Duration,
    /// Open loop: requests per second per flow.
    pub rate: Option<f64>,
    /// Busy-poll instead of sleeping.
    pub spin: bool,
    /// SO_BUSY_POLL microseconds.
    pub busy_poll: Option<u32>,
    /// A request without a reply this long is lost (UDP) or fails the flow (TCP).
    pub timeout: Duration,
    /// CPUs to pin flow threads to, round robin.
    pub affinity: Vec<usize>,
    /// Keep every sample (for --full-log).
    pub keep_samples: bool,
    /// The requests' header: hakaru's, or sockperf's for a stock `sockperf sr`.
    pub framing: Framing,
}

impl PingConfig {
    /// The pinger a latency spec asks for: its length, times, rate and waiting mode.
    pub fn for_spec(
        spec: &LatencySpec,
        affinity: Vec<usize>,
        keep_samples: bool,
        framing: Framing,
    ) -> PingConfig {
        PingConfig {
            length: spec.length.0 as usize,
            warmup: spec.warmup.0,
            duration: spec.duration.0,
            rate: spec.rate,
            spin: spec.spin,
            busy_poll: spec.busy_poll,
            timeout: spec.timeout.0,
            affinity,
            keep_samples,
            framing,
        }
    }
}

/// One timed round trip (times in nanoseconds since the pinger started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Flow id.
    pub flow: u32,
    /// Sequence number.
    pub seq: u64,
    /// When the request was sent (open loop: when it was scheduled).
    pub send_ns: u64,
    /// When the reply arrived.
    pub recv_ns: u64,
}

/// What the pinger measured.
#[derive(Debug, Clone)]
pub struct PingOutcome {
    /// All flows' round trips after the warm-up.
    pub hist: LatencyHistogram,
    /// Per-flow figures.
    pub flows: Vec<LatencyFlow>,
    /// Every sample, when kept, in flow order.
    pub samples: Vec<Sample>,
    /// Round trips discarded in the warm-up.
    pub warmup_discarded: u64,
    /// Measured seconds.
    pub seconds: f64,
    /// The first flow error, if any.
    pub error: Option<String>,
}

#[derive(Default)]
struct Tick {
    hist: LatencyHistogram,
    requests: u64,
    replies: u64,
    lost: u64,
}

struct Shared {
    cfg: PingConfig,
    start: Instant,
    stop: AtomicBool,
    left: AtomicUsize,
    ticks: Vec<Mutex<Tick>>,
    /// Per flow: what the watchdog needs to see ([`watch`]).
    watch: Vec<Watch>,
}

/// A running pinger.
pub struct Pinger {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<FlowOut>>,
    watchdog: Option<JoinHandle<()>>,
}

struct FlowOut {
    id: u32,
    hist: LatencyHistogram,
    requests: u64,
    replies: u64,
    lost: u64,
    late: u64,
    discarded: u64,
    samples: Vec<Sample>,
    error: Option<String>,
}

impl Pinger {
    /// Starts one thread per flow now.
    pub fn start(cfg: PingConfig, flows: Vec<PingFlow>) -> io::Result<Pinger> {
        // Closed loop receives in blocking calls: one system call to wait and read (and where
        // SO_BUSY_POLL busy-polls); open loop must wake for its schedule, so it waits in poll.
        let blocking = cfg.rate.is_none() && !cfg.spin;
        let mut cutters = Cutters::default();
        for (slot, f) in flows.iter().enumerate() {
            f.socket
                .prepare(cfg.busy_poll, blocking, Duration::from_millis(10))?;
            if f.socket.waits_forever(blocking) {
                cutters.add(slot, f.socket.cutter()?);
            }
        }
        let shared = Arc::new(Shared {
            start: Instant::now(),
            stop: AtomicBool::new(false),
            left: AtomicUsize::new(flows.len()),
            ticks: flows.iter().map(|_| Mutex::new(Tick::default())).collect(),
            watch: flows.iter().map(|_| Watch::default()).collect(),
            cfg,
        });
        let watchdog = match cutters.is_empty() {
            true => None,
            false => {
                let s = Arc::clone(&shared);
                Some(
                    std::thread::Builder::new()
                        .name("hakaru-ping-watch".into())
                        .stack_size(128 << 10)
                        .spawn(move || cutters.watch(&s))?,
                )
            }
        };
        let n = flows.len();
        let mut threads = Vec::with_capacity(n);
        for (i, f) in flows.into_iter().enumerate() {
            let s = Arc::clone(&shared);
            let pin =
                (!s.cfg.affinity.is_empty()).then(|| s.cfg.affinity[i % s.cfg.affinity.len()]);
            let h = std::thread::Builder::new()
                .name(format!("hakaru-ping-{i}"))
                .spawn(move || {
                    if let Some(cpu) = pin {
                        let _ = sys::pin_current_thread(cpu);
                    }
                    let out = run_flow(&s, i, f);
                    s.left.fetch_sub(1, Ordering::AcqRel);
                    out
                });
            match h {
                Ok(h) => threads.push(h),
                Err(e) => {
                    // The flows never started count as ended, so the watchdog ends too.
                    shared.stop.store(true, Ordering::Release);
                    shared.left.fetch_sub(n - i, Ordering::AcqRel);
                    return Err(e);
                }
            }
        }
        Ok(Pinger {
            shared,
            threads,
            watchdog,
        })
    }

    /// Monotonic instant the pinger started.
    pub fn started(&self) -> Instant {
        self.shared.start
    }

    /// True once every flow thread has ended.
    pub fn is_done(&self) -> bool {
        self.shared.left.load(Ordering::Acquire) == 0
    }

    /// Ends the test early (Ctrl-C); what was measured so far is kept.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    /// The round trips since the last call, all flows merged.
    pub fn take_interval(&self) -> LatencyInterval {
        self.take_interval_hist().0
    }

    /// The round trips since the last call, all flows merged, with their histogram (to add
    /// intervals up).
    pub fn take_interval_hist(&self) -> (LatencyInterval, LatencyHistogram) {
        let mut hist = LatencyHistogram::new();
        let mut out = LatencyInterval::default();
        for t in &self.shared.ticks {
            if let Ok(mut t) = t.lock() {
                let t = std::mem::take(&mut *t);
                hist.merge(&t.hist);
                out.requests += t.requests;
                out.replies += t.replies;
                out.lost += t.lost;
            }
        }
        out.rtt = hist.stats();
        (out, hist)
    }

    /// Waits for every flow and merges what they measured.
    pub fn wait(self) -> PingOutcome {
        let mut hist = LatencyHistogram::new();
        let mut flows = Vec::new();
        let mut samples = Vec::new();
        let mut discarded = 0;
        let mut error = None;
        for t in self.threads {
            let Ok(f) = t.join() else {
                error.get_or_insert_with(|| "a ping thread panicked".to_string());
                continue;
            };
            hist.merge(&f.hist);
            discarded += f.discarded;
            if error.is_none() {
                error = f.error;
            }
            flows.push(LatencyFlow {
                id: f.id,
                requests: f.requests,
                replies: f.replies,
                lost: f.lost,
                late: f.late,
                rtt: f.hist.stats(),
            });
            samples.extend(f.samples);
        }
        if let Some(w) = self.watchdog {
            let _ = w.join();
        }
        let measured = self
            .shared
            .start
            .elapsed()
            .saturating_sub(self.shared.cfg.warmup);
        PingOutcome {
            hist,
            flows,
            samples,
            warmup_discarded: discarded,
            seconds: measured.min(self.shared.cfg.duration).as_secs_f64(),
            error,
        }
    }
}

/// A flow's running state.
struct Flow<'a> {
    s: &'a Shared,
    slot: usize,
    id: u32,
    sock: PingSocket,
    req: Vec<u8>,
    rbuf: Vec<u8>,
    have: usize,
    /// The oldest request still waiting for its reply (what an opaque reply answers).
    oldest: u64,
    blocking: bool,
    out: FlowOut,
}

impl Flow<'_> {
    fn now_ns(&self) -> u64 {
        self.s.start.elapsed().as_nanos() as u64
    }

    fn warmup_ns(&self) -> u64 {
        self.s.cfg.warmup.as_nanos() as u64
    }

    /// Sends request `seq` stamped `stamp_ns`; waits (or spins) while the socket is full.
    fn send(&mut self, seq: u64, stamp_ns: u64, deadline: Instant) -> Result<(), String> {
        self.s
            .cfg
            .framing
            .write_request(&mut self.req, self.id as u16, seq, stamp_ns);
        let mut off = 0;
        while off < self.req.len() {
            match self.sock.send(&self.req[off..]) {
                Ok(n) if self.sock.is_tcp() => off += n,
                Ok(_) => off = self.req.len(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "flow {}: the peer stopped reading requests",
                            self.id
                        ));
                    }
                    if !self.s.cfg.spin {
                        sys::wait_fd(
                            self.sock.fd(),
                            sys::Interest::Write,
                            Duration::from_millis(10),
                        );
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(describe(self.id, "sending", &e)),
            }
        }
        Ok(())
    }

    /// Takes one complete reply if one has arrived: `Ok(Some(seq))`, `Ok(None)` if none yet.
    fn try_reply(&mut self) -> Result<Option<u64>, String> {
        let len = self.s.cfg.length;
        loop {
            if self.sock.is_tcp() && self.have >= len {
                let seq = self
                    .s
                    .cfg
                    .framing
                    .read_reply(&self.rbuf[..len], self.oldest);
                self.rbuf.copy_within(len..self.have, 0);
                self.have -= len;
                return match seq {
                    Some(s) => Ok(Some(s)),
                    None => Err(format!(
                        "flow {}: the server's reply answers no request (a sockperf server needs --sockperf, a hakaru server must run without it)",
                        self.id
                    )),
                };
            }
            let r = if self.sock.is_tcp() {
                let have = self.have;
                self.sock.recv(&mut self.rbuf[have..])
            } else {
                self.sock.recv(&mut self.rbuf)
            };
            match r {
                // The watchdog shut the receive side: the caller sees why.
                Ok(0) if self.sock.is_tcp() && self.s.watch[self.slot].was_cut() => {
                    return Ok(None)
                }
                Ok(0) if self.sock.is_tcp() => {
                    return Err(format!(
                        "flow {}: the server closed the connection",
                        self.id
                    ))
                }
                Ok(n) if self.sock.is_tcp() => self.have += n,
                Ok(n) => {
                    if n == len {
                        if let Some(seq) =
                            self.s.cfg.framing.read_reply(&self.rbuf[..n], self.oldest)
                        {
                            return Ok(Some(seq));
                        }
                    }
                    // A stray hello ack or a datagram of the wrong size: not a reply.
                    if FlowHello::decode(&self.rbuf[..n]).is_none() {
                        tracing::debug!("flow {}: ignored a {n}-byte datagram", self.id);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(describe(self.id, "receiving", &e)),
            }
        }
    }

    /// Records a reply to a request stamped `sent_ns`, received now.
    fn record(&mut self, seq: u64, sent_ns: u64) {
        let now = self.now_ns();
        if sent_ns < self.warmup_ns() {
            self.out.discarded += 1;
            return;
        }
        let rtt = now.saturating_sub(sent_ns);
        self.out.hist.record_ns(rtt);
        self.out.replies += 1;
        if let Ok(mut t) = self.s.ticks[self.slot].lock() {
            t.hist.record_ns(rtt);
            t.replies += 1;
        }
        if self.s.cfg.keep_samples {
            self.out.samples.push(Sample {
                flow: self.id,
                seq,
                send_ns: sent_ns,
                recv_ns: now,
            });
        }
    }

    fn count_request(&mut self, sent_ns: u64) {
        if sent_ns >= self.warmup_ns() {
            self.out.requests += 1;
            if let Ok(mut t) = self.s.ticks[self.slot].lock() {
                t.requests += 1;
            }
        }
    }

    fn count_lost(&mut self, sent_ns: u64) -> Result<(), String> {
        if self.sock.is_tcp() {
            return Err(format!(
                "flow {}: no reply within {:.3} s (--timeout)",
                self.id,
                self.s.cfg.timeout.as_secs_f64()
            ));
        }
        if sent_ns >= self.warmup_ns() {
            self.out.lost += 1;
            if let Ok(mut t) = self.s.ticks[self.slot].lock() {
                t.lost += 1;
            }
        }
        Ok(())
    }

    /// Waits for the socket to become readable, at most until `until`.
    fn idle(&self, until: Instant) {
        if self.blocking {
            // The receive itself waited (up to 10 ms).
            return;
        }
        if self.s.cfg.spin {
            std::hint::spin_loop();
            return;
        }
        let left = until.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            sys::wait_fd(
                self.sock.fd(),
                sys::Interest::Read,
                left.min(Duration::from_millis(50)),
            );
        }
    }

    fn stopped(&self) -> bool {
        self.s.stop.load(Ordering::Acquire)
    }

    /// One request outstanding at a time.
    fn closed_loop(&mut self, end: Instant) -> Result<(), String> {
        let timeout = self.s.cfg.timeout;
        let mut seq = 0u64;
        while Instant::now() < end && !self.stopped() {
            let sent_ns = self.now_ns();
            let sent_at = Instant::now();
            self.send(seq, sent_ns, sent_at + timeout)?;
            self.count_request(sent_ns);
            self.oldest = seq;
            self.s.watch[self.slot].waiting(sent_ns);
            // The reply cannot be back yet: wait first, saving a receive call per round trip
            // (send, poll, receive: the same three calls sockperf makes).
            self.idle(sent_at + timeout);
            loop {
                match self.try_reply()? {
                    Some(r) if r == seq => {
                        self.record(seq, sent_ns);
                        break;
                    }
                    // An answer to an earlier request that had been given up on.
                    Some(_) => self.out.late += 1,
                    None => {
                        // The watchdog cuts a wait on a stop or after the timeout.
                        let cut = self.s.watch[self.slot].was_cut() && !self.stopped();
                        if cut || sent_at.elapsed() >= timeout {
                            self.count_lost(sent_ns)?;
                            break;
                        }
                        if self.stopped() {
                            return Ok(());
                        }
                        self.idle(sent_at + timeout);
                    }
                }
            }
            self.s.watch[self.slot].answered();
            seq += 1;
        }
        Ok(())
    }

    /// Requests on a fixed schedule, replies timed from the schedule.
    fn open_loop(&mut self, end: Instant, rate: f64) -> Result<(), String> {
        let gap = 1e9 / rate;
        let timeout = self.s.cfg.timeout;
        let end_ns = end.duration_since(self.s.start).as_nanos() as u64;
        let mut outstanding: VecDeque<(u64, u64)> = VecDeque::new();
        let mut next = 0u64;
        loop {
            if self.stopped() {
                return Ok(());
            }
            let now = self.now_ns();
            // Send everything that is due (a stall sends the backlog at once, each request
            // still timed from its own scheduled instant).
            loop {
                let sched = (next as f64 * gap) as u64;
                if sched > now || sched >= end_ns {
                    break;
                }
                self.send(next, sched, Instant::now() + timeout)?;
                self.count_request(sched);
                outstanding.push_back((next, sched));
                next += 1;
            }
            // Bounded: each pass takes one reply that has arrived.
            loop {
                self.oldest = outstanding.front().map_or(next, |&(s, _)| s);
                let Some(seq) = self.try_reply()? else {
                    break;
                };
                match outstanding.iter().position(|&(s, _)| s == seq) {
                    Some(pos) => {
                        // Requests before it that are still missing are only late so far.
                        let (_, sched) = outstanding.remove(pos).unwrap_or((seq, 0));
                        self.record(seq, sched);
                    }
                    None => self.out.late += 1,
                }
            }
            let now = self.now_ns();
            let timeout_ns = timeout.as_nanos() as u64;
            while outstanding
                .front()
                .is_some_and(|&(_, sched)| now.saturating_sub(sched) > timeout_ns)
            {
                if let Some((_, sched)) = outstanding.pop_front() {
                    self.count_lost(sched)?;
                }
            }
            let next_sched = (next as f64 * gap) as u64;
            if next_sched >= end_ns && outstanding.is_empty() {
                return Ok(());
            }
            let wake = if next_sched < end_ns {
                self.s.start + Duration::from_nanos(next_sched)
            } else {
                Instant::now() + Duration::from_millis(10)
            };
            self.idle(wake);
        }
    }
}

fn run_flow(s: &Shared, slot: usize, f: PingFlow) -> FlowOut {
    let len = s.cfg.length;
    let mut flow = Flow {
        s,
        slot,
        id: f.id,
        sock: f.socket,
        req: (0..len).map(|i| b'a' + (i % 26) as u8).collect(),
        rbuf: vec![0u8; (len * 64).max(65_536)],
        have: 0,
        oldest: 0,
        blocking: s.cfg.rate.is_none() && !s.cfg.spin,
        out: FlowOut {
            id: f.id,
            hist: LatencyHistogram::new(),
            requests: 0,
            replies: 0,
            lost: 0,
            late: 0,
            discarded: 0,
            samples: Vec::new(),
            error: None,
        },
    };
    let end = s.start + s.cfg.warmup + s.cfg.duration;
    let r = match s.cfg.rate {
        Some(rate) => {
            sys::fine_timers();
            flow.open_loop(end, rate)
        }
        None => flow.closed_loop(end),
    };
    flow.out.error = r.err();
    flow.out
}

fn describe(id: u32, verb: &str, e: &io::Error) -> String {
    let what = match e.kind() {
        io::ErrorKind::ConnectionReset => "connection reset by the server (did it exit?)".into(),
        io::ErrorKind::ConnectionRefused => {
            "the server's port is closed (ICMP port unreachable; did it exit?)".into()
        }
        io::ErrorKind::BrokenPipe => "the server closed the connection".into(),
        _ => e.to_string(),
    };
    format!("flow {id}: {verb}: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::SideConfig;

    fn pair_udp() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        (a, b)
    }

    fn cfg(rate: Option<f64>) -> PingConfig {
        PingConfig {
            length: 14,
            warmup: Duration::from_millis(50),
            duration: Duration::from_millis(300),
            rate,
            spin: false,
            busy_poll: None,
            timeout: Duration::from_millis(200),
            affinity: Vec::new(),
            keep_samples: true,
            framing: Framing::Hakaru,
        }
    }

    #[test]
    fn udp_closed_loop_against_echo() {
        let (c, s) = pair_udp();
        let cfg0 = SideConfig::for_spec(
            hakaru_model::End::Server,
            &hakaru_model::TestSpec::Latency(hakaru_model::LatencySpec::default()),
            Vec::new(),
            None,
        );
        let echo = Echo::start(
            cfg0,
            vec![PingFlow {
                id: 0,
                socket: PingSocket::Udp(s),
            }],
            false,
            None,
        )
        .unwrap();
        let p = Pinger::start(
            cfg(None),
            vec![PingFlow {
                id: 0,
                socket: PingSocket::Udp(c),
            }],
        )
        .unwrap();
        let out = p.wait();
        echo.stop();
        let rep = echo.wait();
        assert_eq!(rep.send_mode, "echo");
        assert!(out.error.is_none(), "{:?}", out.error);
        assert!(out.hist.len() > 10);
        assert_eq!(out.samples.len() as u64, out.hist.len());
        assert_eq!(out.flows[0].replies, out.hist.len());
        assert_eq!(out.flows[0].lost, 0);
        assert!(out.warmup_discarded > 0);
    }

    fn pair_tcp() -> (TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn echo_cfg() -> SideConfig {
        SideConfig::for_spec(
            hakaru_model::End::Server,
            &hakaru_model::TestSpec::Latency(hakaru_model::LatencySpec::default()),
            Vec::new(),
            None,
        )
    }

    /// Runs `f` on a thread and gives its result if it returns within `limit`.
    fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit).expect("did not end in time")
    }

    /// Closed-loop TCP receives wait with no timeout where the platform lets the watchdog end
    /// them: a stop still ends the pinger at once, and the echo's stop ends its threads while
    /// the client's connection is still open.
    #[test]
    fn tcp_closed_loop_stops_while_waiting_without_timeouts() {
        let (c, s) = pair_tcp();
        let echo = Echo::start(
            echo_cfg(),
            vec![PingFlow {
                id: 0,
                socket: PingSocket::Tcp(s),
            }],
            false,
            None,
        )
        .unwrap();
        let cfg = PingConfig {
            duration: Duration::from_secs(30),
            timeout: Duration::from_secs(30),
            ..cfg(None)
        };
        let keep = c.try_clone().unwrap();
        if sys::SHUTDOWN_WAKES_BLOCKED_RECV {
            assert_eq!(keep.read_timeout().unwrap(), None);
        }
        let p = Pinger::start(
            cfg,
            vec![PingFlow {
                id: 0,
                socket: PingSocket::Tcp(c),
            }],
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        p.stop();
        let out = within(Duration::from_secs(5), move || p.wait());
        assert!(out.error.is_none(), "{:?}", out.error);
        assert!(out.hist.len() > 10, "{}", out.hist.len());
        // The client's socket stays open: only the stop can end the echo's blocked receive.
        let echoed = echo.echoed();
        echo.stop();
        let rep = within(Duration::from_secs(5), move || echo.wait());
        assert_eq!(rep.send_mode, "echo");
        assert!(echoed >= out.flows[0].replies);
        drop(keep);
    }

    /// A closed-loop TCP pinger (flow `id`, `timeout`) towards a peer that never answers,
    /// and that peer's socket (kept open by the caller).
    fn silent_pinger(id: u32, timeout: Duration) -> (Pinger, TcpStream) {
        let (c, silent) = pair_tcp();
        let cfg = PingConfig {
            duration: Duration::from_secs(30),
            timeout,
            ..cfg(None)
        };
        let flows = vec![PingFlow {
            id,
            socket: PingSocket::Tcp(c),
        }];
        (Pinger::start(cfg, flows).unwrap(), silent)
    }

    /// A TCP reply that never comes fails the flow after --timeout, not never.
    #[test]
    fn tcp_reply_that_never_comes_fails_after_the_timeout() {
        let t0 = Instant::now();
        let (p, silent) = silent_pinger(7, Duration::from_millis(200));
        let out = within(Duration::from_secs(5), move || p.wait());
        let e = out.error.expect("a flow error");
        assert!(e.contains("flow 7: no reply within 0.200 s"), "{e}");
        assert!(t0.elapsed() >= Duration::from_millis(200));
        drop(silent);
    }

    /// A stop ends a wait for a reply that has not come, and the flow ends without an error.
    #[test]
    fn tcp_stop_ends_a_wait_for_a_missing_reply() {
        let (p, silent) = silent_pinger(0, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(200));
        p.stop();
        let out = within(Duration::from_secs(5), move || p.wait());
        assert!(out.error.is_none(), "{:?}", out.error);
        assert_eq!(out.flows[0].replies, 0);
        drop(silent);
    }

    /// Open loop times each reply from its scheduled send: an echo that stalls for 100 ms
    /// shows up as round trips of about 100 ms, not hidden behind a delayed send.
    #[test]
    fn open_loop_shows_a_stall() {
        let (c, s) = pair_udp();
        let server = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let t0 = Instant::now();
            let mut stalled = false;
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            while t0.elapsed() < Duration::from_millis(800) {
                if let Ok(n) = s.recv(&mut buf) {
                    if !stalled && t0.elapsed() > Duration::from_millis(150) {
                        std::thread::sleep(Duration::from_millis(100));
                        stalled = true;
                    }
                    let _ = s.send(&buf[..n]);
                }
            }
        });
        // 200 requests a second: a slow echo (Wine on a slow day answered 1000 a second
        // too late to catch up, p50 73 ms) still drains the stall's queue between requests.
        let p = Pinger::start(
            PingConfig {
                duration: Duration::from_millis(400),
                ..cfg(Some(200.0))
            },
            vec![PingFlow {
                id: 0,
                socket: PingSocket::Udp(c),
            }],
        )
        .unwrap();
        let out = p.wait();
        server.join().unwrap();
        let st = out.hist.stats();
        // About 20 of ~80 requests queued behind the stall: p50 stays low, max near 100 ms.
        assert!(st.max_us > 80_000.0, "{st:?}");
        assert!(st.p99_us > 20_000.0, "{st:?}");
        assert!(st.p50_us < 20_000.0, "{st:?}");
    }

    #[test]
    fn udp_timeouts_count_lost_replies() {
        let (c, _silent) = pair_udp();
        let p = Pinger::start(
            PingConfig {
                warmup: Duration::ZERO,
                duration: Duration::from_millis(250),
                timeout: Duration::from_millis(50),
                ..cfg(None)
            },
            vec![PingFlow {
                id: 0,
                socket: PingSocket::Udp(c),
            }],
        )
        .unwrap();
        let out = p.wait();
        assert!(out.error.is_none());
        assert_eq!(out.hist.len(), 0);
        assert!(out.flows[0].lost >= 3, "{:?}", out.flows[0]);
        assert_eq!(out.flows[0].lost, out.flows[0].requests);
    }
}
