//! The native control stream of an admitted test, as the server reads it: frames under the
//! post-admission limit (8 MiB, split at a point the input picks), each message, and what the
//! server does with one: a `send_done`'s per-flow counts recorded against the test's flows.
#![no_main]

use hakaru_engine::udp::record_peer_sent;
use hakaru_proto::native::{Decoder, Message, MAX_FRAME};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = (cut as usize).min(rest.len());
    // The session's decoder: the magic was read before admission.
    let mut dec = Decoder::after_magic();
    dec.set_max(MAX_FRAME);
    // An admitted UDP test's flows, ids as a bidirectional plan numbers them.
    let ids: Vec<u32> = (0..6).rev().collect();
    let mut slots = vec![None; ids.len()];
    for part in [&rest[..cut], &rest[cut..]] {
        dec.feed(part);
        loop {
            let m = match dec.next_message() {
                Ok(Some(m)) => m,
                Ok(None) | Err(_) => break,
            };
            let _ = m.name();
            if let Message::SendDone { sent } = &m {
                record_peer_sent(&ids, &mut slots, sent);
                for (slot, id) in slots.iter().zip(&ids) {
                    if let Some(&(_, n)) = sent.iter().rev().find(|(i, _)| i == id) {
                        assert_eq!(*slot, Some(n), "flow {id}");
                    }
                }
            }
            // What one end encodes, the other decodes: the message again.
            let frame = m.encode();
            let mut back = Decoder::after_magic();
            back.feed(&frame);
            match back.next_message() {
                Ok(Some(again)) => assert_eq!(again.name(), m.name()),
                other => panic!("{} re-encoded does not decode: {other:?}", m.name()),
            }
        }
    }
});
