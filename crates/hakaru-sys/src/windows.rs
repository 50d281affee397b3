//! The Windows backend, for what Windows measures natively: machine CPU time
//! (GetSystemTimes), interface counters (GetIfTable2), this process's CPU, memory and handles,
//! the CPU count across processor groups, TCP state (SIO_TCP_INFO, Windows 10 1703+), exclusive
//! listening ports and a 1 ms timer for paced senders. Everything else comes from
//! `fallback.rs` (sockets through WinSock there) and is absent where Windows has no
//! counterpart.

use std::io;
use std::net::IpAddr;
use windows_sys::Win32::Foundation::{FILETIME, HANDLE};

use windows_sys::Win32::NetworkManagement::IpHelper::{
    FreeMibTable, GetIfTable2, GetUnicastIpAddressTable, MIB_IF_ROW2, MIB_IF_TABLE2,
    MIB_UNICASTIPADDRESS_ROW, MIB_UNICASTIPADDRESS_TABLE,
};
use windows_sys::Win32::Networking::WinSock::{
    setsockopt, TCP_INFO_v0, TCP_INFO_v1, WSAIoctl, AF_INET, AF_INET6, AF_UNSPEC, SIO_TCP_INFO,
    SOCKET, SOCKET_ERROR, SOL_SOCKET, SO_EXCLUSIVEADDRUSE,
};
use windows_sys::Win32::System::ProcessStatus::{K32GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS};
use windows_sys::Win32::System::Threading::{
    GetActiveProcessorCount, GetCurrentProcess, GetProcessHandleCount, GetProcessTimes,
    GetSystemTimes, ALL_PROCESSOR_GROUPS,
};

use hakaru_model::TcpInfo;

use super::counters::{CpuSnapshot, NicSnapshot, ProcessUsage};
use super::RawFd;

/// FILETIME counts 100 ns units.
const FILETIME_HZ: u64 = 10_000_000;

fn ticks(t: &FILETIME) -> u64 {
    (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)
}

fn zero() -> FILETIME {
    FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    }
}

