//! Linux backend of the OS layer ([`crate`]): TCP_INFO, /proc and /sys counters, affinity, sendfile and
//! MSG_TRUNC discard.

use std::fs;
use std::io::{self, Read, Write};
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hakaru_model::{Environment, TcpInfo};

#[cfg(test)]
use super::ifaddrs::if_addrs;
pub use super::ifaddrs::interface_for_addr;

use super::counters::{
    parse_proc_net_dev, parse_proc_net_dev_all, parse_proc_stat, CpuSnapshot, NicSnapshot,
};

/// Mirror of the kernel's `struct tcp_info` (include/uapi/linux/tcp.h) up to
/// `tcpi_total_rto_time` (Linux 6.7). Older kernels fill a prefix; newer ones truncate to this
/// size, which the ABI allows because fields are only ever appended.
#[repr(C)]
#[derive(Default)]
// Most fields are here only to place the ones we read at the kernel's offsets.
#[allow(dead_code)]
struct RawTcpInfo {
    tcpi_state: u8,
    tcpi_ca_state: u8,
    tcpi_retransmits: u8,
    tcpi_probes: u8,
    tcpi_backoff: u8,
    tcpi_options: u8,
    /// Bitfields snd_wscale:4, rcv_wscale:4.
    tcpi_wscale: u8,
    /// Bitfields delivery_rate_app_limited:1, fastopen_client_fail:2.
    tcpi_app_limited_fastopen: u8,

    tcpi_rto: u32,
    tcpi_ato: u32,
    tcpi_snd_mss: u32,
    tcpi_rcv_mss: u32,

    tcpi_unacked: u32,
    tcpi_sacked: u32,
    tcpi_lost: u32,
    tcpi_retrans: u32,
    tcpi_fackets: u32,

    tcpi_last_data_sent: u32,
    tcpi_last_ack_sent: u32,
    tcpi_last_data_recv: u32,
    tcpi_last_ack_recv: u32,

    tcpi_pmtu: u32,
    tcpi_rcv_ssthresh: u32,
    tcpi_rtt: u32,
    tcpi_rttvar: u32,
    tcpi_snd_ssthresh: u32,
    tcpi_snd_cwnd: u32,
    tcpi_advmss: u32,
    tcpi_reordering: u32,

    tcpi_rcv_rtt: u32,
    tcpi_rcv_space: u32,

    tcpi_total_retrans: u32,

    tcpi_pacing_rate: u64,
    tcpi_max_pacing_rate: u64,
    tcpi_bytes_acked: u64,
    tcpi_bytes_received: u64,
    tcpi_segs_out: u32,
    tcpi_segs_in: u32,

    tcpi_notsent_bytes: u32,
    tcpi_min_rtt: u32,
    tcpi_data_segs_in: u32,
    tcpi_data_segs_out: u32,

    tcpi_delivery_rate: u64,

    tcpi_busy_time: u64,
    tcpi_rwnd_limited: u64,
    tcpi_sndbuf_limited: u64,

    tcpi_delivered: u32,
    tcpi_delivered_ce: u32,

    tcpi_bytes_sent: u64,
    tcpi_bytes_retrans: u64,
    tcpi_dsack_dups: u32,
    tcpi_reord_seen: u32,

    tcpi_rcv_ooopack: u32,

    tcpi_snd_wnd: u32,
    tcpi_rcv_wnd: u32,

    tcpi_rehash: u32,

    tcpi_total_rto: u16,
    tcpi_total_rto_recoveries: u16,
    tcpi_total_rto_time: u32,
}

// The layout must match the kernel's byte for byte; these offsets are the uapi header's.
const _: () = {
    assert!(mem::offset_of!(RawTcpInfo, tcpi_rto) == 8);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_total_retrans) == 100);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_pacing_rate) == 104);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_segs_out) == 136);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_delivery_rate) == 160);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_delivered) == 192);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_bytes_sent) == 200);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_reord_seen) == 220);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_rcv_wnd) == 232);
    assert!(mem::offset_of!(RawTcpInfo, tcpi_total_rto_time) == 244);
    assert!(mem::size_of::<RawTcpInfo>() == 248);
};

