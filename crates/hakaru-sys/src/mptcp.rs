//! Multipath TCP (RFC 8684): stream sockets opened with IPPROTO_MPTCP, and what the kernel says
//! about a connection (did it run MPTCP or fall back to TCP, over how many subflows).
//!
//! Linux has MPTCP since 5.6, switched per network namespace by `net.mptcp.enabled`.
//! Elsewhere every call refuses with [`std::io::ErrorKind::Unsupported`] and says so: a test
//! that asks for MPTCP is refused, never run over plain TCP without saying it.

use std::io;

use socket2::{Domain, Socket};

use super::RawFd;

/// What the kernel says about one MPTCP socket's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MptcpState {
    /// The connection runs MPTCP (false: it fell back to plain TCP, the peer or a middlebox
    /// did not take part).
    pub active: bool,
    /// Subflows (TCP connections) the MPTCP connection has now, the first included; 1 for a
    /// connection that fell back.
    pub subflows: u32,
}

/// Why MPTCP cannot be used here, or `Ok` when a socket can be opened with it.
pub fn mptcp_available() -> Result<(), String> {
    mptcp_socket(Domain::IPV4)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// A stream socket of `domain` with IPPROTO_MPTCP, or an error naming why there is none (the
/// kernel has no MPTCP, `net.mptcp.enabled` is 0, or the OS has none).
pub fn mptcp_socket(domain: Domain) -> io::Result<Socket> {
    #[cfg(target_os = "linux")]
    {
        // IPPROTO_MPTCP (262): in libc for Linux only, and not in every version.
        const IPPROTO_MPTCP: i32 = 262;
        Socket::new(
            domain,
            socket2::Type::STREAM,
            Some(socket2::Protocol::from(IPPROTO_MPTCP)),
        )
        .map_err(|e| {
            let why = match e.raw_os_error() {
                Some(libc::ENOPROTOOPT) => {
                    "MPTCP is turned off on this host (sysctl net.mptcp.enabled = 0)".to_string()
                }
                Some(libc::EPROTONOSUPPORT) | Some(libc::EINVAL) | Some(libc::EAFNOSUPPORT) => {
                    "this kernel has no MPTCP (Linux 5.6 or later built with CONFIG_MPTCP)"
                        .to_string()
                }
                _ => format!("opening an MPTCP socket: {e}"),
            };
            io::Error::new(io::ErrorKind::Unsupported, why)
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = domain;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{} has no MPTCP sockets for applications (hakaru uses MPTCP on Linux)",
                std::env::consts::OS
            ),
        ))
    }
}

/// The state of a connected socket's MPTCP connection: `Ok(None)` for a plain TCP socket or an
/// MPTCP socket that fell back to TCP at accept (the kernel hands those over as TCP sockets).
pub fn mptcp_state(fd: RawFd) -> io::Result<Option<MptcpState>> {
    #[cfg(target_os = "linux")]
    {
        linux::state(fd)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no MPTCP on this OS",
        ))
    }
}

