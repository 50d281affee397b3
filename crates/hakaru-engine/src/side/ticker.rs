//! A side's interval ticker: the warm-up, the interval samples (every flow's counters, TCP_INFO
//! of senders, the interface and UDP kernel counters) and, when it ends, the totals the side's
//! report is built from ([`TickerOut`]).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::{
    CpuUsage, FlowTick, IntervalSample, NicTick, NicUsage, Role, TcpInfo, TcpTick,
    UdpKernelCounters, UdpTick,
};

use super::{Core, CounterBase, IntervalFn, TcpProbe};
use crate::counters::{CounterSnapshot, FlowCounters};
use crate::sys;

fn udp_tick(prev: &CounterSnapshot, cur: &CounterSnapshot) -> UdpTick {
    UdpTick {
        datagrams: cur.datagrams.saturating_sub(prev.datagrams),
        lost: cur.lost.saturating_sub(prev.lost),
        out_of_order: cur.out_of_order.saturating_sub(prev.out_of_order),
        duplicates: cur.duplicates.saturating_sub(prev.duplicates),
        jitter_ms: cur.jitter_ns.map(|j| j / 1e6),
    }
}

/// What the ticker hands back when it ends.
pub(crate) struct TickerOut {
    pub omit_ns: u64,
    pub omit_counts: Vec<CounterSnapshot>,
    pub cpu: Option<CpuUsage>,
    pub nic: Option<NicUsage>,
    pub udp_kernel: Option<UdpKernelCounters>,
}

impl TickerOut {
    /// The ticker's result: CPU, NIC and UDP use from `base` to `end` over `wall` seconds.
    fn since(
        base: CounterBase,
        end: &CounterBase,
        wall: f64,
        omit_ns: u64,
        omit_counts: Vec<CounterSnapshot>,
    ) -> TickerOut {
        TickerOut {
            omit_ns,
            omit_counts,
            cpu: base
                .cpu
                .zip(end.cpu.as_ref())
                .map(|(a, b)| sys::cpu_usage(&a, b, wall)),
            nic: base
                .nic
                .zip(end.nic.as_ref())
                .map(|(a, b)| sys::nic_usage(&a, b, wall)),
            udp_kernel: base.udp.zip(end.udp.as_ref()).map(|(a, b)| {
                let d = a.delta(b);
                UdpKernelCounters {
                    in_datagrams: d.in_datagrams,
                    out_datagrams: d.out_datagrams,
                    in_errors: d.in_errors,
                    rcvbuf_errors: d.rcvbuf_errors,
                    sndbuf_errors: d.sndbuf_errors,
                    no_ports: d.no_ports,
                }
            }),
        }
    }

    /// What a ticker that never ran reports.
    pub fn empty(n: usize) -> TickerOut {
        TickerOut {
            omit_ns: 0,
            omit_counts: vec![CounterSnapshot::default(); n],
            cpu: None,
            nic: None,
            udp_kernel: None,
        }
    }
}

/// Starts the ticker thread of a side.
pub(crate) fn spawn_ticker(
    core: Arc<Core>,
    on_interval: IntervalFn,
    tcp_probe: Option<TcpProbe>,
) -> io::Result<JoinHandle<TickerOut>> {
    std::thread::Builder::new()
        .name("hakaru-ticker".into())
        .spawn(move || ticker(&core, on_interval, tcp_probe))
}

/// How long before a scheduled start its ticker reads the interface counters.
const NIC_AHEAD: Duration = Duration::from_millis(10);

/// Every flow's counters with the instant they were read. A ticker descheduled between
/// reading the clock and the counters (a loaded machine) would pair bytes with the wrong
/// time: the read is repeated until clock and counters are taken within 200 us of each other
/// (a few tries at most), and the middle of that span is the instant.
fn timed_snapshot(s: &Core) -> (u64, Vec<CounterSnapshot>) {
    let mut best: Option<(u64, u64, Vec<CounterSnapshot>)> = None;
    for _ in 0..5 {
        let t0 = s.now_ns();
        let snap: Vec<CounterSnapshot> = s.counters.iter().map(FlowCounters::snapshot).collect();
        let t1 = s.now_ns();
        let span = t1.saturating_sub(t0);
        if best.as_ref().is_none_or(|b| span < b.0) {
            best = Some((span, t0 + span / 2, snap));
        }
        if span <= 200_000 {
            break;
        }
    }
    let (_, at, snap) = best.unwrap_or_default();
    (at, snap)
}

