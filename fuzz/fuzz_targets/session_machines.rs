//! Every session machine driven through its one contract (`hakaru_session::Machine`) by a
//! script the input picks: the first byte chooses the machine, then each byte an input from
//! that machine's alphabet (bytes or frames as a peer would send them, with a length-prefixed
//! chunk of the input; what a driver reports: admission answers, data paths, the data plane's
//! end, failures) or a step of virtual time. Whatever comes, a machine must not panic, must end
//! at most once, say nothing after its end, and report `is_done` exactly when its end is out.
#![no_main]

use std::time::{Duration, Instant};

use hakaru_model::{End, SideReport, TcpSpec, TestSpec};
use hakaru_proto::native::{Decoder, MAX_FIRST_FRAMES};
use hakaru_session::{client, iperf3, netperf, ntttcp, server as native, Machine};
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

/// The native messages a chunk of a peer's bytes completes, then the decoder's error if any.
fn frames<T>(
    dec: &mut Decoder,
    bytes: &[u8],
    message: impl Fn(hakaru_proto::Message) -> T,
    bad: impl Fn(hakaru_proto::ProtoError) -> T,
) -> Vec<T> {
    dec.feed(bytes);
    let mut v = vec![];
    loop {
        match dec.next_message() {
            Ok(Some(m)) => v.push(message(m)),
            Ok(None) => return v,
            Err(e) => {
                v.push(bad(e));
                return v;
            }
        }
    }
}

fn report(end: End) -> Box<SideReport> {
    Box::new(SideReport::flows_only(end, vec![]))
}

/// A machine under the harness: how to make one, its alphabet, and which output is its end.
trait Fuzzed: Machine + Sized {
    /// What decoding peer bytes needs to keep between inputs (a frame decoder).
    type Ctx: Default;
    fn make(now: Instant, data: &mut &[u8], ctx: &mut Self::Ctx) -> Self;
    /// The inputs byte `op` picks (taking a chunk of `data` if it needs bytes); `None`: let
    /// `op` seconds of virtual time pass instead.
    fn inputs(op: u8, data: &mut &[u8], ctx: &mut Self::Ctx) -> Option<Vec<Self::Input>>;
    fn is_end(o: &Self::Output) -> bool;
}

/// The one driver: the contract's checks after every step.
fn drive<M: Fuzzed>(mut data: &[u8]) {
    let mut now = Instant::now();
    let mut ctx = M::Ctx::default();
    let mut m = M::make(now, &mut data, &mut ctx);
    let mut ended = false;
    let drain = |m: &mut M, ended: &mut bool| {
        while let Some(o) = m.poll_output() {
            assert!(!*ended, "an output after the end");
            *ended |= M::is_end(&o);
        }
        assert_eq!(m.is_done(), *ended, "is_done disagrees with the end given");
    };
    drain(&mut m, &mut ended);
    while let Some((&op, rest)) = data.split_first() {
        data = rest;
        match M::inputs(op, &mut data, &mut ctx) {
            Some(inputs) => {
                for i in inputs {
                    m.handle(i, now);
                    drain(&mut m, &mut ended);
                }
            }
            None => {
                now += Duration::from_secs(u64::from(op));
                m.handle_timeout(now);
                drain(&mut m, &mut ended);
            }
        }
    }
}

impl Fuzzed for native::Session {
    type Ctx = Decoder;
    fn make(now: Instant, _: &mut &[u8], dec: &mut Decoder) -> Self {
        *dec = Decoder::with_max(MAX_FIRST_FRAMES);
        dec.feed(&hakaru_proto::MAGIC);
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
        native::Session::new(cfg, hello, now)
    }
    fn inputs(op: u8, data: &mut &[u8], dec: &mut Decoder) -> Option<Vec<native::Input>> {
        use native::Input as I;
        Some(match op % 8 {
            0 => frames(dec, chunk(data), I::Message, |e| I::Garbage(e.to_string())),
            1 => vec![I::Admitted {
                test_id: 1,
                token: "00".into(),
            }],
            2 => vec![I::PathArrived {
                flow: u32::from(op / 8),
            }],
            3 => vec![I::SideDone(report(End::Server))],
            4 => vec![I::ConnectListening { port: 1 }],
            5 => vec![I::Refused("no".into())],
            6 => vec![if op > 128 { I::Closed } else { I::Shutdown }],
            _ => return None,
        })
    }
    fn is_end(o: &native::Output) -> bool {
        matches!(o, native::Output::End(_))
    }
}

