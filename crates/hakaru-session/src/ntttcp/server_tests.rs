//! The ntttcp receiver machine on virtual time, fed the words a stock sender sends (split at
//! every byte, too).

use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_proto::ntttcp::{encode, state, EXIT, LAST, QUERY, RUN, WAIT};

use super::server::*;

struct T {
    s: Session,
    now: Instant,
}

impl T {
    fn new() -> T {
        let now = Instant::now();
        T {
            s: Session::new(now),
            now,
        }
    }

    fn drain(&mut self) -> Vec<Output> {
        let mut v = vec![];
        while let Some(o) = self.s.poll_output() {
            v.push(o);
        }
        v
    }

    fn input(&mut self, i: Input) -> Vec<Output> {
        self.s.handle(i, self.now);
        self.drain()
    }

    fn word(&mut self, w: i32) -> Vec<Output> {
        self.input(Input::Bytes(encode(w).to_vec()))
    }

    fn advance(&mut self, d: Duration) -> Vec<Output> {
        let end = self.now + d;
        let mut said = vec![];
        while let Some(t) = self.s.timeout().filter(|&t| t <= end) {
            self.now = t;
            self.s.handle_timeout(t);
            said.extend(self.drain());
        }
        self.now = end;
        said
    }

    /// Through 'X' and the duration to where the sender asks to start.
    fn reach_connecting(&mut self, secs: i32) {
        assert_eq!(self.word(QUERY), vec![Output::Join]);
        assert_eq!(
            self.input(Input::Joined { busy: false }),
            vec![Output::Send(encode(state::NOT_STARTED))]
        );
        assert_eq!(self.word(secs), vec![Output::Negotiate(secs)]);
        assert_eq!(
            self.input(Input::Negotiated(secs)),
            vec![Output::Send(encode(secs))]
        );
    }

    fn reach_running(&mut self) {
        self.reach_connecting(10);
        assert_eq!(self.word(RUN), vec![Output::Admit { last: false }]);
        assert_eq!(
            self.input(Input::Go { owner: true }),
            vec![Output::Send(encode(RUN)), Output::StartSide]
        );
    }
}

fn ended(out: &[Output]) -> Option<&Ending> {
    out.iter().find_map(|o| match o {
        Output::End(e) => Some(e),
        _ => None,
    })
}

fn failed_with(out: &[Output], words: &str) {
    match ended(out) {
        Some(Ending::Failed(w)) => assert!(w.contains(words), "{w:?} lacks {words:?}"),
        other => panic!("expected a failure naming {words:?}, got {other:?} in {out:?}"),
    }
}

#[test]
fn a_single_sender_runs_and_ends_with_e() {
    let mut t = T::new();
    t.reach_running();
    assert_eq!(t.s.cycle(), 10);
    // The sender ran less than the cycle: 'E', answered "finished".
    assert_eq!(t.word(EXIT), vec![Output::Send(encode(state::FINISHED))]);
    assert_eq!(t.input(Input::Closed), vec![]);
    assert_eq!(
        t.input(Input::SideDone { error: None }),
        vec![Output::CollectReport, Output::End(Ending::Finished)]
    );
    assert!(t.s.is_done());
    // End, then silence.
    assert_eq!(t.word(QUERY), vec![]);
    assert_eq!(t.advance(Duration::from_secs(3600)), vec![]);
}

#[test]
fn the_whole_dialogue_byte_by_byte() {
    let mut t = T::new();
    let mut said = vec![];
    for b in encode(QUERY) {
        said.extend(t.input(Input::Bytes(vec![b])));
    }
    assert_eq!(said, vec![Output::Join]);
    t.input(Input::Joined { busy: false });
    let mut said = vec![];
    for b in encode(5) {
        said.extend(t.input(Input::Bytes(vec![b])));
    }
    assert_eq!(said, vec![Output::Negotiate(5)]);
}

#[test]
fn the_data_plane_ending_first_waits_briefly_for_the_sync_close() {
    let mut t = T::new();
    t.reach_running();
    assert_eq!(t.input(Input::SideDone { error: None }), vec![]);
    let out = t.advance(DRAIN);
    assert_eq!(
        out,
        vec![Output::CollectReport, Output::End(Ending::Finished)]
    );
}

#[test]
fn data_that_does_not_end_is_drained_then_given_up() {
    let mut t = T::new();
    t.reach_running();
    assert_eq!(t.input(Input::Closed), vec![]);
    assert_eq!(t.advance(DRAIN), vec![Output::DrainSide]);
    let out = t.advance(DRAIN);
    assert_eq!(out.first(), Some(&Output::AbortSide));
    failed_with(&out, "did not end");
}

#[test]
fn drained_data_that_ends_finishes() {
    let mut t = T::new();
    t.reach_running();
    t.word(EXIT);
    assert_eq!(t.advance(DRAIN), vec![Output::DrainSide]);
    assert_eq!(
        t.input(Input::SideDone { error: None }),
        vec![Output::CollectReport, Output::End(Ending::Finished)]
    );
}

