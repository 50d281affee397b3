//! Capacity search (`udp --find-max`, `pps --find-max`): the highest send rate whose loss
//! stays within a target, found by a ramp and a binary search over short trials.
//!
//! The search itself is pure ([`Search`]): it proposes the next rate from the trials so far,
//! so its bounds and its narrowing are unit-tested without a network.

use serde::{Deserialize, Serialize};

use crate::FlowDir;

/// How many trials a search may run at most: the ramp (doubling from the start rate to the
/// ceiling: at most [`MAX_RAMP`]), the floor (at most [`MAX_FLOOR`]), the bisection (until the
/// bracket is narrower than the precision: at most [`MAX_BISECT`]) and the confirmations of
/// the edge (at most [`MAX_CONFIRM`]).
pub const MAX_TRIALS: usize = MAX_RAMP + MAX_FLOOR + MAX_BISECT + MAX_CONFIRM;
/// Doubling steps: from the start rate, 2^20 times it at most.
pub const MAX_RAMP: usize = 21;
/// Steps down by 10x when the start rate already misses the target.
pub const MAX_FLOOR: usize = 3;
/// Bisection steps.
pub const MAX_BISECT: usize = 16;
/// Repeats of the best rate (a pass near the edge must pass twice).
pub const MAX_CONFIRM: usize = 4;

/// Which stage of the search a trial belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Doubling the rate until the first miss.
    Ramp,
    /// Dividing by ten when the start rate already missed.
    Floor,
    /// Halving the bracket between the best pass and the first miss.
    Search,
    /// Repeating the best rate to confirm it.
    Confirm,
}

/// One trial of a search.
///
/// Every rate of a trial is per direction: `asked`, `sent_*` and `received_*` are all flows of
/// one direction together. With `--bidir` (two judged directions) the sent and received
/// figures are the mean of the two directions, so that they compare with `asked`; loss and
/// jitter are the worst direction's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trial {
    /// Trial number, from 1.
    pub index: u32,
    /// Stage of the search.
    pub phase: Phase,
    /// Rate asked of each flow (payload bits per second for udp, datagrams per second for pps).
    pub asked_per_flow: f64,
    /// Rate asked of all flows of a direction together.
    pub asked: f64,
    /// Payload bits per second sent, all flows of a direction together (with --bidir, the
    /// mean of the two directions).
    pub sent_bps: f64,
    /// Datagrams per second sent, per direction like `sent_bps`.
    pub sent_pps: f64,
    /// Payload bits per second received (the headline of the trial), per direction like
    /// `sent_bps`.
    pub received_bps: f64,
    /// Datagrams per second received, per direction like `sent_bps`.
    pub received_pps: f64,
    /// Loss, percent of the datagrams (the worst direction with --bidir).
    pub loss_percent: f64,
    /// Jitter, milliseconds (the worst direction).
    pub jitter_ms: Option<f64>,
    /// Loss within the target.
    pub met: bool,
    /// The senders sent less than 99 % of the asked rate: the sender, not the path, was the
    /// limit of this trial.
    pub sender_limited: bool,
    /// Busy CPU share of the sending end's machine, percent.
    pub sender_cpu_percent: Option<f64>,
    /// The bracket after this trial: highest rate that met the target so far (per flow).
    pub best_so_far: Option<f64>,
    /// ...and lowest rate that missed it.
    pub miss_so_far: Option<f64>,
    /// The trial's test failed: its error (the search stops).
    pub error: Option<String>,
}