/// CPUs in every processor group (std's count stops at the calling thread's group).
pub fn online_cpus() -> usize {
    // SAFETY: a plain query with no pointers.
    let n = unsafe { GetActiveProcessorCount(ALL_PROCESSOR_GROUPS) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Machine-wide CPU time from GetSystemTimes: user, kernel without idle, idle. Windows does
/// not split out interrupts, DPCs or steal here, so those parts are absent.
pub fn cpu_snapshot() -> Option<CpuSnapshot> {
    let (mut idle, mut kernel, mut user) = (zero(), zero(), zero());
    // SAFETY: the three pointers are valid FILETIMEs for the call to fill.
    if unsafe { GetSystemTimes(&mut idle, &mut kernel, &mut user) } == 0 {
        return None;
    }
    let idle = ticks(&idle);
    // Kernel time includes the idle time.
    let system = ticks(&kernel).saturating_sub(idle);
    let cpus = u32::try_from(online_cpus()).unwrap_or(u32::MAX);
    Some(CpuSnapshot::from_times(
        ticks(&user),
        system,
        idle,
        FILETIME_HZ,
        cpus,
    ))
}

/// This process: user + kernel CPU seconds, working set, open handles (sockets, files,
/// threads: Windows counts them together; docs/metrics.md).
pub fn process_usage() -> Option<ProcessUsage> {
    // SAFETY: the pseudo-handle of the current process needs no closing.
    let me: HANDLE = unsafe { GetCurrentProcess() };
    let (mut created, mut exited, mut kernel, mut user) = (zero(), zero(), zero(), zero());
    // SAFETY: valid pointers to FILETIMEs for the call to fill.
    if unsafe { GetProcessTimes(me, &mut created, &mut exited, &mut kernel, &mut user) } == 0 {
        return None;
    }
    let cpu_seconds = (ticks(&kernel) + ticks(&user)) as f64 / FILETIME_HZ as f64;
    // SAFETY: an all-zero PROCESS_MEMORY_COUNTERS is valid; cb tells the call its size.
    let mut mem: PROCESS_MEMORY_COUNTERS = unsafe { std::mem::zeroed() };
    mem.cb = std::mem::size_of::<PROCESS_MEMORY_COUNTERS>() as u32;
    // SAFETY: mem is a valid, writable PROCESS_MEMORY_COUNTERS of mem.cb bytes.
    let rss = if unsafe { K32GetProcessMemoryInfo(me, &mut mem, mem.cb) } != 0 {
        mem.WorkingSetSize as u64
    } else {
        0
    };
    let mut handles = 0u32;
    // SAFETY: handles is a valid u32 for the call to fill.
    let counted = unsafe { GetProcessHandleCount(me, &mut handles) } != 0;
    // A running process always holds handles: zero means the count is not known (Wine).
    Some(ProcessUsage {
        cpu_seconds,
        rss_bytes: rss,
        open_fds: (counted && handles > 0).then_some(u64::from(handles)),
    })
}

/// IF_TYPE_SOFTWARE_LOOPBACK: Windows keeps no traffic counters for it (they read 0).
const SOFTWARE_LOOPBACK: u32 = 24;

/// The counters of one interface row; `None` for filter-driver duplicates of a real
/// interface (their counters repeat the interface's) and for the loopback pseudo-interface,
/// whose counters Windows does not keep (absent, not zero).
fn nic_of(row: &MIB_IF_ROW2) -> Option<NicSnapshot> {
    const FILTER_INTERFACE: u8 = 0x02;
    if row.InterfaceAndOperStatusFlags._bitfield & FILTER_INTERFACE != 0
        || row.Type == SOFTWARE_LOOPBACK
    {
        return None;
    }
    let end = row
        .Alias
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(row.Alias.len());
    let interface = String::from_utf16_lossy(&row.Alias[..end]);
    if interface.is_empty() {
        return None;
    }
    Some(NicSnapshot {
        interface,
        rx_bytes: row.InOctets,
        rx_packets: row.InUcastPkts.saturating_add(row.InNUcastPkts),
        rx_errors: row.InErrors,
        rx_drops: row.InDiscards,
        tx_bytes: row.OutOctets,
        tx_packets: row.OutUcastPkts.saturating_add(row.OutNUcastPkts),
        tx_errors: row.OutErrors,
        tx_drops: row.OutDiscards,
    })
}

/// Every interface's counters, from GetIfTable2, in the table's order; names are the
/// interfaces' aliases (`Ethernet`, `Wi-Fi`), as `Get-NetAdapter` shows them.
pub fn nic_snapshot_all() -> Vec<NicSnapshot> {
    with_if_rows(|rows| rows.iter().filter_map(nic_of).collect()).unwrap_or_default()
}

/// Every interface row of GetIfTable2, passed to `f` while the table is alive.
fn with_if_rows<T>(f: impl FnOnce(&[MIB_IF_ROW2]) -> T) -> Option<T> {
    let mut table: *mut MIB_IF_TABLE2 = std::ptr::null_mut();
    // SAFETY: GetIfTable2 allocates the table and stores its address in `table`.
    if unsafe { GetIfTable2(&mut table) } != 0 || table.is_null() {
        return None;
    }
    // SAFETY: on success `table` points to a MIB_IF_TABLE2 whose Table holds NumEntries
    // rows; it stays valid until FreeMibTable below.
    let rows = unsafe {
        std::slice::from_raw_parts(
            std::ptr::addr_of!((*table).Table).cast::<MIB_IF_ROW2>(),
            (*table).NumEntries as usize,
        )
    };
    let out = f(rows);
    // SAFETY: `table` came from GetIfTable2 and is freed once.
    unsafe { FreeMibTable(table.cast()) };
    Some(out)
}

/// The address of one unicast address row.
fn row_addr(row: &MIB_UNICASTIPADDRESS_ROW) -> Option<IpAddr> {
    // SAFETY: si_family is the leading field of every member of the union; it says which
    // member the row holds.
    let family = unsafe { row.Address.si_family };
    if family == AF_INET {
        // SAFETY: the family says the union holds an IPv4 socket address.
        let raw = unsafe { row.Address.Ipv4.sin_addr.S_un.S_addr };
        Some(IpAddr::from(u32::from_be(raw).to_be_bytes()))
    } else if family == AF_INET6 {
        // SAFETY: the family says the union holds an IPv6 socket address.
        let bytes = unsafe { row.Address.Ipv6.sin6_addr.u.Byte };
        Some(IpAddr::from(bytes))
    } else {
        None
    }
}

/// The interface (its alias) that holds local address `ip`, from GetUnicastIpAddressTable and
/// GetIfTable2; `None` for loopback addresses, whose interface Windows keeps no counters for.
pub fn interface_for_addr(ip: IpAddr) -> Option<String> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let mut table: *mut MIB_UNICASTIPADDRESS_TABLE = std::ptr::null_mut();
    // SAFETY: the call allocates the table and stores its address in `table`.
    if unsafe { GetUnicastIpAddressTable(AF_UNSPEC, &mut table) } != 0 || table.is_null() {
        return None;
    }
    // SAFETY: on success `table` holds NumEntries rows until FreeMibTable below.
    let rows = unsafe {
        std::slice::from_raw_parts(
            std::ptr::addr_of!((*table).Table).cast::<MIB_UNICASTIPADDRESS_ROW>(),
            (*table).NumEntries as usize,
        )
    };
    let index = rows
        .iter()
        .find(|r| row_addr(r) == Some(ip))
        .map(|r| r.InterfaceIndex);
    // SAFETY: `table` came from GetUnicastIpAddressTable and is freed once.
    unsafe { FreeMibTable(table.cast()) };
    let index = index?;
    with_if_rows(|rows| {
        rows.iter()
            .find(|r| r.InterfaceIndex == index)
            .and_then(nic_of)
            .map(|n| n.interface)
    })
    .flatten()
}

/// One interface's counters, by alias.
pub fn nic_snapshot(iface: &str) -> Option<NicSnapshot> {
    nic_snapshot_all()
        .into_iter()
        .find(|n| n.interface == iface)
}

/// One SIO_TCP_INFO answer: version 1 carries version 0's fields, under the same names, and
/// the limited-time split.
enum RawTcpInfo {
    V0(TCP_INFO_v0),
    V1(TCP_INFO_v1),
}

/// SIO_TCP_INFO version 1 (Windows 10 1703+), else version 0 (1703 too, without the
/// limited-time split); `Err` where neither is answered (older Windows, Wine).
fn raw_tcp_info(fd: RawFd) -> io::Result<RawTcpInfo> {
    fn ask<T: Default>(fd: RawFd, version: u32) -> io::Result<T> {
        let mut out = T::default();
        let mut got = 0u32;
        // SAFETY: the input is one u32, the output buffer is `out` with its size; no overlap.
        let rc = unsafe {
            WSAIoctl(
                fd as SOCKET,
                SIO_TCP_INFO,
                (&version as *const u32).cast(),
                4,
                (&mut out as *mut T).cast(),
                std::mem::size_of::<T>() as u32,
                &mut got,
                std::ptr::null_mut(),
                None,
            )
        };
        if rc == SOCKET_ERROR {
            return Err(super::fallback::win::last_error());
        }
        if (got as usize) < std::mem::size_of::<T>() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "SIO_TCP_INFO answered short",
            ));
        }
        Ok(out)
    }
    ask(fd, 1)
        .map(RawTcpInfo::V1)
        .or_else(|_| ask(fd, 0).map(RawTcpInfo::V0))
}

