//! One OB-UDPST (RFC 9946) test connection on the server side, as a sans-IO machine: the
//! accepted activation, the load accounting of an upstream test, the status feedback, the
//! sending-rate search (algorithms B and C of the reference) and the stop exchange.
//!
//! The driver owns the socket and the clocks: it hands in each datagram with `now` (a
//! monotonic instant) and `wall` (the real-time clock as seconds and nanoseconds, which the
//! protocol carries), and asks the machine what to send. Nothing here panics on any input.

use std::time::{Duration, Instant};

use hakaru_proto::udpst::{
    self as u, Activation, LoadHdr, SendingRate, Status, ACTION_STOP2, ACTION_TEST, NODEL,
};

/// A test whose client sends nothing for this long is over (the reference's watchdog).
pub const WATCHDOG: Duration = Duration::from_secs(3);
/// The reference's bounds for the activation's parameters; values outside get the default.
const LOW: (u16, u16, u16) = (1, 10_000, 30);
const UPPER: (u16, u16, u16) = (1, 10_000, 90);
const TRIAL: (u16, u16, u16) = (5, 250, 50);
const SUBINT: (u16, u16, u16) = (100, 10_000, 1000);
const HS_DELTA_BACKUP: usize = 3;
const RETRY_THRESH_ALGOC: u32 = 5;

pub use crate::udpst_rx::{Receiver, Wall};

fn clamp(v: u16, (min, max, def): (u16, u16, u16)) -> u16 {
    if v < min || v > max {
        def
    } else {
        v
    }
}

/// The server's own bounds on a test.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest test (s); longer requests are coerced down, as the reference does.
    pub max_duration_s: u16,
    /// Highest sending-rate row the search may reach.
    pub max_row: usize,
}

/// Direction of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// The client sends load, the server sends status feedback.
    Up,
    /// The server sends load, the client sends status feedback.
    Down,
}

/// One test connection.
#[derive(Debug)]
pub struct UdpstTest {
    act: Activation,
    /// Direction.
    pub dir: Dir,
    table: Vec<SendingRate>,
    hs: usize,
    max_row: usize,
    sr_index: usize,
    static_rate: bool,
    slow_adj_count: u16,
    algo_c_update: bool,
    algo_c_retry: u32,
    algo_c_thresh: u32,
    action: u8,
    stop_at: Instant,
    last_rx: Instant,
    ended: bool,
    // receiver side (upstream)
    rx: Receiver,
    next_status: Instant,
    // sender side (downstream)
    peer_spdu_seq: u32,
    spdu_seq_err: u16,
    peer_spdu_time: Wall,
    peer_status_at: Option<Instant>,
    load_seq: u32,
}

/// The reference's coercion of an activation's parameters to their bounds and the server's.
fn coerce(act: &mut Activation, lim: Limits) {
    act.low_thresh = clamp(act.low_thresh, LOW);
    act.upper_thresh = clamp(act.upper_thresh, UPPER);
    if act.low_thresh > act.upper_thresh {
        act.low_thresh = LOW.2;
        act.upper_thresh = UPPER.2;
    }
    act.trial_int = clamp(act.trial_int, TRIAL);
    act.test_int_time = clamp(act.test_int_time, (5, 3600, 10)).min(lim.max_duration_s.max(5));
    act.sub_int_period = clamp(act.sub_int_period, SUBINT);
    if u32::from(act.sub_int_period) > u32::from(act.test_int_time) * 1000 {
        act.test_int_time = 10u16.min(lim.max_duration_s.max(5));
        act.sub_int_period = SUBINT.2;
    }
    if act.high_speed_delta == 0 {
        act.high_speed_delta = 10;
    }
    if act.slow_adj_thresh == 0 {
        act.slow_adj_thresh = 3;
    }
    if act.use_ow_del_var > 1 {
        act.use_ow_del_var = 0;
    }
    if act.ignore_ooo_dup > 1 {
        act.ignore_ooo_dup = 1;
    }
    if act.rate_adj_algo > 1 {
        act.rate_adj_algo = 0;
    }
    act.sr_adj_supp = 0; // suppression is not implemented: say so in the response
}

