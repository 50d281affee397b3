//! Raw UDP endpoints: a sink that takes datagrams from one sender (plain, ttcp-style with
//! start/end markers, or an iperf2 client answered with its server report) and a source that
//! sends datagrams at a rate.

use std::io::{self, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hakaru_model::{Iperf2Info, RawProtocol, RawResult, RawRole, RawSpec};
use hakaru_proto::iperf2::{self, ServerReport, TestHeader, UdpAccount, UdpHeader};

use crate::raw::{
    counts_from, io_err, iperf2_info, is_retry, next_block, source_done, unix_now, Meter, RawError,
    RawOutcome, SampleFn, TICK,
};
use crate::seq::SeqCounts;
use crate::sys;
use crate::tcp::Payload;

/// Datagrams this short are ttcp's start and end markers.
pub const MARKER_MAX: usize = 4;
/// End markers a ttcp sender sends (the receiver stops at the first; the rest cover loss).
const END_MARKERS: usize = 4;
/// Receive buffer a sink asks for.
const RCVBUF: usize = 4 << 20;
/// Largest datagram a sink reads whole.
const RECV_BUF: usize = 65_536;
/// An iperf2 server repeats its report until the client is quiet this long.
const REPORT_QUIET: Duration = Duration::from_millis(250);
/// At most this many reports per FIN (the stock server's bound).
const REPORT_TRIES: usize = 10;

/// What the sink has seen of its sender so far.
struct SinkState {
    peer: SocketAddr,
    seq64: bool,
    header: Option<TestHeader>,
    account: UdpAccount,
    received: u64,
    ignored: u64,
}

impl SinkState {
    fn seq_counts(&self) -> SeqCounts {
        let seq = self.header.is_some() || self.account.last > 0;
        SeqCounts {
            received: self.received,
            lost: if seq { self.account.lost() } else { 0 },
            out_of_order: self.account.out_of_order,
            duplicates: 0,
            next_seq: if seq { self.account.last + 1 } else { 0 },
            jitter_ns: (self.account.received > 1).then_some(self.account.jitter * 1e9),
        }
    }
}

/// Waits for the datagram that starts a transfer: for iperf2, one with a positive id (stray
/// FINs and garbage are ignored); otherwise the first that is not a ttcp start marker.
fn first_datagram(
    socket: &UdpSocket,
    spec: &RawSpec,
    buf: &mut [u8],
    stop: &AtomicBool,
    ignored: &mut u64,
) -> Result<Option<(usize, SocketAddr)>, RawError> {
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        let (n, from) = match socket.recv_from(buf) {
            Ok(x) => x,
            Err(e) if is_retry(&e) => continue,
            Err(e) => return Err(io_err("receiving")(e)),
        };
        if spec.iperf2 {
            let seq64 = TestHeader::parse(buf.get(iperf2::UDP_HEADER..n).unwrap_or(&[]))
                .is_some_and(|h| h.flags & iperf2::FLAG_SEQNO64B != 0);
            match UdpHeader::decode(&buf[..n], seq64) {
                Some(h) if h.seq > 0 => return Ok(Some((n, from))),
                _ => *ignored += 1,
            }
        } else if spec.markers && n <= MARKER_MAX {
            // ttcp's start marker: not data.
            *ignored += 1;
        } else {
            return Ok(Some((n, from)));
        }
    }
}

