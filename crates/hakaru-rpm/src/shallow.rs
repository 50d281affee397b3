//! What waits above a load connection's socket, kept to about a millisecond of the
//! connection's own rate at each of its three places, so a self probe's answer on that
//! connection waits behind a few milliseconds of load and then the path's queue, not behind
//! the endpoint's buffers (draft-ietf-ippm-responsiveness: endpoints keep what they buffer to
//! a few milliseconds of data).
//!
//! A probe's answer is queued by HTTP/2 after the load frame being written, then goes through
//! TLS's unsent records and the socket's unsent bytes. Sizes fixed in bytes weigh by the
//! connection's share of the bottleneck: 16 KiB at each place is 3 ms at 40 Mbit/s but 160 ms
//! at eight connections' share of 20 Mbit/s, and a drop-tail queue shares unevenly (some
//! connections get a fifth of the others' rate). So each load connection measures its rate
//! (bytes acknowledged, from TCP_INFO, every [`RETUNE`]) and sizes three things by it:
//!
//! - **the write**: [`Shallow`] hands TLS at most [`Depth::chunk`] bytes per write, and only
//!   once TLS has written everything it held and the socket has room under its mark
//!   (`hakaru_sys::SendRoom`), so TLS writes each record through at once and holds none;
//! - **the frame**: the load's DATA frames are one write less the frame header
//!   ([`Chunk::frame`]), and the load queues one at a time in HTTP/2 ([`Chunk::ahead`]), so
//!   a probe's answer waits behind the frame being written and at most one more: HTTP/2 sends
//!   streams' frames in turn, and with more load frames queued one would come between the
//!   answer's HEADERS and its DATA;
//! - **the socket**: TCP_NOTSENT_LOWAT ([`Depth::lowat`]): the kernel takes a write only
//!   while fewer bytes than that wait unsent, so it holds at most the mark plus one write.
//!
//! And the kernel paces the slow ones ([`Depth::pace`]), so what is in flight leaves evenly
//! and an answer written after it is not held for a burst's round trip.
//!
//! The first sizes come from the handshake's round trip (a congestion window of the first
//! packets over it) before any frame is queued, so a load on a slow path never queues frames
//! of the full size ahead of the probes.
//!
//! Each is [`AHEAD`] of the rate, between [`MIN_CHUNK`] (TLS and framing overhead of about 3 %
//! at the floor) and [`MAX_CHUNK`] (one full TLS record; at loopback rates the sizes are the
//! fixed ones of before, and so is the speed).

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A byte stream, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Time of the connection's rate each place may hold.
pub const AHEAD: Duration = Duration::from_millis(1);
/// Least bytes per write (and per frame, with its header; and the least unsent mark).
pub const MIN_CHUNK: usize = 1 << 10;
/// Most bytes per write: one TLS record of 16 KiB of plaintext.
pub const MAX_CHUNK: usize = 16 << 10;
/// HTTP/2's frame header.
const FRAME_HEADER: usize = 9;
/// How often the rate is read.
pub const RETUNE: Duration = Duration::from_millis(10);
/// Samples of the acknowledged rate before [`Depth::pace`] may answer yes.
pub const PACE_AFTER: u32 = 3;
/// Frames a load stream queues in HTTP/2 below full size ([`Chunk::ahead`]): one, so an answer
/// queued while the load's frame is written goes next with both its frames (HEADERS, DATA).
pub const FRAMES_AHEAD: usize = 1;

/// The write size a connection's load senders frame their data by, shared with its
/// [`Shallow`].
#[derive(Clone, Debug)]
pub struct Chunk(Arc<AtomicUsize>);

impl Chunk {
    fn new() -> Chunk {
        Chunk(Arc::new(AtomicUsize::new(MAX_CHUNK)))
    }

    /// Payload of one DATA frame: one write less the frame's header.
    pub fn frame(&self) -> usize {
        self.0
            .load(Ordering::Relaxed)
            .saturating_sub(FRAME_HEADER)
            .max(1)
    }

