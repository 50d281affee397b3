//! Fallback backend of [`crate::sys`] for systems without a native one: compiles everywhere and
//! reports "unsupported" (or "unknown", for optional facts) instead of measuring.

use std::io;
use std::net::IpAddr;

use hakaru_model::{Environment, TcpInfo};

use super::counters::{CpuSnapshot, NicSnapshot};
use super::RawFd;

/// The error every unsupported operation returns, naming what is missing.
fn unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{what} is not supported on {} (hakaru implements it on Linux)",
            std::env::consts::OS
        ),
    )
}

/// TCP_INFO: unsupported here.
pub fn tcp_info(_fd: RawFd) -> io::Result<TcpInfo> {
    Err(unsupported("reading TCP_INFO"))
}

/// Machine-wide CPU counters: not available here.
pub fn cpu_snapshot() -> Option<CpuSnapshot> {
    None
}

/// Interface counters: not available here.
pub fn nic_snapshot(_iface: &str) -> Option<NicSnapshot> {
    None
}

/// Counters of every interface: not available here.
pub fn nic_snapshot_all() -> Vec<NicSnapshot> {
    Vec::new()
}

/// Interface of a local address: not known here.
pub fn interface_for_addr(_ip: IpAddr) -> Option<String> {
    None
}

/// Machine facts that need no OS-specific call; the rest stay unknown.
pub fn environment(iface: Option<&str>) -> Environment {
    Environment {
        os: std::env::consts::OS.to_string(),
        cpus: u32::try_from(online_cpus()).unwrap_or(u32::MAX),
        interface: iface.map(str::to_string),
        ..Environment::default()
    }
}

/// Congestion control algorithms: not known here.
pub fn available_congestion() -> Vec<String> {
    Vec::new()
}

/// Thread pinning: unsupported here.
pub fn pin_current_thread(_cpu: usize) -> io::Result<()> {
    Err(unsupported("pinning a thread to a CPU (-A)"))
}

/// Number of CPUs this process may use (at least 1).
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Source for zero-copy sends: cannot be created here.
#[derive(Debug)]
pub struct ZeroCopySource {
    len: usize,
}

impl ZeroCopySource {
    /// Always fails: zero-copy send is unsupported here.
    pub fn new(_len: usize) -> io::Result<Self> {
        Err(unsupported("zero-copy send (-Z)"))
    }

    /// Length of the content, bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the content is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Zero-copy send: unsupported here.
pub fn send_zerocopy(_sock: RawFd, _src: &ZeroCopySource, _count: usize) -> io::Result<usize> {
    Err(unsupported("zero-copy send (-Z)"))
}

/// Receive-side discard: unsupported here; callers read into a buffer instead.
pub fn recv_discard(_sock: RawFd, _len: usize) -> io::Result<usize> {
    Err(unsupported("receive without copying (--discard)"))
}

/// Whether [`recv_discard`] really discards: not here.
pub const DISCARD_SUPPORTED: bool = false;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_reports_unsupported_or_unknown() {
        let kind = io::ErrorKind::Unsupported;
        assert_eq!(tcp_info(0).map(|_| ()).unwrap_err().kind(), kind);
        assert_eq!(pin_current_thread(0).unwrap_err().kind(), kind);
        assert_eq!(ZeroCopySource::new(10).unwrap_err().kind(), kind);
        let src = ZeroCopySource { len: 10 };
        assert_eq!((src.len(), src.is_empty()), (10, false));
        assert_eq!(send_zerocopy(0, &src, 10).unwrap_err().kind(), kind);
        assert_eq!(recv_discard(0, 10).unwrap_err().kind(), kind);
        const { assert!(!DISCARD_SUPPORTED) };
        assert!(cpu_snapshot().is_none());
        assert!(nic_snapshot("lo").is_none());
        assert!(nic_snapshot_all().is_empty());
        assert!(interface_for_addr("127.0.0.1".parse().unwrap()).is_none());
        assert!(available_congestion().is_empty());
        assert!(online_cpus() >= 1);
    }

    #[test]
    fn environment_has_the_portable_facts() {
        let env = environment(Some("en0"));
        assert_eq!(env.os, std::env::consts::OS);
        assert!(env.cpus >= 1);
        assert_eq!(env.interface.as_deref(), Some("en0"));
        assert_eq!(
            (env.qdisc, env.mtu, env.software),
            (None, None, String::new())
        );
    }
}
