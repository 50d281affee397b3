//! Interfaces and their addresses through getifaddrs, shared by the Unix backends (Linux and
//! macOS): which interface a local address lives on.

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One entry of getifaddrs, copied out so the list can be freed at once.
pub(crate) struct IfAddr {
    pub(crate) name: String,
    pub(crate) flags: libc::c_uint,
    pub(crate) addr: Option<IpAddr>,
}

/// Every (interface, address) pair of this machine.
pub(crate) fn if_addrs() -> io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: on success getifaddrs stores a list that we free below, exactly once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_name.is_null() {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
            out.push(IfAddr {
                name: name.to_string_lossy().into_owned(),
                flags: ifa.ifa_flags,
                // SAFETY: ifa_addr is null or a sockaddr of the size its family implies.
                addr: unsafe { sockaddr_ip(ifa.ifa_addr) },
            });
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and nothing borrowed from it outlives this call.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The IP address in a sockaddr of family AF_INET or AF_INET6.
///
/// # Safety
/// `sa` must be null or point to a valid sockaddr of the size its family implies.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>());
            // s_addr is in network order, i.e. its bytes in memory are the octets.
            Some(IpAddr::V4(Ipv4Addr::from(
                sin.sin_addr.s_addr.to_ne_bytes(),
            )))
        }
        libc::AF_INET6 => {
            let sin6 = std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>());
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// Name of the local interface that has address `ip`; loopback addresses map to the loopback
/// interface (`lo`, `lo0` on macOS) even when only 127.0.0.1 is configured on it.
pub fn interface_for_addr(ip: IpAddr) -> Option<String> {
    // A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d; interfaces list them as IPv4.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_unspecified() {
        return None;
    }
    let addrs = if_addrs();
    if ip.is_loopback() {
        let lo = addrs.ok().and_then(|list| {
            list.into_iter()
                .find(|a| a.flags & libc::IFF_LOOPBACK as libc::c_uint != 0)
                .map(|a| a.name)
        });
        let name = if cfg!(target_os = "macos") {
            "lo0"
        } else {
            "lo"
        };
        return Some(lo.unwrap_or_else(|| name.to_string()));
    }
    addrs
        .ok()?
        .into_iter()
        .find(|a| a.addr == Some(ip))
        .map(|a| a.name)
}
