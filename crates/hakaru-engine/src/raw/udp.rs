//! Raw UDP endpoints: a sink that takes datagrams from one sender (plain, or ttcp-style with
//! start/end markers) or from an iperf2 client's senders (each FIN answered with that sender's
//! server report), and a source that sends datagrams at a rate.

use std::io::{self, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hakaru_model::{Iperf2Info, RawProtocol, RawResult, RawRole, RawSpec};
use hakaru_proto::iperf2::{self, ServerReport, TestHeader, UdpAccount, UdpHeader};

use super::{
    counts_from, io_err, iperf2_info, iperf2_streams, is_retry, next_block, source_done,
    stream_results, unix_now, Meter, RawError, RawOutcome, SampleFn, TICK,
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

/// What the sink has seen of one sender so far.
struct SinkState {
    peer: SocketAddr,
    seq64: bool,
    header: Option<TestHeader>,
    account: UdpAccount,
    received: u64,
    bytes: u64,
    /// When its first datagram was taken in.
    first: Instant,
    last: Instant,
    /// True once its iperf2 FIN arrived.
    fin: bool,
    /// Server reports sent in answer to its FINs.
    reports: usize,
}

impl SinkState {
    fn new(peer: SocketAddr, header: Option<TestHeader>) -> SinkState {
        let now = Instant::now();
        SinkState {
            peer,
            seq64: header
                .as_ref()
                .is_some_and(|h| h.flags & iperf2::FLAG_SEQNO64B != 0),
            header,
            account: UdpAccount::default(),
            received: 0,
            bytes: 0,
            first: now,
            last: now,
            fin: false,
            reports: 0,
        }
    }

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

    /// The iperf2 server report of this sender's datagrams so far.
    fn server_report(&self) -> ServerReport {
        ServerReport {
            bytes: self.bytes,
            seconds: self.last.duration_since(self.first).as_secs_f64(),
            lost: self.account.lost(),
            out_of_order: self.account.out_of_order,
            datagrams: self.account.last,
            jitter: self.account.jitter,
        }
    }

    /// Sends (again) the server report for a FIN, at most [`REPORT_TRIES`] times.
    fn answer_fin(&mut self, socket: &UdpSocket) {
        if self.reports < REPORT_TRIES
            && socket
                .send_to(&self.server_report().encode(), self.peer)
                .is_ok()
        {
            self.reports += 1;
        }
    }

    fn iperf2_info(&self) -> Iperf2Info {
        let mut info = iperf2_info(self.header.as_ref());
        info.datagrams = Some(self.account.last);
        info.lost = Some(self.account.lost());
        info.out_of_order = Some(self.account.out_of_order);
        info.jitter_ms = (self.account.received > 1).then_some(self.account.jitter * 1e3);
        info.fin_answered = self.reports > 0;
        info
    }
}

/// The iperf2 test header carried by a datagram, if any.
fn datagram_header(d: &[u8]) -> Option<TestHeader> {
    TestHeader::parse(d.get(iperf2::UDP_HEADER..).unwrap_or(&[]))
}

/// True if `d` starts an iperf2 sender's data: a datagram with a positive id.
fn iperf2_start(d: &[u8]) -> bool {
    let seq64 = datagram_header(d).is_some_and(|h| h.flags & iperf2::FLAG_SEQNO64B != 0);
    UdpHeader::decode(d, seq64).is_some_and(|h| h.seq > 0)
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
            if iperf2_start(&buf[..n]) {
                return Ok(Some((n, from)));
            }
            *ignored += 1;
        } else if spec.markers && n <= MARKER_MAX {
            // ttcp's start marker: not data.
            *ignored += 1;
        } else {
            return Ok(Some((n, from)));
        }
    }
}