impl Fuzzed for client::Session {
    type Ctx = Decoder;
    fn make(now: Instant, _: &mut &[u8], dec: &mut Decoder) -> Self {
        *dec = Decoder::with_max(MAX_FIRST_FRAMES);
        let cfg = client::Config {
            peer: "192.0.2.1:5201".into(),
            spec: TestSpec::Tcp(TcpSpec::default()),
            held_start: false,
            software: "fuzz".into(),
            host: None,
            nonce: "00".into(),
            psk: None,
            cubic_on_loopback: None,
            keepalive_every: Duration::from_secs(2),
            silence: Duration::from_secs(5),
        };
        client::Session::new(cfg, now, 1_000_000.0)
    }
    fn inputs(op: u8, data: &mut &[u8], dec: &mut Decoder) -> Option<Vec<client::Input>> {
        use client::Input as I;
        Some(match op % 9 {
            0 => frames(dec, chunk(data), I::Message, |e| {
                I::Failed(client::Fault::Io(e.to_string()))
            }),
            1 => vec![I::FlowsOpen],
            2 => vec![I::GateOpen { at_unix: None }],
            3 => vec![I::LocalDone {
                error: (op > 128).then(|| "reset".to_string()),
            }],
            4 => vec![I::LocalReport(report(End::Client))],
            5 => vec![I::LocalSendDone(vec![(0, u64::from(op))])],
            6 => vec![I::Stop],
            7 => vec![I::Failed(client::Fault::Closed)],
            _ => return None,
        })
    }
    fn is_end(o: &client::Output) -> bool {
        matches!(o, client::Output::End(_))
    }
}

impl Fuzzed for iperf3::server::Session {
    type Ctx = ();
    fn make(now: Instant, data: &mut &[u8], _: &mut ()) -> Self {
        let first = chunk(data);
        iperf3::server::Session::new(iperf3::server::Config::default(), first, now)
    }
    fn inputs(op: u8, data: &mut &[u8], _: &mut ()) -> Option<Vec<iperf3::server::Input>> {
        use iperf3::server::Input as I;
        Some(vec![match op % 10 {
            0 => I::Bytes(chunk(data).to_vec()),
            1 => I::Admitted,
            2 => I::StreamArrived,
            3 => I::SideDone {
                error: (op > 128).then(|| "reset".to_string()),
            },
            4 => I::Report(Box::new(iperf3::results::Collected {
                report: hakaru_model::SideReport::flows_only(hakaru_model::End::Server, vec![]),
                samples: vec![],
                peer: "192.0.2.1:40000".parse().ok()?,
                local: "192.0.2.2:5201".into(),
                now_unix: 0.0,
            })),
            5 => I::Busy("busy".into()),
            6 => I::Closed,
            7 => I::Failed(i32::from(op), "failed".into()),
            8 => I::Shutdown,
            _ => return None,
        }])
    }
    fn is_end(o: &iperf3::server::Output) -> bool {
        matches!(o, iperf3::server::Output::End(_))
    }
}

impl Fuzzed for iperf3::client::Session {
    type Ctx = ();
    fn make(now: Instant, _: &mut &[u8], _: &mut ()) -> Self {
        let params = serde_json::json!({"tcp": true, "time": 10, "parallel": 1});
        iperf3::client::Session::new(&[b'a'; 37], params, Some(Duration::from_secs(10)), now)
    }
    fn inputs(op: u8, data: &mut &[u8], _: &mut ()) -> Option<Vec<iperf3::client::Input>> {
        use iperf3::client::Input as I;
        Some(vec![match op % 10 {
            0 => I::Bytes(chunk(data).to_vec()),
            1 => I::StreamsOpen,
            2 => I::AmountDone,
            3 => I::Interrupt,
            4 => I::SideFailed("stream".into()),
            5 => I::Landed,
            6 => I::Closed,
            7 => I::ReadFailed("reset".into()),
            8 => I::Failed(iperf3::client::Error::Terminated),
            _ => return None,
        }])
    }
    fn is_end(o: &iperf3::client::Output) -> bool {
        matches!(o, iperf3::client::Output::End(_))
    }
}

