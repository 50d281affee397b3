//! Connection-rate tests in the machine: this end's records pass through, this end's report
//! goes first and the server's answer ends the test.

use hakaru_model::ConnectSpec;

use super::*;

fn connecting() -> Run {
    let mut r = Run::accepted(config(TestSpec::Connect(ConnectSpec::default())));
    r.feed(0.3, Input::FlowsOpen);
    let port = Message::ConnectPort {
        port: 4711,
        server_closes: true,
    };
    assert_eq!(
        r.msg(0.4, port),
        [Output::StartConnecting {
            port: 4711,
            server_closes: true
        }]
    );
    r
}

#[test]
fn a_server_that_does_not_say_it_closes_first_leaves_the_close_to_the_client() {
    // A server from before `server_closes` sends only the port: the client closes first.
    let mut r = Run::accepted(config(TestSpec::Connect(ConnectSpec::default())));
    r.feed(0.3, Input::FlowsOpen);
    let old: Message = serde_json::from_str(r#"{"type":"connect_port","port":4711}"#).unwrap();
    assert_eq!(
        r.msg(0.4, old),
        [Output::StartConnecting {
            port: 4711,
            server_closes: false
        }]
    );
}

fn local() -> Box<SideReport> {
    Box::new(report(End::Client, None))
}

#[test]
fn this_ends_report_goes_first_and_the_servers_answer_ends_the_test() {
    let mut r = connecting();
    for i in 0..2 {
        let out = r.feed(
            1.0 + f64::from(i),
            Input::LocalInterval(Box::new(record(i))),
        );
        assert_eq!(out, [Output::Interval(record(i))]);
    }
    assert_eq!(r.tick(2.5), [Output::Send(Message::Keepalive)]);
    r.msg(3.0, Message::Keepalive);
    assert_eq!(
        r.feed(3.5, Input::LocalDone { error: None }),
        [Output::CollectLocal]
    );
    assert_eq!(
        r.feed(3.6, Input::LocalReport(local())),
        [Output::Send(Message::Finished { report: local() })]
    );
    // Waiting for the answer: no keepalives, only the results deadline.
    assert_eq!(r.m.timeout(), Some(r.at(3.6) + RESULTS_TIMEOUT));
    let out = r.msg(4.0, finished());
    let Some(Ok(ended)) = ends(&out) else {
        panic!("{out:?}")
    };
    assert_eq!(ended.local, *local());
    assert_eq!(ended.remote, report(End::Server, None));
    assert_eq!(ended.intervals, vec![record(0), record(1)]);
    assert!(r.m.is_done());
}

#[test]
fn no_answer_within_the_results_timeout_is_the_server_gone() {
    let mut r = connecting();
    r.feed(1.0, Input::LocalDone { error: None });
    r.feed(1.1, Input::LocalReport(local()));
    let out = r.tick(1.1 + RESULTS_TIMEOUT.as_secs_f64());
    let e = ended_with(&mut r, &out);
    assert_eq!(
        e.to_string(),
        format!("the server at {ADDR} sent no results within 20 s of the end")
    );
    // A close while waiting, or a message out of place, say when it happened.
    let mut r = connecting();
    r.feed(1.0, Input::LocalDone { error: None });
    r.feed(1.1, Input::LocalReport(local()));
    let out = r.feed(1.2, Input::Failed(Fault::Closed));
    let e = ended_with(&mut r, &out);
    assert!(e.to_string().contains("before sending results"), "{e}");
    let mut r = connecting();
    r.feed(1.0, Input::LocalDone { error: None });
    r.feed(1.1, Input::LocalReport(local()));
    let out = r.msg(1.2, Message::Start);
    let e = ended_with(&mut r, &out);
    assert_eq!(
        e,
        SessionError::Server("unexpected start message instead of results".into())
    );
}

#[test]
fn faults_while_connecting_stop_the_connectors_and_tell_the_server() {
    let mut r = connecting();
    let out = r.tick(5.5);
    let e = ended_with(&mut r, &out);
    gave_up(&out, &e);
    assert!(e.to_string().contains("(--connect-timeout)"), "{e}");
    let mut r = connecting();
    let out = r.msg(1.0, Message::Start);
    let e = ended_with(&mut r, &out);
    gave_up(&out, &e);
    assert_eq!(
        e,
        SessionError::Server("unexpected start message during the test".into())
    );
    // Every attempt failing is this end's flow error, told to the server.
    let mut r = connecting();
    let why = "no connection to the server's connect listener succeeded";
    let out = r.feed(
        1.0,
        Input::LocalDone {
            error: Some(why.into()),
        },
    );
    let e = ended_with(&mut r, &out);
    gave_up(&out, &e);
    assert_eq!(e, SessionError::Flow(why.into()));
}

#[test]
fn ctrl_c_stops_the_connectors_and_tells_the_server_once() {
    let mut r = connecting();
    assert_eq!(
        r.feed(1.0, Input::Stop),
        [Output::StopSending, Output::Send(Message::Stop)]
    );
    assert_eq!(r.feed(1.1, Input::Stop), []);
    r.feed(1.2, Input::LocalDone { error: None });
    r.feed(1.3, Input::LocalReport(local()));
    let out = r.msg(1.4, finished());
    let Some(Ok(ended)) = ends(&out) else {
        panic!("{out:?}")
    };
    assert!(ended.interrupted);
}
