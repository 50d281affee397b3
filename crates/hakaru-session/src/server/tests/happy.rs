//! Every kind's happy path.

use std::time::Duration;

use hakaru_model::{ConnectSpec, LatencySpec, LatencyTransport, TestSpec};
use hakaru_proto::Message;

use super::*;

#[test]
fn a_tcp_test_runs_from_hello_to_results() {
    let mut t = T::new(config(false));
    let Message::Welcome {
        software, auth, os, ..
    } = welcome_of(&t.out)
    else {
        panic!("not a welcome")
    };
    assert_eq!(
        (software.as_str(), auth, os.as_deref()),
        ("hakaru 9.9.9", None, Some("linux"))
    );
    let spec = tcp(2);
    assert_eq!(
        t.request(spec.clone(), false),
        vec![Output::Admit {
            spec: Box::new(RemoteSpec::try_from(spec).expect("remote")),
            held: false
        }]
    );
    assert_eq!(
        t.admit(),
        vec![Output::Send(Message::Accepted {
            test_id: 7,
            token: "tok".into(),
            probe_flow: None,
        })]
    );
    assert_eq!(t.input(Input::PathArrived { flow: 0 }), vec![]);
    // A repeated or unknown flow changes nothing.
    assert_eq!(t.input(Input::PathArrived { flow: 0 }), vec![]);
    assert_eq!(t.input(Input::PathArrived { flow: 9 }), vec![]);
    assert_eq!(
        t.input(Input::PathArrived { flow: 1 }),
        vec![
            Output::PathsComplete,
            Output::TakeBaseline,
            Output::Send(Message::Start),
            Output::StartSide
        ]
    );
    // The server's keepalives go out every two seconds while the client's keep it alive.
    let mut keepalives = 0;
    for _ in 0..10 {
        keepalives += t
            .advance(Duration::from_secs(1))
            .iter()
            .filter(|o| **o == Output::Send(Message::Keepalive))
            .count();
        t.msg(Message::Keepalive);
    }
    assert_eq!(keepalives, 5);
    let r = report();
    assert_eq!(
        t.input(Input::SideDone(r.clone())),
        vec![Output::Send(Message::Finished { report: r.clone() })]
    );
    assert_eq!(
        t.msg(Message::Finished { report: r }),
        vec![Output::End(Ending::Finished)]
    );
    assert!(t.s.is_done());
    assert_eq!(t.s.timeout(), None);
    // Over: nothing more is said, whatever arrives.
    assert!(t.msg(Message::Start).is_empty());
    assert!(t.input(Input::Shutdown).is_empty());
}

#[test]
fn a_udp_test_starts_on_flows_ready_after_every_hello() {
    let mut t = T::new(config(false));
    t.request(udp(2), false);
    t.admit();
    t.input(Input::PathArrived { flow: 0 });
    t.input(Input::PathArrived { flow: 1 });
    assert!(
        !t.out.contains(&Output::PathsComplete),
        "waits for flows_ready"
    );
    assert_eq!(
        t.msg(Message::FlowsReady),
        vec![
            Output::PathsComplete,
            Output::TakeBaseline,
            Output::Send(Message::Start),
            Output::StartSide
        ]
    );
    assert_eq!(
        t.msg(Message::SendDone { sent: vec![(0, 5)] }),
        vec![Output::PeerDone(vec![(0, 5)])]
    );
    assert_eq!(t.msg(Message::Stop), vec![Output::StopSending]);
}

#[test]
fn flows_ready_before_every_udp_hello_is_an_error() {
    let mut t = T::new(config(false));
    t.request(udp(2), false);
    t.admit();
    t.input(Input::PathArrived { flow: 0 });
    t.msg(Message::FlowsReady);
    assert_eq!(
        t.told(),
        Some("the client reported every UDP flow ready, but only 1 of 2 hellos arrived")
    );
    assert!(matches!(
        t.ended(),
        Some(Ending::Aborted { told: true, .. })
    ));
}

#[test]
fn missing_paths_time_out_naming_what_arrived() {
    let mut t = T::new(config(false));
    t.request(tcp(3), false);
    t.admit();
    t.input(Input::PathArrived { flow: 2 });
    assert!(t
        .advance(DATA_TIMEOUT - Duration::from_millis(1))
        .is_empty());
    t.advance(Duration::from_millis(1));
    assert_eq!(
        t.told(),
        Some("only 1 of 3 data connections arrived within 10 s")
    );

    let mut t = T::new(config(false));
    t.request(udp(1), false);
    t.admit();
    t.advance(DATA_TIMEOUT);
    assert_eq!(
        t.told(),
        Some("only 0 of 1 UDP flows said hello within 10 s (is UDP to port 5201 blocked?)")
    );
}