impl Fuzzed for netperf::server::Session {
    type Ctx = ();
    fn make(now: Instant, _: &mut &[u8], _: &mut ()) -> Self {
        netperf::server::Session::new(netperf::server::Config::default(), now)
    }
    fn inputs(op: u8, data: &mut &[u8], _: &mut ()) -> Option<Vec<netperf::server::Input>> {
        use netperf::server::Input as I;
        Some(vec![match op % 8 {
            0 => I::Bytes(chunk(data).to_vec()),
            1 => I::PeerClosed,
            2 => I::DataDone(Box::default()),
            3 => I::DataFailed {
                errno: i32::from(op),
                why: "reset".into(),
            },
            4 => I::Refused {
                errno: 1,
                why: "refused".into(),
            },
            5 => I::Failed("failed".into()),
            6 => I::Shutdown,
            _ => return None,
        }])
    }
    fn is_end(o: &netperf::server::Output) -> bool {
        matches!(o, netperf::server::Output::End(_))
    }
}

impl Fuzzed for netperf::client::Session {
    type Ctx = ();
    fn make(now: Instant, _: &mut &[u8], _: &mut ()) -> Self {
        let spec = TestSpec::Tcp(TcpSpec::default());
        let plan = netperf::request::plan(&spec, false).expect("a TCP test has a netperf plan");
        let req = plan.requests.first().expect("one request");
        netperf::client::Session::new(req, None, now)
    }
    fn inputs(op: u8, data: &mut &[u8], _: &mut ()) -> Option<Vec<netperf::client::Input>> {
        use netperf::client::Input as I;
        Some(vec![match op % 6 {
            0 => I::Bytes(chunk(data).to_vec()),
            1 => I::Closed,
            2 => I::ReadFailed("reset".into()),
            3 => I::DataDone,
            4 => I::Failed("failed".into()),
            _ => return None,
        }])
    }
    fn is_end(o: &netperf::client::Output) -> bool {
        matches!(o, netperf::client::Output::End(_))
    }
}

impl Fuzzed for ntttcp::server::Session {
    type Ctx = ();
    fn make(now: Instant, _: &mut &[u8], _: &mut ()) -> Self {
        ntttcp::server::Session::new(now)
    }
    fn inputs(op: u8, data: &mut &[u8], _: &mut ()) -> Option<Vec<ntttcp::server::Input>> {
        use ntttcp::server::Input as I;
        Some(vec![match op % 12 {
            0 => I::Bytes(chunk(data).to_vec()),
            1 => I::Joined { busy: op > 128 },
            2 => I::Negotiated(i32::from(op) - 100),
            3 => I::Go { owner: op > 128 },
            4 => I::Wait,
            5 => I::Refused("refused".into()),
            6 => I::SideDone {
                error: (op > 128).then(|| "reset".to_string()),
            },
            7 => I::Closed,
            8 => I::ReadFailed("reset".into()),
            9 => I::Failed("failed".into()),
            10 => I::Shutdown,
            _ => return None,
        }])
    }
    fn is_end(o: &ntttcp::server::Output) -> bool {
        matches!(o, ntttcp::server::Output::End(_))
    }
}

impl Fuzzed for ntttcp::client::Session {
    type Ctx = ();
    fn make(now: Instant, data: &mut &[u8], _: &mut ()) -> Self {
        let proposed = data.first().map_or(10, |&b| i32::from(b) - 20);
        ntttcp::client::Session::new(proposed, now)
    }
    fn inputs(op: u8, data: &mut &[u8], _: &mut ()) -> Option<Vec<ntttcp::client::Input>> {
        use ntttcp::client::Input as I;
        Some(vec![match op % 8 {
            0 => I::Bytes(chunk(data).to_vec()),
            1 => I::Opened,
            2 => I::SideDone {
                ran: Duration::from_millis(u64::from(op) * 40),
            },
            3 => I::Interrupt,
            4 => I::Closed,
            5 => I::ReadFailed("reset".into()),
            6 => I::Failed("failed".into()),
            _ => return None,
        }])
    }
    fn is_end(o: &ntttcp::client::Output) -> bool {
        matches!(o, ntttcp::client::Output::End(_))
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 8 {
        0 => drive::<native::Session>(rest),
        1 => drive::<client::Session>(rest),
        2 => drive::<iperf3::server::Session>(rest),
        3 => drive::<iperf3::client::Session>(rest),
        4 => drive::<netperf::server::Session>(rest),
        5 => drive::<netperf::client::Session>(rest),
        6 => drive::<ntttcp::server::Session>(rest),
        _ => drive::<ntttcp::client::Session>(rest),
    }
});