/// TCP_CA_NAME_MAX in the kernel, NUL included.
const CA_NAME_MAX: usize = 16;

/// Reads TCP_INFO (and TCP_CONGESTION into `congestion`) of a connected TCP socket.
pub fn tcp_info(fd: RawFd) -> io::Result<TcpInfo> {
    let raw = raw_tcp_info(fd)?;
    tcp_info_from(fd, &raw)
}

/// The receive window the peer last advertised (tcpi_snd_wnd, Linux 6.2; 0 before).
pub fn tcp_peer_window(fd: RawFd) -> io::Result<u64> {
    Ok(u64::from(raw_tcp_info(fd)?.tcpi_snd_wnd))
}

/// Marks of loss over the connection's life, both directions: the segments this end received
/// out of order (tcpi_rcv_ooopack, Linux 5.4) plus those it retransmitted
/// (tcpi_total_retrans). The count grows while a hole holds bytes back on their way in (they
/// wait for the peer's retransmission, or a reordered segment) or out (the peer holds what
/// follows this end's lost segment).
pub fn tcp_loss_marks(fd: RawFd) -> io::Result<u64> {
    let raw = raw_tcp_info(fd)?;
    Ok(u64::from(raw.tcpi_rcv_ooopack) + u64::from(raw.tcpi_total_retrans))
}

/// Segments this end has received out of order over the connection's life
/// (tcpi_rcv_ooopack): more than zero once a hole has held bytes back on their way in. `None`
/// when the kernel does not count them (before Linux 5.4) or the call fails.
pub fn tcp_out_of_order(fd: RawFd) -> Option<u64> {
    let (raw, len) = raw_tcp_info_len(fd).ok()?;
    let need = mem::offset_of!(RawTcpInfo, tcpi_rcv_ooopack) + mem::size_of::<u32>();
    (len >= need).then(|| u64::from(raw.tcpi_rcv_ooopack))
}

fn raw_tcp_info(fd: RawFd) -> io::Result<RawTcpInfo> {
    raw_tcp_info_len(fd).map(|(raw, _)| raw)
}

/// TCP_INFO and how many bytes of it the kernel wrote (an older kernel writes a prefix).
fn raw_tcp_info_len(fd: RawFd) -> io::Result<(RawTcpInfo, usize)> {
    let mut raw = RawTcpInfo::default();
    let mut len = mem::size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: the buffer is a live, writable RawTcpInfo and `len` is its size; the kernel
    // writes at most `len` bytes and reports how many.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut raw as *mut RawTcpInfo).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((raw, len as usize))
}

fn tcp_info_from(fd: RawFd, raw: &RawTcpInfo) -> io::Result<TcpInfo> {
    // An older kernel writes only the prefix it knows; the zero-initialised tail then reads as
    // zero, which is what TcpInfo reports for a field the kernel does not have.
    // ~0 means "not paced", not a rate.
    let pacing = (raw.tcpi_pacing_rate != u64::MAX).then_some(raw.tcpi_pacing_rate as f64 * 8.0);
    Ok(TcpInfo {
        congestion: tcp_congestion(fd),
        retransmits: Some(u64::from(raw.tcpi_total_retrans)),
        lost: Some(raw.tcpi_lost),
        reord_seen: Some(raw.tcpi_reord_seen),
        rtt_us: raw.tcpi_rtt,
        rttvar_us: Some(raw.tcpi_rttvar),
        min_rtt_us: Some(raw.tcpi_min_rtt),
        snd_cwnd: raw.tcpi_snd_cwnd,
        snd_mss: raw.tcpi_snd_mss,
        pmtu: Some(raw.tcpi_pmtu),
        pacing_rate_bps: pacing,
        delivery_rate_bps: Some(raw.tcpi_delivery_rate as f64 * 8.0),
        busy_time_us: Some(raw.tcpi_busy_time),
        rwnd_limited_us: Some(raw.tcpi_rwnd_limited),
        sndbuf_limited_us: Some(raw.tcpi_sndbuf_limited),
        bytes_acked: raw.tcpi_bytes_acked,
        bytes_retrans: raw.tcpi_bytes_retrans,
    })
}

