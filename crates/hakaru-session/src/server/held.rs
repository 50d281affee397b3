//! A held start: the client sets the test up and decides the instant it begins (`flows_ready`,
//! and for a bulk test `start_at` before it).

use std::time::Instant;

use hakaru_proto::Message;

use super::{closed_text, shape, Input, RemoteSpec, Session, Shape, State, HOLD_TIMEOUT};

impl Session {
    /// The client's `start_at`: the data begins at that instant (the driver's side waits for
    /// it, at most a second). Only a held start of a bulk test schedules, once.
    pub(super) fn schedule(&mut self, at_unix: f64) -> Result<(), (String, bool)> {
        // Bulk tests without latency probes, as the client's `can_schedule`.
        let bulk = matches!(self.spec, Some(RemoteSpec::Tcp(_) | RemoteSpec::Udp(_)))
            && self.probe_flow.is_none();
        if !self.held || !bulk || self.start_at.is_some() {
            return Err((
                "unexpected start_at message: only a held start of a tcp or udp test without latency probes is scheduled, once".into(),
                true,
            ));
        }
        if !(at_unix.is_finite() && at_unix > 0.0) {
            return Err((format!("start_at {at_unix} is not an instant"), true));
        }
        self.start_at = Some(at_unix);
        Ok(())
    }

    pub(super) fn hold(&mut self, now: Instant) {
        self.state = State::Held {
            deadline: now + HOLD_TIMEOUT,
        };
    }

    pub(super) fn on_held(&mut self, input: Input, deadline: Instant, now: Instant) {
        match input {
            Input::Message(Message::FlowsReady) => match self.spec.as_ref().map(shape) {
                Some(Shape::Connect) => self.open_listener(),
                _ => self.start(now),
            },
            Input::Message(Message::Keepalive) => self.state = State::Held { deadline },
            Input::Message(Message::StartAt { at_unix }) => match self.schedule(at_unix) {
                Ok(()) => self.state = State::Held { deadline },
                Err((why, tell)) => self.abort(why, tell),
            },
            Input::Message(Message::Error { message }) => {
                self.abort(format!("client: {message}"), false)
            }
            Input::Message(other) => self.abort(
                format!(
                    "unexpected {} message while the start was held",
                    other.name()
                ),
                true,
            ),
            Input::Closed => self.abort(
                format!("while the start was held: {}", closed_text()),
                false,
            ),
            Input::Garbage(e) | Input::ReadFailed(e) => {
                self.abort(format!("while the start was held: {e}"), false)
            }
            _ => self.state = State::Held { deadline },
        }
    }
}

pub(super) fn held_too_long() -> String {
    format!(
        "the client held the start for more than {} s",
        HOLD_TIMEOUT.as_secs()
    )
}
