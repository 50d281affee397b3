//! `udp --find-max` and `pps --find-max`: runs the trials a [`Search`] proposes, each one a
//! whole test of its own (own warm-up, own flows), and collects them into a
//! [`FindMaxResult`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hakaru_engine::Observer;
use hakaru_model::capacity::{DirFigures, FindMaxResult, Outcome, Search, Trial};
use hakaru_model::{
    Amount, Direction, Dur, FlowDir, RunResult, TestSpec, UdpMode, UdpRate, UdpSpec, SCHEMA_VERSION,
};

use crate::{run_test, ClientOptions};

/// The search's parameters.
#[derive(Debug, Clone)]
pub struct FindMax {
    /// Loss target, percent (0.1 = 0.1 %).
    pub loss_percent: f64,
    /// Stop when the bracket is narrower than this share of the best rate (0.01 = 1 %).
    pub precision: f64,
    /// Measured time per trial.
    pub trial: Duration,
    /// Warm-up per trial, not counted.
    pub warmup: Duration,
    /// First rate per flow (bit/s for udp, datagrams/s for pps).
    pub start: f64,
    /// Highest rate per flow the search may ask.
    pub ceiling: f64,
}

struct Quiet;
impl Observer for Quiet {}

/// The spec of one trial at `rate` per flow.
fn trial_spec(template: &UdpSpec, fm: &FindMax, rate: f64) -> TestSpec {
    let mut u = template.clone();
    u.rate = match u.mode {
        UdpMode::Pps => UdpRate::Packets(rate),
        UdpMode::Bandwidth => UdpRate::Bits(hakaru_model::BitRate(rate)),
    };
    u.amount = Amount::Time(Dur(fm.trial));
    u.omit = Dur(fm.warmup);
    u.interval = Dur::default();
    TestSpec::Udp(u)
}

/// The trial's figures from its result: rates per direction like `asked` (the mean of the
/// two with --bidir), the worst loss and jitter.
fn trial_of(mut t: Trial, r: &RunResult, loss_target: f64) -> Trial {
    let mut dirs = Vec::new();
    for d in &r.totals {
        let Some(u) = d.udp else { continue };
        dirs.push(DirFigures {
            sent_bps: d.sender.bits_per_second.0,
            sent_pps: u.sent_pps,
            received_bps: d.receiver.bits_per_second.0,
            received_pps: u.received_pps,
            loss_percent: u.lost_percent,
            jitter_ms: u.jitter_ms,
        });
        if d.rate_target.as_ref().is_some_and(|rt| rt.missed) {
            t.sender_limited = true;
            let sender = match d.dir {
                FlowDir::Up => &r.client,
                FlowDir::Down => &r.server_end,
            };
            t.sender_cpu_percent = sender.cpu.as_ref().map(|c| c.busy_pct);
        }
    }
    t.set_directions(&dirs, loss_target);
    t
}

/// Runs the search against the server in `opts`; `u` is the udp or pps test to repeat
/// (flows, direction and length as asked; its rate and time are the search's). `on_trial`
/// sees each trial as it ends. A trial that fails ends the search, with its error recorded.
pub fn find_max(
    opts: &ClientOptions,
    u: &UdpSpec,
    fm: &FindMax,
    on_trial: &mut dyn FnMut(&Trial),
    stop: Arc<AtomicBool>,
) -> FindMaxResult {
    let mut out = empty_result(u, fm);
    // Below this rate a trial carries too few datagrams to measure the loss target.
    let per_flow_pps = hakaru_model::capacity::min_datagrams(fm.loss_percent)
        / (fm.trial.as_secs_f64().max(1e-3) * f64::from(u.flows.max(1)));
    let floor = match u.mode {
        UdpMode::Pps => per_flow_pps,
        UdpMode::Bandwidth => per_flow_pps * u.length.0 as f64 * 8.0,
    };
    let mut search = Search::new(fm.start, fm.ceiling, fm.precision).with_floor(floor);
    let mut index = 0u32;
    while let Some((phase, rate)) = search.next() {
        if stop.load(Ordering::Acquire) {
            out.interrupted = true;
            search.stop("interrupted".into());
            break;
        }
        index += 1;
        let mut o = opts.clone();
        o.spec = trial_spec(u, fm, rate);
        let trial = match run_test(&o, &mut Quiet, Arc::clone(&stop)) {
            Ok(r) if r.interrupted => {
                out.interrupted = true;
                search.stop("interrupted".into());
                break;
            }
            Ok(r) => {
                out.server = r.server.clone();
                let t = trial_of(Trial::new(index, phase, rate, u.flows), &r, fm.loss_percent);
                search.record(
                    rate,
                    Outcome {
                        met: t.met,
                        sender_limited: t.sender_limited,
                    },
                );
                t
            }
            Err(e) => {
                let mut t = Trial::new(index, phase, rate, u.flows);
                t.error = Some(e.to_string());
                search.stop(format!("trial {index} failed: {e}"));
                t
            }
        };
        let mut t = trial;
        (t.best_so_far, t.miss_so_far) = search.bracket();
        on_trial(&t);
        out.trials.push(t);
    }
    conclude(&mut out, &search, u.flows);
    out
}

/// The result before any trial: what the search was asked.
fn empty_result(u: &UdpSpec, fm: &FindMax) -> FindMaxResult {
    let (kind, unit) = match u.mode {
        UdpMode::Pps => ("pps", "datagrams/s"),
        UdpMode::Bandwidth => ("udp", "bit/s"),
    };
    let directions = match u.direction {
        Direction::Forward => vec![FlowDir::Up],
        Direction::Reverse => vec![FlowDir::Down],
        Direction::Bidir => vec![FlowDir::Up, FlowDir::Down],
    };
    FindMaxResult {
        schema_version: SCHEMA_VERSION,
        test: "find_max".into(),
        kind: kind.into(),
        unit: unit.into(),
        server: String::new(),
        flows: u.flows,
        directions,
        length: u.length.0,
        loss_target_percent: fm.loss_percent,
        precision_percent: fm.precision * 100.0,
        trial_seconds: fm.trial.as_secs_f64(),
        warmup_seconds: fm.warmup.as_secs_f64(),
        best_per_flow: None,
        best: None,
        best_trial: None,
        first_miss_per_flow: None,
        first_miss_trial: None,
        outcome: String::new(),
        sender_limited: false,
        trials: Vec::new(),
        interrupted: false,
    }
}

/// What the search concluded, from its trials: the best rate confirmed, the lowest rate that
/// missed, and the trials that showed them.
fn conclude(out: &mut FindMaxResult, search: &Search, flows: u32) {
    out.outcome = search.outcome().to_string();
    out.sender_limited = search.sender_limited();
    out.best_per_flow = search.confirmed_best();
    out.best = search.confirmed_best().map(|b| b * f64::from(flows));
    out.best_trial = search.confirmed_best().and_then(|b| {
        out.trials
            .iter()
            .rev()
            .find(|t| t.met && t.asked_per_flow == b)
            .map(|t| t.index)
    });
    out.first_miss_per_flow = out
        .trials
        .iter()
        .filter(|t| !t.met && t.error.is_none())
        .map(|t| t.asked_per_flow)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))));
    out.first_miss_trial = out.first_miss_per_flow.and_then(|m| {
        out.trials
            .iter()
            .find(|t| !t.met && t.asked_per_flow == m)
            .map(|t| t.index)
    });
}