#[test]
fn a_test_past_its_cycle_is_cut_off() {
    let mut t = T::new();
    t.reach_running();
    let out = t.advance(Duration::from_secs(10) + GRACE);
    assert_eq!(out.first(), Some(&Output::AbortSide));
    failed_with(&out, "ran past its 10 s cycle");
}

#[test]
fn a_failed_connection_fails_the_test() {
    let mut t = T::new();
    t.reach_running();
    let out = t.input(Input::SideDone {
        error: Some("flow 2: reset".into()),
    });
    failed_with(&out, "flow 2: reset");
    assert!(!out.contains(&Output::AbortSide));
}

#[test]
fn a_busy_group_hears_running() {
    let mut t = T::new();
    t.word(QUERY);
    let out = t.input(Input::Joined { busy: true });
    assert_eq!(out.first(), Some(&Output::Send(encode(state::RUNNING))));
    assert!(matches!(ended(&out), Some(Ending::Refused(w)) if w.contains("busy")));
}

#[test]
fn several_senders_wait_for_the_last() {
    let mut t = T::new();
    t.reach_connecting(10);
    t.word(RUN);
    assert_eq!(t.input(Input::Wait), vec![Output::Send(encode(WAIT))]);
    assert!(t.s.is_waiting());
    // Not the owner: 'R' and no data plane.
    assert_eq!(
        t.input(Input::Go { owner: false }),
        vec![Output::Send(encode(RUN))]
    );
    assert_eq!(t.input(Input::Closed), vec![Output::End(Ending::Finished)]);

    let mut last = T::new();
    last.reach_connecting(10);
    assert_eq!(last.word(LAST), vec![Output::Admit { last: true }]);
    assert_eq!(
        last.input(Input::Go { owner: true }),
        vec![Output::Send(encode(RUN)), Output::StartSide]
    );
}

#[test]
fn a_waiting_sender_gives_up_on_a_last_that_never_comes() {
    let mut t = T::new();
    t.reach_connecting(10);
    t.word(RUN);
    t.input(Input::Wait);
    let out = t.advance(LAST_SENDER_TIMEOUT);
    assert_eq!(out.first(), Some(&Output::Send(encode(EXIT))));
    failed_with(&out, "no last sender");
}

#[test]
fn refusals_say_e() {
    let mut t = T::new();
    t.reach_connecting(10);
    t.word(LAST);
    let out = t.input(Input::Refused("too many senders".into()));
    assert_eq!(out.first(), Some(&Output::Send(encode(EXIT))));
    assert_eq!(
        ended(&out),
        Some(&Ending::Refused("too many senders".into()))
    );
    // A waiting sender refused later (its group failed) hears 'E' too.
    let mut t = T::new();
    t.reach_connecting(10);
    t.word(RUN);
    t.input(Input::Wait);
    let out = t.input(Input::Refused("the last sender was refused".into()));
    assert_eq!(out.first(), Some(&Output::Send(encode(EXIT))));
}

#[test]
fn every_step_has_a_timeout() {
    let mut t = T::new();
    failed_with(&t.advance(STEP_TIMEOUT), "asked nothing");
    let mut t = T::new();
    t.word(QUERY);
    t.input(Input::Joined { busy: false });
    failed_with(&t.advance(STEP_TIMEOUT), "proposed no test time");
    let mut t = T::new();
    t.reach_connecting(3);
    failed_with(&t.advance(CONNECT_TIMEOUT), "did not ask to start");
}

#[test]
fn bad_words_in_every_phase_end_the_session() {
    // Before 'X'.
    let mut t = T::new();
    failed_with(&t.word(RUN), "'R' where its first word, 'X', belongs");
    // Where the duration belongs.
    let mut t = T::new();
    t.word(QUERY);
    t.input(Input::Joined { busy: false });
    failed_with(&t.word(QUERY), "'X' where its test time belongs");
    // Where 'R' belongs.
    let mut t = T::new();
    t.reach_connecting(10);
    failed_with(&t.word(1234), "1234 where 'R' or 'L' belongs");
    // Before the server answered.
    let mut t = T::new();
    t.word(QUERY);
    failed_with(&t.word(7), "before the server had answered");
    // While waiting.
    let mut t = T::new();
    t.reach_connecting(10);
    t.word(RUN);
    t.input(Input::Wait);
    failed_with(&t.word(EXIT), "stopped ('E') while it waited");
    // During the test: the data plane goes.
    let mut t = T::new();
    t.reach_running();
    let out = t.word(LAST);
    assert_eq!(out.first(), Some(&Output::AbortSide));
    failed_with(&out, "'L' during the test");
    // 'X' during the test is answered.
    let mut t = T::new();
    t.reach_running();
    assert_eq!(t.word(QUERY), vec![Output::Send(encode(state::RUNNING))]);
}

