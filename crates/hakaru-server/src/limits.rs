//! Admission: how many connections may still be handshaking and how many tests may run, per
//! client and in total. One lock guards every count so a check and its increment are one
//! step; the slots are guards that give themselves back however a thread ends.
//!
//! A client is a source address, or with `--client-prefix-v6`/`--client-prefix-v4` a network
//! of them: IPv6 counts by /64 by default, since one host usually holds a whole /64 and could
//! otherwise take a fresh address for every connection.
//!
//! A connection holds a handshake slot from accept until it becomes something the server
//! knows: a data connection delivered to its test, or a control connection whose test was
//! admitted (then it holds a test slot instead). So idle connections from one client, hellos
//! that never ask for a test and iperf3 cookies without parameters all count against that
//! client's handshake limit, and none of them takes a test slot.
//!
//! An admitted test's data connections arrive in a burst, each handshaking until its first
//! frame is read, so a client with tests running may have as many more connections
//! handshaking as those tests have data paths (its allowance), and the server-wide total
//! grows by the allowances of the tests running: data connections count in the total, and a
//! client can only ever open what its tests asked for.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

pub use hakaru_session::limits::{Client, Prefixes};

/// The limits and their defaults (docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections still handshaking, from one client.
    pub pending_per_client: usize,
    /// Connections still handshaking, in total (besides running tests' allowances).
    pub pending: usize,
    /// Tests running, from one client.
    pub tests_per_client: usize,
    /// Tests running, in total (`--max-tests`).
    pub tests: usize,
    /// IPv4 sources in one network of this length are one client (`--client-prefix-v4`).
    pub prefix_v4: u8,
    /// IPv6 sources in one network of this length are one client (`--client-prefix-v6`).
    pub prefix_v6: u8,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pending_per_client: 8,
            pending: 512,
            tests_per_client: 4,
            tests: 64,
            prefix_v4: 32,
            prefix_v6: 64,
        }
    }
}

impl Limits {
    /// The client `ip` belongs to: its network under the prefix lengths (IPv4-mapped IPv6
    /// addresses as IPv4).
    pub fn client_of(&self, ip: IpAddr) -> Client {
        self.prefixes().client_of(ip)
    }

