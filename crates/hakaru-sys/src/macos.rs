//! The macOS backend, for what macOS measures natively: machine CPU time (host_statistics),
//! interface counters (the 64-bit `if_data64` of sysctl NET_RT_IFLIST2), this process's CPU,
//! memory and open descriptors, and TCP_CONNECTION_INFO. Everything else comes from
//! `fallback.rs` and is absent where macOS has no counterpart (docs/platforms.md).
//!
//! This file compiles and lints for both Apple targets in CI; no Mac runs it there.

use std::ffi::CStr;
use std::io;
use std::mem;

use hakaru_model::TcpInfo;

use super::counters::{CpuSnapshot, NicSnapshot, ProcessUsage};
use super::RawFd;

/// Machine-wide CPU ticks from host_statistics(HOST_CPU_LOAD_INFO): user, nice, system, idle.
/// macOS does not split out interrupts or steal, so those parts are absent. The counters are
/// 32-bit ticks of `_SC_CLK_TCK` summed over the CPUs.
pub fn cpu_snapshot() -> Option<CpuSnapshot> {
    let mut info = libc::host_cpu_load_info {
        cpu_ticks: [0; libc::CPU_STATE_MAX as usize],
    };
    let mut count = libc::HOST_CPU_LOAD_INFO_COUNT as libc::mach_msg_type_number_t;
    // SAFETY: `info` is a host_cpu_load_info and `count` says how many integers it holds.
    #[allow(deprecated)]
    let rc = unsafe {
        libc::host_statistics(
            libc::mach_host_self(),
            libc::HOST_CPU_LOAD_INFO,
            (&mut info as *mut libc::host_cpu_load_info).cast(),
            &mut count,
        )
    };
    if rc != libc::KERN_SUCCESS {
        return None;
    }
    let t = |state: libc::c_int| u64::from(info.cpu_ticks[state as usize]);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let cpus = u32::try_from(super::online_cpus()).unwrap_or(u32::MAX);
    Some(CpuSnapshot::from_times(
        t(libc::CPU_STATE_USER) + t(libc::CPU_STATE_NICE),
        t(libc::CPU_STATE_SYSTEM),
        t(libc::CPU_STATE_IDLE),
        u64::try_from(hz).unwrap_or(100),
        cpus,
    ))
}

