//! Small calls every OS makes differently, behind one name each: non-blocking stream sends
//! and receives, a connect bounded by a timeout, and the OS errors callers tell apart.

use std::io;
use std::net::TcpStream;
use std::time::Duration;

use socket2::{SockAddr, Socket};

/// Sends on a non-blocking stream without raising SIGPIPE: `send(MSG_DONTWAIT |
/// MSG_NOSIGNAL)` on Linux, `MSG_DONTWAIT` on other Unixes (where the runtime ignores SIGPIPE),
/// a plain write elsewhere (the stream is non-blocking already).
pub fn stream_send(stream: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
        crate::linux_calls::send(stream.as_raw_fd(), buf, flags)
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    {
        use std::os::fd::AsRawFd;
        #[cfg(target_os = "android")]
        let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
        #[cfg(not(target_os = "android"))]
        let flags = libc::MSG_DONTWAIT;
        // SAFETY: buf is valid for buf.len() bytes; the fd is owned by `stream`.
        let n = unsafe { libc::send(stream.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
    #[cfg(not(unix))]
    {
        io::Write::write(&mut &*stream, buf)
    }
}

/// Sends the last bytes before this end closes the stream: on Linux with MSG_MORE, so they wait
/// for the close and its FIN rides in the same segment (the kernel tacks a FIN onto an unsent
/// tail), and the peer is woken once, for data and end together; a plain write elsewhere.
/// Blocking or not as the stream is; no SIGPIPE.
pub fn send_before_close(stream: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::os::fd::AsRawFd;
        let flags = libc::MSG_NOSIGNAL | libc::MSG_MORE;
        // SAFETY: buf is valid for buf.len() bytes; the fd is owned by `stream`.
        let n = unsafe { libc::send(stream.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        io::Write::write(&mut &*stream, buf)
    }
}

/// Receives from a stream without blocking (`recv(MSG_DONTWAIT)` on Unix, made without the C
/// library's cancellation wrapper on Linux; a plain read of a non-blocking stream elsewhere).
pub fn stream_recv(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (ptr, len) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: buf is valid for writes of buf.len() bytes; the fd is owned by `stream`.
        unsafe { crate::linux_calls::recv(stream.as_raw_fd(), ptr, len, libc::MSG_DONTWAIT) }
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    {
        use std::os::fd::AsRawFd;
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
    #[cfg(not(unix))]
    {
        io::Read::read(&mut &*stream, buf)
    }
}

/// Receives from a blocking stream, waiting at most its read timeout (SO_RCVTIMEO, which the
/// caller sets) for data: one system call per wait, where a non-blocking read and a poll take
/// three (the poll, the read, the read that finds the socket empty). A timeout reads as
/// `WouldBlock` on every OS (Windows says `TimedOut`); where [`RECV_TIMEOUT_KEEPS_STREAM`] is
/// false the stream may not be read again after one.
pub fn stream_recv_wait(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    let r = {
        use std::os::fd::AsRawFd;
        let (ptr, len) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: buf is valid for writes of buf.len() bytes; the fd is owned by `stream`.
        unsafe { crate::linux_calls::recv(stream.as_raw_fd(), ptr, len, 0) }
    };
    #[cfg(not(target_os = "linux"))]
    let r = io::Read::read(&mut &*stream, buf);
    r.map_err(|e| {
        if e.kind() == io::ErrorKind::TimedOut {
            io::Error::from(io::ErrorKind::WouldBlock)
        } else {
            e
        }
    })
}

/// Receives one datagram and its sender, as [`std::net::UdpSocket::recv_from`] does (blocking or
/// not as the socket is), without the C library's cancellation wrapper on Linux
/// (`linux_calls.rs`): for servers that answer one datagram at a time.
pub fn udp_recv_from(
    sock: &std::net::UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, std::net::SocketAddr)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        crate::linux_calls::recv_from(sock.as_raw_fd(), buf, 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        sock.recv_from(buf)
    }
}

/// Receives one datagram and its sender if one is queued, without waiting whatever the
/// socket's mode: `WouldBlock` when the socket is empty. Linux only (MSG_DONTWAIT on one
/// call); elsewhere [`io::ErrorKind::Unsupported`], and the caller waits in
/// [`udp_recv_from`] instead.
pub fn udp_recv_from_now(
    sock: &std::net::UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, std::net::SocketAddr)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        crate::linux_calls::recv_from(sock.as_raw_fd(), buf, libc::MSG_DONTWAIT)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (sock, buf);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a receive that does not wait needs MSG_DONTWAIT (Linux)",
        ))
    }
}

