//! The groups of ntttcp senders and the data connections gathered for them: which sender
//! joins which test, which data connection is kept for which group, and who starts the test.
//! No I/O here (the connection type is a parameter), so the fuzz target `ntttcp_groups`
//! drives it with any sequence of events.
//!
//! Groups are keyed by client (an address, or with `--client-prefix-v6`/`-v4` a network of
//! them, as the server's limits count clients): a sender's data connections carry no test id
//! and are told apart only by where they come from.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hakaru_proto::ntttcp::MAX_SENDERS;

use crate::limits::{Client, Prefixes};

/// The senders of one test and the data connections that arrived for it.
struct Group<C> {
    id: u64,
    /// The senders' clients.
    clients: Vec<Client>,
    /// Sync sessions in the group that have not ended.
    senders: usize,
    /// Senders told 'W'.
    waiting: usize,
    conns: Vec<C>,
    /// The cycle every sender of a multi-sender group gets (the first one's, capped).
    cycle: Option<i32>,
    /// The test runs: no more connections or senders.
    running: bool,
    /// For waiting senders: the last sender's test was admitted, or why not.
    go: Option<Result<(), String>>,
}

/// What the sync sessions share: the groups, and the data connections each has gathered.
pub struct Front<C> {
    multi: bool,
    /// Data connections one sender may bring (`--ntttcp-max-conns`).
    per_sender: usize,
    /// Data connections one test may have (`--max-flows`).
    max_conns: usize,
    /// Who is one client.
    prefixes: Prefixes,
    groups: Mutex<Vec<Group<C>>>,
    next_group: AtomicU64,
}

/// The answer to a sender's 'R' or 'L'.
pub enum Start<C> {
    /// Run the test on these connections (this session owns the data plane).
    Own(Vec<C>),
    /// Wait for the last sender.
    Wait,
    /// Refused, with why.
    Refused(String),
}

impl<C> Front<C> {
    pub fn new(multi: bool, per_sender: usize, max_conns: usize, prefixes: Prefixes) -> Self {
        Front {
            multi,
            per_sender: per_sender.clamp(1, max_conns.max(1)),
            max_conns: max_conns.max(1),
            prefixes,
            groups: Mutex::new(Vec::new()),
            next_group: AtomicU64::new(1),
        }
    }

    /// Data connections one sender may bring.
    pub fn per_sender(&self) -> usize {
        self.per_sender
    }

    fn with<T>(&self, f: impl FnOnce(&mut Vec<Group<C>>) -> T) -> Option<T> {
        self.groups.lock().ok().map(|mut g| f(&mut g))
    }

    /// Puts a sender from `ip` in a group: `Some(group id)`, or `None` when busy.
    pub fn join(&self, ip: IpAddr) -> Option<u64> {
        let client = self.prefixes.client_of(ip);
        let multi = self.multi;
        self.with(|groups| {
            if multi {
                if let Some(g) = groups.first_mut() {
                    if g.running {
                        return None;
                    }
                    if !g.clients.contains(&client) {
                        g.clients.push(client);
                    }
                    g.senders += 1;
                    return Some(g.id);
                }
            } else if groups.iter().any(|g| g.clients.contains(&client)) {
                return None;
            }
            let id = self.next_group.fetch_add(1, Ordering::Relaxed);
            groups.push(Group {
                id,
                clients: vec![client],
                senders: 1,
                waiting: 0,
                conns: Vec::new(),
                cycle: None,
                running: false,
                go: None,
            });
            Some(id)
        })
        .flatten()
    }

    /// The cycle a sender of group `id` gets for its proposal.
    pub fn negotiate(&self, id: u64, proposed: i32, max: Option<Duration>) -> i32 {
        let mine = super::server::negotiate(proposed, max);
        if !self.multi {
            return mine;
        }
        self.with(|groups| match groups.iter_mut().find(|g| g.id == id) {
            Some(g) => *g.cycle.get_or_insert(mine),
            None => mine,
        })
        .unwrap_or(mine)
    }

