//! The socket calls of the hot receive and send paths, made through `syscall(2)` (Linux).
//!
//! The C library's `recv`, `recvfrom`, `recvmsg`, `send` and `sendto` are thread cancellation
//! points: in a process with more than one thread, glibc wraps each in two atomic updates of
//! the thread's cancellation state (`__pthread_enable_asynccancel` and `..._disable_...`), and
//! musl in its own check. hakaru never cancels a thread, so the wrapper is pure cost, and on
//! a path that makes one call per datagram it shows (docs/performance-notes.md, section 17).
//! `syscall(2)` is not a cancellation point and goes straight to the kernel. The results,
//! errors and blocking behaviour are the kernel's, as through the C library.
//! `recv`/`send` are `recvfrom`/`sendto` without an address, as the C library makes them.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use socket2::{SockAddr, SockAddrStorage};

/// `n` as a byte count, or the error `errno` holds.
fn done(n: libc::c_long) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// recv(2): up to `len` bytes into `buf` (null with MSG_TRUNC on TCP, which copies nothing).
///
/// # Safety
///
/// `buf` is valid for writes of `len` bytes, or null where the kernel writes nothing.
pub(crate) unsafe fn recv(
    fd: RawFd,
    buf: *mut libc::c_void,
    len: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: the caller vouches for `buf`; no address is asked for.
    done(unsafe { libc::syscall(libc::SYS_recvfrom, fd, buf, len, flags, null, null) })
}

/// recvmsg(2) into `hdr`.
///
/// # Safety
///
/// `hdr`'s iovecs and control buffer are valid for writes of the lengths it gives.
pub(crate) unsafe fn recvmsg(
    fd: RawFd,
    hdr: &mut libc::msghdr,
    flags: libc::c_int,
) -> io::Result<usize> {
    // SAFETY: the caller vouches for what `hdr` points to.
    done(unsafe { libc::syscall(libc::SYS_recvmsg, fd, hdr as *mut libc::msghdr, flags) })
}

/// send(2) of `buf`.
pub(crate) fn send(fd: RawFd, buf: &[u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: a null address of length 0 is no address.
    unsafe { sendto(fd, buf, flags, std::ptr::null(), 0) }
}

/// sendto(2) of `buf` to the address at `to` (`to_len` bytes; null and 0 for none).
///
/// # Safety
///
/// `to` is null with `to_len` 0, or points to a live socket address of `to_len` bytes.
unsafe fn sendto(
    fd: RawFd,
    buf: &[u8],
    flags: libc::c_int,
    to: *const SockAddrStorage,
    to_len: libc::socklen_t,
) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of its length; the caller vouches for `to`.
    done(unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            buf.as_ptr(),
            buf.len(),
            flags,
            to,
            to_len,
        )
    })
}

/// recvfrom(2): one datagram into `buf`, with its sender.
pub(crate) fn recv_from(
    fd: RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
) -> io::Result<(usize, SocketAddr)> {
    let mut from = SockAddrStorage::zeroed();
    let mut from_len = from.size_of();
    // SAFETY: `buf` is valid for writes of its length; `from` is a live sockaddr_storage of
    // `from_len` bytes (a sockaddr_storage), which the kernel fills and `from_len` is updated to.
    let n = done(unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd,
            buf.as_mut_ptr(),
            buf.len(),
            flags,
            &mut from as *mut SockAddrStorage,
            &mut from_len as *mut libc::socklen_t,
        )
    })?;
    // SAFETY: the kernel wrote a socket address of `from_len` bytes (at most the storage's).
    let addr = unsafe { SockAddr::new(from, from_len) };
    let addr = addr.as_socket().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "recvfrom: a datagram from an address of family {}, expected IPv4 or IPv6",
                addr.family()
            ),
        )
    })?;
    Ok((n, addr))
}

/// sendto(2): `buf` as one datagram to `to`.
pub(crate) fn send_to(
    fd: RawFd,
    buf: &[u8],
    to: SocketAddr,
    flags: libc::c_int,
) -> io::Result<usize> {
    let to = SockAddr::from(to);
    // SAFETY: `to` is a live socket address of `to.len()` bytes.
    unsafe { sendto(fd, buf, flags, to.as_ptr(), to.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsRawFd;

    #[test]
    fn datagrams_go_and_come_back_with_their_sender_on_both_families() {
        for local in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(a) = UdpSocket::bind(local) else {
                continue; // no IPv6 on this host
            };
            let b = UdpSocket::bind(local).unwrap();
            let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
            assert_eq!(send_to(a.as_raw_fd(), b"ping", ba, 0).unwrap(), 4);
            let mut buf = [0u8; 16];
            let (n, from) = recv_from(b.as_raw_fd(), &mut buf, 0).unwrap();
            assert_eq!((&buf[..n], from), (&b"ping"[..], aa));
            // Nothing queued: the kernel's EAGAIN comes back as WouldBlock, not as a count.
            let e = recv_from(b.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        }
    }

    #[test]
    fn stream_bytes_and_errors_are_the_kernels() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(
            send(c.as_raw_fd(), b"hello", libc::MSG_NOSIGNAL).unwrap(),
            5
        );
        let mut buf = [0u8; 8];
        // SAFETY: buf is live and 8 bytes long.
        let n = unsafe { recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) }.unwrap();
        assert_eq!(&buf[..n], b"hello");
        // SAFETY: as above.
        let e = unsafe {
            recv(
                s.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                8,
                libc::MSG_DONTWAIT,
            )
        };
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        drop(c);
        // SAFETY: as above.
        let n = unsafe { recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), 8, 0) }.unwrap();
        assert_eq!(n, 0, "the peer's close reads as end of stream");
        // A descriptor that is not open: the kernel's EBADF, as an error.
        let e = send(0x7fff_0000, b"x", 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }
}