/// Sends `buf` as one datagram to `to`, as [`std::net::UdpSocket::send_to`] does, without the C
/// library's cancellation wrapper on Linux.
pub fn udp_send_to(
    sock: &std::net::UdpSocket,
    buf: &[u8],
    to: std::net::SocketAddr,
) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        crate::linux_calls::send_to(sock.as_raw_fd(), buf, to, 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        sock.send_to(buf, to)
    }
}

/// Connects a blocking socket, waiting at most `timeout`. Unix bounds a blocking connect by
/// SO_SNDTIMEO (which the caller sets): one system call, the thing a connection-rate test
/// measures. Windows does not, so there the connect waits at most the timeout itself.
pub fn connect_bounded(sock: &Socket, addr: &SockAddr, timeout: Duration) -> io::Result<()> {
    #[cfg(not(windows))]
    {
        let _ = timeout;
        sock.connect(addr)
    }
    #[cfg(windows)]
    {
        sock.connect_timeout(addr, timeout)
    }
}

/// Starts a TCP connect to `addr` without waiting for it: the stream is non-blocking and the
/// handshake under way (EINPROGRESS on Unix, WSAEWOULDBLOCK on Windows). Wait for it to be
/// writable ([`super::PollSet`] with `Interest::Write`); `take_error()` then says whether it
/// was established.
pub fn connect_start(addr: std::net::SocketAddr) -> io::Result<TcpStream> {
    let sock = Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    sock.set_nonblocking(true)?;
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        #[cfg(windows)]
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    Ok(sock.into())
}

/// Waits until a listener has a connection to accept, at most `timeout`: poll on Unix; a
/// 20 ms sleep elsewhere (the accept loop tries its non-blocking accept either way).
pub fn wait_listener(l: &std::net::TcpListener, timeout: Duration) {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        super::wait_fd(l.as_raw_fd(), super::Interest::Read, timeout);
    }
    #[cfg(not(unix))]
    {
        let _ = l;
        std::thread::sleep(timeout.min(Duration::from_millis(20)));
    }
}

/// Whether the kernel hands a datagram to the socket connected to its sender when several
/// sockets share a UDP port. Linux (and every Unix here) does; Windows does not, so a Windows
/// server gives each UDP flow a port of its own.
pub const UDP_SHARED_PORT_DEMUX: bool = cfg!(not(windows));

/// Whether a blocking `accept` on a listener gives up after the listener's receive timeout
/// (SO_RCVTIMEO), and the socket it returns is blocking and carries the listener's receive and
/// send timeouts and TCP_NODELAY. Linux does all of it (the accepted socket is cloned from the
/// listener; O_NONBLOCK is a file flag and is not cloned), so a per-connection server can set
/// them once on the listener and accept with no system call but `accept` itself. Elsewhere a
/// blocking accept may wait forever and the options must be set on each accepted socket.
pub const ACCEPT_INHERITS_TIMEOUTS: bool = cfg!(target_os = "linux");

/// Whether shutting a TCP socket's receive side (`shutdown(SHUT_RD)`) from another thread ends
/// a receive blocked on it, which then returns 0. Linux does, so a blocking round-trip loop can
/// wait with no receive timeout (a timeout arms a kernel timer for every wait, about 2 % of a
/// loopback round trip) and still be ended by whoever stops it. Elsewhere the loops keep their
/// timeouts. Linux does the same for a UDP socket, connected or not (for one that is not, the
/// call answers ENOTCONN but shuts the side all the same, and the receive returns 0 bytes from
/// no address).
pub const SHUTDOWN_WAKES_BLOCKED_RECV: bool = cfg!(target_os = "linux");

