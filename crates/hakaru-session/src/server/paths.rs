//! The data paths of an admitted test arriving: TCP connections, or UDP flows' hellos followed
//! by the client's `flows_ready` (it heard every answer).

use std::time::Instant;

use hakaru_proto::Message;

use super::{held_too_long, DATA_TIMEOUT, HOLD_TIMEOUT};

/// Which flows are here, and until when the rest may come.
#[derive(Debug)]
pub(super) struct Paths {
    here: Vec<bool>,
    arrived: usize,
    udp: bool,
    held: bool,
    /// TCP: the client's go (`flows_ready` of a held start) came before the last path did:
    /// the client sends it once its connections are open, which can be before the server has
    /// read their hellos.
    go: bool,
    /// UDP with a held start: every flow is here and the client holds the start.
    holding: bool,
    deadline: Instant,
}

/// `Ok(true)`: every path is here (and a UDP client is ready); `Ok(false)`: keep waiting;
/// `Err((why, tell))`: the test ends.
pub(super) type Step = Result<bool, (String, bool)>;

impl Paths {
    pub(super) fn new(count: usize, udp: bool, held: bool, now: Instant) -> Paths {
        Paths {
            here: vec![false; count],
            arrived: 0,
            udp,
            held,
            go: false,
            holding: false,
            deadline: now + DATA_TIMEOUT,
        }
    }

    pub(super) fn deadline(&self) -> Instant {
        self.deadline
    }

    pub(super) fn udp(&self) -> bool {
        self.udp
    }

    pub(super) fn go(&self) -> bool {
        self.go
    }

    /// The path of `flow` has arrived.
    pub(super) fn has(&self, flow: u32) -> bool {
        self.here.get(flow as usize).copied().unwrap_or(false)
    }

    fn all_here(&self) -> bool {
        self.arrived == self.here.len()
    }

    /// A path for `flow` arrived. Unknown and repeated flows are the driver's to ignore (it
    /// re-answers a repeated UDP hello); here they change nothing.
    pub(super) fn arrived(&mut self, flow: u32, now: Instant) -> Step {
        if let Some(slot @ false) = self.here.get_mut(flow as usize) {
            *slot = true;
            self.arrived += 1;
        }
        if !self.all_here() {
            return Ok(false);
        }
        if self.udp {
            if self.held && !self.holding {
                self.holding = true;
                self.deadline = now + HOLD_TIMEOUT;
            }
            return Ok(false);
        }
        Ok(true)
    }

    /// A control message while the paths arrive.
    pub(super) fn message(&mut self, m: Message) -> Step {
        match m {
            Message::Keepalive => Ok(false),
            Message::Error { message } => Err((format!("client: {message}"), false)),
            Message::FlowsReady if !self.udp => {
                self.go = true;
                Ok(false)
            }
            Message::FlowsReady if self.all_here() => Ok(true),
            Message::FlowsReady => Err((
                format!(
                    "the client reported every UDP flow ready, but only {} of {} hellos arrived",
                    self.arrived,
                    self.here.len()
                ),
                true,
            )),
            other => Err((
                format!(
                    "unexpected {} message while {}",
                    other.name(),
                    if self.udp {
                        "UDP flows open"
                    } else {
                        "data connections open"
                    }
                ),
                true,
            )),
        }
    }

    /// Why the wait ended at the deadline.
    pub(super) fn timed_out(&self, udp_port: u16) -> String {
        if self.holding {
            return held_too_long();
        }
        let (n, secs) = (self.here.len(), DATA_TIMEOUT.as_secs());
        if self.udp {
            format!(
                "only {} of {n} UDP flows said hello within {secs} s (is UDP to port {udp_port} blocked?)",
                self.arrived
            )
        } else {
            format!(
                "only {} of {n} data connections arrived within {secs} s",
                self.arrived
            )
        }
    }
}
