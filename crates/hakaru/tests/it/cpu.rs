//! The machine's CPUs shared between tests that run at once (cargo runs two on two cores).
//!
//! Most tests only need the CPU now and then; a few compare a measured rate with a known truth
//! to 1-5 % (a tbf cap, a stock peer's figure in the same run), and a loopback flood in the
//! other test thread starves their senders' pacing or their receivers. Those take [`quiet`]:
//! it waits until no other test is running a hakaru command or server, and keeps new ones
//! waiting while it is held. Everything else takes a [`Share`] around each command and server
//! ([`super::common::run_cmd`], [`super::common::ServerProc`]).
//!
//! Who holds what is keyed by the test thread's name (cargo names each test's thread after
//! the test): a test never waits for itself, and threads a test spawns (unnamed) never wait.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

#[derive(Default)]
struct State {
    /// The test that holds the machine, if one does.
    quiet: Option<String>,
    /// Tests waiting for the machine (new shares wait behind them).
    waiting: usize,
    /// Shares held, per test.
    shares: HashMap<String, usize>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn me() -> Option<String> {
    let t = std::thread::current();
    match t.name() {
        Some("main") | None => None,
        Some(n) => Some(n.to_owned()),
    }
}

/// A test's share of the machine; given back when dropped.
pub struct Share(Option<String>);

/// Takes a share of the machine for the calling test: at once if this test already holds
/// one or the machine, else once no test holds or waits for the machine.
pub fn share() -> Share {
    let Some(name) = me() else {
        return Share(None);
    };
    let mut g = state();
    loop {
        let s = g.get_or_insert_with(State::default);
        if s.quiet.as_deref() == Some(name.as_str()) {
            return Share(None);
        }
        let held = s.shares.get(&name).copied().unwrap_or(0);
        if held > 0 || (s.quiet.is_none() && s.waiting == 0) {
            *s.shares.entry(name.clone()).or_insert(0) += 1;
            return Share(Some(name));
        }
        g = CHANGED.wait(g).unwrap_or_else(PoisonError::into_inner);
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let Some(name) = self.0.take() else {
            return;
        };
        let mut g = state();
        if let Some(s) = g.as_mut() {
            if let Some(n) = s.shares.get_mut(&name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    s.shares.remove(&name);
                }
            }
        }
        CHANGED.notify_all();
    }
}

/// The machine to the calling test alone; given back when dropped.
pub struct Quiet(Option<String>);

/// Waits until no other test holds a share or the machine, then holds it: other tests'
/// commands and servers wait until this is dropped. The calling test's own shares (a server
/// it started before) are allowed. Only tests that never hold a share while another quiet
/// test waits may call it: the network-namespace tests (one at a time already) and the
/// tests that take it before starting anything.
pub fn quiet() -> Quiet {
    let Some(name) = me() else {
        return Quiet(None);
    };
    let mut g = state();
    g.get_or_insert_with(State::default).waiting += 1;
    loop {
        let s = g.get_or_insert_with(State::default);
        let others = s.shares.keys().any(|k| *k != name);
        if s.quiet.is_none() && !others {
            s.waiting -= 1;
            s.quiet = Some(name.clone());
            return Quiet(Some(name));
        }
        g = CHANGED.wait(g).unwrap_or_else(PoisonError::into_inner);
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        if self.0.take().is_none() {
            return;
        }
        let mut g = state();
        if let Some(s) = g.as_mut() {
            s.quiet = None;
        }
        CHANGED.notify_all();
    }
}

#[test]
fn shares_wait_for_a_quiet_test_and_a_quiet_test_for_shares() {
    use std::sync::mpsc;
    use std::time::Duration;
    // Threads named like tests, so that the rules apply to them.
    let named = |n: &str| std::thread::Builder::new().name(format!("cpu-selftest-{n}"));
    let (tx, rx) = mpsc::channel();
    let a_share = {
        let tx = tx.clone();
        named("a")
            .spawn(move || {
                let s = share();
                let again = share(); // the same test never waits for itself
                tx.send("a shared").unwrap();
                std::thread::sleep(Duration::from_millis(300));
                drop(again);
                drop(s);
                tx.send("a released").unwrap();
            })
            .unwrap()
    };
    assert_eq!(rx.recv().unwrap(), "a shared");
    let b_quiet = {
        let tx = tx.clone();
        named("b")
            .spawn(move || {
                let q = quiet();
                tx.send("b quiet").unwrap();
                let own = share(); // its own commands do not wait
                std::thread::sleep(Duration::from_millis(300));
                drop(own);
                tx.send("b done").unwrap();
                drop(q);
            })
            .unwrap()
    };
    // The quiet test waits for the other test's share.
    assert_eq!(rx.recv().unwrap(), "a released");
    assert_eq!(rx.recv().unwrap(), "b quiet");
    let c_share = named("c")
        .spawn(move || {
            let _s = share();
            tx.send("c shared").unwrap();
        })
        .unwrap();
    // A new share waits until the quiet test is done.
    assert_eq!(rx.recv().unwrap(), "b done");
    assert_eq!(rx.recv().unwrap(), "c shared");
    for t in [a_share, b_quiet, c_share] {
        t.join().unwrap();
    }
}
