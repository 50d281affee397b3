//! iperf2's UDP datagram header, test header and server report as a raw sink reads them.
#![no_main]

use hakaru_proto::iperf2::{ServerReport, TestHeader, UdpHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for seq64 in [false, true] {
        if let Some(h) = UdpHeader::decode(data, seq64) {
            let _ = h.is_fin();
            let _ = h.sent_secs();
        }
    }
    if let Some(t) = TestHeader::parse(data) {
        let _ = t.wants_ack();
        let _ = t.wants_server_send();
        let _ = t.amount_words();
    }
    if data.len() >= 4 {
        let flags = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
        let _ = TestHeader::len_from_flags(flags);
        let _ = TestHeader::plausible_flags(flags);
    }
    let _ = ServerReport::decode(data);
});