fn ticker(s: &Core, mut on_interval: IntervalFn, tcp_probe: Option<TcpProbe>) -> TickerOut {
    let n = s.meta.len();
    let interval = s.cfg.interval;
    let omit = s.cfg.omit;
    let mut omit_taken = omit.is_zero();
    let mut omit_counts = vec![CounterSnapshot::default(); n];
    let mut omit_ns = 0u64;
    let mut base = s.cfg.base.clone().unwrap_or_else(|| CounterBase::of(s));
    let mut prev = vec![CounterSnapshot::default(); n];
    let mut prev_retx = vec![0u64; n];
    let iface = s.cfg.iface.as_deref();
    let mut prev_nic = first_nic(s, iface, &mut base);
    let mut last_ns = 0u64;
    let mut index = 0u32;
    let mut next_tick = (!interval.is_zero()).then_some(interval);
    let window_end = s.window_ns().map(Duration::from_nanos);
    let mut window_taken = window_end.is_none();
    loop {
        // Sleep until the next tick, the end of the warm-up, the end of the measured window,
        // or the end of the test.
        let wake_at = [
            next_tick,
            (!omit_taken).then_some(omit),
            window_end.filter(|_| !window_taken),
        ]
        .into_iter()
        .flatten()
        .min();
        if !sleep_until(s, wake_at) {
            break;
        }
        let done = s.all_done();
        let aborted = s.abort.load(Ordering::Acquire) && !done;
        // One snapshot per wake-up serves both the warm-up boundary and the interval, so no
        // byte lands in both an omitted interval and the counted total.
        let (taken_ns, snap) = timed_snapshot(s);
        let now_ns = if done { s.final_ns() } else { taken_ns };
        if !omit_taken && (now_ns >= omit.as_nanos() as u64 || done || aborted) {
            omit_taken = true;
            omit_ns = now_ns.min(omit.as_nanos() as u64);
            omit_counts = snap.clone();
            base = CounterBase::of(s);
        }
        // The measured window closes: its counters are the headline's, and its last interval
        // ends here (what arrives later is reported apart, not as another interval).
        let mut window_now = None;
        if let (Some(w), false) = (window_end, window_taken) {
            if !done && now_ns >= w.as_nanos() as u64 {
                // The counters are as of now: a ticker woken late must not count the extra
                // bytes over the nominal window.
                window_taken = true;
                window_now = Some(now_ns);
                s.mark_window(now_ns, snap.clone());
            }
        }
        if let Some(tick) = next_tick {
            let tick_ns = tick.as_nanos() as u64;
            let end_ns = match window_now {
                Some(w) => w,
                None if done => now_ns,
                None => tick_ns.min(now_ns),
            };
            let due = now_ns >= tick_ns || done || aborted || window_now.is_some();
            let long_enough = end_ns.saturating_sub(last_ns) * 20 >= interval.as_nanos() as u64;
            if due && long_enough {
                let flows = flow_ticks(s, &snap, &mut prev, &mut prev_retx, tcp_probe.as_ref());
                let nic_now = iface.and_then(sys::nic_snapshot);
                let nic = prev_nic
                    .as_ref()
                    .zip(nic_now.as_ref())
                    .map(|(a, b)| nic_tick(a, b));
                prev_nic = nic_now;
                on_interval(IntervalSample {
                    index,
                    start: last_ns as f64 / 1e9,
                    end: end_ns as f64 / 1e9,
                    omitted: end_ns <= omit.as_nanos() as u64 && !omit.is_zero(),
                    flows,
                    nic,
                    probe: None,
                });
                index += 1;
                last_ns = end_ns;
            }
            if due {
                next_tick = window_now.is_none().then_some(tick + interval);
            }
        }
        if done || aborted {
            let wall = now_ns.saturating_sub(omit_ns) as f64 / 1e9;
            return TickerOut::since(base, &CounterBase::of(s), wall, omit_ns, omit_counts);
        }
    }
    TickerOut::empty(n)
}

