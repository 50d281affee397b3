//! What every transport's side of a test shares: flow bookkeeping, the interval ticker (warm-up,
//! interval samples, CPU, NIC and UDP kernel counters) and the end-of-test [`SideReport`].
//!
//! A transport (TCP in `tcp.rs`, UDP in `udp.rs`) owns its sockets and worker loops; it
//! counts into [`Core::counters`], calls [`Core::finish_flow`] as flows end, and builds its
//! report with [`Core::report`].

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::{
    Amount, End, FlowDir, FlowSide, IntervalSample, Role, SideReport, TcpInfo, TestSpec,
    UdpFlowSide,
};

use crate::counters::{CounterSnapshot, FlowCounters};
use crate::sys;

mod ticker;
pub(crate) use ticker::{spawn_ticker, TickerOut};

/// Called once when every flow of a side has finished.
pub(crate) type DoneFn = Box<dyn FnOnce() + Send>;
/// Called with each interval sample.
pub(crate) type IntervalFn = Box<dyn FnMut(IntervalSample) + Send>;
/// Reads TCP_INFO of flow `i`'s socket, for senders' interval lines.
pub(crate) type TcpProbe = Box<dyn Fn(usize) -> Option<TcpInfo> + Send>;

/// What a side knows about one of its flows.
pub(crate) struct FlowMeta {
    pub id: u32,
    pub dir: FlowDir,
    pub role: Role,
    /// Exact amount to send (bytes for TCP, datagrams for UDP), for -n/-k senders.
    pub quota: Option<u64>,
}

/// State shared by a side's workers, its ticker and its owner.
pub(crate) struct Core {
    pub start: Instant,
    /// `start` on the wall clock, seconds since the Unix epoch.
    pub start_unix: f64,
    /// `start` is a scheduled instant, ahead when the side was made and not cut to the cap:
    /// the peer's side starts at the same instant by its clock.
    on_instant: bool,
    pub cfg: SideConfig,
    pub meta: Vec<FlowMeta>,
    pub counters: Vec<FlowCounters>,
    pub stop_send: AtomicBool,
    pub abort: AtomicBool,
    /// True for UDP sides: samples and reports carry UDP counters.
    pub udp: bool,
    /// The side ended on the peer's word rather than at an end of stream: its time runs to
    /// the last byte moved, not to when the word came.
    pub ended_by_peer: AtomicBool,
    remaining: AtomicUsize,
    /// A scheduled start: nanoseconds since `start` when the first data thread began.
    began_ns: AtomicU64,
    /// Nanoseconds since start when the last flow finished.
    end_ns: AtomicU64,
    /// The end of the measured window once known, with every flow's counters then: set by
    /// the ticker at the end of a timed TCP test, or when the peer ends the test (iperf3's
    /// TEST_END).
    window_mark: Mutex<Option<(u64, Vec<CounterSnapshot>)>>,
    /// The window's end on the wall clock, nanoseconds since the Unix epoch; 0 until marked.
    /// Set after the mark's snapshot, so a read that starts once this is set is not in it.
    window_unix_ns: AtomicU64,
    errors: Mutex<Vec<Option<String>>>,
    on_done: Mutex<Option<DoneFn>>,
    wake: (Mutex<()>, Condvar),
}

