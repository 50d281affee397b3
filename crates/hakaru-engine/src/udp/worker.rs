//! A UDP worker thread: its share of the flows (senders and receivers), each pass over them
//! moving one batch of datagrams per flow, and the wait between passes.

use super::*;

/// A sender's state, owned by its worker.
struct Sender {
    idx: usize,
    flow: u16,
    /// Next sequence number (= datagrams sent so far).
    seq: u64,
    remaining: Option<u64>,
    /// Pacing origin and gap; `None` when unpaced.
    gap_ns: Option<f64>,
    t0: Instant,
    gso: bool,
    max_segments: usize,
    blocked_since: Option<Instant>,
}

/// A receiver's state, owned by its worker.
struct Receiver {
    idx: usize,
    flow: u16,
    tracker: SeqTracker,
    /// Bytes each receive buffer needs (one datagram, or a GRO buffer).
    buf_len: usize,
    ignored: u64,
    socket_drops: Option<u64>,
    layout: Layout,
    expected: Option<u64>,
    last_rx: Option<Instant>,
}

enum Flow {
    Send(Box<Sender>),
    Recv(Box<Receiver>),
}

/// Buffers one worker's flows take turns with: every send rewrites the headers it sends and a
/// receive's datagrams are read before the next, so one set serves all of a worker's flows.
/// Per-flow buffers made 256 flows of 16-byte datagrams touch 4 MiB per round over the flows,
/// more than a core's L2 cache (docs/BENCHMARKS.md, packet rate with many flows).
struct Scratch {
    /// Send buffer: the payload pattern, room for the largest batch of the worker's senders.
    tx: Vec<u8>,
    /// Receive batch, sized for the worker's receivers (`None` without receivers).
    rx: Option<sys::RecvBatch>,
}

impl Scratch {
    fn for_flows(s: &Shared, flows: &[Flow]) -> Scratch {
        let length = s.cfg.length;
        let tx_len = flows
            .iter()
            .map(|f| match f {
                Flow::Send(snd) => snd.max_segments * length,
                Flow::Recv(_) => 0,
            })
            .max()
            .unwrap_or(0);
        let mut tx = s.cfg.payload.fill(tx_len);
        tx.shrink_to_fit();
        let buf_len = flows
            .iter()
            .filter_map(|f| match f {
                Flow::Recv(r) => Some(r.buf_len),
                Flow::Send(_) => None,
            })
            .max();
        // Large datagrams (or GRO buffers) need few per call: cap the buffers at 512 KiB.
        let rx = buf_len.map(|len| {
            let len = len.max(64);
            sys::RecvBatch::new(s.ucfg.batch.min((524_288 / len).max(2)), len)
        });
        Scratch { tx, rx }
    }
}

/// Paths one worker used, kept locally (no shared lock per send or receive) and merged into
/// [`Shared::paths`] when the worker ends.
#[derive(Default, Clone, Copy)]
struct Used {
    gso: bool,
    mmsg_send: bool,
    plain_send: bool,
    mmsg_recv: bool,
}

pub(super) fn worker(s: &Shared, mine: Vec<usize>, pin: Option<usize>) {
    let mut used = Used::default();
    run_flows(s, mine, pin, &mut used);
    if let Ok(mut p) = s.paths.lock() {
        p.gso |= used.gso;
        p.mmsg_send |= used.mmsg_send;
        p.plain_send |= used.plain_send;
        p.mmsg_recv |= used.mmsg_recv;
    }
}