    /// Which sources are one client.
    pub fn prefixes(&self) -> Prefixes {
        Prefixes {
            v4: self.prefix_v4,
            v6: self.prefix_v6,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    pending: usize,
    tests: usize,
    /// Data paths of this client's running tests.
    allowance: usize,
}

#[derive(Debug, Default)]
struct State {
    by_client: HashMap<Client, Counts>,
    pending: usize,
    tests: usize,
    /// Data paths of every running test.
    allowance: usize,
}

/// Slots handed out under [`Limits`].
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    limits: Limits,
    state: Arc<Mutex<State>>,
    /// What a pending slot is, and the flags that set its limits (for refusals).
    pending_words: (&'static str, &'static str, &'static str),
    /// The flag that sets the tests one client may run (for refusals).
    tests_flag: &'static str,
}

/// Which slot a guard holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pending,
    /// A running test with this many data paths.
    Test(usize),
}

/// A slot; gives itself back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    state: Arc<Mutex<State>>,
    client: Client,
    kind: Kind,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let entry = st.by_client.entry(self.client).or_default();
        match self.kind {
            Kind::Pending => entry.pending = entry.pending.saturating_sub(1),
            Kind::Test(paths) => {
                entry.tests = entry.tests.saturating_sub(1);
                entry.allowance = entry.allowance.saturating_sub(paths);
            }
        }
        if entry.pending == 0 && entry.tests == 0 {
            st.by_client.remove(&self.client);
        }
        match self.kind {
            Kind::Pending => st.pending = st.pending.saturating_sub(1),
            Kind::Test(paths) => {
                st.tests = st.tests.saturating_sub(1);
                st.allowance = st.allowance.saturating_sub(paths);
            }
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
            tests_flag: "--max-tests-per-client",
        }
    }

    /// The netperf ports' slots: control connections and tests, both up to `per_client`
    /// from one client (`--max-netperf-per-client`), `limits.tests` in all.
    pub(crate) fn for_netperf(limits: Limits, per_client: usize) -> Admission {
        Admission {
            pending_words: (
                "netperf control connections",
                "--max-netperf-per-client",
                "--max-pending",
            ),
            tests_flag: "--max-netperf-per-client",
            ..Admission::new(Limits {
                pending_per_client: per_client,
                tests_per_client: per_client,
                ..limits
            })
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

    /// A test slot for a test from `ip` that opens `paths` data connections or UDP flows, or
    /// the limit it would break, in words.
    pub(crate) fn test(&self, ip: IpAddr, paths: usize) -> Result<Slot, String> {
        self.take(ip, Kind::Test(paths))
    }

    /// Tests running now.
    pub(crate) fn tests_running(&self) -> usize {
        self.state.lock().map_or(0, |s| s.tests)
    }

    fn take(&self, ip: IpAddr, kind: Kind) -> Result<Slot, String> {
        let l = self.limits;
        let client = l.client_of(ip);
        let mut st = self
            .state
            .lock()
            .map_err(|_| "internal error: admission state poisoned".to_string())?;
        let mine = st.by_client.get(&client).copied().unwrap_or_default();
        let one = client.one();
        match kind {
            Kind::Pending => {
                let (what, per_flag, total_flag) = self.pending_words;
                let per_client = l.pending_per_client + mine.allowance;
                if mine.pending >= per_client {
                    return Err(if mine.allowance > 0 {
                        format!(
                            "the server allows {} {what} from {one} with tests running ({} plus their {} data path(s)); {client} has {} ({per_flag})",
                            per_client, l.pending_per_client, mine.allowance, mine.pending
                        )
                    } else {
                        format!(
                            "the server allows {} {what} from {one}; {client} has {} ({per_flag})",
                            per_client, mine.pending
                        )
                    });
                }
                // A client with tests running may use the room its tests' data paths add.
                let total = if mine.allowance > 0 {
                    l.pending + st.allowance
                } else {
                    l.pending
                };
                if st.pending >= total {
                    return Err(format!(
                        "the server allows {total} {what}; {} are open ({total_flag})",
                        st.pending
                    ));
                }
                st.pending += 1;
                st.by_client.entry(client).or_default().pending += 1;
            }
            Kind::Test(paths) => {
                if mine.tests >= l.tests_per_client {
                    return Err(format!(
                        "the server allows {} tests from {one}; {} are running from {client} ({})",
                        l.tests_per_client, mine.tests, self.tests_flag
                    ));
                }
                if st.tests >= l.tests {
                    return Err(format!(
                        "the server is busy: {} tests running, its limit is {} (--max-tests)",
                        st.tests, l.tests
                    ));
                }
                st.tests += 1;
                st.allowance += paths;
                let e = st.by_client.entry(client).or_default();
                e.tests += 1;
                e.allowance += paths;
            }
        }
        Ok(Slot {
            state: Arc::clone(&self.state),
            client,
            kind,
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
    fn netperf_refusals_name_their_own_flag() {
        let a = Admission::for_netperf(Limits::default(), 1);
        let _c = a.pending(ip("10.0.0.1")).unwrap();
        let e = a.pending(ip("10.0.0.1")).unwrap_err();
        assert!(
            e.contains("allows 1 netperf control connections from one address")
                && e.ends_with("(--max-netperf-per-client)"),
            "{e}"
        );
        let _t = a.test(ip("10.0.0.1"), 1).unwrap();
        let e = a.test(ip("10.0.0.1"), 1).unwrap_err();
        assert!(e.ends_with("(--max-netperf-per-client)"), "{e}");
    }

    #[test]
    fn tests_per_address_and_in_total() {
        let a = Admission::new(Limits {
            tests_per_client: 1,
            tests: 2,
            ..Limits::default()
        });
        let t1 = a.test(ip("10.0.0.1"), 1).unwrap();
        let e = a.test(ip("10.0.0.1"), 1).unwrap_err();
        assert!(
            e.contains("allows 1 tests from one address; 1 are running from 10.0.0.1"),
            "{e}"
        );
        let _t2 = a.test(ip("10.0.0.2"), 1).unwrap();
        assert_eq!(a.tests_running(), 2);
        let e = a.test(ip("10.0.0.3"), 1).unwrap_err();
        assert!(e.contains("busy: 2 tests running, its limit is 2"), "{e}");
        drop(t1);
        assert_eq!(a.tests_running(), 1);
        assert!(a.test(ip("10.0.0.1"), 1).is_ok());
    }

    #[test]
    fn a_client_with_a_test_may_open_its_data_connections_and_no_more() {
        let a = Admission::new(Limits {
            pending_per_client: 2,
            pending: 2,
            ..Limits::default()
        });
        let t = a.test(ip("10.0.0.1"), 100).unwrap();
        let held: Vec<Slot> = (0..102)
            .map(|_| a.pending(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(held.len(), 102);
        // Its own 2 plus its test's 100 data paths, and not one more.
        let e = a.pending(ip("10.0.0.1")).unwrap_err();
        assert!(
            e.contains("(2 plus their 100 data path(s)); 10.0.0.1 has 102"),
            "{e}"
        );
        // They count in the total: strangers find it full until they go.
        let e = a.pending(ip("10.0.0.2")).unwrap_err();
        assert!(
            e.contains("the server allows 2 connections still handshaking; 102 are open"),
            "{e}"
        );
        drop(held);
        let s1 = a.pending(ip("10.0.0.2")).unwrap();
        let s2 = a.pending(ip("10.0.0.2")).unwrap();
        assert!(a.pending(ip("10.0.0.2")).is_err());
        drop((s1, s2));
        // The allowance ends with the test: back to its own 2.
        drop(t);
        assert_eq!(a.state.lock().unwrap().allowance, 0);
        let _own = (
            a.pending(ip("10.0.0.1")).unwrap(),
            a.pending(ip("10.0.0.1")).unwrap(),
        );
        assert!(a.pending(ip("10.0.0.1")).is_err());
    }

    #[test]
    fn ipv6_counts_by_64_and_ipv4_by_address_by_default() {
        let a = Admission::new(Limits {
            pending_per_client: 2,
            tests_per_client: 1,
            ..Limits::default()
        });
        let _s1 = a.pending(ip("2001:db8:1:2::1")).unwrap();
        let _s2 = a.pending(ip("2001:db8:1:2:ffff::9")).unwrap();
        let e = a.pending(ip("2001:db8:1:2::3")).unwrap_err();
        assert!(
            e.contains("from one /64 network; 2001:db8:1:2::/64 has 2 (--max-pending-per-client)"),
            "{e}"
        );
        assert!(a.pending(ip("2001:db8:1:3::1")).is_ok());
        let _t = a.test(ip("2001:db8:1:2::a"), 1).unwrap();
        let e = a.test(ip("2001:db8:1:2::b"), 1).unwrap_err();
        assert!(
            e.contains("tests from one /64 network; 1 are running from 2001:db8:1:2::/64"),
            "{e}"
        );
        let _v4 = a.pending(ip("10.0.0.1")).unwrap();
        assert!(a.pending(ip("10.0.0.2")).is_ok(), "IPv4 counts by address");
        // Other prefixes: /128 counts every IPv6 address, /24 a whole IPv4 network.
        let l = Limits {
            prefix_v4: 24,
            prefix_v6: 128,
            ..Limits::default()
        };
        assert_eq!(l.client_of(ip("10.1.2.3")), l.client_of(ip("10.1.2.200")));
        assert_eq!(l.client_of(ip("10.1.2.3")).to_string(), "10.1.2.0/24");
        assert_ne!(l.client_of(ip("::1")), l.client_of(ip("::2")));
        assert_eq!(
            l.client_of(ip("::ffff:10.1.2.3")).to_string(),
            "10.1.2.0/24"
        );
        let z = Limits {
            prefix_v4: 0,
            prefix_v6: 0,
            ..Limits::default()
        };
        assert_eq!(z.client_of(ip("1.2.3.4")).to_string(), "0.0.0.0/0");
        assert_eq!(z.client_of(ip("ff::1")).to_string(), "::/0");
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
        assert!(a.state.lock().unwrap().by_client.is_empty());
    }
}
