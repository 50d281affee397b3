//! The prober as a sans-IO machine on a clock the driver passes in (ns of a monotonic clock):
//! which peer to probe when, under the agent's total rate cap; which probes are lost; each
//! peer's figures. The driver (`agent`) owns the socket and the clock.
//!
//! Schedule: every peer once per cycle, round robin, the sends spread evenly over the cycle.
//! A cycle lasts the per-peer interval, or longer when the peers times the rate would exceed
//! the cap (`peers / max_pps` seconds): a long list is sampled more slowly, never flooded.
//! A sender that wakes up to 50 ms late sends what was due; one later than that sends one
//! probe and counts on from then: no bursts after a stall.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use crate::peers::Peer;
use crate::stats::{Totals, Window, WindowFigures};
use crate::wire::{Header, Type};

/// How the prober probes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeConfig {
    /// Each peer at most once per this.
    pub interval: Duration,
    /// A probe with no reply after this is lost.
    pub timeout: Duration,
    /// Probes per second from this agent, all peers together.
    pub max_pps: u32,
    /// The view's quantiles and loss cover this much recent time.
    pub window: Duration,
    /// Datagram size.
    pub size: usize,
    /// Whether probes carry a tag.
    pub keyed: bool,
}

/// Most probes of one peer waiting for a reply: past it the oldest is counted lost.
const MAX_OUTSTANDING: usize = 64;
/// Most addresses remembered as this agent's own (its interfaces in the list).
const MAX_SELVES: usize = 64;
/// How late a sender may be and still send every probe that was due (50 ms).
const CATCH_UP_NS: u64 = 50_000_000;
/// Most results one peer's window keeps.
const MAX_WINDOW: usize = 4096;

struct PeerState {
    peer: Peer,
    next_seq: u64,
    outstanding: VecDeque<(u64, u64)>,
    totals: Totals,
    window: Window,
}

/// One peer's figures now.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerFigures {
    /// The peer.
    pub peer: Peer,
    /// Since the agent started probing it.
    pub totals: Totals,
    /// Over the window.
    pub window: WindowFigures,
}

/// The machine.
pub struct Prober {
    cfg: ProbeConfig,
    id: u64,
    order: Vec<SocketAddr>,
    peers: HashMap<SocketAddr, PeerState>,
    cursor: usize,
    next_send: u64,
    /// Probes in send order with their deadline: timeouts are uniform, so deadlines are too.
    deadlines: VecDeque<(u64, SocketAddr, u64)>,
    /// Addresses found to be this agent (its own id came back).
    selves: Vec<SocketAddr>,
    /// Replies from no peer or to no probe of this agent.
    pub unmatched: u64,
    /// Changes with every change of the list probed (a new list, an address found to be
    /// this agent's): another machine on the same peers follows it.
    generation: u64,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

impl Prober {
    /// A prober with instance id `id`, starting at `now`.
    pub fn new(cfg: ProbeConfig, id: u64, now: u64) -> Prober {
        Prober {
            cfg,
            id,
            order: Vec::new(),
            peers: HashMap::new(),
            cursor: 0,
            next_send: now,
            deadlines: VecDeque::new(),
            selves: Vec::new(),
            unmatched: 0,
            generation: 0,
        }
    }

    /// The instance id its probes carry.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The time between two probes of one peer with `n` peers: the interval, stretched so
    /// that all of them stay under the cap.
    pub fn cycle(&self, n: usize) -> Duration {
        let floor = Duration::from_secs_f64(n as f64 / f64::from(self.cfg.max_pps.max(1)));
        self.cfg.interval.max(floor)
    }

    fn slot(&self) -> u64 {
        let n = self.order.len().max(1);
        (ns(self.cycle(n)) / n as u64).max(1)
    }

