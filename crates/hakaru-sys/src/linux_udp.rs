//! Linux UDP fast path of the OS layer ([`crate`]): batched sends and receives (sendmmsg, recvmmsg),
//! segmentation offload (UDP_SEGMENT, UDP_GRO), per-datagram receive metadata (kernel
//! timestamps, the socket's drop counter) and the system-wide UDP counters.

use std::fmt;
use std::fs;
use std::io::{self, IoSlice};
use std::mem;
use std::os::fd::RawFd;
use std::ptr;

use super::counters::{parse_proc_net_snmp6_udp, parse_proc_net_snmp_udp, UdpSnmp};

/// UDP_SEGMENT from include/uapi/linux/udp.h (Linux 4.18). The libc crate defines it only for
/// some C libraries, and the value is the kernel's, whatever the C library.
const UDP_SEGMENT: libc::c_int = 103;

/// UDP_GRO from include/uapi/linux/udp.h (Linux 5.0), both the socket option and the type of
/// the control message that carries the segment size.
const UDP_GRO: libc::c_int = 104;

/// Largest number of GSO segments one send may carry that we use. The kernel's
/// UDP_MAX_SEGMENTS is 64 on older kernels and 128 on newer ones; a send with more segments
/// than the running kernel allows fails with EINVAL, so we stay within the smaller limit.
pub const MAX_GSO_SEGMENTS: usize = 64;

/// The kernel's cap on the message count of one sendmmsg or recvmmsg (UIO_MAXIOV); it quietly
/// clamps larger counts, so there is no point in preparing more headers than this.
const MMSG_MAX: usize = 1024;

/// Message headers [`send_batch`] keeps on the stack (4 KiB); larger batches allocate.
const SEND_STACK_MSGS: usize = 64;

/// Sets an `int` socket option.
pub(super) fn set_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size; the kernel only reads
    // it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Turns UDP GSO on for every send on this socket: a send longer than `segment` bytes leaves
/// as datagrams of `segment` bytes (the last may be shorter), split by the kernel or the NIC.
/// `segment` 0 turns it off. A kernel without UDP_SEGMENT (before 4.18) answers ENOPROTOOPT.
pub fn udp_set_gso(fd: RawFd, segment: u16) -> io::Result<()> {
    set_int(fd, libc::SOL_UDP, UDP_SEGMENT, libc::c_int::from(segment))
}

/// Turns UDP GRO on: one received message may then hold several datagrams of the size
/// [`RecvBatch::segment_size`] reports. A kernel without UDP_GRO (before 5.0) answers
/// ENOPROTOOPT.
pub fn udp_set_gro(fd: RawFd) -> io::Result<()> {
    set_int(fd, libc::SOL_UDP, UDP_GRO, 1)
}

/// Asks for per-datagram receive metadata: kernel receive timestamps (SO_TIMESTAMPNS,
/// CLOCK_REALTIME) and the socket's cumulative drop counter (SO_RXQ_OVFL). Returns which of
/// the two were enabled, (timestamps, drop counter).
pub fn udp_enable_rx_meta(fd: RawFd) -> (bool, bool) {
    let stamps = set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).is_ok();
    let drops = set_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1).is_ok();
    (stamps, drops)
}

/// The socket's drop count now (SO_MEMINFO's SK_MEMINFO_DROPS): every datagram the kernel
/// dropped at this socket for lack of receive buffer. SO_RXQ_OVFL reports the same counter,
/// but only with a datagram that arrives, so drops after the last arrival never show there.
pub fn udp_socket_drops(fd: RawFd) -> Option<u64> {
    // SK_MEMINFO_VARS entries (9 since Linux 4.6, where the drop count was added).
    let mut info = [0u32; 9];
    let mut len = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is a live buffer of `len` bytes the kernel fills and `len` is updated to
    // what it wrote.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let need = (libc::SK_MEMINFO_DROPS as usize + 1) * mem::size_of::<u32>();
    (rc == 0 && len as usize >= need).then(|| u64::from(info[libc::SK_MEMINFO_DROPS as usize]))
}