impl Core {
    pub fn new(cfg: SideConfig, meta: Vec<FlowMeta>, on_done: DoneFn, udp: bool) -> Core {
        let n = meta.len();
        let (start, start_unix, on_instant) = start_instant(cfg.start_at);
        Core {
            start,
            start_unix,
            on_instant,
            began_ns: AtomicU64::new(u64::MAX),
            cfg,
            counters: (0..n).map(|_| FlowCounters::default()).collect(),
            meta,
            stop_send: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            udp,
            ended_by_peer: AtomicBool::new(false),
            remaining: AtomicUsize::new(n),
            end_ns: AtomicU64::new(0),
            window_mark: Mutex::new(None),
            window_unix_ns: AtomicU64::new(0),
            errors: Mutex::new(vec![None; n]),
            on_done: Mutex::new(Some(on_done)),
            wake: (Mutex::new(()), Condvar::new()),
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Marks flow `i` finished, with its error if it failed; the last one calls `on_done`.
    pub fn finish_flow(&self, i: usize, error: Option<String>) {
        if let Some(e) = error {
            if let Ok(mut errs) = self.errors.lock() {
                errs[i] = Some(e);
            }
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.end_ns.store(self.now_ns().max(1), Ordering::Release);
            self.notify();
            let cb = self.on_done.lock().ok().and_then(|mut g| g.take());
            if let Some(cb) = cb {
                cb();
            }
        }
    }

    /// A data thread waits here for the side's start (a scheduled one is ahead; others are
    /// now), or until the side is aborted; the first to pass marks when the side began.
    pub fn await_start(&self) {
        self.wait_until(self.start);
        if !self.abort.load(Ordering::Acquire) {
            self.began_ns.fetch_min(self.now_ns(), Ordering::AcqRel);
        }
    }

    /// Sleeps until `at`, or until the side is aborted.
    pub fn wait_until(&self, at: Instant) {
        loop {
            let now = Instant::now();
            if now >= at || self.abort.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep((at - now).min(Duration::from_millis(50)));
        }
    }

    /// When the first data thread began, on the wall clock, for a scheduled start.
    fn began_unix(&self) -> Option<f64> {
        let ns = self.began_ns.load(Ordering::Acquire);
        (self.cfg.start_at.is_some() && ns != u64::MAX).then(|| self.start_unix + ns as f64 / 1e9)
    }

    /// Wakes the ticker.
    pub fn notify(&self) {
        let _g = self.wake.0.lock();
        self.wake.1.notify_all();
    }

    /// Bytes moved so far (warm-up included) on the flows where this end has `role`.
    pub fn moved(&self, role: Role) -> u64 {
        self.meta
            .iter()
            .zip(&self.counters)
            .filter(|(m, _)| m.role == role)
            .map(|(_, c)| c.snapshot().bytes)
            .sum()
    }

    pub fn all_done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }

    pub fn first_error(&self) -> Option<String> {
        self.errors
            .lock()
            .ok()
            .and_then(|e| e.iter().flatten().next().cloned())
    }

    /// Stops everything: workers return at their next check.
    pub fn set_abort(&self) {
        self.abort.store(true, Ordering::Release);
        self.notify();
    }

    /// Deadline for timed senders, if the test is timed.
    pub fn deadline(&self) -> Option<Instant> {
        self.cfg.duration.map(|d| self.start + self.cfg.omit + d)
    }

    /// Closes the measured window now, unless it is closed already.
    pub fn mark_window(&self, at_ns: u64, counts: Vec<CounterSnapshot>) {
        if let Ok(mut m) = self.window_mark.lock() {
            if m.is_none() {
                *m = Some((at_ns, counts));
                let unix_ns = self.unix_ns(at_ns);
                self.window_unix_ns.store(unix_ns.max(1), Ordering::Release);
            }
        }
    }

    /// The peer ended the test (iperf3's TEST_END). In a timed test the window closes now, as
    /// `iperf3 -s` stops its clock at that message; what arrives later is not in the headline.
    pub fn peer_ended(&self) {
        self.ended_by_peer.store(true, Ordering::Release);
        if self.cfg.window_at_peer_end.is_some() {
            let counts = self.counters.iter().map(FlowCounters::snapshot).collect();
            self.mark_window(self.now_ns(), counts);
        }
        self.notify();
    }

    /// The closed window's end on the wall clock (nanoseconds since the Unix epoch), or `None`
    /// while it is open. A receiver that reads this before a read, and gets `Some`, knows the
    /// read's bytes are not in the window's snapshot.
    pub fn window_end_unix_ns(&self) -> Option<u64> {
        match self.window_unix_ns.load(Ordering::Acquire) {
            0 => None,
            w => Some(w),
        }
    }

    fn window_mark(&self) -> Option<(u64, Vec<CounterSnapshot>)> {
        self.window_mark.lock().ok().and_then(|m| m.clone())
    }

    /// When the measured window of a timed test is due to close, nanoseconds since the start:
    /// at its duration, or about when the peer will end it (`window_at_peer_end`).
    pub fn window_due_ns(&self) -> Option<u64> {
        self.cfg
            .duration
            .or(self.cfg.window_at_peer_end)
            .map(|d| (self.cfg.omit + d).as_nanos() as u64)
    }

    /// The instant `at_ns` (nanoseconds since the start) on the wall clock, nanoseconds since
    /// the Unix epoch, on the same base as [`Self::window_end_unix_ns`].
    pub fn unix_ns(&self, at_ns: u64) -> u64 {
        (self.start_unix * 1e9) as u64 + at_ns
    }

    /// End of the measured window of a timed TCP test, nanoseconds since the start (warm-up
    /// plus time). Receivers count bytes that arrive later (flows still draining) apart from
    /// the headline. UDP keeps whole-flow counts: its loss accounting needs every datagram,
    /// and its receivers stop soon after the last one.
    pub fn window_ns(&self) -> Option<u64> {
        if self.udp {
            return None;
        }
        self.cfg
            .duration
            .map(|d| (self.cfg.omit + d).as_nanos() as u64)
    }

    /// When the side's work ended, nanoseconds since the start. For UDP this is the last
    /// datagram sent or received, or the end of a timed test if that is later (a paced sender's
    /// last datagram may be due well before the deadline), so a receiver's linger after the
    /// last arrival is not counted as receiving time.
    fn final_ns(&self) -> u64 {
        let end = match self.end_ns.load(Ordering::Acquire) {
            0 => self.now_ns(),
            e => e,
        };
        let by_peer = self.ended_by_peer.load(Ordering::Acquire);
        if by_peer {
            if let Some((w, _)) = self.window_mark() {
                return w.min(end);
            }
        }
        if !self.udp && !by_peer {
            return end;
        }
        let deadline = self
            .cfg
            .duration
            .map_or(0, |d| (self.cfg.omit + d).as_nanos() as u64);
        match self.counters.iter().map(FlowCounters::last_ns).max() {
            Some(last) if last > 0 => last.max(deadline).min(end),
            _ => end,
        }
    }

    /// Builds this end's report once workers and ticker are done. `tcp_info` gives the final
    /// TCP_INFO of a flow, where there is one.
    pub fn report(&self, t: TickerOut, tcp_info: impl Fn(usize) -> Option<TcpInfo>) -> SideReport {
        let end_ns = self.final_ns();
        let seconds = end_ns.saturating_sub(t.omit_ns) as f64 / 1e9;
        let errors = self.errors.lock().map(|e| e.clone()).unwrap_or_default();
        // UDP keeps whole-flow counts (see window_ns); its seconds come from final_ns.
        let window = if self.udp { None } else { self.window_mark() };
        let window_end_ns = window.as_ref().map_or(end_ns, |(w, _)| (*w).min(end_ns));
        let flows = self
            .meta
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let fin = self.counters[i].snapshot();
                let om = t.omit_counts.get(i).copied().unwrap_or_default();
                // A receiver of a timed test counts what arrived inside the window; the rest
                // came while its flow drained after the senders stopped.
                let (counted_to, seconds, late_bytes, late_seconds) = match &window {
                    Some((w_ns, counts)) if m.role == Role::Receiver => {
                        let w_ns = *w_ns;
                        let at = counts.get(i).copied().unwrap_or(fin);
                        // Bytes read after the mark that had reached the host before it (out
                        // of order behind a lost segment, released by its retransmission)
                        // crossed the path inside the window.
                        let early = self.counters[i].arrived_in_window();
                        let counted = at.bytes.saturating_add(early).min(fin.bytes);
                        let late = fin.bytes.saturating_sub(counted);
                        let last = self.counters[i].last_ns();
                        (
                            counted,
                            w_ns.saturating_sub(t.omit_ns) as f64 / 1e9,
                            late,
                            if late > 0 {
                                last.saturating_sub(w_ns) as f64 / 1e9
                            } else {
                                0.0
                            },
                        )
                    }
                    _ => (fin.bytes, seconds, 0, 0.0),
                };
                FlowSide {
                    id: m.id,
                    dir: m.dir,
                    role: m.role,
                    bytes: counted_to - om.bytes.min(counted_to),
                    omitted_bytes: om.bytes.min(fin.bytes),
                    late_bytes,
                    late_seconds,
                    calls: fin.calls - om.calls.min(fin.calls),
                    seconds,
                    tcp_info: tcp_info(i),
                    udp: self.udp.then(|| udp_flow_side(&om, &fin)),
                    error: errors.get(i).cloned().flatten(),
                    mptcp: None,
                }
            })
            .collect();
        let mut env = sys::environment(self.cfg.iface.as_deref());
        env.software = env!("CARGO_PKG_VERSION").to_string();
        SideReport {
            end: self.cfg.end,
            flows,
            cpu: t.cpu,
            nic: t.nic,
            env,
            send_mode: "copy".into(),
            recv_mode: "copy".into(),
            udp_paths: None,
            udp_kernel: t.udp_kernel,
            stray_datagrams: None,
            connect: None,
            window_start_unix: Some(self.start_unix + t.omit_ns as f64 / 1e9),
            window_end_unix: Some(self.start_unix + window_end_ns as f64 / 1e9),
            began_unix: self.began_unix(),
        }
    }
}

