//! UDP test datagrams and flow hellos as a receiver and the server's UDP port read them.
#![no_main]

use hakaru_proto::datagram::{read_header, FlowHello, Framing, Layout};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = FlowHello::decode(data);
    let _ = read_header(data);
    let _ = Layout::for_length(data.len());
    for f in [
        Framing::Hakaru,
        Framing::Iperf3 { seq64: false },
        Framing::Iperf3 { seq64: true },
    ] {
        let _ = f.read(data, 0);
        let _ = f.read(data, 7);
    }
});