/// Congestion control name of a TCP socket; `None` when the kernel will not say.
fn tcp_congestion(fd: RawFd) -> Option<String> {
    let mut buf = [0u8; CA_NAME_MAX];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let got = &buf[..(len as usize).min(buf.len())];
    let name = got.split(|&b| b == 0).next().unwrap_or(&[]);
    let name = std::str::from_utf8(name).ok()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// Snapshot of the machine-wide CPU counters from `/proc/stat`.
pub fn cpu_snapshot() -> Option<CpuSnapshot> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    let snap = parse_proc_stat(&text)?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(snap.with_ticks_per_sec(u64::try_from(hz).unwrap_or(0)))
}

/// True for an interface with no device behind it (lo, veth, bridge, tun, ...; the kernel
/// lists those under /sys/devices/virtual/net). Such an interface can count a GSO or GRO
/// buffer as one packet, where a real NIC counts the packets on the wire.
pub fn is_virtual_interface(iface: &str) -> bool {
    !iface.contains('/')
        && std::path::Path::new("/sys/devices/virtual/net")
            .join(iface)
            .exists()
}

/// This process's CPU time, resident memory and open descriptors, from /proc/self.
pub fn process_usage() -> Option<super::ProcessUsage> {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let status = fs::read_to_string("/proc/self/status").ok()?;
    Some(super::ProcessUsage {
        cpu_seconds: super::parse_proc_self_stat(&stat, u64::try_from(hz).unwrap_or(0))?,
        rss_bytes: super::parse_vm_rss(&status)?,
        open_fds: fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64),
    })
}

/// Counters of `iface` from `/proc/net/dev`.
pub fn nic_snapshot(iface: &str) -> Option<NicSnapshot> {
    let text = fs::read_to_string("/proc/net/dev").ok()?;
    parse_proc_net_dev(&text, iface)
}

/// Counters of every interface from `/proc/net/dev`, in its order; empty if unreadable.
pub fn nic_snapshot_all() -> Vec<NicSnapshot> {
    fs::read_to_string("/proc/net/dev")
        .map(|text| parse_proc_net_dev_all(&text))
        .unwrap_or_default()
}

/// Whether `name` can be an interface name, so it is safe to splice into a /sys path.
fn plausible_iface(name: &str) -> bool {
    // IFNAMSIZ is 16 with the NUL; the kernel refuses '/', ':' and whitespace in names.
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
}

/// A /proc or /sys file's content, trimmed; `None` if unreadable or empty.
fn read_trimmed(path: &str) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// A whitespace-separated sysctl value with its separators normalised to single spaces.
fn read_words(path: &str) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!joined.is_empty()).then_some(joined)
}

/// A C `char` array from a fixed-size struct, up to its first NUL.
fn c_chars(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Kind of the root qdisc in `tc qdisc show` output ("qdisc noqueue 0: root refcnt 2").
fn parse_tc_root_qdisc(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next() != Some("qdisc") {
            return None;
        }
        let kind = words.next()?;
        words.any(|w| w == "root").then(|| kind.to_string())
    })
}

/// How long `tc` may take before we give up on it; it answers in milliseconds when healthy.
const TC_TIMEOUT: Duration = Duration::from_secs(2);

/// Root qdisc of `iface`, asking `tc`; `None` if tc is missing, fails or is slow.
fn root_qdisc(iface: &str) -> Option<String> {
    // sbin is often not on an unprivileged user's PATH, but tc runs fine unprivileged.
    for prog in ["tc", "/usr/sbin/tc", "/sbin/tc"] {
        let spawned = Command::new(prog)
            .args(["qdisc", "show", "dev", iface])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        match spawned {
            Ok(child) => return parse_tc_root_qdisc(&wait_bounded(child, TC_TIMEOUT)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                tracing::debug!("cannot run {prog}: {e}");
                return None;
            }
        }
    }
    None
}

