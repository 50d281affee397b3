//! TCP bulk transfer at one end of a test: worker threads over the flows' sockets, an interval
//! ticker, and the end-of-test [`SideReport`].
//!
//! Threading: one worker per CPU (or per listed CPU with affinity), each owning a share of the
//! flows. Sockets are non-blocking: a worker tries every flow it owns and sleeps in `poll` only
//! when none could move data, so one worker with one flow behaves like a blocking loop and one
//! worker with 500 flows still serves them all. Counters are per-flow atomics read by the ticker.

use std::io;
use std::net::{Shutdown, TcpStream};
#[cfg(unix)]
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::{
    End, FlowDir, FlowSide, FlowTick, IntervalSample, Role, SideReport, TcpInfo, TcpTick,
};

use crate::counters::{CounterSnapshot, FlowCounters};
use crate::sys;

/// One data connection handed to a side, with what it must do.
#[derive(Debug)]
pub struct FlowSocket {
    /// Flow id (unique within the test).
    pub id: u32,
    /// Direction the flow carries data.
    pub dir: FlowDir,
    /// This end's role on it.
    pub role: Role,
    /// The connected socket.
    pub stream: TcpStream,
    /// Exact bytes to send (senders in -n/-k tests); `None` sends until the deadline.
    pub quota: Option<u64>,
}

/// How one end runs its flows.
#[derive(Debug, Clone)]
pub struct SideConfig {
    /// Which end this is.
    pub end: End,
    /// Bytes per write and per read.
    pub length: usize,
    /// Receive with MSG_TRUNC (no copy).
    pub discard: bool,
    /// Send with sendfile from an in-memory file (no copy).
    pub zerocopy: bool,
    /// CPUs to pin workers to, round robin; empty for none.
    pub affinity: Vec<usize>,
    /// Interval between samples; zero for none.
    pub interval: Duration,
    /// Warm-up not counted in the totals.
    pub omit: Duration,
    /// Sending time after the warm-up; `None` when every sender has a quota.
    pub duration: Option<Duration>,
    /// A flow that moves nothing for this long fails.
    pub stall_timeout: Duration,
    /// Interface whose counters to report.
    pub iface: Option<String>,
}