/// The result of `--find-max`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FindMaxResult {
    /// [`crate::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `"find_max"`.
    pub test: String,
    /// `"udp"` (rates in payload bits per second) or `"pps"` (datagrams per second).
    pub kind: String,
    /// Unit of the rates: `"bit/s"` or `"datagrams/s"`.
    pub unit: String,
    /// The server.
    pub server: String,
    /// Flows per direction.
    pub flows: u32,
    /// Directions judged.
    pub directions: Vec<FlowDir>,
    /// UDP payload bytes per datagram.
    pub length: u64,
    /// Loss target, percent.
    pub loss_target_percent: f64,
    /// Precision: the search stops when the bracket is narrower than this share of the best.
    pub precision_percent: f64,
    /// Seconds measured per trial (after its warm-up).
    pub trial_seconds: f64,
    /// Warm-up per trial, seconds, not counted.
    pub warmup_seconds: f64,
    /// Highest rate per flow that met the target (confirmed), if any.
    pub best_per_flow: Option<f64>,
    /// ...all flows of a direction together.
    pub best: Option<f64>,
    /// The trial that gave it.
    pub best_trial: Option<u32>,
    /// Lowest rate per flow that missed the target, if any.
    pub first_miss_per_flow: Option<f64>,
    /// The trial that missed there.
    pub first_miss_trial: Option<u32>,
    /// Why the search ended, in words.
    pub outcome: String,
    /// True when the sender could not reach the asked rate (the limit is the sender).
    pub sender_limited: bool,
    /// Every trial in order.
    pub trials: Vec<Trial>,
    /// The search was interrupted.
    pub interrupted: bool,
}

/// One judged direction's figures in a trial: all flows of that direction together.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DirFigures {
    /// Payload bits per second sent.
    pub sent_bps: f64,
    /// Datagrams per second sent.
    pub sent_pps: f64,
    /// Payload bits per second received.
    pub received_bps: f64,
    /// Datagrams per second received.
    pub received_pps: f64,
    /// Loss, percent.
    pub loss_percent: f64,
    /// Jitter, milliseconds.
    pub jitter_ms: Option<f64>,
}

impl Trial {
    /// A trial of `rate` per flow over `flows` flows, with no figures yet (not met).
    pub fn new(index: u32, phase: Phase, rate: f64, flows: u32) -> Trial {
        Trial {
            index,
            phase,
            asked_per_flow: rate,
            asked: rate * f64::from(flows),
            sent_bps: 0.0,
            sent_pps: 0.0,
            received_bps: 0.0,
            received_pps: 0.0,
            loss_percent: 0.0,
            jitter_ms: None,
            met: false,
            sender_limited: false,
            sender_cpu_percent: None,
            best_so_far: None,
            miss_so_far: None,
            error: None,
        }
    }

    /// Sets the trial's figures from its judged directions: rates per direction (the mean over
    /// the directions, as `asked` is per direction), loss and jitter the worst direction's.
    /// `met` follows from `loss_target`.
    pub fn set_directions(&mut self, dirs: &[DirFigures], loss_target: f64) {
        let n = dirs.len().max(1) as f64;
        let mean = |f: fn(&DirFigures) -> f64| dirs.iter().map(f).sum::<f64>() / n;
        self.sent_bps = mean(|d| d.sent_bps);
        self.sent_pps = mean(|d| d.sent_pps);
        self.received_bps = mean(|d| d.received_bps);
        self.received_pps = mean(|d| d.received_pps);
        self.loss_percent = dirs.iter().map(|d| d.loss_percent).fold(0.0, f64::max);
        self.jitter_ms = dirs.iter().filter_map(|d| d.jitter_ms).reduce(f64::max);
        self.met = self.loss_percent <= loss_target;
    }
}

/// Datagrams a trial must carry so that a loss target of `loss_percent` is measurable: ten
/// losses' worth at the target (2000 for 0.5 %), at least 1000, at most 100 000.
pub fn min_datagrams(loss_percent: f64) -> f64 {
    if loss_percent <= 0.0 {
        return 1000.0;
    }
    (10.0 / (loss_percent / 100.0)).clamp(1000.0, 100_000.0)
}

/// What a finished trial tells the search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// Loss within the target.
    pub met: bool,
    /// The sender fell short of the asked rate.
    pub sender_limited: bool,
}