/// The remote addresses of every subflow of a socket's MPTCP connection (the first included);
/// empty for a plain TCP socket or one that fell back. Linux 5.17 and later
/// (MPTCP_SUBFLOW_ADDRS); elsewhere, and on older kernels, an error.
pub fn mptcp_subflow_peers(fd: RawFd) -> io::Result<Vec<std::net::IpAddr>> {
    #[cfg(target_os = "linux")]
    {
        linux::subflow_peers(fd)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no MPTCP on this OS",
        ))
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::mem;

    use super::{MptcpState, RawFd};

    const SOL_MPTCP: libc::c_int = 284;
    const MPTCP_INFO: libc::c_int = 1;
    /// SOL_TCP option: 1 while the socket runs MPTCP, 0 for TCP or after a fallback (5.16).
    const TCP_IS_MPTCP: libc::c_int = 43;
    /// `mptcpi_flags` bit: the connection fell back to TCP.
    const MPTCP_INFO_FLAG_FALLBACK: u32 = 1;
    /// Where `mptcpi_subflows_total` (Linux 6.10) sits in `struct mptcp_info`.
    const SUBFLOWS_TOTAL_AT: usize = 80;

    /// `struct mptcp_info` as bytes: older kernels fill less of it and say how much.
    #[repr(C, align(8))]
    struct RawInfo([u8; 128]);

    fn getsockopt_into(
        fd: RawFd,
        level: libc::c_int,
        name: libc::c_int,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: `buf` is live and writable for `len` bytes; the kernel writes at most `len`
        // bytes and reports how many.
        let rc = unsafe { libc::getsockopt(fd, level, name, buf.as_mut_ptr().cast(), &mut len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((len as usize).min(buf.len()))
    }

    pub(super) fn state(fd: RawFd) -> io::Result<Option<MptcpState>> {
        let mut is = [0u8; mem::size_of::<libc::c_int>()];
        let is_mptcp = match getsockopt_into(fd, libc::IPPROTO_TCP, TCP_IS_MPTCP, &mut is) {
            Ok(n) if n == is.len() => libc::c_int::from_ne_bytes(is) != 0,
            Ok(_) => false,
            // Kernels before 5.16 do not know the option: MPTCP_INFO below still tells.
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => true,
            Err(e) => return Err(e),
        };
        let mut raw = RawInfo([0; 128]);
        let n = match getsockopt_into(fd, SOL_MPTCP, MPTCP_INFO, &mut raw.0) {
            Ok(n) => n,
            // A plain TCP socket (or one handed over as TCP after a fallback at accept).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOPROTOOPT) | Some(libc::EOPNOTSUPP)
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        Ok(Some(from_info(&raw.0[..n], is_mptcp)))
    }

    /// getsockopt(SOL_MPTCP) option: every subflow's local and remote address (5.17).
    const MPTCP_SUBFLOW_ADDRS: libc::c_int = 3;
    /// `struct mptcp_subflow_data`: the header before the per-subflow records (16 bytes).
    const SUBFLOW_DATA: usize = 16;
    /// `struct mptcp_subflow_addrs`: two `__kernel_sockaddr_storage` (local, remote).
    const SUBFLOW_ADDRS: usize = 256;
    /// Most subflows read (the kernel's own limit is 8 per connection).
    const MAX_SUBFLOWS: usize = 16;

    #[repr(C, align(8))]
    struct RawAddrs([u8; SUBFLOW_DATA + SUBFLOW_ADDRS * MAX_SUBFLOWS]);

    pub(super) fn subflow_peers(fd: RawFd) -> io::Result<Vec<std::net::IpAddr>> {
        let mut raw = RawAddrs([0; SUBFLOW_DATA + SUBFLOW_ADDRS * MAX_SUBFLOWS]);
        // The header tells the kernel the sizes this program knows.
        raw.0[0..4].copy_from_slice(&(SUBFLOW_DATA as u32).to_ne_bytes());
        raw.0[12..16].copy_from_slice(&(SUBFLOW_ADDRS as u32).to_ne_bytes());
        match getsockopt_into(fd, SOL_MPTCP, MPTCP_SUBFLOW_ADDRS, &mut raw.0) {
            Ok(n) => Ok(parse_subflow_addrs(raw.0.get(..n).unwrap_or_default())),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOPROTOOPT) | Some(libc::EOPNOTSUPP)
                ) =>
            {
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// The remote addresses in the bytes MPTCP_SUBFLOW_ADDRS returned: the header says how
    /// many records follow and how large the kernel's are.
    pub(super) fn parse_subflow_addrs(b: &[u8]) -> Vec<std::net::IpAddr> {
        let word = |at: usize| {
            b.get(at..at + 4)
                .and_then(|s| <[u8; 4]>::try_from(s).ok())
                .map_or(0, u32::from_ne_bytes) as usize
        };
        let (header, count, kernel, user) = (word(0), word(4), word(8), word(12));
        let step = kernel.min(user).min(SUBFLOW_ADDRS);
        if step < SUBFLOW_ADDRS || header < SUBFLOW_DATA {
            return Vec::new();
        }
        (0..count.min(MAX_SUBFLOWS))
            .filter_map(|k| {
                let rec = b.get(header + k * user..header + k * user + step)?;
                sockaddr_ip(rec.get(SUBFLOW_ADDRS / 2..)?)
            })
            .collect()
    }

    /// The IP address of a `sockaddr_in` or `sockaddr_in6` in `b`.
    fn sockaddr_ip(b: &[u8]) -> Option<std::net::IpAddr> {
        let family = u16::from_ne_bytes(*b.first_chunk::<2>()?);
        match i32::from(family) {
            libc::AF_INET => {
                let a: [u8; 4] = b.get(4..8)?.try_into().ok()?;
                Some(std::net::IpAddr::from(a))
            }
            libc::AF_INET6 => {
                let a: [u8; 16] = b.get(8..24)?.try_into().ok()?;
                let v6 = std::net::Ipv6Addr::from(a);
                Some(v6.to_ipv4_mapped().map_or(v6.into(), Into::into))
            }
            _ => None,
        }
    }

    /// Reads the fields hakaru reports from the bytes of a `struct mptcp_info`.
    pub(super) fn from_info(b: &[u8], is_mptcp: bool) -> MptcpState {
        let flags = b
            .get(8..12)
            .and_then(|s| <[u8; 4]>::try_from(s).ok())
            .map_or(0, u32::from_ne_bytes);
        let active = is_mptcp && flags & MPTCP_INFO_FLAG_FALLBACK == 0;
        // mptcpi_subflows counts the subflows added to the first; the total (6.10) counts all.
        let added = b.first().copied().map_or(0, u32::from);
        let subflows = match b.get(SUBFLOWS_TOTAL_AT) {
            Some(&total) if total > 0 => u32::from(total),
            _ => added + 1,
        };
        MptcpState {
            active,
            subflows: if active { subflows } else { 1 },
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn subflow_addresses_are_read_from_the_kernels_records() {
        let mut b = vec![0u8; 16 + 2 * 256];
        b[0..4].copy_from_slice(&16u32.to_ne_bytes());
        b[4..8].copy_from_slice(&2u32.to_ne_bytes());
        b[8..12].copy_from_slice(&256u32.to_ne_bytes());
        b[12..16].copy_from_slice(&256u32.to_ne_bytes());
        // Subflow 1: remote 10.0.0.9 (sockaddr_in in the second half of the record).
        let r = 16 + 128;
        b[r..r + 2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        b[r + 4..r + 8].copy_from_slice(&[10, 0, 0, 9]);
        // Subflow 2: remote ::ffff:10.0.0.7 (sockaddr_in6), read as IPv4.
        let r = 16 + 256 + 128;
        b[r..r + 2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        b[r + 8 + 10..r + 8 + 12].copy_from_slice(&[0xff, 0xff]);
        b[r + 8 + 12..r + 8 + 16].copy_from_slice(&[10, 0, 0, 7]);
        let got = linux::parse_subflow_addrs(&b);
        assert_eq!(
            got,
            vec![
                "10.0.0.9".parse::<std::net::IpAddr>().unwrap(),
                "10.0.0.7".parse().unwrap()
            ]
        );
        // A count beyond the bytes, a short record size, nothing at all: no address, no panic.
        b[4..8].copy_from_slice(&9u32.to_ne_bytes());
        assert_eq!(linux::parse_subflow_addrs(&b).len(), 2);
        b[8..12].copy_from_slice(&100u32.to_ne_bytes());
        assert!(linux::parse_subflow_addrs(&b).is_empty());
        assert!(linux::parse_subflow_addrs(&[]).is_empty());
    }

    #[test]
    fn info_bytes_are_read_for_old_and_new_kernels() {
        let mut b = [0u8; 96];
        b[0] = 1; // one subflow added to the first
        b[80] = 2;
        assert_eq!(
            linux::from_info(&b, true),
            MptcpState {
                active: true,
                subflows: 2
            }
        );
        // A kernel before 6.10 fills 44 bytes: no total, the added ones plus the first.
        assert_eq!(linux::from_info(&b[..44], true).subflows, 2);
        // A fallback flag, or TCP_IS_MPTCP 0: TCP over one subflow.
        b[8..12].copy_from_slice(&1u32.to_ne_bytes());
        assert_eq!(
            linux::from_info(&b, true),
            MptcpState {
                active: false,
                subflows: 1
            }
        );
        assert!(!linux::from_info(&[], false).active);
    }

    #[test]
    fn a_plain_tcp_socket_has_no_mptcp_state() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        assert_eq!(mptcp_state(c.as_raw_fd()).expect("state"), None);
    }

    #[test]
    fn an_mptcp_connection_says_so_where_the_kernel_has_it() {
        let Ok(l) = mptcp_socket(Domain::IPV4) else {
            // The error names the reason; nothing more to check on such a kernel.
            assert!(mptcp_available().is_err());
            return;
        };
        l.bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .expect("addr")
                .into(),
        )
        .expect("bind");
        l.listen(4).expect("listen");
        let to = l.local_addr().expect("addr");
        let c = mptcp_socket(Domain::IPV4).expect("client socket");
        c.connect(&to).expect("connect");
        let (a, _) = l.accept().expect("accept");
        for fd in [c.as_raw_fd(), a.as_raw_fd()] {
            let s = mptcp_state(fd).expect("state").expect("an MPTCP socket");
            assert!(s.active, "{s:?}");
            assert!(s.subflows >= 1, "{s:?}");
        }
    }
}