/// Receives one transfer: datagrams from the first sender and, for an iperf2 client with
/// `-P N`, from its other N-1 senders (same host, other ports), until every sender's end (an
/// iperf2 FIN, a ttcp end marker), `--idle` without a datagram, or Ctrl-C. Each iperf2 FIN
/// is answered with that sender's server report, again for each FIN the client resends.
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
    let header = spec.iperf2.then(|| datagram_header(&buf[..n0])).flatten();
    let want = if spec.stdio {
        1
    } else {
        iperf2_streams(header.as_ref())
    };
    let iface = iface.or_else(|| sys::interface_for_addr(peer.ip()));
    let meter = Meter::start(spec, iface, want, on_sample)?;
    let mut sink = Sink {
        spec,
        socket,
        senders: vec![SinkState::new(peer, header)],
        want,
        ignored,
        out: spec.stdio.then(io::stdout),
        stdio_bytes: 0,
    };
    let (mut error, mut interrupted) = (None, false);
    let mut arrived = Some((n0, 0));
    let mut last_arrival = Instant::now();
    loop {
        if let Some((len, i)) = arrived.take() {
            match sink.take(&buf[..len], i, &meter) {
                Ok(Taken::Data) => last_arrival = sink.senders[i].last,
                Ok(Taken::Other) => {}
                Ok(Taken::EndMarker) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        if sink.senders.len() == want && sink.senders.iter().all(|s| s.fin) {
            break;
        }
        if stop.load(Ordering::Acquire) {
            interrupted = true;
            break;
        }
        if last_arrival.elapsed() >= spec.idle.0 {
            break;
        }
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => arrived = sink.sender_of(&buf[..n], from, &meter).map(|i| (n, i)),
            Err(e) if is_retry(&e) => {}
            Err(e) => {
                error = Some(format!("receiving: {e}"));
                break;
            }
        }
    }
    if let Some(o) = sink.out.as_mut() {
        if let Err(e) = o.flush() {
            error.get_or_insert(format!("--stdout: writing: {e}"));
        }
    }
    let started_unix = meter.started_unix;
    let report = meter.finish(vec![error]);
    if spec.iperf2 && !interrupted {
        answer_late_fins(socket, &mut sink.senders, stop);
    }
    Ok(RawOutcome {
        result: sink.result(peer, &report),
        report: Some(report),
        interrupted,
        started_unix,
    })
}

/// A UDP sink while it runs: its senders (one, or an iperf2 client's streams), the datagrams
/// it ignored, and `--stdout`'s writer.
struct Sink<'a> {
    spec: &'a RawSpec,
    socket: &'a UdpSocket,
    senders: Vec<SinkState>,
    /// Senders expected: an iperf2 client's `-P`, else one.
    want: usize,
    ignored: u64,
    out: Option<io::Stdout>,
    stdio_bytes: u64,
}

/// What one datagram was to the sink.
enum Taken {
    /// Data: counted (and written with `--stdout`).
    Data,
    /// A FIN again, or not the sender's: nothing counted.
    Other,
    /// ttcp's end marker: the transfer is over.
    EndMarker,
}

impl Sink<'_> {
    /// Which sender a datagram from `from` is; another stream of the same iperf2 client is
    /// added, anyone else's datagram is ignored (and counted as such).
    fn sender_of(&mut self, datagram: &[u8], from: SocketAddr, meter: &Meter) -> Option<usize> {
        if let Some(i) = self.senders.iter().position(|s| s.peer == from) {
            return Some(i);
        }
        if self.senders.len() < self.want
            && from.ip() == self.senders[0].peer.ip()
            && iperf2_start(datagram)
        {
            self.senders
                .push(SinkState::new(from, datagram_header(datagram)));
            return Some(self.senders.len() - 1);
        }
        self.ignore(meter);
        None
    }

    fn ignore(&mut self, meter: &Meter) {
        self.ignored += 1;
        meter.core.counters[0].set_ignored(self.ignored);
    }

    /// Takes one datagram of sender `i`: its iperf2 header read (each FIN answered with the
    /// sender's report), counted, written to `--stdout`. An error is a failed write.
    fn take(&mut self, datagram: &[u8], i: usize, meter: &Meter) -> Result<Taken, String> {
        let len = datagram.len();
        if self.spec.iperf2 {
            let st = &mut self.senders[i];
            match UdpHeader::decode(datagram, st.seq64) {
                // A FIN the client sends again: it has not heard our report yet.
                Some(h) if st.fin && h.is_fin() => {
                    st.answer_fin(self.socket);
                    return Ok(Taken::Other);
                }
                Some(h) if !st.fin => {
                    st.account
                        .add(h.seq.unsigned_abs(), h.sent_secs(), unix_now());
                    st.fin = h.is_fin();
                }
                _ => {
                    self.ignore(meter);
                    return Ok(Taken::Other);
                }
            }
        } else if self.spec.markers && len <= MARKER_MAX {
            return Ok(Taken::EndMarker);
        }
        let st = &mut self.senders[i];
        st.received += 1;
        st.bytes += len as u64;
        st.last = Instant::now();
        let c = st.seq_counts();
        let ign = if i == 0 { self.ignored } else { 0 };
        meter.core.counters[i].publish_recv(len as u64, &c, ign, None, meter.now_ns());
        if let Some(o) = self.out.as_mut() {
            o.write_all(datagram)
                .map_err(|e| format!("--stdout: writing: {e}"))?;
            self.stdio_bytes += len as u64;
        }
        let st = &mut self.senders[i];
        if st.fin {
            st.answer_fin(self.socket);
        }
        Ok(Taken::Data)
    }

    /// The sink's result from its senders and its side's report.
    fn result(&self, peer: SocketAddr, report: &hakaru_model::SideReport) -> RawResult {
        let mut result = RawResult::new(RawRole::Sink, RawProtocol::Udp);
        result.peer = Some(peer.to_string());
        counts_from(&mut result, report);
        result.ignored = Some(self.ignored);
        result.stdio_bytes = self.spec.stdio.then_some(self.stdio_bytes);
        if self.spec.iperf2 {
            let infos: Vec<Iperf2Info> = self.senders.iter().map(SinkState::iperf2_info).collect();
            result.iperf2 = Some(sum_info(&infos));
            result.streams = stream_results(self.spec, report, self.senders.len(), |i, r| {
                r.peer = Some(self.senders[i].peer.to_string());
                r.iperf2 = Some(infos[i].clone());
            });
        }
        result
    }
}