/// Errors starting a side.
#[derive(Debug, thiserror::Error)]
pub enum SideError {
    /// A socket could not be prepared.
    #[error("preparing data socket of flow {flow}: {source}")]
    Socket {
        /// Flow id.
        flow: u32,
        /// OS error.
        #[source]
        source: io::Error,
    },
    /// The sendfile source could not be created.
    #[error("-Z/--zerocopy: creating the in-memory sendfile source: {0}")]
    ZeroCopy(#[source] io::Error),
    /// A worker thread could not be started.
    #[error("starting a worker thread: {0}")]
    Thread(#[source] io::Error),
}

type DoneFn = Box<dyn FnOnce() + Send>;

struct FlowMeta {
    id: u32,
    dir: FlowDir,
    role: Role,
    quota: Option<u64>,
}

struct Shared {
    start: Instant,
    cfg: SideConfig,
    streams: Vec<TcpStream>,
    meta: Vec<FlowMeta>,
    counters: Vec<FlowCounters>,
    stop_send: AtomicBool,
    abort: AtomicBool,
    remaining: AtomicUsize,
    /// Nanoseconds since start when the last flow finished.
    end_ns: AtomicU64,
    errors: Mutex<Vec<Option<String>>>,
    final_info: Mutex<Vec<Option<TcpInfo>>>,
    on_done: Mutex<Option<DoneFn>>,
    wake: (Mutex<()>, Condvar),
    pattern: Vec<u8>,
    zc: Option<sys::ZeroCopySource>,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn finish_flow(&self, i: usize, error: Option<String>) {
        if let Some(e) = error {
            if let Ok(mut errs) = self.errors.lock() {
                errs[i] = Some(e);
            }
            let _ = self.streams[i].shutdown(Shutdown::Both);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.end_ns.store(self.now_ns(), Ordering::Release);
            self.notify();
            let cb = self.on_done.lock().ok().and_then(|mut g| g.take());
            if let Some(cb) = cb {
                cb();
            }
        }
    }

    fn notify(&self) {
        let _g = self.wake.0.lock();
        self.wake.1.notify_all();
    }

    fn all_done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }
}

/// What the ticker hands back when it ends.
struct TickerOut {
    omit_ns: u64,
    omit_counts: Vec<CounterSnapshot>,
    cpu: Option<hakaru_model::CpuUsage>,
    nic: Option<hakaru_model::NicUsage>,
}

/// A running side of a test.
pub struct SideRun {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    ticker: Option<JoinHandle<TickerOut>>,
}

impl SideRun {
    /// Starts workers and the ticker now; `on_interval` gets each sample, `on_done` is called
    /// once when every flow has finished (from a worker thread).
    pub fn start(
        cfg: SideConfig,
        flows: Vec<FlowSocket>,
        on_interval: Box<dyn FnMut(IntervalSample) + Send>,
        on_done: DoneFn,
    ) -> Result<SideRun, SideError> {
        let zc = if cfg.zerocopy && flows.iter().any(|f| f.role == Role::Sender) {
            Some(sys::ZeroCopySource::new(cfg.length).map_err(SideError::ZeroCopy)?)
        } else {
            None
        };
        let mut streams = Vec::with_capacity(flows.len());
        let mut meta = Vec::with_capacity(flows.len());
        for f in flows {
            f.stream
                .set_nonblocking(true)
                .map_err(|source| SideError::Socket { flow: f.id, source })?;
            streams.push(f.stream);
            meta.push(FlowMeta {
                id: f.id,
                dir: f.dir,
                role: f.role,
                quota: f.quota,
            });
        }
        let n = streams.len();
        let has_sender = meta.iter().any(|m| m.role == Role::Sender);
        let pattern = if has_sender && zc.is_none() {
            (0..cfg.length).map(|i| b'a' + (i % 26) as u8).collect()
        } else {
            Vec::new()
        };
        let shared = Arc::new(Shared {
            start: Instant::now(),
            counters: (0..n).map(|_| FlowCounters::default()).collect(),
            streams,
            meta,
            stop_send: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            remaining: AtomicUsize::new(n),
            end_ns: AtomicU64::new(0),
            errors: Mutex::new(vec![None; n]),
            final_info: Mutex::new(vec![None; n]),
            on_done: Mutex::new(Some(on_done)),
            wake: (Mutex::new(()), Condvar::new()),
            pattern,
            zc,
            cfg,
        });
        let ticker = {
            let s = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("hakaru-ticker".into())
                .spawn(move || ticker(&s, on_interval))
                .map_err(SideError::Thread)?
        };
        let cpus = if shared.cfg.affinity.is_empty() {
            sys::online_cpus()
        } else {
            shared.cfg.affinity.len()
        };
        let nworkers = n.min(cpus).max(1);
        let mut workers = Vec::with_capacity(nworkers);
        for w in 0..nworkers {
            let mine: Vec<usize> = (w..n).step_by(nworkers).collect();
            let pin = shared.cfg.affinity.get(w).copied();
            let s = Arc::clone(&shared);
            let h = std::thread::Builder::new()
                .name(format!("hakaru-flow-{w}"))
                .stack_size(256 << 10)
                .spawn(move || worker(&s, mine, pin));
            match h {
                Ok(h) => workers.push(h),
                Err(e) => {
                    shared.abort.store(true, Ordering::Release);
                    shared.notify();
                    return Err(SideError::Thread(e));
                }
            }
        }
        if n == 0 {
            shared.end_ns.store(0, Ordering::Release);
        }
        Ok(SideRun {
            shared,
            workers,
            ticker: Some(ticker),
        })
    }

    /// Monotonic instant the side started.
    pub fn started(&self) -> Instant {
        self.shared.start
    }

    /// Asks senders to finish now (Ctrl-C or the peer's stop); receivers read until EOF.
    pub fn stop_sending(&self) {
        self.shared.stop_send.store(true, Ordering::Release);
    }

