//! The iperf3 server machine on virtual time, fed bytes as a stock client sends them (split at
//! every byte, too).
#![allow(clippy::indexing_slicing)] // a test may index: a panic there is a failed assertion

use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_model::{End, FlowDir, FlowSide, Role, RunResult, SideReport};
use hakaru_proto::iperf3::{encode_json, errno, server_error, stream_id, Params, State};
use serde_json::{json, Value};

use super::plan::{check, Limits, Plan};
use super::results::{Collected, ServerOutput};
use super::server::*;

fn params(v: Value) -> Vec<u8> {
    encode_json(&v)
}

fn tcp_params() -> Vec<u8> {
    params(
        json!({"tcp": true, "omit": 0, "time": 10, "parallel": 2, "len": 131072,
                  "client_version": "3.12"}),
    )
}

/// A results document as a stock client sends it, one stream (the client tests use it too).
pub(super) fn results_doc() -> Value {
    json!({
        "cpu_util_total": 1.0, "cpu_util_user": 0.5, "cpu_util_system": 0.5,
        "sender_has_retransmits": 0,
        "streams": [{"id": 1, "bytes": 1000, "retransmits": 0, "jitter": 0, "errors": 0,
                     "packets": 0, "start_time": 0, "end_time": 10}]
    })
}

/// The client's results for `tcp_params()`'s two streams.
fn results() -> Vec<u8> {
    let stream = |i: usize| {
        json!({"id": stream_id(i), "bytes": 1000, "retransmits": 0, "jitter": 0, "errors": 0,
               "packets": 0, "start_time": 0, "end_time": 10})
    };
    let mut doc = results_doc();
    doc["streams"] = json!([stream(0), stream(1)]);
    encode_json(&doc)
}

/// What a driver collects of `plan`'s test: every flow moved a megabyte at this end.
pub(super) fn collected(plan: &Plan) -> Collected {
    let flows = plan
        .flows
        .iter()
        .map(|&(id, dir)| FlowSide {
            id,
            dir,
            role: if dir == FlowDir::Down {
                Role::Sender
            } else {
                Role::Receiver
            },
            bytes: 1_000_000,
            omitted_bytes: 0,
            late_bytes: 0,
            late_seconds: 0.0,
            calls: 10,
            seconds: 10.0,
            tcp_info: None,
            udp: None,
            error: None,
            mptcp: None,
        })
        .collect();
    Collected {
        report: SideReport::flows_only(End::Server, flows),
        samples: vec![],
        peer: "192.0.2.1:40000".parse().unwrap(),
        local: "192.0.2.2:5201".into(),
        now_unix: 1.8e9,
    }
}

/// The driver's report of the test `params` (a framed document) asks for.
fn report_of(params: &[u8]) -> Input {
    let v: Value = serde_json::from_slice(&params[4..]).unwrap();
    let plan = check(&Params::from_json(&v).unwrap(), &Limits::default()).unwrap();
    Input::Report(Box::new(collected(&plan)))
}

/// [`report_of`] for `tcp_params()`.
fn report() -> Input {
    report_of(&tcp_params())
}

struct T {
    s: Session,
    now: Instant,
    out: Vec<Output>,
}

impl T {
    fn new(cfg: Config, after_cookie: &[u8]) -> T {
        let now = Instant::now();
        let mut t = T {
            s: Session::new(cfg, after_cookie, now),
            now,
            out: vec![],
        };
        t.drain();
        t
    }

    fn drain(&mut self) -> Vec<Output> {
        let mut new = vec![];
        while let Some(o) = self.s.poll_output() {
            new.push(o);
        }
        self.out.extend(new.iter().cloned());
        new
    }

    fn input(&mut self, i: Input) -> Vec<Output> {
        self.s.handle(i, self.now);
        self.drain()
    }

    fn bytes(&mut self, b: &[u8]) -> Vec<Output> {
        self.input(Input::Bytes(b.to_vec()))
    }

