//! Fallback backend of the OS layer ([`crate`]) for systems without a native one: compiles everywhere and
//! reports "unsupported" (or "unknown", for optional facts) instead of measuring.

use std::io::{self, IoSlice};
use std::net::IpAddr;

use hakaru_model::{Environment, TcpInfo};

use super::counters::{CpuSnapshot, NicSnapshot, UdpSnmp};
use super::RawFd;

/// The error every unsupported operation returns, naming what is missing.
fn unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{what} is not supported on {} (hakaru implements it on Linux)",
            std::env::consts::OS
        ),
    )
}

/// TCP_INFO: unsupported here.
#[cfg_attr(any(windows, target_os = "macos"), allow(dead_code))]
pub fn tcp_info(_fd: RawFd) -> io::Result<TcpInfo> {
    Err(unsupported("reading TCP_INFO"))
}

/// Machine-wide CPU counters: not available here.
// Windows answers this natively (windows.rs).
#[cfg_attr(any(windows, target_os = "macos"), allow(dead_code))]
pub fn cpu_snapshot() -> Option<CpuSnapshot> {
    None
}

/// Whether an interface is virtual: not known here.
pub fn is_virtual_interface(_iface: &str) -> bool {
    false
}

/// This process's CPU, memory and descriptors: not available here.
// Windows answers this natively (windows.rs).
#[cfg_attr(any(windows, target_os = "macos"), allow(dead_code))]
pub fn process_usage() -> Option<super::ProcessUsage> {
    None
}

/// Interface counters: not available here.
// Windows answers this natively (windows.rs).
#[cfg_attr(any(windows, target_os = "macos"), allow(dead_code))]
pub fn nic_snapshot(_iface: &str) -> Option<NicSnapshot> {
    None
}

/// Counters of every interface: not available here.
// Windows answers this natively (windows.rs).
#[cfg_attr(any(windows, target_os = "macos"), allow(dead_code))]
pub fn nic_snapshot_all() -> Vec<NicSnapshot> {
    Vec::new()
}

/// Interface of a local address: not known here.
#[cfg_attr(any(windows, target_os = "macos"), allow(dead_code))]
pub fn interface_for_addr(_ip: IpAddr) -> Option<String> {
    None
}

/// Machine facts that need no OS-specific call; the rest stay unknown.
pub fn environment(iface: Option<&str>) -> Environment {
    Environment {
        os: std::env::consts::OS.to_string(),
        cpus: u32::try_from(online_cpus()).unwrap_or(u32::MAX),
        interface: iface.map(str::to_string),
        ..Environment::default()
    }
}

/// Congestion control algorithms: not known here.
pub fn available_congestion() -> Vec<String> {
    Vec::new()
}

/// SO_BUSY_POLL: unsupported here.
pub fn set_busy_poll(_fd: RawFd, _usecs: u32) -> io::Result<()> {
    Err(unsupported("SO_BUSY_POLL (--busy-poll)"))
}

/// SO_MAX_PACING_RATE: unsupported here (senders pace in the application alone).
pub fn set_max_pacing_rate(_fd: RawFd, _bytes_per_second: u64) -> io::Result<()> {
    Err(unsupported("SO_MAX_PACING_RATE"))
}

/// Thread pinning: unsupported here.
pub fn pin_current_thread(_cpu: usize) -> io::Result<()> {
    Err(unsupported("pinning a thread to a CPU (-A)"))
}

/// Choosing the local port at connect time: unsupported here (the port is chosen at bind).
pub fn bind_address_no_port(_fd: RawFd) -> io::Result<()> {
    Err(unsupported("IP_BIND_ADDRESS_NO_PORT"))
}

/// Deferring accept until data arrives: unsupported here.
/// Accepts a connection and makes it non-blocking (two calls here).
pub fn accept_nonblocking(
    listener: &std::net::TcpListener,
) -> io::Result<(std::net::TcpStream, std::net::SocketAddr)> {
    let (s, a) = listener.accept()?;
    s.set_nonblocking(true)?;
    Ok((s, a))
}

/// TCP_DEFER_ACCEPT: unsupported here.
pub fn tcp_defer_accept(_fd: RawFd, _secs: u32) -> io::Result<()> {
    Err(unsupported("TCP_DEFER_ACCEPT"))
}

/// The local port range for outgoing connections: unknown here.
pub fn local_port_range() -> Option<(u16, u16)> {
    None
}

/// Number of CPUs this process may use (at least 1).
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Source for zero-copy sends: cannot be created here.
#[derive(Debug)]
pub struct ZeroCopySource {
    len: usize,
}

