//! sockperf's message header and TCP framing as hakaru's sockperf port reads them.
#![no_main]

use hakaru_proto::sockperf::{parse, parse_datagram, reply_for, verdict, Reassembler, MAX_TCP_MESSAGE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = parse_datagram(data, 65_507) {
        let _ = verdict(&h);
    }
    let _ = reply_for(data, 65_507);
    let mut r = Reassembler::new(MAX_TCP_MESSAGE);
    // Two reads, split where the first byte says.
    let cut = data.first().map_or(0, |&c| (c as usize).min(data.len()));
    for part in [&data[..cut], &data[cut..]] {
        r.extend(part);
        loop {
            match r.next_message() {
                Ok(Some(msg)) => {
                    if let Ok(h) = parse(msg, MAX_TCP_MESSAGE) {
                        let _ = verdict(&h);
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
});