    /// Feeds `b` one byte at a time, as a slow path might deliver it.
    fn trickle(&mut self, b: &[u8]) -> Vec<Output> {
        b.iter().flat_map(|&x| self.bytes(&[x])).collect()
    }

    fn advance(&mut self, d: Duration) -> Vec<Output> {
        let end = self.now + d;
        let mut said = vec![];
        while let Some(t) = self.s.timeout().filter(|&t| t <= end) {
            self.now = t.max(self.now);
            self.s.handle_timeout(self.now);
            said.extend(self.drain());
        }
        self.now = end;
        said
    }

    fn ended(&self) -> Option<&Ending> {
        self.out.iter().find_map(|o| match o {
            Output::End(e) => Some(e),
            _ => None,
        })
    }

    /// Brings a TCP test with two streams to running.
    fn running() -> T {
        let mut t = T::new(Config::default(), &[]);
        t.bytes(&tcp_params());
        t.input(Input::Admitted);
        t.input(Input::StreamArrived);
        t.input(Input::StreamArrived);
        assert!(t.out.contains(&Output::StartSide));
        t
    }
}

fn state(s: State) -> Output {
    Output::Send(vec![s.byte()])
}

#[test]
fn a_test_runs_in_iperf3s_order() {
    let mut t = T::new(Config::default(), &[]);
    assert_eq!(t.out, vec![state(State::ParamExchange)]);
    // The parameters may arrive a byte at a time.
    let said = t.trickle(&tcp_params());
    let [Output::Admit(p)] = said.as_slice() else {
        panic!("{said:?}")
    };
    assert_eq!(
        (p.params.parallel, p.params.time, p.flows.len()),
        (2, 10.0, 2)
    );
    assert_eq!(t.input(Input::Admitted), vec![state(State::CreateStreams)]);
    assert!(t.input(Input::StreamArrived).is_empty());
    assert_eq!(
        t.input(Input::StreamArrived),
        vec![
            Output::SetUpStreams,
            Output::Send(vec![State::TestStart.byte(), State::TestRunning.byte()]),
            Output::StartSide
        ]
    );
    assert_eq!(t.bytes(&[State::TestEnd.byte()]), vec![Output::PeerStopped]);
    assert_eq!(
        t.input(Input::SideDone { error: None }),
        vec![Output::CollectReport, state(State::ExchangeResults)]
    );
    // The client's results wait for the driver's report; this end's answer follows both.
    let all = results();
    let (first, last) = all.split_at(9);
    assert!(t.bytes(first).is_empty());
    assert!(t.input(report()).is_empty());
    let said = t.trickle(last);
    let [Output::Send(answer), Output::Send(display)] = said.as_slice() else {
        panic!("{said:?}")
    };
    assert_eq!(display, &vec![State::DisplayResults.byte()]);
    let mine: Value = serde_json::from_slice(&answer[4..]).unwrap();
    let ids: Vec<_> = mine["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_u64().unwrap(), s["bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        ids,
        vec![(1, 1_000_000), (u64::from(stream_id(1)), 1_000_000)]
    );
    assert!(mine.get("server_output_text").is_none());
    assert_eq!(
        t.bytes(&[State::IperfDone.byte()]),
        vec![Output::End(Ending::Finished)]
    );
    assert!(t.s.is_done());
    assert!(t.bytes(&[State::TestEnd.byte()]).is_empty());
}

#[test]
fn parameters_sent_with_the_cookie_are_read_at_once() {
    let t = T::new(Config::default(), &tcp_params());
    assert!(
        matches!(t.out.get(1), Some(Output::Admit(_))),
        "{:?}",
        t.out
    );
}

#[test]
fn bad_parameters_get_server_error_with_the_errno() {
    for bad in [
        params(json!({"tcp": true, "time": -1})),
        params(json!([1, 2])),
        vec![0, 0, 0, 3, b'{', b'x', b'}'],
        vec![0xff, 0, 0, 0],
    ] {
        let mut t = T::new(Config::default(), &[]);
        t.bytes(&bad);
        assert!(
            t.out
                .contains(&Output::Send(server_error(errno::IERECVPARAMS, 0).to_vec())),
            "{:?}",
            t.out
        );
        assert!(matches!(t.ended(), Some(Ending::Failed { told: true, .. })));
    }
}

