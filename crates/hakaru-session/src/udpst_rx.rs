//! The receiving end of an OB-UDPST (RFC 9946) test, shared by the server (upstream: it
//! counts the client's load) and the client (downstream: it counts the server's): sequence
//! accounting (loss, out-of-order, duplicates against a 32-entry history), one-way delay
//! variation against the smallest clock delta, RTT from the echo of the last status PDU's send
//! time, the trial-interval counts a status PDU carries and the sub-interval statistics it
//! saves. Nothing here panics on any input.

use std::time::Instant;

use hakaru_proto::udpst::{LoadHdr, SendingRate, Status, SubIntStats, NODEL};

/// Wall-clock time as the protocol carries it.
pub type Wall = (u32, u32);

pub(crate) fn ms_between(later: Wall, earlier: Wall) -> i64 {
    let a = i64::from(later.0) * 1000 + i64::from(later.1) / 1_000_000;
    let b = i64::from(earlier.0) * 1000 + i64::from(earlier.1) / 1_000_000;
    a - b
}

/// Counts over one trial interval.
#[derive(Debug)]
struct Trial {
    loss: u32,
    ooo: u32,
    dup: u32,
    dv_min: u32,
    dv_max: u32,
    dv_sum: u32,
    dv_cnt: u32,
    rtt_var_sample: u32,
    rx_datagrams: u32,
    rx_bytes: u32,
}

impl Default for Trial {
    fn default() -> Self {
        Trial {
            loss: 0,
            ooo: 0,
            dup: 0,
            dv_min: NODEL,
            dv_max: 0,
            dv_sum: 0,
            dv_cnt: 0,
            rtt_var_sample: NODEL,
            rx_datagrams: 0,
            rx_bytes: 0,
        }
    }
}

fn fresh_sis() -> SubIntStats {
    SubIntStats {
        delay_var_min: NODEL,
        rtt_var_min: NODEL,
        ..Default::default()
    }
}

/// What the receiving end counts.
#[derive(Debug)]
pub struct Receiver {
    trial_ms: u16,
    sub_int_ms: u16,
    trial: Trial,
    sis: SubIntStats,
    sis_sav: SubIntStats,
    sub_int_seq: u32,
    sub_int_start: Option<Instant>,
    test_start: Instant,
    trial_start: Instant,
    lpdu_seq: u32,
    history: [u32; 32],
    hist_idx: usize,
    clock_delta_min: Option<i64>,
    rtt_min: u32,
    delay_min_upd: bool,
    last_spdu_echo: Wall,
    spdu_seq: u32,
    rtt_var_sum: u64,
    rtt_var_cnt: u64,
}

impl Receiver {
    /// A receiver whose status PDUs go every `trial_ms` and whose sub-intervals last
    /// `sub_int_ms` (as accepted in the activation).
    pub fn new(trial_ms: u16, sub_int_ms: u16, now: Instant) -> Self {
        Receiver {
            trial_ms,
            sub_int_ms,
            trial: Trial::default(),
            sis: fresh_sis(),
            sis_sav: SubIntStats::default(),
            sub_int_seq: 0,
            sub_int_start: None,
            test_start: now,
            trial_start: now,
            lpdu_seq: 0,
            history: [0; 32],
            hist_idx: 0,
            clock_delta_min: None,
            rtt_min: NODEL,
            delay_min_upd: false,
            last_spdu_echo: (0, 0),
            spdu_seq: 0,
            rtt_var_sum: 0,
            rtt_var_cnt: 0,
        }
    }

    /// Some load has arrived.
    pub fn seen_load(&self) -> bool {
        self.lpdu_seq != 0
    }

    /// The smallest RTT seen (ms), `None` before the first echo.
    pub fn rtt_min(&self) -> Option<u32> {
        (self.rtt_min != NODEL).then_some(self.rtt_min)
    }

    /// The average of every RTT variation sample (ms, rounded), `None` without samples.
    pub fn rtt_var_avg(&self) -> Option<u32> {
        (self.rtt_var_cnt > 0).then(|| ((self.rtt_var_sum * 10 / self.rtt_var_cnt + 5) / 10) as u32)
    }

    /// This trial interval's sequence errors and delay (RTT variation sample, or the
    /// one-way variation average with `use_owd`), as the rate search reads them.
    pub fn congestion(&self, ignore_ooo_dup: bool, use_owd: bool) -> (u32, Option<u32>) {
        let t = &self.trial;
        let mut seqerr = t.loss;
        if !ignore_ooo_dup {
            seqerr = seqerr.saturating_add(t.ooo).saturating_add(t.dup);
        }
        let delay = if use_owd {
            (t.dv_cnt > 0).then(|| (u64::from(t.dv_sum) * 10 / u64::from(t.dv_cnt) + 5) as u32 / 10)
        } else {
            (t.rtt_var_sample != NODEL).then_some(t.rtt_var_sample)
        };
        (seqerr, delay)
    }

