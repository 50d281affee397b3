//! Socket options a test sets on its data sockets, with errors that name the flag.

use std::io;

use hakaru_model::{TcpSpec, UdpSpec};
use socket2::Socket;

/// A socket option the OS refused; the message names the flag that asked for it.
#[derive(Debug, thiserror::Error)]
#[error("{flag}: {source}")]
pub struct SockoptError {
    /// The flag that asked for the option, e.g. `-C/--congestion cubic2`.
    pub flag: String,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

fn wrap<T>(flag: impl Into<String>, r: io::Result<T>) -> Result<T, SockoptError> {
    r.map_err(|source| SockoptError {
        flag: flag.into(),
        source,
    })
}

/// Applies the spec's options to a data socket. `before_connect` also sets what only works
/// before the handshake (the MSS); the server calls it on accepted sockets with `false`.
pub fn apply_tcp_options(
    sock: &Socket,
    spec: &TcpSpec,
    ipv6: bool,
    before_connect: bool,
) -> Result<(), SockoptError> {
    if let Some(w) = spec.window {
        let size = usize::try_from(w.0).unwrap_or(usize::MAX);
        wrap(
            format!("-w/--window {}", w.0),
            sock.set_send_buffer_size(size),
        )?;
        wrap(
            format!("-w/--window {}", w.0),
            sock.set_recv_buffer_size(size),
        )?;
    }
    if spec.nodelay {
        wrap("-N/--no-delay", sock.set_tcp_nodelay(true))?;
    }
    set_tos(sock, spec.tos, ipv6)?;
    if let Some(cc) = &spec.congestion {
        wrap(
            format!("-C/--congestion {cc}"),
            crate::sys::set_congestion(sock, cc),
        )?;
    }
    if let Some(mss) = spec.mss {
        wrap(
            format!("-M/--mss {mss}"),
            crate::sys::set_mss(sock, mss, before_connect),
        )?;
    }
    Ok(())
}

/// Receive buffer a one-flow UDP receiver asks for when -w is not given: enough to ride out a
/// scheduling hiccup at a million packets per second (the kernel caps it at net.core.rmem_max).
pub const DEFAULT_UDP_RCVBUF: usize = 4 << 20;
/// All of a side's UDP receive buffers together, when -w is not given: many flows split it.
pub const UDP_RCVBUF_BUDGET: usize = 16 << 20;
/// Smallest receive buffer a flow asks for when the budget is split: a few hundred datagrams,
/// several send batches.
pub const MIN_UDP_RCVBUF: usize = 128 << 10;

/// Receive buffer each of `flows` UDP flows asks for when -w is not given. Every flow asking
/// for 4 MiB made 256 flows queue up to a gigabyte of datagrams: a receiver that fell behind
/// read cold memory and drained for half a second after the senders stopped (hakaru pps -P 256
/// on loopback, docs/BENCHMARKS.md). Splitting a fixed budget keeps the queued total near
/// the one-flow figure.
pub fn udp_rcvbuf_for(flows: u32) -> usize {
    (UDP_RCVBUF_BUDGET / flows.max(1) as usize).clamp(MIN_UDP_RCVBUF, DEFAULT_UDP_RCVBUF)
}

/// Applies a UDP spec's options to a flow socket: buffers (-w, or a large receive buffer by
/// default) and the TOS byte.
pub fn apply_udp_options(sock: &Socket, spec: &UdpSpec, ipv6: bool) -> Result<(), SockoptError> {
    match spec.window {
        Some(w) => {
            let size = usize::try_from(w.0).unwrap_or(usize::MAX);
            let flag = format!("-w/--window {}", w.0);
            wrap(flag.clone(), sock.set_send_buffer_size(size))?;
            wrap(flag, sock.set_recv_buffer_size(size))?;
        }
        None => {
            // Best effort: a smaller buffer is still a working test.
            let _ = sock.set_recv_buffer_size(udp_rcvbuf_for(spec.flows));
        }
    }
    set_tos(sock, spec.tos, ipv6)
}

fn set_tos(sock: &Socket, tos: Option<u8>, ipv6: bool) -> Result<(), SockoptError> {
    let Some(tos) = tos else { return Ok(()) };
    wrap(format!("--tos {tos}"), crate::sys::set_tos(sock, tos, ipv6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_receive_buffers_split_a_budget() {
        assert_eq!(udp_rcvbuf_for(0), DEFAULT_UDP_RCVBUF);
        assert_eq!(udp_rcvbuf_for(1), DEFAULT_UDP_RCVBUF);
        assert_eq!(udp_rcvbuf_for(4), DEFAULT_UDP_RCVBUF);
        assert_eq!(udp_rcvbuf_for(8), 2 << 20);
        assert_eq!(udp_rcvbuf_for(64), 256 << 10);
        assert_eq!(udp_rcvbuf_for(256), MIN_UDP_RCVBUF);
        assert_eq!(udp_rcvbuf_for(1024), MIN_UDP_RCVBUF);
        // The total stays bounded however many flows run.
        assert!(udp_rcvbuf_for(1024) * 1024 <= 128 << 20);
    }
}