/// Stdout of a child that exits successfully within `limit`; otherwise kills it and gives up.
fn wait_bounded(mut child: Child, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if !status.success() {
                    return None;
                }
                // The output of one `tc qdisc show dev` fits in the pipe, so the child never
                // blocked on writing it before we read.
                let mut out = String::new();
                child.stdout.take()?.read_to_string(&mut out).ok()?;
                return Some(out);
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                tracing::debug!("tc did not answer within {limit:?}; killed it");
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Facts about this machine and, if given, the interface the test uses.
pub fn environment(iface: Option<&str>) -> Environment {
    // SAFETY: utsname is plain old data; uname fills it or fails leaving it zeroed.
    let mut uts: libc::utsname = unsafe { mem::zeroed() };
    // SAFETY: `uts` is a writable utsname.
    let uname_ok = unsafe { libc::uname(&mut uts) } == 0;
    let (hostname, kernel) = if uname_ok {
        (c_chars(&uts.nodename), c_chars(&uts.release))
    } else {
        (String::new(), String::new())
    };
    let iface = iface.filter(|name| plausible_iface(name));
    Environment {
        software: String::new(),
        hostname,
        os: std::env::consts::OS.to_string(),
        kernel,
        cpus: u32::try_from(online_cpus()).unwrap_or(u32::MAX),
        default_congestion: read_trimmed("/proc/sys/net/ipv4/tcp_congestion_control"),
        interface: iface.map(str::to_string),
        qdisc: iface.and_then(root_qdisc),
        mtu: iface.and_then(|i| {
            read_trimmed(&format!("/sys/class/net/{i}/mtu"))?
                .parse()
                .ok()
        }),
        rmem_max: read_trimmed("/proc/sys/net/core/rmem_max").and_then(|s| s.parse().ok()),
        wmem_max: read_trimmed("/proc/sys/net/core/wmem_max").and_then(|s| s.parse().ok()),
        tcp_rmem: read_words("/proc/sys/net/ipv4/tcp_rmem"),
        tcp_wmem: read_words("/proc/sys/net/ipv4/tcp_wmem"),
    }
}

/// Congestion control algorithms the kernel offers (empty if unknown).
pub fn available_congestion() -> Vec<String> {
    fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|t| t.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Sets SO_BUSY_POLL: the socket busy-polls the device queue for up to `usecs` microseconds
/// on a blocking receive (needs CAP_NET_ADMIN to raise it above net.core.busy_read).
pub fn set_busy_poll(fd: RawFd, usecs: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(usecs).unwrap_or(libc::c_int::MAX);
    // SAFETY: v is a valid c_int that outlives the call; the fd is borrowed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets SO_MAX_PACING_RATE: the kernel paces the socket's sends to `bytes_per_second` (TCP
/// paces internally without the fq qdisc since Linux 4.13). Rates above 4 GB/s are passed as
/// 64 bits, which kernels since 4.20 take.
pub fn set_max_pacing_rate(fd: RawFd, bytes_per_second: u64) -> io::Result<()> {
    let r = if let Ok(v) = u32::try_from(bytes_per_second) {
        // SAFETY: v is a valid u32 that outlives the call; the fd is borrowed.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_MAX_PACING_RATE,
                (&v as *const u32).cast(),
                std::mem::size_of::<u32>() as libc::socklen_t,
            )
        }
    } else {
        // SAFETY: as above, with a u64.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_MAX_PACING_RATE,
                (&bytes_per_second as *const u64).cast(),
                std::mem::size_of::<u64>() as libc::socklen_t,
            )
        }
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    let addressable = 8 * mem::size_of::<libc::cpu_set_t>();
    // CPU_SET indexes a fixed-size array; beyond it there is nothing the kernel could accept.
    if cpu >= addressable {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot pin to CPU {cpu}: expected a CPU number below {} (online CPUs: {})",
                addressable.min(online_cpus()),
                online_cpus()
            ),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `cpu` is within the set, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!(
                "cannot pin to CPU {cpu}: {e} (expected an online CPU this process may use, 0..{})",
                online_cpus()
            ),
        ));
    }
    Ok(())
}

