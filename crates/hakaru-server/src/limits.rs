//! Admission: how many connections may still be handshaking and how many tests may run, per
//! source address and in total. One lock guards both counts so a check and its increment are
//! one step; the slots are guards that give themselves back however a thread ends.
//!
//! A connection holds a handshake slot from accept until it becomes something the server
//! knows: a data connection delivered to its test, or a control connection whose test was
//! admitted (then it holds a test slot instead). So idle connections from one address, hellos
//! that never ask for a test and iperf3 cookies without parameters all count against that
//! address's handshake limit, and none of them takes a test slot.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Extra handshake slots of an address with a test running: its data connections (up to
/// 1024 flows each way) arrive in a burst and each is handshaking until its first frame is
/// read, so they must not be refused by the limits meant for strangers.
pub const DATA_ALLOWANCE: usize = 2048;

/// The limits and their defaults (docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections still handshaking, from one address.
    pub pending_per_client: usize,
    /// Connections still handshaking, in total.
    pub pending: usize,
    /// Tests running, from one address.
    pub tests_per_client: usize,
    /// Tests running, in total (`--max-tests`).
    pub tests: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pending_per_client: 8,
            pending: 512,
            tests_per_client: 4,
            tests: 64,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    pending: usize,
    tests: usize,
}

#[derive(Debug, Default)]
struct State {
    by_source: HashMap<IpAddr, Counts>,
    pending: usize,
    tests: usize,
}

/// Slots handed out under [`Limits`].
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    limits: Limits,
    state: Arc<Mutex<State>>,
    /// What a pending slot is, and the flags that set its limits (for refusals).
    pending_words: (&'static str, &'static str, &'static str),
}

/// Which slot a guard holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pending,
    Test,
}

/// A slot; gives itself back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    state: Arc<Mutex<State>>,
    ip: IpAddr,
    kind: Kind,
    /// Counted in the server-wide total (data connections of a running test are not).
    in_total: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let entry = st.by_source.entry(self.ip).or_default();
        match self.kind {
            Kind::Pending => entry.pending = entry.pending.saturating_sub(1),
            Kind::Test => entry.tests = entry.tests.saturating_sub(1),
        }
        if entry.pending == 0 && entry.tests == 0 {
            st.by_source.remove(&self.ip);
        }
        match self.kind {
            Kind::Pending if self.in_total => st.pending = st.pending.saturating_sub(1),
            Kind::Pending => {}
            Kind::Test => st.tests = st.tests.saturating_sub(1),
        }
    }
}

impl Admission {
    pub(crate) fn new(limits: Limits) -> Admission {
        Admission {
            limits,
            state: Arc::default(),
            pending_words: (
                "connections still handshaking",
                "--max-pending-per-client",
                "--max-pending",
            ),
        }
    }

    /// Counts connections of another kind in the pending slots: `what` names them in
    /// refusals, which then name no flag.
    pub(crate) fn for_connections(
        what: &'static str,
        per_client: usize,
        total: usize,
    ) -> Admission {
        Admission {
            pending_words: (what, "fixed", "fixed"),
            ..Admission::new(Limits {
                pending_per_client: per_client,
                pending: total,
                ..Limits::default()
            })
        }
    }

    /// A handshake slot for a new connection from `ip`, or the limit it would break, in words.
    pub(crate) fn pending(&self, ip: IpAddr) -> Result<Slot, String> {
        self.take(ip, Kind::Pending)
    }

    /// A test slot for a test from `ip`, or the limit it would break, in words.
    pub(crate) fn test(&self, ip: IpAddr) -> Result<Slot, String> {
        self.take(ip, Kind::Test)
    }

    /// Tests running now.
    pub(crate) fn tests_running(&self) -> usize {
        self.state.lock().map_or(0, |s| s.tests)
    }