// hot loop: the UDP worker's pass over its flows, every batch of datagrams through it; kept
// whole so a pass is one function with its flows and scratch buffers in registers.
fn run_flows(s: &Shared, mine: Vec<usize>, pin: Option<usize>, used: &mut Used) {
    if let Some(cpu) = pin {
        if let Err(e) = sys::pin_current_thread(cpu) {
            tracing::warn!("could not pin worker to CPU {cpu}: {e}");
        }
    }
    if s.ucfg.rate.gap_ns(1).is_some() {
        sys::fine_timers();
    }
    let length = s.cfg.length;
    let layout = Layout::for_length(length);
    let deadline = s.deadline();
    let mut flows: Vec<Flow> = mine
        .iter()
        .map(|&idx| match s.meta[idx].role {
            Role::Sender => Flow::Send(Box::new(new_sender(s, idx))),
            Role::Receiver => Flow::Recv(Box::new(new_receiver(s, idx, layout))),
        })
        .collect();
    let mut scratch = Scratch::for_flows(s, &flows);
    // A sender with nothing to send is done at once.
    flows.retain(|f| match f {
        Flow::Send(snd) if snd.remaining == Some(0) => {
            finish_sender(s, snd);
            false
        }
        _ => true,
    });
    let has_receivers = flows.iter().any(|f| matches!(f, Flow::Recv(_)));
    let mut last_received = Instant::now();
    // Time between the last two receptions: no spinning until datagrams come close together.
    let mut gap = Duration::MAX;
    while !flows.is_empty() {
        if s.abort.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let stop = s.stop_send.load(Ordering::Acquire) || deadline.is_some_and(|d| now >= d);
        let peer_done = s.peer_done.load(Ordering::Acquire);
        let mut progressed = false;
        let mut next_due: Option<Instant> = None;
        let mut k = 0;
        while k < flows.len() {
            let finished = match &mut flows[k] {
                Flow::Send(snd) => {
                    if stop {
                        true
                    } else {
                        match send_step(s, snd, &mut scratch.tx, now, &mut next_due, used) {
                            Ok(moved) => {
                                progressed |= moved;
                                snd.remaining == Some(0)
                            }
                            Err(e) => {
                                s.finish_flow(snd.idx, Some(e));
                                s.sender_finished();
                                flows.swap_remove(k);
                                continue;
                            }
                        }
                    }
                }
                Flow::Recv(rcv) => match recv_step(s, rcv, scratch.rx.as_mut(), used) {
                    Ok(moved) => {
                        progressed |= moved;
                        if moved {
                            gap = now.duration_since(last_received);
                            last_received = now;
                        }
                        !moved && receiver_complete(s, rcv, peer_done, deadline, now)
                    }
                    Err(e) => {
                        s.finish_flow(rcv.idx, Some(e));
                        flows.swap_remove(k);
                        continue;
                    }
                },
            };
            if finished {
                match flows.swap_remove(k) {
                    Flow::Send(snd) => finish_sender(s, &snd),
                    Flow::Recv(mut rcv) => finish_receiver(s, &mut rcv),
                }
                continue;
            }
            k += 1;
        }
        if !progressed && has_receivers && gap < SPIN && now.duration_since(last_received) < SPIN {
            std::thread::yield_now();
            continue;
        }
        if !progressed && !flows.is_empty() {
            let mut wait = Duration::from_millis(50);
            if let Some(d) = next_due {
                wait = wait.min(d.saturating_duration_since(Instant::now()));
            }
            if let Some(d) = deadline {
                if !stop {
                    wait = wait.min(d.saturating_duration_since(Instant::now()));
                }
            }
            wait_ready(s, &flows, wait);
        }
    }
}

fn new_sender(s: &Shared, idx: usize) -> Sender {
    let length = s.cfg.length;
    let fd = s.sockets[idx].as_raw_fd();
    // GSO needs at least two datagrams per send and at most 64 KiB per send.
    let max_by_size = (65_507 / length.max(1)).max(1);
    let max_segments = s.ucfg.batch.min(max_by_size).max(1);
    let mut gso = false;
    if s.ucfg.gso && max_segments > 1 {
        match u16::try_from(length)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
            .and_then(|l| sys::udp_set_gso(fd, l))
        {
            Ok(()) => gso = true,
            Err(e) => s.note_fallback(format!(
                "UDP GSO unavailable ({e}); sending with {}",
                sys::BATCH_SEND
            )),
        }
    }
    // A sendmmsg batch of large datagrams gains nothing over a few: cap the buffer at 256 KiB
    // per flow so 1024 flows of 64 KiB datagrams do not hold gigabytes.
    let batch = if gso {
        max_segments
    } else {
        s.ucfg.batch.min((262_144 / length.max(1)).max(1))
    };
    Sender {
        idx,
        flow: s.meta[idx].id as u16,
        seq: 0,
        remaining: s.meta[idx].quota,
        gap_ns: s.ucfg.rate.gap_ns(length as u64),
        t0: s.start,
        gso,
        max_segments: batch,
        blocked_since: None,
    }
}

fn new_receiver(s: &Shared, idx: usize, layout: Layout) -> Receiver {
    let fd = s.sockets[idx].as_raw_fd();
    let mut buf_len = s.cfg.length + 1;
    if s.ucfg.gro {
        match sys::udp_set_gro(fd) {
            Ok(()) => {
                buf_len = 65_536;
                if let Ok(mut p) = s.paths.lock() {
                    p.gro = true;
                }
            }
            Err(e) => s.note_fallback(format!("UDP GRO unavailable ({e}); receiving per datagram")),
        }
    }
    let (ts, ovfl) = sys::udp_enable_rx_meta(fd);
    if ts {
        if let Ok(mut p) = s.paths.lock() {
            p.kernel_ts = true;
        }
    }
    Receiver {
        idx,
        flow: s.meta[idx].id as u16,
        tracker: SeqTracker::new(),
        buf_len,
        ignored: 0,
        // The kernel attaches the drop counter only once it is non-zero.
        socket_drops: ovfl.then_some(0),
        layout,
        expected: None,
        last_rx: None,
    }
}