/// After the transfer: answers the FINs a client resends (it has not heard our report) until
/// the senders are quiet for [`REPORT_QUIET`].
fn answer_late_fins(socket: &UdpSocket, senders: &mut [SinkState], stop: &AtomicBool) {
    if socket.set_read_timeout(Some(REPORT_QUIET)).is_err() {
        return;
    }
    let mut b = [0u8; 2048];
    while !stop.load(Ordering::Acquire) {
        match socket.recv_from(&mut b) {
            Ok((n, from)) => {
                let Some(st) = senders.iter_mut().find(|s| s.peer == from && s.fin) else {
                    continue;
                };
                if UdpHeader::decode(&b[..n], st.seq64).is_some_and(|h| h.is_fin()) {
                    st.answer_fin(socket);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// One client's iperf2 figures from its senders': counts add up, jitter is the worst.
fn sum_info(parts: &[Iperf2Info]) -> Iperf2Info {
    let mut info = parts.first().cloned().unwrap_or_default();
    if parts.len() < 2 {
        return info;
    }
    let add = |get: fn(&Iperf2Info) -> Option<u64>| parts.iter().map(get).sum::<Option<u64>>();
    info.datagrams = add(|i| i.datagrams);
    info.lost = add(|i| i.lost);
    info.out_of_order = add(|i| i.out_of_order);
    info.jitter_ms = parts.iter().filter_map(|i| i.jitter_ms).reduce(f64::max);
    info.fin_answered = parts.iter().all(|i| i.fin_answered);
    info
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
    sys::fine_timers();
    let mut stdin = spec.stdio.then(io::stdin);
    let meter = Meter::start(spec, iface, 1, on_sample)?;
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
                Err(e) if is_retry(&e) || sys::is_out_of_buffers(&e) => {
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
    let report = meter.finish(vec![error]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_clients_senders_add_up() {
        let part = |d: u64, l: u64, j: Option<f64>, fin: bool| Iperf2Info {
            client_version: Some("2.1.8".into()),
            datagrams: Some(d),
            lost: Some(l),
            out_of_order: Some(1),
            jitter_ms: j,
            fin_answered: fin,
            ..Iperf2Info::default()
        };
        let s = sum_info(&[part(10, 1, Some(0.5), true), part(20, 2, Some(0.2), true)]);
        assert_eq!(
            (s.datagrams, s.lost, s.out_of_order),
            (Some(30), Some(3), Some(2))
        );
        assert_eq!(s.jitter_ms, Some(0.5));
        assert!(s.fin_answered);
        assert_eq!(s.client_version.as_deref(), Some("2.1.8"));
        let s = sum_info(&[part(10, 0, None, true), part(5, 0, None, false)]);
        assert!(!s.fin_answered);
        assert_eq!(s.jitter_ms, None);
        let one = part(7, 0, Some(0.1), false);
        assert_eq!(sum_info(std::slice::from_ref(&one)), one);
    }
}