fn udp_flow_side(om: &CounterSnapshot, fin: &CounterSnapshot) -> UdpFlowSide {
    UdpFlowSide {
        datagrams: fin.datagrams.saturating_sub(om.datagrams),
        omitted_datagrams: om.datagrams.min(fin.datagrams),
        next_seq: fin.next_seq,
        lost: fin.lost.saturating_sub(om.lost),
        out_of_order: fin.out_of_order.saturating_sub(om.out_of_order),
        duplicates: fin.duplicates.saturating_sub(om.duplicates),
        jitter_ms: fin.jitter_ns.map(|j| j / 1e6),
        ignored: fin.ignored,
        socket_drops: fin.socket_drops,
    }
}

/// Workers per CPU at most where a side runs a thread per flow ([`SideConfig::thread_per_flow`]).
const FLOW_THREADS_PER_CPU: usize = 4;

/// Starts a side's workers: one per CPU (or per `-A` CPU), never more than flows, each given
/// every nth flow index and the CPU to pin to. If a thread cannot start, the side is aborted
/// (so those already started return) and the error is given back.
/// Workers a side starts for `flows` flows: one per CPU it may use, at most one per flow. The
/// CPUs are the -A list when there is one; otherwise all online CPUs, or half of them when the
/// peer's workers run on the same kernel.
/// With `per_flow` (a peer whose own server runs a thread per stream), one worker per flow, up
/// to [`FLOW_THREADS_PER_CPU`] per CPU.
fn worker_count(
    flows: usize,
    online: usize,
    pinned: usize,
    shares_host: bool,
    per_flow: bool,
) -> usize {
    let cpus = if pinned > 0 {
        pinned
    } else if per_flow {
        online.max(1) * FLOW_THREADS_PER_CPU
    } else if shares_host {
        online / 2
    } else {
        online
    };
    flows.min(cpus).max(1)
}