/// The counters of every interface, in the kernel's order, from the RTM_IFINFO2 messages of
/// sysctl NET_RT_IFLIST2 (64-bit counters; getifaddrs' `if_data` wraps at 4 GiB).
pub fn nic_snapshot_all() -> Vec<NicSnapshot> {
    let mut mib = [libc::CTL_NET, libc::PF_ROUTE, 0, 0, libc::NET_RT_IFLIST2, 0];
    let mut len: libc::size_t = 0;
    // SAFETY: a size query: no output buffer, `len` receives the size needed.
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            mib.len() as libc::c_uint,
            std::ptr::null_mut(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 || len == 0 {
        return Vec::new();
    }
    // Interfaces may appear between the two calls: leave room.
    len += len / 4 + 4096;
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` is writable for `len` bytes and `len` says so.
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            mib.len() as libc::c_uint,
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return Vec::new();
    }
    parse_iflist2(&buf[..len.min(buf.len())])
}

/// Walks the routing messages of NET_RT_IFLIST2 and keeps the interface records.
fn parse_iflist2(buf: &[u8]) -> Vec<NicSnapshot> {
    let mut out = Vec::new();
    let mut off = 0usize;
    let header = mem::size_of::<libc::if_msghdr2>();
    while off + 4 <= buf.len() {
        let msglen = usize::from(u16::from_ne_bytes([buf[off], buf[off + 1]]));
        if msglen == 0 || off + msglen > buf.len() {
            break;
        }
        let kind = buf[off + 3];
        if i32::from(kind) == libc::RTM_IFINFO2 && msglen >= header {
            // SAFETY: at least size_of::<if_msghdr2>() bytes are in bounds at `off`; the
            // struct is plain integers, read unaligned.
            let m: libc::if_msghdr2 =
                unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
            if let Some(name) = index_name(u32::from(m.ifm_index)) {
                let d = m.ifm_data;
                out.push(NicSnapshot {
                    interface: name,
                    rx_bytes: d.ifi_ibytes,
                    rx_packets: d.ifi_ipackets,
                    rx_errors: d.ifi_ierrors,
                    rx_drops: d.ifi_iqdrops,
                    tx_bytes: d.ifi_obytes,
                    tx_packets: d.ifi_opackets,
                    tx_errors: d.ifi_oerrors,
                    tx_drops: u64::try_from(m.ifm_snd_drops).unwrap_or(0),
                });
            }
        }
        off += msglen;
    }
    out
}

/// The name of interface `index`.
fn index_name(index: u32) -> Option<String> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `name` has IF_NAMESIZE bytes, what if_indextoname writes at most.
    let p = unsafe { libc::if_indextoname(index, name.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success the buffer holds a NUL-terminated name.
    let s = unsafe { CStr::from_ptr(name.as_ptr()) };
    Some(s.to_string_lossy().into_owned())
}

/// Counters of one interface.
pub fn nic_snapshot(iface: &str) -> Option<NicSnapshot> {
    nic_snapshot_all()
        .into_iter()
        .find(|n| n.interface == iface)
}

/// This process: CPU seconds from getrusage, resident memory from proc_pidinfo, open
/// descriptors from /dev/fd.
pub fn process_usage() -> Option<ProcessUsage> {
    // SAFETY: an all-zero rusage is valid for getrusage to fill.
    let mut ru: libc::rusage = unsafe { mem::zeroed() };
    // SAFETY: `ru` is a valid rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + f64::from(t.tv_usec) / 1e6;
    let cpu_seconds = secs(ru.ru_utime) + secs(ru.ru_stime);
    // SAFETY: an all-zero proc_taskinfo is valid for proc_pidinfo to fill.
    let mut ti: libc::proc_taskinfo = unsafe { mem::zeroed() };
    let size = mem::size_of::<libc::proc_taskinfo>() as libc::c_int;
    // SAFETY: `ti` is writable for `size` bytes; getpid has no preconditions.
    let got = unsafe {
        libc::proc_pidinfo(
            libc::getpid(),
            libc::PROC_PIDTASKINFO,
            0,
            (&mut ti as *mut libc::proc_taskinfo).cast(),
            size,
        )
    };
    let rss_bytes = if got == size { ti.pti_resident_size } else { 0 };
    // /dev/fd lists this process's descriptors, plus the one reading it.
    let open_fds = std::fs::read_dir("/dev/fd")
        .ok()
        .map(|d| (d.count() as u64).saturating_sub(1));
    Some(ProcessUsage {
        cpu_seconds,
        rss_bytes,
        open_fds,
    })
}

fn connection_info(fd: RawFd) -> io::Result<libc::tcp_connection_info> {
    // SAFETY: an all-zero tcp_connection_info is valid for getsockopt to fill.
    let mut info: libc::tcp_connection_info = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::tcp_connection_info>() as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes; a bad fd is an error return.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONNECTION_INFO,
            (&mut info as *mut libc::tcp_connection_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// TCP_CONNECTION_INFO mapped onto [`TcpInfo`]: retransmitted segments and bytes, smoothed
/// RTT and its variance (macOS keeps milliseconds), the congestion window (bytes there,
/// segments here) and the MSS. macOS gives no congestion control name per socket, no lost or
/// reordering counts, path MTU, pacing or delivery rate and no limited-time split: those are
/// absent (docs/platforms.md).
pub fn tcp_info(fd: RawFd) -> io::Result<TcpInfo> {
    Ok(map_connection_info(&connection_info(fd)?))
}

fn map_connection_info(i: &libc::tcp_connection_info) -> TcpInfo {
    let mss = i.tcpi_maxseg.max(1);
    TcpInfo {
        congestion: None,
        // The struct's last field, xnu's tcpi_txretransmitpackets (libc calls it rx...).
        retransmits: Some(i.tcpi_rxretransmitpackets),
        rtt_us: i.tcpi_srtt.saturating_mul(1000),
        rttvar_us: Some(i.tcpi_rttvar.saturating_mul(1000)),
        snd_cwnd: i.tcpi_snd_cwnd / mss,
        snd_mss: i.tcpi_maxseg,
        bytes_retrans: i.tcpi_txretransmitbytes,
        bytes_acked: i.tcpi_txbytes.saturating_sub(u64::from(i.tcpi_snd_sbbytes)),
        ..TcpInfo::default()
    }
}

/// Bytes in the send buffer not yet acknowledged (tcpi_snd_sbbytes).
pub fn tcp_send_queue(fd: RawFd) -> io::Result<u64> {
    Ok(u64::from(connection_info(fd)?.tcpi_snd_sbbytes))
}

/// The peer's advertised receive window, bytes (tcpi_snd_wnd).
pub fn tcp_peer_window(fd: RawFd) -> io::Result<u64> {
    Ok(u64::from(connection_info(fd)?.tcpi_snd_wnd))
}
