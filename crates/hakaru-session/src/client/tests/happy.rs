//! The paths that end in a result.

use super::*;

#[test]
fn opens_with_a_hello_and_estimates_the_clock_from_the_welcome() {
    let mut r = Run::new(config(tcp()));
    let hello = Message::Hello {
        protocol: hakaru_proto::PROTOCOL_VERSION,
        software: "hakaru test".into(),
        host: Some("boot-1".into()),
        nonce: Some(NONCE.into()),
    };
    assert_eq!(r.outputs(), [Output::Open(hello)]);
    assert_eq!(r.m.timeout(), Some(r.at(10.0)));
    // Asked at UNIX0, answered 0.2 s later; the server's clock says UNIX0 + 100.1 then.
    let out = r.msg(0.2, welcome(None, Some(UNIX0 + 100.1), Some("boot-1")));
    let Some(Output::Server(facts)) = out.first() else {
        panic!("{out:?}")
    };
    let clock = facts.clock.expect("clock");
    assert!((clock.offset_s - 100.0).abs() < 1e-6, "{clock:?}");
    assert!((clock.round_trip_s - 0.2).abs() < 1e-6, "{clock:?}");
    assert!(facts.same_host, "same boot id, same host");
    assert_eq!(facts.os.as_deref(), Some("linux"));
    let request = Output::Send(Message::TestRequest {
        test: Box::new(tcp()),
        held_start: false,
    });
    assert_eq!(out.get(1), Some(&request));
    assert_eq!(r.m.timeout(), Some(r.at(10.2)), "the answer is due 10 s on");
}

#[test]
fn tcp_test_pairs_intervals_keeps_alive_and_ends_with_both_reports() {
    let mut r = Run::accepted(config(tcp()));
    assert_eq!(r.feed(0.3, Input::FlowsOpen), [], "no flows_ready for TCP");
    assert_eq!(r.m.timeout(), Some(r.at(10.3)), "start is due");
    assert_eq!(r.msg(0.4, Message::Start), [Output::StartLocal]);
    // Keepalive due 2 s after start, silence 5 s after it.
    assert_eq!(r.m.timeout(), Some(r.at(2.4)));
    assert_eq!(r.feed(1.4, Input::LocalSample(sample(0))), []);
    let out = r.msg(1.5, Message::Interval { sample: sample(0) });
    let [Output::Interval(rec)] = out.as_slice() else {
        panic!("{out:?}")
    };
    assert_eq!((rec.index, rec.flows.len()), (0, 1));
    assert_eq!(r.tick(2.4), [Output::Send(Message::Keepalive)]);
    assert_eq!(r.m.timeout(), Some(r.at(4.4)), "next keepalive");
    assert_eq!(r.feed(2.5, Input::LocalSample(sample(1))), []);
    assert_eq!(r.feed(2.6, Input::LocalDone { error: None }), []);
    assert_eq!(r.msg(2.7, finished()), [Output::CollectLocal]);
    assert_eq!(r.m.timeout(), None, "no deadline while this end winds up");
    assert_eq!(r.feed(2.8, Input::LocalSample(sample(2))), []);
    let out = r.feed(2.9, Input::LocalReport(Box::new(report(End::Client, None))));
    let indices: Vec<u32> = out
        .iter()
        .filter_map(|o| match o {
            Output::Interval(rec) => Some(rec.index),
            _ => None,
        })
        .collect();
    assert_eq!(
        indices,
        [1, 2],
        "intervals only this end reported come at the end"
    );
    let fin = Output::Send(Message::Finished {
        report: Box::new(report(End::Client, None)),
    });
    assert!(out.contains(&fin), "{out:?}");
    let Some(Ok(ended)) = ends(&out) else {
        panic!("{out:?}")
    };
    assert_eq!(ended.intervals.len(), 3);
    assert_eq!(ended.remote.end, End::Server);
    assert!(!ended.interrupted);
    // Ended: everything after is ignored.
    assert_eq!(r.msg(3.0, Message::Start), []);
    assert_eq!(r.tick(100.0), []);
}

