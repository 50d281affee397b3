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

pub use hakaru_model::udp::{
    udp_rcvbuf_for, DEFAULT_UDP_RCVBUF, MIN_UDP_RCVBUF, UDP_RCVBUF_BUDGET,
};

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