/// The search state: proposes rates, takes outcomes.
#[derive(Debug, Clone)]
pub struct Search {
    start: f64,
    floor_rate: f64,
    ceiling: f64,
    precision: f64,
    phase: Phase,
    best: Option<f64>,
    miss: Option<f64>,
    /// Every rate that met the target, in order (a failed confirmation falls back on the
    /// highest of them below it, so the bracket keeps narrowing).
    passes: Vec<f64>,
    confirmed: Option<f64>,
    trials: usize,
    ramp: usize,
    floor: usize,
    bisect: usize,
    confirm: usize,
    done: Option<String>,
    sender_limited: bool,
}

impl Search {
    /// A search from `start` (per flow) that never asks more than `ceiling`, ending when the
    /// bracket is narrower than `precision` (a fraction) of the best rate.
    pub fn new(start: f64, ceiling: f64, precision: f64) -> Search {
        Search {
            start,
            floor_rate: 0.0,
            ceiling: ceiling.max(start),
            precision: precision.max(1e-4),
            phase: Phase::Ramp,
            best: None,
            miss: None,
            passes: Vec::new(),
            confirmed: None,
            trials: 0,
            ramp: 0,
            floor: 0,
            bisect: 0,
            confirm: 0,
            done: None,
            sender_limited: false,
        }
    }

    /// The lowest rate the search may try: below it a trial carries too few datagrams to
    /// measure the loss target (see [`min_datagrams`]). The ramp starts at the floor when the
    /// start rate is below it.
    pub fn with_floor(mut self, floor: f64) -> Search {
        self.floor_rate = floor.max(0.0);
        self.ceiling = self.ceiling.max(self.floor_rate);
        self
    }

    /// The next trial (phase, rate per flow), or `None` when the search is over.
    pub fn next(&self) -> Option<(Phase, f64)> {
        if self.done.is_some() || self.trials >= MAX_TRIALS {
            return None;
        }
        let rate = match self.phase {
            Phase::Ramp => match self.best {
                None => self.start.max(self.floor_rate),
                Some(b) => (b * 2.0).min(self.ceiling),
            },
            Phase::Floor => (self.miss.unwrap_or(self.start) / 10.0).max(self.floor_rate),
            Phase::Search => {
                let (lo, hi) = (self.best?, self.miss?);
                (lo + hi) / 2.0
            }
            Phase::Confirm => self.best?,
        };
        Some((self.phase, rate))
    }

    /// Records the outcome of the trial [`Search::next`] proposed. A trial whose sender fell
    /// short of the asked rate ends the search: the path was not offered that rate, so its
    /// loss says nothing about the path; the best clean pass so far stands (unconfirmed).
    pub fn record(&mut self, rate: f64, o: Outcome) {
        self.trials += 1;
        if o.sender_limited {
            self.sender_limited = true;
            self.confirmed = self.best;
            self.done = Some(match self.best {
                Some(_) => "the sender could not reach the asked rate: the limit is the sender, not the path (the best rate below it met the target)".into(),
                None => "the sender could not reach even the first rate asked: the limit is the sender, not the path".into(),
            });
            return;
        }
        if o.met && self.phase != Phase::Confirm {
            self.passes.push(rate);
        }
        match self.phase {
            Phase::Ramp => self.after_ramp(rate, o.met),
            Phase::Floor => self.after_floor(rate, o.met),
            Phase::Search => self.after_search(rate, o.met),
            Phase::Confirm => self.after_confirm(rate, o.met),
        }
        self.maybe_done();
    }