    /// The peer list now: figures of peers still listed are kept; the peers no longer listed
    /// are dropped and returned with their totals (so sums over groups never go down).
    pub fn set_peers(&mut self, peers: Vec<Peer>) -> Vec<(Peer, Totals)> {
        let window_cap =
            ((ns(self.cfg.window) / ns(self.cfg.interval).max(1)) as usize + 1).min(MAX_WINDOW);
        let mut next = HashMap::with_capacity(peers.len());
        let mut order = Vec::with_capacity(peers.len());
        for p in peers {
            if self.selves.contains(&p.addr) || next.contains_key(&p.addr) {
                continue;
            }
            order.push(p.addr);
            let st = match self.peers.remove(&p.addr) {
                Some(mut st) => {
                    st.peer = p;
                    st
                }
                None => PeerState {
                    peer: p,
                    next_seq: 0,
                    outstanding: VecDeque::new(),
                    totals: Totals::default(),
                    window: Window::new(ns(self.cfg.window), window_cap),
                },
            };
            next.insert(st.peer.addr, st);
        }
        let gone = std::mem::replace(&mut self.peers, next)
            .into_values()
            .map(|st| (st.peer, st.totals))
            .collect();
        self.order = order;
        if self.cursor >= self.order.len() {
            self.cursor = 0;
        }
        self.generation += 1;
        gone
    }

    /// The peers probed now, in list order, and the list's generation.
    pub fn peers(&self) -> (Vec<Peer>, u64) {
        let peers = self
            .order
            .iter()
            .filter_map(|a| self.peers.get(a))
            .map(|st| st.peer.clone())
            .collect();
        (peers, self.generation)
    }

    /// The generation of the list probed now.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Addresses of the peers probed now.
    pub fn peer_count(&self) -> usize {
        self.order.len()
    }

