//! The fuzz target `ntttcp_groups`: a [`Front`] driven by any sequence of senders joining,
//! data connections arriving, senders asking to start and leaving, checked after every event
//! against a model of what it must do. Nothing may panic; a data connection is kept only for
//! a gathering group of its client with room; a group's test starts once, with every
//! connection kept for it; the groups and connections held always match the model, so
//! nothing is kept after its senders have left.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hakaru_proto::ntttcp::MAX_SENDERS;

use super::front::{Front, Start};
use crate::limits::{Client, Prefixes};

/// A group as the model sees it.
struct Group {
    id: u64,
    clients: Vec<Client>,
    senders: usize,
    waiting: usize,
    conns: usize,
    running: bool,
}

struct Model {
    multi: bool,
    per_sender: usize,
    max_conns: usize,
    prefixes: Prefixes,
    groups: Vec<Group>,
    /// Sync sessions in a group: (group id, address).
    senders: Vec<(u64, IpAddr)>,
}

impl Model {
    fn group(&mut self, id: u64) -> Option<&mut Group> {
        self.groups.iter_mut().find(|g| g.id == id)
    }

    fn join(&mut self, f: &Front<u32>, ip: IpAddr) {
        let client = self.prefixes.client_of(ip);
        let got = f.join(ip);
        let busy = if self.multi {
            self.groups.first().is_some_and(|g| g.running)
        } else {
            self.groups.iter().any(|g| g.clients.contains(&client))
        };
        assert_eq!(got.is_none(), busy, "join from {ip}");
        let Some(id) = got else { return };
        self.senders.push((id, ip));
        let multi = self.multi;
        match self.group(id) {
            Some(g) => {
                assert!(multi, "a second sender in a group needs --ntttcp-multi");
                if !g.clients.contains(&client) {
                    g.clients.push(client);
                }
                g.senders += 1;
            }
            None => {
                assert!(
                    !self.multi || self.groups.is_empty(),
                    "one group when multi"
                );
                self.groups.push(Group {
                    id,
                    clients: vec![client],
                    senders: 1,
                    waiting: 0,
                    conns: 0,
                    running: false,
                });
            }
        }
    }

    fn place(&mut self, f: &Front<u32>, ip: IpAddr, conn: u32) {
        let client = self.prefixes.client_of(ip);
        let (per_sender, max_conns) = (self.per_sender, self.max_conns);
        let got = f.place(ip, conn);
        let room = self
            .groups
            .iter_mut()
            .find(|g| g.clients.contains(&client))
            .filter(|g| !g.running)
            .filter(|g| g.conns < (per_sender * g.senders.max(1)).min(max_conns));
        match (got, room) {
            (Ok(()), Some(g)) => g.conns += 1,
            (Err((_, back)), None) => assert_eq!(back, conn, "the refused connection comes back"),
            (got, room) => panic!(
                "place from {ip}: front {:?}, model {}",
                got.map_err(|e| e.0),
                if room.is_some() {
                    "keeps it"
                } else {
                    "refuses it"
                }
            ),
        }
    }

    fn start(&mut self, f: &Front<u32>, id: u64, last: bool, admit: bool) {
        let multi = self.multi;
        let got = f.start(id, last, |c| {
            if admit {
                Ok(())
            } else {
                Err(format!("refused {}", c.len()))
            }
        });
        let Some(g) = self.group(id) else {
            return assert!(matches!(got, Start::Refused(_)), "a group that is gone");
        };
        match got {
            Start::Own(c) => {
                assert!(!g.running && last == multi && admit);
                assert_eq!(c.len(), g.conns, "the test takes every connection kept");
                g.conns = 0;
                g.running = true;
            }
            Start::Wait => {
                assert!(multi && !last && !g.running && g.waiting + 1 < MAX_SENDERS);
                g.waiting += 1;
            }
            Start::Refused(_) => {
                let may_run = !g.running && multi == last && g.conns > 0 && admit;
                let may_wait = multi && !last && !g.running && g.waiting + 1 < MAX_SENDERS;
                assert!(!may_run && !may_wait, "start refused in group {id}");
            }
        }
    }

    fn leave(&mut self, f: &Front<u32>, i: usize) {
        if i >= self.senders.len() {
            return;
        }
        let (id, _) = self.senders.remove(i);
        f.leave(id);
        if let Some(g) = self.group(id) {
            g.senders -= 1;
        }
        self.groups.retain(|g| g.senders > 0);
    }
}

/// Runs the script `data` (see the module's comment); panics when the front and the model
/// disagree.
pub fn run(data: &[u8]) {
    let Some(([setup, sizes], script)) = data.split_first_chunk::<2>() else {
        return;
    };
    let prefixes = Prefixes {
        v4: if setup & 2 != 0 { 24 } else { 32 },
        ..Prefixes::default()
    };
    let mut m = Model {
        multi: setup & 1 != 0,
        per_sender: 1 + usize::from(sizes & 3),
        max_conns: 1 + usize::from((sizes >> 2) & 7),
        prefixes,
        groups: Vec::new(),
        senders: Vec::new(),
    };
    let f: Front<u32> = Front::new(m.multi, m.per_sender, m.max_conns, prefixes);
    let v6 = setup & 4 != 0;
    let mut next = 0u32;
    for (k, step) in script.chunks(2).enumerate() {
        let (op, arg) = match step {
            [op, arg] => (*op, *arg),
            [op] => (*op, 0),
            _ => break,
        };
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0xdb8,
                0,
                u16::from(arg & 1),
                0,
                0,
                0,
                u16::from(arg >> 1 & 3),
            ))
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 0, arg & 1, arg >> 1 & 3))
        };
        let sender = (!m.senders.is_empty()).then(|| usize::from(arg) % m.senders.len());
        let id = sender
            .and_then(|i| m.senders.get(i))
            .map_or(u64::from(arg), |s| s.0);
        match op % 6 {
            0 => m.join(&f, ip),
            1 | 2 => {
                next += 1;
                m.place(&f, ip, next);
            }
            3 => m.start(&f, id, op & 0x10 != 0, op & 0x20 == 0),
            4 => m.leave(&f, sender.unwrap_or(usize::MAX)),
            _ => {
                let max = (op & 0x10 != 0).then(|| Duration::from_secs(u64::from(arg)));
                assert!(f.negotiate(id, i32::from(arg) - 100, max) > 0);
                let _ = f.verdict(id);
            }
        }
        let conns = m.groups.iter().map(|g| g.conns).sum();
        assert_eq!(f.held(), (m.groups.len(), conns), "after step {k}");
    }
    for i in (0..m.senders.len()).rev() {
        m.leave(&f, i);
    }
    assert_eq!(f.held(), (0, 0), "every sender left: nothing is kept");
}

#[cfg(test)]
mod tests {
    #[test]
    fn scripts_run_and_agree_with_the_model() {
        // Every byte pattern of a few short scripts, and some longer pseudo-random ones.
        for setup in 0..8u8 {
            for sizes in [0u8, 5, 0x1f] {
                super::run(&[setup, sizes, 0, 1, 1, 1, 2, 1, 3, 0x10, 3, 0, 4, 0]);
                super::run(&[
                    setup, sizes, 0, 0, 0, 2, 1, 0, 1, 0, 1, 0, 3, 0x10, 5, 7, 4, 1,
                ]);
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            let script: Vec<u8> = (0..64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            super::run(&script);
        }
    }
}
