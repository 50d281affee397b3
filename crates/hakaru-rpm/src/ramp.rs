//! The draft's algorithm as a sans-IO machine on virtual time. The driver calls
//! [`Ramp::on_interval`] at the end of every interval with the body bytes the load moved in it
//! and the probe times that completed in it; the machine answers how many load-generating
//! connections to add and whether the run is over. It holds the moving windows, the
//! stability stages and the result; it never reads a clock or touches a socket.
//!
//! Stages, as the draft's "Final Algorithm": first the moving average of the goodput (over
//! MAD intervals) must be stable (the standard deviation of the last MAD averages under SDT of
//! the newest); then the responsiveness over the last MAD intervals' probes must be stable the
//! same way. Every interval adds INC connections (per direction) up to MNP. The run ends when
//! both are stable or at the maximum duration, with the draft's confidence for each stage.

use std::collections::VecDeque;

use hakaru_model::{BitRate, RpmConfidence, RpmInterval, RpmProbes};

use crate::stats;

/// Connections added per interval and direction (the draft's INC); also the initial
/// number (INP).
pub const INC: u32 = 1;
/// Share of the goodput the probes may take (PTC).
pub const PROBE_SHARE: f64 = 0.05;
/// Bytes a foreign and a self probe cost together, as the draft estimates them (5000 and
/// 1000).
pub const PROBE_PAIR_BYTES: f64 = 6000.0;

/// The machine's parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Intervals in the moving averages (MAD).
    pub mad: usize,
    /// Standard deviation tolerance (SDT), a fraction.
    pub tolerance: f64,
    /// Most connections per direction (MNP).
    pub max_connections: u32,
    /// Interval length, seconds (ID).
    pub interval: f64,
    /// The run ends after this many seconds.
    pub max_duration: f64,
    /// Most probe pairs per second (MPS).
    pub max_probes: u32,
}

/// Probe times (ms) that completed in one interval.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Foreign probes' TCP handshakes.
    pub tcp: Vec<f64>,
    /// Foreign probes' TLS handshakes per round trip.
    pub tls: Vec<f64>,
    /// Foreign probes' GETs.
    pub http: Vec<f64>,
    /// Self probes.
    pub selfp: Vec<f64>,
    /// Self probes (of `selfp`) whose connection neither received a segment out of order
    /// nor retransmitted one while they waited.
    pub self_in_order: Vec<f64>,
    /// Self probes whose connection received segments out of order or retransmitted while
    /// they waited (a loss ahead of them).
    pub self_behind_loss: u64,
}

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Open this many more connections per direction and go on.
    Continue {
        /// Connections to add per direction.
        add: u32,
    },
    /// The run is over: take [`Ramp::result`].
    Finish,
}

/// The machine.
#[derive(Debug)]
pub struct Ramp {
    p: Params,
    intervals: u32,
    connections: u32,
    bytes: VecDeque<u64>,
    goodput_avgs: Vec<f64>,
    window: VecDeque<Samples>,
    rpms: Vec<f64>,
    goodput_stable: bool,
    rpm_stable: bool,
    last: Option<Window>,
    history: Vec<RpmInterval>,
}

/// The trimmed means and responsiveness of the current window.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Trimmed means and counts.
    pub probes: RpmProbes,
    /// Responsiveness, foreign and self (RPM).
    pub rpm: f64,
    /// Foreign responsiveness.
    pub foreign_rpm: Option<f64>,
    /// Self responsiveness.
    pub self_rpm: Option<f64>,
}

/// What the machine concluded.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The last window's figures, `None` when no probe completed.
    pub window: Option<Window>,
    /// Moving average of the goodput at the end, bit/s.
    pub goodput: f64,
    /// Goodput stage's confidence.
    pub goodput_confidence: RpmConfidence,
    /// Responsiveness stage's confidence.
    pub rpm_confidence: RpmConfidence,
    /// Connections per direction at the end.
    pub connections: u32,
    /// Every interval.
    pub intervals: Vec<RpmInterval>,
}

impl Ramp {
    /// A machine; the driver opens [`Ramp::connections`] connections per direction first.
    pub fn new(p: Params) -> Ramp {
        Ramp {
            connections: INC.min(p.max_connections),
            p,
            intervals: 0,
            bytes: VecDeque::new(),
            goodput_avgs: Vec::new(),
            window: VecDeque::new(),
            rpms: Vec::new(),
            goodput_stable: false,
            rpm_stable: false,
            last: None,
            history: Vec::new(),
        }
    }

    /// Connections per direction the driver should have open.
    pub fn connections(&self) -> u32 {
        self.connections
    }

    /// Probe pairs per second for the next interval: the draft's MPS, lowered so the probes'
    /// bytes stay within [`PROBE_SHARE`] of the goodput measured so far (at least one a
    /// second; before any goodput, a tenth of MPS).
    pub fn probe_rate(&self) -> f64 {
        let max = f64::from(self.p.max_probes);
        match self
            .goodput_avgs
            .last()
            .or(self.history.last().map(|h| &h.bits_per_second.0))
        {
            None => (max / 10.0).max(1.0),
            Some(bps) => (bps / 8.0 * PROBE_SHARE / PROBE_PAIR_BYTES).clamp(1.0, max),
        }
    }