    /// When the machine next has something to do (a send or a timeout).
    pub fn timeout(&self) -> Option<u64> {
        let send = (!self.order.is_empty()).then_some(self.next_send);
        let expiry = self.deadlines.front().map(|d| d.0);
        match (send, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Counts the probes whose time is up as lost.
    pub fn handle_timeout(&mut self, now: u64) {
        while let Some(&(deadline, addr, seq)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            if let Some(st) = self.peers.get_mut(&addr) {
                if let Some(i) = st.outstanding.iter().position(|&(s, _)| s == seq) {
                    st.outstanding.remove(i);
                    st.totals.lost += 1;
                    st.window.push(now, None);
                }
            }
        }
    }

    /// The next probe due at `now`: the peer and the datagram's header.
    pub fn poll_send(&mut self, now: u64) -> Option<(SocketAddr, Header)> {
        if self.order.is_empty() || now < self.next_send {
            return None;
        }
        let slot = self.slot();
        let addr = self.order[self.cursor];
        self.cursor = (self.cursor + 1) % self.order.len();
        // A sender a little late (a timer's granularity, a busy CPU) sends what was due back
        // to back, to different peers; one asleep for longer starts again from now.
        self.next_send = if now > self.next_send + slot.max(CATCH_UP_NS) {
            now + slot
        } else {
            self.next_send + slot
        };
        let st = self.peers.get_mut(&addr)?;
        let seq = st.next_seq;
        st.next_seq += 1;
        if st.outstanding.len() == MAX_OUTSTANDING && st.outstanding.pop_front().is_some() {
            st.totals.lost += 1;
            st.window.push(now, None);
        }
        st.outstanding.push_back((seq, now));
        st.totals.sent += 1;
        self.deadlines
            .push_back((now + ns(self.cfg.timeout), addr, seq));
        Some((
            addr,
            Header::probe(self.id, seq, now, self.cfg.size, self.cfg.keyed),
        ))
    }

    /// A reply `h` from `from` arrived at `now`. Only a listed peer's reply to one of this
    /// agent's probes still waiting counts; anything else is counted as unmatched and leaves
    /// no state.
    pub fn on_reply(&mut self, from: SocketAddr, h: &Header, now: u64) {
        if h.kind != Type::Reply || h.prober != self.id {
            self.unmatched += 1;
            return;
        }
        let Some(st) = self.peers.get_mut(&from) else {
            self.unmatched += 1;
            return;
        };
        let Some(i) = st.outstanding.iter().position(|&(s, _)| s == h.seq) else {
            if h.seq < st.next_seq && h.responder != self.id {
                st.totals.late += 1;
            } else {
                self.unmatched += 1;
            }
            return;
        };
        let (_, sent) = st.outstanding.remove(i).unwrap_or_default();
        if h.responder == self.id {
            // The list names this agent (its own probe came back): stop probing that address.
            self.drop_self(from);
            return;
        }
        let rtt = now.saturating_sub(sent);
        st.totals.reply(rtt);
        let us = (rtt / 1000).min(u64::from(u32::MAX)) as u32;
        st.window.push(now, Some(us));
    }

    /// Takes `addr` off the list for good (this agent's own address).
    fn drop_self(&mut self, addr: SocketAddr) {
        if self.selves.len() < MAX_SELVES && !self.selves.contains(&addr) {
            self.selves.push(addr);
        }
        self.generation += 1;
        self.peers.remove(&addr);
        if let Some(i) = self.order.iter().position(|a| *a == addr) {
            self.order.remove(i);
            if i < self.cursor {
                self.cursor -= 1;
            }
        }
        if self.cursor >= self.order.len() {
            self.cursor = 0;
        }
    }

    /// Every peer's figures at `now`, in list order.
    pub fn figures(&self, now: u64) -> Vec<PeerFigures> {
        self.order
            .iter()
            .filter_map(|a| self.peers.get(a))
            .map(|st| PeerFigures {
                peer: st.peer.clone(),
                totals: st.totals.clone(),
                window: st.window.figures(now),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn peer(i: u8) -> Peer {
        Peer {
            name: format!("10.0.0.{i}"),
            addr: SocketAddr::from(([10, 0, 0, i], 5209)),
            labels: Vec::new(),
        }
    }

    fn cfg(max_pps: u32) -> ProbeConfig {
        ProbeConfig {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            max_pps,
            window: Duration::from_secs(60),
            size: 64,
            keyed: false,
        }
    }

    /// Runs the machine from 0 to `end` in steps of 1 ms; `answer` says whether a peer
    /// replies (after 5 ms).
    fn run(
        p: &mut Prober,
        end: u64,
        answer: &dyn Fn(SocketAddr, u64) -> bool,
    ) -> Vec<(u64, SocketAddr)> {
        let mut sent = Vec::new();
        let mut pending: Vec<(u64, SocketAddr, Header)> = Vec::new();
        let mut now = 0;
        while now <= end {
            pending.retain(|(at, from, h)| {
                if *at <= now {
                    p.on_reply(*from, h, now);
                    false
                } else {
                    true
                }
            });
            p.handle_timeout(now);
            while let Some((addr, h)) = p.poll_send(now) {
                sent.push((now, addr));
                if answer(addr, h.seq) {
                    pending.push((now + 5 * MS, addr, h.reply(99)));
                }
            }
            now += MS;
        }
        sent
    }

    #[test]
    fn every_peer_once_a_second_spread_over_the_second() {
        let mut p = Prober::new(cfg(1000), 1, 0);
        p.set_peers((1..=4).map(peer).collect());
        let sent = run(&mut p, 10 * S - 1, &|_, _| true);
        assert_eq!(sent.len(), 40);
        // 250 ms apart, round robin.
        assert_eq!(sent[1].0 - sent[0].0, 250 * MS);
        assert_eq!(sent[4].1, sent[0].1);
        let f = p.figures(10 * S);
        for pf in &f {
            assert_eq!(
                (pf.totals.sent, pf.totals.replied, pf.totals.lost),
                (10, 10, 0)
            );
            assert_eq!(pf.window.p50_us, Some(5000.0));
        }
    }

    #[test]
    fn the_cap_stretches_the_cycle_instead_of_flooding() {
        let mut p = Prober::new(cfg(10), 1, 0);
        p.set_peers((1..=50).map(peer).collect());
        assert_eq!(p.cycle(50), Duration::from_secs(5));
        let sent = run(&mut p, 20 * S - 1, &|_, _| true);
        // 10 a second in all, every peer covered each 5 s cycle.
        assert_eq!(sent.len(), 200);
        for i in 1..=50 {
            let a = peer(i).addr;
            assert_eq!(sent.iter().filter(|s| s.1 == a).count(), 4);
        }
    }

    #[test]
    fn losses_are_counted_by_sequence_and_late_replies_apart() {
        let mut p = Prober::new(cfg(1000), 1, 0);
        p.set_peers(vec![peer(1), peer(2)]);
        // Peer 2 drops every fourth probe.
        let sent = run(&mut p, 40 * S - 1, &|a, seq| {
            a != peer(2).addr || seq % 4 != 3
        });
        assert_eq!(sent.len(), 80);
        // The last probes' time runs out after the run.
        p.handle_timeout(42 * S);
        let f = p.figures(42 * S);
        assert_eq!((f[0].totals.lost, f[1].totals.lost), (0, 10));
        assert_eq!(f[1].window.loss(), Some(10.0 / 40.0));
        // A reply after the timeout is late, not a reply.
        let mut q = Prober::new(cfg(1000), 1, 0);
        q.set_peers(vec![peer(1)]);
        let (a, h) = q.poll_send(0).unwrap();
        q.handle_timeout(2 * S);
        q.on_reply(a, &h.reply(5), 2 * S);
        let t = &q.figures(2 * S)[0].totals;
        assert_eq!((t.lost, t.late, t.replied), (1, 1, 0));
    }

    #[test]
    fn replies_from_strangers_or_to_other_probers_do_not_count() {
        let mut p = Prober::new(cfg(1000), 1, 0);
        p.set_peers(vec![peer(1)]);
        let (a, h) = p.poll_send(0).unwrap();
        p.on_reply(peer(9).addr, &h.reply(5), MS);
        let mut other = h.reply(5);
        other.prober = 2;
        p.on_reply(a, &other, MS);
        p.on_reply(a, &h, MS); // a probe, not a reply
        assert_eq!(p.unmatched, 3);
        assert_eq!(p.figures(MS)[0].totals.replied, 0);
    }

    #[test]
    fn an_agent_that_hears_itself_stops_probing_that_address() {
        let mut p = Prober::new(cfg(1000), 7, 0);
        p.set_peers(vec![peer(1), peer(2)]);
        let g = p.generation();
        assert_eq!(p.peers(), (vec![peer(1), peer(2)], g));
        let (a, h) = p.poll_send(0).unwrap();
        p.on_reply(a, &h.reply(7), MS);
        assert_eq!(p.peer_count(), 1);
        // The connect prober follows: a new generation without that address.
        let (left, g2) = p.peers();
        assert!(g2 > g && left.len() == 1 && left[0].addr != a, "{left:?}");
        // And stays so when the list is read again.
        p.set_peers(vec![peer(1), peer(2)]);
        assert_eq!(p.peer_count(), 1);
        assert_eq!(
            p.figures(MS)[0].peer,
            if a == peer(1).addr { peer(2) } else { peer(1) }
        );
    }

    #[test]
    fn a_sender_a_little_late_sends_what_was_due() {
        let mut p = Prober::new(cfg(1000), 1, 0);
        p.set_peers((1..=100).map(peer).collect());
        // Slots of 10 ms; awake at 0 and then only at 30 ms: the probes due at 10, 20, 30 go.
        assert!(p.poll_send(0).is_some());
        let mut n = 0;
        while p.poll_send(30 * MS).is_some() {
            n += 1;
        }
        assert_eq!(n, 3);
        assert_eq!(p.timeout(), Some(40 * MS));
    }

    #[test]
    fn only_a_listed_peers_answer_to_a_waiting_probe_can_say_it_is_this_agent() {
        let mut p = Prober::new(cfg(1000), 7, 0);
        p.set_peers(vec![peer(1), peer(2)]);
        let (a, h) = p.poll_send(0).unwrap();
        // A forged "that is you" from a stranger, or for a probe never sent: ignored.
        p.on_reply(peer(9).addr, &h.reply(7), MS);
        let mut unsent = h.reply(7);
        unsent.seq = 99;
        p.on_reply(a, &unsent, MS);
        assert_eq!(p.peer_count(), 2);
        assert_eq!(p.unmatched, 2);
    }

    #[test]
    fn a_new_list_keeps_the_figures_of_peers_still_on_it() {
        let mut p = Prober::new(cfg(1000), 1, 0);
        p.set_peers(vec![peer(1), peer(2)]);
        run(&mut p, 3 * S - 1, &|_, _| true);
        p.set_peers(vec![peer(2), peer(3)]);
        let f = p.figures(3 * S);
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].peer.addr, f[0].totals.sent), (peer(2).addr, 3));
        assert_eq!(f[1].totals.sent, 0);
    }

    #[test]
    fn a_late_wake_sends_one_probe_not_a_burst() {
        let mut p = Prober::new(cfg(1000), 1, 0);
        p.set_peers((1..=10).map(peer).collect());
        assert!(p.poll_send(0).is_some());
        // Asleep for 5 s: one probe, then the next a slot later.
        assert!(p.poll_send(5 * S).is_some());
        assert!(p.poll_send(5 * S).is_none());
        assert_eq!(p.timeout(), Some(5 * S + 100 * MS).min(Some(S)));
    }
}