    /// A ramp trial: up by steps while the rate meets the target; the first miss starts the
    /// search (or, with no pass yet, the way down to the floor).
    fn after_ramp(&mut self, rate: f64, met: bool) {
        self.ramp += 1;
        if !met && self.best.is_none() && rate <= self.floor_rate * 1.0001 {
            self.miss = Some(rate);
            self.done = Some(
                "no rate met the target: even the lowest rate tried missed it (lower rates carry too few datagrams per trial to measure the target)".into(),
            );
            return;
        }
        if met {
            self.best = Some(rate);
            if rate >= self.ceiling || self.ramp >= MAX_RAMP {
                self.phase = Phase::Confirm;
            }
        } else {
            self.miss = Some(rate);
            self.phase = if self.best.is_some() {
                Phase::Search
            } else {
                Phase::Floor
            };
        }
    }

    /// A trial on the way down after a first miss with no pass yet.
    fn after_floor(&mut self, rate: f64, met: bool) {
        self.floor += 1;
        if met {
            self.best = Some(rate);
            self.phase = Phase::Search;
        } else {
            self.miss = Some(rate);
            if self.floor >= MAX_FLOOR || rate <= self.floor_rate * 1.0001 {
                self.done = Some(
                    "no rate met the target: even the lowest rate tried missed it (lower rates carry too few datagrams per trial to measure the target)".into(),
                );
            }
        }
    }

    /// A bisection trial between the best pass and the lowest miss.
    fn after_search(&mut self, rate: f64, met: bool) {
        self.bisect += 1;
        if met {
            self.best = Some(rate);
        } else {
            self.miss = Some(rate);
        }
        if self.narrow() || self.bisect >= MAX_BISECT {
            self.phase = Phase::Confirm;
        }
    }

    /// A repeat of the best pass: it holds (found) or becomes the miss and the search goes on
    /// below it.
    fn after_confirm(&mut self, rate: f64, met: bool) {
        self.confirm += 1;
        if !met && rate <= self.floor_rate * 1.0001 {
            self.miss = Some(rate);
            self.best = None;
            self.done = Some(
                "no rate met the target twice: the lowest measurable rate passed and then missed"
                    .into(),
            );
            return;
        }
        if met {
            self.confirmed = self.best;
        } else {
            // The edge did not hold: it becomes the miss, and the search goes on below,
            // from the highest pass below it (the bracket narrows from above; it never
            // widens to a tenth of the rate while a pass below is known).
            self.miss = Some(rate);
            self.passes.retain(|&p| p < rate);
            self.best = self.passes.iter().copied().reduce(f64::max);
            if self.best.is_some() {
                self.phase = if self.narrow() {
                    Phase::Confirm
                } else {
                    Phase::Search
                };
            } else {
                self.phase = Phase::Floor;
                self.floor = 0;
            }
            if self.confirm >= MAX_CONFIRM {
                self.done = Some(
                    "the rate at the edge passed and missed by turns; no rate held twice".into(),
                );
            }
        }
    }

    fn narrow(&self) -> bool {
        match (self.best, self.miss) {
            (Some(lo), Some(hi)) => (hi - lo) <= self.precision * lo,
            _ => false,
        }
    }

    fn maybe_done(&mut self) {
        if self.done.is_some() {
            return;
        }
        if self.confirmed.is_some() {
            self.done = Some(if self.miss.is_none() {
                "the highest rate tried met the target (the ceiling)".into()
            } else {
                "found: the best rate and the first miss are within the precision".into()
            });
        } else if self.trials >= MAX_TRIALS {
            self.done = Some(format!("stopped after {MAX_TRIALS} trials"));
        }
    }

    /// Highest rate per flow that met the target and held on a repeat (or, when the sender
    /// was the limit, the best clean pass before it).
    pub fn confirmed_best(&self) -> Option<f64> {
        self.confirmed
    }

    /// Lowest rate per flow that missed.
    pub fn miss(&self) -> Option<f64> {
        self.miss
    }