    /// Stops everything now and shuts the sockets down, so the peer sees the end too.
    pub fn abort(&self) {
        self.shared.abort.store(true, Ordering::Release);
        for s in &self.shared.streams {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.shared.notify();
    }

    /// The first flow error so far, if any.
    pub fn first_error(&self) -> Option<String> {
        self.shared
            .errors
            .lock()
            .ok()
            .and_then(|e| e.iter().flatten().next().cloned())
    }

    /// True once every flow has finished.
    pub fn is_done(&self) -> bool {
        self.shared.all_done()
    }

    /// Waits for workers and the ticker and builds this end's report.
    pub fn wait(mut self) -> SideReport {
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        // Workers are gone: wake the ticker in case we were aborted before all flows ended.
        self.shared.abort.store(true, Ordering::Release);
        self.shared.notify();
        let t = self
            .ticker
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or(TickerOut {
                omit_ns: 0,
                omit_counts: vec![CounterSnapshot::default(); self.shared.meta.len()],
                cpu: None,
                nic: None,
            });
        let s = &self.shared;
        let end_ns = match s.end_ns.load(Ordering::Acquire) {
            0 => s.now_ns(),
            e => e,
        };
        let seconds = end_ns.saturating_sub(t.omit_ns) as f64 / 1e9;
        let errors = s.errors.lock().map(|e| e.clone()).unwrap_or_default();
        let infos = s.final_info.lock().map(|e| e.clone()).unwrap_or_default();
        let flows = s
            .meta
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let fin = s.counters[i].snapshot();
                let om = t.omit_counts.get(i).copied().unwrap_or_default();
                FlowSide {
                    id: m.id,
                    dir: m.dir,
                    role: m.role,
                    bytes: fin.bytes - om.bytes.min(fin.bytes),
                    omitted_bytes: om.bytes.min(fin.bytes),
                    calls: fin.calls - om.calls.min(fin.calls),
                    seconds,
                    tcp_info: infos.get(i).cloned().flatten(),
                    error: errors.get(i).cloned().flatten(),
                }
            })
            .collect();
        let mut env = sys::environment(s.cfg.iface.as_deref());
        env.software = env!("CARGO_PKG_VERSION").to_string();
        SideReport {
            end: s.cfg.end,
            flows,
            cpu: t.cpu,
            nic: t.nic,
            env,
            send_mode: if s.cfg.zerocopy { "sendfile" } else { "copy" }.into(),
            recv_mode: if s.cfg.discard && sys::DISCARD_SUPPORTED {
                "discard"
            } else {
                "copy"
            }
            .into(),
        }
    }
}

impl Drop for SideRun {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.abort();
            for w in self.workers.drain(..) {
                let _ = w.join();
            }
            if let Some(t) = self.ticker.take() {
                let _ = t.join();
            }
        }
    }
}

struct FlowState {
    idx: usize,
    remaining: Option<u64>,
    last_progress: Instant,
}

fn worker(s: &Shared, mine: Vec<usize>, pin: Option<usize>) {
    if let Some(cpu) = pin {
        if let Err(e) = sys::pin_current_thread(cpu) {
            tracing::warn!("could not pin worker to CPU {cpu}: {e}");
        }
    }
    let needs_buf = !s.cfg.discard || !sys::DISCARD_SUPPORTED;
    let mut rbuf = if needs_buf && mine.iter().any(|&i| s.meta[i].role == Role::Receiver) {
        vec![0u8; s.cfg.length]
    } else {
        Vec::new()
    };
    let deadline = s.cfg.duration.map(|d| s.start + s.cfg.omit + d);
    let now = Instant::now();
    let mut active: Vec<FlowState> = mine
        .iter()
        .map(|&idx| FlowState {
            idx,
            remaining: s.meta[idx].quota,
            last_progress: now,
        })
        .collect();
    // A sender with a zero quota has nothing to do.
    active.retain(|f| {
        if f.remaining == Some(0) && s.meta[f.idx].role == Role::Sender {
            finish_sender(s, f.idx);
            false
        } else {
            true
        }
    });
    while !active.is_empty() {
        if s.abort.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let now_ns = now.duration_since(s.start).as_nanos() as u64;
        let stop = s.stop_send.load(Ordering::Acquire) || deadline.is_some_and(|d| now >= d);
        let mut progressed = false;
        let mut k = 0;
        while k < active.len() {
            let f = &mut active[k];
            let i = f.idx;
            let outcome = match s.meta[i].role {
                Role::Sender if stop => Step::Finished,
                Role::Sender => send_step(s, i, f.remaining),
                Role::Receiver => recv_step(s, i, &mut rbuf),
            };
            match outcome {
                Step::Moved(n) => {
                    s.counters[i].add(n as u64, now_ns);
                    f.last_progress = now;
                    progressed = true;
                    if let Some(r) = f.remaining.as_mut() {
                        *r -= (n as u64).min(*r);
                        if *r == 0 {
                            finish_sender(s, i);
                            active.swap_remove(k);
                            continue;
                        }
                    }
                }
                Step::Blocked => {
                    if now.duration_since(f.last_progress) > s.cfg.stall_timeout {
                        let what = match s.meta[i].role {
                            Role::Sender => "the peer stopped reading",
                            Role::Receiver => "no data from the peer",
                        };
                        s.finish_flow(
                            i,
                            Some(format!(
                                "flow {}: {what} for {:.1} s",
                                s.meta[i].id,
                                s.cfg.stall_timeout.as_secs_f64()
                            )),
                        );
                        active.swap_remove(k);
                        continue;
                    }
                }
                Step::Finished => {
                    match s.meta[i].role {
                        Role::Sender => finish_sender(s, i),
                        Role::Receiver => s.finish_flow(i, None),
                    }
                    active.swap_remove(k);
                    continue;
                }
                Step::Failed(e) => {
                    s.finish_flow(i, Some(describe_io(s.meta[i].id, s.meta[i].role, &e)));
                    active.swap_remove(k);
                    continue;
                }
            }
            k += 1;
        }
        if !progressed && !active.is_empty() {
            let mut wait = Duration::from_millis(100);
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(Instant::now()));
            }
            wait_ready(s, &active, wait);
        }
    }
}