/// Receives datagrams from the first sender until its end (an iperf2 FIN, a ttcp end marker),
/// `--idle` without a datagram, or Ctrl-C; an iperf2 FIN is answered with the server report.
pub fn udp_sink(
    socket: &UdpSocket,
    spec: &RawSpec,
    iface: Option<String>,
    on_sample: SampleFn,
    stop: &AtomicBool,
) -> Result<RawOutcome, RawError> {
    socket
        .set_read_timeout(Some(TICK))
        .map_err(io_err("setting a receive timeout"))?;
    // Best effort: a bigger buffer rides out bursts from an unpaced sender; the kernel caps
    // it at rmem_max.
    let _ = socket2::SockRef::from(socket).set_recv_buffer_size(RCVBUF);
    let mut buf = vec![0u8; RECV_BUF];
    let mut ignored = 0;
    let Some((n0, peer)) = first_datagram(socket, spec, &mut buf, stop, &mut ignored)? else {
        let mut result = RawResult::new(RawRole::Sink, RawProtocol::Udp);
        result.ignored = Some(ignored);
        return Ok(RawOutcome {
            result,
            report: None,
            interrupted: true,
            started_unix: unix_now(),
        });
    };
    let header = spec
        .iperf2
        .then(|| TestHeader::parse(buf.get(iperf2::UDP_HEADER..n0).unwrap_or(&[])))
        .flatten();
    let mut st = SinkState {
        peer,
        seq64: header
            .as_ref()
            .is_some_and(|h| h.flags & iperf2::FLAG_SEQNO64B != 0),
        header,
        account: UdpAccount::default(),
        received: 0,
        ignored,
    };
    let iface = iface.or_else(|| sys::interface_for_addr(peer.ip()));
    let meter = Meter::start(spec, iface, on_sample)?;
    let mut out = spec.stdio.then(io::stdout);
    let (mut stdio_bytes, mut error, mut interrupted, mut fin) = (0u64, None, false, false);
    let mut len = n0;
    let mut last_arrival = Instant::now();
    loop {
        if len > 0 {
            if spec.iperf2 {
                match UdpHeader::decode(&buf[..len], st.seq64) {
                    Some(h) => {
                        st.account
                            .add(h.seq.unsigned_abs(), h.sent_secs(), unix_now());
                        fin = h.is_fin();
                    }
                    None => {
                        st.ignored += 1;
                        meter.core.counters[0].set_ignored(st.ignored);
                        len = 0;
                    }
                }
            } else if spec.markers && len <= MARKER_MAX {
                break; // ttcp's end marker
            }
        }
        if len > 0 {
            st.received += 1;
            let c = st.seq_counts();
            meter.core.counters[0].publish_recv(len as u64, &c, st.ignored, None, meter.now_ns());
            last_arrival = Instant::now();
            if let Some(o) = out.as_mut() {
                if let Err(e) = o.write_all(&buf[..len]) {
                    error = Some(format!("--stdout: writing: {e}"));
                    break;
                }
                stdio_bytes += len as u64;
            }
            if fin {
                break;
            }
        }
        len = 0;
        if stop.load(Ordering::Acquire) {
            interrupted = true;
            break;
        }
        if last_arrival.elapsed() >= spec.idle.0 {
            break;
        }
        match socket.recv_from(&mut buf) {
            Ok((n, from)) if from == st.peer => len = n,
            Ok(_) => {
                st.ignored += 1;
                meter.core.counters[0].set_ignored(st.ignored);
            }
            Err(e) if is_retry(&e) => {}
            Err(e) => {
                error = Some(format!("receiving: {e}"));
                break;
            }
        }
    }
    if let Some(o) = out.as_mut() {
        if let Err(e) = o.flush() {
            error.get_or_insert(format!("--stdout: writing: {e}"));
        }
    }
    let started_unix = meter.started_unix;
    let report = meter.finish(error);
    let mut result = RawResult::new(RawRole::Sink, RawProtocol::Udp);
    result.peer = Some(st.peer.to_string());
    counts_from(&mut result, &report);
    result.ignored = Some(st.ignored);
    result.stdio_bytes = spec.stdio.then_some(stdio_bytes);
    if spec.iperf2 {
        result.iperf2 = Some(iperf2_outcome(&st, &result, fin, socket, stop));
    }
    Ok(RawOutcome {
        result,
        report: Some(report),
        interrupted,
        started_unix,
    })
}

/// The iperf2 figures of a UDP sink; a FIN is answered with the server report here.
fn iperf2_outcome(
    st: &SinkState,
    result: &RawResult,
    fin: bool,
    socket: &UdpSocket,
    stop: &AtomicBool,
) -> Iperf2Info {
    let mut info = iperf2_info(st.header.as_ref());
    info.datagrams = Some(st.account.last);
    info.lost = Some(st.account.lost());
    info.out_of_order = Some(st.account.out_of_order);
    info.jitter_ms = (st.account.received > 1).then_some(st.account.jitter * 1e3);
    if fin {
        let rep = ServerReport {
            bytes: result.bytes,
            seconds: result.seconds,
            lost: st.account.lost(),
            out_of_order: st.account.out_of_order,
            datagrams: st.account.last,
            jitter: st.account.jitter,
        };
        info.fin_answered = answer_fin(socket, st.peer, &rep.encode(), stop);
    }
    info
}

