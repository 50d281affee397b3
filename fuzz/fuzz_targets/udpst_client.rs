//! The OB-UDPST (RFC 9946) client machine driven by a script the input picks: datagrams as a
//! server might send them (setup response, activation response, load or status PDUs, garbage),
//! interleaved with virtual time. The machine must never panic, and every phase must end by
//! its deadline once time moves on.
#![no_main]

use std::time::{Duration, Instant};

use hakaru_model::{UdpstDirection, UdpstSpec};
use hakaru_proto::udpst::{Activation, LoadHdr, SetupResponse, Status};
use hakaru_session::udpst_client::{Phase, UdpstClient};
use libfuzzer_sys::fuzz_target;

/// Takes a chunk: one length byte, then that many bytes (fewer at the end of the input).
fn chunk<'a>(data: &mut &'a [u8]) -> &'a [u8] {
    let Some((&n, rest)) = data.split_first() else {
        return &[];
    };
    let n = (n as usize).min(rest.len());
    let (c, rest) = rest.split_at(n);
    *data = rest;
    c
}

fuzz_target!(|input: &[u8]| {
    let _ = SetupResponse::parse(input).map(|r| r.refusal());
    let _ = Activation::parse(input);
    let _ = LoadHdr::parse(input);
    let _ = Status::parse(input);
    let mut data = input;
    let dir = if data.first().is_some_and(|b| b & 1 == 1) {
        UdpstDirection::Up
    } else {
        UdpstDirection::Down
    };
    let spec = UdpstSpec {
        server: "127.0.0.1:24601".into(),
        direction: dir,
        duration_s: 5,
        jumbo: true,
        traditional: false,
        row: None,
        start_only: false,
        max_mbps: 0,
        algorithm_c: false,
        trial_ms: 50,
        sub_interval_ms: 1000,
    };
    let t0 = Instant::now();
    let (mut c, _) = UdpstClient::new(&spec, 1, false, t0);
    let mut now = t0;
    let mut steps = 0;
    while !data.is_empty() && steps < 10_000 {
        steps += 1;
        let op = data[0];
        data = &data[1..];
        let wall = (u32::from(op) << 20, u32::from(op) * 1000);
        match op % 4 {
            0 => {
                let _ = c.on_control(chunk(&mut data), now);
            }
            1 => c.on_datagram(chunk(&mut data), now, wall),
            2 => now += Duration::from_millis(u64::from(op)),
            _ => {
                if let Some(b) = c.on_tick(now, wall) {
                    assert!(!b.is_empty());
                }
                if c.sending() {
                    let _ = c.next_load(64, now, wall);
                }
            }
        }
    }
    // Time alone ends every phase.
    for _ in 0..200 {
        now += Duration::from_millis(100);
        c.on_tick(now, (0, 0));
    }
    assert!(
        matches!(c.phase(), Phase::Done | Phase::Failed(_)),
        "{:?} after 20 s of silence",
        c.phase()
    );
    let _ = c.result();
});