    /// A sender of group `id` asks to start (`last`: with 'L'). `admit` takes the test's
    /// budget for the connections gathered; its refusal refuses every waiting sender.
    pub fn start(
        &self,
        id: u64,
        last: bool,
        admit: impl FnOnce(&[C]) -> Result<(), String>,
    ) -> Start<C> {
        let multi = self.multi;
        self.with(|groups| {
            let Some(g) = groups.iter_mut().find(|g| g.id == id) else {
                return Start::Refused("internal error: the sender's group is gone".into());
            };
            if g.running {
                return Start::Refused("the group's test has already started".into());
            }
            if multi && !last {
                if g.waiting + 1 >= MAX_SENDERS {
                    return Start::Refused(format!(
                        "too many senders: a multi-sender test takes at most {} senders plus the last ('-L')",
                        MAX_SENDERS - 1
                    ));
                }
                g.waiting += 1;
                return Start::Wait;
            }
            if !multi && last {
                return Start::Refused(
                    "the sender says it is the last of several ('-L'), but this server takes one sender per test (start it with --ntttcp-multi)".into(),
                );
            }
            let verdict = if g.conns.is_empty() {
                Err("no data connection arrived before the sender asked to start".into())
            } else {
                admit(&g.conns)
            };
            g.go = Some(verdict.clone());
            match verdict {
                Ok(()) => {
                    g.running = true;
                    Start::Own(std::mem::take(&mut g.conns))
                }
                Err(why) => Start::Refused(why),
            }
        })
        .unwrap_or_else(|| Start::Refused("internal error: poisoned lock".into()))
    }

    /// For a waiting sender of group `id`: the last sender's verdict, once there is one.
    pub fn verdict(&self, id: u64) -> Option<Result<(), String>> {
        self.with(|groups| {
            groups
                .iter()
                .find(|g| g.id == id)
                .and_then(|g| g.go.clone())
        })
        .flatten()
    }

    /// A sync session of group `id` ended; the last one out removes the group (and closes
    /// connections nobody took).
    pub fn leave(&self, id: u64) {
        let _ = self.with(|groups| {
            if let Some(g) = groups.iter_mut().find(|g| g.id == id) {
                g.senders = g.senders.saturating_sub(1);
            }
            groups.retain(|g| g.senders > 0);
        });
    }

    /// A data connection from `ip`: kept for the group of its client if that group is
    /// gathering and has room (`--ntttcp-max-conns` per sender, `--max-flows` in all);
    /// otherwise handed back with why.
    pub fn place(&self, ip: IpAddr, conn: C) -> Result<(), (String, C)> {
        let client = self.prefixes.client_of(ip);
        let (per_sender, max_conns) = (self.per_sender, self.max_conns);
        let mut conn = Some(conn);
        let refused = self.with(|groups| {
            let Some(g) = groups.iter_mut().find(|g| g.clients.contains(&client)) else {
                return Some(format!("no ntttcp sender from {client} is synced (ntttcp -s without -N syncs first; -N is not supported)"));
            };
            if g.running {
                return Some("its sender's test has started".into());
            }
            let room = per_sender.saturating_mul(g.senders.max(1)).min(max_conns);
            if g.conns.len() >= room {
                return Some(if room < max_conns {
                    format!("the test already has {room} data connections ({per_sender} per sender: --ntttcp-max-conns)")
                } else {
                    format!("the test already has {room} data connections (--max-flows)")
                });
            }
            g.conns.extend(conn.take());
            None
        });
        match (refused, conn) {
            (Some(None), _) => Ok(()),
            (Some(Some(why)), Some(c)) => Err((why, c)),
            (None, Some(c)) => Err(("internal error: poisoned lock".into(), c)),
            // The connection was kept.
            (_, None) => Ok(()),
        }
    }

