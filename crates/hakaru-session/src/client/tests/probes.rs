//! Latency probes (`--latency-probe`): the server must name the probe flow, the probes start
//! once the flows are open (after the gate of a held start), and `flows_ready` waits for the
//! end of the idle baseline.

use hakaru_model::{LatencyProbe, LatencyTransport};

use super::*;

fn probed(spec: TestSpec) -> TestSpec {
    let p = Some(LatencyProbe {
        transport: LatencyTransport::Udp,
        baseline: hakaru_model::Dur::from_secs(2),
        ..LatencyProbe::default()
    });
    match spec {
        TestSpec::Tcp(mut t) => {
            t.latency_probe = p;
            TestSpec::Tcp(t)
        }
        TestSpec::Udp(mut u) => {
            u.latency_probe = p;
            TestSpec::Udp(u)
        }
        other => other,
    }
}

fn accepted_with(probe_flow: Option<u32>) -> Message {
    Message::Accepted {
        test_id: 1,
        token: "ab".into(),
        probe_flow,
    }
}

/// Through the handshake to `accepted` naming the probe flow (one bulk flow: flow 1).
fn accepted_probed(cfg: Config) -> Run {
    let mut r = Run::new(cfg);
    r.outputs();
    r.msg(0.1, welcome(None, Some(UNIX0), Some("boot-2")));
    let out = r.msg(0.2, accepted_with(Some(1)));
    assert_eq!(out, [Output::Accepted { token: "ab".into() }]);
    r
}

#[test]
fn the_baseline_runs_on_virtual_time_before_flows_ready() {
    for spec in [tcp(), udp()] {
        let mut r = accepted_probed(config(probed(spec)));
        assert_eq!(r.feed(0.3, Input::FlowsOpen), [Output::StartProbes]);
        // Nothing is said while the probes run alone; the baseline ends 2 s on.
        assert_eq!(r.m.timeout(), Some(r.at(2.3)));
        assert_eq!(r.tick(1.0), []);
        // `start` before the go is the server's error.
        let mut early = accepted_probed(config(probed(tcp())));
        early.feed(0.3, Input::FlowsOpen);
        let out = early.msg(0.5, Message::Start);
        let e = ended_with(&mut early, &out);
        assert!(e.to_string().contains("unexpected start"), "{e}");
        let out = r.tick(2.3);
        assert_eq!(
            out,
            [Output::BaselineDone, Output::Send(Message::FlowsReady)]
        );
        assert_eq!(r.m.timeout(), Some(r.at(12.3)), "start is due");
        assert_eq!(r.msg(2.4, Message::Start), [Output::StartLocal]);
    }
}

#[test]
fn a_held_start_measures_its_baseline_before_the_gate() {
    let mut cfg = config(probed(tcp()));
    cfg.held_start = true;
    let mut r = accepted_probed(cfg);
    assert_eq!(r.feed(0.3, Input::FlowsOpen), [Output::StartProbes]);
    assert_eq!(r.tick(2.3), [Output::BaselineDone, Output::WaitGate]);
    assert_eq!(
        r.m.timeout(),
        None,
        "the gate has no deadline of the machine's"
    );
    // An instant is not the server's to wait for: the loaded probes start with `start`
    // (the driver waited for the instant before opening the gate).
    assert_eq!(
        r.feed(
            5.0,
            Input::GateOpen {
                at_unix: Some(UNIX0 + 5.0)
            }
        ),
        [Output::Send(Message::FlowsReady)]
    );
    assert_eq!(r.m.start_at(), None);
    assert_eq!(r.msg(5.1, Message::Start), [Output::StartLocal]);
}

#[test]
fn a_server_that_names_no_probe_flow_is_refused_by_the_option_s_name() {
    for answer in [None, Some(7)] {
        let mut r = Run::new(config(probed(tcp())));
        r.outputs();
        r.msg(0.1, welcome(None, Some(UNIX0), Some("boot-2")));
        let out = r.msg(0.2, accepted_with(answer));
        let e = ended_with(&mut r, &out);
        assert!(e.to_string().contains("--latency-probe"), "{e}");
        assert!(matches!(e, SessionError::Refused(_)), "{e:?}");
        // The server hears why before the control connection closes: no hang there.
        assert!(
            matches!(out.first(), Some(Output::Send(Message::Error { message })) if message.contains("latency probes")),
            "{out:?}"
        );
    }
}

#[test]
fn an_error_or_a_close_during_the_baseline_ends_the_session() {
    let mut r = accepted_probed(config(probed(udp())));
    r.feed(0.3, Input::FlowsOpen);
    let out = r.msg(
        1.0,
        Message::Error {
            message: "boom".into(),
        },
    );
    assert!(ended_with(&mut r, &out).to_string().contains("boom"));
    let mut r = accepted_probed(config(probed(udp())));
    r.feed(0.3, Input::FlowsOpen);
    let out = r.feed(1.0, Input::Failed(Fault::Closed));
    ended_with(&mut r, &out);
    // Ctrl-C during the baseline: the test stops as soon as it runs.
    let mut r = accepted_probed(config(probed(tcp())));
    r.feed(0.3, Input::FlowsOpen);
    assert_eq!(r.feed(1.0, Input::Stop), []);
    r.tick(2.3);
    let out = r.msg(2.4, Message::Start);
    assert_eq!(
        out,
        [
            Output::StartLocal,
            Output::StopSending,
            Output::Send(Message::Stop)
        ]
    );
}

#[test]
fn without_probes_an_answer_that_names_a_probe_flow_changes_nothing() {
    let mut r = Run::new(config(tcp()));
    r.outputs();
    r.msg(0.1, welcome(None, Some(UNIX0), Some("boot-2")));
    assert_eq!(
        r.msg(0.2, accepted_with(Some(1))),
        [Output::Accepted { token: "ab".into() }]
    );
    assert_eq!(r.feed(0.3, Input::FlowsOpen), []);
}