pub(crate) fn spawn_workers<F>(
    core: &Arc<Core>,
    name: &str,
    stack: usize,
    work: F,
) -> io::Result<Vec<JoinHandle<()>>>
where
    F: Fn(Vec<usize>, Option<usize>) + Send + Sync + 'static,
{
    let n = core.meta.len();
    let nworkers = worker_count(
        n,
        sys::online_cpus(),
        core.cfg.affinity.len(),
        core.cfg.shares_host,
        core.cfg.thread_per_flow,
    );
    let c = Arc::clone(core);
    let work = Arc::new(move |mine: Vec<usize>, pin: Option<usize>| {
        c.await_start();
        work(mine, pin)
    });
    let mut workers = Vec::with_capacity(nworkers);
    for w in 0..nworkers {
        let mine: Vec<usize> = (w..n).step_by(nworkers).collect();
        let pin = core.cfg.affinity.get(w).copied();
        let work = Arc::clone(&work);
        let h = std::thread::Builder::new()
            .name(format!("{name}-{w}"))
            .stack_size(stack)
            .spawn(move || work(mine, pin));
        match h {
            Ok(h) => workers.push(h),
            Err(e) => {
                core.set_abort();
                return Err(e);
            }
        }
    }
    Ok(workers)
}

/// Machine-wide counters (CPU, the test's interface, UDP) at one instant: the starting point
/// of a side's CPU, NIC and UDP kernel figures. A caller takes it before telling the peer to
/// start, so nothing the peer sends can arrive before it; without a warm-up it is the baseline
/// of the whole test (with one, the end of the warm-up is). A scheduled side reads its
/// interface counters again just before its instant (`first_nic`).
#[derive(Debug, Clone)]
pub struct CounterBase {
    cpu: Option<sys::CpuSnapshot>,
    nic: Option<sys::NicSnapshot>,
    udp: Option<sys::UdpSnmp>,
}

impl CounterBase {
    /// Reads the counters now: `iface`'s NIC counters, and UDP's when `udp` is set.
    pub fn take(iface: Option<&str>, udp: bool) -> CounterBase {
        CounterBase {
            cpu: sys::cpu_snapshot(),
            nic: iface.and_then(sys::nic_snapshot),
            udp: if udp { sys::udp_snmp() } else { None },
        }
    }