#[test]
fn udp_test_says_flows_ready_and_passes_send_done_both_ways() {
    let mut r = Run::accepted(config(udp()));
    assert_eq!(
        r.feed(0.3, Input::FlowsOpen),
        [Output::Send(Message::FlowsReady)]
    );
    assert_eq!(r.msg(0.4, Message::Start), [Output::StartLocal]);
    let sent = vec![(0, 10)];
    assert_eq!(
        r.feed(1.0, Input::LocalSendDone(sent.clone())),
        [Output::Send(Message::SendDone { sent: sent.clone() })]
    );
    assert_eq!(
        r.msg(1.1, Message::SendDone { sent: sent.clone() }),
        [Output::PeerSendDone(sent)]
    );
    r.feed(1.2, Input::LocalDone { error: None });
    assert_eq!(r.msg(1.3, finished()), [Output::CollectLocal]);
    let out = r.feed(1.4, Input::LocalReport(Box::new(report(End::Client, None))));
    assert!(matches!(ends(&out), Some(Ok(_))), "{out:?}");
}

#[test]
fn held_start_waits_at_the_gate_before_flows_ready() {
    let mut cfg = config(tcp());
    cfg.held_start = true;
    let mut r = Run::new(cfg);
    r.outputs();
    let out = r.msg(0.1, welcome(None, None, None));
    let request = Output::Send(Message::TestRequest {
        test: Box::new(tcp()),
        held_start: true,
    });
    assert!(out.contains(&request), "{out:?}");
    r.msg(0.2, accepted());
    assert_eq!(r.feed(0.3, Input::FlowsOpen), [Output::WaitGate]);
    assert_eq!(r.m.timeout(), None, "a gate may hold as long as it likes");
    assert_eq!(
        r.feed(60.0, Input::GateOpen { at_unix: None }),
        [Output::Send(Message::FlowsReady)]
    );
    assert_eq!(r.m.timeout(), Some(r.at(70.0)));
    assert_eq!(r.msg(60.1, Message::Start), [Output::StartLocal]);
}

/// A held start of `spec`, through `accepted` and the open flows to the gate.
fn at_the_gate(spec: TestSpec) -> Run {
    let mut cfg = config(spec);
    cfg.held_start = true;
    let mut r = Run::new(cfg);
    r.outputs();
    r.msg(0.1, welcome(None, None, None));
    r.msg(0.2, accepted());
    assert_eq!(r.feed(0.3, Input::FlowsOpen), [Output::WaitGate]);
    r
}

#[test]
fn a_scheduled_start_tells_the_server_its_instant_before_flows_ready() {
    for spec in [tcp(), udp()] {
        let mut r = at_the_gate(spec);
        let at = 1_764_000_000.25;
        assert_eq!(
            r.feed(0.4, Input::GateOpen { at_unix: Some(at) }),
            [
                Output::Send(Message::StartAt { at_unix: at }),
                Output::Send(Message::FlowsReady)
            ]
        );
        assert_eq!(r.m.start_at(), Some(at));
        assert_eq!(r.msg(0.5, Message::Start), [Output::StartLocal]);
    }
    // A test whose data cannot wait for an instant (a connection-rate test) ignores it: its
    // driver waited for the instant before opening the gate.
    let mut r = at_the_gate(TestSpec::Connect(Default::default()));
    assert_eq!(
        r.feed(0.4, Input::GateOpen { at_unix: Some(2.0) }),
        [Output::Send(Message::FlowsReady)]
    );
    assert_eq!(r.m.start_at(), None);
}

#[test]
fn start_before_the_driver_said_the_tcp_flows_are_open_is_kept() {
    let mut r = Run::accepted(config(tcp()));
    assert_eq!(r.msg(0.3, Message::Start), []);
    assert_eq!(r.feed(0.4, Input::FlowsOpen), [Output::StartLocal]);
    let mut r = Run::accepted(config(TestSpec::Connect(Default::default())));
    let port = Message::ConnectPort {
        port: 9,
        server_closes: true,
    };
    assert_eq!(r.msg(0.3, port), []);
    assert_eq!(
        r.feed(0.4, Input::FlowsOpen),
        [Output::StartConnecting {
            port: 9,
            server_closes: true
        }]
    );
    // For UDP flows `start` before `flows_ready` breaks the protocol.
    let mut r = Run::accepted(config(udp()));
    let out = r.msg(0.3, Message::Start);
    assert!(
        matches!(ends(&out), Some(Err(SessionError::Server(_)))),
        "{out:?}"
    );
}

