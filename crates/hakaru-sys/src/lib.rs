//! The OS layer: everything hakaru asks of the operating system beyond portable sockets.
//!
//! One backend is compiled per target and re-exported here, so callers write `sys::tcp_info`
//! and never `cfg` themselves. Linux has the native backend (`linux.rs`); every other OS gets
//! `fallback.rs`, which compiles everywhere and answers "unsupported" instead of measuring,
//! with sockets through Unix calls or WinSock. Windows (`windows.rs`) and macOS (`macos.rs`)
//! replace the fallback's CPU, interface, process and TCP state answers with native ones, and
//! share the getifaddrs walk with Linux (`ifaddrs.rs`); docs/platforms.md lists what each OS
//! gives.
//! Linux's UDP fast path lives apart from the rest of its backend, in `linux_udp.rs`.
//! The CPU, NIC and UDP counter parsers and their delta arithmetic are pure and shared by all.
//!
//! Nothing outside this directory uses `unsafe`, `libc::`, `windows_sys::` or a platform
//! `cfg` (unless the line says `os-layer:` and why): `.ci/structure.py` checks it in CI, with
//! what is still outside listed in `.ci/structure-baseline.txt` until it moves in.
//!
//! # Contract
//!
//! Every backend provides the items below with these meanings; a backend that cannot do
//! something says so in the way given here, never by panicking or by inventing a number.
//!
//! - [`tcp_info`]: `struct tcp_info` and the congestion control name of a TCP socket.
//!   Unsupported: `Err` of kind [`std::io::ErrorKind::Unsupported`]. Fields the running kernel
//!   does not report read 0; the optional ones Windows (SIO_TCP_INFO) and macOS
//!   (TCP_CONNECTION_INFO) do not have are `None` (docs/platforms.md lists them).
//! - [`tcp_send_queue`], [`tcp_peer_window`]: unacknowledged bytes and the peer's window.
//! - [`tcp_loss_marks`]: segments received out of order or retransmitted (Linux): a hole that
//!   holds back what follows it.
//!   Unsupported: `Err`.
//! - [`own_listen_port`], [`fine_timers`]: a listener that keeps its port to itself, and
//!   fine-grained sleeps for paced senders (per OS, in their own documentation).
//! - [`cpu_snapshot`], [`cpu_usage`]: machine-wide CPU time, including softirq, where network
//!   receive work runs. Unsupported: `None` snapshots.
//! - [`interface_for_addr`], [`nic_snapshot`], [`nic_usage`]: the interface a local address
//!   lives on and its counters, reduced to the per-second figures `sar -n DEV` prints.
//!   Unsupported: `None`.
//! - [`nic_snapshot_all`]: the counters of every interface, in the OS's own order (the order of
//!   `/proc/net/dev` on Linux), for `hakaru nic`; [`nic_usage`] and [`nic_average`] reduce
//!   them. Unsupported: an empty list (a machine always has at least loopback, so empty means
//!   "cannot tell"). A backend for another OS only has to fill [`NicSnapshot`]s from its own
//!   counters (sysctl, GetIfTable2); the arithmetic and the renderers are shared.
//! - [`environment`]: facts for the result (kernel, CPUs, default congestion control, the
//!   interface's MTU and root qdisc, socket buffer limits); unknown facts are `None` or empty.
//!   `software` is left empty for the caller.
//! - [`available_congestion`]: empty when unknown.
//! - [`pin_current_thread`]: `Err` when the CPU does not exist or may not be used, or
//!   [`std::io::ErrorKind::Unsupported`].
//! - [`online_cpus`]: always at least 1.
//! - [`process_usage`]: this process's CPU seconds, resident memory and open descriptors
//!   (`server --metrics`). Unsupported: `None`.
//! - [`set_busy_poll`]: SO_BUSY_POLL in microseconds (--busy-poll); `Unsupported` elsewhere.
//! - [`set_max_pacing_rate`]: SO_MAX_PACING_RATE in bytes per second (tcp -b); `Unsupported` elsewhere.
//! - [`bind_address_no_port`]: a socket later bound to an address with port 0 gets its local
//!   port at connect time, unique per 4-tuple, instead of at bind time, unique per address.
//!   Unsupported: [`std::io::ErrorKind::Unsupported`] (the caller binds as usual).
//! - [`tcp_defer_accept`]: a listening socket reports a connection only once data has arrived
//!   on it (or after `secs`); unsupported: [`std::io::ErrorKind::Unsupported`], and the
//!   listener reports connections as they complete, as usual.
//! - [`local_port_range`]: the first and last local port the OS picks for outgoing connections
//!   (what runs out when closed connections wait in TIME_WAIT); `None` when unknown.
//! - [`ZeroCopySource`] and [`send_zerocopy`]: sendfile from an in-memory file (-Z);
//!   [`ZeroCopySource::new`] fails with `Unsupported` where there is none. A full socket buffer
//!   comes back as [`std::io::ErrorKind::WouldBlock`]. sendfile has no MSG_NOSIGNAL: a send to
//!   a closed peer raises SIGPIPE, which Rust programs ignore by default, so it surfaces as
//!   `BrokenPipe`.
//! - [`mptcp_socket`], [`mptcp_available`], [`mptcp_state`], [`mptcp_subflow_peers`]: stream
//!   sockets with IPPROTO_MPTCP, whether a connection ran MPTCP over how many subflows, and
//!   where its subflows come from (`mptcp.rs`).
//!   Unsupported: [`std::io::ErrorKind::Unsupported`] naming why (no MPTCP in the kernel,
//!   `net.mptcp.enabled` 0, or an OS without it).
//! - [`recv_discard`] and [`DISCARD_SUPPORTED`]: drop received TCP bytes without copying them
//!   (--discard). Where [`DISCARD_SUPPORTED`] is false the caller must read into a buffer.
//!   [`recv_discard_wait`] and [`stream_recv_wait`] wait in the call (a blocking socket with
//!   a read timeout): one system call per wait for a thread that reads one stream.
//! - [`stream_recv`], [`stream_send`], [`udp_recv_from`], [`udp_send_to`]: one receive or send
//!   as the C library's call makes it; on Linux through `syscall(2)`, without the library's
//!   thread-cancellation wrapper (`linux_calls.rs`), since nothing in hakaru cancels a thread.
//!   [`udp_recv_from_now`]: one datagram if one is queued (MSG_DONTWAIT), `WouldBlock` if not;
//!   `Unsupported` off Linux.
//! - [`tcp_enable_rx_stamps`] and [`stream_recv_stamped`]: a TCP read that also says when the
//!   last segment it took reached the host (SO_TIMESTAMPNS); elsewhere `false` and no stamp.
//!
//! The UDP fast path, on UDP sockets:
//!
//! - [`MAX_GSO_SEGMENTS`]: the most datagrams one GSO send should carry (64, the smaller of
//!   the kernel limits in use); more makes Linux fail the send with EINVAL.
//! - [`udp_set_gso`]: every later send longer than `segment` bytes on the socket leaves as
//!   `segment`-byte datagrams (the last may be shorter); 0 turns it off. Unsupported: `Err`,
//!   with ENOPROTOOPT from a Linux kernel older than 4.18 and
//!   [`std::io::ErrorKind::Unsupported`] from the fallback.
//! - [`udp_set_gro`]: received messages may hold several datagrams, each of the size
//!   [`RecvBatch::segment_size`] reports. Unsupported: as for [`udp_set_gso`] (Linux < 5.0).
//! - [`udp_enable_rx_meta`]: asks for kernel receive timestamps and the socket's drop counter;
//!   returns which of the two were enabled, `(false, false)` where there are none.
//! - [`udp_socket_drops`]: the socket's drop count now (datagrams dropped for lack of receive
//!   buffer); `None` where the OS does not tell.
//! - [`send_batch`]: each slice is one message on a connected socket, all in one system call
//!   where the OS has one (sendmmsg); returns how many the OS took, possibly fewer than given,
//!   and the error when the first one fails (`WouldBlock` for a full buffer with `wait` false,
//!   EIO when the device cannot do GSO, EINVAL, `ConnectionRefused`, ...). The fallback sends
//!   one at a time and stops at the first error after a success.
//! - [`RecvBatch`] and [`recv_batch`]: reusable buffers, filled by one system call where the OS
//!   has one (recvmmsg); returns the number of messages received. `wait` true blocks for the
//!   first message (ending with `WouldBlock` at the socket's receive timeout), false fails with
//!   `WouldBlock` on an empty socket. Per message: its bytes, GRO segment size (`None` for a
//!   single datagram), kernel receive time in ns since the Unix epoch and truncation; per batch:
//!   the latest cumulative count of datagrams the kernel dropped on the socket for a full
//!   receive buffer, `None` until there was a drop. Metadata the OS cannot give reads `None` or
//!   false; the fallback receives one message per call, into buffer 0.
//!   [`RecvBatch`] is `Send`. Unsupported (no Unix sockets): `Err` of kind
//!   [`std::io::ErrorKind::Unsupported`] from both functions.
//! - [`udp_snmp`] and [`UdpSnmp`]: system-wide UDP counters, IPv4 plus IPv6 summed;
//!   [`UdpSnmp::delta`] wraps like the kernel's counters. Unsupported: `None`.
//!
//! - [`PollSet`], [`wait_fd`], [`tighten_timer_slack`] (shared by every backend, `poll.rs`):
//!   waiting for sockets with readiness per entry, a nanosecond timeout on Linux; where there is
//!   no poll they sleep a millisecond and report every entry ready (sockets are non-blocking).
//!
//! - [`SendRoom`] (feature `tokio`, `send_room.rs`): an async wait for a TCP socket's unsent
//!   bytes to fall under its TCP_NOTSENT_LOWAT mark. Unsupported (not Linux): `new` is `None`.
//!
//! Descriptors are borrowed: no function here closes a socket it is given.