    /// CPU and NIC use from this base to now, over `wall_secs` seconds.
    pub fn usage_since(
        &self,
        iface: Option<&str>,
        wall_secs: f64,
    ) -> (
        Option<hakaru_model::CpuUsage>,
        Option<hakaru_model::NicUsage>,
    ) {
        let cpu = self
            .cpu
            .as_ref()
            .zip(sys::cpu_snapshot())
            .map(|(a, b)| sys::cpu_usage(a, &b, wall_secs));
        let nic = self
            .nic
            .as_ref()
            .zip(iface.and_then(sys::nic_snapshot))
            .map(|(a, b)| sys::nic_usage(a, &b, wall_secs));
        (cpu, nic)
    }

    fn of(s: &Core) -> CounterBase {
        CounterBase::take(s.cfg.iface.as_deref(), s.udp)
    }
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
    /// The flows' sockets were opened with MPTCP: the report says how each ran.
    pub mptcp: bool,
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
    /// Counters taken before the peer was told to start; `None` takes them when the side starts.
    pub base: Option<crate::side::CounterBase>,
    /// What senders write.
    pub payload: Payload,
    /// TCP senders: most bits per second per flow; `None` sends as fast as the path allows.
    pub pace_bps: Option<u64>,
    /// A sender that is done shuts its write side (the peer reads to the end of the stream);
    /// false for peers that end the test over their control connection (iperf3).
    pub half_close: bool,
    /// The peer's end of the test (iperf3's TEST_END) closes the measured window of a timed
    /// test: receivers count what arrives later apart from the headline, as `iperf3 -s` stops
    /// counting there. The value is the test's time as the peer asked for it (after `omit`),
    /// so the side knows about when the end will come. `None` for `-n`/`-k` transfers, which
    /// are counted whole.
    pub window_at_peer_end: Option<Duration>,
    /// Both ends run on this kernel (loopback, network namespaces): the peer's workers use
    /// the same CPUs, so this side starts workers for half of them (at least one). Set for
    /// UDP only: two UDP flows on a 2-CPU machine ran four busy threads, and the senders'
    /// share of the CPUs overran the receivers, which dropped the surplus after the kernel
    /// had paid for it; TCP's flow control keeps four threads in step, and halving them cost
    /// TCP -P 4 on loopback a third of its rate (docs/BENCHMARKS.md, packet rate with many
    /// flows).
    pub shares_host: bool,
    /// One worker per flow (at most [`FLOW_THREADS_PER_CPU`] per CPU) instead of one per CPU:
    /// set where the peer's own server runs a thread per stream (iperf3 3.16 and later). On a
    /// machine that the peer's client shares, the scheduler gives each runnable thread its
    /// share, so a server with fewer receiving threads than the client has sending ones gets
    /// less of the CPUs than the stock server would (docs/performance-notes.md, section 11).
    pub thread_per_flow: bool,
    /// Server: who may add a subflow to a flow's MPTCP connection (the access list checks
    /// only the first subflow's address at accept); `None` checks nothing.
    pub subflow_guard: Option<SubflowGuard>,
    /// A scheduled start (the native protocol's `start_at`): the data threads begin at this
    /// wall-clock instant (Unix seconds, by this machine's clock), waiting at most
    /// [`MAX_SCHEDULE_WAIT`] for it; the side's clock (intervals, duration) starts there.
    /// `None`, or an instant already past: at once.
    pub start_at: Option<f64>,
}

/// The longest a scheduled side waits for its instant (the protocol's `MAX_START_AHEAD`): a
/// peer whose clock is ahead, or a client that asks for a far instant, holds the threads back
/// at most this long.
pub const MAX_SCHEDULE_WAIT: Duration = hakaru_proto::native::MAX_START_AHEAD;

/// A side's start on the monotonic and the wall clock: now, or the scheduled instant `at`
/// (Unix seconds) when it is ahead, at most [`MAX_SCHEDULE_WAIT`] away; and whether it is
/// that instant (ahead and not cut to the cap).
fn start_instant(at: Option<f64>) -> (Instant, f64, bool) {
    let (now, unix) = (Instant::now(), sys::now_unix());
    match at {
        Some(at) if at.is_finite() && at > unix => {
            let cap = MAX_SCHEDULE_WAIT.as_secs_f64();
            let wait = Duration::from_secs_f64((at - unix).min(cap));
            (now + wait, unix + wait.as_secs_f64(), at - unix <= cap)
        }
        _ => (now, unix, false),
    }
}