    /// One interval ended: `bytes` moved by the load (all directions), `samples` the probes
    /// that completed in it.
    pub fn on_interval(&mut self, bytes: u64, samples: Samples) -> Step {
        self.intervals += 1;
        let mad = self.p.mad.max(1);
        self.bytes.push_back(bytes);
        if self.bytes.len() > mad {
            self.bytes.pop_front();
        }
        self.window.push_back(samples);
        if self.window.len() > mad {
            self.window.pop_front();
        }
        let avg = if self.bytes.len() == mad {
            let total: u64 = self.bytes.iter().sum();
            let avg = total as f64 * 8.0 / (mad as f64 * self.p.interval);
            self.goodput_avgs.push(avg);
            Some(avg)
        } else {
            None
        };
        let window = self.compute_window();
        if let (Some(a), false) = (avg, self.goodput_stable) {
            self.goodput_stable = stats::stable(&self.goodput_avgs, mad, self.p.tolerance, a);
        } else if self.goodput_stable {
            if let Some(w) = &window {
                self.rpms.push(w.rpm);
                self.rpm_stable = stats::stable(&self.rpms, mad, self.p.tolerance, w.rpm);
            }
        }
        self.history.push(RpmInterval {
            end: f64::from(self.intervals) * self.p.interval,
            connections: self.connections,
            bits_per_second: BitRate(bytes as f64 * 8.0 / self.p.interval),
            goodput_average: BitRate(avg.unwrap_or(0.0)),
            rpm: window.as_ref().map(|w| w.rpm),
            foreign_ms: window
                .as_ref()
                .and_then(|w| w.foreign_rpm)
                .map(|r| 60_000.0 / r),
            self_ms: window
                .as_ref()
                .and_then(|w| w.self_rpm)
                .map(|r| 60_000.0 / r),
        });
        if window.is_some() {
            self.last = window;
        }
        let elapsed = f64::from(self.intervals) * self.p.interval;
        if self.rpm_stable || elapsed + 1e-9 >= self.p.max_duration {
            return Step::Finish;
        }
        let add = INC.min(self.p.max_connections - self.connections);
        self.connections += add;
        Step::Continue { add }
    }

    /// The trimmed means over the last MAD intervals' probes.
    fn compute_window(&self) -> Option<Window> {
        let all = |f: fn(&Samples) -> &Vec<f64>| -> Vec<f64> {
            self.window
                .iter()
                .flat_map(|s| f(s).iter().copied())
                .collect()
        };
        let (tcp, tls, http, selfp) = (
            all(|s| &s.tcp),
            all(|s| &s.tls),
            all(|s| &s.http),
            all(|s| &s.selfp),
        );
        let in_order = all(|s| &s.self_in_order);
        let behind: u64 = self.window.iter().map(|s| s.self_behind_loss).sum();
        let probes = RpmProbes {
            tcp_ms: stats::trimmed_mean(&tcp),
            tls_ms: stats::trimmed_mean(&tls),
            http_ms: stats::trimmed_mean(&http),
            self_ms: stats::trimmed_mean(&selfp),
            foreign: http.len() as u64,
            selfp: selfp.len() as u64,
            self_in_order_ms: stats::trimmed_mean(&in_order),
            self_behind_loss: (behind > 0 || !in_order.is_empty()).then_some(behind),
        };
        let (rpm, foreign_rpm, self_rpm) =
            stats::responsiveness(probes.tcp_ms, probes.tls_ms, probes.http_ms, probes.self_ms)?;
        Some(Window {
            probes,
            rpm,
            foreign_rpm,
            self_rpm,
        })
    }

    /// The result so far (the driver takes it after [`Step::Finish`], or when stopped).
    pub fn result(&self) -> Outcome {
        let mad = self.p.mad.max(1);
        let conf = |stable: bool, n: usize| {
            if stable {
                RpmConfidence::High
            } else if n >= mad {
                RpmConfidence::Medium
            } else {
                RpmConfidence::Low
            }
        };
        Outcome {
            window: self.last.clone(),
            goodput: self.goodput_avgs.last().copied().unwrap_or_else(|| {
                let total: u64 = self.bytes.iter().sum();
                total as f64 * 8.0 / (self.bytes.len().max(1) as f64 * self.p.interval)
            }),
            goodput_confidence: conf(self.goodput_stable, self.goodput_avgs.len()),
            rpm_confidence: conf(self.rpm_stable, self.rpms.len()),
            connections: self.connections,
            intervals: self.history.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            mad: 4,
            tolerance: 0.05,
            max_connections: 16,
            interval: 1.0,
            max_duration: 30.0,
            max_probes: 100,
        }
    }

    fn probes(foreign: f64, own: f64) -> Samples {
        Samples {
            tcp: vec![foreign; 10],
            tls: vec![foreign; 10],
            http: vec![foreign; 10],
            selfp: vec![own; 10],
            self_in_order: vec![own; 10],
            self_behind_loss: 0,
        }
    }