mod counters;
mod mptcp;
mod poll;
mod portable;
#[cfg(feature = "tokio")]
mod send_room;
mod sockopts;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod linux_calls;
#[cfg(target_os = "linux")]
mod linux_stamps;

#[cfg(target_os = "linux")]
mod linux_udp;

// Also compiled in Linux test builds, so the fallback cannot rot unseen on the main platform.
#[cfg(any(not(target_os = "linux"), test))]
#[cfg_attr(all(target_os = "linux", test), allow(dead_code))]
mod fallback;

pub use counters::{
    cpu_usage, nic_average, nic_usage, parse_proc_net_dev, parse_proc_net_dev_all, parse_proc_stat,
};
pub use counters::{
    parse_proc_net_snmp6_udp, parse_proc_net_snmp_udp, parse_proc_self_stat, parse_schedstat,
    parse_vm_rss, thread_sched_times, ProcessUsage,
};
pub use counters::{CpuSnapshot, NicSnapshot, UdpSnmp};
pub use mptcp::{mptcp_available, mptcp_socket, mptcp_state, mptcp_subflow_peers, MptcpState};
pub use poll::{tighten_timer_slack, wait_fd, Interest, PollSet};
pub use portable::{
    connect_bounded, connect_start, is_connect_cut_short, is_gso_refused, is_not_found,
    is_out_of_buffers, is_out_of_descriptors, send_before_close, stream_recv, stream_recv_wait,
    stream_send, udp_recv_from, udp_recv_from_now, udp_send_to, wait_listener,
    ACCEPT_INHERITS_TIMEOUTS, RECV_TIMEOUT_KEEPS_STREAM, SHUTDOWN_WAKES_BLOCKED_RECV,
    UDP_SHARED_PORT_DEMUX,
};
#[cfg(feature = "tokio")]
pub use send_room::SendRoom;
pub use sockopts::{
    set_congestion, set_mss, set_notsent_lowat, set_notsent_lowat_fd, set_recv_lowat, set_tos,
    shares_cpu_with_sender, NOTSENT_LOWAT_SUPPORTED,
};