#[test]
fn a_close_in_every_phase_before_the_test_fails() {
    type Case = (fn(&mut T), &'static str);
    let cases: [Case; 4] = [
        (|_| {}, "where its first word"),
        (
            |t| {
                t.word(QUERY);
                t.input(Input::Joined { busy: false });
            },
            "where its test time belongs",
        ),
        (|t| t.reach_connecting(10), "where 'R' or 'L' belongs"),
        (
            |t| {
                t.reach_connecting(10);
                t.word(RUN);
                t.input(Input::Wait);
            },
            "while it waited",
        ),
    ];
    for (setup, words) in cases {
        let mut t = T::new();
        setup(&mut t);
        failed_with(&t.input(Input::Closed), words);
        let mut t = T::new();
        setup(&mut t);
        failed_with(&t.input(Input::ReadFailed("reset".into())), "reset");
    }
}

#[test]
fn a_failed_action_drops_what_was_queued() {
    let mut t = T::new();
    t.reach_connecting(10);
    t.word(RUN);
    t.s.handle(Input::Go { owner: true }, t.now);
    // The driver could not start the engine: 'R' went, StartSide failed.
    assert_eq!(t.s.poll_output(), Some(Output::Send(encode(RUN))));
    let out = t.input(Input::Failed("no thread".into()));
    assert_eq!(
        out,
        vec![
            Output::AbortSide,
            Output::End(Ending::Failed("no thread".into()))
        ]
    );
}

#[test]
fn shutdown_aborts_a_running_test() {
    let mut t = T::new();
    t.reach_running();
    let out = t.input(Input::Shutdown);
    assert_eq!(out.first(), Some(&Output::AbortSide));
    failed_with(&out, "shutting down");
}

#[test]
fn negotiation_caps_the_cycle() {
    let max = Some(Duration::from_secs(30));
    assert_eq!(negotiate(10, max), 10);
    assert_eq!(negotiate(31, max), 30);
    assert_eq!(negotiate(0, max), 30);
    assert_eq!(negotiate(-4, max), 30);
    assert_eq!(negotiate(0, None), DEFAULT_CYCLE);
    assert_eq!(negotiate(i32::MAX, None), i32::MAX);
    assert_eq!(negotiate(5, Some(Duration::from_millis(10))), 1);
}

#[test]
fn every_input_in_every_phase_never_panics() {
    let setups: [fn(&mut T); 6] = [
        |_| {},
        |t| {
            t.word(QUERY);
        },
        |t| t.reach_connecting(2),
        |t| {
            t.reach_connecting(2);
            t.word(RUN);
        },
        |t| {
            t.reach_connecting(2);
            t.word(RUN);
            t.input(Input::Wait);
        },
        |t| t.reach_running(),
    ];
    let inputs = || {
        vec![
            Input::Bytes(vec![0xff; 7]),
            Input::Bytes(vec![]),
            Input::Closed,
            Input::ReadFailed("x".into()),
            Input::Joined { busy: false },
            Input::Negotiated(-1),
            Input::Go { owner: true },
            Input::Wait,
            Input::Refused("r".into()),
            Input::Failed("f".into()),
            Input::SideDone { error: None },
            Input::Shutdown,
        ]
    };
    for setup in setups {
        for i in inputs() {
            let mut t = T::new();
            setup(&mut t);
            t.input(i);
            for j in inputs() {
                t.input(j);
            }
            t.advance(Duration::from_secs(86_400));
            assert!(t.s.is_done(), "a session must end within a day");
        }
    }
}

#[test]
fn every_input_in_every_state_keeps_the_conventions() {
    let word = |w: i32| Input::Bytes(encode(w).to_vec());
    let path = || {
        vec![
            word(QUERY),
            Input::Joined { busy: false },
            word(10),
            Input::Negotiated(10),
            word(RUN),
            Input::Go { owner: true },
            Input::SideDone { error: None },
        ]
    };
    let inputs = || {
        vec![
            Input::Bytes(vec![0xff; 7]),
            Input::Bytes(vec![]),
            word(QUERY),
            word(RUN),
            word(LAST),
            word(EXIT),
            word(-9),
            Input::ReadFailed("reset".into()),
            Input::Closed,
            Input::Joined { busy: true },
            Input::Joined { busy: false },
            Input::Negotiated(-1),
            Input::Go { owner: true },
            Input::Go { owner: false },
            Input::Wait,
            Input::Refused("refused".into()),
            Input::Failed("failed".into()),
            Input::SideDone {
                error: Some("side".into()),
            },
            Input::Shutdown,
        ]
    };
    let answers = || {
        vec![
            Input::Joined { busy: false },
            Input::Negotiated(10),
            Input::Go { owner: true },
            Input::SideDone { error: None },
        ]
    };
    let n = crate::sweep::Sweep {
        make: &Session::new,
        path: &path,
        inputs: &inputs,
        answers: &answers,
    }
    .run();
    assert_eq!(n, 8 * 19);
}
