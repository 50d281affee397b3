//! The paths that end in an error, in every state.

use super::*;

/// The states a fault can meet the session in.
#[derive(Debug, Clone, Copy, PartialEq)]
enum At {
    Welcome,
    Auth,
    Accepting,
    Flows,
    Gate,
    Starting,
    Running,
}

const ALL: [At; 7] = [
    At::Welcome,
    At::Auth,
    At::Accepting,
    At::Flows,
    At::Gate,
    At::Starting,
    At::Running,
];

/// A session brought to `at` (by 0.5 s of virtual time at the latest).
fn reach(at: At) -> Run {
    let mut cfg = config(udp());
    cfg.held_start = at == At::Gate;
    if at == At::Auth {
        cfg.psk = Some(psk());
    }
    let mut r = Run::new(cfg);
    r.outputs();
    if at == At::Welcome {
        return r;
    }
    let auth = (at == At::Auth).then_some(SERVER_NONCE);
    r.msg(0.1, welcome(auth, None, None));
    if at == At::Auth || at == At::Accepting {
        return r;
    }
    r.msg(0.2, accepted());
    if at == At::Flows {
        return r;
    }
    r.feed(0.3, Input::FlowsOpen);
    if at == At::Gate || at == At::Starting {
        return r;
    }
    assert_eq!(r.msg(0.4, Message::Start), [Output::StartLocal]);
    r
}

fn addr() -> String {
    ADDR.into()
}

#[test]
fn an_error_from_the_server_ends_the_session_in_every_state() {
    for at in ALL {
        let mut r = reach(at);
        let out = r.msg(
            1.0,
            Message::Error {
                message: "boom".into(),
            },
        );
        let e = ended_with(&mut r, &out);
        let want = match at {
            At::Auth => SessionError::Auth(format!(
                "{ADDR} does not accept this key (--psk-file or HAKARU_PSK differs from the server's)"
            )),
            _ => SessionError::Server("boom".into()),
        };
        assert_eq!(e, want, "{at:?}");
        if at == At::Running {
            gave_up(&out, &e);
        } else {
            assert_eq!(
                out.len(),
                1,
                "{at:?}: nothing is said before start: {out:?}"
            );
        }
    }
}

#[test]
fn the_server_closing_ends_the_session_in_every_state() {
    for at in ALL {
        let mut r = reach(at);
        let out = r.feed(1.0, Input::Failed(Fault::Closed));
        let e = ended_with(&mut r, &out);
        let want = match at {
            At::Welcome => SessionError::NotHakaru {
                addr: addr(),
                detail: "it closed the connection without a greeting".into(),
            },
            At::Running => SessionError::Gone {
                addr: addr(),
                what: "closed the control connection mid-test (did it exit?)".into(),
            },
            _ => SessionError::Control {
                addr: addr(),
                fault: Fault::Closed,
            },
        };
        assert_eq!(e, want, "{at:?}");
        if at == At::Running {
            gave_up(&out, &e);
        }
    }
}

#[test]
fn garbage_on_the_control_connection_ends_the_session_in_every_state() {
    let bad = ProtoError::Malformed("expected value".into());
    for at in ALL {
        let mut r = reach(at);
        let out = r.feed(1.0, Input::Failed(Fault::Proto(bad.clone())));
        let e = ended_with(&mut r, &out);
        let want = match at {
            At::Welcome => SessionError::NotHakaru {
                addr: addr(),
                detail: "malformed control message: expected value".into(),
            },
            At::Running => SessionError::Gone {
                addr: addr(),
                what: "failed mid-test: malformed control message: expected value".into(),
            },
            _ => SessionError::Control {
                addr: addr(),
                fault: Fault::Proto(bad.clone()),
            },
        };
        assert_eq!(e, want, "{at:?}");
    }
}

