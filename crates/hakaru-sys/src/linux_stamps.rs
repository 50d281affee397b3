//! Arrival stamps on TCP reads (Linux): SO_TIMESTAMPNS on the socket, SCM_TIMESTAMPNS on
//! each read, for the engine's count of what reached the host before a measured window ended.

use std::io;
use std::mem;
use std::os::fd::AsRawFd;

/// Asks the kernel to stamp every segment that arrives on TCP stream `stream` with the time it
/// reached the host (SO_TIMESTAMPNS, CLOCK_REALTIME), for [`stream_recv_stamped`]. False when
/// the kernel refuses; reads then carry no stamp.
pub fn tcp_enable_rx_stamps(stream: &std::net::TcpStream) -> bool {
    super::linux_udp::set_int(
        stream.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPNS,
        1,
    )
    .is_ok()
}

/// Whether arrival stamps are on for `stream` ([`tcp_enable_rx_stamps`] was called and held).
pub fn tcp_rx_stamps_on(stream: &std::net::TcpStream) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: `v` is a live c_int of `len` bytes the kernel fills; `len` is updated to what it
    // wrote.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && v != 0
}

/// Receives from a TCP stream without blocking, like [`super::stream_recv`] (or, with an empty
/// `buf`, discards up to `len` bytes like [`recv_discard`]), and returns the bytes moved with
/// the arrival stamp (nanoseconds since the Unix epoch) of the last segment the read took,
/// when the kernel stamped it ([`tcp_enable_rx_stamps`]). A segment that waited out of order
/// behind a lost one keeps the time it arrived, not the time TCP released it.
pub fn stream_recv_stamped(
    stream: &std::net::TcpStream,
    buf: &mut [u8],
    len: usize,
) -> io::Result<(usize, Option<u64>)> {
    recv_stamped(stream, buf, len, libc::MSG_DONTWAIT)
}

/// Like [`stream_recv_stamped`] on a blocking stream: waits at most its SO_RCVTIMEO for data (a
/// timeout reads as `WouldBlock`), as [`super::stream_recv_wait`] does.
pub fn stream_recv_stamped_wait(
    stream: &std::net::TcpStream,
    buf: &mut [u8],
    len: usize,
) -> io::Result<(usize, Option<u64>)> {
    recv_stamped(stream, buf, len, 0)
}

fn recv_stamped(
    stream: &std::net::TcpStream,
    buf: &mut [u8],
    len: usize,
    wait: libc::c_int,
) -> io::Result<(usize, Option<u64>)> {
    let (ptr, len, flags) = if buf.is_empty() {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "discard of 0 bytes: expected a length of at least 1 byte",
            ));
        }
        // With MSG_TRUNC Linux TCP drops the bytes without touching the (null) buffer.
        (std::ptr::null_mut(), len, libc::MSG_TRUNC | wait)
    } else {
        (buf.as_mut_ptr().cast(), buf.len(), wait)
    };
    // Room for one struct timespec control message, aligned for cmsghdr.
    let mut control = [0u64; 8];
    loop {
        let mut iov = libc::iovec {
            iov_base: ptr,
            iov_len: len,
        };
        // SAFETY: an all-zero msghdr is valid (no name, no iovecs, no control).
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr().cast();
        hdr.msg_controllen = mem::size_of_val(&control) as _;
        // SAFETY: the iovec points into `buf` (valid for writes of its length) or is null with
        // MSG_TRUNC (the kernel copies nothing); the control buffer is ours and live.
        match unsafe { super::linux_calls::recvmsg(stream.as_raw_fd(), &mut hdr, flags) } {
            Ok(n) => {
                // SAFETY: recvmsg filled `hdr`'s control buffer (ours, aligned) with
                // msg_controllen bytes of control messages.
                let stamp = unsafe { tcp_stamp(&hdr) };
                return Ok((n, stamp));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The SCM_TIMESTAMPNS stamp among a received message's control messages, if there is one.
///
/// # Safety
/// `hdr.msg_control` must point to `hdr.msg_controllen` readable bytes of control messages as
/// the kernel writes them, aligned for cmsghdr.
unsafe fn tcp_stamp(hdr: &libc::msghdr) -> Option<u64> {
    let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
    while !cmsg.is_null() {
        let c = &*cmsg;
        let need = libc::CMSG_LEN(mem::size_of::<libc::timespec>() as libc::c_uint) as usize;
        if (c.cmsg_level, c.cmsg_type) == (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS)
            && c.cmsg_len as usize >= need
        {
            let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
            // time_t and c_long are i32 on some 32-bit targets, i64 here.
            #[allow(clippy::useless_conversion)]
            return super::linux_udp::timespec_ns(i64::from(ts.tv_sec), i64::from(ts.tv_nsec));
        }
        cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
    }
    None
}