#[cfg(target_os = "linux")]
pub use linux::{
    accept_nonblocking, available_congestion, bind_address_no_port, cpu_snapshot, environment,
    interface_for_addr, is_virtual_interface, local_port_range, nic_snapshot, nic_snapshot_all,
    online_cpus, pin_current_thread, process_usage, recv_discard, recv_discard_wait, send_zerocopy,
    set_busy_poll, set_max_pacing_rate, tcp_defer_accept, tcp_info, tcp_loss_marks,
    tcp_out_of_order, tcp_peer_window, tcp_send_queue, ZeroCopySource, DISCARD_SUPPORTED,
};
#[cfg(target_os = "linux")]
pub use linux_stamps::{
    stream_recv_stamped, stream_recv_stamped_wait, tcp_enable_rx_stamps, tcp_rx_stamps_on,
};

#[cfg(target_os = "linux")]
pub use linux_udp::{
    recv_batch, send_batch, udp_enable_rx_meta, udp_set_gro, udp_set_gso, udp_snmp,
    udp_socket_drops, RecvBatch, MAX_GSO_SEGMENTS,
};

#[cfg(not(target_os = "linux"))]
pub use fallback::{
    accept_nonblocking, available_congestion, bind_address_no_port, environment,
    is_virtual_interface, local_port_range, pin_current_thread, recv_discard, recv_discard_wait,
    send_zerocopy, set_busy_poll, set_max_pacing_rate, stream_recv_stamped,
    stream_recv_stamped_wait, tcp_defer_accept, tcp_enable_rx_stamps, tcp_loss_marks,
    tcp_out_of_order, tcp_rx_stamps_on, ZeroCopySource, DISCARD_SUPPORTED,
};

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
pub use fallback::{
    cpu_snapshot, interface_for_addr, nic_snapshot, nic_snapshot_all, process_usage, tcp_info,
    tcp_peer_window,
};

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub use fallback::tcp_send_queue;