/// SIO_TCP_INFO mapped onto [`TcpInfo`]: RTT and minimum RTT, the congestion window (bytes
/// there, segments here), MSS, bytes retransmitted and acknowledged, and from version 1 the
/// time sending was limited by the receiver's window, by the send buffer and in all (the three
/// limits split the sending time). Windows counts retransmission episodes, not segments, and
/// gives no congestion control name, RTT variance, lost or reordering counts, path MTU, pacing
/// or delivery rate: those are absent (docs/platforms.md).
pub fn tcp_info(fd: RawFd) -> io::Result<TcpInfo> {
    Ok(map_tcp_info(&raw_tcp_info(fd)?))
}

fn map_tcp_info(raw: &RawTcpInfo) -> TcpInfo {
    // The fields both versions have, read by name from either.
    macro_rules! common {
        ($v:expr) => {
            TcpInfo {
                rtt_us: $v.RttUs,
                min_rtt_us: Some($v.MinRttUs),
                snd_cwnd: $v.Cwnd / $v.Mss.max(1),
                snd_mss: $v.Mss,
                bytes_retrans: u64::from($v.BytesRetrans),
                bytes_acked: $v.BytesOut.saturating_sub(u64::from($v.BytesInFlight)),
                ..TcpInfo::default()
            }
        };
    }
    let ms = |t: u32| u64::from(t) * 1000;
    match raw {
        RawTcpInfo::V0(v) => common!(v),
        RawTcpInfo::V1(v) => TcpInfo {
            rwnd_limited_us: Some(ms(v.SndLimTimeRwin)),
            sndbuf_limited_us: Some(ms(v.SndLimTimeSnd)),
            busy_time_us: Some(ms(v.SndLimTimeRwin) + ms(v.SndLimTimeCwnd) + ms(v.SndLimTimeSnd)),
            ..common!(v)
        },
    }
}

