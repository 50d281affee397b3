//! The netperf server machine on virtual time, fed messages captured from stock netperf 2.7.1
//! (fuzz/corpus/netperf_control), whole and split at every byte.
#![allow(clippy::indexing_slicing)] // a test may index: a panic there is a failed assertion

use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_proto::netperf::{
    decode_response, decode_results, kind, OmniResponse, OmniResults, MSG_LEN,
};

use super::server::*;

const TCP_STREAM: &[u8] =
    include_bytes!("../../../../fuzz/corpus/netperf_control/capture-tcp_stream-request.bin");
const TCP_RR: &[u8] =
    include_bytes!("../../../../fuzz/corpus/netperf_control/capture-tcp_rr_count-request.bin");
const UDP_STREAM: &[u8] =
    include_bytes!("../../../../fuzz/corpus/netperf_control/capture-udp_stream_m14-request.bin");
const MAERTS: &[u8] =
    include_bytes!("../../../../fuzz/corpus/netperf_control/capture-tcp_maerts_cpu-request.bin");
const CRR: &[u8] = include_bytes!(
    "../../../../fuzz/corpus/netperf_control/capture-tcp_crr_passphrase-request.bin"
);
const PASSPHRASE: &[u8] = include_bytes!(
    "../../../../fuzz/corpus/netperf_control/capture-tcp_crr_passphrase-passphrase.bin"
);
const UDP_RR: &[u8] =
    include_bytes!("../../../../fuzz/corpus/netperf_control/capture-udp_rr-request.bin");

struct T {
    s: Session,
    now: Instant,
}

impl T {
    fn new(cfg: Config) -> T {
        let now = Instant::now();
        T {
            s: Session::new(cfg, now),
            now,
        }
    }

    fn drain(&mut self) -> Vec<Output> {
        let mut v = vec![];
        while let Some(o) = self.s.poll_output() {
            v.push(o);
        }
        v
    }

    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        self.s.handle(Input::Bytes(bytes.to_vec()), self.now);
        self.drain()
    }

    fn input(&mut self, i: Input) -> Vec<Output> {
        self.s.handle(i, self.now);
        self.drain()
    }

    fn advance(&mut self, d: Duration) -> Vec<Output> {
        self.now += d;
        if self.s.timeout().is_some_and(|t| t <= self.now) {
            self.s.handle_timeout(self.now);
        }
        self.drain()
    }
}

fn response() -> OmniResponse {
    OmniResponse {
        recv_buf_size: 131072,
        receive_size: 131072,
        recv_width: 2,
        send_buf_size: 16384,
        send_size: 16384,
        send_width: 2,
        flags: 0,
        cpu_rate: 0.0,
        data_port: 40000,
        socket_prio: -1,
        socket_tos: -1,
    }
}

fn sent(out: &[Output]) -> Vec<Vec<u8>> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send(b) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

/// Runs one test through the machine and checks each step; returns the results message.
fn one_test(t: &mut T, request: &[u8]) -> Vec<u8> {
    let out = t.feed(request);
    assert!(matches!(out.as_slice(), [Output::SetUp(_)]), "{out:?}");
    let out = t.input(Input::Ready(response()));
    assert_eq!(out.len(), 2, "{out:?}");
    let (errno, r) = decode_response(&sent(&out)[0]).unwrap();
    assert_eq!((errno, r.data_port), (0, 40000));
    assert_eq!(out[1], Output::StartData);
    // The data phase takes as long as it takes: the machine only bounds a stuck one.
    assert!(t.advance(Duration::from_secs(5)).is_empty());
    let figures = OmniResults {
        bytes_received: 12345,
        recv_calls: 3,
        elapsed_time: 1.0,
        ..OmniResults::default()
    };
    let out = t.input(Input::DataDone(Box::new(figures)));
    let msgs = sent(&out);
    assert_eq!(msgs.len(), 1);
    assert_eq!(decode_results(&msgs[0]).unwrap().bytes_received, 12345);
    msgs[0].clone()
}

#[test]
fn happy_path_of_every_captured_test_kind() {
    for req in [TCP_STREAM, TCP_RR, UDP_STREAM, MAERTS, CRR, UDP_RR] {
        let mut t = T::new(Config::default());
        one_test(&mut t, req);
        let out = t.input(Input::PeerClosed);
        assert_eq!(out, vec![Output::End(Ending::Closed { tests: 1 })]);
        assert!(t.s.is_done() && t.s.timeout().is_none());
        // Silence after the end.
        assert!(t.feed(TCP_STREAM).is_empty());
    }
}