#[cfg(not(any(target_os = "linux", windows)))]
pub use fallback::online_cpus;

#[cfg(any(target_os = "linux", target_os = "macos"))]
mod ifaddrs;

#[cfg(target_os = "macos")]
mod macos;

#[cfg(target_os = "macos")]
pub use ifaddrs::interface_for_addr;

#[cfg(target_os = "macos")]
pub use macos::{
    cpu_snapshot, nic_snapshot, nic_snapshot_all, process_usage, tcp_info, tcp_peer_window,
    tcp_send_queue,
};

#[cfg(windows)]
mod windows;

#[cfg(windows)]
pub use windows::{
    cpu_snapshot, interface_for_addr, nic_snapshot, nic_snapshot_all, online_cpus, process_usage,
    tcp_info, tcp_peer_window,
};

/// Makes a listening socket's port its own, before bind: SO_REUSEADDR on Unix (a restarted
/// server can bind over connections still in TIME_WAIT), SO_EXCLUSIVEADDRUSE on Windows
/// (where SO_REUSEADDR would let another process bind the same port and take its
/// connections; Windows lets a listener rebind over TIME_WAIT without it).
pub fn own_listen_port(sock: &socket2::Socket) -> std::io::Result<()> {
    #[cfg(windows)]
    return windows::exclusive_listen_addr(sock.as_raw_fd());
    #[cfg(not(windows))]
    sock.set_reuse_address(true)
}

/// Asks the OS for fine-grained sleeps in paced senders: 1 us timer slack per thread on
/// Linux, a 1 ms system timer for the process on Windows (timeBeginPeriod); nothing elsewhere.
pub fn fine_timers() {
    tighten_timer_slack();
    #[cfg(windows)]
    windows::fine_timer();
}

#[cfg(not(target_os = "linux"))]
pub use fallback::{
    recv_batch, send_batch, udp_enable_rx_meta, udp_set_gro, udp_set_gso, udp_snmp,
    udp_socket_drops, RecvBatch, MAX_GSO_SEGMENTS,
};

/// A socket descriptor as the OS names it (a file descriptor on Unix).
#[cfg(unix)]
pub use std::os::fd::RawFd;

/// A socket descriptor as the OS names it (a SOCKET handle on Windows).
#[cfg(windows)]
pub type RawFd = std::os::windows::io::RawSocket;

/// A socket descriptor on targets with neither Unix descriptors nor Windows sockets.
#[cfg(not(any(unix, windows)))]
pub type RawFd = i32;

/// `as_raw_fd()` on every socket type, whatever the OS calls its descriptors: callers write
/// `use crate::AsRawFd` and pass the result to the functions here.
#[cfg(unix)]
pub use std::os::fd::AsRawFd;

/// `as_raw_fd()` on every socket type: on Windows the SOCKET handle.
#[cfg(windows)]
pub trait AsRawFd {
    /// The socket's handle, borrowed.
    fn as_raw_fd(&self) -> RawFd;
}

