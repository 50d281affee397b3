//! The `--iperf3` client machine on virtual time, alone and against the server machine.

use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_proto::iperf3::{encode_json, errno, server_error, Results, State};
use serde_json::{json, Value};

use super::client::{Error, Input, Output, Session, STEP_TIMEOUT};
use super::server;
use super::server_tests::results_doc;

const COOKIE: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";

fn params() -> Value {
    json!({"tcp": true, "omit": 0, "time": 10, "parallel": 1, "len": 131072,
           "client_version": "hakaru-test"})
}

fn results() -> Box<Results> {
    Box::new(Results::parse(&serde_json::to_vec(&results_doc()).expect("json")).expect("results"))
}

struct T {
    s: Session,
    now: Instant,
    out: Vec<Output>,
}

impl T {
    fn new(timed: Option<Duration>) -> T {
        let now = Instant::now();
        let mut t = T {
            s: Session::new(COOKIE, params(), timed, now),
            now,
            out: vec![],
        };
        t.drain();
        t
    }

    fn drain(&mut self) -> Vec<Output> {
        let new: Vec<Output> = std::iter::from_fn(|| self.s.poll_output()).collect();
        self.out.extend(new.iter().cloned());
        new
    }

    fn input(&mut self, i: Input) -> Vec<Output> {
        self.s.handle(i, self.now);
        self.drain()
    }