#[test]
fn a_message_out_of_turn_ends_the_session_in_every_state() {
    let hello = Message::Hello {
        protocol: 1,
        software: "me".into(),
        host: None,
        nonce: None,
    };
    for at in ALL {
        let mut r = reach(at);
        let out = r.msg(1.0, hello.clone());
        let e = ended_with(&mut r, &out);
        let want = match at {
            At::Welcome => SessionError::NotHakaru {
                addr: addr(),
                detail: "it answered the hello with hello".into(),
            },
            At::Auth => SessionError::Auth(format!("{ADDR} answered the key proof with hello")),
            At::Accepting => SessionError::Server(
                "unexpected hello message instead of an answer to the test request".into(),
            ),
            At::Running => SessionError::Unexpected {
                addr: addr(),
                what: "hello message during the test".into(),
            },
            _ => SessionError::Server("unexpected hello message instead of start".into()),
        };
        assert_eq!(e, want, "{at:?}");
    }
}

/// Every input the client machine can be given, good and bad, for any state.
fn every_input() -> Vec<Input> {
    vec![
        Input::Message(Message::Start),
        Input::Message(Message::Keepalive),
        Input::Message(finished()),
        Input::Message(Message::Interval { sample: sample(9) }),
        Input::Message(Message::SendDone { sent: vec![] }),
        Input::Message(accepted()),
        Input::Message(welcome(None, None, None)),
        Input::Message(Message::Error {
            message: "e".into(),
        }),
        Input::Failed(Fault::Io("reset".into())),
        Input::Failed(Fault::Timeout(1.0)),
        Input::Failed(Fault::Closed),
        Input::SendFailed {
            what: "keepalive",
            fault: Fault::Closed,
        },
        Input::FlowsOpen,
        Input::GateOpen { at_unix: None },
        Input::GateFailed("no".into()),
        Input::LocalSample(sample(3)),
        Input::LocalSendDone(vec![(1, 2)]),
        Input::LocalDone { error: None },
        Input::LocalDone {
            error: Some("x".into()),
        },
        Input::LocalReport(Box::new(report(End::Client, None))),
        Input::Stop,
    ]
}

#[test]
fn no_input_in_any_state_panics_and_nothing_follows_the_end() {
    let inputs = every_input;
    for at in ALL {
        for (i, input) in inputs().into_iter().enumerate() {
            let mut r = reach(at);
            r.feed(1.0, input);
            for (j, again) in inputs().into_iter().enumerate() {
                r.feed(1.0 + j as f64 * 0.01, again);
            }
            let out = r.tick(1000.0);
            assert!(r.m.is_done(), "{at:?} input {i}: {out:?}");
            assert_eq!(r.feed(2000.0, Input::Stop), [], "{at:?} input {i}");
            assert_eq!(r.tick(3000.0), []);
        }
    }
}

#[test]
fn a_driver_input_out_of_turn_is_an_internal_error_not_a_panic() {
    let mut r = reach(At::Welcome);
    let out = r.feed(0.5, Input::LocalReport(Box::new(report(End::Client, None))));
    let e = ended_with(&mut r, &out);
    assert_eq!(
        e,
        SessionError::Flow(
            "internal error: local report while waiting for the welcome (client session)".into()
        )
    );
}

#[test]
fn a_wrong_server_proof_fails_authentication() {
    let mut r = reach(At::Auth);
    let out = r.msg(
        0.5,
        Message::AuthOk {
            proof: psk().server_proof(NONCE, "another nonce"),
            server: None,
        },
    );
    let e = ended_with(&mut r, &out);
    assert_eq!(
        e,
        SessionError::Auth(format!(
            "{ADDR} accepted our proof but could not prove it holds the same key"
        ))
    );
    assert_eq!(out.len(), 1, "no test request: {out:?}");
}

#[test]
fn a_key_on_one_side_only_fails_authentication() {
    // The server asks, we have none.
    let mut r = Run::new(config(tcp()));
    r.outputs();
    let out = r.msg(0.1, welcome(Some(SERVER_NONCE), None, None));
    let e = ended_with(&mut r, &out).to_string();
    assert!(e.contains("requires a pre-shared key"), "{e}");
    // We have one, the server does not ask.
    let mut cfg = config(tcp());
    cfg.psk = Some(psk());
    let mut r = Run::new(cfg);
    r.outputs();
    let out = r.msg(0.1, welcome(None, None, None));
    let e = ended_with(&mut r, &out).to_string();
    assert!(e.contains("does not ask for a key"), "{e}");
}

