//! One OB-UDPST (RFC 9946, protocol version 20) test connection on the client side, as a
//! sans-IO machine: the setup request and its response, the test activation, then either
//! load at the sending rate the server's status PDUs name (upstream) or the receiver's
//! accounting and a status PDU every trial interval (downstream), the stop exchange and the
//! watchdog. The server runs the rate search in both directions; the client keeps the
//! receiver's sub-interval statistics (the server's upstream, its own downstream) and turns
//! them into the result: the highest sub-interval IP-layer rate is the maximum capacity.
//!
//! The driver owns the socket and the clocks: it sends the setup request to the control port,
//! connects to the test port `on_control` names, sends `activation_request`, then hands in
//! every datagram with `on_datagram` and calls `on_tick` often (and, upstream, sends the load
//! `next_load` heads at `rate()`), until `phase()` is `Done` or `Failed`. Nothing here panics
//! on any input, and every phase ends by a deadline.

use std::time::{Duration, Instant};

use hakaru_model::{UdpstDirection, UdpstResult, UdpstSpec, UdpstSubInterval};
use hakaru_proto::udpst::{
    self as u, Activation, LoadHdr, SendingRate, SetupParams, SetupResponse, Status, SubIntStats,
    ACTION_STOP2, ACTION_TEST, NODEL,
};

use crate::udpst_rx::Receiver;
pub use crate::udpst_rx::Wall;

/// How long the server may take to answer the setup request.
pub const SETUP_WAIT: Duration = Duration::from_secs(3);
/// How long the test port may take to answer the activation.
pub const ACTIVATION_WAIT: Duration = Duration::from_secs(3);
/// A server silent this long during the test ends it (the reference's watchdog).
pub const WATCHDOG: Duration = Duration::from_secs(3);
/// Past the test's duration, how long the stop exchange may take before the client ends.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Bytes per datagram on top of the UDP payload: UDP + IPv4, then Ethernet (14), then FCS (4).
const L3_OVERHEAD: u32 = 28;
const L2_EXTRA: u32 = 14;
const L1_EXTRA: u32 = 18;
/// The smallest load datagram (the reference's minimum payload).
const MIN_LOAD: usize = u::LOAD_HDR_LEN + 20;

/// Where the connection is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The setup request is out.
    Setup,
    /// The activation request is out.
    Activating,
    /// Load or status PDUs are flowing.
    Testing,
    /// The test ended (stop exchange or watchdog): the result is ready.
    Done,
    /// The test could not run; the reason.
    Failed(String),
}

/// One client test connection.
#[derive(Debug)]
pub struct UdpstClient {
    spec: UdpstSpec,
    v6: bool,
    phase: Phase,
    deadline: Instant,
    act: Option<Activation>,
    action: u8,
    started: Instant,
    last_rx: Instant,
    watchdog: bool,
    // downstream: this end counts
    rx: Option<Receiver>,
    next_status: Instant,
    // upstream: this end sends
    rate: SendingRate,
    load_seq: u32,
    peer_spdu_seq: u32,
    spdu_seq_err: u16,
    peer_spdu_time: Wall,
    peer_status_at: Option<Instant>,
    peer_sub_int_seq: u32,
    up_rtt_min: u32,
    up_rtt_var: (u64, u64),
    subs: Vec<SubIntStats>,
}

impl UdpstClient {
    /// A connection for `spec` (already validated); `ident` is the random non-zero
    /// connection identifier, `v6` whether the path is IPv6 (20 more header bytes). Gives the
    /// setup request to send to the control port.
    pub fn new(spec: &UdpstSpec, ident: u16, v6: bool, now: Instant) -> (Self, [u8; u::SETUP_LEN]) {
        let mut modifiers = 0;
        if spec.jumbo {
            modifiers |= u::MOD_JUMBO;
        }
        if spec.traditional {
            modifiers |= u::MOD_TRADITIONAL;
        }
        let req = SetupParams {
            version: u::PROTOCOL_VER,
            mc_ident: ident.max(1),
            max_bandwidth: spec.max_mbps,
            upstream: spec.direction == UdpstDirection::Up,
            modifiers,
        }
        .encode();
        let c = UdpstClient {
            spec: spec.clone(),
            v6,
            phase: Phase::Setup,
            deadline: now + SETUP_WAIT,
            act: None,
            action: ACTION_TEST,
            started: now,
            last_rx: now,
            watchdog: false,
            rx: None,
            next_status: now,
            rate: SendingRate::default(),
            load_seq: 0,
            peer_spdu_seq: 0,
            spdu_seq_err: 0,
            peer_spdu_time: (0, 0),
            peer_status_at: None,
            peer_sub_int_seq: 0,
            up_rtt_min: NODEL,
            up_rtt_var: (0, 0),
            subs: Vec::new(),
        };
        (c, req)
    }