/// Lets a socket bound to an address with port 0 take its port only at connect time
/// (IP_BIND_ADDRESS_NO_PORT), so many connections from one address share ports by 4-tuple.
pub fn bind_address_no_port(fd: RawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid c_int option value of the size passed; the fd is borrowed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Accepts a connection as a non-blocking socket in one system call (accept4 with
/// SOCK_NONBLOCK), with its peer's address.
pub fn accept_nonblocking(
    listener: &std::net::TcpListener,
) -> io::Result<(std::net::TcpStream, std::net::SocketAddr)> {
    let (s, a) =
        socket2::SockRef::from(listener).accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    let addr = a
        .as_socket()
        .ok_or_else(|| io::Error::other("accepted a connection with no IP address"))?;
    Ok((s.into(), addr))
}

/// Makes a listening socket report a connection only once its first data has arrived
/// (TCP_DEFER_ACCEPT, waiting at most `secs` seconds for it).
pub fn tcp_defer_accept(fd: RawFd, secs: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    // SAFETY: a valid c_int option value of the size passed; the fd is borrowed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&v as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The range of local ports the kernel picks from for outgoing connections
/// (net.ipv4.ip_local_port_range).
pub fn local_port_range() -> Option<(u16, u16)> {
    let text = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|w| w.parse::<u16>().ok());
    match (it.next()??, it.next()??) {
        (lo, hi) if lo <= hi => Some((lo, hi)),
        _ => None,
    }
}

/// Number of online CPUs (at least 1).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    match usize::try_from(n) {
        Ok(n) if n > 0 => n,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Byte `i` of the content of every [`ZeroCopySource`]: never zero, so a receiver that
/// checks it can tell payload from a zero-filled page.
fn pattern_byte(i: usize) -> u8 {
    (i % PATTERN_PERIOD) as u8 + 1
}

/// Period of the source pattern: prime, so it does not line up with page or segment sizes.
const PATTERN_PERIOD: usize = 251;

/// In-memory file of `len` bytes of a non-zero pattern, the source of sendfile (-Z).
///
/// The descriptor is closed on drop.
#[derive(Debug)]
pub struct ZeroCopySource {
    fd: OwnedFd,
    len: usize,
}

impl ZeroCopySource {
    /// Creates the in-memory file (memfd) and fills it.
    pub fn new(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "zero-copy source of 0 bytes: expected a length of at least 1 byte",
            ));
        }
        // SAFETY: the name is a NUL-terminated literal.
        let raw = unsafe { libc::memfd_create(c"hakaru-zerocopy".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create the in-memory file for -Z (memfd_create): {e}"),
            ));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let mut file = fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        // A whole number of pattern periods, so every chunk continues the pattern.
        let chunk: Vec<u8> = (0..len.min(PATTERN_PERIOD * 261))
            .map(pattern_byte)
            .collect();
        let mut written = 0;
        while written < len {
            let n = (len - written).min(chunk.len());
            file.write_all(&chunk[..n]).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot fill the {len}-byte in-memory file for -Z: {e}"),
                )
            })?;
            written += n;
        }
        Ok(ZeroCopySource {
            fd: file.into(),
            len,
        })
    }

    /// Length of the content, bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the content is empty (never, since `new` refuses 0 bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Largest count Linux's sendfile moves in one call.
const SENDFILE_MAX: usize = 0x7fff_f000;

