//! iperf3's control channel as hakaru's server reads it: the cookie, then a length-prefixed
//! JSON document taken as parameters (checked as the server does, up to the test it would
//! run) and as results.
#![no_main]

use std::time::Duration;

use hakaru_proto::iperf3::{parse_cookie, Params, Results, COOKIE_LEN};
use hakaru_session::iperf3::plan::{check, Limits};
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
        // Checked as the server's machine does, against limits like a server's.
        if let Ok(p) = Params::from_json(&v) {
            let limits = Limits {
                max_duration: Some(Duration::from_secs(3600)),
                max_rate: Some(1e9),
                ..Limits::default()
            };
            if let Ok(plan) = check(&p, &limits) {
                assert_eq!(plan.flows.len() as u32 % p.parallel, 0);
            }
        }
    }
    let _ = Results::parse(&body[..len]);
});