    /// Where the connection is.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    fn fail(&mut self, why: String) {
        if !matches!(self.phase, Phase::Done | Phase::Failed(_)) {
            self.phase = Phase::Failed(why);
        }
    }

    /// A datagram on the control path before the test port is known: the setup response
    /// gives the test port to connect to (anything else is ignored; a refusal fails).
    pub fn on_control(&mut self, b: &[u8], now: Instant) -> Option<u16> {
        if self.phase != Phase::Setup {
            return None;
        }
        let r = SetupResponse::parse(b).ok()?;
        if let Some(why) = r.refusal() {
            self.fail(format!("the server refused the test: {why}"));
            return None;
        }
        if r.test_port == 0 {
            self.fail("the server accepted the test without a test port".into());
            return None;
        }
        self.phase = Phase::Activating;
        self.deadline = now + ACTIVATION_WAIT;
        Some(r.test_port)
    }

    /// The test activation request, to send on the test port.
    pub fn activation_request(&self) -> [u8; u::ACT_LEN] {
        let s = &self.spec;
        let (index, start) = match s.row {
            Some(r) => (r, s.start_only),
            None => (u::SRIDX_AUTO, false),
        };
        Activation {
            command: match s.direction {
                UdpstDirection::Up => u::ACT_UPSTREAM,
                UdpstDirection::Down => u::ACT_DOWNSTREAM,
            },
            low_thresh: 30,
            upper_thresh: 90,
            trial_int: s.trial_ms,
            test_int_time: s.duration_s,
            sr_index_conf: index,
            use_ow_del_var: 0,
            high_speed_delta: 10,
            slow_adj_thresh: 3,
            seq_err_thresh: 10,
            ignore_ooo_dup: 1,
            modifiers: if start { u::SRIDX_ISSTART } else { 0 },
            rate_adj_algo: u8::from(s.algorithm_c),
            sub_int_period: s.sub_interval_ms,
            sr_adj_supp: 0,
            auth_mode: 0,
            code: 0,
            start_rate: SendingRate::default(),
            raw: Vec::new(),
        }
        .encode()
    }

    /// A datagram from the test port.
    pub fn on_datagram(&mut self, b: &[u8], now: Instant, wall: Wall) {
        match self.phase {
            Phase::Activating => self.on_activation(b, now),
            Phase::Testing => match self.spec.direction {
                UdpstDirection::Up => {
                    if let Ok(s) = Status::parse(b) {
                        self.on_status(&s, now);
                    }
                }
                UdpstDirection::Down => {
                    if let Ok(h) = LoadHdr::parse(b) {
                        self.on_load(&h, now, wall);
                    }
                }
            },
            _ => {}
        }
    }

    fn on_activation(&mut self, b: &[u8], now: Instant) {
        let Ok(a) = Activation::parse(b) else {
            return; // the null request, or garbage
        };
        if a.code != u::ACT_ACK {
            self.fail(format!(
                "the server rejected the test parameters (activation response code {})",
                a.code
            ));
            return;
        }
        let up = a.command == u::ACT_UPSTREAM;
        if up != (self.spec.direction == UdpstDirection::Up) {
            self.fail("the server's activation response is for the other direction".into());
            return;
        }
        let trial = a.trial_int.clamp(5, 250);
        let sub = a.sub_int_period.clamp(100, 10_000);
        if up {
            self.rate = a.start_rate;
        } else {
            self.rx = Some(Receiver::new(trial, sub, now));
            self.next_status = now + Duration::from_millis(trial.into());
        }
        self.started = now;
        self.last_rx = now;
        self.phase = Phase::Testing;
        self.act = Some(a);
    }

    fn on_status(&mut self, s: &Status, now: Instant) {
        self.last_rx = now;
        if s.test_action != ACTION_TEST {
            self.action = ACTION_STOP2;
            return;
        }
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
        self.rate = s.rate;
        if s.rtt_min != NODEL {
            self.up_rtt_min = s.rtt_min;
        }
        if s.rtt_var_sample != NODEL {
            self.up_rtt_var.0 += u64::from(s.rtt_var_sample);
            self.up_rtt_var.1 += 1;
        }
        if s.sub_int_seq != self.peer_sub_int_seq {
            self.peer_sub_int_seq = s.sub_int_seq;
            self.keep(s.sis);
        }
    }

    fn keep(&mut self, sis: SubIntStats) {
        let (dur, sub) = self.accepted();
        let cap = (u32::from(dur) * 1000 / u32::from(sub.max(1))) as usize;
        if self.subs.len() < cap {
            self.subs.push(sis);
        }
    }

    fn accepted(&self) -> (u16, u16) {
        self.act
            .as_ref()
            .map_or((self.spec.duration_s, self.spec.sub_interval_ms), |a| {
                (a.test_int_time, a.sub_int_period.clamp(100, 10_000))
            })
    }

    fn on_load(&mut self, h: &LoadHdr, now: Instant, wall: Wall) {
        self.last_rx = now;
        if h.test_action != ACTION_TEST {
            self.action = ACTION_STOP2;
            return;
        }
        if self.action != ACTION_TEST {
            return;
        }
        if let Some(rx) = self.rx.as_mut() {
            rx.on_load(h, wall);
        }
    }

    /// Advances the clock-driven parts: the setup and activation deadlines, the watchdog, the
    /// status PDU of a downstream test, the stop confirmation. Returns a datagram to send on
    /// the test port when one is due.
    pub fn on_tick(&mut self, now: Instant, wall: Wall) -> Option<Vec<u8>> {
        match self.phase {
            Phase::Setup if now >= self.deadline => {
                self.fail(format!(
                    "no setup response from the server within {} s",
                    SETUP_WAIT.as_secs()
                ));
                None
            }
            Phase::Activating if now >= self.deadline => {
                self.fail(format!(
                    "no test activation response within {} s",
                    ACTIVATION_WAIT.as_secs()
                ));
                None
            }
            Phase::Testing => self.tick_test(now, wall),
            _ => None,
        }
    }

    fn tick_test(&mut self, now: Instant, wall: Wall) -> Option<Vec<u8>> {
        let (dur, _) = self.accepted();
        let over = self.started + Duration::from_secs(dur.into()) + STOP_GRACE;
        if now.saturating_duration_since(self.last_rx) >= WATCHDOG || now >= over {
            self.watchdog = true;
            if self.subs.is_empty() {
                self.fail(format!(
                    "the server went silent for {} s before a sub-interval completed",
                    WATCHDOG.as_secs()
                ));
            } else {
                self.phase = Phase::Done;
            }
            return None;
        }
        let rx_stopped = now.saturating_duration_since(self.last_rx) >= Duration::from_secs(1);
        match self.spec.direction {
            UdpstDirection::Up if self.action != ACTION_TEST => {
                self.phase = Phase::Done;
                let mut b = vec![0u8; MIN_LOAD];
                let h = self.next_load(MIN_LOAD as u16, now, wall);
                h.write(&mut b);
                Some(b)
            }
            UdpstDirection::Up => None,
            UdpstDirection::Down => {
                let stopping = self.action != ACTION_TEST;
                if !stopping && now < self.next_status {
                    return None;
                }
                let trial = self.act.as_ref().map_or(50, |a| a.trial_int.clamp(5, 250));
                self.next_status = now + Duration::from_millis(trial.into());
                let rx = self.rx.as_mut()?;
                if !stopping && !rx.seen_load() {
                    return None;
                }
                let (s, sub) =
                    rx.status(now, wall, self.action, SendingRate::default(), rx_stopped);
                if stopping {
                    self.phase = Phase::Done;
                } else if let Some(sis) = sub {
                    self.keep(sis);
                }
                Some(s.encode().to_vec())
            }
        }
    }

    /// Upstream, while testing: the row to send at (the server's latest word).
    pub fn rate(&self) -> SendingRate {
        self.rate
    }

    /// Upstream load is due (the test runs, or its stop is still to be confirmed).
    pub fn sending(&self) -> bool {
        self.phase == Phase::Testing && self.spec.direction == UdpstDirection::Up
    }

    /// The server asked to stop: one datagram per burst until the confirmation.
    pub fn stopping(&self) -> bool {
        self.action != ACTION_TEST
    }

    /// The header of the next upstream load datagram of `payload` bytes.
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
            spdu_time: self.peer_status_at.map_or((0, 0), |_| self.peer_spdu_time),
            lpdu_time: wall,
            rtt_resp_delay: resp_delay,
        }
    }

    /// A datagram the socket would not take: its sequence number goes out again.
    pub fn unsent(&mut self) {
        self.load_seq = self.load_seq.wrapping_sub(1);
    }

    /// The sub-intervals kept so far.
    pub fn sub_intervals(&self) -> &[SubIntStats] {
        &self.subs
    }

    /// The result from the sub-intervals kept so far.
    pub fn result(&self) -> UdpstResult {
        let (duration_s, sub_interval_ms) = self.accepted();
        let mut r = summarize(&self.subs, self.v6);
        r.direction = self.spec.direction.as_str().into();
        r.trial_ms = self
            .act
            .as_ref()
            .map_or(self.spec.trial_ms, |a| a.trial_int);
        r.sub_interval_ms = sub_interval_ms;
        r.duration_s = duration_s;
        r.ended_by_watchdog = self.watchdog;
        let (rtt_min, var) = match &self.rx {
            Some(rx) => (rx.rtt_min(), rx.rtt_var_avg()),
            None => {
                let (sum, n) = self.up_rtt_var;
                (
                    (self.up_rtt_min != NODEL).then_some(self.up_rtt_min),
                    (n > 0).then(|| ((sum * 10 / n + 5) / 10) as u32),
                )
            }
        };
        r.rtt_min_ms = rtt_min;
        if let (Some(v), Some(avg)) = (r.rtt_var_ms.as_mut(), var) {
            v[1] = avg;
        }
        r
    }
}

