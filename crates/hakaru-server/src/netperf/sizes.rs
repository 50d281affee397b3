//! What a netperf test's data socket asks of the OS: its buffer sizes, its port, and the
//! sizes of its receives and sends (netserver's choices where the request leaves them).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use hakaru_proto::netperf::{self as wire, OmniRequest};
use socket2::Socket;

/// Largest buffer a receive uses (a request may ask for more; netserver's own limit is 64 KiB
/// of message plus alignment).
pub(super) const MAX_BUF: usize = 1 << 20;
/// Receive size when the request leaves it to the server and the buffer size is unknown.
pub(super) const DEFAULT_RECV: usize = 128 * 1024;
/// What a TCP socket buffer left to autotuning is budgeted at.
pub(super) const AUTOTUNED: u64 = 4 << 20;

/// Binds `sock` on `ip`: the asked port, else one of `ports` (any free one when they are
/// every unprivileged port).
pub(super) fn bind_port(
    sock: &Socket,
    ip: IpAddr,
    asked: u32,
    ports: (u16, u16),
) -> io::Result<()> {
    let port = u16::try_from(asked)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "data port above 65535"))?;
    let (lo, hi) = ports;
    if port != 0 || (lo, hi) == hakaru_session::netperf::server::DEFAULT_DATA_PORTS {
        return sock.bind(&SocketAddr::new(ip, port).into());
    }
    // A start that differs from test to test, so tests do not queue for the first port.
    let span = u32::from(hi.saturating_sub(lo)) + 1;
    let start = std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        Instant::now(),
    ) as u32
        % span;
    // Bounded by the range's length.
    for i in 0..span {
        let p = u32::from(lo) + (start + i) % span;
        let p = u16::try_from(p).unwrap_or(hi);
        match sock.bind(&SocketAddr::new(ip, p).into()) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("every data port in {lo}-{hi} is taken (--netperf-data-ports)"),
    ))
}

/// A socket buffer size asked by the test, no larger than `cap`.
pub(super) fn asked_buf(asked: i32, cap: Option<u64>) -> Option<usize> {
    let n = u64::try_from(asked).ok().filter(|&n| n > 0)?;
    let n = cap.map_or(n, |c| n.min((c / 4).max(4096)));
    usize::try_from(n).ok()
}

/// Bytes per receive and per send: the transaction sizes of an RR test, else the asked sizes,
/// else netserver's choices (the socket buffer for receives, 16 KiB... for sends).
pub(super) fn sizes(req: &OmniRequest, rcvbuf: i32, sndbuf: i32) -> (usize, usize) {
    let pick = |asked: i32, fallback: usize| {
        usize::try_from(asked)
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or(fallback)
            .min(MAX_BUF)
    };
    if req.is_rr() {
        return (pick(req.request_size, 1), pick(req.response_size, 1));
    }
    let recv_default = usize::try_from(rcvbuf)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_RECV);
    let send_default = usize::try_from(sndbuf)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(16384)
        .min(64 * 1024);
    if req.protocol == wire::PROTO_UDP {
        return (65_536, pick(req.send_size, 1024));
    }
    (
        pick(req.receive_size, recv_default),
        pick(req.send_size, send_default),
    )
}