/// The peer's advertised receive window, bytes (SndWnd).
pub fn tcp_peer_window(fd: RawFd) -> io::Result<u64> {
    Ok(u64::from(match raw_tcp_info(fd)? {
        RawTcpInfo::V0(v) => v.SndWnd,
        RawTcpInfo::V1(v) => v.SndWnd,
    }))
}

/// SO_EXCLUSIVEADDRUSE on a listening socket before bind: on Windows SO_REUSEADDR would let
/// another process bind the same port and take connections meant for this one.
pub fn exclusive_listen_addr(fd: RawFd) -> io::Result<()> {
    let on: i32 = 1;
    // SAFETY: the option value is one i32 read during the call.
    let rc = unsafe {
        setsockopt(
            fd as SOCKET,
            SOL_SOCKET,
            SO_EXCLUSIVEADDRUSE,
            (&on as *const i32).cast(),
            4,
        )
    };
    if rc == SOCKET_ERROR {
        return Err(super::fallback::win::last_error());
    }
    Ok(())
}

/// A 1 ms system timer for this process (timeBeginPeriod), so a paced sender's sleeps end
/// within a millisecond instead of Windows' default 15.6 ms tick. Asked once; Windows drops
/// it when the process exits.
pub fn fine_timer() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a plain request with no pointers.
        let _ = unsafe { windows_sys::Win32::Media::timeBeginPeriod(1) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_info_maps_windows_units() {
        let v1 = TCP_INFO_v1 {
            Mss: 1460,
            RttUs: 250,
            MinRttUs: 180,
            BytesInFlight: 4000,
            Cwnd: 14600,
            SndWnd: 65535,
            BytesOut: 1_000_000,
            BytesRetrans: 2920,
            SndLimTimeRwin: 3,
            SndLimTimeCwnd: 5,
            SndLimTimeSnd: 7,
            ..TCP_INFO_v1::default()
        };
        let i = map_tcp_info(&RawTcpInfo::V1(v1));
        assert_eq!((i.rtt_us, i.min_rtt_us, i.snd_mss), (250, Some(180), 1460));
        assert_eq!(i.snd_cwnd, 10, "bytes become segments");
        assert_eq!(i.bytes_retrans, 2920);
        assert_eq!(i.bytes_acked, 996_000, "sent minus in flight");
        assert_eq!(i.rwnd_limited_us, Some(3000));
        assert_eq!(i.sndbuf_limited_us, Some(7000));
        assert_eq!(i.busy_time_us, Some(15_000));
        // What Windows does not give is absent, never zero.
        assert_eq!(i.congestion, None);
        assert_eq!((i.retransmits, i.rttvar_us, i.pmtu), (None, None, None));
        assert_eq!((i.pacing_rate_bps, i.delivery_rate_bps), (None, None));
        // Version 0 has no limited-time split: absent too.
        let v0 = TCP_INFO_v0 {
            Mss: v1.Mss,
            RttUs: v1.RttUs,
            MinRttUs: v1.MinRttUs,
            BytesInFlight: v1.BytesInFlight,
            Cwnd: v1.Cwnd,
            SndWnd: v1.SndWnd,
            BytesOut: v1.BytesOut,
            BytesRetrans: v1.BytesRetrans,
            ..TCP_INFO_v0::default()
        };
        let i0 = map_tcp_info(&RawTcpInfo::V0(v0));
        assert_eq!((i0.busy_time_us, i0.rwnd_limited_us), (None, None));
        assert_eq!(i0.snd_cwnd, 10);
    }

    #[test]
    fn tcp_info_of_a_connection_is_sane_or_unsupported() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        use super::super::AsRawFd;
        // Windows 10 1703+ answers; Wine and older Windows refuse the ioctl.
        match tcp_info(c.as_raw_fd()) {
            Ok(i) => {
                assert!(i.snd_mss > 0 && i.snd_mss <= 65_535, "{i:?}");
                assert!(i.rtt_us < 10_000_000, "{i:?}");
            }
            Err(e) => assert_ne!(e.kind(), io::ErrorKind::WouldBlock, "{e}"),
        }
        // A UDP socket is not TCP: never a made-up answer.
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(tcp_info(u.as_raw_fd()).is_err());
    }

    #[test]
    fn an_exclusive_listener_keeps_its_port() {
        use socket2::{Domain, Protocol, Socket, Type};
        let a = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        super::super::own_listen_port(&a).unwrap();
        a.bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        a.listen(8).unwrap();
        let port = a.local_addr().unwrap().as_socket().unwrap();
        let b = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        b.set_reuse_address(true).unwrap();
        assert!(
            b.bind(&port.into()).is_err(),
            "another socket with SO_REUSEADDR took the listener's port"
        );
    }

    #[test]
    fn cpu_time_is_read_and_only_grows() {
        let a = cpu_snapshot().expect("GetSystemTimes");
        let mut x = 0u64;
        for i in 0..3_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let b = cpu_snapshot().expect("GetSystemTimes");
        let u = super::super::cpu_usage(&a, &b, 0.05);
        assert!(u.cpus >= 1);
        assert!(u.busy_pct >= 0.0 && u.busy_pct <= 100.0, "{u:?}");
        assert_eq!(
            u.softirq_s, None,
            "Windows does not split out soft interrupts"
        );
    }

    #[test]
    fn this_process_has_cpu_memory_and_handles() {
        // Some CPU of its own first, so the process has used a measurable amount.
        let t = std::time::Instant::now();
        let mut x = 1u64;
        while t.elapsed() < std::time::Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let p = process_usage().expect("process usage");
        assert!(p.rss_bytes > 0);
        assert!(p.cpu_seconds > 0.0, "{p:?}");
        // Handles: Wine does not count them (absent there), Windows does.
    }

    #[test]
    fn interface_counters_are_listed_and_found_by_name() {
        let all = nic_snapshot_all();
        assert!(!all.is_empty(), "GetIfTable2 listed no interface");
        let first = &all[0];
        assert_eq!(
            nic_snapshot(&first.interface).map(|n| n.interface),
            Some(first.interface.clone())
        );
        assert_eq!(nic_snapshot("no such interface"), None);
    }

    #[test]
    fn addresses_map_to_their_interface_and_loopback_has_no_counters() {
        assert_eq!(interface_for_addr("127.0.0.1".parse().unwrap()), None);
        assert_eq!(interface_for_addr("::1".parse().unwrap()), None);
        assert_eq!(interface_for_addr("192.0.2.123".parse().unwrap()), None);
        // A real interface's own address names it, when the machine has one with an address.
        let mut table: *mut MIB_UNICASTIPADDRESS_TABLE = std::ptr::null_mut();
        // SAFETY: as in interface_for_addr.
        assert_eq!(
            unsafe { GetUnicastIpAddressTable(AF_UNSPEC, &mut table) },
            0
        );
        // SAFETY: as in interface_for_addr.
        let addrs: Vec<IpAddr> = unsafe {
            std::slice::from_raw_parts(
                std::ptr::addr_of!((*table).Table).cast::<MIB_UNICASTIPADDRESS_ROW>(),
                (*table).NumEntries as usize,
            )
        }
        .iter()
        .filter_map(row_addr)
        .collect();
        // SAFETY: freed once.
        unsafe { FreeMibTable(table.cast()) };
        let names: Vec<String> = nic_snapshot_all()
            .into_iter()
            .map(|n| n.interface)
            .collect();
        let own: Vec<&IpAddr> = addrs.iter().filter(|a| !a.is_loopback()).collect();
        let mut found = 0;
        for a in &own {
            if let Some(name) = interface_for_addr(**a) {
                assert!(names.contains(&name), "{a} -> {name}, not in {names:?}");
                found += 1;
            }
        }
        assert!(
            own.is_empty() || found > 0,
            "none of {own:?} maps to one of {names:?}"
        );
    }

    #[test]
    fn cpus_cover_every_group() {
        assert!(online_cpus() >= 1);
    }
}