#[test]
fn key_proofs_both_ways_then_the_clock_from_auth_ok() {
    let mut cfg = config(tcp());
    cfg.psk = Some(psk());
    let mut r = Run::new(cfg);
    r.outputs();
    let out = r.msg(0.2, welcome(Some(SERVER_NONCE), Some(1.0), None));
    let proof = psk().client_proof(SERVER_NONCE, NONCE);
    assert_eq!(out, [Output::Send(Message::Auth { proof })]);
    assert_eq!(r.m.timeout(), Some(r.at(12.2)));
    let info = ServerInfo {
        software: "hakaru server".into(),
        unix_time: Some(UNIX0 + 0.3 + 7.0),
        host: Some("boot-1".into()),
        os: Some("linux".into()),
    };
    let ok = Message::AuthOk {
        proof: psk().server_proof(NONCE, SERVER_NONCE),
        server: Some(info),
    };
    let out = r.msg(0.4, ok);
    let Some(Output::Server(facts)) = out.first() else {
        panic!("{out:?}")
    };
    // Proof sent at 0.2, answer at 0.4: the auth_ok's time, not the welcome's.
    let clock = facts.clock.expect("clock");
    assert!((clock.offset_s - 7.0).abs() < 1e-6, "{clock:?}");
    assert!((clock.round_trip_s - 0.2).abs() < 1e-6, "{clock:?}");
    assert!(facts.same_host);
    assert!(matches!(
        out.get(1),
        Some(Output::Send(Message::TestRequest { .. }))
    ));
}

#[test]
fn cubic_on_loopback_only_for_a_linux_server() {
    for (os, cubic) in [
        (Some("linux"), true),
        (None, true),
        (Some("windows"), false),
    ] {
        let mut cfg = config(tcp());
        cfg.cubic_on_loopback = Some("cubic note".into());
        let mut r = Run::new(cfg);
        r.outputs();
        let w = Message::Welcome {
            protocol: 1,
            software: "s".into(),
            unix_time: None,
            host: None,
            auth: None,
            os: os.map(Into::into),
        };
        let out = r.msg(0.1, w);
        let asked = match out.get(1) {
            Some(Output::Send(Message::TestRequest { test, .. })) => test.as_ref().clone(),
            other => panic!("{other:?}"),
        };
        let TestSpec::Tcp(t) = &asked else {
            panic!("{asked:?}")
        };
        assert_eq!(t.congestion.is_some(), cubic, "{os:?}");
        assert_eq!(r.m.notes().len(), usize::from(cubic));
        assert_eq!(r.m.spec(), &asked);
    }
}

#[test]
fn ctrl_c_stops_the_senders_once_and_marks_the_result_interrupted() {
    let mut r = Run::running(config(tcp()));
    assert_eq!(
        r.feed(1.0, Input::Stop),
        [Output::StopSending, Output::Send(Message::Stop)]
    );
    assert_eq!(r.feed(1.1, Input::Stop), [], "once");
    r.feed(1.2, Input::LocalDone { error: None });
    r.msg(1.3, finished());
    let out = r.feed(1.4, Input::LocalReport(Box::new(report(End::Client, None))));
    let Some(Ok(ended)) = ends(&out) else {
        panic!("{out:?}")
    };
    assert!(ended.interrupted);
}

#[test]
fn ctrl_c_before_start_stops_as_the_test_starts() {
    let mut r = Run::accepted(config(tcp()));
    assert_eq!(r.feed(0.25, Input::Stop), []);
    r.feed(0.3, Input::FlowsOpen);
    assert_eq!(
        r.msg(0.4, Message::Start),
        [
            Output::StartLocal,
            Output::StopSending,
            Output::Send(Message::Stop)
        ]
    );
}

#[test]
fn connection_rate_tests_start_connecting_on_the_connect_port() {
    let connect = TestSpec::Connect(hakaru_model::ConnectSpec::default());
    let mut cfg = config(connect.clone());
    cfg.held_start = true;
    let mut r = Run::accepted(cfg);
    assert_eq!(r.feed(0.3, Input::FlowsOpen), [Output::WaitGate]);
    assert_eq!(
        r.feed(0.4, Input::GateOpen { at_unix: None }),
        [Output::Send(Message::FlowsReady)]
    );
    assert_eq!(
        r.msg(
            0.5,
            Message::ConnectPort {
                port: 4711,
                server_closes: true
            }
        ),
        [Output::StartConnecting {
            port: 4711,
            server_closes: true
        }]
    );
    assert!(r.m.timeout().is_some(), "the machine keeps the test's time");
    // Without a held start nothing is said before the port, and `start` has no place.
    let mut r = Run::accepted(config(connect));
    assert_eq!(r.feed(0.3, Input::FlowsOpen), []);
    let out = r.msg(0.4, Message::Start);
    assert_eq!(
        out,
        [Output::End(Err(SessionError::Server(
            "unexpected start message instead of the connect port".into()
        )))]
    );
}