    /// One load datagram of the test (action "test"; the caller handles the stop).
    pub fn on_load(&mut self, h: &LoadHdr, wall: Wall) {
        let payload = u32::from(h.udp_payload);
        self.sis.rx_datagrams = self.sis.rx_datagrams.wrapping_add(1);
        self.sis.rx_bytes = self.sis.rx_bytes.wrapping_add(u64::from(payload));
        self.trial.rx_datagrams = self.trial.rx_datagrams.wrapping_add(1);
        self.trial.rx_bytes = self.trial.rx_bytes.wrapping_add(payload);
        let first = self.lpdu_seq == 0;
        if h.seq > self.lpdu_seq {
            let lost = h.seq - self.lpdu_seq - 1;
            self.trial.loss = self.trial.loss.saturating_add(lost);
            self.sis.loss = self.sis.loss.saturating_add(lost);
            self.lpdu_seq = h.seq;
        } else if self.history.contains(&h.seq) {
            self.trial.dup = self.trial.dup.saturating_add(1);
            self.sis.dup = self.sis.dup.saturating_add(1);
            return;
        } else {
            self.trial.ooo = self.trial.ooo.saturating_add(1);
            self.sis.ooo = self.sis.ooo.saturating_add(1);
            self.trial.loss = self.trial.loss.saturating_sub(1);
            self.sis.loss = self.sis.loss.saturating_sub(1);
            self.remember(h.seq);
            return;
        }
        self.remember(h.seq);
        self.rtt_echo(h, wall);
        self.delay(ms_between(wall, h.lpdu_time), first);
    }

    fn rtt_echo(&mut self, h: &LoadHdr, wall: Wall) {
        if h.spdu_time == self.last_spdu_echo || h.spdu_time == (0, 0) {
            return;
        }
        let rtt = ms_between(wall, h.spdu_time) - i64::from(h.rtt_resp_delay);
        let rtt = rtt.clamp(0, i64::from(u32::MAX - 1)) as u32;
        if rtt < self.rtt_min {
            self.rtt_min = rtt;
            self.delay_min_upd = true;
        }
        let var = rtt.saturating_sub(self.rtt_min);
        self.trial.rtt_var_sample = var;
        self.sis.rtt_var_min = self.sis.rtt_var_min.min(var);
        self.sis.rtt_var_max = self.sis.rtt_var_max.max(var);
        self.rtt_var_sum += u64::from(var);
        self.rtt_var_cnt += 1;
        self.last_spdu_echo = h.spdu_time;
    }

    fn delay(&mut self, delta: i64, first: bool) {
        match self.clock_delta_min {
            Some(min) if !first => {
                if delta < min {
                    self.clock_delta_min = Some(delta);
                    self.delay_min_upd = true;
                }
                let base = self.clock_delta_min.unwrap_or(delta);
                let dv = (delta - base).clamp(0, i64::from(u32::MAX - 1)) as u32;
                let t = &mut self.trial;
                t.dv_min = t.dv_min.min(dv);
                t.dv_max = t.dv_max.max(dv);
                t.dv_sum = t.dv_sum.wrapping_add(dv);
                t.dv_cnt = t.dv_cnt.wrapping_add(1);
                let s = &mut self.sis;
                s.delay_var_min = s.delay_var_min.min(dv);
                s.delay_var_max = s.delay_var_max.max(dv);
                s.delay_var_sum = s.delay_var_sum.wrapping_add(dv);
                s.delay_var_cnt = s.delay_var_cnt.wrapping_add(1);
            }
            _ => {
                self.clock_delta_min = Some(delta);
                self.delay_min_upd = true;
            }
        }
    }

    fn remember(&mut self, seq: u32) {
        if let Some(slot) = self.history.get_mut(self.hist_idx) {
            *slot = seq;
        }
        self.hist_idx = (self.hist_idx + 1) % self.history.len();
    }

    /// The status PDU that ends this trial interval (its counts start afresh), and the
    /// sub-interval it completed, if it completed one. `rate` is what the server tells an
    /// upstream client (zero from a client).
    pub fn status(
        &mut self,
        now: Instant,
        wall: Wall,
        action: u8,
        rate: SendingRate,
        rx_stopped: bool,
    ) -> (Status, Option<SubIntStats>) {
        self.spdu_seq = self.spdu_seq.wrapping_add(1);
        let t = std::mem::take(&mut self.trial);
        let s = Status {
            test_action: action,
            rx_stopped,
            seq: self.spdu_seq,
            rate,
            sub_int_seq: self.sub_int_seq,
            sis: self.sis_sav,
            loss: t.loss,
            ooo: t.ooo,
            dup: t.dup,
            clock_delta_min: self.clock_delta_min.unwrap_or(0) as u32,
            delay_var_min: t.dv_min,
            delay_var_max: t.dv_max,
            delay_var_sum: t.dv_sum,
            delay_var_cnt: t.dv_cnt,
            rtt_min: self.rtt_min,
            rtt_var_sample: t.rtt_var_sample,
            delay_min_upd: std::mem::take(&mut self.delay_min_upd),
            ti_delta_time: now.saturating_duration_since(self.trial_start).as_micros() as u32,
            ti_rx_datagrams: t.rx_datagrams,
            ti_rx_bytes: t.rx_bytes,
            spdu_time: wall,
            auth_mode: 0,
        };
        self.trial_start = now;
        (s, self.sub_interval(now))
    }

    /// Sub-intervals are checked at each status PDU, so they have the trial interval's grain.
    fn sub_interval(&mut self, now: Instant) -> Option<SubIntStats> {
        let period = i64::from(self.sub_int_ms) - i64::from(self.trial_ms / 2);
        let Some(start) = self.sub_int_start else {
            self.test_start = now;
            self.sis = fresh_sis();
            self.sub_int_start = Some(now);
            return None;
        };
        let el = now.saturating_duration_since(start);
        if el.as_millis() as i64 <= period {
            return None;
        }
        self.sub_int_seq = self.sub_int_seq.wrapping_add(1);
        self.sis.delta_time = el.as_micros().min(u128::from(u32::MAX)) as u32;
        self.sis.accum_time = now
            .saturating_duration_since(self.test_start)
            .as_millis()
            .min(u128::from(u32::MAX)) as u32;
        self.sis_sav = self.sis;
        self.sis = fresh_sis();
        self.sub_int_start = Some(now);
        Some(self.sis_sav)
    }
}