/// The interface counters a side's first interval starts from. A scheduled side reads them
/// again just before its instant (NIC_AHEAD), as the base of its totals too: read when it
/// was set up, they would add the wait's set-up packets (every client's, on a plan's
/// receiver) to the first interval and to the totals; read at the instant, a hundred sides
/// starting together would take the CPU from their data threads. This assumes the two ends'
/// clocks agree within NIC_AHEAD; an instant cut to the cap is each end's own (the peer may
/// start first), so such a side keeps the base read before `start`. CPU and UDP counters
/// keep their base (machine-wide; their figures include the wait's set-up).
fn first_nic(s: &Core, iface: Option<&str>, base: &mut CounterBase) -> Option<sys::NicSnapshot> {
    if iface.is_some() && s.on_instant && s.start > Instant::now() {
        s.wait_until(s.start.checked_sub(NIC_AHEAD).unwrap_or(s.start));
        base.nic = iface.and_then(sys::nic_snapshot);
        return base.nic.clone();
    }
    iface.and_then(sys::nic_snapshot)
}

/// Sleeps on the side's wake-up until `wake_at` (since the side's start), the side's end or
/// its abort; false if the lock is poisoned.
fn sleep_until(s: &Core, wake_at: Option<Duration>) -> bool {
    let Ok(mut g) = s.wake.0.lock() else {
        return false;
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
            Err(_) => return false,
        };
    }
    true
}

/// Every flow's interval from its counters at the last tick (`prev`, updated) and now
/// (`snap`), with the senders' TCP_INFO.
fn flow_ticks(
    s: &Core,
    snap: &[CounterSnapshot],
    prev: &mut [CounterSnapshot],
    prev_retx: &mut [u64],
    tcp_probe: Option<&TcpProbe>,
) -> Vec<FlowTick> {
    (0..s.meta.len())
        .map(|i| {
            let tcp = tcp_probe
                .filter(|_| s.meta[i].role == Role::Sender)
                .and_then(|probe| probe(i))
                .map(|ti| tcp_tick(&ti, &mut prev_retx[i]));
            let t = flow_tick(s, i, &prev[i], &snap[i], tcp);
            prev[i] = snap[i];
            t
        })
        .collect()
}

/// Flow `i`'s interval from its counters before and now.
fn flow_tick(
    s: &Core,
    i: usize,
    prev: &CounterSnapshot,
    cur: &CounterSnapshot,
    tcp: Option<TcpTick>,
) -> FlowTick {
    FlowTick {
        id: s.meta[i].id,
        bytes: cur.bytes - prev.bytes,
        calls: cur.calls - prev.calls,
        tcp,
        udp: s.udp.then(|| udp_tick(prev, cur)),
    }
}

/// A sender's TCP_INFO as an interval's figures: retransmits since `prev_retx` (updated).
fn tcp_tick(ti: &TcpInfo, prev_retx: &mut u64) -> TcpTick {
    let d = ti.retransmits.map(|r| r.saturating_sub(*prev_retx));
    *prev_retx = ti.retransmits.unwrap_or(0);
    TcpTick {
        retransmits: d,
        snd_cwnd: ti.snd_cwnd,
        rtt_us: ti.rtt_us,
    }
}

/// An interface's counters over an interval (they wrap).
fn nic_tick(a: &sys::NicSnapshot, b: &sys::NicSnapshot) -> NicTick {
    let d = |x: u64, y: u64| y.wrapping_sub(x);
    NicTick {
        rx_packets: d(a.rx_packets, b.rx_packets),
        tx_packets: d(a.tx_packets, b.tx_packets),
        rx_bytes: d(a.rx_bytes, b.rx_bytes),
        tx_bytes: d(a.tx_bytes, b.tx_bytes),
    }
}
