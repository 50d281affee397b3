//! The ntttcp sender machine on virtual time, against the words a stock receiver answers,
//! and against the receiver machine in memory.

use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_proto::ntttcp::{encode, state, EXIT, QUERY, RUN, WAIT};

use super::client::*;
use super::server as rx;

struct T {
    s: Session,
    now: Instant,
}

impl T {
    fn new(proposed: i32) -> (T, Vec<Output>) {
        let now = Instant::now();
        let mut t = T {
            s: Session::new(proposed, now),
            now,
        };
        let first = t.drain();
        (t, first)
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

    fn reach_running(&mut self, cycle: i32) {
        assert_eq!(self.word(state::NOT_STARTED), vec![send(5)]);
        assert_eq!(self.word(cycle), vec![Output::OpenData(cycle)]);
        assert_eq!(self.input(Input::Opened), vec![send(RUN)]);
        assert_eq!(self.word(RUN), vec![Output::StartSide]);
        assert!(self.s.is_running());
    }
}

fn send(w: i32) -> Output {
    Output::Send(encode(w))
}

fn error_of(out: &[Output]) -> Option<Error> {
    out.iter().find_map(|o| match o {
        Output::End(Err(e)) => Some(e.clone()),
        _ => None,
    })
}

#[test]
fn a_test_as_long_as_the_cycle_ends_without_e() {
    let (mut t, first) = T::new(5);
    assert_eq!(first, vec![send(QUERY)]);
    t.reach_running(5);
    assert_eq!(t.s.cycle(), 5);
    let out = t.input(Input::SideDone {
        ran: Duration::from_secs(5),
    });
    assert_eq!(out, vec![Output::End(Ok(false))]);
    // End, then silence.
    assert_eq!(t.word(RUN), vec![]);
    assert_eq!(t.advance(Duration::from_secs(999)), vec![]);
}

#[test]
fn a_shorter_test_says_e_and_takes_the_answer_or_the_close() {
    let (mut t, _) = T::new(5);
    t.reach_running(8);
    let out = t.input(Input::SideDone {
        ran: Duration::from_secs(5),
    });
    assert_eq!(out, vec![send(EXIT)]);
    assert_eq!(t.word(state::FINISHED), vec![Output::End(Ok(false))]);
    // A stock receiver that has already exited closes instead.
    let (mut t, _) = T::new(5);
    t.reach_running(8);
    t.input(Input::SideDone {
        ran: Duration::from_secs(5),
    });
    assert_eq!(t.input(Input::Closed), vec![Output::End(Ok(false))]);
    // Or says nothing at all.
    let (mut t, _) = T::new(5);
    t.reach_running(0);
    t.input(Input::SideDone {
        ran: Duration::from_secs(5),
    });
    assert_eq!(t.advance(EXIT_TIMEOUT), vec![Output::End(Ok(false))]);
}

#[test]
fn the_user_stop_stops_the_side_and_is_reported() {
    let (mut t, _) = T::new(5);
    t.reach_running(5);
    assert_eq!(t.input(Input::Interrupt), vec![Output::StopSide]);
    assert_eq!(t.input(Input::Interrupt), vec![]);
    t.input(Input::SideDone {
        ran: Duration::from_secs(2),
    });
    assert_eq!(t.word(state::FINISHED), vec![Output::End(Ok(true))]);
    // Before the start it is an error.
    let (mut t, _) = T::new(5);
    assert_eq!(
        error_of(&t.input(Input::Interrupt)),
        Some(Error::Interrupted)
    );
}

#[test]
fn a_receiver_that_waits_for_the_last_sender_gets_longer() {
    let (mut t, _) = T::new(5);
    t.word(state::NOT_STARTED);
    t.word(5);
    t.input(Input::Opened);
    assert_eq!(t.word(WAIT), vec![]);
    assert_eq!(t.advance(STEP_TIMEOUT), vec![]);
    assert_eq!(t.word(RUN), vec![Output::StartSide]);
    let (mut t, _) = T::new(5);
    t.word(state::NOT_STARTED);
    t.word(5);
    t.input(Input::Opened);
    t.word(WAIT);
    assert!(matches!(
        error_of(&t.advance(WAIT_TIMEOUT)),
        Some(Error::Gone(w)) if w.contains("'R'")
    ));
}

#[test]
fn busy_refused_and_bad_words_are_errors() {
    let (mut t, _) = T::new(5);
    assert_eq!(error_of(&t.word(state::RUNNING)), Some(Error::Busy));
    let (mut t, _) = T::new(5);
    assert_eq!(
        error_of(&t.word(77)),
        Some(Error::Unexpected {
            word: 77,
            waiting_for: "the receiver's state"
        })
    );
    let (mut t, _) = T::new(5);
    t.word(state::NOT_STARTED);
    assert_eq!(
        error_of(&t.word(-2)),
        Some(Error::Unexpected {
            word: -2,
            waiting_for: "the negotiated test time"
        })
    );
    let (mut t, _) = T::new(5);
    t.word(state::NOT_STARTED);
    t.word(5);
    t.input(Input::Opened);
    assert_eq!(error_of(&t.word(EXIT)), Some(Error::Refused(EXIT)));
    // Bytes during the test are ignored (a stock receiver's second 'R').
    let (mut t, _) = T::new(5);
    t.reach_running(5);
    assert_eq!(t.word(RUN), vec![]);
    assert_eq!(t.input(Input::Bytes(vec![1, 2, 3])), vec![]);
}

#[test]
fn closes_and_timeouts_before_the_test_are_errors() {
    for steps in 0..3 {
        for close in [true, false] {
            let (mut t, _) = T::new(5);
            if steps > 0 {
                t.word(state::NOT_STARTED);
            }
            if steps > 1 {
                t.word(5);
                t.input(Input::Opened);
            }
            let out = if close {
                t.input(Input::Closed)
            } else {
                t.advance(STEP_TIMEOUT)
            };
            assert!(
                matches!(error_of(&out), Some(Error::Gone(_))),
                "{steps} {close}: {out:?}"
            );
        }
    }
    // While the data connections open, a close is an error too.
    let (mut t, _) = T::new(5);
    t.word(state::NOT_STARTED);
    t.word(5);
    assert!(matches!(
        error_of(&t.input(Input::ReadFailed("reset".into()))),
        Some(Error::Gone(w)) if w.contains("reset")
    ));
}

#[test]
fn a_failed_action_drops_what_was_queued_and_aborts_the_side() {
    let (mut t, _) = T::new(5);
    t.word(state::NOT_STARTED);
    t.word(5);
    assert_eq!(
        error_of(&t.input(Input::Failed("port 5002 refused".into()))),
        Some(Error::Flow("port 5002 refused".into()))
    );
    let (mut t, _) = T::new(5);
    t.reach_running(5);
    let out = t.input(Input::Failed("flow 1: reset".into()));
    assert_eq!(out.first(), Some(&Output::AbortSide));
}

/// The sender machine against the receiver machine, every word through the real encoding.
#[test]
fn sender_and_receiver_machines_agree() {
    let now = Instant::now();
    let mut c = Session::new(4, now);
    let mut s = rx::Session::new(now);
    let mut started = (false, false);
    for _ in 0..20 {
        while let Some(o) = c.poll_output() {
            match o {
                Output::Send(w) => s.handle(rx::Input::Bytes(w.to_vec()), now),
                Output::OpenData(_) => c.handle(Input::Opened, now),
                Output::StartSide => {
                    started.0 = true;
                    c.handle(
                        Input::SideDone {
                            ran: Duration::from_secs(4),
                        },
                        now,
                    );
                }
                Output::End(r) => assert_eq!(r, Ok(false)),
                other => panic!("{other:?}"),
            }
        }
        while let Some(o) = s.poll_output() {
            match o {
                rx::Output::Send(w) => c.handle(Input::Bytes(w.to_vec()), now),
                rx::Output::Join => s.handle(rx::Input::Joined { busy: false }, now),
                rx::Output::Negotiate(p) => s.handle(rx::Input::Negotiated(p), now),
                rx::Output::Admit { last } => {
                    assert!(!last);
                    s.handle(rx::Input::Go { owner: true }, now)
                }
                rx::Output::StartSide => started.1 = true,
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(started, (true, true));
    assert!(c.is_done());
    assert_eq!(s.cycle(), 4);
}

#[test]
fn every_input_in_every_state_keeps_the_conventions() {
    let word = |w: i32| Input::Bytes(encode(w).to_vec());
    let path = || {
        vec![
            word(state::NOT_STARTED),
            word(5),
            Input::Opened,
            word(RUN),
            Input::SideDone {
                ran: Duration::from_secs(5),
            },
        ]
    };
    let inputs = || {
        vec![
            Input::Bytes(vec![0xff; 3]),
            Input::Bytes(vec![]),
            word(state::NOT_STARTED),
            word(-4),
            word(RUN),
            word(WAIT),
            word(EXIT),
            word(QUERY),
            Input::ReadFailed("reset".into()),
            Input::Closed,
            Input::Opened,
            Input::SideDone {
                ran: Duration::from_secs(1),
            },
            Input::Interrupt,
            Input::Failed("open".into()),
        ]
    };
    let answers = || {
        vec![
            Input::Opened,
            Input::SideDone {
                ran: Duration::from_secs(5),
            },
        ]
    };
    let n = crate::sweep::Sweep {
        make: &|now| Session::new(5, now),
        path: &path,
        inputs: &inputs,
        answers: &answers,
    }
    .run();
    assert_eq!(n, 6 * 14);
}