#[test]
fn a_scheduled_start_is_kept_for_the_side_and_refused_out_of_place() {
    // Held (after the last path) and before it: the instant is the side's to wait for.
    for early in [false, true] {
        let mut t = T::new(config(false));
        t.request(tcp(1), true);
        t.admit();
        if !early {
            t.input(Input::PathArrived { flow: 0 });
        }
        assert!(t.msg(Message::StartAt { at_unix: 2.5 }).is_empty());
        t.msg(Message::FlowsReady);
        if early {
            t.input(Input::PathArrived { flow: 0 });
        }
        assert!(t.out.contains(&Output::StartSide), "{:?}", t.out);
        assert_eq!(t.s.start_at(), Some(2.5));
    }
    // Without a held start, twice, or not an instant: the client is told why.
    for (held, msgs, why) in [
        (false, vec![2.5], "unexpected start_at message"),
        (true, vec![2.5, 3.0], "unexpected start_at message"),
        (true, vec![f64::INFINITY], "start_at inf is not an instant"),
        (true, vec![-1.0], "start_at -1 is not an instant"),
    ] {
        let mut t = T::new(config(false));
        t.request(tcp(1), held);
        t.admit();
        for at in msgs {
            t.msg(Message::StartAt { at_unix: at });
        }
        assert!(t.told().is_some_and(|m| m.starts_with(why)), "{:?}", t.out);
        assert!(t.ended().is_some());
        assert!(!t.out.contains(&Output::StartSide));
    }
}

#[test]
fn a_held_tcp_start_waits_for_the_go_and_takes_an_early_one() {
    // The go after the last path: the server holds until it comes.
    let mut t = T::new(config(false));
    t.request(tcp(1), true);
    t.admit();
    assert_eq!(
        t.input(Input::PathArrived { flow: 0 }),
        vec![Output::PathsComplete]
    );
    assert!(t.advance(Duration::from_secs(60)).is_empty());
    t.msg(Message::Keepalive);
    assert_eq!(
        t.msg(Message::FlowsReady),
        vec![
            Output::TakeBaseline,
            Output::Send(Message::Start),
            Output::StartSide
        ]
    );

    // The go before the server saw the last path (the client sends it once its connections
    // are open): it is kept, and the test starts with the last path.
    let mut t = T::new(config(false));
    t.request(tcp(1), true);
    t.admit();
    assert!(t.msg(Message::FlowsReady).is_empty());
    assert_eq!(
        t.input(Input::PathArrived { flow: 0 }),
        vec![
            Output::PathsComplete,
            Output::TakeBaseline,
            Output::Send(Message::Start),
            Output::StartSide
        ]
    );
}

#[test]
fn a_held_start_is_bounded() {
    let mut t = T::new(config(false));
    t.request(tcp(1), true);
    t.admit();
    t.input(Input::PathArrived { flow: 0 });
    t.advance(HOLD_TIMEOUT);
    assert_eq!(
        t.told(),
        Some("the client held the start for more than 120 s")
    );

    // UDP: once every hello is here, the hold has the long limit, not the data timeout.
    let mut t = T::new(config(false));
    t.request(udp(1), true);
    t.admit();
    t.input(Input::PathArrived { flow: 0 });
    assert!(t.advance(DATA_TIMEOUT * 3).is_empty());
    t.advance(HOLD_TIMEOUT);
    assert_eq!(
        t.told(),
        Some("the client held the start for more than 120 s")
    );
}

#[test]
fn with_rst_the_client_closes_first() {
    let mut t = T::new(config(false));
    let spec = ConnectSpec {
        rst: true,
        ..ConnectSpec::default()
    };
    t.request(TestSpec::Connect(spec), false);
    t.admit();
    assert_eq!(
        t.input(Input::ConnectListening { port: 4000 }),
        vec![Output::Send(Message::ConnectPort {
            port: 4000,
            server_closes: false
        })]
    );
}

#[test]
fn a_connection_rate_test_opens_its_listener_and_ends_on_the_clients_report() {
    let mut t = T::new(config(false));
    t.request(TestSpec::Connect(ConnectSpec::default()), false);
    assert_eq!(
        t.admit(),
        vec![
            Output::Send(Message::Accepted {
                test_id: 7,
                token: "tok".into(),
                probe_flow: None,
            }),
            Output::OpenConnectListener
        ]
    );
    // FIN connections: the server closes each one first, and says so.
    assert_eq!(
        t.input(Input::ConnectListening { port: 4000 }),
        vec![Output::Send(Message::ConnectPort {
            port: 4000,
            server_closes: true
        })]
    );
    t.msg(Message::Stop);
    assert_eq!(
        t.msg(Message::Finished { report: report() }),
        vec![Output::StopSide]
    );
    assert_eq!(
        t.input(Input::SideDone(report())),
        vec![
            Output::Send(Message::Finished { report: report() }),
            Output::End(Ending::Finished)
        ]
    );
}

#[test]
fn a_connection_rate_test_without_results_is_cut_off() {
    let mut t = T::new(config(false));
    let spec = ConnectSpec::default();
    let allowance = connect_limit(&spec);
    t.request(TestSpec::Connect(spec), false);
    t.admit();
    t.input(Input::ConnectListening { port: 4000 });
    // The client keeps talking but never reports.
    let mut waited = Duration::ZERO;
    while t.ended().is_none() && waited < allowance * 2 {
        t.advance(Duration::from_secs(1));
        t.msg(Message::Keepalive);
        waited += Duration::from_secs(1);
    }
    assert_eq!(waited.as_secs(), allowance.as_secs());
    assert!(t.told().unwrap_or("").contains("sent no results within"));
    assert!(t.out.contains(&Output::AbortSide));
}

#[test]
fn a_latency_test_over_udp_has_udp_paths() {
    let spec = TestSpec::Latency(LatencySpec {
        transport: LatencyTransport::Udp,
        ..LatencySpec::default()
    });
    let t = T::running(spec);
    assert!(t.out.contains(&Output::PathsComplete));
}