/// Sends each slice as one datagram (or, with [`udp_set_gso`], one GSO message) on connected
/// socket `fd` with a single sendmmsg call; `wait == false` adds MSG_DONTWAIT.
///
/// Returns how many messages the kernel took, which may be fewer than given (at most 1024 per
/// call); the caller resends the rest. When the first message fails, the error comes back:
/// WouldBlock for a full buffer, EIO when the device cannot do GSO, EINVAL for a GSO message
/// with too many segments, ConnectionRefused after the peer's port was found closed. A signal
/// that interrupts the call before anything was sent is retried.
pub fn send_batch(fd: RawFd, msgs: &[IoSlice<'_>], wait: bool) -> io::Result<usize> {
    let msgs = &msgs[..msgs.len().min(MMSG_MAX)];
    if msgs.is_empty() {
        return Ok(0);
    }
    let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
    if msgs.len() <= SEND_STACK_MSGS {
        // SAFETY: mmsghdr is plain old data and all zeroes is an empty header (null name and
        // control, no iovecs, no flags).
        let mut headers: [libc::mmsghdr; SEND_STACK_MSGS] = unsafe { mem::zeroed() };
        sendmmsg_slices(fd, msgs, &mut headers[..msgs.len()], flags)
    } else {
        // SAFETY: as above.
        let empty: libc::mmsghdr = unsafe { mem::zeroed() };
        let mut headers = vec![empty; msgs.len()];
        sendmmsg_slices(fd, msgs, &mut headers, flags)
    }
}

/// One sendmmsg of `msgs`, using `headers` (zeroed, one per message) as scratch.
fn sendmmsg_slices(
    fd: RawFd,
    msgs: &[IoSlice<'_>],
    headers: &mut [libc::mmsghdr],
    flags: libc::c_int,
) -> io::Result<usize> {
    for (header, msg) in headers.iter_mut().zip(msgs) {
        // std documents IoSlice as ABI-compatible with iovec on Unix, so each header can point
        // at the caller's slice itself instead of a copy; the kernel only reads iovecs on send.
        header.msg_hdr.msg_iov = (msg as *const IoSlice<'_>).cast_mut().cast::<libc::iovec>();
        header.msg_hdr.msg_iovlen = 1;
    }
    loop {
        // SAFETY: every header points at one live iovec (an IoSlice borrowed for this call)
        // and has no name or control buffer; the count is the slice's length, at most
        // MMSG_MAX. The kernel writes only the headers' msg_len fields. The flags type differs
        // between C libraries (int in glibc, unsigned in musl), hence the inferred cast.
        let rc = unsafe {
            libc::sendmmsg(
                fd,
                headers.as_mut_ptr(),
                headers.len() as libc::c_uint,
                flags as _,
            )
        };
        if let Ok(sent) = usize::try_from(rc) {
            return Ok(sent);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Control buffer bytes per message: a timestamp, an SO_RXQ_OVFL counter and a UDP_GRO
/// segment size, each with its cmsghdr and padding.
// SAFETY: CMSG_SPACE is arithmetic on its argument; it is unsafe only by libc's convention.
const CONTROL_LEN: usize = unsafe {
    libc::CMSG_SPACE(mem::size_of::<libc::timespec>() as libc::c_uint)
        + libc::CMSG_SPACE(mem::size_of::<u32>() as libc::c_uint)
        + libc::CMSG_SPACE(mem::size_of::<libc::c_int>() as libc::c_uint)
} as usize;

/// Control buffer words (u64, so each slot is aligned for cmsghdr) per message.
const CONTROL_WORDS: usize = CONTROL_LEN.div_ceil(mem::size_of::<u64>());

/// What the last [`recv_batch`] learned about one message, copied out of the kernel's headers
/// so the accessors never touch raw pointers.
#[derive(Debug, Clone, Copy, Default)]
struct Meta {
    /// Bytes of the message in its buffer.
    len: usize,
    /// GRO segment size, when the message holds more than one datagram.
    segment: Option<u16>,
    /// Kernel receive time, ns since the Unix epoch.
    stamp_ns: Option<u64>,
    /// MSG_TRUNC: the datagram was longer than the buffer.
    truncated: bool,
}

/// Reusable receive state for [`recv_batch`]: `count` buffers of `buf_len` bytes with their
/// iovecs, message headers and control buffers, all allocated once by [`RecvBatch::new`].
///
/// With UDP GRO on, one message can be as long as 64 KiB; a shorter buffer truncates it.
pub struct RecvBatch {
    /// Length of each buffer, bytes.
    buf_len: usize,
    /// The buffers back to back: message i's bytes start at `i * buf_len`.
    bufs: Vec<u8>,
    /// The control buffers back to back, CONTROL_WORDS per message.
    control: Vec<u64>,
    /// One iovec per message, pointing into `bufs`.
    iovecs: Vec<libc::iovec>,
    /// One header per message, pointing at its iovec and control buffer.
    headers: Vec<libc::mmsghdr>,
    /// Per-message results of the last call.
    meta: Vec<Meta>,
    /// Messages the last call received.
    received: usize,
    /// Latest SO_RXQ_OVFL count of the last call.
    drops: Option<u32>,
    /// Headers `0..dirty` may hold what the last call wrote (or were never set): the next
    /// call resets only those, so a batch of hundreds woken for one datagram costs one reset.
    dirty: usize,
}

// SAFETY: the raw pointers in `iovecs` and `headers` point only into this struct's own heap
// allocations (`bufs`, `control`, `iovecs`), which move with it to another thread and are
// never resized (so the pointers stay valid once set); they are dereferenced by nothing but
// recvmmsg, which needs `&mut self`. So no other thread can reach the pointed-to memory
// through them.
unsafe impl Send for RecvBatch {}

impl fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBatch")
            .field("count", &self.headers.len())
            .field("buf_len", &self.buf_len)
            .field("received", &self.received)
            .field("drops", &self.drops)
            .finish_non_exhaustive()
    }
}

impl RecvBatch {
    /// Allocates `count` buffers of `buf_len` bytes. `count` is kept within 1..=1024 (the
    /// kernel's limit per call) and `buf_len` is at least 1.
    pub fn new(count: usize, buf_len: usize) -> RecvBatch {
        let count = count.clamp(1, MMSG_MAX);
        let buf_len = buf_len.max(1);
        let no_iovec = libc::iovec {
            iov_base: ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: mmsghdr is plain old data and all zeroes is an empty header.
        let no_header: libc::mmsghdr = unsafe { mem::zeroed() };
        RecvBatch {
            buf_len,
            bufs: vec![0; count * buf_len],
            control: vec![0; count * CONTROL_WORDS],
            iovecs: vec![no_iovec; count],
            headers: vec![no_header; count],
            meta: vec![Meta::default(); count],
            received: 0,
            drops: None,
            dirty: count,
        }
    }

    /// Bytes of message i of the last [`recv_batch`] (one datagram, or several back to back
    /// when [`RecvBatch::segment_size`] says so); empty when there is no message i.
    pub fn data(&self, i: usize) -> &[u8] {
        match self.meta.get(i) {
            Some(m) if i < self.received => {
                let start = i * self.buf_len;
                &self.bufs[start..start + m.len]
            }
            _ => &[],
        }
    }

    /// GRO segment size of message i: its datagrams are that long, except perhaps the last.
    /// `None` when the message is one datagram (or there is no message i).
    pub fn segment_size(&self, i: usize) -> Option<u16> {
        self.meta_of(i)?.segment
    }

    /// Kernel receive time of message i, nanoseconds since the Unix epoch (CLOCK_REALTIME);
    /// `None` if the message carried none, as when [`udp_enable_rx_meta`] was not called.
    pub fn timestamp_ns(&self, i: usize) -> Option<u64> {
        self.meta_of(i)?.stamp_ns
    }

    /// Latest cumulative SO_RXQ_OVFL count seen in the last batch: datagrams the kernel has
    /// dropped on this socket because its receive buffer was full. `None` if no message
    /// carried it; the kernel attaches it only once the count is above zero.
    pub fn rxq_drops(&self) -> Option<u32> {
        self.drops
    }

    /// Whether message i was truncated (MSG_TRUNC): the datagram did not fit in its buffer.
    pub fn truncated(&self, i: usize) -> bool {
        self.meta_of(i).is_some_and(|m| m.truncated)
    }

    /// Results of message i of the last call, if there is one.
    fn meta_of(&self, i: usize) -> Option<&Meta> {
        self.meta.get(..self.received)?.get(i)
    }

    /// Forgets the last call's results and points every header the last call may have
    /// written (all of them the first time) at its own iovec, buffer and control buffer, with
    /// the lengths the kernel overwrites reset. The kernel writes only the headers of the
    /// messages it fills.
    fn prepare(&mut self) {
        self.received = 0;
        self.drops = None;
        let bufs = self.bufs.as_mut_ptr();
        let control = self.control.as_mut_ptr();
        let iovecs = self.iovecs.as_mut_ptr();
        let dirty = mem::replace(&mut self.dirty, 0);
        for (i, header) in self.headers.iter_mut().enumerate().take(dirty) {
            // SAFETY: i < count, and `bufs` holds count * buf_len bytes, `control` count *
            // CONTROL_WORDS words and `iovecs` count entries, so every offset stays inside its
            // allocation. Vec::as_mut_ptr does not invalidate pointers taken earlier.
            let (buf, ctl, iov) = unsafe {
                (
                    bufs.add(i * self.buf_len),
                    control.add(i * CONTROL_WORDS),
                    iovecs.add(i),
                )
            };
            // SAFETY: `iov` points at iovec i, inside `iovecs`.
            unsafe {
                iov.write(libc::iovec {
                    iov_base: buf.cast(),
                    iov_len: self.buf_len,
                })
            };
            // The kernel rewrites msg_controllen, msg_flags and msg_len on every message it
            // fills, so stale values would shrink the control buffer for the next call.
            let hdr = &mut header.msg_hdr;
            hdr.msg_name = ptr::null_mut();
            hdr.msg_namelen = 0;
            hdr.msg_iov = iov;
            hdr.msg_iovlen = 1;
            hdr.msg_control = ctl.cast();
            hdr.msg_controllen = (CONTROL_WORDS * mem::size_of::<u64>()) as _;
            hdr.msg_flags = 0;
            header.msg_len = 0;
        }
    }

    /// Copies the results of the first `n` headers out, after recvmmsg filled them.
    fn collect(&mut self, n: usize) {
        let mut drops = None;
        for (header, meta) in self.headers.iter().zip(self.meta.iter_mut()).take(n) {
            let hdr = &header.msg_hdr;
            let mut m = Meta {
                len: (header.msg_len as usize).min(self.buf_len),
                truncated: hdr.msg_flags & libc::MSG_TRUNC != 0,
                ..Meta::default()
            };
            // SAFETY: recvmmsg filled this header: its control buffer (ours, live and aligned)
            // holds msg_controllen bytes of control messages written by the kernel.
            unsafe { read_control(hdr, &mut m, &mut drops) };
            // The kernel marks any GSO packet, even one whose single datagram fits in a
            // segment; only a message longer than a segment holds more than one datagram.
            m.segment = m.segment.filter(|&s| s > 0 && m.len > usize::from(s));
            *meta = m;
        }
        self.received = n;
        self.drops = drops;
    }
}

/// Reads the control messages we asked for out of a received message's header into `m`, and
/// the drop counter into `drops`; other control messages are skipped.
///
/// # Safety
/// `hdr.msg_control` must point to `hdr.msg_controllen` readable bytes of control messages as
/// the kernel writes them, aligned for cmsghdr.
unsafe fn read_control(hdr: &libc::msghdr, m: &mut Meta, drops: &mut Option<u32>) {
    let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
    while !cmsg.is_null() {
        let c = &*cmsg;
        let len = c.cmsg_len as usize;
        // Where the message's data starts, if the message is long enough to hold `size` bytes.
        let data = |size: usize| -> Option<*const u8> {
            let need = libc::CMSG_LEN(size as libc::c_uint) as usize;
            (len >= need).then(|| libc::CMSG_DATA(cmsg).cast_const())
        };
        match (c.cmsg_level, c.cmsg_type) {
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                if let Some(p) = data(mem::size_of::<libc::timespec>()) {
                    let ts = ptr::read_unaligned(p.cast::<libc::timespec>());
                    // time_t and c_long are i32 on some 32-bit targets, i64 here.
                    #[allow(clippy::useless_conversion)]
                    let (sec, nsec) = (i64::from(ts.tv_sec), i64::from(ts.tv_nsec));
                    m.stamp_ns = timespec_ns(sec, nsec);
                }
            }
            (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                if let Some(p) = data(mem::size_of::<u32>()) {
                    *drops = Some(ptr::read_unaligned(p.cast::<u32>()));
                }
            }
            (libc::SOL_UDP, UDP_GRO) => {
                if let Some(p) = data(mem::size_of::<libc::c_int>()) {
                    let size = ptr::read_unaligned(p.cast::<libc::c_int>());
                    m.segment = u16::try_from(size).ok();
                }
            }
            _ => {}
        }
        cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
    }
}

/// A timespec as nanoseconds since the epoch; `None` if before it or out of range.
pub(super) fn timespec_ns(sec: i64, nsec: i64) -> Option<u64> {
    let sec = u64::try_from(sec).ok()?;
    let nsec = u64::try_from(nsec).ok().filter(|&n| n < 1_000_000_000)?;
    sec.checked_mul(1_000_000_000)?.checked_add(nsec)
}

/// Receives up to `batch`'s count of messages on `fd` with one recvmmsg call and returns how
/// many arrived. `wait == true` blocks until at least one message is there, then takes what is
/// queued (MSG_WAITFORONE; a receive timeout set with SO_RCVTIMEO ends the wait with
/// WouldBlock); `wait == false` takes what is queued, WouldBlock if nothing is. A signal that
/// interrupts the wait before anything arrived is retried.
pub fn recv_batch(fd: RawFd, batch: &mut RecvBatch, wait: bool) -> io::Result<usize> {
    let flags = if wait {
        libc::MSG_WAITFORONE
    } else {
        libc::MSG_DONTWAIT
    };
    loop {
        batch.prepare();
        // SAFETY: every header points at its own iovec, buffer and control buffer (prepare()
        // set each one the first time and after any call that may have written it), all live
        // for the call and as long as the lengths given; the count is the number of
        // headers, at most MMSG_MAX. No timeout is passed. The flags type differs between C
        // libraries, hence the inferred cast.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                batch.headers.as_mut_ptr(),
                batch.headers.len() as libc::c_uint,
                flags as _,
                ptr::null_mut(),
            )
        };
        if let Ok(n) = usize::try_from(rc) {
            let n = n.min(batch.headers.len());
            // The filled headers, and the one a failed message may have been written to.
            batch.dirty = (n + 1).min(batch.headers.len());
            batch.collect(n);
            return Ok(n);
        }
        batch.dirty = batch.headers.len();
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// System-wide UDP counters of this network namespace, IPv4 plus IPv6; `None` if unreadable.
pub fn udp_snmp() -> Option<UdpSnmp> {
    let v4 = fs::read_to_string("/proc/net/snmp")
        .ok()
        .and_then(|text| parse_proc_net_snmp_udp(&text));
    // /proc/net/snmp6 does not exist when IPv6 is disabled; IPv4 then stands alone.
    let v6 = fs::read_to_string("/proc/net/snmp6")
        .ok()
        .and_then(|text| parse_proc_net_snmp6_udp(&text));
    match (v4, v6) {
        (Some(v4), Some(v6)) => Some(v4.add(&v6)),
        (v4, v6) => v4.or(v6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::thread;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    /// Two UDP sockets on 127.0.0.1 connected to each other (sender, receiver), with a receive
    /// timeout so that a broken test fails instead of hanging.
    /// This kernel lacks `what` (UDP GSO or GRO), so the test returns early: one SKIPPED line
    /// on stderr and, when HAKARU_TEST_SKIP_LOG names a file, in it (as the integration
    /// tests' `common::skip` writes them; `.ci/run` counts them). Under
    /// HAKARU_TEST_NETNS=required (`.ci/run` as root) the test fails instead.
    fn kernel_lacks(what: &str, e: &std::io::Error) {
        use std::io::Write;
        let test = thread::current().name().unwrap_or("?").to_string();
        let line = format!("SKIPPED: {test}: kernel: this kernel has no {what} ({e})");
        let required = std::env::var("HAKARU_TEST_NETNS").as_deref() == Ok("required");
        assert!(!required, "{line}; HAKARU_TEST_NETNS=required requires it");
        eprintln!("{line}");
        if let Some(log) = std::env::var_os("HAKARU_TEST_SKIP_LOG").filter(|v| !v.is_empty()) {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
                .expect("append to HAKARU_TEST_SKIP_LOG");
        }
    }

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        a.connect(b.local_addr().expect("addr")).expect("connect");
        b.connect(a.local_addr().expect("addr")).expect("connect");
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
        }
        (a, b)
    }

    /// Receives until `bytes` bytes have arrived; returns each message's bytes and segment
    /// size.
    fn recv_bytes(
        rx: &UdpSocket,
        batch: &mut RecvBatch,
        bytes: usize,
    ) -> Vec<(Vec<u8>, Option<u16>)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        let mut total = 0;
        while total < bytes {
            assert!(Instant::now() < deadline, "only {total} of {bytes} bytes");
            let n = recv_batch(rx.as_raw_fd(), batch, true).expect("recv_batch");
            for i in 0..n {
                assert!(!batch.truncated(i));
                total += batch.data(i).len();
                got.push((batch.data(i).to_vec(), batch.segment_size(i)));
            }
        }
        assert_eq!(total, bytes);
        got
    }

    fn now_ns() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64
    }

    /// A payload whose every byte depends on its position, so misordered or misplaced bytes
    /// show.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|j| (j / 100 * 31 + j % 100) as u8).collect()
    }

    #[test]
    fn batch_arrives_whole_in_order_with_timestamps() {
        let (tx, rx) = pair();
        let mut batch = RecvBatch::new(8, 2048);
        // A first message without metadata leaves the kernel's msg_controllen at 0 in the
        // headers; recv_batch must restore the room before the next call.
        send_batch(tx.as_raw_fd(), &[IoSlice::new(b"plain")], true).expect("send");
        assert_eq!(
            recv_batch(rx.as_raw_fd(), &mut batch, true).expect("recv"),
            1
        );
        assert_eq!(
            (batch.data(0), batch.timestamp_ns(0)),
            (&b"plain"[..], None)
        );

        assert_eq!(udp_enable_rx_meta(rx.as_raw_fd()), (true, true));
        let payloads: Vec<Vec<u8>> = (0..5u8)
            .map(|i| vec![b'a' + i; 10 + usize::from(i)])
            .collect();
        let slices: Vec<IoSlice<'_>> = payloads.iter().map(|p| IoSlice::new(p)).collect();
        let before = now_ns();
        assert_eq!(send_batch(tx.as_raw_fd(), &slices, true).expect("send"), 5);
        // Loopback delivers within the send; the pause covers a deferred softirq, so that one
        // call can show it takes several messages at once.
        thread::sleep(Duration::from_millis(20));

        let mut got = Vec::new();
        let mut calls = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < 5 {
            assert!(Instant::now() < deadline, "only {} messages", got.len());
            let n = recv_batch(rx.as_raw_fd(), &mut batch, true).expect("recv_batch");
            let after = now_ns();
            calls.push(n);
            for i in 0..n {
                let ts = batch.timestamp_ns(i).expect("kernel timestamp");
                // Realtime clock: allow a second of slack for a clock step.
                assert!(
                    ts + 1_000_000_000 >= before && ts <= after + 1_000_000_000,
                    "{before} <= {ts} <= {after}"
                );
                assert_eq!(batch.segment_size(i), None);
                assert!(!batch.truncated(i));
                got.push(batch.data(i).to_vec());
            }
            // Nothing was dropped, so the kernel attaches no drop count.
            assert_eq!(batch.rxq_drops(), None);
            // Past the received messages there is nothing.
            assert!(batch.data(n).is_empty());
            assert_eq!(batch.timestamp_ns(n), None);
        }
        assert_eq!(got, payloads);
        assert!(
            calls.len() < 5,
            "no call took more than one message: {calls:?}"
        );
        let e = recv_batch(rx.as_raw_fd(), &mut batch, false).expect_err("nothing more queued");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(batch.data(0).is_empty());
    }

    /// Only the headers a call filled are reset before the next: what the kernel wrote in
    /// them (a control length of 0, MSG_TRUNC, a length) must not reach the next call's
    /// messages, and the headers no call filled yet must still be whole.
    #[test]
    fn headers_a_call_wrote_are_reset_for_the_next() {
        let (tx, rx) = pair();
        let mut batch = RecvBatch::new(8, 64);
        // Three plain datagrams, the second too long for its buffer.
        let first = [vec![b'x'; 10], vec![b'y'; 100], vec![b'z'; 12]];
        let slices: Vec<IoSlice<'_>> = first.iter().map(|p| IoSlice::new(p)).collect();
        assert_eq!(send_batch(tx.as_raw_fd(), &slices, true).expect("send"), 3);
        let mut truncated = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while truncated.len() < 3 {
            assert!(
                Instant::now() < deadline,
                "only {} messages",
                truncated.len()
            );
            let n = recv_batch(rx.as_raw_fd(), &mut batch, true).expect("recv_batch");
            truncated.extend((0..n).map(|i| batch.truncated(i)));
        }
        assert_eq!(truncated, [false, true, false]);

        // Now with timestamps, and eight datagrams: every one fills a header, the first three
        // of them written by the calls before.
        assert_eq!(udp_enable_rx_meta(rx.as_raw_fd()), (true, true));
        let payloads: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 20 + usize::from(i)]).collect();
        let slices: Vec<IoSlice<'_>> = payloads.iter().map(|p| IoSlice::new(p)).collect();
        assert_eq!(send_batch(tx.as_raw_fd(), &slices, true).expect("send"), 8);
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.len() < 8 {
            assert!(Instant::now() < deadline, "only {} messages", seen.len());
            let n = recv_batch(rx.as_raw_fd(), &mut batch, true).expect("recv_batch");
            for i in 0..n {
                assert!(!batch.truncated(i), "message {i} read as truncated");
                assert!(
                    batch.timestamp_ns(i).is_some(),
                    "message {i} lost its timestamp"
                );
                seen.push(batch.data(i).to_vec());
            }
        }
        assert_eq!(seen, payloads);
    }

    #[test]
    fn large_batches_keep_order() {
        let (tx, rx) = pair();
        let payloads: Vec<[u8; 2]> = (0..100u16).map(|i| i.to_be_bytes()).collect();
        let slices: Vec<IoSlice<'_>> = payloads.iter().map(|p| IoSlice::new(p)).collect();
        // More than the stack's headers: the heap path.
        assert_eq!(
            send_batch(tx.as_raw_fd(), &slices, true).expect("send"),
            100
        );
        assert_eq!(
            send_batch(tx.as_raw_fd(), &[], true).expect("empty send"),
            0
        );
        let mut batch = RecvBatch::new(128, 16);
        let got = recv_bytes(&rx, &mut batch, 200);
        let got: Vec<Vec<u8>> = got.into_iter().map(|(d, _)| d).collect();
        let want: Vec<Vec<u8>> = payloads.iter().map(|p| p.to_vec()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn gso_send_arrives_as_segments_at_a_plain_receiver() {
        let (tx, rx) = pair();
        if let Err(e) = udp_set_gso(tx.as_raw_fd(), 100) {
            kernel_lacks("UDP GSO", &e);
            return;
        }
        let payload = pattern(1000);
        let sent = send_batch(tx.as_raw_fd(), &[IoSlice::new(&payload)], true).expect("send");
        assert_eq!(sent, 1);
        let mut batch = RecvBatch::new(16, 2048);
        let got = recv_bytes(&rx, &mut batch, 1000);
        assert_eq!(
            got.len(),
            10,
            "{:?}",
            got.iter().map(|g| g.0.len()).collect::<Vec<_>>()
        );
        for (data, segment) in &got {
            assert_eq!((data.len(), *segment), (100, None));
        }
        let bytes: Vec<u8> = got.into_iter().flat_map(|g| g.0).collect();
        assert_eq!(bytes, payload);

        // Segment 0 turns GSO off: the same send is one datagram again.
        udp_set_gso(tx.as_raw_fd(), 0).expect("gso off");
        send_batch(tx.as_raw_fd(), &[IoSlice::new(&payload)], true).expect("send");
        let got = recv_bytes(&rx, &mut batch, 1000);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, payload);
    }

    #[test]
    fn gro_receiver_reports_the_segment_size() {
        let (tx, rx) = pair();
        if let Err(e) = udp_set_gso(tx.as_raw_fd(), 100) {
            kernel_lacks("UDP GSO", &e);
            return;
        }
        if let Err(e) = udp_set_gro(rx.as_raw_fd()) {
            kernel_lacks("UDP GRO", &e);
            return;
        }
        let payload = pattern(1000);
        send_batch(tx.as_raw_fd(), &[IoSlice::new(&payload)], true).expect("send");
        let mut batch = RecvBatch::new(16, 65536);
        let got = recv_bytes(&rx, &mut batch, 1000);
        let mut coalesced = false;
        for (data, segment) in &got {
            if data.len() > 100 {
                // More than one datagram in a message: the size must be reported.
                assert_eq!(*segment, Some(100), "{} bytes", data.len());
            }
            if let Some(s) = segment {
                assert_eq!(*s, 100);
                assert_eq!(data.len() % usize::from(*s), 0, "{} bytes", data.len());
                coalesced = true;
            }
        }
        if !coalesced {
            println!(
                "note: the kernel delivered {} separate datagrams",
                got.len()
            );
        }
        let bytes: Vec<u8> = got.into_iter().flat_map(|g| g.0).collect();
        assert_eq!(bytes, payload);
    }

    #[test]
    fn rxq_ovfl_reports_drops_after_a_flood() {
        let (tx, rx) = pair();
        // The kernel raises this to its minimum, a few datagrams' worth.
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(1)
            .expect("SO_RCVBUF");
        assert_eq!(udp_enable_rx_meta(rx.as_raw_fd()), (true, true));
        let snmp_before = udp_snmp().expect("udp counters");

        let msg = [7u8; 200];
        let slices = vec![IoSlice::new(&msg); 64];
        let mut sent = 0;
        for _ in 0..8 {
            sent += send_batch(tx.as_raw_fd(), &slices, true).expect("send");
        }
        // Datagrams queued before the first drop carry no count: drain them, then send a few
        // that are queued after the drops.
        let mut batch = RecvBatch::new(64, 256);
        let mut seen = None;
        let mut received = 0;
        while let Ok(n) = recv_batch(rx.as_raw_fd(), &mut batch, false) {
            received += n;
            seen = batch.rxq_drops().or(seen);
        }
        sent += send_batch(tx.as_raw_fd(), &slices[..3], true).expect("send");
        let n = recv_batch(rx.as_raw_fd(), &mut batch, true).expect("recv after the flood");
        received += n;
        seen = batch.rxq_drops().or(seen);
        let drops = seen.expect("a drop count after the flood");
        assert!(drops > 0);
        assert!(
            received < sent,
            "{received} of {sent} received with a tiny buffer"
        );
        assert!(
            drops as usize <= sent - received,
            "{drops} > {sent} - {received}"
        );

        // The system-wide counters saw the drops and the sends (other tests only add).
        let d = snmp_before.delta(&udp_snmp().expect("udp counters"));
        assert!(d.rcvbuf_errors >= u64::from(drops), "{d:?}");
        assert!(d.out_datagrams >= sent as u64, "{d:?}");
        assert!(d.in_datagrams >= received as u64, "{d:?}");
    }

    #[test]
    fn empty_socket_would_block() {
        let (_tx, rx) = pair();
        let mut batch = RecvBatch::new(4, 64);
        let e = recv_batch(rx.as_raw_fd(), &mut batch, false).expect_err("nothing queued");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        // Waiting ends with the socket's receive timeout.
        rx.set_read_timeout(Some(Duration::from_millis(30)))
            .expect("timeout");
        let start = Instant::now();
        let e = recv_batch(rx.as_raw_fd(), &mut batch, true).expect_err("nothing queued");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(batch.data(0).is_empty());
        assert_eq!((batch.segment_size(0), batch.timestamp_ns(0)), (None, None));
        assert!(!batch.truncated(0));
        assert_eq!(batch.rxq_drops(), None);
    }

    #[test]
    fn long_datagrams_are_truncated_to_the_buffer() {
        let (tx, rx) = pair();
        let long = pattern(40);
        let short = [5u8; 8];
        let msgs = [IoSlice::new(&long), IoSlice::new(&short)];
        assert_eq!(send_batch(tx.as_raw_fd(), &msgs, true).expect("send"), 2);
        let mut batch = RecvBatch::new(4, 16);
        let mut got = Vec::new();
        while got.len() < 2 {
            let n = recv_batch(rx.as_raw_fd(), &mut batch, true).expect("recv_batch");
            got.extend((0..n).map(|i| (batch.data(i).to_vec(), batch.truncated(i))));
        }
        assert_eq!(
            got,
            vec![(long[..16].to_vec(), true), (short.to_vec(), false)]
        );
    }

    #[test]
    fn send_errors_surface() {
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let gone = UdpSocket::bind("127.0.0.1:0").expect("bind");
        tx.connect(gone.local_addr().expect("addr"))
            .expect("connect");
        drop(gone);
        let msg = [1u8; 10];
        let deadline = Instant::now() + Duration::from_secs(10);
        // The first send draws an ICMP port unreachable; a later one reports it.
        loop {
            assert!(Instant::now() < deadline, "no ECONNREFUSED");
            match send_batch(tx.as_raw_fd(), &[IoSlice::new(&msg)], false) {
                Ok(n) => assert_eq!(n, 1),
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
                    break;
                }
            }
            thread::sleep(Duration::from_millis(1));
        }
        assert!(send_batch(-1, &[IoSlice::new(&msg)], false).is_err());
        assert!(udp_set_gso(-1, 100).is_err());
        assert_eq!(udp_enable_rx_meta(-1), (false, false));
    }

    #[test]
    fn live_udp_counters_move() {
        let before = udp_snmp().expect("udp counters");
        let (tx, rx) = pair();
        let msg = [3u8; 10];
        assert_eq!(
            send_batch(tx.as_raw_fd(), &[IoSlice::new(&msg); 3], true).expect("send"),
            3
        );
        let mut batch = RecvBatch::new(4, 64);
        recv_bytes(&rx, &mut batch, 30);
        let d = before.delta(&udp_snmp().expect("udp counters"));
        assert!(d.out_datagrams >= 3 && d.in_datagrams >= 3, "{d:?}");
    }

    #[test]
    fn batch_sizes_are_kept_sane_and_batches_can_move() {
        fn check<T: Send>() {}
        check::<RecvBatch>();
        let b = RecvBatch::new(0, 0);
        assert_eq!((b.headers.len(), b.buf_len), (1, 1));
        assert_eq!(RecvBatch::new(100_000, 1).headers.len(), MMSG_MAX);
        assert!(format!("{b:?}").contains("RecvBatch"));
        assert_eq!(timespec_ns(-1, 0), None);
        assert_eq!(timespec_ns(1, 1_000_000_000), None);
        assert_eq!(timespec_ns(2, 5), Some(2_000_000_005));
        assert_eq!(timespec_ns(i64::MAX, 0), None);
    }
}