impl UdpstTest {
    /// Accepts an activation: coerces its parameters to the reference's bounds and the
    /// server's limits, and gives the machine and the response to send.
    pub fn new(
        mut act: Activation,
        jumbo: bool,
        trad: bool,
        lim: Limits,
        now: Instant,
    ) -> (Self, Vec<u8>) {
        let (table, hs) = u::sending_rates(jumbo, trad);
        coerce(&mut act, lim);
        let max_row = lim.max_row.min(table.len() - 1);
        let mut sr_index = 0;
        let mut static_rate = false;
        if act.sr_index_conf != u::SRIDX_AUTO {
            if usize::from(act.sr_index_conf) > max_row {
                act.sr_index_conf = max_row as u16;
            }
            sr_index = usize::from(act.sr_index_conf);
            static_rate = act.modifiers & u::SRIDX_ISSTART == 0;
        }
        let dir = if act.command == u::ACT_UPSTREAM {
            Dir::Up
        } else {
            Dir::Down
        };
        let start = (dir == Dir::Up).then(|| table.get(sr_index).copied().unwrap_or_default());
        let resp = act.response(u::ACT_ACK, start);
        let trial = Duration::from_millis(act.trial_int.into());
        let stop_at =
            now + Duration::from_secs(act.test_int_time.into()) + Duration::from_millis(500);
        let t = UdpstTest {
            dir,
            table,
            hs,
            max_row,
            sr_index,
            static_rate,
            slow_adj_count: 0,
            algo_c_update: false,
            algo_c_retry: 0,
            algo_c_thresh: RETRY_THRESH_ALGOC,
            action: ACTION_TEST,
            stop_at,
            last_rx: now,
            ended: false,
            rx: Receiver::new(act.trial_int, act.sub_int_period, now),
            next_status: now + trial,
            peer_spdu_seq: 0,
            spdu_seq_err: 0,
            peer_spdu_time: (0, 0),
            peer_status_at: None,
            load_seq: 0,
            act,
        };
        (t, resp)
    }

    /// The accepted activation.
    pub fn activation(&self) -> &Activation {
        &self.act
    }

    /// The test is over: the client confirmed the stop, or went quiet.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The current sending-rate row.
    pub fn rate(&self) -> SendingRate {
        self.table.get(self.sr_index).copied().unwrap_or_default()
    }

    /// The current row's index.
    pub fn row(&self) -> usize {
        self.sr_index
    }

    /// The trial (status feedback) interval.
    pub fn trial_interval(&self) -> Duration {
        Duration::from_millis(self.act.trial_int.into())
    }

    /// Advances the clock-driven parts: the stop after the test's duration, the watchdog.
    /// Returns a status PDU to send when one is due (upstream).
    pub fn on_tick(&mut self, now: Instant, wall: Wall) -> Option<[u8; u::STATUS_LEN]> {
        if self.ended {
            return None;
        }
        if now.saturating_duration_since(self.last_rx) >= WATCHDOG {
            self.ended = true;
            return None;
        }
        if now >= self.stop_at && self.action == ACTION_TEST {
            self.action = ACTION_STOP2;
        }
        if self.dir == Dir::Up && now >= self.next_status {
            self.next_status = now + self.trial_interval();
            return self.status(now, wall);
        }
        None
    }

    fn status(&mut self, now: Instant, wall: Wall) -> Option<[u8; u::STATUS_LEN]> {
        if !self.rx.seen_load() && self.action == ACTION_TEST {
            return None; // no load yet
        }
        if self.action == ACTION_TEST {
            let (seqerr, delay) = self
                .rx
                .congestion(self.act.ignore_ooo_dup == 1, self.act.use_ow_del_var == 1);
            self.adjust(seqerr, delay);
        }
        let rx_stopped = now.saturating_duration_since(self.last_rx) >= Duration::from_secs(1);
        let (s, _) = self
            .rx
            .status(now, wall, self.action, self.rate(), rx_stopped);
        Some(s.encode())
    }

    /// A load datagram of an upstream test (header already read, `len` bytes received).
    pub fn on_load(&mut self, h: &LoadHdr, now: Instant, wall: Wall) {
        if self.ended || self.dir != Dir::Up {
            return;
        }
        if h.test_action != ACTION_TEST {
            if self.action != ACTION_TEST {
                self.ended = true; // the client confirms the stop
            }
            return;
        }
        self.last_rx = now;
        self.rx.on_load(h, wall);
    }