/// Sends up to `count` bytes of `src` (from its start) on socket `sock` with sendfile.
pub fn send_zerocopy(sock: RawFd, src: &ZeroCopySource, count: usize) -> io::Result<usize> {
    let count = count.min(src.len).min(SENDFILE_MAX);
    loop {
        // An explicit offset leaves the file position alone, so threads can share one source.
        let mut offset: libc::off_t = 0;
        // SAFETY: `offset` is a valid off_t; the descriptors are plain integers to the kernel.
        let n = unsafe { libc::sendfile(sock, src.fd.as_raw_fd(), &mut offset, count) };
        if let Ok(n) = usize::try_from(n) {
            return Ok(n);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Discards up to `len` bytes queued on TCP socket `sock` without copying them; 0 means EOF.
pub fn recv_discard(sock: RawFd, len: usize) -> io::Result<usize> {
    discard(sock, len, libc::MSG_DONTWAIT)
}

/// Like [`recv_discard`] on a blocking socket: waits at most the socket's SO_RCVTIMEO for data
/// (a timeout reads as `WouldBlock`), one system call per wait (`super::stream_recv_wait`).
pub fn recv_discard_wait(sock: RawFd, len: usize) -> io::Result<usize> {
    discard(sock, len, 0)
}

fn discard(sock: RawFd, len: usize, flags: libc::c_int) -> io::Result<usize> {
    if len == 0 {
        // recv would return 0, which reads as EOF.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "discard of 0 bytes: expected a length of at least 1 byte",
        ));
    }
    loop {
        // SAFETY: with MSG_TRUNC, Linux TCP drops the bytes without touching the buffer; on
        // a socket type that would copy, the null buffer makes the kernel fail with EFAULT
        // instead of writing anywhere.
        let r = unsafe {
            super::linux_calls::recv(sock, std::ptr::null_mut(), len, libc::MSG_TRUNC | flags)
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Whether [`recv_discard`] really discards: true, Linux TCP honours MSG_TRUNC.
pub const DISCARD_SUPPORTED: bool = true;

/// Bytes a TCP socket has not yet had acknowledged (sent or not): SIOCOUTQ.
pub fn tcp_send_queue(fd: RawFd) -> io::Result<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int through the pointer; the fd is a socket the
    // caller owns.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::thread;

    /// A connected loopback pair (client, server side), with generous timeouts so a broken
    /// test fails instead of hanging.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        for s in [&client, &server] {
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            s.set_write_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
        }
        (client, server)
    }

    #[test]
    fn tcp_info_of_a_loopback_connection() {
        let (mut client, mut server) = pair();
        client.write_all(&[7u8; 10_000]).expect("write");
        let mut got = vec![0u8; 10_000];
        server.read_exact(&mut got).expect("read");
        let info = tcp_info(client.as_raw_fd()).expect("tcp_info");
        assert!(info.snd_mss > 0, "{info:?}");
        assert!(info.pmtu.is_some_and(|m| m > 0), "{info:?}");
        assert!(info.snd_cwnd > 0, "{info:?}");
        // Linux gives every figure; an unpaced socket has no pacing rate.
        assert!(
            info.retransmits.is_some() && info.busy_time_us.is_some(),
            "{info:?}"
        );
        let cc = info.congestion.expect("congestion");
        assert!(!cc.is_empty() && cc.is_ascii(), "{cc:?}");
        assert!(info.pacing_rate_bps.is_none_or(f64::is_finite));
    }

    #[test]
    fn a_loopback_connection_has_no_marks_of_loss() {
        let (mut client, mut server) = pair();
        client.write_all(&[7u8; 100_000]).expect("write");
        let mut got = vec![0u8; 100_000];
        server.read_exact(&mut got).expect("read");
        // Loopback neither loses nor reorders; the count is the kernel's, and a socket that
        // is not TCP has none.
        assert_eq!(tcp_loss_marks(server.as_raw_fd()).expect("count"), 0);
        assert_eq!(tcp_loss_marks(client.as_raw_fd()).expect("count"), 0);
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
        assert!(tcp_loss_marks(udp.as_raw_fd()).is_err());
    }

    #[test]
    fn tcp_info_errors_on_non_tcp() {
        assert!(tcp_info(-1).is_err());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
        assert!(tcp_info(udp.as_raw_fd()).is_err());
    }

    #[test]
    fn loopback_addresses_map_to_lo() {
        let lo = Some("lo".to_string());
        assert_eq!(interface_for_addr("127.0.0.1".parse().unwrap()), lo);
        assert_eq!(interface_for_addr("127.3.2.1".parse().unwrap()), lo);
        assert_eq!(interface_for_addr("::1".parse().unwrap()), lo);
        assert_eq!(interface_for_addr("::ffff:127.0.0.1".parse().unwrap()), lo);
        assert_eq!(interface_for_addr("0.0.0.0".parse().unwrap()), None);
        // TEST-NET-3 is never assigned to a real interface.
        assert_eq!(interface_for_addr("203.0.113.254".parse().unwrap()), None);
    }

    #[test]
    fn every_listed_address_maps_back_to_its_interface() {
        let list = if_addrs().expect("getifaddrs");
        for a in list {
            if let Some(ip) = a.addr.filter(|ip| !ip.is_loopback()) {
                let found = interface_for_addr(ip).expect("found");
                // Two interfaces may share an address; ours must at least have it.
                let owners: Vec<String> = if_addrs()
                    .expect("getifaddrs")
                    .into_iter()
                    .filter(|b| b.addr == Some(ip))
                    .map(|b| b.name)
                    .collect();
                assert!(
                    owners.contains(&found),
                    "{ip} -> {found}, owners {owners:?}"
                );
            }
        }
    }

    #[test]
    fn live_counters_are_readable() {
        let a = cpu_snapshot().expect("cpu snapshot");
        let b = cpu_snapshot().expect("cpu snapshot");
        let u = super::super::counters::cpu_usage(&a, &b, 0.001);
        assert!(u.cpus >= 1);
        assert!((0.0..=100.0).contains(&u.busy_pct), "{u:?}");
        assert!(nic_snapshot("lo").is_some());
        assert!(nic_snapshot("no-such-if0").is_none());
        let all = nic_snapshot_all();
        assert!(all.iter().any(|n| n.interface == "lo"), "{all:?}");
        assert!(all.iter().all(|n| !n.interface.is_empty()), "{all:?}");
        assert!(online_cpus() >= 1);
    }

    #[test]
    fn environment_of_loopback() {
        let env = environment(Some("lo"));
        assert!(!env.kernel.is_empty());
        assert_eq!(env.os, "linux");
        assert!(env.cpus >= 1);
        assert_eq!(env.interface.as_deref(), Some("lo"));
        assert!(env.mtu.is_some_and(|m| m > 0), "{env:?}");
        assert!(env.software.is_empty());
        if let Some(rmem) = &env.tcp_rmem {
            assert_eq!(rmem.split(' ').count(), 3, "{rmem:?}");
        }
        let none = environment(None);
        assert_eq!((none.interface, none.qdisc, none.mtu), (None, None, None));
        let bad = environment(Some("../../etc"));
        assert_eq!((bad.interface, bad.mtu), (None, None));
    }

    #[test]
    fn tc_output_parsing() {
        assert_eq!(
            parse_tc_root_qdisc("qdisc noqueue 0: root refcnt 2 \n").as_deref(),
            Some("noqueue")
        );
        let mq = "qdisc mq 0: root \n\
                  qdisc pfifo_fast 0: parent :2 bands 3 priomap 1 2 2 2\n\
                  qdisc pfifo_fast 0: parent :1 bands 3 priomap 1 2 2 2\n";
        assert_eq!(parse_tc_root_qdisc(mq).as_deref(), Some("mq"));
        let tbf = "qdisc ingress ffff: parent ffff:fff1 ----------------\n\
                   qdisc tbf 8001: root refcnt 2 rate 200Mbit burst 64Kb lat 50ms\n";
        assert_eq!(parse_tc_root_qdisc(tbf).as_deref(), Some("tbf"));
        assert_eq!(parse_tc_root_qdisc(""), None);
        assert_eq!(parse_tc_root_qdisc("qdisc"), None);
        assert_eq!(parse_tc_root_qdisc("root qdisc x"), None);
    }

    #[test]
    fn interface_names_are_checked_before_use_in_paths() {
        assert!(plausible_iface("eth0"));
        assert!(plausible_iface("enp0s31f6"));
        for bad in ["", ".", "..", "a/b", "eth0:1", "a b", "abcdefghijklmnop"] {
            assert!(!plausible_iface(bad), "{bad:?}");
        }
    }

    #[test]
    fn available_congestion_lists_the_sockets_default() {
        let list = available_congestion();
        let (client, _server) = pair();
        let cc = tcp_info(client.as_raw_fd()).expect("tcp_info").congestion;
        if !list.is_empty() {
            assert!(list.contains(&cc.expect("congestion")), "{list:?}");
        }
    }

    #[test]
    fn pinning() {
        // Pin a scratch thread so the test harness's threads keep their affinity.
        thread::spawn(|| {
            pin_current_thread(0).expect("CPU 0");
            assert!(pin_current_thread(100_000).is_err());
            assert!(pin_current_thread(1023).is_err() || online_cpus() > 1023);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn zero_copy_source_content_reaches_the_peer() {
        let src = ZeroCopySource::new(100_000).expect("memfd");
        assert_eq!(src.len(), 100_000);
        assert!(!src.is_empty());
        assert!(ZeroCopySource::new(0).is_err());

        let (client, mut server) = pair();
        let reader = thread::spawn(move || {
            let mut got = Vec::new();
            server.read_to_end(&mut got).expect("read");
            got
        });
        let mut expected = Vec::new();
        for count in [1, 1000, 70_000, 100_000, 250_000] {
            let n = send_zerocopy(client.as_raw_fd(), &src, count).expect("sendfile");
            assert!(n > 0 && n <= count.min(src.len()), "{count} -> {n}");
            expected.extend((0..n).map(pattern_byte));
        }
        drop(client);
        let got = reader.join().expect("reader");
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "payload differs from the source pattern");
        assert!(got.iter().all(|&b| b != 0));
    }

    #[test]
    fn zero_copy_source_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ZeroCopySource>();
    }

    #[test]
    fn memfd_content_is_the_pattern_across_chunks() {
        let len = (1 << 16) * 2 + 123;
        let src = ZeroCopySource::new(len).expect("memfd");
        let file = fs::File::from(src.fd.try_clone().expect("dup"));
        let mut got = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut got, 0).expect("read");
        assert!(got.iter().enumerate().all(|(i, &b)| b == pattern_byte(i)));
    }

    #[test]
    fn discard_counts_bytes_and_sees_eof() {
        let (mut client, server) = pair();
        client.write_all(&[9u8; 5000]).expect("write");
        client.shutdown(Shutdown::Write).expect("shutdown");
        let fd = server.as_raw_fd();
        assert!(recv_discard(fd, 0).is_err());

        let deadline = Instant::now() + Duration::from_secs(10);
        let mut total = 0;
        let mut first = true;
        loop {
            assert!(Instant::now() < deadline, "no EOF after {total} bytes");
            let len = if first { 100 } else { 1 << 20 };
            match recv_discard(fd, len) {
                Ok(0) => break,
                Ok(n) => {
                    assert!(n <= len);
                    first = false;
                    total += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("recv_discard: {e}"),
            }
        }
        assert_eq!(total, 5000);
        // EOF stays EOF.
        assert_eq!(recv_discard(fd, 10).expect("eof"), 0);
    }

    #[test]
    fn a_waiting_discard_waits_for_data_and_reads_its_timeout_as_would_block() {
        let (mut client, server) = pair();
        server.set_nonblocking(false).expect("blocking");
        server
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let fd = server.as_raw_fd();
        let t0 = Instant::now();
        let e = recv_discard_wait(fd, 10).expect_err("nothing queued");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        // It waited in the call (the timeout), where recv_discard returns at once.
        assert!(
            t0.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t0.elapsed()
        );
        let writer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            client.write_all(&[7u8; 3000]).expect("write");
            client
        });
        server
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        // Data that comes while it waits ends the wait; each call takes at most `len`.
        let n = recv_discard_wait(fd, 1 << 20).expect("data");
        assert!(n > 0 && n <= 3000, "{n}");
        let mut total = n;
        while total < 3000 {
            total += recv_discard_wait(fd, 100).expect("the rest");
        }
        assert_eq!(total, 3000);
        drop(writer.join().expect("writer"));
        assert_eq!(recv_discard_wait(fd, 10).expect("eof"), 0);
    }

    #[test]
    fn discard_would_block_on_an_idle_socket() {
        let (_client, server) = pair();
        let e = recv_discard(server.as_raw_fd(), 10).expect_err("nothing queued");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }
}
