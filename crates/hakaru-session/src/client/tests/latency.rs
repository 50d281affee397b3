//! Latency tests in the machine: this end's interval records pass through, the echo is told
//! to stop once the pinger is done, and its report closes the test.

use hakaru_model::{LatencySpec, LatencyTransport};

use super::*;

fn latency(transport: LatencyTransport) -> TestSpec {
    TestSpec::Latency(LatencySpec {
        transport,
        ..Default::default()
    })
}

fn local() -> Input {
    Input::LocalReport(Box::new(report(End::Client, None)))
}

#[test]
fn a_latency_test_runs_to_its_reports_and_stops_the_echo() {
    for (transport, ready) in [
        (LatencyTransport::Tcp, false),
        (LatencyTransport::Udp, true),
    ] {
        let mut r = Run::accepted(config(latency(transport)));
        let out = r.feed(0.3, Input::FlowsOpen);
        assert_eq!(out.contains(&Output::Send(Message::FlowsReady)), ready);
        assert_eq!(r.msg(0.4, Message::Start), [Output::StartLocal]);
        assert!(r.m.timeout().is_some(), "the machine keeps the time now");
        // This end's records go to the observer as they are, in order.
        for i in 0..3 {
            let out = r.feed(
                1.0 + f64::from(i),
                Input::LocalInterval(Box::new(record(i))),
            );
            assert_eq!(out, [Output::Interval(record(i))]);
        }
        // Keepalives every two seconds meanwhile, while the echo's keep it alive.
        assert_eq!(r.tick(2.5), [Output::Send(Message::Keepalive)]);
        r.msg(3.5, Message::Keepalive);
        // The pinger is done: the echo, still running, is told to stop.
        assert_eq!(
            r.feed(4.0, Input::LocalDone { error: None }),
            [Output::Send(Message::Stop)]
        );
        assert_eq!(r.msg(4.1, finished()), [Output::CollectLocal]);
        let out = r.feed(4.2, local());
        assert_eq!(
            out.first(),
            Some(&Output::Send(Message::Finished {
                report: Box::new(report(End::Client, None))
            }))
        );
        let Some(Ok(ended)) = ends(&out) else {
            panic!("{out:?}")
        };
        assert_eq!(ended.intervals, (0..3).map(record).collect::<Vec<_>>());
        assert_eq!(ended.remote, report(End::Server, None));
        assert!(!ended.interrupted);
        assert!(r.m.is_done());
    }
}

#[test]
fn an_echo_that_saw_the_flows_close_is_not_told_to_stop() {
    let mut r = Run::running(config(latency(LatencyTransport::Tcp)));
    assert_eq!(r.msg(1.0, finished()), []);
    // Its report is in: its silence from now on is no fault.
    assert_eq!(
        r.tick(10.0)
            .iter()
            .filter(|o| matches!(o, Output::End(_)))
            .count(),
        0
    );
    assert_eq!(
        r.feed(10.5, Input::LocalDone { error: None }),
        [Output::CollectLocal]
    );
    assert!(matches!(ends(&r.feed(10.6, local())), Some(Ok(_))));
}

#[test]
fn ctrl_c_stops_the_pinger_and_the_echo_after_it() {
    let mut r = Run::running(config(latency(LatencyTransport::Udp)));
    assert_eq!(r.feed(1.0, Input::Stop), [Output::StopSending]);
    assert_eq!(r.feed(1.1, Input::Stop), []);
    assert_eq!(
        r.feed(1.2, Input::LocalDone { error: None }),
        [Output::Send(Message::Stop)]
    );
    r.msg(1.3, finished());
    let Some(Ok(ended)) = ends(&r.feed(1.4, local())).cloned() else {
        panic!("no end")
    };
    assert!(ended.interrupted);
}

#[test]
fn a_pinger_that_fails_tells_the_server_its_words_and_ends() {
    let mut r = Run::running(config(latency(LatencyTransport::Tcp)));
    let why = "flow 0: no reply within 5 s (--timeout)";
    let out = r.feed(
        2.0,
        Input::LocalDone {
            error: Some(why.into()),
        },
    );
    assert_eq!(
        out.first(),
        Some(&Output::Send(Message::Error {
            message: why.into()
        }))
    );
    assert_eq!(ended_with(&mut r, &out), SessionError::Flow(why.into()));
}

#[test]
fn a_silent_echo_is_gone_after_the_timeout_and_a_stray_interval_is_refused() {
    let mut r = Run::running(config(latency(LatencyTransport::Tcp)));
    r.tick(2.0);
    r.tick(4.0);
    let out = r.tick(5.5);
    let e = ended_with(&mut r, &out);
    gave_up(&out, &e);
    assert!(
        e.to_string()
            .contains("sent nothing for 5 s (--timeout): the path or the server is down"),
        "{e}"
    );
    // The echo has no interval samples: one is a protocol error.
    let mut r = Run::running(config(latency(LatencyTransport::Tcp)));
    let out = r.msg(1.0, Message::Interval { sample: sample(0) });
    let e = ended_with(&mut r, &out);
    assert!(e.to_string().contains("unexpected interval message"), "{e}");
}
