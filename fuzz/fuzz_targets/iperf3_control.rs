//! iperf3's control channel as hakaru's server reads it: the cookie, then a length-prefixed
//! JSON document taken as parameters (checked as the server does, up to the test it would
//! run) and as results.
#![no_main]

use hakaru_proto::iperf3::{parse_cookie, Params, Results, COOKIE_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_cookie(&data[..data.len().min(COOKIE_LEN)]);
    if data.len() < 4 {
        return;
    }
    let len = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize;
    let body = &data[4..];
    if len > body.len() {
        return;
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body[..len]) {
        let _ = Params::from_json(&v);
        let _ = hakaru_server::fuzzing::iperf3_params(&v);
    }
    let _ = Results::parse(&body[..len]);
});