    fn take(&self, ip: IpAddr, kind: Kind) -> Result<Slot, String> {
        let ip = ip.to_canonical();
        let mut st = self
            .state
            .lock()
            .map_err(|_| "internal error: admission state poisoned".to_string())?;
        let mine = st.by_source.get(&ip).copied().unwrap_or_default();
        let l = self.limits;
        let mut in_total = true;
        match kind {
            Kind::Pending => {
                let (what, per_flag, total_flag) = self.pending_words;
                // An address with an admitted test is opening its data connections.
                let known = mine.tests > 0;
                let per_client = if known {
                    l.pending_per_client + DATA_ALLOWANCE
                } else {
                    l.pending_per_client
                };
                if mine.pending >= per_client {
                    return Err(format!(
                        "the server allows {} {what} from one address; {ip} has {} ({per_flag})",
                        per_client, mine.pending
                    ));
                }
                if !known && st.pending >= l.pending {
                    return Err(format!(
                        "the server allows {} {what}; {} are open ({total_flag})",
                        l.pending, st.pending
                    ));
                }
                in_total = !known;
                if in_total {
                    st.pending += 1;
                }
                st.by_source.entry(ip).or_default().pending += 1;
            }
            Kind::Test => {
                if mine.tests >= l.tests_per_client {
                    return Err(format!(
                        "the server allows {} tests from one address; {} are running from {ip} (--max-tests-per-client)",
                        l.tests_per_client, mine.tests
                    ));
                }
                if st.tests >= l.tests {
                    return Err(format!(
                        "the server is busy: {} tests running, its limit is {} (--max-tests)",
                        st.tests, l.tests
                    ));
                }
                st.tests += 1;
                st.by_source.entry(ip).or_default().tests += 1;
            }
        }
        Ok(Slot {
            state: Arc::clone(&self.state),
            ip,
            kind,
            in_total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_address_cannot_take_every_handshake_slot() {
        let a = Admission::new(Limits {
            pending_per_client: 2,
            pending: 3,
            ..Limits::default()
        });
        let s1 = a.pending(ip("10.0.0.1")).unwrap();
        let _s2 = a.pending(ip("10.0.0.1")).unwrap();
        let e = a.pending(ip("10.0.0.1")).unwrap_err();
        assert!(
            e.contains("allows 2 connections still handshaking from one address"),
            "{e}"
        );
        // Another address still gets in, up to the total.
        let _s3 = a.pending(ip("10.0.0.2")).unwrap();
        let e = a.pending(ip("10.0.0.3")).unwrap_err();
        assert!(e.contains("--max-pending)"), "{e}");
        // A slot given back is free again.
        drop(s1);
        assert!(a.pending(ip("10.0.0.3")).is_ok());
    }

    #[test]
    fn tests_per_address_and_in_total() {
        let a = Admission::new(Limits {
            tests_per_client: 1,
            tests: 2,
            ..Limits::default()
        });
        let t1 = a.test(ip("10.0.0.1")).unwrap();
        let e = a.test(ip("10.0.0.1")).unwrap_err();
        assert!(
            e.contains("allows 1 tests from one address; 1 are running from 10.0.0.1"),
            "{e}"
        );
        let _t2 = a.test(ip("10.0.0.2")).unwrap();
        assert_eq!(a.tests_running(), 2);
        let e = a.test(ip("10.0.0.3")).unwrap_err();
        assert!(e.contains("busy: 2 tests running, its limit is 2"), "{e}");
        drop(t1);
        assert_eq!(a.tests_running(), 1);
        assert!(a.test(ip("10.0.0.1")).is_ok());
    }

    #[test]
    fn an_address_with_a_test_may_open_its_data_connections() {
        let a = Admission::new(Limits {
            pending_per_client: 2,
            pending: 2,
            ..Limits::default()
        });
        let _t = a.test(ip("10.0.0.1")).unwrap();
        let held: Vec<Slot> = (0..100)
            .map(|_| a.pending(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(held.len(), 100);
        // Strangers still meet both limits.
        let _s = a.pending(ip("10.0.0.2")).unwrap();
        let _s2 = a.pending(ip("10.0.0.2")).unwrap();
        assert!(a.pending(ip("10.0.0.2")).is_err());
    }

    #[test]
    fn mapped_v4_counts_as_v4_and_empty_entries_go() {
        let a = Admission::new(Limits {
            pending_per_client: 1,
            ..Limits::default()
        });
        let s = a.pending(ip("::ffff:10.0.0.1")).unwrap();
        assert!(a.pending(ip("10.0.0.1")).is_err());
        drop(s);
        assert!(a.state.lock().unwrap().by_source.is_empty());
    }
}