impl ZeroCopySource {
    /// Always fails: zero-copy send is unsupported here.
    pub fn new(_len: usize) -> io::Result<Self> {
        Err(unsupported("zero-copy send (-Z)"))
    }

    /// Length of the content, bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the content is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Zero-copy send: unsupported here.
pub fn send_zerocopy(_sock: RawFd, _src: &ZeroCopySource, _count: usize) -> io::Result<usize> {
    Err(unsupported("zero-copy send (-Z)"))
}

/// Receive-side discard: unsupported here; callers read into a buffer instead.
pub fn recv_discard(_sock: RawFd, _len: usize) -> io::Result<usize> {
    Err(unsupported("receive without copying (--discard)"))
}

/// Receive-side discard that waits: unsupported here, like [`recv_discard`].
pub fn recv_discard_wait(_sock: RawFd, _len: usize) -> io::Result<usize> {
    Err(unsupported("receive without copying (--discard)"))
}

/// Whether [`recv_discard`] really discards: not here.
pub const DISCARD_SUPPORTED: bool = false;

/// Arrival stamps on TCP reads: not here (reads carry no stamp).
pub fn tcp_enable_rx_stamps(_stream: &std::net::TcpStream) -> bool {
    false
}

/// Arrival stamps on TCP reads: never on here.
pub fn tcp_rx_stamps_on(_stream: &std::net::TcpStream) -> bool {
    false
}

/// A waiting read without an arrival stamp ([`super::stream_recv_wait`]); an empty `buf`
/// (discard) is unsupported here.
pub fn stream_recv_stamped_wait(
    stream: &std::net::TcpStream,
    buf: &mut [u8],
    _len: usize,
) -> io::Result<(usize, Option<u64>)> {
    unstamped(buf, |b| super::stream_recv_wait(stream, b))
}

/// A read without an arrival stamp; an empty `buf` (discard) is unsupported here.
pub fn stream_recv_stamped(
    stream: &std::net::TcpStream,
    buf: &mut [u8],
    _len: usize,
) -> io::Result<(usize, Option<u64>)> {
    unstamped(buf, |b| super::stream_recv(stream, b))
}

fn unstamped(
    buf: &mut [u8],
    read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
) -> io::Result<(usize, Option<u64>)> {
    if buf.is_empty() {
        return Err(unsupported("receive without copying (--discard)"));
    }
    read(buf).map(|n| (n, None))
}

/// Largest number of GSO segments one send may carry that we use (the same as on Linux, so
/// callers can size batches alike; GSO itself is unsupported here).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// UDP segmentation offload: unsupported here.
pub fn udp_set_gso(_fd: RawFd, _segment: u16) -> io::Result<()> {
    Err(unsupported("UDP segmentation offload (UDP_SEGMENT)"))
}

/// UDP receive offload: unsupported here.
pub fn udp_set_gro(_fd: RawFd) -> io::Result<()> {
    Err(unsupported("UDP receive offload (UDP_GRO)"))
}

/// A socket's drop count: not available here.
pub fn udp_socket_drops(_fd: RawFd) -> Option<u64> {
    None
}

/// Receive timestamps and the drop counter: neither is available here.
pub fn udp_enable_rx_meta(_fd: RawFd) -> (bool, bool) {
    (false, false)
}

/// Sends each slice as one message on connected socket `fd`, one send call per slice, since
/// there is no portable batch send; `wait == false` adds MSG_DONTWAIT. Returns how many were
/// sent, stopping at the first error after at least one success; the error itself if the first
/// fails.
#[cfg(unix)]
pub fn send_batch(fd: RawFd, msgs: &[IoSlice<'_>], wait: bool) -> io::Result<usize> {
    let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
    let mut sent = 0;
    while let Some(msg) = msgs.get(sent) {
        // SAFETY: the pointer and length describe the live, readable slice `msg`.
        let rc = unsafe { libc::send(fd, msg.as_ptr().cast(), msg.len(), flags) };
        if rc >= 0 {
            sent += 1;
            continue;
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return if sent > 0 { Ok(sent) } else { Err(e) };
    }
    Ok(sent)
}

/// Windows: one `send` per slice. Windows has no MSG_DONTWAIT, so with `wait == false` each
/// send is preceded by a zero-time WSAPoll for room, and a full socket gives `WouldBlock`.
#[cfg(windows)]
pub fn send_batch(fd: RawFd, msgs: &[IoSlice<'_>], wait: bool) -> io::Result<usize> {
    use windows_sys::Win32::Networking::WinSock as ws;
    let mut sent = 0;
    while let Some(msg) = msgs.get(sent) {
        let e = if !wait && !win::ready_now(fd, super::Interest::Write) {
            io::Error::from(io::ErrorKind::WouldBlock)
        } else {
            let len = i32::try_from(msg.len()).unwrap_or(i32::MAX);
            // SAFETY: the pointer and length describe the live, readable slice `msg`.
            let rc = unsafe { ws::send(fd as ws::SOCKET, msg.as_ptr(), len, 0) };
            if rc != ws::SOCKET_ERROR {
                sent += 1;
                continue;
            }
            win::last_error()
        };
        if e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return if sent > 0 { Ok(sent) } else { Err(e) };
    }
    Ok(sent)
}

/// Batched UDP send: unsupported without Unix or Windows sockets.
#[cfg(not(any(unix, windows)))]
pub fn send_batch(_fd: RawFd, _msgs: &[IoSlice<'_>], _wait: bool) -> io::Result<usize> {
    Err(unsupported("batched UDP send"))
}

/// Reusable receive state for [`recv_batch`]. Here a call receives one message into one
/// buffer of `buf_len` bytes, so only that buffer is allocated.
#[derive(Debug)]
pub struct RecvBatch {
    /// The one buffer.
    buf: Vec<u8>,
    /// Bytes of the last message in `buf`.
    len: usize,
    /// Messages the last call received: 0 or 1.
    received: usize,
    /// The last message was longer than the buffer (reported only where the OS says so).
    truncated: bool,
}

impl RecvBatch {
    /// Allocates the buffer (at least 1 byte); `count` does not matter here, one message
    /// arrives per call.
    pub fn new(_count: usize, buf_len: usize) -> RecvBatch {
        RecvBatch {
            buf: vec![0; buf_len.max(1)],
            len: 0,
            received: 0,
            truncated: false,
        }
    }

    /// Bytes of message i of the last [`recv_batch`]; empty when there is no message i.
    pub fn data(&self, i: usize) -> &[u8] {
        if i < self.received {
            &self.buf[..self.len]
        } else {
            &[]
        }
    }

    /// GRO segment size: there is no GRO here, every message is one datagram.
    pub fn segment_size(&self, _i: usize) -> Option<u16> {
        None
    }

    /// Kernel receive time: not available here.
    pub fn timestamp_ns(&self, _i: usize) -> Option<u64> {
        None
    }

    /// The socket's drop counter: not available here.
    pub fn rxq_drops(&self) -> Option<u32> {
        None
    }

    /// Truncation: Windows reports it (WSAEMSGSIZE); plain recv elsewhere does not, so false.
    pub fn truncated(&self, i: usize) -> bool {
        i < self.received && self.truncated
    }
}

/// Receives one message into the batch's buffer with one recv call and returns 1;
/// `wait == false` adds MSG_DONTWAIT. A signal before anything arrived is retried.
#[cfg(unix)]
pub fn recv_batch(fd: RawFd, batch: &mut RecvBatch, wait: bool) -> io::Result<usize> {
    let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
    batch.received = 0;
    batch.truncated = false;
    loop {
        // SAFETY: the pointer and length describe the batch's live, writable buffer.
        let rc = unsafe { libc::recv(fd, batch.buf.as_mut_ptr().cast(), batch.buf.len(), flags) };
        if let Ok(n) = usize::try_from(rc) {
            // Where the OS reports a datagram's full length, keep to what was copied.
            batch.len = n.min(batch.buf.len());
            batch.received = 1;
            return Ok(1);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Windows: one `recv` into buffer 0. `wait == false` polls first (no MSG_DONTWAIT there).
/// A datagram longer than the buffer fails the call with WSAEMSGSIZE on Windows, where Unix
/// truncates silently: it is returned as a truncated message of the buffer's length. The
/// receive timeout (WSAETIMEDOUT) reads as `WouldBlock`, as on Unix.
#[cfg(windows)]
pub fn recv_batch(fd: RawFd, batch: &mut RecvBatch, wait: bool) -> io::Result<usize> {
    use windows_sys::Win32::Networking::WinSock as ws;
    batch.received = 0;
    batch.truncated = false;
    loop {
        if !wait && !win::ready_now(fd, super::Interest::Read) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let len = i32::try_from(batch.buf.len()).unwrap_or(i32::MAX);
        // SAFETY: the pointer and length describe the batch's live, writable buffer.
        let rc = unsafe { ws::recv(fd as ws::SOCKET, batch.buf.as_mut_ptr(), len, 0) };
        if let Ok(n) = usize::try_from(rc) {
            batch.len = n.min(batch.buf.len());
            batch.received = 1;
            return Ok(1);
        }
        let e = win::last_error();
        if e.raw_os_error() == Some(ws::WSAEMSGSIZE) {
            batch.len = batch.buf.len();
            batch.received = 1;
            batch.truncated = true;
            return Ok(1);
        }
        if e.raw_os_error() == Some(ws::WSAETIMEDOUT) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Batched UDP receive: unsupported without Unix or Windows sockets.
#[cfg(not(any(unix, windows)))]
pub fn recv_batch(_fd: RawFd, _batch: &mut RecvBatch, _wait: bool) -> io::Result<usize> {
    Err(unsupported("batched UDP receive"))
}

/// Windows socket helpers for the UDP calls above.
#[cfg(windows)]
pub(super) mod win {
    use std::io;

    use windows_sys::Win32::Networking::WinSock as ws;

    use super::super::{Interest, PollSet, RawFd};

    /// True when `fd` is ready for `interest` right now (a zero-time WSAPoll).
    pub fn ready_now(fd: RawFd, interest: Interest) -> bool {
        let mut p = PollSet::new();
        p.push(fd, interest);
        p.wait(std::time::Duration::ZERO);
        p.ready(0)
    }

    /// The last WinSock error. A UDP socket that got ICMP port unreachable fails its next call
    /// with WSAECONNRESET; it is reported as `ConnectionRefused`, as Unix reports ECONNREFUSED.
    pub fn last_error() -> io::Error {
        // SAFETY: WSAGetLastError only reads this thread's last WinSock error.
        let code = unsafe { ws::WSAGetLastError() };
        if code == ws::WSAECONNRESET {
            return io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "the peer's port is closed (ICMP port unreachable)",
            );
        }
        io::Error::from_raw_os_error(code)
    }
}

/// System-wide UDP counters: not available here.
pub fn udp_snmp() -> Option<UdpSnmp> {
    None
}

/// Unacknowledged bytes of a TCP socket: unsupported here.
#[cfg_attr(any(windows, target_os = "macos"), allow(dead_code))]
pub fn tcp_send_queue(_fd: RawFd) -> io::Result<u64> {
    Err(unsupported("reading the TCP send queue"))
}

/// The peer's advertised receive window: unsupported here.
#[cfg_attr(any(windows, target_os = "macos"), allow(dead_code))]
pub fn tcp_peer_window(_fd: RawFd) -> io::Result<u64> {
    Err(unsupported("reading the peer's TCP window"))
}

/// Segments received out of order: not counted here.
pub fn tcp_out_of_order(_fd: RawFd) -> Option<u64> {
    None
}

/// Marks of loss (segments received out of order, retransmitted): unsupported here.
#[cfg_attr(target_os = "linux", allow(dead_code))]
pub fn tcp_loss_marks(_fd: RawFd) -> io::Result<u64> {
    Err(unsupported(
        "counting TCP segments received out of order or retransmitted",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_reports_unsupported_or_unknown() {
        let kind = io::ErrorKind::Unsupported;
        assert_eq!(tcp_info(0).map(|_| ()).unwrap_err().kind(), kind);
        assert_eq!(pin_current_thread(0).unwrap_err().kind(), kind);
        assert_eq!(ZeroCopySource::new(10).unwrap_err().kind(), kind);
        let src = ZeroCopySource { len: 10 };
        assert_eq!((src.len(), src.is_empty()), (10, false));
        assert_eq!(send_zerocopy(0, &src, 10).unwrap_err().kind(), kind);
        assert_eq!(recv_discard(0, 10).unwrap_err().kind(), kind);
        const { assert!(!DISCARD_SUPPORTED) };
        assert!(cpu_snapshot().is_none());
        assert!(nic_snapshot("lo").is_none());
        assert!(nic_snapshot_all().is_empty());
        assert!(interface_for_addr("127.0.0.1".parse().unwrap()).is_none());
        assert!(available_congestion().is_empty());
        assert!(online_cpus() >= 1);
    }

    #[test]
    fn udp_offloads_and_metadata_are_unsupported() {
        let kind = io::ErrorKind::Unsupported;
        assert_eq!(udp_set_gso(0, 100).unwrap_err().kind(), kind);
        assert_eq!(udp_set_gro(0).unwrap_err().kind(), kind);
        assert_eq!(udp_enable_rx_meta(0), (false, false));
        assert_eq!(udp_snmp(), None);
        let batch = RecvBatch::new(8, 0);
        assert_eq!(batch.buf.len(), 1);
        assert!(batch.data(0).is_empty());
        assert_eq!((batch.segment_size(0), batch.timestamp_ns(0)), (None, None));
        assert_eq!((batch.rxq_drops(), batch.truncated(0)), (None, false));
    }

    /// The Unix fallback really moves datagrams: one send per slice, one message per receive.
    #[cfg(unix)]
    #[test]
    fn udp_batches_one_message_at_a_time() {
        use std::net::UdpSocket;
        use std::os::fd::AsRawFd;
        use std::time::Duration;

        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        tx.connect(rx.local_addr().expect("addr")).expect("connect");
        rx.connect(tx.local_addr().expect("addr")).expect("connect");
        rx.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut batch = RecvBatch::new(4, 64);
        let e = recv_batch(rx.as_raw_fd(), &mut batch, false).expect_err("nothing queued");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);

        let payloads = [&b"one"[..], b"two!", b"three"];
        let slices: Vec<IoSlice<'_>> = payloads.iter().map(|p| IoSlice::new(p)).collect();
        assert_eq!(send_batch(tx.as_raw_fd(), &slices, true).expect("send"), 3);
        for want in payloads {
            assert_eq!(
                recv_batch(rx.as_raw_fd(), &mut batch, true).expect("recv"),
                1
            );
            assert_eq!(batch.data(0), want);
            assert!(batch.data(1).is_empty());
        }
        // The first send failing is an error, not "0 sent".
        assert!(send_batch(-1, &slices, true).is_err());
        assert_eq!(send_batch(tx.as_raw_fd(), &[], true).expect("empty"), 0);
    }

    #[test]
    fn environment_has_the_portable_facts() {
        let env = environment(Some("en0"));
        assert_eq!(env.os, std::env::consts::OS);
        assert!(env.cpus >= 1);
        assert_eq!(env.interface.as_deref(), Some("en0"));
        assert_eq!(
            (env.qdisc, env.mtu, env.software),
            (None, None, String::new())
        );
    }
}

/// The one-message UDP path on real sockets: on Linux (where the fallback is compiled for its
/// tests) it is the Unix path, under Wine the Windows one.
#[cfg(all(test, any(unix, windows)))]
mod udp_tests {
    use std::io::{self, IoSlice};
    use std::net::UdpSocket;

    use super::super::AsRawFd;
    use super::{recv_batch, send_batch, RecvBatch};

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        (a, b)
    }

    #[test]
    fn messages_arrive_one_per_call_and_an_empty_socket_would_block() {
        let (a, b) = pair();
        let mut batch = RecvBatch::new(8, 2048);
        let e = recv_batch(b.as_raw_fd(), &mut batch, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
        let msgs = [
            IoSlice::new(b"one"),
            IoSlice::new(b"two!"),
            IoSlice::new(b"3"),
        ];
        assert_eq!(send_batch(a.as_raw_fd(), &msgs, false).unwrap(), 3);
        for want in [&b"one"[..], b"two!", b"3"] {
            assert_eq!(recv_batch(b.as_raw_fd(), &mut batch, true).unwrap(), 1);
            assert_eq!(batch.data(0), want);
            assert!(batch.data(1).is_empty());
            assert!(!batch.truncated(0));
        }
        // Waiting on an empty socket ends at its receive timeout as WouldBlock.
        let e = recv_batch(b.as_raw_fd(), &mut batch, true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
    }

    #[test]
    fn a_datagram_longer_than_the_buffer_is_cut_to_it() {
        let (a, b) = pair();
        let big = vec![7u8; 2000];
        assert_eq!(
            send_batch(a.as_raw_fd(), &[IoSlice::new(&big)], true).unwrap(),
            1
        );
        let mut small = RecvBatch::new(1, 64);
        assert_eq!(recv_batch(b.as_raw_fd(), &mut small, true).unwrap(), 1);
        assert_eq!(small.data(0), &big[..64]);
        // Windows says so (WSAEMSGSIZE); plain recv on Unix cannot tell.
        assert_eq!(small.truncated(0), cfg!(windows));
        // The socket goes on working after it.
        a.send(b"after").unwrap();
        assert_eq!(recv_batch(b.as_raw_fd(), &mut small, true).unwrap(), 1);
        assert_eq!(small.data(0), b"after");
    }

    #[test]
    fn a_closed_peer_port_reads_as_refused() {
        let (a, b) = pair();
        drop(b);
        // ICMP port unreachable comes back on a later call of the sender.
        let mut refused = false;
        for _ in 0..50 {
            match send_batch(a.as_raw_fd(), &[IoSlice::new(b"x")], true) {
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    refused = true;
                    break;
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        assert!(
            refused,
            "no ConnectionRefused after sending to a closed port"
        );
    }
}