#[cfg(windows)]
impl<T: std::os::windows::io::AsRawSocket> AsRawFd for T {
    fn as_raw_fd(&self) -> RawFd {
        self.as_raw_socket()
    }
}

/// The system call [`send_batch`] makes, as results name the UDP send path: one call for the
/// whole batch on Linux, one call per datagram elsewhere.
#[cfg(target_os = "linux")]
pub const BATCH_SEND: &str = "sendmmsg";
/// The system call [`send_batch`] makes: one call per datagram off Linux.
#[cfg(not(target_os = "linux"))]
pub const BATCH_SEND: &str = "send";

/// The system call [`recv_batch`] makes, as results name the UDP receive path.
#[cfg(target_os = "linux")]
pub const BATCH_RECV: &str = "recvmmsg";
/// The system call [`recv_batch`] makes: one call per datagram off Linux.
#[cfg(not(target_os = "linux"))]
pub const BATCH_RECV: &str = "recv";

/// The wall clock now, seconds since the Unix epoch (0 if the clock is before it).
pub fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `bytes` fresh random bytes from the OS, hex (a key-authentication nonce: `proto::auth`).
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// This kernel's identity for this boot (Linux: `/proc/sys/kernel/random/boot_id`), or `None`
/// where there is none. Two ends that report the same one run on one kernel, so they share its
/// CPUs: network namespaces, containers and loopback all do.
pub fn host_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::{self, IoSlice};
    use std::net::IpAddr;

    use hakaru_model::{Environment, TcpInfo};

    use super::{fallback, linux, linux_udp, CpuSnapshot, NicSnapshot, RawFd, UdpSnmp};

    /// Both backends must offer the same signatures, or the fallback breaks other OSes'
    /// builds only where nobody compiles it.
    #[test]
    fn backends_have_the_same_api() {
        macro_rules! same {
            ($name:ident: $ty:ty) => {
                same!(linux / $name: $ty)
            };
            ($native:ident / $name:ident: $ty:ty) => {{
                let _: $ty = $native::$name;
                let _: $ty = fallback::$name;
            }};
        }
        same!(tcp_info: fn(RawFd) -> io::Result<TcpInfo>);
        same!(tcp_send_queue: fn(RawFd) -> io::Result<u64>);
        same!(tcp_peer_window: fn(RawFd) -> io::Result<u64>);
        same!(tcp_loss_marks: fn(RawFd) -> io::Result<u64>);
        same!(tcp_out_of_order: fn(RawFd) -> Option<u64>);
        same!(cpu_snapshot: fn() -> Option<CpuSnapshot>);
        same!(nic_snapshot: fn(&str) -> Option<NicSnapshot>);
        same!(nic_snapshot_all: fn() -> Vec<NicSnapshot>);
        same!(interface_for_addr: fn(IpAddr) -> Option<String>);
        same!(environment: fn(Option<&str>) -> Environment);
        same!(available_congestion: fn() -> Vec<String>);
        same!(pin_current_thread: fn(usize) -> io::Result<()>);
        same!(online_cpus: fn() -> usize);
        same!(set_busy_poll: fn(RawFd, u32) -> io::Result<()>);
        same!(set_max_pacing_rate: fn(RawFd, u64) -> io::Result<()>);
        same!(local_port_range: fn() -> Option<(u16, u16)>);
        same!(bind_address_no_port: fn(RawFd) -> io::Result<()>);
        same!(tcp_defer_accept: fn(RawFd, u32) -> io::Result<()>);
        same!(
            accept_nonblocking: fn(
                &std::net::TcpListener,
            ) -> io::Result<(std::net::TcpStream, std::net::SocketAddr)>
        );
        same!(recv_discard: fn(RawFd, usize) -> io::Result<usize>);
        let _: bool = linux::DISCARD_SUPPORTED;
        let _: bool = fallback::DISCARD_SUPPORTED;
        let _: fn(usize) -> io::Result<linux::ZeroCopySource> = linux::ZeroCopySource::new;
        let _: fn(usize) -> io::Result<fallback::ZeroCopySource> = fallback::ZeroCopySource::new;
        let _: fn(&linux::ZeroCopySource) -> usize = linux::ZeroCopySource::len;
        let _: fn(&fallback::ZeroCopySource) -> usize = fallback::ZeroCopySource::len;
        let _: fn(&linux::ZeroCopySource) -> bool = linux::ZeroCopySource::is_empty;
        let _: fn(&fallback::ZeroCopySource) -> bool = fallback::ZeroCopySource::is_empty;
        let _: fn(RawFd, &linux::ZeroCopySource, usize) -> io::Result<usize> = linux::send_zerocopy;
        let _: fn(RawFd, &fallback::ZeroCopySource, usize) -> io::Result<usize> =
            fallback::send_zerocopy;

        const { assert!(linux_udp::MAX_GSO_SEGMENTS == fallback::MAX_GSO_SEGMENTS) };
        same!(linux_udp / udp_set_gso: fn(RawFd, u16) -> io::Result<()>);
        same!(linux_udp / udp_set_gro: fn(RawFd) -> io::Result<()>);
        same!(linux_udp / udp_enable_rx_meta: fn(RawFd) -> (bool, bool));
        same!(linux_udp / udp_socket_drops: fn(RawFd) -> Option<u64>);
        same!(linux_udp / send_batch: fn(RawFd, &[IoSlice<'_>], bool) -> io::Result<usize>);
        same!(linux_udp / udp_snmp: fn() -> Option<UdpSnmp>);
        let _: fn(usize, usize) -> linux_udp::RecvBatch = linux_udp::RecvBatch::new;
        let _: fn(usize, usize) -> fallback::RecvBatch = fallback::RecvBatch::new;
        let _: fn(&linux_udp::RecvBatch, usize) -> &[u8] = linux_udp::RecvBatch::data;
        let _: fn(&fallback::RecvBatch, usize) -> &[u8] = fallback::RecvBatch::data;
        let _: fn(&linux_udp::RecvBatch, usize) -> Option<u16> = linux_udp::RecvBatch::segment_size;
        let _: fn(&fallback::RecvBatch, usize) -> Option<u16> = fallback::RecvBatch::segment_size;
        let _: fn(&linux_udp::RecvBatch, usize) -> Option<u64> = linux_udp::RecvBatch::timestamp_ns;
        let _: fn(&fallback::RecvBatch, usize) -> Option<u64> = fallback::RecvBatch::timestamp_ns;
        let _: fn(&linux_udp::RecvBatch) -> Option<u32> = linux_udp::RecvBatch::rxq_drops;
        let _: fn(&fallback::RecvBatch) -> Option<u32> = fallback::RecvBatch::rxq_drops;
        let _: fn(&linux_udp::RecvBatch, usize) -> bool = linux_udp::RecvBatch::truncated;
        let _: fn(&fallback::RecvBatch, usize) -> bool = fallback::RecvBatch::truncated;
        let _: fn(RawFd, &mut linux_udp::RecvBatch, bool) -> io::Result<usize> =
            linux_udp::recv_batch;
        let _: fn(RawFd, &mut fallback::RecvBatch, bool) -> io::Result<usize> =
            fallback::recv_batch;
        fn movable<T: Send>() {}
        movable::<linux_udp::RecvBatch>();
        movable::<fallback::RecvBatch>();
    }
}

/// Raises the soft open-file limit to the hard limit, so a test with many flows (2 x 1024
/// sockets with --bidir) does not hit a default soft limit of 1024. Returns the new limit.
#[cfg(unix)]
pub fn raise_fd_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        // macOS refuses a soft limit above OPEN_MAX (10240, <sys/syslimits.h>; libc does not
        // export it), and its hard limit is often unlimited.
        #[cfg(target_os = "macos")]
        let want = lim.rlim_max.min(10_240);
        #[cfg(not(target_os = "macos"))]
        let want = lim.rlim_max;
        if lim.rlim_cur < want {
            lim.rlim_cur = want;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return None;
            }
        }
    }
    // rlim_t is u64 on Linux but not on every unix.
    #[allow(clippy::unnecessary_cast)]
    Some(lim.rlim_cur as u64)
}

/// Raises the open-file limit where the OS has one (nothing to do here).
#[cfg(not(unix))]
pub fn raise_fd_limit() -> Option<u64> {
    None
}