    /// Current bracket: (best pass so far, lowest miss so far).
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        (self.best, self.miss)
    }

    /// Why the search ended (empty while it runs).
    pub fn outcome(&self) -> &str {
        self.done.as_deref().unwrap_or("")
    }

    /// The sender was the limit.
    pub fn sender_limited(&self) -> bool {
        self.sender_limited
    }

    /// Stops the search with a reason (a failed trial, an interrupt).
    pub fn stop(&mut self, why: String) {
        self.done = Some(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a path that carries up to `cap` and a sender that reaches `tx`.
    fn simulate(cap: f64, tx: f64, precision: f64) -> (Search, Vec<(Phase, f64)>) {
        let mut s = Search::new(10.0, 1e6, precision);
        let mut seen = Vec::new();
        while let Some((phase, rate)) = s.next() {
            seen.push((phase, rate));
            let sent = rate.min(tx);
            s.record(
                rate,
                Outcome {
                    met: sent <= cap,
                    sender_limited: sent < rate * 0.99,
                },
            );
        }
        (s, seen)
    }

    #[test]
    fn finds_the_edge_within_the_precision_and_the_bound() {
        for cap in [15.0, 80.0, 300.0, 777.7, 12_345.0] {
            let (s, seen) = simulate(cap, f64::INFINITY, 0.01);
            let best = s.confirmed_best().expect("a best rate");
            assert!(best <= cap && best >= cap * 0.99, "cap {cap}: best {best}");
            assert!(s.miss().unwrap() > cap);
            assert!(seen.len() <= MAX_TRIALS, "{}", seen.len());
            // Bisection narrows monotonically.
            let searched: Vec<f64> = seen
                .iter()
                .filter(|(p, _)| *p == Phase::Search)
                .map(|t| t.1)
                .collect();
            assert!(!searched.is_empty());
        }
    }

    #[test]
    fn a_path_that_loses_at_every_rate_has_no_best() {
        let (s, seen) = simulate(0.001, f64::INFINITY, 0.01);
        assert_eq!(s.confirmed_best(), None);
        assert!(
            s.outcome().contains("no rate met the target"),
            "{}",
            s.outcome()
        );
        assert_eq!(seen.len(), 1 + MAX_FLOOR);
        // With a floor the search stops there instead of going lower.
        let mut s = Search::new(10.0, 1e6, 0.01).with_floor(4.0);
        let mut rates = Vec::new();
        while let Some((_, r)) = s.next() {
            rates.push(r);
            s.record(
                r,
                Outcome {
                    met: false,
                    sender_limited: false,
                },
            );
        }
        assert_eq!(rates, vec![10.0, 4.0]);
        assert!(s.outcome().contains("no rate met the target"));
        assert_eq!(min_datagrams(0.5), 2000.0);
        assert_eq!(min_datagrams(0.001), 100_000.0);
    }

    #[test]
    fn a_slow_sender_ends_the_search_and_says_so() {
        let (s, seen) = simulate(1e9, 100.0, 0.01);
        assert!(s.sender_limited());
        assert!(
            s.outcome().contains("the limit is the sender"),
            "{}",
            s.outcome()
        );
        // 10, 20, 40, 80 passed; 160 could not be sent: the search stops there.
        assert_eq!(s.confirmed_best(), Some(80.0));
        assert_eq!(seen.len(), 5);
    }

    /// Issue 16a: with a floor above the start rate, the ramp starts at the floor, and no
    /// trial asks less than it.
    #[test]
    fn the_ramp_starts_at_the_floor() {
        let mut s = Search::new(10.0, 1e6, 0.01).with_floor(170.0);
        assert_eq!(s.next(), Some((Phase::Ramp, 170.0)));
        let mut rates = Vec::new();
        while let Some((_, r)) = s.next() {
            rates.push(r);
            s.record(
                r,
                Outcome {
                    met: r <= 1000.0,
                    sender_limited: false,
                },
            );
        }
        assert!(rates.iter().all(|&r| r >= 170.0), "{rates:?}");
        assert!(s.confirmed_best().unwrap() >= 990.0);
        // A path that loses at the floor itself: one trial, no lower rate tried.
        let mut s = Search::new(10.0, 1e6, 0.01).with_floor(170.0);
        let (_, r) = s.next().unwrap();
        s.record(
            r,
            Outcome {
                met: false,
                sender_limited: false,
            },
        );
        assert_eq!(s.next(), None);
        assert!(s.outcome().contains("no rate met the target"));
        // A floor above the ceiling: the floor is still the first (and only) rate.
        let s = Search::new(10.0, 100.0, 0.01).with_floor(500.0);
        assert_eq!(s.next(), Some((Phase::Ramp, 500.0)));
    }

    /// Issue 16d: a path whose capacity drops during the search (the best rate passes once and
    /// misses on its repeat). After the ramp every trial lies inside the bracket known so far:
    /// at or below the lowest miss, at or above the highest pass below that miss.
    #[test]
    fn a_failed_confirmation_keeps_narrowing() {
        for (cap0, cap1, drop_after) in [(130.0, 100.0, 8), (130.0, 50.0, 9), (777.0, 15.0, 10)] {
            let mut s = Search::new(10.0, 1e6, 0.01);
            let mut hist: Vec<(Phase, f64, bool)> = Vec::new();
            let mut confirm_failed = false;
            while let Some((phase, rate)) = s.next() {
                if phase != Phase::Ramp {
                    let hi = hist
                        .iter()
                        .filter(|t| !t.2)
                        .map(|t| t.1)
                        .reduce(f64::min)
                        .unwrap_or(f64::INFINITY);
                    let lo = hist
                        .iter()
                        .filter(|t| t.2 && t.1 < hi)
                        .map(|t| t.1)
                        .reduce(f64::max)
                        .unwrap_or(0.0);
                    assert!(
                        rate >= lo && rate <= hi,
                        "cap {cap0}->{cap1}: trial {} at {rate} outside [{lo}, {hi}]: {hist:?}",
                        hist.len() + 1
                    );
                }
                let cap = if hist.len() < drop_after { cap0 } else { cap1 };
                let met = rate <= cap;
                confirm_failed |= phase == Phase::Confirm && !met;
                hist.push((phase, rate, met));
                s.record(
                    rate,
                    Outcome {
                        met,
                        sender_limited: false,
                    },
                );
            }
            assert!(confirm_failed, "{hist:?}");
            assert!(hist.len() <= MAX_TRIALS);
            // A rate the search settles on holds on the path as it now is.
            if let Some(best) = s.confirmed_best() {
                assert!(best <= cap1, "{best}: {hist:?}");
            }
            // The bracket's top never rose: the last miss is the lowest.
            assert!(s.miss().unwrap() <= cap0, "{hist:?}");
        }
    }

    /// Issue 16c: with two directions, asked, sent and received are all per direction.
    #[test]
    fn bidir_trial_figures_are_per_direction() {
        let mut t = Trial::new(1, Phase::Ramp, 10_000.0, 4);
        let up = DirFigures {
            sent_bps: 40e6,
            sent_pps: 39_900.0,
            received_bps: 39e6,
            received_pps: 39_800.0,
            loss_percent: 0.25,
            jitter_ms: Some(0.1),
        };
        let down = DirFigures {
            sent_pps: 39_842.0,
            received_pps: 39_842.0,
            loss_percent: 0.0,
            jitter_ms: Some(0.3),
            ..up
        };
        t.set_directions(&[up, down], 0.5);
        assert_eq!(t.sent_pps, (39_900.0 + 39_842.0) / 2.0);
        assert!(
            t.sent_pps <= t.asked && t.received_pps <= t.sent_pps,
            "{t:?}"
        );
        assert_eq!(t.received_bps, 39e6);
        assert_eq!(
            (t.loss_percent, t.jitter_ms, t.met),
            (0.25, Some(0.3), true)
        );
        // One direction: its own figures.
        t.set_directions(&[up], 0.1);
        assert_eq!((t.sent_pps, t.met), (39_900.0, false));
    }
}