    /// A status PDU of a downstream test: the client's view of our load; adjusts the rate.
    pub fn on_status(&mut self, s: &Status, now: Instant) {
        if self.ended || self.dir != Dir::Down {
            return;
        }
        if s.test_action != ACTION_TEST {
            if self.action != ACTION_TEST {
                self.ended = true;
            }
            return;
        }
        self.last_rx = now;
        if s.seq > self.peer_spdu_seq {
            self.spdu_seq_err = (s.seq - self.peer_spdu_seq - 1).min(u32::from(u16::MAX)) as u16;
            self.peer_spdu_seq = s.seq;
        } else {
            self.spdu_seq_err = u16::MAX;
        }
        self.peer_spdu_time = s.spdu_time;
        self.peer_status_at = Some(now);
        if self.action != ACTION_TEST {
            return;
        }
        let mut seqerr = s.loss;
        if self.act.ignore_ooo_dup == 0 {
            seqerr += s.ooo + s.dup;
        }
        let delay = if self.act.use_ow_del_var == 1 {
            (s.delay_var_cnt > 0).then(|| (s.delay_var_sum * 10 / s.delay_var_cnt + 5) / 10)
        } else {
            (s.rtt_var_sample != NODEL).then_some(s.rtt_var_sample)
        };
        self.adjust(seqerr, delay);
    }

    /// The header of the next load datagram of a downstream test with `payload` bytes.
    pub fn next_load(&mut self, payload: u16, now: Instant, wall: Wall) -> LoadHdr {
        self.load_seq = self.load_seq.wrapping_add(1);
        let resp_delay = self.peer_status_at.map_or(0, |t| {
            now.saturating_duration_since(t)
                .as_millis()
                .min(u128::from(u16::MAX)) as u16
        });
        LoadHdr {
            test_action: self.action,
            rx_stopped: now.saturating_duration_since(self.last_rx) >= Duration::from_secs(1),
            seq: self.load_seq,
            udp_payload: payload,
            spdu_seq_err: self.spdu_seq_err,
            spdu_time: self.peer_spdu_time,
            lpdu_time: wall,
            rtt_resp_delay: resp_delay,
        }
    }

    /// The sequence number of one more datagram of the burst whose first header
    /// [`UdpstTest::next_load`] gave: a burst shares every other field, so a sender builds
    /// that header once and stamps each datagram with this and its size.
    pub fn next_seq(&mut self) -> u32 {
        self.load_seq = self.load_seq.wrapping_add(1);
        self.load_seq
    }

    /// A datagram the sender could not queue: its sequence number is used again, as the
    /// reference does, so the client does not count the server's own backpressure as loss.
    pub fn unsent(&mut self) {
        self.load_seq = self.load_seq.wrapping_sub(1);
    }

    /// The test is stopping: the load goes out one datagram per burst with the stop action.
    pub fn stopping(&self) -> bool {
        self.action != ACTION_TEST
    }

    /// The sending-rate search of the reference (TR-471 5.2.1 / Y.1540 Annex B, and C).
    fn adjust(&mut self, seqerr: u32, delay: Option<u32>) {
        if self.static_rate {
            return;
        }
        let low = u32::from(self.act.low_thresh);
        let delay = delay.unwrap_or(low);
        let good = seqerr <= u32::from(self.act.seq_err_thresh) && delay < low;
        let bad =
            seqerr > u32::from(self.act.seq_err_thresh) || delay > u32::from(self.act.upper_thresh);
        let hsd = usize::from(self.act.high_speed_delta);
        let slow = self.act.slow_adj_thresh;
        let top = self.table.len() - 1;
        let algo_c = self.act.rate_adj_algo == 1;
        let i = &mut self.sr_index;
        if good {
            if *i < self.hs && self.slow_adj_count < slow {
                if algo_c {
                    if *i * 2 > self.hs {
                        *i = self.hs;
                    } else {
                        *i = (*i).max(1);
                        if self.algo_c_update {
                            *i *= 2;
                        }
                        self.algo_c_update = !self.algo_c_update;
                    }
                } else {
                    *i = (*i + hsd).min(self.hs);
                }
                self.slow_adj_count = 0;
            } else {
                if *i < top {
                    *i += 1;
                    self.algo_c_retry += 1;
                }
                if algo_c && self.algo_c_retry >= self.algo_c_thresh {
                    self.slow_adj_count = 0;
                    self.algo_c_retry = 0;
                    self.algo_c_thresh += RETRY_THRESH_ALGOC;
                }
            }
        } else if bad {
            self.slow_adj_count = self.slow_adj_count.saturating_add(1);
            if *i < self.hs && self.slow_adj_count == slow {
                *i = i.saturating_sub(hsd * HS_DELTA_BACKUP);
            } else if *i > 0 {
                *i -= 1;
                self.algo_c_retry += 1;
                if algo_c && self.algo_c_retry >= self.algo_c_thresh {
                    self.slow_adj_count = 0;
                    self.algo_c_retry = 0;
                }
            }
        }
        self.sr_index = self.sr_index.min(self.max_row);
    }
}

#[cfg(test)]
#[path = "udpst_tests.rs"]
mod tests;