#[test]
fn no_welcome_within_the_handshake_timeout_is_not_a_hakaru_server() {
    let mut r = reach(At::Welcome);
    assert_eq!(r.tick(9.9), [], "not yet");
    let out = r.tick(10.0);
    let e = ended_with(&mut r, &out);
    assert_eq!(
        e.to_string(),
        format!("{ADDR} is not a hakaru server: it sent no greeting within 10 s")
    );
}

#[test]
fn each_handshake_step_has_its_deadline() {
    for (at, due, secs) in [
        (At::Auth, 12.1, 12.0),
        (At::Accepting, 10.1, 10.0),
        (At::Starting, 10.3, 10.0),
    ] {
        let mut r = reach(at);
        assert_eq!(r.m.timeout(), Some(r.at(due)), "{at:?}");
        assert_eq!(r.tick(due - 0.01), [], "{at:?}");
        let out = r.tick(due);
        let e = ended_with(&mut r, &out);
        assert_eq!(
            e.to_string(),
            format!("control connection to {ADDR}: no control message within {secs:.1} s"),
            "{at:?}"
        );
    }
    // Opening the flows and the gate are the driver's business: no deadline.
    assert_eq!(reach(At::Flows).m.timeout(), None);
    assert_eq!(reach(At::Gate).m.timeout(), None);
}

#[test]
fn a_silent_server_is_called_down_after_the_silence_limit() {
    let mut r = reach(At::Running);
    assert_eq!(r.tick(2.4), [Output::Send(Message::Keepalive)]);
    // A word from the server restarts the count.
    assert_eq!(r.msg(3.0, Message::Keepalive), []);
    assert_eq!(r.tick(4.4), [Output::Send(Message::Keepalive)]);
    assert_eq!(r.tick(6.4), [Output::Send(Message::Keepalive)]);
    assert_eq!(r.m.timeout(), Some(r.at(8.0)), "5 s after the last word");
    let out = r.tick(8.0);
    let e = ended_with(&mut r, &out);
    assert_eq!(
        e.to_string(),
        format!(
            "the server at {ADDR} sent nothing for 5 s (--stall-timeout): the path or the server is down"
        )
    );
    gave_up(&out, &e);
}

#[test]
fn a_server_without_results_is_called_gone_20_s_after_the_end() {
    let mut r = reach(At::Running);
    r.feed(1.0, Input::LocalDone { error: None });
    // The server keeps talking, but never sends its report.
    let mut t = 1.0;
    while t < 20.0 {
        t += 1.0;
        r.msg(t, Message::Keepalive);
        r.tick(t);
        assert!(!r.m.is_done(), "at {t}");
    }
    assert_eq!(r.tick(20.99), [], "not yet");
    let out = r.tick(21.0);
    let e = ended_with(&mut r, &out);
    assert_eq!(
        e,
        SessionError::Gone {
            addr: addr(),
            what: "sent no results within 20 s of the end".into()
        }
    );
    gave_up(&out, &e);
}

#[test]
fn flow_errors_end_the_test() {
    // This end's flow failed mid-test: stop, and tell the server.
    let mut r = reach(At::Running);
    let out = r.feed(
        1.0,
        Input::LocalDone {
            error: Some("flow 0: reset".into()),
        },
    );
    let e = ended_with(&mut r, &out);
    assert_eq!(e, SessionError::Flow("flow 0: reset".into()));
    gave_up(&out, &e);
    // A flow error in a final report: the reports are exchanged, then the error.
    let mut r = reach(At::Running);
    r.feed(1.0, Input::LocalDone { error: None });
    r.msg(
        1.1,
        Message::Finished {
            report: Box::new(report(End::Server, Some("flow 0: short"))),
        },
    );
    let out = r.feed(1.2, Input::LocalReport(Box::new(report(End::Client, None))));
    assert!(matches!(
        out.first(),
        Some(Output::Send(Message::Finished { .. }))
    ));
    assert_eq!(
        ended_with(&mut r, &out),
        SessionError::Flow("flow 0: short".into())
    );
}

