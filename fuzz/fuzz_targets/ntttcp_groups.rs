//! The ntttcp receiver's data accept path: which group of senders a data connection is kept
//! for (`hakaru_session::ntttcp::front`), driven by any sequence of events (senders joining,
//! data connections from a few addresses, senders asking to start, leaving, negotiating) and
//! checked against a model after every event. Nothing may panic, a connection is kept only for
//! a gathering group of its client with room, and nothing is held once every sender has left.
//! The script and its model are the session crate's own test file, compiled in here: the
//! target reaches the groups through the crate's public API only.
#![no_main]

use hakaru_session::limits;
use hakaru_session::ntttcp::front;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/hakaru-session/src/ntttcp/script.rs"]
mod script;

fuzz_target!(|data: &[u8]| {
    script::run(data);
});