    /// A path of `cap` bytes a second that each connection fills to `per_conn`.
    fn goodput(conns: u32, per_conn: u64, cap: u64) -> u64 {
        (u64::from(conns) * per_conn).min(cap)
    }

    #[test]
    fn ramps_until_goodput_then_responsiveness_are_stable() {
        let mut r = Ramp::new(params());
        assert_eq!(r.connections(), 1);
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 30, "never finished");
            let b = goodput(r.connections(), 3_000_000, 10_000_000);
            match r.on_interval(b, probes(50.0, 100.0)) {
                Step::Continue { add } => assert!(add <= 1),
                Step::Finish => break,
            }
        }
        let o = r.result();
        assert_eq!(o.goodput_confidence, RpmConfidence::High);
        assert_eq!(o.rpm_confidence, RpmConfidence::High);
        // Foreign 50 ms -> 1200 RPM, self 100 ms -> 600: 900.
        let w = o.window.unwrap();
        assert!((w.rpm - 900.0).abs() < 1e-9, "{}", w.rpm);
        assert!((o.goodput - 80e6).abs() < 1.0, "{}", o.goodput);
        // Capacity reached with 4 connections (12 MB/s > 10): the goodput average is flat
        // from interval 4 + MAD - 1 on, stable MAD averages later, then MAD RPM values.
        assert!(steps >= 4 + 3 + 3 + 3, "finished after {steps}");
        assert_eq!(o.intervals.len(), steps);
        assert!(o.connections > 4);
    }

    #[test]
    fn self_probes_behind_a_loss_are_counted_apart_and_the_rpm_still_takes_them() {
        let mut r = Ramp::new(params());
        // Each interval: 8 self probes at 100 ms that waited for nothing, 2 at 300 ms that
        // waited behind a retransmission.
        let mut s = probes(50.0, 100.0);
        s.selfp = [vec![100.0; 8], vec![300.0; 2]].concat();
        s.self_in_order = vec![100.0; 8];
        s.self_behind_loss = 2;
        for _ in 0..4 {
            let _ = r.on_interval(1_000_000, s.clone());
        }
        let p = r.result().window.expect("a window").probes;
        assert_eq!((p.selfp, p.self_behind_loss), (40, Some(8)));
        assert_eq!(p.self_in_order_ms, Some(100.0));
        // The draft's figure keeps every self probe: its trimmed mean is above the in-order
        // ones'.
        assert!(p.self_ms.expect("self") > 100.0, "{p:?}");
    }

    #[test]
    fn connections_stop_at_the_maximum_and_time_ends_an_unstable_run() {
        let mut p = params();
        p.max_connections = 3;
        p.max_duration = 10.0;
        let mut r = Ramp::new(p);
        let mut n = 0;
        // Goodput that never settles: doubling every interval.
        while let Step::Continue { .. } = r.on_interval(1000 << n, probes(10.0, 10.0)) {
            n += 1;
        }
        assert_eq!(n + 1, 10);
        let o = r.result();
        assert_eq!(o.connections, 3);
        assert_eq!(o.goodput_confidence, RpmConfidence::Medium);
        assert_eq!(o.rpm_confidence, RpmConfidence::Low);
        // The responsiveness is still reported from the last window.
        assert!((o.window.unwrap().rpm - 6000.0).abs() < 1e-9);
    }

    #[test]
    fn a_short_run_is_low_confidence_and_responsiveness_tracks_the_window() {
        let mut p = params();
        p.max_duration = 3.0;
        let mut r = Ramp::new(p);
        r.on_interval(1000, probes(10.0, 10.0));
        r.on_interval(1000, Samples::default());
        assert_eq!(r.on_interval(1000, probes(30.0, 30.0)), Step::Finish);
        let o = r.result();
        assert_eq!(o.goodput_confidence, RpmConfidence::Low);
        // Both intervals' probes are in the window: trimmed means of 10 x 10 ms and
        // 10 x 30 ms (the slowest 5 %, one 30, dropped).
        let w = o.window.unwrap();
        let tm = (10.0 * 10.0 + 9.0 * 30.0) / 19.0;
        assert!((w.probes.self_ms.unwrap() - tm).abs() < 1e-9);
        assert_eq!(w.probes.selfp, 20);
        assert_eq!(o.intervals[1].rpm, Some(6000.0));
    }

    #[test]
    fn probes_take_at_most_their_share_of_the_goodput() {
        let mut r = Ramp::new(params());
        assert_eq!(r.probe_rate(), 10.0);
        // 2.5 MB/s (20 Mbit/s): 5 % is 125 kB/s, about 20.8 pairs of 6000 bytes.
        r.on_interval(2_500_000, Samples::default());
        assert!((r.probe_rate() - 125_000.0 / 6000.0).abs() < 1e-6);
        let mut fast = Ramp::new(params());
        fast.on_interval(10_000_000_000, Samples::default());
        assert_eq!(fast.probe_rate(), 100.0);
        let mut slow = Ramp::new(params());
        slow.on_interval(1000, Samples::default());
        assert_eq!(slow.probe_rate(), 1.0);
    }
}