#[test]
fn requests_split_at_every_byte() {
    for cut in 1..MSG_LEN {
        let mut t = T::new(Config::default());
        assert!(t.feed(&TCP_STREAM[..cut]).is_empty());
        let out = t.feed(&TCP_STREAM[cut..]);
        assert!(matches!(out.as_slice(), [Output::SetUp(_)]), "cut {cut}");
    }
}

#[test]
fn two_tests_on_one_connection() {
    let mut t = T::new(Config::default());
    one_test(&mut t, TCP_STREAM);
    one_test(&mut t, TCP_RR);
    assert_eq!(
        t.input(Input::PeerClosed),
        vec![Output::End(Ending::Closed { tests: 2 })]
    );
}

#[test]
fn passphrase_first_then_test() {
    let cfg = Config {
        passphrase: Some(b"secretword".to_vec()),
        ..Config::default()
    };
    let mut t = T::new(cfg.clone());
    assert!(t.feed(PASSPHRASE).is_empty());
    one_test(&mut t, CRR);

    // Wrong passphrase: closed without an answer.
    let mut t = T::new(Config {
        passphrase: Some(b"other".to_vec()),
        ..Config::default()
    });
    let out = t.feed(PASSPHRASE);
    assert!(
        matches!(out.as_slice(), [Output::End(Ending::BadPassphrase(_))]),
        "{out:?}"
    );

    // No passphrase at all: the request itself is refused, unanswered.
    let mut t = T::new(cfg.clone());
    let out = t.feed(TCP_STREAM);
    assert!(
        matches!(out.as_slice(), [Output::End(Ending::BadPassphrase(_))]),
        "{out:?}"
    );

    // Nothing within netserver's 20 s.
    let mut t = T::new(cfg);
    assert!(t
        .advance(PASSPHRASE_TIMEOUT - Duration::from_millis(1))
        .is_empty());
    let out = t.advance(Duration::from_millis(1));
    assert!(
        matches!(out.as_slice(), [Output::End(Ending::Failed(_))]),
        "{out:?}"
    );
}

#[test]
fn a_passphrase_the_server_did_not_ask_for_is_ignored() {
    let mut t = T::new(Config::default());
    assert!(t.feed(PASSPHRASE).is_empty());
    one_test(&mut t, TCP_STREAM);
}

fn message(kind: i32) -> Vec<u8> {
    let mut m = vec![0u8; MSG_LEN];
    m[..4].copy_from_slice(&kind.to_be_bytes());
    m
}

#[test]
fn housekeeping_and_unknown_types_are_answered_and_the_session_goes_on() {
    let mut t = T::new(Config {
        cpus: 2,
        ..Config::default()
    });
    let out = sent(&t.feed(&message(kind::CPU_CALIBRATE)));
    assert_eq!(out[0][..4], 5i32.to_be_bytes());
    assert_eq!(out[0][12..16], 2u32.to_be_bytes());
    let out = sent(&t.feed(&message(kind::DEBUG_ON)));
    assert_eq!(out[0][..4], kind::DEBUG_OK.to_be_bytes());
    for unknown in [10, 22, 500, 4, -7, i32::MAX] {
        let out = sent(&t.feed(&message(unknown)));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][4..8], 998i32.to_be_bytes(), "type {unknown}");
    }
    one_test(&mut t, TCP_STREAM);
}

fn omni_with(f: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut m = TCP_STREAM.to_vec();
    f(&mut m);
    m
}