/// Mbit/s of a sub-interval with `overhead` bytes per datagram on top of its payload.
fn mbps(s: &SubIntStats, overhead: u32) -> f64 {
    if s.delta_time == 0 {
        return 0.0;
    }
    let bits = (f64::from(s.rx_datagrams) * f64::from(overhead) + s.rx_bytes as f64) * 8.0;
    bits / f64::from(s.delta_time)
}

/// The result of a list of sub-intervals: rates at L3, L2 and L1, the maximum, the sums.
pub fn summarize(subs: &[SubIntStats], v6: bool) -> UdpstResult {
    let l3 = L3_OVERHEAD + if v6 { 20 } else { 0 };
    let mut r = UdpstResult::default();
    let (mut rx, mut dv_sum, mut dv_cnt) = (0u64, 0u64, 0u64);
    let mut dv: Option<[u32; 3]> = None;
    let mut rtt: Option<[u32; 3]> = None;
    for (i, s) in subs.iter().enumerate() {
        let ip = mbps(s, l3);
        let row = UdpstSubInterval {
            index: i as u32 + 1,
            end_s: f64::from(s.accum_time) / 1000.0,
            seconds: f64::from(s.delta_time) / 1e6,
            ip_mbps: ip,
            datagrams: s.rx_datagrams,
            loss: s.loss,
            reordered: s.ooo,
            duplicated: s.dup,
            delay_var_ms: (s.delay_var_cnt > 0).then(|| {
                let avg = (u64::from(s.delay_var_sum) * 10 / u64::from(s.delay_var_cnt) + 5) / 10;
                [s.delay_var_min, avg as u32, s.delay_var_max]
            }),
            rtt_var_ms: (s.rtt_var_min != NODEL).then_some([s.rtt_var_min, s.rtt_var_max]),
        };
        if ip > r.max_ip_capacity_mbps || r.max_index == 0 {
            r.max_ip_capacity_mbps = ip;
            r.max_l2_mbps = mbps(s, l3 + L2_EXTRA);
            r.max_l1_mbps = mbps(s, l3 + L1_EXTRA);
            r.max_index = row.index;
        }
        r.mean_ip_mbps += ip;
        rx += u64::from(s.rx_datagrams);
        r.loss += u64::from(s.loss);
        r.reordered += u64::from(s.ooo);
        r.duplicated += u64::from(s.dup);
        if let Some([lo, _, hi]) = row.delay_var_ms {
            dv_sum += u64::from(s.delay_var_sum);
            dv_cnt += u64::from(s.delay_var_cnt);
            let d = dv.get_or_insert([lo, 0, hi]);
            d[0] = d[0].min(lo);
            d[2] = d[2].max(hi);
        }
        if let Some([lo, hi]) = row.rtt_var_ms {
            let d = rtt.get_or_insert([lo, 0, hi]);
            d[0] = d[0].min(lo);
            d[2] = d[2].max(hi);
        }
        r.sub_intervals.push(row);
    }
    if !subs.is_empty() {
        r.mean_ip_mbps /= subs.len() as f64;
    }
    if let Some(d) = dv.as_mut() {
        d[1] = ((dv_sum * 10 / dv_cnt.max(1) + 5) / 10) as u32;
    }
    r.delay_var_ms = dv;
    r.rtt_var_ms = rtt;
    let sent = rx + r.loss;
    r.delivered_percent = if sent > 0 {
        rx as f64 * 100.0 / sent as f64
    } else {
        0.0
    };
    r
}

#[cfg(test)]
#[path = "udpst_client_tests.rs"]
mod tests;
