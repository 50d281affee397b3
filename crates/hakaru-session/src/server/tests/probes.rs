//! Latency probes (`--latency-probe`): the probe path, its echo started on arrival, and the
//! start held for the client's idle baseline.

use hakaru_model::{LatencyProbe, LatencyTransport};

use super::*;

pub(super) fn probed_tcp(flows: u32, transport: LatencyTransport) -> TestSpec {
    TestSpec::Tcp(TcpSpec {
        flows,
        latency_probe: Some(LatencyProbe {
            transport,
            ..LatencyProbe::default()
        }),
        ..TcpSpec::default()
    })
}

fn probed_udp(flows: u32, transport: LatencyTransport) -> TestSpec {
    TestSpec::Udp(UdpSpec {
        flows,
        latency_probe: Some(LatencyProbe {
            transport,
            ..LatencyProbe::default()
        }),
        ..UdpSpec::default()
    })
}

fn started(out: &[Output]) -> bool {
    out.contains(&Output::StartSide)
}

#[test]
fn tcp_with_probes_names_the_probe_flow_starts_its_echo_and_holds_for_the_baseline() {
    let mut t = T::new(config(false));
    let out = t.request(probed_tcp(2, LatencyTransport::Udp), false);
    assert!(
        matches!(out.as_slice(), [Output::Admit { held: true, .. }]),
        "{out:?}"
    );
    assert_eq!(
        t.admit(),
        [Output::Send(Message::Accepted {
            test_id: 7,
            token: "tok".into(),
            probe_flow: Some(2),
        })]
    );
    // The probe path first: its echo starts at once, the test does not.
    assert_eq!(
        t.input(Input::PathArrived { flow: 2 }),
        [Output::StartProbe { flow: 2 }]
    );
    // A repeated hello of the probe flow starts nothing twice.
    assert_eq!(t.input(Input::PathArrived { flow: 2 }), []);
    t.input(Input::PathArrived { flow: 0 });
    let out = t.input(Input::PathArrived { flow: 1 });
    assert_eq!(out, [Output::PathsComplete]);
    // The baseline runs (virtual time): nothing starts until the client's go.
    assert_eq!(t.advance(Duration::from_secs(2)), []);
    let out = t.msg(Message::FlowsReady);
    assert!(started(&out), "{out:?}");
    assert!(out.contains(&Output::Send(Message::Start)), "{out:?}");
}

#[test]
fn udp_with_a_tcp_probe_starts_the_echo_before_flows_ready() {
    let mut t = T::new(config(false));
    t.request(probed_udp(1, LatencyTransport::Tcp), false);
    let out = t.admit();
    assert!(
        matches!(
            out.as_slice(),
            [Output::Send(Message::Accepted {
                probe_flow: Some(1),
                ..
            })]
        ),
        "{out:?}"
    );
    assert_eq!(t.input(Input::PathArrived { flow: 0 }), []);
    assert_eq!(
        t.input(Input::PathArrived { flow: 1 }),
        [Output::StartProbe { flow: 1 }]
    );
    assert!(!started(&t.out));
    let out = t.msg(Message::FlowsReady);
    assert_eq!(out.first(), Some(&Output::PathsComplete), "{out:?}");
    assert!(started(&out), "{out:?}");
}

#[test]
fn flows_ready_before_the_probe_path_is_refused_by_name() {
    let mut t = T::new(config(false));
    t.request(probed_udp(1, LatencyTransport::Udp), false);
    t.admit();
    t.input(Input::PathArrived { flow: 0 });
    t.msg(Message::FlowsReady);
    assert!(!started(&t.out));
    let told = t.told().unwrap_or_default().to_string();
    assert!(told.contains("only 1 of 2 hellos"), "{told}");
}

#[test]
fn a_client_that_never_ends_its_baseline_is_cut_off_at_the_hold_limit() {
    let mut t = T::new(config(false));
    t.request(probed_tcp(1, LatencyTransport::Tcp), false);
    t.admit();
    t.input(Input::PathArrived { flow: 1 });
    t.input(Input::PathArrived { flow: 0 });
    t.advance(HOLD_TIMEOUT - Duration::from_secs(1));
    assert!(t.ended().is_none(), "{:?}", t.out);
    t.advance(Duration::from_secs(2));
    assert!(
        matches!(t.ended(), Some(Ending::Aborted { why, .. }) if why.contains("held the start")),
        "{:?}",
        t.out
    );
    assert!(!started(&t.out));
}

#[test]
fn without_probes_the_answer_names_no_probe_flow_and_nothing_is_held() {
    let mut t = T::new(config(false));
    let out = t.request(tcp(1), false);
    assert!(
        matches!(out.as_slice(), [Output::Admit { held: false, .. }]),
        "{out:?}"
    );
    assert!(matches!(
        t.admit().as_slice(),
        [Output::Send(Message::Accepted {
            probe_flow: None,
            ..
        })]
    ));
    // Flow 1 is no path of this test: no echo starts.
    assert_eq!(t.input(Input::PathArrived { flow: 1 }), []);
    let out = t.input(Input::PathArrived { flow: 0 });
    assert!(started(&out), "{out:?}");
}
