//! ntttcp's sync words (`hakaru_proto::ntttcp`) and both sync machines, driven by a script
//! the input picks: bytes as a peer would send them (split anywhere), the driver's answers
//! and virtual time. Nothing may panic, a machine ends at most once and says nothing after.
#![no_main]

use std::time::{Duration, Instant};

use hakaru_proto::ntttcp::{command_duration, decode, word_name, Request, StartReply, Words};
use hakaru_session::ntttcp::{client, server};
use hakaru_session::Machine as _;
use libfuzzer_sys::fuzz_target;

/// Takes a chunk: one length byte, then that many bytes (fewer at the end of the input).
fn chunk<'a>(data: &mut &'a [u8]) -> &'a [u8] {
    let Some((&n, rest)) = data.split_first() else {
        return &[];
    };
    let n = (n as usize % 16).min(rest.len());
    let (c, rest) = rest.split_at(n);
    *data = rest;
    c
}

fn word_of(c: &[u8]) -> i32 {
    decode(c).unwrap_or(c.first().map_or(0, |&b| i32::from(b)))
}

fn server_input(op: u8, c: &[u8]) -> server::Input {
    use server::Input as I;
    match op % 11 {
        0 | 1 => I::Bytes(c.to_vec()),
        2 => I::Closed,
        3 => I::ReadFailed("x".into()),
        4 => I::Joined { busy: c.len() % 2 == 1 },
        5 => I::Negotiated(word_of(c)),
        6 => I::Go { owner: c.len() % 2 == 0 },
        7 => I::Wait,
        8 => I::Refused("r".into()),
        9 => I::SideDone { error: (c.len() % 3 == 0).then(|| "e".to_string()) },
        _ => I::Failed("f".into()),
    }
}

fn client_input(op: u8, c: &[u8]) -> client::Input {
    use client::Input as I;
    match op % 7 {
        0 | 1 => I::Bytes(c.to_vec()),
        2 => I::Closed,
        3 => I::Opened,
        4 => I::SideDone { ran: Duration::from_secs(u64::from(c.first().copied().unwrap_or(0))) },
        5 => I::Interrupt,
        _ => I::Failed("f".into()),
    }
}

fuzz_target!(|data: &[u8]| {
    // The codec alone.
    let mut w = Words::new();
    for x in w.feed(data) {
        let _ = (Request::from_word(x), StartReply::from_word(x), word_name(x), command_duration(x));
    }
    assert!(w.pending() < 4);

    let now = Instant::now();
    let mut s = server::Session::new(now);
    let mut c = client::Session::new(word_of(data), now);
    let (mut t, mut rest) = (now, data);
    let (mut s_ends, mut c_ends) = (0, 0);
    while let Some((&op, r)) = rest.split_first() {
        rest = r;
        let piece = chunk(&mut rest);
        match op >> 5 {
            0..=2 => s.handle(server_input(op, piece), t),
            3..=5 => c.handle(client_input(op, piece), t),
            6 => {
                t += Duration::from_millis(u64::from(op & 31) * 997);
                s.handle_timeout(t);
                c.handle_timeout(t);
            }
            _ => {
                if let Some(d) = s.timeout() {
                    t = t.max(d);
                    s.handle_timeout(t);
                }
            }
        }
        while let Some(o) = s.poll_output() {
            assert_eq!(s_ends, 0, "server output after its end: {o:?}");
            if matches!(o, server::Output::End(_)) {
                s_ends += 1;
            }
        }
        while let Some(o) = c.poll_output() {
            assert_eq!(c_ends, 0, "client output after its end: {o:?}");
            if matches!(o, client::Output::End(_)) {
                c_ends += 1;
            }
        }
    }
});
