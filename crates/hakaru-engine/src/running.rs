//! One handle over a running side of any transport, so control loops are written once.

use hakaru_model::SideReport;

use crate::ping::Echo;
use crate::tcp::SideRun;
use crate::udp::UdpRun;

/// A running side of a TCP or UDP test.
pub enum Running {
    /// TCP bulk transfer.
    Tcp(SideRun),
    /// UDP.
    Udp(UdpRun),
    /// The echoing end of a latency test: it stops when the client is done.
    Echo(Box<Echo>),
}

impl Running {
    /// Asks senders to finish now.
    pub fn stop_sending(&self) {
        match self {
            Running::Tcp(r) => r.stop_sending(),
            Running::Udp(r) => r.stop_sending(),
            Running::Echo(e) => e.stop(),
        }
    }

    /// Stops everything now.
    pub fn abort(&self) {
        match self {
            Running::Tcp(r) => r.abort(),
            Running::Udp(r) => r.abort(),
            Running::Echo(e) => e.stop(),
        }
    }

    /// True once every flow has finished.
    pub fn is_done(&self) -> bool {
        match self {
            Running::Tcp(r) => r.is_done(),
            Running::Udp(r) => r.is_done(),
            Running::Echo(e) => e.is_done(),
        }
    }

    /// Bytes moved so far (warm-up included) on the flows where this end has `role`.
    pub fn moved(&self, role: hakaru_model::Role) -> u64 {
        match self {
            Running::Tcp(r) => r.moved(role),
            Running::Udp(r) => r.moved(role),
            Running::Echo(_) => 0,
        }
    }

    /// Requests echoed so far (latency tests; `None` for bulk transfers).
    pub fn echoed(&self) -> Option<u64> {
        match self {
            Running::Echo(e) => Some(e.echoed()),
            _ => None,
        }
    }

    /// The first flow error so far.
    pub fn first_error(&self) -> Option<String> {
        match self {
            Running::Tcp(r) => r.first_error(),
            Running::Udp(r) => r.first_error(),
            Running::Echo(e) => e.first_error(),
        }
    }

    /// The peer's senders are done (UDP; TCP sees the end of the stream instead).
    pub fn peer_done(&self, sent: &[(u32, u64)]) {
        if let Running::Udp(r) = self {
            r.peer_done(sent);
        }
    }

    /// The peer has stopped sending but keeps its sockets open (iperf3): senders stop now,
    /// receivers finish once nothing more is arriving.
    pub fn peer_stopped(&self) {
        match self {
            Running::Tcp(r) => {
                r.stop_sending();
                r.finish_receiving();
            }
            Running::Udp(r) => {
                r.peer_ended();
                r.stop_sending();
                r.peer_done(&[]);
            }
            Running::Echo(e) => e.stop(),
        }
    }

    /// Waits for the side to end and returns its report.
    pub fn wait(self) -> SideReport {
        match self {
            Running::Tcp(r) => r.wait(),
            Running::Udp(r) => r.wait(),
            Running::Echo(e) => (*e).wait(),
        }
    }
}