#[test]
fn a_plan_the_server_refuses_is_told_and_a_busy_one_denied() {
    let mut t = T::new(Config::default(), &tcp_params());
    let said = t.input(Input::Invalid(errno::IENUMSTREAMS, "-P 200".into()));
    assert_eq!(
        said,
        vec![
            Output::Send(server_error(errno::IENUMSTREAMS, 0).to_vec()),
            Output::End(Ending::Refused("-P 200".into()))
        ]
    );
    let mut t = T::new(Config::default(), &tcp_params());
    let said = t.input(Input::Busy("4 tests from this address".into()));
    assert_eq!(said.first(), Some(&state(State::AccessDenied)));
}

#[test]
fn silence_and_missing_streams_time_out() {
    let mut t = T::new(Config::default(), &[]);
    assert!(t
        .advance(PARAMS_TIMEOUT - Duration::from_millis(1))
        .is_empty());
    t.advance(Duration::from_millis(1));
    assert!(
        matches!(t.ended(), Some(Ending::Failed { told: false, why }) if why.starts_with("reading the parameters"))
    );

    let mut t = T::new(Config::default(), &tcp_params());
    t.input(Input::Admitted);
    t.input(Input::StreamArrived);
    t.advance(STREAMS_TIMEOUT);
    assert_eq!(
        t.ended(),
        Some(&Ending::Failed {
            why: "only 1 of 2 data streams arrived within 30 s".into(),
            told: false
        })
    );
}

#[test]
fn a_state_while_streams_open_ends_the_test() {
    let mut t = T::new(Config::default(), &tcp_params());
    t.input(Input::Admitted);
    t.bytes(&[State::TestEnd.byte()]);
    assert!(
        matches!(t.ended(), Some(Ending::Failed { why, .. }) if why.contains("while its streams were opening"))
    );
}

#[test]
fn a_client_that_overruns_its_time_is_cut_off_with_an_errno() {
    let mut t = T::running();
    // -t 10 -O 0: the client has 10 s and the grace.
    assert!(t
        .advance(Duration::from_secs(10) + GRACE - Duration::from_millis(1))
        .is_empty());
    let said = t.advance(Duration::from_millis(1));
    assert_eq!(said.first(), Some(&Output::AbortSide));
    assert!(said.contains(&Output::Send(
        server_error(errno::IESERVERTESTDURATIONEXPIRED, 0).to_vec()
    )));
}

#[test]
fn max_duration_cuts_off_a_byte_count() {
    let cfg = Config {
        limits: Limits {
            max_duration: Some(Duration::from_secs(60)),
            ..Limits::default()
        },
        ..Config::default()
    };
    let mut t = T::new(
        cfg,
        &params(json!({"tcp": true, "num": 1_000_000_000_000u64})),
    );
    t.input(Input::Admitted);
    t.input(Input::StreamArrived);
    t.advance(Duration::from_secs(60) + GRACE);
    assert!(
        matches!(t.ended(), Some(Ending::Failed { told: true, why }) if why.contains("--max-duration"))
    );
}

#[test]
fn a_sender_done_before_test_end_waits_for_it_but_not_forever() {
    let mut t = T::new(
        Config::default(),
        &params(json!({"tcp": true, "num": 1000})),
    );
    t.input(Input::Admitted);
    t.input(Input::StreamArrived);
    assert!(t.input(Input::SideDone { error: None }).is_empty());
    // TEST_END within the idle limit: the results follow at once (the side is done).
    let mut u = T::new(
        Config::default(),
        &params(json!({"tcp": true, "num": 1000})),
    );
    u.input(Input::Admitted);
    u.input(Input::StreamArrived);
    u.input(Input::SideDone { error: None });
    u.advance(IDLE_LIMIT / 2);
    assert_eq!(
        u.bytes(&[State::TestEnd.byte()]),
        vec![
            Output::PeerStopped,
            Output::CollectReport,
            state(State::ExchangeResults)
        ]
    );
    // Without it, the test ends at the idle limit.
    t.advance(IDLE_LIMIT);
    assert!(matches!(t.ended(), Some(Ending::Failed { why, .. }) if why.contains("no TEST_END")));
}

