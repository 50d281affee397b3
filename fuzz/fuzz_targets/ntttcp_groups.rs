//! The ntttcp receiver's data accept path: which group of senders a data connection is kept
//! for, driven by any sequence of events (senders joining, data connections from a few
//! addresses, senders asking to start, leaving, negotiating) and checked against a model after
//! every event (`hakaru_server::fuzzing::ntttcp_groups`). Nothing may panic, a connection is
//! kept only for a gathering group of its client with room, and nothing is held once every
//! sender has left.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hakaru_server::fuzzing::ntttcp_groups(data);
});