    /// Groups and the connections they hold now: (groups, connections); what the script that
    /// checks them against a model reads.
    pub fn held(&self) -> (usize, usize) {
        self.with(|groups| (groups.len(), groups.iter().map(|g| g.conns.len()).sum()))
            .unwrap_or((0, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn front(multi: bool) -> Front<u32> {
        Front::new(multi, 3, 8, Prefixes::default())
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn one_sender_per_client_and_clients_at_once() {
        let f = front(false);
        let a = f.join(A).expect("first sender");
        assert_eq!(f.join(A), None, "a second sender from one address is busy");
        let b = f.join(B).expect("another address tests at once");
        assert_ne!(a, b);
        assert_eq!(f.negotiate(a, 0, None), 60);
        assert!(
            matches!(f.start(a, false, |_| Ok(())), Start::Refused(w) if w.contains("no data connection"))
        );
        f.place(A, 1).unwrap();
        f.place(A, 2).unwrap();
        match f.start(a, false, |c| {
            if c.len() == 2 {
                Ok(())
            } else {
                Err("count".into())
            }
        }) {
            Start::Own(c) => assert_eq!(c, vec![1, 2]),
            _ => panic!("the sender owns its test"),
        }
        assert!(
            matches!(f.start(a, false, |_| Ok(())), Start::Refused(w) if w.contains("already started"))
        );
        let (why, c) = f.place(A, 3).unwrap_err();
        assert_eq!(c, 3);
        assert!(why.contains("has started"), "{why}");
        assert!(
            matches!(f.start(b, true, |_| Ok(())), Start::Refused(w) if w.contains("--ntttcp-multi"))
        );
        f.leave(a);
        assert!(
            f.join(A).is_some(),
            "the address is free once its sender left"
        );
    }

    #[test]
    fn data_connections_only_for_a_gathering_group_of_their_client_and_at_most_its_room() {
        let f = front(false);
        let (why, _) = f.place(A, 0).unwrap_err();
        assert!(
            why.contains("no ntttcp sender from 10.0.0.1 is synced"),
            "{why}"
        );
        let a = f.join(A).unwrap();
        for c in 0..3 {
            f.place(A, c).unwrap();
        }
        let (why, c) = f.place(A, 9).unwrap_err();
        assert_eq!(c, 9);
        assert!(
            why.contains("already has 3 data connections (3 per sender: --ntttcp-max-conns)"),
            "{why}"
        );
        assert!(
            f.place(B, 1).is_err(),
            "another client's connection is not kept"
        );
        assert_eq!(f.held(), (1, 3));
        f.leave(a);
        assert_eq!(
            f.held(),
            (0, 0),
            "the last sender out closes what nobody took"
        );
        // A client is a network when the limits say so: an IPv6 /64 is one sender.
        let f: Front<u32> = Front::new(false, 2, 8, Prefixes::default());
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(f.join(v6("2001:db8::1")).is_some());
        assert_eq!(f.join(v6("2001:db8::2")), None, "one /64 is one client");
        f.place(v6("2001:db8::3"), 1).unwrap();
        assert!(f.place(v6("2001:db8:0:1::1"), 2).is_err());
    }

    #[test]
    fn several_senders_wait_for_the_last_and_share_its_verdict() {
        let f = front(true);
        let g = f.join(A).unwrap();
        assert_eq!(f.join(B), Some(g), "every sender joins the one group");
        assert_eq!(f.negotiate(g, 7, None), 7);
        assert_eq!(
            f.negotiate(g, 30, None),
            7,
            "the first sender's time holds for all"
        );
        f.place(A, 1).unwrap();
        assert!(matches!(f.start(g, false, |_| Ok(())), Start::Wait));
        assert_eq!(f.verdict(g), None);
        f.place(B, 2).unwrap();
        // Two senders: room for 2 x 3, whoever opens them.
        for c in 3..7 {
            f.place(A, c).unwrap();
        }
        assert!(f.place(A, 7).is_err());
        match f.start(g, true, |_| Ok(())) {
            Start::Own(c) => assert_eq!(c.len(), 6),
            _ => panic!("the last sender owns the test"),
        }
        assert_eq!(f.verdict(g), Some(Ok(())));
        assert_eq!(f.join(A), None, "a running group takes no one");
        f.leave(g);
        f.leave(g);
        assert!(f.join(A).is_some());
    }

    #[test]
    fn a_refused_last_sender_refuses_the_waiting_ones_and_seats_are_bounded() {
        let f = front(true);
        let g = f.join(A).unwrap();
        for _ in 0..MAX_SENDERS - 1 {
            assert!(matches!(f.start(g, false, |_| Ok(())), Start::Wait));
        }
        assert!(
            matches!(f.start(g, false, |_| Ok(())), Start::Refused(w) if w.contains("too many senders"))
        );
        f.place(A, 1).unwrap();
        assert!(
            matches!(f.start(g, true, |_| Err("over budget".into())), Start::Refused(w) if w == "over budget")
        );
        assert_eq!(f.verdict(g), Some(Err("over budget".into())));
    }
}