/// Decides whether a subflow from an address may belong to a flow's MPTCP connection: `None`
/// lets it, `Some(why)` fails the flow (the connection is shut) saying why.
#[derive(Clone)]
pub struct SubflowGuard(
    pub std::sync::Arc<dyn Fn(std::net::IpAddr) -> Option<String> + Send + Sync>,
);

impl std::fmt::Debug for SubflowGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubflowGuard")
    }
}

/// The bytes senders write. Receivers never look at them; peers' users sometimes do (iperf3's
/// `--repeating-payload`, or a compressing link that would flatter a repeating pattern).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Payload {
    /// The letters a to z, repeated (hakaru's default).
    #[default]
    Letters,
    /// The digits 0 to 9, repeated (iperf3 `--repeating-payload`).
    Digits,
    /// Pseudo-random bytes, made once per side (iperf3's default).
    Random,
}

impl Payload {
    /// `len` bytes of this payload.
    pub fn fill(self, len: usize) -> Vec<u8> {
        match self {
            Payload::Letters => (0..len).map(|i| b'a' + (i % 26) as u8).collect(),
            Payload::Digits => (0..len).map(|i| b'0' + (i % 10) as u8).collect(),
            Payload::Random => {
                // xorshift64*, seeded from the clock: incompressible, not secret.
                let mut x = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
                    | 1;
                (0..len)
                    .map(|_| {
                        x ^= x >> 12;
                        x ^= x << 25;
                        x ^= x >> 27;
                        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
                    })
                    .collect()
            }
        }
    }
}

impl SideConfig {
    /// The configuration of one end of `spec`, with its counters taken now: call it before
    /// the peer is told to start.
    pub fn for_spec(
        end: End,
        spec: &TestSpec,
        affinity: Vec<usize>,
        iface: Option<String>,
    ) -> SideConfig {
        let (discard, zerocopy, mptcp) = match spec {
            TestSpec::Tcp(t) => (t.discard, t.zerocopy, t.mptcp),
            _ => (false, false, false),
        };
        let c = spec.common();
        SideConfig {
            end,
            length: c.length.0 as usize,
            discard,
            mptcp,
            zerocopy,
            affinity,
            interval: c.interval.0,
            omit: c.omit.0,
            duration: match c.amount {
                Amount::Time(t) => Some(t.0),
                _ => None,
            },
            stall_timeout: c.stall_timeout.0,
            base: Some(CounterBase::take(iface.as_deref(), spec.udp().is_some())),
            iface,
            payload: Payload::Letters,
            pace_bps: match spec {
                // The client's senders carry the up direction, the server's the down one.
                TestSpec::Tcp(t) => t
                    .rate_for(match end {
                        End::Client => hakaru_model::FlowDir::Up,
                        End::Server => hakaru_model::FlowDir::Down,
                    })
                    .map(|r| r.0.round() as u64)
                    .filter(|&b| b > 0),
                _ => None,
            },
            half_close: true,
            window_at_peer_end: None,
            shares_host: false,
            thread_per_flow: false,
            subflow_guard: None,
            start_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::worker_count;

    fn wc(flows: usize, online: usize, pinned: usize, shares_host: bool) -> usize {
        worker_count(flows, online, pinned, shares_host, false)
    }

    #[test]
    fn a_thread_per_flow_follows_the_flows_up_to_a_bound_per_cpu() {
        assert_eq!(worker_count(4, 2, 0, false, true), 4);
        assert_eq!(worker_count(1, 2, 0, false, true), 1);
        assert_eq!(worker_count(128, 2, 0, false, true), 8);
        assert_eq!(worker_count(128, 0, 0, false, true), 4);
        // An -A list still decides.
        assert_eq!(worker_count(4, 2, 1, false, true), 1);
    }

    #[test]
    fn workers_follow_flows_cpus_pins_and_a_shared_host() {
        // One flow, one worker, however many CPUs.
        assert_eq!(wc(1, 8, 0, false), 1);
        // Peers on other machines: one worker per CPU.
        assert_eq!(wc(64, 2, 0, false), 2);
        assert_eq!(wc(64, 8, 0, false), 8);
        // Both ends on one kernel: half the CPUs each, at least one.
        assert_eq!(wc(64, 2, 0, true), 1);
        assert_eq!(wc(64, 8, 0, true), 4);
        assert_eq!(wc(64, 1, 0, true), 1);
        // An -A list decides, shared or not.
        assert_eq!(wc(64, 8, 3, true), 3);
        assert_eq!(wc(2, 8, 3, false), 2);
        assert_eq!(wc(0, 8, 0, false), 1);
    }
}