/// Sends the server report to the client, again for each FIN it resends, until it is quiet
/// for [`REPORT_QUIET`]. True if a report was sent.
fn answer_fin(socket: &UdpSocket, peer: SocketAddr, report: &[u8], stop: &AtomicBool) -> bool {
    if socket.set_read_timeout(Some(REPORT_QUIET)).is_err() {
        return false;
    }
    let mut sent = false;
    let mut b = [0u8; 2048];
    for _ in 0..REPORT_TRIES {
        sent |= socket.send_to(report, peer).is_ok();
        loop {
            match socket.recv_from(&mut b) {
                Ok((_, from)) if from == peer => break,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return sent,
            }
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
    }
    sent
}

#[cfg(unix)]
fn out_of_buffers(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

#[cfg(not(unix))]
fn out_of_buffers(_e: &io::Error) -> bool {
    false
}

/// Sends datagrams of `-l` bytes on a connected socket: `-n` of them, for `-t`, or stdin cut
/// into datagrams; paced to `-b` when given, with ttcp's markers around them unless turned off.
pub fn udp_source(
    socket: &UdpSocket,
    spec: &RawSpec,
    iface: Option<String>,
    on_sample: SampleFn,
    stop: &AtomicBool,
) -> Result<RawOutcome, RawError> {
    let peer = socket.peer_addr().ok().map(|a| a.to_string());
    let len = spec.length.0 as usize;
    let mut buf = if spec.stdio {
        vec![0u8; len]
    } else {
        Payload::Letters.fill(len)
    };
    let marker = Payload::Letters.fill(MARKER_MAX);
    if spec.markers {
        let _ = socket.send(&marker);
    }
    sys::tighten_timer_slack();
    let mut stdin = spec.stdio.then(io::stdin);
    let meter = Meter::start(spec, iface, on_sample)?;
    let deadline = spec.duration.map(|d| meter.core.start + d.0);
    let gap = spec
        .rate
        .map(|r| Duration::from_secs_f64(len as f64 * 8.0 / r.0));
    let mut next = Instant::now();
    let (mut sent, mut stdio_bytes, mut error, mut interrupted) = (0u64, 0u64, None, false);
    'outer: loop {
        if let Some(i) = source_done(spec, sent, deadline, stop) {
            interrupted = i;
            break;
        }
        let n = match next_block(stdin.as_mut(), &mut buf, len) {
            Ok(Some(n)) => n,
            Ok(None) => break,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        if spec.stdio {
            stdio_bytes += n as u64;
        }
        if let Some(g) = gap {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            next += g;
        }
        loop {
            match socket.send(&buf[..n]) {
                Ok(w) => {
                    sent += 1;
                    meter.core.counters[0].add_sent(w as u64, 1, sent + 1, meter.now_ns());
                    break;
                }
                Err(e) if is_retry(&e) || out_of_buffers(&e) => {
                    if stop.load(Ordering::Acquire) {
                        interrupted = true;
                        break 'outer;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    error = Some(
                        "sending: nobody is listening there (ICMP port unreachable)".to_string(),
                    );
                    break 'outer;
                }
                Err(e) => {
                    error = Some(format!("sending: {e}"));
                    break 'outer;
                }
            }
        }
    }
    let started_unix = meter.started_unix;
    let report = meter.finish(error);
    if spec.markers {
        for _ in 0..END_MARKERS {
            let _ = socket.send(&marker);
        }
    }
    let mut result = RawResult::new(RawRole::Source, RawProtocol::Udp);
    result.peer = peer;
    counts_from(&mut result, &report);
    result.stdio_bytes = spec.stdio.then_some(stdio_bytes);
    Ok(RawOutcome {
        result,
        report: Some(report),
        interrupted,
        started_unix,
    })
}
