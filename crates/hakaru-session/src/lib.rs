//! hakaru's control sessions as sans-IO state machines (after quinn-proto's `Connection`).
//!
//! A machine owns the protocol logic of one control session, and nothing else: no socket, no
//! thread, no clock. Its driver (one for all: `hakaru_engine::drive`, with a carrier per
//! session in hakaru-server and hakaru-client) does the I/O and turns what happens into calls,
//! all with the time of the event, `now`:
//!
//! - `handle(input, now)`: a decoded control message, the peer closing, a data path arriving,
//!   the data plane's report, an answer the machine asked the driver for;
//! - `handle_timeout(now)` once `now` has reached `timeout()`, the machine's next deadline;
//! - `poll_output()`, after each of those, until it gives `None`: the actions to carry out in
//!   order (send this message, start or stop the data plane, end the session).
//!
//! Because time is an argument, unit tests drive a machine on virtual time: a test makes one
//! `Instant` and adds durations to it, so a ten-second timeout takes no time to test.
//!
//! Conventions every machine here keeps:
//! - a machine never panics on any input, in any state; what the peer sends that does not fit
//!   the state ends the session with a message that names the state and what arrived;
//! - after the machine has given its final output (the session's end) it ignores all input;
//! - the machine decides what is said on the wire; the driver decides how (the socket, the
//!   framing in hakaru-proto).

#![deny(clippy::indexing_slicing)]

use std::time::Instant;

pub mod client;
pub mod iperf3;
pub mod limits;
pub mod netperf;
pub mod ntttcp;
pub mod server;
pub mod udpst;
pub mod udpst_client;
pub mod udpst_pace;
mod udpst_rx;

#[cfg(test)]
mod pair_tests;
#[cfg(test)]
mod sweep;

/// The contract every session machine here keeps (the module's conventions, as a trait): its
/// driver gives it inputs and deadlines and carries out its outputs, in order.
pub trait Machine {
    /// What happened: a decoded message, the peer closing, the data plane's report, an answer
    /// the machine asked the driver for.
    type Input;
    /// What to do: send this, start or stop the data plane, end the session.
    type Output;

    /// Takes one input that happened at `now`.
    fn handle(&mut self, input: Self::Input, now: Instant);

    /// Acts on whatever deadline `now` has reached (nothing before [`Machine::timeout`]).
    fn handle_timeout(&mut self, now: Instant);

    /// The next instant at which [`Machine::handle_timeout`] has something to do; `None`
    /// while only an input can move the session on.
    fn timeout(&self) -> Option<Instant>;

    /// The next action, in order; `None` when there is nothing to do until the next input.
    fn poll_output(&mut self) -> Option<Self::Output>;

    /// True once the session has given (or queued) its end; from then on every input is
    /// ignored and nothing more is said.
    fn is_done(&self) -> bool;
}
