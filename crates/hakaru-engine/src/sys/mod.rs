//! The OS layer: everything hakaru asks of the operating system beyond portable sockets.
//!
//! One backend is compiled per target and re-exported here, so callers write `sys::tcp_info`
//! and never `cfg` themselves. Linux has the native backend (`linux.rs`); every other OS gets
//! `fallback.rs`, which compiles everywhere and answers "unsupported" instead of measuring.
//! The CPU and NIC counter parsers and their delta arithmetic are pure and shared by both.
//!
//! # Contract
//!
//! Every backend provides the items below with these meanings; a backend that cannot do
//! something says so in the way given here, never by panicking or by inventing a number.
//!
//! - [`tcp_info`]: `struct tcp_info` and the congestion control name of a TCP socket.
//!   Unsupported: `Err` of kind [`std::io::ErrorKind::Unsupported`]. Fields the running kernel
//!   does not report read 0.
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
//! - [`ZeroCopySource`] and [`send_zerocopy`]: sendfile from an in-memory file (-Z);
//!   [`ZeroCopySource::new`] fails with `Unsupported` where there is none. A full socket buffer
//!   comes back as [`std::io::ErrorKind::WouldBlock`]. sendfile has no MSG_NOSIGNAL: a send to
//!   a closed peer raises SIGPIPE, which Rust programs ignore by default, so it surfaces as
//!   `BrokenPipe`.
//! - [`recv_discard`] and [`DISCARD_SUPPORTED`]: drop received TCP bytes without copying them
//!   (--discard). Where [`DISCARD_SUPPORTED`] is false the caller must read into a buffer.
//!
//! Descriptors are borrowed: no function here closes a socket it is given.

mod counters;

#[cfg(target_os = "linux")]
mod linux;

// Also compiled in Linux test builds, so the fallback cannot rot unseen on the main platform.
#[cfg(any(not(target_os = "linux"), test))]
#[cfg_attr(all(target_os = "linux", test), allow(dead_code))]
mod fallback;

pub use counters::{
    cpu_usage, nic_average, nic_usage, parse_proc_net_dev, parse_proc_net_dev_all, parse_proc_stat,
};
pub use counters::{CpuSnapshot, NicSnapshot};

#[cfg(target_os = "linux")]
pub use linux::{
    available_congestion, cpu_snapshot, environment, interface_for_addr, nic_snapshot,
    nic_snapshot_all, online_cpus, pin_current_thread, recv_discard, send_zerocopy, tcp_info,
    ZeroCopySource, DISCARD_SUPPORTED,
};

#[cfg(not(target_os = "linux"))]
pub use fallback::{
    available_congestion, cpu_snapshot, environment, interface_for_addr, nic_snapshot,
    nic_snapshot_all, online_cpus, pin_current_thread, recv_discard, send_zerocopy, tcp_info,
    ZeroCopySource, DISCARD_SUPPORTED,
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io;
    use std::net::IpAddr;

    use hakaru_model::{Environment, TcpInfo};

    use super::{fallback, linux, CpuSnapshot, NicSnapshot, RawFd};

    /// Both backends must offer the same signatures, or the fallback breaks other OSes'
    /// builds only where nobody compiles it.
    #[test]
    fn backends_have_the_same_api() {
        macro_rules! same {
            ($name:ident: $ty:ty) => {{
                let _: $ty = linux::$name;
                let _: $ty = fallback::$name;
            }};
        }
        same!(tcp_info: fn(RawFd) -> io::Result<TcpInfo>);
        same!(cpu_snapshot: fn() -> Option<CpuSnapshot>);
        same!(nic_snapshot: fn(&str) -> Option<NicSnapshot>);
        same!(nic_snapshot_all: fn() -> Vec<NicSnapshot>);
        same!(interface_for_addr: fn(IpAddr) -> Option<String>);
        same!(environment: fn(Option<&str>) -> Environment);
        same!(available_congestion: fn() -> Vec<String>);
        same!(pin_current_thread: fn(usize) -> io::Result<()>);
        same!(online_cpus: fn() -> usize);
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
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
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