#[test]
fn a_failed_stream_or_a_client_that_leaves_ends_the_test() {
    let mut t = T::running();
    t.input(Input::SideDone {
        error: Some("flow 1: connection reset".into()),
    });
    assert_eq!(
        t.ended(),
        Some(&Ending::Failed {
            why: "flow 1: connection reset".into(),
            told: false
        })
    );
    for (input, text) in [
        (Input::Closed, "the client went away mid-test"),
        (
            Input::Bytes(vec![State::ClientTerminate.byte()]),
            "CLIENT_TERMINATE",
        ),
        (
            Input::Bytes(vec![State::IperfDone.byte()]),
            "unexpected state",
        ),
    ] {
        let mut t = T::running();
        t.input(input);
        assert!(t.out.contains(&Output::AbortSide));
        assert!(
            matches!(t.ended(), Some(Ending::Failed { why, .. }) if why.contains(text)),
            "{text}"
        );
    }
}

#[test]
fn a_failed_set_up_drops_the_start_and_tells_the_client() {
    let mut t = T::new(Config::default(), &tcp_params());
    t.input(Input::Admitted);
    t.input(Input::StreamArrived);
    t.s.handle(Input::StreamArrived, t.now);
    // The driver fails the first action; what was queued after it never happens.
    assert_eq!(t.s.poll_output(), Some(Output::SetUpStreams));
    t.s.handle(
        Input::Failed(errno::IESETCONGESTION, "-C foo".into()),
        t.now,
    );
    let rest = t.drain();
    assert!(!rest.contains(&Output::StartSide), "{rest:?}");
    assert!(rest.contains(&Output::Send(
        server_error(errno::IESETCONGESTION, 0).to_vec()
    )));
}

#[test]
fn broken_results_get_an_errno_and_missing_ones_time_out() {
    let mut t = T::running();
    t.bytes(&[State::TestEnd.byte()]);
    t.input(Input::SideDone { error: None });
    t.input(report());
    t.bytes(&encode_json(&json!({"streams": 3})));
    assert!(t.out.contains(&Output::Send(
        server_error(errno::IERECVRESULTS, 0).to_vec()
    )));

    let mut t = T::running();
    t.bytes(&[State::TestEnd.byte()]);
    t.input(Input::SideDone { error: None });
    t.advance(RESULTS_TIMEOUT);
    assert!(
        matches!(t.ended(), Some(Ending::Failed { why, .. }) if why.starts_with("reading the client's results"))
    );
}

#[test]
fn without_iperf_done_the_session_still_finishes() {
    let mut t = T::running();
    t.bytes(&[State::TestEnd.byte()]);
    t.input(Input::SideDone { error: None });
    t.input(report());
    t.bytes(&results());
    t.advance(DONE_TIMEOUT);
    assert_eq!(t.ended(), Some(&Ending::Finished));
    let mut t = T::running();
    t.bytes(&[State::TestEnd.byte()]);
    t.input(Input::SideDone { error: None });
    t.bytes(&results());
    t.input(report());
    t.input(Input::Closed);
    assert_eq!(t.ended(), Some(&Ending::Finished));
}

#[test]
fn shutdown_tells_the_client_server_terminate() {
    let mut t = T::running();
    let said = t.input(Input::Shutdown);
    assert_eq!(
        said.get(..2),
        Some([Output::AbortSide, state(State::ServerTerminate)].as_slice())
    );
}