/// Sends what is due on one flow. `Ok(true)` if datagrams went out; `Err` names a fatal error.
fn send_step(
    s: &Shared,
    snd: &mut Sender,
    buf: &mut [u8],
    now: Instant,
    next_due: &mut Option<Instant>,
    used: &mut Used,
) -> Result<bool, String> {
    let mut count = snd.max_segments as u64;
    if let Some(gap) = snd.gap_ns {
        let elapsed = now.saturating_duration_since(snd.t0).as_nanos() as f64;
        let due_total = (elapsed / gap).floor() as u64 + 1;
        let due = due_total.saturating_sub(snd.seq);
        if due == 0 {
            let at = snd.t0 + Duration::from_nanos((snd.seq as f64 * gap) as u64);
            *next_due = Some(next_due.map_or(at, |d| d.min(at)));
            return Ok(false);
        }
        count = count.min(due);
    }
    if let Some(r) = snd.remaining {
        count = count.min(r);
    }
    let count = count as usize;
    let length = s.cfg.length;
    let sent_ns = s.now_ns();
    for k in 0..count {
        s.ucfg.framing.write(
            &mut buf[k * length..(k + 1) * length],
            snd.flow,
            snd.seq + k as u64,
            sent_ns,
        );
    }
    let fd = s.sockets[snd.idx].as_raw_fd();
    let result = if snd.gso && count > 1 {
        sys::send_batch(fd, &[IoSlice::new(&buf[..count * length])], false).map(|m| m * count)
    } else {
        let slices: Vec<IoSlice<'_>> = buf[..count * length]
            .chunks(length)
            .map(IoSlice::new)
            .collect();
        sys::send_batch(fd, &slices, false)
    };
    match result {
        Ok(0) => Ok(false),
        Ok(n) => {
            snd.seq += n as u64;
            if let Some(r) = snd.remaining.as_mut() {
                *r -= (n as u64).min(*r);
            }
            snd.blocked_since = None;
            s.counters[snd.idx].add_sent((n * length) as u64, n as u64, snd.seq, s.now_ns());
            if snd.gso && count > 1 {
                used.gso = true;
            } else if count > 1 {
                used.mmsg_send = true;
            } else {
                used.plain_send = true;
            }
            Ok(true)
        }
        Err(e) if snd.gso && sys::is_gso_refused(&e) => {
            // The device cannot segment (no checksum offload) or refused the size: fall back.
            let _ = sys::udp_set_gso(fd, 0);
            snd.gso = false;
            s.note_fallback(format!(
                "UDP GSO send failed ({e}); fell back to {}",
                sys::BATCH_SEND
            ));
            Ok(false)
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) || sys::is_out_of_buffers(&e) =>
        {
            let since = *snd.blocked_since.get_or_insert(now);
            if now.duration_since(since) > s.cfg.stall_timeout {
                return Err(format!(
                    "flow {}: could not send for {:.1} s (socket buffer full)",
                    snd.flow,
                    s.cfg.stall_timeout.as_secs_f64()
                ));
            }
            Ok(false)
        }
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Err(format!(
            "flow {}: sending: the peer's port is closed (ICMP port unreachable; did it exit?)",
            snd.flow
        )),
        Err(e) => Err(format!("flow {}: sending: {e}", snd.flow)),
    }
}

fn finish_sender(s: &Shared, snd: &Sender) {
    s.finish_flow(snd.idx, None);
    s.sender_finished();
}

