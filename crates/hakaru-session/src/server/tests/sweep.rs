//! Every input in every state: the machine never panics, always ends within its deadlines, and
//! once over says nothing more.

use std::time::Duration;

use hakaru_model::{ConnectSpec, LatencySpec, TestSpec};
use hakaru_proto::auth::Psk;
use hakaru_proto::Message;

use super::*;

/// Every message a client could send, whatever the state.
fn messages() -> Vec<Message> {
    vec![
        Message::Hello {
            protocol: 1,
            software: "x".into(),
            host: None,
            nonce: None,
        },
        Message::Auth { proof: "00".into() },
        Message::TestRequest {
            test: Box::new(tcp(1)),
            held_start: true,
        },
        Message::Accepted {
            test_id: 1,
            token: "t".into(),
            probe_flow: None,
        },
        Message::Refused { reason: "r".into() },
        Message::DataHello {
            token: "t".into(),
            flow: 0,
        },
        Message::FlowsReady,
        Message::StartAt { at_unix: 2.5 },
        Message::StartAt { at_unix: f64::NAN },
        Message::ConnectPort {
            port: 1,
            server_closes: true,
        },
        Message::Start,
        Message::Stop,
        Message::Keepalive,
        Message::SendDone { sent: vec![] },
        Message::Finished { report: report() },
        Message::Error {
            message: "e".into(),
        },
    ]
}

/// Every event a driver could report, whatever the state.
fn events() -> Vec<Input> {
    let mut all: Vec<Input> = messages().into_iter().map(Input::Message).collect();
    all.extend([
        Input::Garbage("bad frame".into()),
        Input::ReadFailed("reset".into()),
        Input::Closed,
        Input::Admitted {
            test_id: 1,
            token: "t".into(),
        },
        Input::Refused("no".into()),
        Input::PathArrived { flow: 0 },
        Input::PathArrived { flow: 1 },
        Input::PathArrived { flow: u32::MAX },
        Input::ConnectListening { port: 1 },
        Input::SideDone(report()),
        Input::Shutdown,
        Input::Failed("f".into()),
    ]);
    all
}

/// A session brought `steps` steps down the happy path of `spec`.
fn reach(psk: bool, spec: &TestSpec, steps: usize) -> T {
    let mut t = T::new(config(psk));
    if psk {
        let proof = Psk::from_text(KEY, "t")
            .expect("key")
            .client_proof(SERVER_NONCE, CLIENT_NONCE);
        t.msg(Message::Auth { proof });
    }
    let path = [
        Input::Message(Message::TestRequest {
            test: Box::new(spec.clone()),
            held_start: steps % 2 == 1,
        }),
        Input::Admitted {
            test_id: 1,
            token: "t".into(),
        },
        Input::PathArrived { flow: 0 },
        Input::Message(Message::FlowsReady),
        Input::ConnectListening { port: 9 },
    ];
    for s in path.into_iter().take(steps) {
        t.input(s);
    }
    t
}

/// With only the driver's answers from then on, the session ends (admission and the listener
/// wait on the driver, which always answers; everything else has a deadline), exactly once,
/// and says nothing after.
fn check_it_ends(mut t: T, what: &str) {
    t.input(Input::Admitted {
        test_id: 1,
        token: "t".into(),
    });
    t.input(Input::ConnectListening { port: 9 });
    t.advance(Duration::from_secs(600));
    if t.ended().is_none() {
        t.input(Input::SideDone(report()));
        t.advance(Duration::from_secs(600));
    }
    assert!(t.ended().is_some(), "{what}: {:?}", t.out);
    let said = t.out.len();
    t.msg(Message::Keepalive);
    t.advance(Duration::from_secs(600));
    assert_eq!(t.out.len(), said, "{what}: said something after its end");
    let ends = t.out.iter().filter(|o| matches!(o, Output::End(_))).count();
    assert_eq!(ends, 1, "{what}");
}

#[test]
fn no_input_in_any_state_panics_or_hangs() {
    let specs = [
        tcp(1),
        udp(1),
        TestSpec::Connect(ConnectSpec::default()),
        TestSpec::Latency(LatencySpec::default()),
        super::probes::probed_tcp(1, hakaru_model::LatencyTransport::Udp),
    ];
    for psk in [false, true] {
        for spec in &specs {
            for steps in 0..6 {
                for (k, input) in events().into_iter().enumerate() {
                    let mut t = reach(psk, spec, steps);
                    t.input(input);
                    let what = format!("psk {psk}, {}, {steps} steps, input {k}", spec.name());
                    check_it_ends(t, &what);
                }
            }
        }
    }
}

/// The crate's one sweep ([`crate::sweep::Sweep`]) over a TCP test's happy path, as every
/// machine runs it.
#[test]
fn every_input_in_every_state_keeps_the_conventions() {
    let path = || {
        vec![
            Input::Message(Message::TestRequest {
                test: Box::new(tcp(1)),
                held_start: false,
            }),
            Input::Admitted {
                test_id: 1,
                token: "t".into(),
            },
            Input::PathArrived { flow: 0 },
            Input::Message(Message::FlowsReady),
            Input::Message(Message::Stop),
            Input::SideDone(report()),
            Input::Message(Message::Finished { report: report() }),
        ]
    };
    let answers = || {
        vec![
            Input::Admitted {
                test_id: 1,
                token: "t".into(),
            },
            Input::ConnectListening { port: 9 },
            Input::SideDone(report()),
        ]
    };
    let n = crate::sweep::Sweep {
        make: &|now| Session::new(config(false), hello(), now),
        path: &path,
        inputs: &events,
        answers: &answers,
    }
    .run();
    assert_eq!(n, 8 * events().len());
}
