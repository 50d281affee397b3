//! The server session machines driven by a script the input picks: control bytes (iperf3) or
//! frames (native) as a client would send them, interleaved with what a driver reports
//! (admission answers, data paths, the data plane's end, failures) and with virtual time.
//! A machine must never panic, must end at most once, and must say nothing after its end.
#![no_main]

use std::time::{Duration, Instant};

use hakaru_model::{End, SideReport};
use hakaru_proto::native::{Decoder, MAX_FIRST_FRAMES};
use hakaru_session::{iperf3::server as iperf3, server as native};
use hakaru_session::Machine as _;
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

fn report() -> Box<SideReport> {
    Box::new(SideReport::flows_only(End::Server, vec![]))
}

/// Counts the ends and checks nothing follows one.
#[derive(Default)]
struct Ends {
    ended: bool,
}

impl Ends {
    fn saw(&mut self, is_end: bool) {
        assert!(!self.ended, "an output after the end");
        self.ended |= is_end;
    }
}

fn drive_iperf3(mut data: &[u8]) {
    let mut now = Instant::now();
    let first = chunk(&mut data);
    let mut s = iperf3::Session::new(iperf3::Config::default(), first, now);
    let mut ends = Ends::default();
    while let Some((&op, rest)) = data.split_first() {
        data = rest;
        let input = match op % 9 {
            0 => iperf3::Input::Bytes(chunk(&mut data).to_vec()),
            1 => iperf3::Input::Planned {
                streams: usize::from(op / 9 % 4),
            },
            2 => iperf3::Input::StreamArrived,
            3 => iperf3::Input::SideDone {
                error: (op > 128).then(|| "reset".to_string()),
            },
            4 => iperf3::Input::Answer(serde_json::json!({})),
            5 => iperf3::Input::Busy("busy".into()),
            6 => iperf3::Input::Closed,
            7 => iperf3::Input::Failed(i32::from(op), "failed".into()),
            _ => {
                now += Duration::from_secs(u64::from(op));
                s.handle_timeout(now);
                while let Some(o) = s.poll_output() {
                    ends.saw(matches!(o, iperf3::Output::End(_)));
                }
                continue;
            }
        };
        s.handle(input, now);
        while let Some(o) = s.poll_output() {
            ends.saw(matches!(o, iperf3::Output::End(_)));
        }
    }
}

fn drive_native(mut data: &[u8]) {
    let mut now = Instant::now();
    let cfg = native::Config {
        psk: None,
        nonce: None,
        info: hakaru_proto::ServerInfo::default(),
        max_duration: Some(Duration::from_secs(60)),
        udp_port: 5201,
    };
    let hello = native::Hello {
        protocol: hakaru_proto::PROTOCOL_VERSION,
        software: "fuzz".into(),
        nonce: None,
    };
    let mut s = native::Session::new(cfg, hello, now);
    let mut dec = Decoder::with_max(MAX_FIRST_FRAMES);
    dec.feed(&hakaru_proto::MAGIC);
    let mut ends = Ends::default();
    while let Some((&op, rest)) = data.split_first() {
        data = rest;
        let inputs: Vec<native::Input> = match op % 8 {
            0 => {
                dec.feed(chunk(&mut data));
                let mut v = vec![];
                loop {
                    match dec.next_message() {
                        Ok(Some(m)) => v.push(native::Input::Message(m)),
                        Ok(None) => break,
                        Err(e) => {
                            v.push(native::Input::Garbage(e.to_string()));
                            break;
                        }
                    }
                }
                v
            }
            1 => vec![native::Input::Admitted {
                test_id: 1,
                token: "00".into(),
            }],
            2 => vec![native::Input::PathArrived {
                flow: u32::from(op / 8),
            }],
            3 => vec![native::Input::SideDone(report())],
            4 => vec![native::Input::ConnectListening { port: 1 }],
            5 => vec![native::Input::Refused("no".into())],
            6 => vec![native::Input::Closed],
            _ => {
                now += Duration::from_secs(u64::from(op));
                s.handle_timeout(now);
                while let Some(o) = s.poll_output() {
                    ends.saw(matches!(o, native::Output::End(_)));
                }
                continue;
            }
        };
        for i in inputs {
            s.handle(i, now);
            while let Some(o) = s.poll_output() {
                ends.saw(matches!(o, native::Output::End(_)));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((&which, rest)) if which % 2 == 0 => drive_iperf3(rest),
        Some((_, rest)) => drive_native(rest),
        None => {}
    }
});