#[test]
fn a_called_off_gate_ends_the_session_without_a_word_to_the_server() {
    let mut r = reach(At::Gate);
    let out = r.feed(5.0, Input::GateFailed("coordinator gone".into()));
    assert_eq!(
        out,
        [Output::End(Err(SessionError::CalledOff(
            "coordinator gone".into()
        )))]
    );
}

#[test]
fn send_failures_name_what_could_not_be_said() {
    let fault = Fault::Io("broken pipe".into());
    let mut r = reach(At::Accepting);
    let out = r.feed(
        0.5,
        Input::SendFailed {
            what: "test_request",
            fault: fault.clone(),
        },
    );
    assert_eq!(
        ended_with(&mut r, &out).to_string(),
        format!("control connection to {ADDR}: control connection: broken pipe")
    );
    let mut r = reach(At::Running);
    r.feed(1.0, Input::Stop);
    let out = r.feed(
        1.0,
        Input::SendFailed {
            what: "stop",
            fault: fault.clone(),
        },
    );
    let e = ended_with(&mut r, &out).to_string();
    assert!(
        e.ends_with("could not be told to stop: control connection: broken pipe"),
        "{e}"
    );
    let mut r = reach(At::Running);
    let out = r.feed(
        2.4,
        Input::SendFailed {
            what: "keepalive",
            fault,
        },
    );
    let e = ended_with(&mut r, &out).to_string();
    assert!(
        e.ends_with("is unreachable: control connection: broken pipe"),
        "{e}"
    );
}

#[test]
fn a_refusal_ends_the_session_with_the_servers_reason() {
    let mut r = reach(At::Accepting);
    let out = r.msg(
        0.5,
        Message::Refused {
            reason: "--max-rate: too fast".into(),
        },
    );
    assert_eq!(
        out,
        [Output::End(Err(SessionError::Refused(
            "--max-rate: too fast".into()
        )))]
    );
    assert_eq!(
        SessionError::Refused("x".into()).to_string(),
        "the server refused the test: x"
    );
}

#[test]
fn once_the_servers_report_is_in_its_close_does_not_matter() {
    let mut r = reach(At::Running);
    r.feed(1.0, Input::LocalDone { error: None });
    assert_eq!(r.msg(1.1, finished()), [Output::CollectLocal]);
    assert_eq!(r.feed(1.2, Input::Failed(Fault::Closed)), []);
    assert_eq!(r.tick(60.0), [], "no silence limit while this end winds up");
    let out = r.feed(
        61.0,
        Input::LocalReport(Box::new(report(End::Client, None))),
    );
    assert!(matches!(ends(&out), Some(Ok(_))), "{out:?}");
}

/// The crate's one sweep ([`crate::sweep::Sweep`]) over a TCP test's happy path, as every
/// machine runs it.
#[test]
fn every_input_in_every_state_keeps_the_conventions() {
    let path = || {
        vec![
            Input::Message(welcome(None, None, None)),
            Input::Message(accepted()),
            Input::FlowsOpen,
            Input::Message(Message::Start),
            Input::LocalDone { error: None },
            Input::LocalReport(Box::new(report(End::Client, None))),
            Input::Message(finished()),
        ]
    };
    let answers = || {
        vec![
            Input::FlowsOpen,
            Input::LocalDone { error: None },
            Input::LocalReport(Box::new(report(End::Client, None))),
        ]
    };
    let n = crate::sweep::Sweep {
        make: &|now| Session::new(config(tcp()), now, UNIX0),
        path: &path,
        inputs: &every_input,
        answers: &answers,
    }
    .run();
    assert_eq!(n, 8 * every_input().len());
}