enum Step {
    Moved(usize),
    Blocked,
    Finished,
    Failed(io::Error),
}

fn classify(r: io::Result<usize>, role: Role) -> Step {
    match r {
        Ok(0) if role == Role::Receiver => Step::Finished,
        Ok(0) => Step::Blocked,
        Ok(n) => Step::Moved(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Step::Blocked,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Step::Blocked,
        Err(e) => Step::Failed(e),
    }
}

fn send_step(s: &Shared, i: usize, remaining: Option<u64>) -> Step {
    let len = remaining.map_or(s.cfg.length, |r| (r.min(s.cfg.length as u64)) as usize);
    let stream = &s.streams[i];
    let r = match &s.zc {
        Some(src) => sys::send_zerocopy(stream.as_raw_fd(), src, len),
        None => raw_send(stream, &s.pattern[..len]),
    };
    classify(r, Role::Sender)
}

fn recv_step(s: &Shared, i: usize, buf: &mut [u8]) -> Step {
    let stream = &s.streams[i];
    let r = if s.cfg.discard && sys::DISCARD_SUPPORTED {
        sys::recv_discard(stream.as_raw_fd(), s.cfg.length)
    } else {
        raw_recv(stream, buf)
    };
    classify(r, Role::Receiver)
}

#[cfg(unix)]
fn raw_send(stream: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let flags = libc::MSG_DONTWAIT;
    // SAFETY: buf is valid for buf.len() bytes; the fd is owned by `stream`.
    let n = unsafe { libc::send(stream.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(unix)]
fn raw_recv(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes; the fd is owned by `stream`.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(unix)]
fn wait_ready(s: &Shared, active: &[FlowState], timeout: Duration) {
    let mut fds: Vec<libc::pollfd> = active
        .iter()
        .map(|f| libc::pollfd {
            fd: s.streams[f.idx].as_raw_fd(),
            events: match s.meta[f.idx].role {
                Role::Sender => libc::POLLOUT,
                Role::Receiver => libc::POLLIN,
            },
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().clamp(1, 1000) as libc::c_int;
    // SAFETY: fds is a valid array of fds.len() pollfd structures.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

fn finish_sender(s: &Shared, i: usize) {
    let stream = &s.streams[i];
    if let Ok(info) = sys::tcp_info(stream.as_raw_fd()) {
        if let Ok(mut v) = s.final_info.lock() {
            v[i] = Some(info);
        }
    }
    let err = stream
        .shutdown(Shutdown::Write)
        .err()
        .filter(|e| e.kind() != io::ErrorKind::NotConnected)
        .map(|e| describe_io(s.meta[i].id, Role::Sender, &e));
    s.finish_flow(i, err);
}

fn describe_io(id: u32, role: Role, e: &io::Error) -> String {
    let what = match e.kind() {
        io::ErrorKind::ConnectionReset => "connection reset by the peer (did it exit?)",
        io::ErrorKind::BrokenPipe => "the peer closed the connection",
        io::ErrorKind::ConnectionAborted => "connection aborted",
        _ => "",
    };
    let verb = match role {
        Role::Sender => "sending",
        Role::Receiver => "receiving",
    };
    if what.is_empty() {
        format!("flow {id}: {verb}: {e}")
    } else {
        format!("flow {id}: {verb}: {what}")
    }
}

fn ticker(s: &Shared, mut on_interval: Box<dyn FnMut(IntervalSample) + Send>) -> TickerOut {
    let n = s.meta.len();
    let interval = s.cfg.interval;
    let omit = s.cfg.omit;
    let mut omit_taken = omit.is_zero();
    let mut omit_counts = vec![CounterSnapshot::default(); n];
    let mut omit_ns = 0u64;
    let cpu0 = sys::cpu_snapshot();
    let nic0 = s.cfg.iface.as_deref().and_then(sys::nic_snapshot);
    let (mut cpu_base, mut nic_base) = (cpu0, nic0);
    let mut prev = vec![CounterSnapshot::default(); n];
    let mut prev_retx = vec![0u64; n];
    let mut last_ns = 0u64;
    let mut index = 0u32;
    let mut next_tick = (!interval.is_zero()).then_some(interval);
    loop {
        // Sleep until the next tick, the end of the warm-up, or the end of the test.
        {
            let mut wake_at: Option<Duration> = next_tick;
            if !omit_taken {
                wake_at = Some(wake_at.map_or(omit, |t| t.min(omit)));
            }
            let mut g = match s.wake.0.lock() {
                Ok(g) => g,
                Err(_) => break,
            };
            while !s.all_done() && !s.abort.load(Ordering::Acquire) {
                let elapsed = s.start.elapsed();
                let wait = match wake_at {
                    Some(t) if t <= elapsed => break,
                    Some(t) => t - elapsed,
                    None => Duration::from_millis(500),
                };
                g = match s.wake.1.wait_timeout(g, wait) {
                    Ok((g, _)) => g,
                    Err(_) => return empty_ticker(n),
                };
            }
        }
        let done = s.all_done();
        let aborted = s.abort.load(Ordering::Acquire) && !done;
        let now_ns = if done {
            s.end_ns.load(Ordering::Acquire)
        } else {
            s.now_ns()
        };
        // One snapshot per wake-up serves both the warm-up boundary and the interval, so no
        // byte lands in both an omitted interval and the counted total.
        let snap: Vec<CounterSnapshot> = s.counters.iter().map(FlowCounters::snapshot).collect();
        if !omit_taken && (now_ns >= omit.as_nanos() as u64 || done || aborted) {
            omit_taken = true;
            omit_ns = now_ns.min(omit.as_nanos() as u64);
            omit_counts = snap.clone();
            cpu_base = sys::cpu_snapshot();
            nic_base = s.cfg.iface.as_deref().and_then(sys::nic_snapshot);
        }
        if let Some(tick) = next_tick {
            let tick_ns = tick.as_nanos() as u64;
            let end_ns = if done { now_ns } else { tick_ns.min(now_ns) };
            let due = now_ns >= tick_ns || done || aborted;
            let long_enough = end_ns.saturating_sub(last_ns) * 20 >= interval.as_nanos() as u64;
            if due && long_enough {
                let flows = (0..n)
                    .map(|i| {
                        let cur = snap[i];
                        let tcp = if s.meta[i].role == Role::Sender {
                            sys::tcp_info(s.streams[i].as_raw_fd()).ok().map(|ti| {
                                let d = ti.retransmits.saturating_sub(prev_retx[i]);
                                prev_retx[i] = ti.retransmits;
                                TcpTick {
                                    retransmits: d,
                                    snd_cwnd: ti.snd_cwnd,
                                    rtt_us: ti.rtt_us,
                                }
                            })
                        } else {
                            None
                        };
                        let t = FlowTick {
                            id: s.meta[i].id,
                            bytes: cur.bytes - prev[i].bytes,
                            calls: cur.calls - prev[i].calls,
                            tcp,
                        };
                        prev[i] = cur;
                        t
                    })
                    .collect();
                on_interval(IntervalSample {
                    index,
                    start: last_ns as f64 / 1e9,
                    end: end_ns as f64 / 1e9,
                    omitted: end_ns <= omit.as_nanos() as u64 && !omit.is_zero(),
                    flows,
                });
                index += 1;
                last_ns = end_ns;
            }
            if due {
                next_tick = Some(tick + interval);
            }
        }
        if done || aborted {
            let wall = now_ns.saturating_sub(omit_ns) as f64 / 1e9;
            let cpu1 = sys::cpu_snapshot();
            let nic1 = s.cfg.iface.as_deref().and_then(sys::nic_snapshot);
            return TickerOut {
                omit_ns,
                omit_counts,
                cpu: cpu_base
                    .zip(cpu1)
                    .map(|(a, b)| sys::cpu_usage(&a, &b, wall)),
                nic: nic_base
                    .zip(nic1)
                    .map(|(a, b)| sys::nic_usage(&a, &b, wall)),
            };
        }
    }
    empty_ticker(n)
}

fn empty_ticker(n: usize) -> TickerOut {
    TickerOut {
        omit_ns: 0,
        omit_counts: vec![CounterSnapshot::default(); n],
        cpu: None,
        nic: None,
    }
}