/// Receives one batch on a flow. `Ok(true)` if anything arrived.
fn recv_step(
    s: &Shared,
    rcv: &mut Receiver,
    batch: Option<&mut sys::RecvBatch>,
    used: &mut Used,
) -> Result<bool, String> {
    let Some(batch) = batch else {
        return Err(format!("flow {}: no receive buffers", rcv.flow));
    };
    let fd = s.sockets[rcv.idx].as_raw_fd();
    let n = match sys::recv_batch(fd, batch, false) {
        Ok(n) => n,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            return Ok(false)
        }
        // An ICMP error queued by an earlier send of ours on a bidirectional path is not fatal
        // for the receiving half; it is reported by the sending half if it matters.
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(false),
        Err(e) => return Err(format!("flow {}: receiving: {e}", rcv.flow)),
    };
    if n == 0 {
        return Ok(false);
    }
    rcv.last_rx = Some(Instant::now());
    let length = s.cfg.length;
    let mono_ns = s.now_ns();
    let real_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut bytes = 0u64;
    for i in 0..n {
        let data = batch.data(i);
        bytes += data.len() as u64;
        // Kernel receive time where available; otherwise this batch's clock read.
        let arrival = batch.timestamp_ns(i).unwrap_or(real_ns) as i128;
        let seg = batch.segment_size(i).map_or(data.len(), usize::from).max(1);
        if batch.truncated(i) {
            rcv.ignored += 1;
            continue;
        }
        for chunk in data.chunks(seg) {
            if chunk.len() != length {
                if FlowHello::decode(chunk).is_none() {
                    rcv.ignored += 1;
                }
                continue;
            }
            match rcv.layout {
                Layout::Counted => rcv.tracker.on_unsequenced(),
                _ => match s.ucfg.framing.read(chunk, rcv.flow) {
                    Some(h) if h.flow == rcv.flow => {
                        let transit = h.sent_ns.map(|sent| {
                            // Both clocks only need to be steady over the test: the offset
                            // between the sender's epoch and ours cancels in RFC 3550's D.
                            (arrival - i128::from(sent)).clamp(i64::MIN as i128, i64::MAX as i128)
                                as i64
                        });
                        rcv.tracker.on_datagram(h.seq, transit);
                    }
                    _ => rcv.ignored += 1,
                },
            }
        }
    }
    if let Some(d) = batch.rxq_drops() {
        rcv.socket_drops = Some(u64::from(d));
    }
    used.mmsg_recv |= n > 1;
    let counts = rcv.tracker.counts();
    s.counters[rcv.idx].publish_recv(bytes, &counts, rcv.ignored, rcv.socket_drops, mono_ns);
    Ok(true)
}

/// Ends a receiving flow with the socket's final drop count: drops after the last datagram
/// that arrived are not reported with any datagram.
fn finish_receiver(s: &Shared, rcv: &mut Receiver) {
    let fd = s.sockets[rcv.idx].as_raw_fd();
    if let Some(d) = sys::udp_socket_drops(fd) {
        let d = d.max(rcv.socket_drops.unwrap_or(0));
        rcv.socket_drops = Some(d);
        s.counters[rcv.idx].set_socket_drops(d);
    }
    s.finish_flow(rcv.idx, None);
}

/// True when a receiver has nothing more to wait for: the peer's senders are done and either
/// everything they sent has been seen, the flow has been quiet for [`QUIET`], or [`LINGER`] is
/// over. Without word from the peer,
/// a timed test's receiver still ends a stall timeout after the deadline.
fn receiver_complete(
    s: &Shared,
    rcv: &mut Receiver,
    peer_done: bool,
    deadline: Option<Instant>,
    now: Instant,
) -> bool {
    if peer_done {
        if rcv.expected.is_none() {
            rcv.expected = s.peer_sent.lock().ok().and_then(|v| v[rcv.idx]);
        }
        let c = rcv.tracker.counts();
        let seen = match rcv.layout {
            Layout::Counted => c.received,
            _ => c.next_seq,
        };
        if rcv.expected.is_some_and(|e| seen >= e) {
            return true;
        }
        let Some(done_at) = s.peer_done_at.lock().ok().and_then(|t| *t) else {
            return true;
        };
        let heard = rcv.last_rx.map_or(done_at, |t| t.max(done_at));
        return now.duration_since(heard) >= QUIET || now.duration_since(done_at) >= LINGER;
    }
    deadline.is_some_and(|d| now > d + s.cfg.stall_timeout)
}

fn wait_ready(s: &Shared, flows: &[Flow], timeout: Duration) {
    if timeout.is_zero() {
        return;
    }
    let mut set = sys::PollSet::new();
    for f in flows {
        match f {
            Flow::Recv(r) => set.push(s.sockets[r.idx].as_raw_fd(), sys::Interest::Read),
            Flow::Send(snd) if snd.blocked_since.is_some() => {
                set.push(s.sockets[snd.idx].as_raw_fd(), sys::Interest::Write)
            }
            Flow::Send(_) => {}
        }
    }
    if set.is_empty() {
        // Only paced senders waiting for their next datagram: sleep to the due time.
        std::thread::sleep(timeout);
        return;
    }
    set.wait(timeout);
}
