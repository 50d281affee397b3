//! The native control codec as a server reads it: bytes in any split, the magic, frames
//! under the pre-admission limit, messages, and a test request's validation.
#![no_main]

use hakaru_proto::native::{Decoder, Message, MAX_FIRST_FRAMES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the input is split, as reads would split it.
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = (cut as usize).min(rest.len());
    let mut dec = Decoder::with_max(MAX_FIRST_FRAMES);
    for part in [&rest[..cut], &rest[cut..]] {
        dec.feed(part);
        loop {
            match dec.next_message() {
                Ok(Some(Message::TestRequest { test, .. })) => {
                    if test.validate().is_ok() {
                        let _ = test.flow_plan();
                        let _ = test.kind().common().amount;
                    }
                }
                Ok(Some(m)) => {
                    let _ = m.name();
                    let _ = m.encode();
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
});
