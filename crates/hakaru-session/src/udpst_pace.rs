//! The load pattern of an OB-UDPST sending-rate row, without a socket or clock: which
//! datagram sizes are due at `now` from the row's two transmitters (a burst every interval,
//! the second with its add-on datagram; sizes with the random bit drawn up to their size,
//! 20 bytes less over IPv6). A sender that falls far behind starts afresh instead of
//! catching up in one burst.

use std::time::{Duration, Instant};

use hakaru_proto::udpst::{SendingRate, LOAD_HDR_LEN, RAND_BIT};

/// Intervals a transmitter may fall behind before it starts afresh (sends one burst and
/// counts on from now), for a sender that waits for each burst with tight timer slack (the
/// server): one that piled up every missed burst of a busy CPU into one send would overflow
/// its socket and the receiver, which the client reads as loss. The reference never catches
/// up at all (its next burst is timed from when it sent the last).
pub const CATCH_UP_TIGHT: u32 = 2;
/// The same for a sender that sleeps up to a millisecond between bursts (the client): it
/// catches up what its sleep missed.
pub const CATCH_UP_COARSE: u32 = 20;
/// Most datagrams of one burst (the table's largest).
const MAX_BURST: u32 = 100;

/// The two transmitters' clocks.
#[derive(Debug)]
pub struct Pacer {
    next: [Instant; 2],
    rng: u64,
    catch_up: u32,
}

impl Pacer {
    /// Transmitters that start at `start`; `seed` draws the random sizes; a transmitter
    /// more than `catch_up` intervals behind starts afresh ([`CATCH_UP_TIGHT`],
    /// [`CATCH_UP_COARSE`]).
    pub fn new(start: Instant, seed: u64, catch_up: u32) -> Self {
        Pacer {
            next: [start; 2],
            rng: seed | 1,
            catch_up,
        }
    }

    fn upto(&mut self, min: u32, max: u32) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        if max <= min {
            return max;
        }
        min + (self.rng % u64::from(max - min + 1)) as u32
    }

    fn size(&mut self, field: u32, v6: bool) -> u32 {
        let min = LOAD_HDR_LEN as u32 + 20;
        let mut s = field & !RAND_BIT;
        if v6 && s >= min {
            s -= 20;
        }
        if s > 0 && field & RAND_BIT != 0 {
            s = self.upto(if v6 { min - 20 } else { min }, s);
        }
        s.max(LOAD_HDR_LEN as u32)
    }

    /// Appends to `out` the sizes of the datagrams due by `now` at row `r` (one per burst
    /// while `stopping`).
    pub fn due(
        &mut self,
        r: &SendingRate,
        now: Instant,
        v6: bool,
        stopping: bool,
        out: &mut Vec<u32>,
    ) {
        let tx = [
            (r.tx_interval1, r.burst1, r.payload1, 0),
            (r.tx_interval2, r.burst2, r.payload2, r.addon2),
        ];
        for (i, (interval, burst, payload, addon)) in tx.into_iter().enumerate() {
            let iv = Duration::from_micros(u64::from(interval.max(100)));
            let Some(next) = self.next.get(i).copied() else {
                continue;
            };
            if interval == 0 {
                self.set(i, now + iv);
                continue;
            }
            let mut next = if now.saturating_duration_since(next) > iv * self.catch_up {
                now
            } else {
                next
            };
            let mut rounds = 0;
            while next <= now && rounds <= self.catch_up {
                let first = out.len();
                for _ in 0..burst.min(MAX_BURST) {
                    let s = self.size(payload, v6);
                    out.push(s);
                }
                if addon != 0 {
                    let s = self.size(addon, v6);
                    out.push(s);
                }
                if stopping {
                    out.truncate(first + 1);
                }
                next += iv;
                rounds += 1;
            }
            self.set(i, next);
        }
    }

    fn set(&mut self, i: usize, at: Instant) {
        if let Some(n) = self.next.get_mut(i) {
            *n = at;
        }
    }

    /// When the next burst is due.
    pub fn next_wake(&self) -> Instant {
        let [a, b] = self.next;
        a.min(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_proto::udpst::sending_rates;

    /// Row 1076 of the jumbo table: 24 datagrams of 8972 bytes every 100 µs, nothing else.
    fn bursts_due_after(late_us: u64) -> usize {
        bursts_with(CATCH_UP_TIGHT, late_us)
    }

    fn bursts_with(catch_up: u32, late_us: u64) -> usize {
        let row = sending_rates(true, false).0.get(1076).copied().unwrap();
        assert_eq!(
            (row.tx_interval1, row.burst1, row.payload1),
            (100, 24, 8972)
        );
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 1, catch_up);
        let mut out = Vec::new();
        p.due(&row, t0, false, false, &mut out);
        assert_eq!(out.len(), 24, "one burst at the start");
        out.clear();
        p.due(
            &row,
            t0 + Duration::from_micros(100 + late_us),
            false,
            false,
            &mut out,
        );
        out.len() / 24
    }

    #[test]
    fn a_late_sender_catches_up_two_intervals_at_most() {
        assert_eq!(bursts_due_after(0), 1, "on time: one burst");
        assert_eq!(
            bursts_due_after(150),
            2,
            "1.5 intervals late: the missed burst too"
        );
        assert_eq!(
            bursts_due_after(200),
            3,
            "two intervals late: both missed bursts"
        );
        // Further behind, the missed bursts are not piled into one send (which would overflow
        // the socket and the receiver as loss): one burst, and the clock starts afresh.
        assert_eq!(bursts_due_after(250), 1);
        assert_eq!(bursts_due_after(5_000), 1);
        // A sender that sleeps coarsely catches up what its sleep missed, up to 20 intervals.
        assert_eq!(bursts_with(CATCH_UP_COARSE, 250), 3);
        assert_eq!(bursts_with(CATCH_UP_COARSE, 1_000), 11);
        assert_eq!(bursts_with(CATCH_UP_COARSE, 2_100), 1);
    }
}