fn set_word(m: &mut [u8], data_index: usize, v: u32) {
    let at = 8 + data_index * 4;
    m[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[test]
fn unsupported_tests_get_an_errno_never_a_hang() {
    let cases: Vec<(Vec<u8>, i32)> = vec![
        (omni_with(|m| set_word(m, 23, 132)), errno::EPROTONOSUPPORT), // SCTP
        (omni_with(|m| set_word(m, 21, 9)), errno::EAFNOSUPPORT),
        (
            // UDP, server sends only
            omni_with(|m| {
                set_word(m, 23, 17);
                set_word(m, 24, 2)
            }),
            errno::EOPNOTSUPP,
        ),
    ];
    for (req, want) in cases {
        let mut t = T::new(Config::default());
        let out = t.feed(&req);
        let msgs = sent(&out);
        assert_eq!(msgs.len(), 1, "{out:?}");
        assert_eq!(msgs[0][4..8], want.to_be_bytes());
        assert!(matches!(out.last(), Some(Output::End(Ending::Refused(_)))));
    }
}

#[test]
fn max_duration_refuses_longer_timed_tests() {
    let mut t = T::new(Config {
        max_duration: Some(Duration::from_secs(10)),
        ..Config::default()
    });
    let out = t.feed(&omni_with(|m| set_word(m, 14, 11)));
    assert_eq!(sent(&out)[0][4..8], errno::EINVAL.to_be_bytes());
    let mut t = T::new(Config {
        max_duration: Some(Duration::from_secs(10)),
        ..Config::default()
    });
    assert!(matches!(
        t.feed(&omni_with(|m| set_word(m, 14, 10))).as_slice(),
        [Output::SetUp(_)]
    ));
}

#[test]
fn refused_admission_is_told_with_its_errno() {
    let mut t = T::new(Config::default());
    t.feed(TCP_STREAM);
    let out = t.input(Input::Refused {
        errno: errno::EAGAIN,
        why: "busy".into(),
    });
    assert_eq!(sent(&out)[0][4..8], errno::EAGAIN.to_be_bytes());
    assert_eq!(
        out.last(),
        Some(&Output::End(Ending::Refused("busy".into())))
    );
}

#[test]
fn close_in_every_phase() {
    // Idle with half a message.
    let mut t = T::new(Config::default());
    t.feed(&TCP_STREAM[..100]);
    assert!(matches!(
        t.input(Input::PeerClosed).as_slice(),
        [Output::End(Ending::Failed(_))]
    ));
    // Setting up and running: the data plane is stopped.
    for running in [false, true] {
        let mut t = T::new(Config::default());
        t.feed(TCP_STREAM);
        if running {
            t.input(Input::Ready(response()));
        }
        let out = t.input(Input::PeerClosed);
        assert_eq!(out[0], Output::StopData);
        assert!(matches!(out[1], Output::End(Ending::Failed(_))));
    }
}

#[test]
fn timeouts_in_every_phase() {
    let mut t = T::new(Config::default());
    assert!(t
        .advance(IDLE_TIMEOUT - Duration::from_millis(1))
        .is_empty());
    assert!(matches!(
        t.advance(Duration::from_millis(1)).as_slice(),
        [Output::End(Ending::Failed(_))]
    ));

    let mut t = T::new(Config::default());
    t.feed(TCP_STREAM);
    assert!(matches!(
        t.advance(SETUP_TIMEOUT).as_slice(),
        [Output::End(Ending::Failed(_))]
    ));

    let mut t = T::new(Config {
        max_duration: Some(Duration::from_secs(60)),
        ..Config::default()
    });
    t.feed(TCP_STREAM);
    t.input(Input::Ready(response()));
    assert!(t.advance(Duration::from_secs(60)).is_empty());
    let out = t.advance(GRACE);
    assert_eq!(out[0], Output::StopData);
    assert!(matches!(out[1], Output::End(Ending::Failed(_))));
}

#[test]
fn bytes_during_a_test_wait_for_its_end_and_a_flood_ends_it() {
    let mut t = T::new(Config::default());
    t.feed(TCP_STREAM);
    t.input(Input::Ready(response()));
    // A request pipelined during the test is served after the results.
    assert!(t.feed(&message(kind::DEBUG_ON)).is_empty());
    let out = t.input(Input::DataDone(Box::default()));
    assert_eq!(sent(&out).len(), 2);

    let mut t = T::new(Config::default());
    t.feed(TCP_STREAM);
    t.input(Input::Ready(response()));
    let out = t.feed(&vec![0u8; 5 * MSG_LEN]);
    assert_eq!(out[0], Output::StopData);
    assert!(matches!(out[1], Output::End(Ending::Failed(_))));
}

#[test]
fn failed_actions_drop_what_was_queued() {
    let mut t = T::new(Config::default());
    t.feed(TCP_STREAM);
    t.s.handle(Input::Ready(response()), t.now);
    // The driver failed to send the response: StartData queued after it is dropped.
    assert!(matches!(t.s.poll_output(), Some(Output::Send(_))));
    let out = t.input(Input::Failed("write: broken pipe".into()));
    assert_eq!(out[0], Output::StopData);
    assert!(matches!(out[1], Output::End(Ending::Failed(_))));
    assert_eq!(out.len(), 2);
}

#[test]
fn data_failure_is_told_with_its_errno() {
    let mut t = T::new(Config::default());
    t.feed(TCP_STREAM);
    t.input(Input::Ready(response()));
    let out = t.input(Input::DataFailed {
        errno: 104,
        why: "reset".into(),
    });
    assert_eq!(sent(&out)[0][4..8], 104i32.to_be_bytes());
}

#[test]
fn every_input_in_every_phase_never_panics() {
    let inputs = || -> Vec<Input> {
        vec![
            Input::Bytes(TCP_STREAM.to_vec()),
            Input::Bytes(vec![0xff; 1000]),
            Input::PeerClosed,
            Input::ReadFailed("x".into()),
            Input::Ready(response()),
            Input::Refused {
                errno: 1,
                why: "x".into(),
            },
            Input::DataDone(Box::default()),
            Input::DataFailed {
                errno: 1,
                why: "x".into(),
            },
            Input::Failed("x".into()),
            Input::Shutdown,
        ]
    };
    // Reach each phase by a prefix of the happy path, then throw every input at it.
    for prefix in 0..4 {
        for pass in [false, true] {
            for (k, input) in inputs().into_iter().enumerate() {
                let mut t = T::new(Config {
                    passphrase: pass.then(|| b"secretword".to_vec()),
                    ..Config::default()
                });
                if pass && prefix > 0 {
                    t.feed(PASSPHRASE);
                }
                if prefix > 1 {
                    t.feed(TCP_STREAM);
                }
                if prefix > 2 {
                    t.input(Input::Ready(response()));
                }
                t.input(input);
                t.advance(Duration::from_secs(100_000));
                t.input(inputs().swap_remove(k % 3));
                // Every path ends within the timeouts, and is silent after.
                assert!(t.s.is_done() && t.s.timeout().is_none());
                assert!(t.feed(TCP_STREAM).is_empty());
            }
        }
    }
}

#[test]
fn only_progress_restarts_the_idle_timer_and_housekeeping_is_bounded() {
    // Housekeeping every 59 s does not keep a connection open past 60 s.
    let mut t = T::new(Config::default());
    assert!(t.advance(Duration::from_secs(30)).is_empty());
    assert_eq!(sent(&t.feed(&message(kind::DEBUG_ON))).len(), 1);
    let out = t.advance(Duration::from_secs(30));
    assert!(
        matches!(out.as_slice(), [Output::End(Ending::Failed(_))]),
        "{out:?}"
    );
    // A test's results start a fresh minute.
    let mut t = T::new(Config::default());
    t.advance(Duration::from_secs(50));
    one_test(&mut t, TCP_STREAM);
    assert!(t.advance(Duration::from_secs(59)).is_empty());
    assert!(!t.advance(Duration::from_secs(1)).is_empty());
    // The accepted passphrase is progress too.
    let mut t = T::new(Config {
        passphrase: Some(b"secretword".to_vec()),
        ..Config::default()
    });
    t.advance(Duration::from_secs(15));
    assert!(t.feed(PASSPHRASE).is_empty());
    assert!(t.advance(Duration::from_secs(59)).is_empty());
    // A flood of housekeeping requests ends the session; a test resets the count.
    let mut t = T::new(Config::default());
    for _ in 0..MAX_REQUESTS_BETWEEN_TESTS {
        assert_eq!(sent(&t.feed(&message(kind::CPU_CALIBRATE))).len(), 1);
    }
    one_test(&mut t, TCP_STREAM);
    for _ in 0..MAX_REQUESTS_BETWEEN_TESTS {
        assert_eq!(sent(&t.feed(&message(kind::DEBUG_ON))).len(), 1);
    }
    let out = t.feed(&message(kind::DEBUG_ON));
    match out.as_slice() {
        [Output::End(Ending::Failed(why))] => {
            assert!(why.contains("requests without a test"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn udp_rr_amplification_and_data_ports_are_refused_by_name() {
    let udp_rr = |req: u32, resp: u32| {
        omni_with(|m| {
            set_word(m, 23, 17);
            set_word(m, 24, 6);
            set_word(m, 5, req);
            set_word(m, 11, resp);
        })
    };
    for (req, resp, ok) in [
        (1, 1, true),
        (1, 1472, true),
        (4000, 4000, true),
        (u32::MAX, 1472, true), // -1: the default, one byte
        (1, 1473, false),
        (1, 65507, false),
        (2000, 2001, false),
    ] {
        let mut t = T::new(Config::default());
        let out = t.feed(&udp_rr(req, resp));
        if ok {
            assert!(
                matches!(out.as_slice(), [Output::SetUp(_)]),
                "{req},{resp}: {out:?}"
            );
        } else {
            assert_eq!(sent(&out)[0][4..8], errno::EINVAL.to_be_bytes());
            match out.last() {
                Some(Output::End(Ending::Refused(why))) => {
                    assert!(why.contains("1472") && why.contains("UDP_RR"), "{why}")
                }
                other => panic!("{other:?}"),
            }
        }
    }
    // TCP_RR keeps its sizes (TCP answers only a handshaken peer; --max-rate paces it).
    let mut t = T::new(Config::default());
    let out = t.feed(&omni_with(|m| {
        set_word(m, 24, 6);
        set_word(m, 5, 1);
        set_word(m, 11, 1 << 20);
    }));
    assert!(matches!(out.as_slice(), [Output::SetUp(_)]), "{out:?}");

    for (port, ok) in [
        (0, true),
        (1024, true),
        (65535, true),
        (80, false),
        (53, false),
        (70000, false),
    ] {
        let mut t = T::new(Config::default());
        let out = t.feed(&omni_with(|m| set_word(m, 20, port)));
        if ok {
            assert!(
                matches!(out.as_slice(), [Output::SetUp(_)]),
                "{port}: {out:?}"
            );
        } else {
            assert_eq!(sent(&out)[0][4..8], errno::EACCES.to_be_bytes(), "{port}");
            match out.last() {
                Some(Output::End(Ending::Refused(why))) => {
                    assert!(why.contains("--netperf-data-ports"), "{why}")
                }
                other => panic!("{other:?}"),
            }
        }
    }
    let mut t = T::new(Config {
        data_ports: (50000, 50010),
        ..Config::default()
    });
    assert!(matches!(
        t.feed(&omni_with(|m| set_word(m, 20, 50011))).last(),
        Some(Output::End(Ending::Refused(_)))
    ));
}

#[test]
fn every_input_in_every_state_keeps_the_conventions() {
    let path = || {
        vec![
            Input::Bytes(PASSPHRASE.to_vec()),
            Input::Bytes(TCP_STREAM.to_vec()),
            Input::Ready(response()),
            Input::DataDone(Box::default()),
            Input::Bytes(UDP_STREAM.to_vec()),
            Input::Refused {
                errno: 1,
                why: "refused".into(),
            },
            Input::PeerClosed,
        ]
    };
    let inputs = || {
        vec![
            Input::Bytes(PASSPHRASE.to_vec()),
            Input::Bytes(TCP_STREAM.to_vec()),
            Input::Bytes(TCP_STREAM[..100].to_vec()),
            Input::Bytes(vec![0xff; 1000]),
            Input::Bytes(vec![]),
            Input::PeerClosed,
            Input::ReadFailed("reset".into()),
            Input::Ready(response()),
            Input::Refused {
                errno: 1,
                why: "refused".into(),
            },
            Input::DataDone(Box::default()),
            Input::DataFailed {
                errno: 104,
                why: "reset".into(),
            },
            Input::Failed("failed".into()),
            Input::Shutdown,
        ]
    };
    let answers = || vec![Input::Ready(response()), Input::DataDone(Box::default())];
    let n = crate::sweep::Sweep {
        make: &|now| {
            Session::new(
                Config {
                    passphrase: Some(b"secretword".to_vec()),
                    ..Config::default()
                },
                now,
            )
        },
        path: &path,
        inputs: &inputs,
        answers: &answers,
    }
    .run();
    assert_eq!(n, 8 * 13);
}
