//! One sweep for every machine: every input in every state of its happy path, on virtual time.
//!
//! Each machine's tests give a [`Sweep`]: how to make the machine, the inputs of a whole test
//! in order (the happy path, whose prefixes are the states swept), every input the machine can
//! be given (good and bad, for any state), and the driver's answers (what a driver always gives
//! in the end, such as a side's report). For each state and each input, the sweep checks the
//! conventions every machine keeps (see the crate's documentation):
//! - no input in any state panics;
//! - after every input has come, the driver's answers and the machine's own deadlines end the
//!   session within a day of virtual time;
//! - once over, the machine says nothing more, whatever comes.

use std::time::{Duration, Instant};

use crate::Machine;

const DAY: Duration = Duration::from_secs(86_400);

/// A machine's sweep; see the module's documentation.
pub(crate) struct Sweep<'a, M: Machine> {
    /// A new session at this instant.
    pub make: &'a dyn Fn(Instant) -> M,
    /// A whole test's inputs in order.
    pub path: &'a dyn Fn() -> Vec<M::Input>,
    /// Every input, good and bad.
    pub inputs: &'a dyn Fn() -> Vec<M::Input>,
    /// What a driver always answers in the end.
    pub answers: &'a dyn Fn() -> Vec<M::Input>,
}

impl<M: Machine> Sweep<'_, M> {
    /// Runs the sweep; returns how many (state, input) pairs it checked.
    pub fn run(&self) -> usize {
        let steps = (self.path)().len();
        let kinds = (self.inputs)().len();
        for k in 0..=steps {
            for i in 0..kinds {
                self.one(k, i);
            }
        }
        (steps + 1) * kinds
    }

    fn one(&self, steps: usize, which: usize) {
        let what = format!("after {steps} steps of the happy path, input {which} first");
        let start = Instant::now();
        let mut now = start;
        let mut m = (self.make)(start);
        drain(&mut m);
        for input in (self.path)().into_iter().take(steps) {
            now += Duration::from_millis(1);
            m.handle(input, now);
            drain(&mut m);
        }
        if let Some(first) = (self.inputs)().into_iter().nth(which) {
            m.handle(first, now);
            drain(&mut m);
        }
        for input in (self.inputs)() {
            m.handle(input, now);
            drain(&mut m);
        }
        for round in 1..=2u32 {
            for input in (self.answers)() {
                m.handle(input, now);
                drain(&mut m);
            }
            run_out(&mut m, &mut now, start + DAY * round);
            if m.is_done() {
                break;
            }
        }
        assert!(m.is_done(), "{what}: the session did not end");
        for input in (self.inputs)().into_iter().chain((self.answers)()) {
            m.handle(input, now);
            assert!(m.poll_output().is_none(), "{what}: it spoke after its end");
        }
        m.handle_timeout(now + DAY * 3);
        assert!(m.poll_output().is_none(), "{what}: it spoke after its end");
        assert!(m.is_done(), "{what}: it came back after its end");
    }
}

fn drain<M: Machine>(m: &mut M) {
    while m.poll_output().is_some() {}
}

/// Gives the machine every deadline it asks for up to `until` (bounded: a machine whose
/// deadline stops moving fails the sweep's end check instead of hanging it).
fn run_out<M: Machine>(m: &mut M, now: &mut Instant, until: Instant) {
    for _ in 0..1_000_000 {
        match m.timeout() {
            Some(t) if t <= until => {
                *now = t.max(*now);
                m.handle_timeout(*now);
                drain(m);
            }
            _ => return,
        }
    }
}

/// A toy machine that ends on `true` and keeps, or breaks, the conventions as told.
struct Toy {
    done: bool,
    out: Vec<u8>,
    talks_after_end: bool,
    panics_on_false: bool,
}

impl Machine for Toy {
    type Input = bool;
    type Output = u8;

    fn handle(&mut self, input: bool, _now: Instant) {
        assert!(input || !self.panics_on_false, "a panic on input");
        if !self.done || self.talks_after_end {
            self.out.push(u8::from(input));
        }
        self.done |= input;
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn timeout(&self) -> Option<Instant> {
        None
    }

    fn poll_output(&mut self) -> Option<u8> {
        self.out.pop()
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

fn toy_sweep(talks_after_end: bool, panics_on_false: bool, inputs: Vec<bool>) -> usize {
    let make = |_| Toy {
        done: false,
        out: Vec::new(),
        talks_after_end,
        panics_on_false,
    };
    Sweep {
        make: &make,
        path: &|| vec![false, true],
        inputs: &|| inputs.clone(),
        answers: &Vec::new,
    }
    .run()
}

#[test]
fn a_machine_that_keeps_the_conventions_passes() {
    assert_eq!(toy_sweep(false, false, vec![false, true]), 3 * 2);
}

#[test]
#[should_panic(expected = "it spoke after its end")]
fn a_machine_that_speaks_after_its_end_fails() {
    toy_sweep(true, false, vec![false, true]);
}

#[test]
#[should_panic(expected = "the session did not end")]
fn a_machine_that_never_ends_fails() {
    toy_sweep(false, false, vec![false]);
}

#[test]
#[should_panic(expected = "a panic on input")]
fn a_machine_that_panics_on_an_input_fails() {
    toy_sweep(false, true, vec![false, true]);
}