    /// Bytes the load may queue in HTTP/2 ahead of what it has sent, of at most `most`: all of
    /// it at full size, else [`FRAMES_AHEAD`] frames (frames are sized when queued, so frames
    /// queued long ago would be sized by a rate long gone; and HTTP/2 sends streams' frames in
    /// turn, so a second queued load frame would come between a probe answer's two).
    pub fn ahead(&self, most: usize) -> usize {
        let w = self.write();
        if w >= MAX_CHUNK {
            most
        } else {
            (FRAMES_AHEAD * w).min(most)
        }
    }

    fn write(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// The sizes, from the connection's rate: sans-IO (the caller reads the clock and the bytes
/// acknowledged), unit-tested.
#[derive(Debug)]
pub struct Depth {
    last: Option<(Instant, u64)>,
    /// Smoothed rate, bytes per second; `None` until the first sample.
    rate: Option<f64>,
    lowat: u32,
    /// Samples of what was acknowledged taken so far (the first, the window's, not counted).
    measured: u32,
}

impl Depth {
    /// Starts at the largest sizes, as before (a new connection's rate is not known yet).
    pub fn new() -> Depth {
        Depth {
            last: None,
            rate: None,
            lowat: MAX_CHUNK as u32,
            measured: 0,
        }
    }

    /// Takes the bytes the peer has acknowledged so far at `now` and what the congestion
    /// window carries a second (cwnd × MSS / RTT, bytes, when known); after [`RETUNE`] or more
    /// since the last sample, updates the rate and returns the new unsent mark when it moved
    /// by a quarter or more (a system call saved otherwise). The sample is the larger of the
    /// two: what was acknowledged alone would follow the sizes down whenever the socket ran
    /// short for a moment (and reads nothing while a new connection waits for its request),
    /// and nothing would raise them again; the window says what the connection may send.
    ///
    /// The first sample starts the clock and, when the window is known (the handshake gave
    /// the RTT), takes the window's rate at once: frames are sized when HTTP/2 queues them,
    /// and a load that queued its first [`Chunk::ahead`] at full size on a slow path (256 KiB
    /// of 16 KiB frames, a second of a 2 Mbit/s share) would put a frame of 16 KiB ahead of
    /// every probe answer on that connection until they drained.
    pub fn observe(&mut self, now: Instant, acked: u64, window: Option<f64>) -> Option<u32> {
        let sample = match self.last {
            None => {
                self.last = Some((now, acked));
                window?
            }
            Some((t, a)) => {
                let dt = now.saturating_duration_since(t);
                if dt < RETUNE {
                    return None;
                }
                self.last = Some((now, acked));
                self.measured = self.measured.saturating_add(1);
                (acked.saturating_sub(a) as f64 / dt.as_secs_f64()).max(window.unwrap_or(0.0))
            }
        };
        // A quarter of each new sample: a rate that holds for a few tens of milliseconds.
        self.rate = Some(match self.rate {
            Some(r) => r + (sample - r) / 4.0,
            None => sample,
        });
        let want = self.chunk() as u32;
        let moved = want.abs_diff(self.lowat) * 4 >= self.lowat;
        moved.then(|| {
            self.lowat = want;
            want
        })
    }

    /// Bytes per write: [`AHEAD`] of the rate, within [`MIN_CHUNK`]..=[`MAX_CHUNK`].
    pub fn chunk(&self) -> usize {
        match self.rate {
            None => MAX_CHUNK,
            Some(r) => ((r * AHEAD.as_secs_f64()) as usize).clamp(MIN_CHUNK, MAX_CHUNK),
        }
    }

    /// Whether the socket should be paced: its rate, measured over [`PACE_AFTER`] samples, is
    /// below one [`MAX_CHUNK`] a millisecond. Unpaced, a congestion window's packets leave in
    /// bursts and sit together in the bottleneck's queue, so their acknowledgements come back
    /// together too; a probe's answer written just after a burst waits for the next one, up
    /// to a round trip (docs/rpm.md, "Bursts"). Paced, the packets and their acknowledgements are
    /// spread over the round trip and the answer leaves after what is ahead of it at the
    /// connection's rate. Never at loopback rates (no queue there for a burst to wait in, and
    /// the loopback load's speed was measured unpaced), and not from the handshake's round
    /// trip alone, which a busy machine can make long.
    pub fn pace(&self) -> bool {
        self.measured >= PACE_AFTER && self.chunk() < MAX_CHUNK
    }

    /// The unsent mark last returned (or the first one).
    pub fn lowat(&self) -> u32 {
        self.lowat
    }
}

impl Default for Depth {
    fn default() -> Self {
        Depth::new()
    }
}

/// A connection's stream whose writes are sized by its rate (module doc): reads pass
/// through; below [`MAX_CHUNK`] a write waits until the stream below has written what it
/// held, then hands it at most one chunk; at [`MAX_CHUNK`] (loopback rates) writes pass
/// through as they did before this stream existed, TLS's own limit of one record holding them
/// (measured: the flush and the cut there cost 8 % of the loopback load's goodput).
pub struct Shallow {
    io: Box<dyn Io>,
    fd: hakaru_sys::RawFd,
    depth: Depth,
    chunk: Chunk,
    /// TCP_INFO could not be read: the sizes stay full, writes pass through.
    blind: bool,
    /// The kernel paces the socket ([`Depth::pace`]).
    paced: bool,
    /// Waits for room under the socket's unsent mark before a write below full size, made at
    /// the first such write (it holds a second descriptor of the socket: connections at
    /// loopback rates never need one); `None` before, or where the OS cannot (then TLS may
    /// hold one write while the socket is full).
    room: Option<hakaru_sys::SendRoom>,
    /// [`Shallow::room`] was asked for.
    room_made: bool,
}

impl Shallow {
    /// Wraps `io`, a connection on the TCP socket `fd` (which `io` owns); the [`Chunk`] is
    /// for the connection's load senders. Where the OS has no unsent mark
    /// (`hakaru_sys::NOTSENT_LOWAT_SUPPORTED`) the kernel's buffer would hold what TLS and
    /// HTTP/2 no longer do: `io` is returned as it is, with full-size frames.
    pub fn wrap(io: Box<dyn Io>, fd: hakaru_sys::RawFd) -> (Box<dyn Io>, Chunk) {
        let chunk = Chunk::new();
        if !hakaru_sys::NOTSENT_LOWAT_SUPPORTED {
            return (io, chunk);
        }
        let _ = hakaru_sys::set_notsent_lowat_fd(fd, MAX_CHUNK as u32);
        let mut s = Shallow {
            io,
            fd,
            depth: Depth::new(),
            chunk: chunk.clone(),
            blind: false,
            paced: false,
            room: None,
            room_made: false,
        };
        // The sizes from the handshake's round trip, before the first frame is queued.
        s.retune();
        (Box::new(s), chunk)
    }

    /// Ready once the socket holds fewer unsent bytes than its mark (at once without a
    /// watcher): what TLS is handed next then goes through to the socket, not into TLS's
    /// buffer, where a probe answer written after it would wait a write longer (docs/rpm.md,
    /// "The endpoints' buffers").
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if !self.room_made {
            self.room_made = true;
            self.room = hakaru_sys::SendRoom::new(self.fd);
        }
        let mark = self.depth.lowat();
        match self.room.as_mut() {
            Some(r) => r.poll_room(cx, mark),
            None => Poll::Ready(Ok(())),
        }
    }

    fn retune(&mut self) {
        if self.blind {
            return;
        }
        let now = Instant::now();
        if self.depth.last.is_some_and(|(t, _)| now < t + RETUNE) {
            return;
        }
        let Ok(info) = hakaru_sys::tcp_info(self.fd) else {
            self.blind = true;
            self.chunk.0.store(MAX_CHUNK, Ordering::Relaxed);
            return;
        };
        let window = (info.rtt_us > 0).then(|| {
            f64::from(info.snd_cwnd) * f64::from(info.snd_mss) / (f64::from(info.rtt_us) / 1e6)
        });
        if let Some(mark) = self.depth.observe(now, info.bytes_acked, window) {
            let _ = hakaru_sys::set_notsent_lowat_fd(self.fd, mark);
        }
        self.chunk.0.store(self.depth.chunk(), Ordering::Relaxed);
        if !self.paced && self.depth.pace() {
            // No cap of its own: any rate but "unlimited" turns on the kernel's pacing at the
            // congestion control's rate (once on, it stays on for the socket).
            self.paced = true;
            let _ = hakaru_sys::set_max_pacing_rate(self.fd, u64::MAX - 1);
        }
    }
}

impl AsyncRead for Shallow {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Shallow {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.retune();
        let chunk = self.chunk.write();
        if chunk >= MAX_CHUNK {
            // At full size TLS's own limit (one record) holds as much as a write: as before.
            return Pin::new(&mut self.io).poll_write(cx, buf);
        }
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        ready!(self.poll_room(cx))?;
        let n = buf.len().min(chunk);
        Pin::new(&mut self.io).poll_write(cx, buf.get(..n).unwrap_or(buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.retune();
        let chunk = self.chunk.write();
        if chunk >= MAX_CHUNK {
            // At full size TLS's own limit (one record) holds as much as a write: as before.
            return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        }
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        ready!(self.poll_room(cx))?;
        // The leading slices up to one chunk, the last one cut (HTTP/2 writes two: a
        // frame's header and its payload; a partial write is the caller's to go on with).
        let mut left = chunk;
        let mut cut = [IoSlice::new(&[]); 4];
        let mut n = 0;
        for (b, slot) in bufs.iter().filter(|b| !b.is_empty()).zip(cut.iter_mut()) {
            if left == 0 {
                break;
            }
            let k = b.len().min(left);
            *slot = IoSlice::new(b.get(..k).unwrap_or(b));
            left -= k;
            n += 1;
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, cut.get(..n).unwrap_or(&cut))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `rate` bytes/s for `ms` milliseconds in RETUNE steps from `t`.
    fn feed(d: &mut Depth, t: &mut Instant, acked: &mut u64, rate: f64, ms: u64) {
        for _ in 0..ms / RETUNE.as_millis() as u64 {
            *t += RETUNE;
            *acked += (rate * RETUNE.as_secs_f64()) as u64;
            d.observe(*t, *acked, None);
        }
    }

    #[test]
    fn the_sizes_follow_the_rate_within_their_bounds() {
        let mut d = Depth::new();
        let (mut t, mut acked) = (Instant::now(), 0u64);
        assert_eq!(
            d.chunk(),
            MAX_CHUNK,
            "an unknown rate keeps the sizes of before"
        );
        assert_eq!(
            d.observe(t, 0, None),
            None,
            "the first sample only starts the clock"
        );
        // 2.5 Mbit/s (eight connections' share of 20 Mbit/s): 312 bytes a millisecond, so the
        // floor.
        feed(&mut d, &mut t, &mut acked, 312_500.0, 200);
        assert_eq!(d.chunk(), MIN_CHUNK);
        assert_eq!(d.lowat(), MIN_CHUNK as u32);
        // 80 Mbit/s: 10 KB a millisecond.
        feed(&mut d, &mut t, &mut acked, 10e6, 300);
        assert!((9_500..=10_000).contains(&d.chunk()), "{}", d.chunk());
        // Loopback rates: one TLS record, as before.
        feed(&mut d, &mut t, &mut acked, 4e9, 200);
        assert_eq!(d.chunk(), MAX_CHUNK);
        assert_eq!(d.lowat(), MAX_CHUNK as u32);
        // An idle connection goes to the floor, not to zero.
        feed(&mut d, &mut t, &mut acked, 0.0, 300);
        assert_eq!(d.chunk(), MIN_CHUNK);
    }

    #[test]
    fn the_mark_is_set_again_only_when_it_moved_a_quarter_and_samples_wait_for_retune() {
        let mut d = Depth::new();
        let t0 = Instant::now();
        d.observe(t0, 0, None);
        assert_eq!(
            d.observe(t0 + RETUNE / 2, 1 << 30, None),
            None,
            "too soon to sample"
        );
        // 1 MB/s: 1000 bytes a ms, floored to MIN_CHUNK; from MAX_CHUNK that moved.
        assert_eq!(d.observe(t0 + RETUNE, 10_000, None), Some(MIN_CHUNK as u32));
        // A little faster: the mark stays.
        assert_eq!(d.observe(t0 + 2 * RETUNE, 22_000, None), None);
        assert_eq!(d.lowat(), MIN_CHUNK as u32);
    }

    #[test]
    fn the_window_keeps_the_sizes_up_while_little_is_acknowledged() {
        let mut d = Depth::new();
        let t0 = Instant::now();
        d.observe(t0, 0, None);
        // Nothing acknowledged yet (a new connection waiting for its request), but a window
        // of 10 packets of 1448 bytes every 1 ms: 14.5 MB/s, 14.5 KB a millisecond.
        d.observe(t0 + RETUNE, 0, Some(14_480_000.0));
        assert!((14_000..=14_480).contains(&d.chunk()), "{}", d.chunk());
        // And the acknowledged rate when it is the larger.
        d.observe(t0 + 2 * RETUNE, 1 << 30, Some(1.0));
        assert_eq!(d.chunk(), MAX_CHUNK);
    }

    #[test]
    fn the_first_sample_takes_the_windows_rate_at_once() {
        let mut d = Depth::new();
        // A new connection on a slow path: ten packets of 1448 bytes over a 90 ms handshake,
        // 161 KB/s, so the floor, before any frame is queued.
        assert_eq!(
            d.observe(Instant::now(), 0, Some(160_888.0)),
            Some(MIN_CHUNK as u32)
        );
        assert_eq!(d.chunk(), MIN_CHUNK);
        // Without a window the first sample only starts the clock, as before.
        let mut d = Depth::new();
        assert_eq!(d.observe(Instant::now(), 0, None), None);
        assert_eq!(d.chunk(), MAX_CHUNK);
    }

    #[test]
    fn only_a_measured_slow_rate_is_paced() {
        let mut d = Depth::new();
        let (mut t, mut acked) = (Instant::now(), 0u64);
        // The handshake says slow, but nothing is measured yet: not paced.
        d.observe(t, 0, Some(160_888.0));
        assert!(!d.pace(), "not from the handshake's round trip alone");
        feed(
            &mut d,
            &mut t,
            &mut acked,
            312_500.0,
            10 * (PACE_AFTER as u64 - 1),
        );
        assert!(!d.pace(), "{} samples", PACE_AFTER - 1);
        feed(&mut d, &mut t, &mut acked, 312_500.0, 10);
        assert!(d.pace(), "a measured 2.5 Mbit/s is paced");
        // Loopback rates never are.
        let mut d = Depth::new();
        let (mut t, mut acked) = (Instant::now(), 0u64);
        d.observe(t, 0, Some(160_888.0));
        feed(&mut d, &mut t, &mut acked, 4e9, 200);
        assert!(!d.pace());
    }

    #[test]
    fn a_load_queues_a_few_frames_below_full_size_and_all_it_may_at_full_size() {
        let c = Chunk::new();
        assert_eq!(c.ahead(256 << 10), 256 << 10);
        c.0.store(MIN_CHUNK, Ordering::Relaxed);
        assert_eq!(c.ahead(256 << 10), FRAMES_AHEAD * MIN_CHUNK);
        assert_eq!(c.ahead(100), 100);
    }

    #[test]
    fn a_frame_is_one_write_less_its_header() {
        let c = Chunk::new();
        assert_eq!(c.frame(), MAX_CHUNK - FRAME_HEADER);
        c.0.store(MIN_CHUNK, Ordering::Relaxed);
        assert_eq!(c.frame(), MIN_CHUNK - FRAME_HEADER);
    }
}