/// Any byte in any phase: no panic, and every session ends by its deadlines.
#[test]
fn any_byte_in_any_phase_ends_cleanly() {
    for steps in 0..5 {
        for b in 0..=255u8 {
            let mut t = T::new(Config::default(), &[]);
            let path = [
                Input::Bytes(tcp_params()),
                Input::Admitted,
                Input::StreamArrived,
                Input::Bytes(vec![State::TestEnd.byte()]),
                Input::SideDone { error: None },
            ];
            for i in path.into_iter().take(steps) {
                t.input(i);
            }
            t.bytes(&[b]);
            t.input(Input::Admitted);
            t.input(Input::StreamArrived);
            t.input(report_of(&params(json!({"tcp": true, "time": 10}))));
            for _ in 0..4 {
                t.advance(Duration::from_secs(3600));
                t.input(Input::SideDone { error: None });
                t.input(report());
            }
            assert!(t.ended().is_some(), "steps {steps} byte {b}: {:?}", t.out);
            let ends = t.out.iter().filter(|o| matches!(o, Output::End(_))).count();
            assert_eq!(ends, 1);
        }
    }
}

/// The server's output goes into the answer as the driver's writer writes it, in the shape
/// the server is set to, and only when the client asked for it.
#[test]
fn the_answer_carries_the_server_output_the_client_asked_for() {
    fn text(r: &RunResult) -> String {
        format!("text: {}\n", r.notes.join("; "))
    }
    fn doc(r: &RunResult) -> Value {
        json!({"notes": r.notes})
    }
    let asked = params(json!({"tcp": true, "time": 10, "parallel": 2, "get_server_output": 1}));
    for (output, ask, key) in [
        (
            Some(ServerOutput::Text(text)),
            true,
            Some("server_output_text"),
        ),
        (
            Some(ServerOutput::Json(doc)),
            true,
            Some("server_output_json"),
        ),
        (Some(ServerOutput::Text(text)), false, None),
        (None, true, None),
    ] {
        let cfg = Config {
            server_output: output,
            ..Config::default()
        };
        let sent = if ask { asked.clone() } else { tcp_params() };
        let mut t = T::new(cfg, &sent);
        t.input(Input::Admitted);
        t.input(Input::StreamArrived);
        t.input(Input::StreamArrived);
        t.bytes(&[State::TestEnd.byte()]);
        t.input(Input::SideDone { error: None });
        t.input(report_of(&sent));
        let said = t.bytes(&results());
        let Some(Output::Send(answer)) = said.first() else {
            panic!("{said:?}")
        };
        let mine: Value = serde_json::from_slice(&answer[4..]).unwrap();
        for k in ["server_output_text", "server_output_json"] {
            assert_eq!(mine.get(k).is_some(), Some(k) == key, "{k}: {mine}");
        }
        let from = "iperf3 test from 192.0.2.1:40000";
        match key {
            Some("server_output_text") => {
                let text = mine[key.unwrap()].as_str().unwrap();
                assert!(text.starts_with("text: ") && text.contains(from), "{text}");
            }
            Some(_) => assert_eq!(mine["server_output_json"]["notes"][0], from),
            None => {}
        }
    }
}

#[test]
fn results_without_a_stream_of_the_test_get_iestreamid() {
    let mut t = T::running();
    t.bytes(&[State::TestEnd.byte()]);
    t.input(Input::SideDone { error: None });
    t.input(report());
    t.bytes(&encode_json(&results_doc()));
    assert!(t
        .out
        .contains(&Output::Send(server_error(errno::IESTREAMID, 0).to_vec())));
    assert!(
        matches!(t.ended(), Some(Ending::Failed { why, told: true }) if why.contains("no stream with id 3")),
        "{:?}",
        t.ended()
    );
}