    fn states(&mut self, s: &[State]) -> Vec<Output> {
        self.input(Input::Bytes(s.iter().map(|x| x.byte()).collect()))
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

    fn running(timed: Option<Duration>) -> T {
        let mut t = T::new(timed);
        t.states(&[State::ParamExchange, State::CreateStreams]);
        t.input(Input::StreamsOpen);
        t.states(&[State::TestStart, State::TestRunning]);
        assert!(t.out.contains(&Output::StartSide), "{:?}", t.out);
        t
    }

    fn error(&self) -> Option<&Error> {
        self.out.iter().find_map(|o| match o {
            Output::End(Err(e)) => Some(e),
            _ => None,
        })
    }
}

#[test]
fn a_timed_test_follows_iperf3s_dialogue() {
    let mut t = T::new(Some(Duration::from_secs(10)));
    assert_eq!(t.out, vec![Output::Send(COOKIE.to_vec())]);
    assert_eq!(
        t.states(&[State::ParamExchange]),
        vec![Output::Send(encode_json(&params()))]
    );
    assert_eq!(t.states(&[State::CreateStreams]), vec![Output::OpenStreams]);
    // TEST_START may come while the streams open: it waits in the inbox.
    assert!(t.states(&[State::TestStart]).is_empty());
    assert!(t.input(Input::StreamsOpen).is_empty());
    assert_eq!(t.states(&[State::TestRunning]), vec![Output::StartSide]);
    assert!(t.advance(Duration::from_millis(9_999)).is_empty());
    assert_eq!(t.advance(Duration::from_millis(1)), vec![Output::Land]);
    assert_eq!(
        t.input(Input::Landed),
        vec![Output::Send(vec![State::TestEnd.byte()]), Output::Drain]
    );
    let mine = results().to_json();
    assert!(t.input(Input::SideDone(results())).is_empty());
    assert_eq!(
        t.states(&[State::ExchangeResults]),
        vec![Output::Send(encode_json(&mine))]
    );
    let said = t.input(Input::Bytes(encode_json(&results_doc())));
    assert!(matches!(said.as_slice(), [Output::Results(_)]), "{said:?}");
    assert_eq!(
        t.states(&[State::DisplayResults]),
        vec![
            Output::Send(vec![State::IperfDone.byte()]),
            Output::End(Ok(false))
        ]
    );
}

#[test]
fn an_amount_ends_when_the_driver_says_and_ctrl_c_marks_it_interrupted() {
    let mut t = T::running(None);
    assert_eq!(t.s.timeout(), None, "no clock for an amount");
    assert_eq!(t.input(Input::AmountDone), vec![Output::Land]);

    let mut t = T::running(Some(Duration::from_secs(60)));
    assert_eq!(t.input(Input::Interrupt), vec![Output::Land]);
    t.input(Input::Landed);
    t.input(Input::SideDone(results()));
    t.states(&[State::ExchangeResults]);
    t.input(Input::Bytes(encode_json(&results_doc())));
    let said = t.states(&[State::DisplayResults]);
    assert_eq!(said.last(), Some(&Output::End(Ok(true))));
}

#[test]
fn the_servers_refusals_are_named() {
    let mut t = T::new(None);
    t.states(&[State::AccessDenied]);
    assert_eq!(t.error(), Some(&Error::Busy));

    let mut t = T::new(None);
    t.states(&[State::ParamExchange]);
    // SERVER_ERROR, then the i_errno a byte at a time.
    let mut b = server_error(errno::IENUMSTREAMS, 0).to_vec();
    b.truncate(5);
    for x in b {
        t.input(Input::Bytes(vec![x]));
    }
    assert_eq!(t.error(), Some(&Error::ServerError(errno::IENUMSTREAMS)));

    let mut t = T::new(None);
    t.states(&[State::ServerError]);
    t.advance(Duration::from_secs(2));
    assert_eq!(
        t.error(),
        Some(&Error::ServerError(0)),
        "no i_errno in time"
    );

    let mut t = T::running(None);
    t.states(&[State::ServerTerminate]);
    assert_eq!(t.error(), Some(&Error::Terminated));
    assert!(t.out.contains(&Output::AbortSide));
}

#[test]
fn a_state_out_of_turn_and_a_silent_server_fail() {
    let mut t = T::new(None);
    t.states(&[State::TestRunning]);
    assert_eq!(
        t.error(),
        Some(&Error::Unexpected {
            state: State::TestRunning,
            waiting_for: "waiting for PARAM_EXCHANGE"
        })
    );
    let mut t = T::running(None);
    t.states(&[State::ExchangeResults]);
    assert!(matches!(
        t.error(),
        Some(Error::Unexpected {
            waiting_for: "the test ran",
            ..
        })
    ));

    let mut t = T::new(None);
    t.advance(STEP_TIMEOUT);
    assert!(matches!(t.error(), Some(Error::Gone(w)) if w.contains("within 30.0 s")));

    let mut t = T::running(Some(Duration::from_secs(5)));
    t.input(Input::Closed);
    assert!(matches!(t.error(), Some(Error::Gone(w)) if w.contains("is it an iperf3 server?")));
}

#[test]
fn a_failed_stream_sends_client_terminate() {
    let mut t = T::running(None);
    let said = t.input(Input::SideFailed("flow 0: reset".into()));
    assert_eq!(
        said,
        vec![
            Output::Send(vec![State::ClientTerminate.byte()]),
            Output::AbortSide,
            Output::End(Err(Error::Flow("flow 0: reset".into())))
        ]
    );
}

#[test]
fn bad_results_are_an_error() {
    let mut t = T::running(None);
    t.input(Input::AmountDone);
    t.input(Input::Landed);
    t.input(Input::SideDone(results()));
    t.states(&[State::ExchangeResults]);
    t.input(Input::Bytes(encode_json(&json!({"streams": "no"}))));
    assert!(matches!(t.error(), Some(Error::BadResults(_))));
}

/// The client machine against the server machine, bytes passed between them in memory, the
/// drivers' parts played by the test: a whole iperf3 test with no socket.
#[test]
fn the_client_and_server_machines_complete_a_test_together() {
    let now = Instant::now();
    let mut c = Session::new(COOKIE, params(), Some(Duration::from_secs(10)), now);
    let mut to_server: Vec<u8> = vec![];
    let mut s: Option<server::Session> = None;
    let mut plan = None;
    let (mut client_end, mut server_end) = (None, None);
    let mut clock = now;
    for _ in 0..200 {
        // The client's outputs.
        while let Some(o) = c.poll_output() {
            match o {
                Output::Send(b) => to_server.extend(b),
                Output::OpenStreams => c.handle(Input::StreamsOpen, clock),
                Output::StartSide => {}
                Output::Land => c.handle(Input::Landed, clock),
                Output::Drain => c.handle(Input::SideDone(results()), clock),
                Output::Results(r) => assert_eq!(r.streams.len(), 1),
                Output::AbortSide => panic!("the client aborted"),
                Output::End(how) => client_end = Some(how),
            }
        }
        // The server starts once the cookie is in (the dispatcher reads it).
        let srv = s.get_or_insert_with(|| {
            let after = to_server.split_off(COOKIE.len());
            assert_eq!(std::mem::take(&mut to_server), COOKIE);
            server::Session::new(server::Config::default(), &after, clock)
        });
        if !to_server.is_empty() {
            srv.handle(server::Input::Bytes(std::mem::take(&mut to_server)), clock);
        }
        let mut to_client = vec![];
        while let Some(o) = srv.poll_output() {
            match o {
                server::Output::Send(b) => to_client.extend(b),
                server::Output::Admit(p) => {
                    assert_eq!(p.params.time, 10.0);
                    plan = Some(p);
                    srv.handle(server::Input::Admitted, clock);
                    srv.handle(server::Input::StreamArrived, clock);
                }
                server::Output::PeerStopped => {
                    srv.handle(server::Input::SideDone { error: None }, clock)
                }
                server::Output::CollectReport => {
                    let got = super::server_tests::collected(plan.as_ref().expect("a plan"));
                    srv.handle(server::Input::Report(Box::new(got)), clock)
                }
                server::Output::End(how) => server_end = Some(how),
                _ => {}
            }
        }
        if !to_client.is_empty() {
            c.handle(Input::Bytes(to_client), clock);
        } else if client_end.is_none() {
            // Nothing in flight: time passes to the next deadline.
            clock += Duration::from_secs(1);
            if c.timeout().is_some_and(|t| clock >= t) {
                c.handle_timeout(clock);
            }
        }
        if client_end.is_some() && server_end.is_some() {
            break;
        }
    }
    assert_eq!(client_end, Some(Ok(false)));
    assert_eq!(server_end, Some(server::Ending::Finished));
    assert_eq!(
        clock - now,
        Duration::from_secs(10),
        "the test ran its 10 s"
    );
}

#[test]
fn every_input_in_every_state_keeps_the_conventions() {
    let byte = |s: State| Input::Bytes(vec![s.byte()]);
    let path = || {
        vec![
            byte(State::ParamExchange),
            byte(State::CreateStreams),
            Input::StreamsOpen,
            Input::Bytes(vec![State::TestStart.byte(), State::TestRunning.byte()]),
            Input::AmountDone,
            Input::Landed,
            Input::SideDone(results()),
            byte(State::ExchangeResults),
            Input::Bytes(encode_json(&results_doc())),
            byte(State::DisplayResults),
        ]
    };
    let inputs = || {
        vec![
            Input::Bytes(vec![0x7f; 3]),
            Input::Bytes(vec![]),
            byte(State::ParamExchange),
            byte(State::TestRunning),
            byte(State::AccessDenied),
            byte(State::ServerError),
            Input::Bytes(server_error(errno::IENUMSTREAMS, 0).to_vec()),
            Input::Bytes(encode_json(&results_doc())),
            Input::Bytes(b"{\"streams\": [".to_vec()),
            Input::ReadFailed("reset".into()),
            Input::Closed,
            Input::StreamsOpen,
            Input::AmountDone,
            Input::Interrupt,
            Input::SideFailed("stream".into()),
            Input::Landed,
            Input::SideDone(results()),
            Input::Failed(Error::ServerError(1)),
        ]
    };
    let answers = || {
        vec![
            Input::StreamsOpen,
            Input::Landed,
            Input::SideDone(results()),
        ]
    };
    let n = crate::sweep::Sweep {
        make: &|now| Session::new(COOKIE, params(), Some(Duration::from_secs(10)), now),
        path: &path,
        inputs: &inputs,
        answers: &answers,
    }
    .run();
    assert_eq!(n, 11 * 18);
}
