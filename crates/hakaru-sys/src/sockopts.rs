//! Per-socket options whose support differs by OS: the congestion control, the MSS and the
//! TOS byte. Where an OS cannot set one, the call fails with `Unsupported` and says why: a
//! test is refused, never run without the option the user asked for.

use std::io;

use socket2::Socket;

/// Sets the socket's TCP congestion control (Linux only).
pub fn set_congestion(sock: &Socket, cc: &str) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        sock.set_tcp_congestion(cc.as_bytes()).map_err(|e| {
            if super::is_not_found(&e) {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "congestion control '{cc}' is not available on this host (available: {})",
                        super::available_congestion().join(" ")
                    ),
                )
            } else {
                e
            }
        })
    }
    // Elsewhere a congestion control cannot be chosen per socket.
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (sock, cc);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{} has no per-socket congestion control (hakaru sets it on Linux)",
                std::env::consts::OS
            ),
        ))
    }
}

/// Sets the TCP maximum segment size; only before the handshake has any effect, so on an
/// accepted socket (`before_connect` false) it is a no-op where the OS can set it at all.
pub fn set_mss(sock: &Socket, mss: u32, before_connect: bool) -> io::Result<()> {
    #[cfg(all(unix, not(target_os = "redox")))]
    {
        if before_connect {
            sock.set_tcp_mss(mss)?;
        }
        Ok(())
    }
    // Windows can read the MSS but not set it.
    #[cfg(windows)]
    {
        let _ = (sock, mss, before_connect);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "Windows does not let a program set the TCP maximum segment size",
        ))
    }
    #[cfg(not(any(all(unix, not(target_os = "redox")), windows)))]
    {
        let _ = (sock, mss, before_connect);
        Ok(())
    }
}

/// Sets the TOS byte (IPv4) or traffic class (IPv6).
pub fn set_tos(sock: &Socket, tos: u8, ipv6: bool) -> io::Result<()> {
    // Windows accepts IP_TOS and then ignores it (marking needs a QoS policy): refused, not
    // silently dropped.
    #[cfg(windows)]
    {
        let _ = (sock, tos, ipv6);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "Windows ignores the TOS byte a program sets (DSCP marking needs a QoS policy)",
        ))
    }
    #[cfg(unix)]
    {
        if ipv6 {
            sock.set_tclass_v6(u32::from(tos))
        } else {
            sock.set_tos_v4(u32::from(tos))
        }
    }
    #[cfg(not(any(unix, windows)))]
    {
        if ipv6 {
            Err(io::Error::new(io::ErrorKind::Unsupported, "IPV6_TCLASS"))
        } else {
            sock.set_tos_v4(u32::from(tos))
        }
    }
}

/// Limits the bytes a TCP socket holds that are not yet sent (TCP_NOTSENT_LOWAT), so an
/// application's new data does not queue behind a deep socket buffer (the responsiveness
/// test's servers and clients). Linux only (socket2 has it nowhere else); a no-op elsewhere.
pub fn set_notsent_lowat(sock: &socket2::SockRef<'_>, bytes: u32) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        sock.set_tcp_notsent_lowat(bytes)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (sock, bytes);
        Ok(())
    }
}

/// Whether [`set_notsent_lowat`] and [`set_notsent_lowat_fd`] do anything here (Linux).
pub const NOTSENT_LOWAT_SUPPORTED: bool = cfg!(target_os = "linux");

/// TCP_NOTSENT_LOWAT by descriptor, for a connection whose mark follows its rate while it
/// runs (the responsiveness test's load, `hakaru_rpm::shallow`). Linux only; a no-op
/// elsewhere, as [`set_notsent_lowat`] is.
pub fn set_notsent_lowat_fd(fd: crate::RawFd, bytes: u32) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        crate::linux_udp::set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, v)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (fd, bytes);
        Ok(())
    }
}

/// Sets the socket's receive low-water mark (SO_RCVLOWAT): a blocking read waits until this
/// many bytes are queued (or its timeout, the end of the stream or an error), and a poll reports
/// the socket readable only then. A hint for bulk downloads (`engine::http`): Linux only,
/// `Unsupported` elsewhere, and the caller goes on without it.
pub fn set_recv_lowat(sock: &socket2::SockRef<'_>, bytes: u32) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: a valid c_int option value of the size passed; the fd is borrowed.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (sock, bytes);
        Err(io::Error::new(io::ErrorKind::Unsupported, "SO_RCVLOWAT"))
    }
}

/// Whether the last segment `sock` received was processed on the CPU the caller runs on now
/// (SO_INCOMING_CPU against `sched_getcpu`). On loopback a segment is processed on its sender's
/// CPU, so this tells a reader whether its sender shares its CPU. Linux only; `None` elsewhere
/// or when either is unknown.
pub fn shares_cpu_with_sender(sock: &socket2::SockRef<'_>) -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        let incoming = sock.cpu_affinity().ok()?;
        // SAFETY: sched_getcpu takes nothing and returns the caller's CPU or -1.
        let here = usize::try_from(unsafe { libc::sched_getcpu() }).ok()?;
        Some(incoming == here)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = sock;
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    fn readable(s: &std::net::TcpStream, wait: Duration) -> bool {
        let mut p = crate::PollSet::new();
        p.push(std::os::fd::AsRawFd::as_raw_fd(s), crate::Interest::Read);
        p.wait(wait);
        p.ready(0)
    }

    #[test]
    fn a_low_water_mark_holds_readiness_until_that_many_bytes_are_queued() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.write_all(&[1u8; 10]).unwrap();
        assert!(readable(&b, Duration::from_secs(5)), "10 bytes arrive");
        set_recv_lowat(&socket2::SockRef::from(&b), 20).unwrap();
        assert!(!readable(&b, Duration::ZERO), "10 of 20 bytes: not yet");
        a.write_all(&[2u8; 10]).unwrap();
        assert!(readable(&b, Duration::from_secs(5)), "20 bytes: readable");
        set_recv_lowat(&socket2::SockRef::from(&b), 1).unwrap();
    }

    /// The CPUs this thread may run on (its affinity, which a cpuset may narrow).
    fn allowed_cpus() -> Vec<usize> {
        // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills one of the size
        // passed, and CPU_ISSET reads it within its bounds.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                0,
                "sched_getaffinity"
            );
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }

    #[test]
    fn a_reader_sees_whether_its_loopback_sender_shares_its_cpu() {
        let cpus = allowed_cpus();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // The sender on the reader's CPU, then (with two CPUs) on another one.
        for apart in [false, true] {
            if apart && cpus.len() < 2 {
                continue;
            }
            let (tx, rx) = std::sync::mpsc::channel::<usize>();
            let sender = std::thread::spawn(move || {
                let cpu = rx.recv().unwrap();
                crate::pin_current_thread(cpu).unwrap();
                let mut a = std::net::TcpStream::connect(addr).unwrap();
                a.write_all(&[7u8; 1000]).unwrap();
            });
            crate::pin_current_thread(cpus[0]).unwrap();
            tx.send(cpus[usize::from(apart)]).unwrap();
            let (mut b, _) = l.accept().unwrap();
            let mut buf = [0u8; 1000];
            std::io::Read::read_exact(&mut b, &mut buf).unwrap();
            sender.join().unwrap();
            assert_eq!(
                shares_cpu_with_sender(&socket2::SockRef::from(&b)),
                Some(!apart),
                "sender apart: {apart}"
            );
        }
    }
}