/// Whether a stream stays usable after a blocking read timed out (SO_RCVTIMEO): on Unix the
/// read just fails with EAGAIN; Windows documents the connection as indeterminate after a
/// receive that timed out, so there a loop that waits with a timeout must not read that way
/// ([`stream_recv_wait`]).
pub const RECV_TIMEOUT_KEEPS_STREAM: bool = cfg!(unix);

/// The process or the system is out of file descriptors (EMFILE, ENFILE).
pub fn is_out_of_descriptors(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// A blocking connect cut short by its send timeout (EINPROGRESS on Unix).
pub fn is_connect_cut_short(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::EINPROGRESS)
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// The kernel had no buffer for a datagram (ENOBUFS): the sender outran its own queue.
pub fn is_out_of_buffers(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::ENOBUFS)
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// A UDP GSO send the device or path refused (EIO, EINVAL): send without segmentation.
pub fn is_gso_refused(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(code) if code == libc::EIO || code == libc::EINVAL)
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// No such entry (ENOENT): e.g. a congestion control the kernel does not have.
pub fn is_not_found(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::ENOENT)
    }
    #[cfg(not(unix))]
    {
        e.kind() == io::ErrorKind::NotFound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair on loopback: the connecting end and the accepted one.
    fn loopback_pair() -> (TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_receive_now_takes_what_is_queued_and_never_waits() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // A blocking socket with no timeout: a receive that waited would hang the test.
        let mut buf = [0u8; 64];
        let r = udp_recv_from_now(&rx, &mut buf);
        if !cfg!(target_os = "linux") {
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::Unsupported);
            return;
        }
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"queued", rx.local_addr().unwrap()).unwrap();
        // Loopback delivers within the send; allow a moment on a loaded machine.
        let t0 = std::time::Instant::now();
        let (n, from) = loop {
            match udp_recv_from_now(&rx, &mut buf) {
                Ok(got) => break got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(t0.elapsed() < Duration::from_secs(5), "never delivered");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(
            (&buf[..n], from),
            (&b"queued"[..], tx.local_addr().unwrap())
        );
        assert_eq!(
            udp_recv_from_now(&rx, &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[test]
    fn errors_are_told_apart_by_their_os_codes() {
        #[cfg(unix)]
        {
            let e = |c| io::Error::from_raw_os_error(c);
            assert!(is_out_of_descriptors(&e(libc::EMFILE)));
            assert!(is_out_of_descriptors(&e(libc::ENFILE)));
            assert!(is_connect_cut_short(&e(libc::EINPROGRESS)));
            assert!(is_out_of_buffers(&e(libc::ENOBUFS)));
            assert!(is_gso_refused(&e(libc::EIO)) && is_gso_refused(&e(libc::EINVAL)));
            assert!(is_not_found(&e(libc::ENOENT)));
            assert!(!is_out_of_buffers(&e(libc::EMFILE)));
        }
        let other = io::Error::other("x");
        assert!(!is_out_of_descriptors(&other) && !is_gso_refused(&other));
    }

    #[test]
    fn accepted_sockets_carry_the_listeners_timeouts_where_the_platform_says_so() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let t = Duration::from_millis(70);
        let sock = socket2::SockRef::from(&l);
        sock.set_read_timeout(Some(t)).unwrap();
        sock.set_write_timeout(Some(t)).unwrap();
        sock.set_tcp_nodelay(true).unwrap();
        // The kernel keeps timeouts in its own ticks: compare with what it kept.
        let (rt, wt) = (sock.read_timeout().unwrap(), sock.write_timeout().unwrap());
        assert!(rt.is_some() && wt.is_some());
        // An accept with nothing to accept gives up after the timeout instead of blocking.
        if ACCEPT_INHERITS_TIMEOUTS {
            let e = l.accept().unwrap_err();
            assert!(matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ));
        }
        let _a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        if ACCEPT_INHERITS_TIMEOUTS {
            assert_eq!(b.read_timeout().unwrap(), rt);
            assert_eq!(b.write_timeout().unwrap(), wt);
            assert!(b.nodelay().unwrap());
            // Blocking: a read with nothing to read waits out the timeout.
            let mut buf = [0u8; 1];
            let e = std::io::Read::read(&mut &b, &mut buf).unwrap_err();
            assert!(matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ));
        }
    }

    #[test]
    fn shutting_the_receive_side_ends_a_blocked_receive_where_the_platform_says_so() {
        if !SHUTDOWN_WAKES_BLOCKED_RECV {
            return;
        }
        let (_a, b) = loopback_pair();
        // A timeout far beyond the shutdown, so a platform that does not wake fails, not hangs.
        b.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let cut = b.try_clone().unwrap();
        let t0 = std::time::Instant::now();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            std::io::Read::read(&mut &b, &mut buf)
        });
        std::thread::sleep(Duration::from_millis(50));
        cut.shutdown(std::net::Shutdown::Read).unwrap();
        // End of stream (not the timeout's error), well before the timeout.
        assert_eq!(reader.join().unwrap().unwrap(), 0);
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn shutting_an_unconnected_udp_sockets_receive_side_ends_a_blocked_receive() {
        const { assert!(SHUTDOWN_WAKES_BLOCKED_RECV) };
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // A timeout far beyond the shutdown, so a kernel that does not wake fails, not hangs.
        b.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let cut = b.try_clone().unwrap();
        let t0 = std::time::Instant::now();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            udp_recv_from(&b, &mut buf).map(|(n, _)| n)
        });
        std::thread::sleep(Duration::from_millis(50));
        // Not connected: the call says so, and shuts the side anyway.
        let r = socket2::SockRef::from(&cut).shutdown(std::net::Shutdown::Read);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENOTCONN));
        // The receive returned (0 bytes from no address, which the call cannot name), not the
        // timeout's WouldBlock, well before the timeout.
        match reader.join().unwrap() {
            Ok(n) => assert_eq!(n, 0),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_waiting_read_waits_for_data_and_reads_its_timeout_as_would_block() {
        let (_idle, b) = loopback_pair();
        b.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 16];
        let t0 = std::time::Instant::now();
        let e = stream_recv_wait(&b, &mut buf).unwrap_err();
        // WouldBlock on every OS (Windows says TimedOut), after waiting in the call.
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(
            t0.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t0.elapsed()
        );
        // A stream that never timed out (Windows leaves one that did indeterminate).
        let (a, b) = loopback_pair();
        b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            io::Write::write_all(&mut &a, b"hello").unwrap();
            a
        });
        assert_eq!(stream_recv_wait(&b, &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        drop(writer.join().unwrap());
        assert_eq!(stream_recv_wait(&b, &mut buf).unwrap(), 0);
    }

    /// Linux: the last bytes wait for the close and arrive with its FIN, so the reader that
    /// gets them finds the end of stream at once. With a plain send they would arrive 100 ms
    /// before the FIN, and the non-blocking read after them would find nothing yet.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_last_bytes_leave_with_the_fin() {
        let (a, b) = loopback_pair();
        b.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let writer = std::thread::spawn(move || {
            assert_eq!(send_before_close(&a, b"bye").unwrap(), 3);
            std::thread::sleep(Duration::from_millis(100));
            drop(a);
        });
        let mut buf = [0u8; 8];
        assert_eq!(std::io::Read::read(&mut &b, &mut buf).unwrap(), 3);
        b.set_nonblocking(true).unwrap();
        assert_eq!(
            stream_recv(&b, &mut buf).unwrap(),
            0,
            "no FIN with the bytes"
        );
        writer.join().unwrap();
    }

    #[test]
    fn stream_calls_move_bytes_without_blocking() {
        let (a, b) = loopback_pair();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 8];
        let e = stream_recv(&b, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(stream_send(&a, b"hakaru").unwrap(), 6);
        let mut got = 0;
        for _ in 0..100 {
            match stream_recv(&b, &mut buf[got..]) {
                Ok(n) => got += n,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
            if got == 6 {
                break;
            }
        }
        assert_eq!(&buf[..got], b"hakaru");
    }
}