/// The parameters are checked by the machine: a rule broken is told with its i_errno and
/// never reaches the driver.
#[test]
fn parameters_that_break_a_rule_are_refused_with_the_errno() {
    let limits = Limits {
        max_duration: Some(Duration::from_secs(60)),
        max_rate: Some(1e9),
        max_flows: 8,
        congestion: vec!["cubic".into(), "reno".into()],
    };
    for (doc, code, words) in [
        (
            json!({"tcp": true, "time": 10, "parallel": 200}),
            errno::IENUMSTREAMS,
            "1 to 128",
        ),
        (
            json!({"tcp": true, "time": 10, "parallel": 9}),
            errno::IENUMSTREAMS,
            "--max-flows",
        ),
        (
            json!({"tcp": true, "time": 61}),
            errno::IEDURATION,
            "--max-duration",
        ),
        (
            json!({"tcp": true, "time": 10, "congestion": "bbr"}),
            errno::IESETCONGESTION,
            "available: cubic reno",
        ),
        (
            json!({"udp": true, "time": 10, "reverse": true, "bandwidth": 0}),
            errno::IEUDPBLOCKSIZE,
            "--max-rate",
        ),
        (
            json!({"tcp": true, "time": 10, "reverse": true}),
            errno::IETOTALRATE,
            "--max-rate",
        ),
        (
            json!({"udp": true, "time": 10, "len": 8}),
            errno::IEUDPBLOCKSIZE,
            "12 to 65507",
        ),
        (json!({"tcp": true}), errno::IEDURATION, "never end"),
    ] {
        let cfg = Config {
            limits: limits.clone(),
            ..Config::default()
        };
        let t = T::new(cfg, &params(doc.clone()));
        assert_eq!(
            t.out.get(1),
            Some(&Output::Send(server_error(code, 0).to_vec())),
            "{doc}: {:?}",
            t.out
        );
        assert!(
            matches!(t.ended(), Some(Ending::Refused(why)) if why.contains(words)),
            "{doc}: {:?}",
            t.ended()
        );
        assert!(!t.out.iter().any(|o| matches!(o, Output::Admit(_))));
    }
    // Within every limit: admitted.
    let t = T::new(
        Config {
            limits,
            ..Config::default()
        },
        &params(
            json!({"tcp": true, "time": 10, "parallel": 8, "congestion": "reno", "reverse": true, "bandwidth": 100_000_000}),
        ),
    );
    assert!(
        matches!(t.out.get(1), Some(Output::Admit(p)) if p.flows.len() == 8),
        "{:?}",
        t.out
    );
}

#[test]
fn every_input_in_every_state_keeps_the_conventions() {
    let path = || {
        vec![
            Input::Bytes(tcp_params()),
            Input::Admitted,
            Input::StreamArrived,
            Input::StreamArrived,
            Input::Bytes(vec![State::TestEnd.byte()]),
            Input::SideDone { error: None },
            report(),
            Input::Bytes(results()),
            Input::Bytes(vec![State::IperfDone.byte()]),
        ]
    };
    let inputs = || {
        vec![
            Input::Bytes(vec![0xff; 7]),
            Input::Bytes(vec![]),
            Input::Bytes(tcp_params()),
            Input::Bytes(b"{\"tcp\": tru".to_vec()),
            Input::Bytes(vec![State::TestEnd.byte()]),
            Input::Bytes(vec![State::IperfDone.byte()]),
            Input::Bytes(results()),
            Input::ReadFailed("reset".into()),
            Input::Closed,
            Input::Admitted,
            Input::Invalid(errno::IENUMSTREAMS, "bad".into()),
            Input::Busy("busy".into()),
            Input::StreamArrived,
            Input::Failed(1, "failed".into()),
            Input::SideDone { error: None },
            Input::SideDone {
                error: Some("side".into()),
            },
            report(),
            Input::Shutdown,
        ]
    };
    let answers = || vec![Input::Admitted, Input::SideDone { error: None }, report()];
    let n = crate::sweep::Sweep {
        make: &|now| Session::new(Config::default(), &[], now),
        path: &path,
        inputs: &inputs,
        answers: &answers,
    }
    .run();
    assert_eq!(n, 10 * 18);
}
