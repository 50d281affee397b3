//! A `find_max` step: a search over the rate, each trial a whole step.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hakaru_model::capacity::{min_datagrams, DirFigures, FindMaxResult, Outcome, Search, Trial};
use hakaru_model::plan::StepResult;
use hakaru_model::FlowDir;

use super::hosts::Ready;
use super::servers::Servers;
use super::step::run_step;
use super::{Options, PlanObserver};
use crate::file::{PlanFile, Step};

/// A `find_max` step: every sender steps its rate together, trial by trial, as the search
/// proposes; each trial is a whole step (set up, synchronised start, merge) judged on the
/// receivers' aggregates: the worst receiver's loss, and whether any client's senders fell
/// short of the asked rate. Returns one step result per trial; the last carries the search.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_search(
    plan: &PlanFile,
    step: &Step,
    fm: &crate::file::FindMaxSettings,
    ready: &BTreeMap<String, Ready>,
    servers: &mut Servers,
    setup: Duration,
    opts: &Options,
    obs: &mut dyn PlanObserver,
) -> Vec<StepResult> {
    let pps = step.kind == crate::file::Kind::Pps;
    let flag_value = |flag: &str| {
        step.flags
            .iter()
            .position(|f| f == flag)
            .and_then(|i| step.flags.get(i + 1))
            .cloned()
    };
    let per_client: u32 = flag_value("-P").and_then(|v| v.parse().ok()).unwrap_or(1);
    let flows = per_client * (step.senders.len() * step.receivers.len()) as u32;
    let length: f64 = flag_value("-l")
        .and_then(|v| v.parse::<hakaru_model::Bytes>().ok())
        .map_or(if pps { 14.0 } else { 1472.0 }, |b| b.0 as f64);
    let floor_pps =
        min_datagrams(fm.loss) / (fm.trial.as_secs_f64().max(1e-3) * f64::from(flows.max(1)));
    let (start, ceiling, floor, unit) = if pps {
        (1e4, 1e8, floor_pps, "datagrams/s")
    } else {
        (10e6, 100e9, floor_pps * length * 8.0, "bit/s")
    };
    let mut search = Search::new(start, ceiling, fm.precision).with_floor(floor);
    let mut out: Vec<StepResult> = Vec::new();
    let mut trials: Vec<Trial> = Vec::new();
    let mut index = step.index;
    while let Some((phase, rate)) = search.next() {
        if opts.stop.load(Ordering::Acquire) {
            search.stop("interrupted".into());
            break;
        }
        let n = trials.len() as u32 + 1;
        let t = trial_step(step, fm, (n, index), rate, pps);
        index += 1;
        obs.on_step_start(&t, 0);
        let mut sr = run_step(plan, &t, ready, servers, setup, opts, obs);
        let mut trial = judge(&sr, Trial::new(n, phase, rate, flows), fm.loss);
        if trial.error.is_some() {
            search.stop(format!("trial {n} failed"));
        } else {
            search.record(
                rate,
                Outcome {
                    met: trial.met,
                    sender_limited: trial.sender_limited,
                },
            );
        }
        (trial.best_so_far, trial.miss_so_far) = search.bracket();
        sr.trial = Some(trial.clone());
        trials.push(trial);
        obs.on_step_end(&sr);
        out.push(sr);
    }
    let interrupted = opts.stop.load(Ordering::Acquire);
    let result = search_result(
        step,
        fm,
        &search,
        trials,
        (flows, length, unit),
        interrupted,
    );
    obs.on_note(&format!(
        "step {} ({}): {}",
        step.index,
        step.name,
        search_note(&result)
    ));
    if let Some(last) = out.last_mut() {
        last.find_max = Some(result);
    }
    out
}

/// The search's result: its best rate (per flow and in all) and the trial that confirmed it,
/// the first rate missed, why it ended, and every trial.
fn search_result(
    step: &Step,
    fm: &crate::file::FindMaxSettings,
    search: &Search,
    trials: Vec<Trial>,
    (flows, length, unit): (u32, f64, &str),
    interrupted: bool,
) -> FindMaxResult {
    let best = search.confirmed_best();
    let first_miss = trials
        .iter()
        .filter(|t| !t.met && t.error.is_none())
        .map(|t| t.asked_per_flow)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))));
    FindMaxResult {
        schema_version: hakaru_model::SCHEMA_VERSION,
        test: "find_max".into(),
        kind: step.kind.name().into(),
        unit: unit.into(),
        server: step.receivers.join(", "),
        flows,
        directions: Vec::new(),
        length: length as u64,
        loss_target_percent: fm.loss,
        precision_percent: fm.precision * 100.0,
        trial_seconds: fm.trial.as_secs_f64(),
        warmup_seconds: fm.warmup.as_secs_f64(),
        best_per_flow: best,
        best: best.map(|b| b * f64::from(flows)),
        best_trial: best.and_then(|b| {
            trials
                .iter()
                .rev()
                .find(|t| t.met && t.asked_per_flow == b)
                .map(|t| t.index)
        }),
        first_miss_per_flow: first_miss,
        first_miss_trial: first_miss
            .and_then(|m| trials.iter().find(|t| !t.met && t.asked_per_flow == m))
            .map(|t| t.index),
        outcome: search.outcome().to_string(),
        sender_limited: search.sender_limited(),
        interrupted,
        trials,
    }
}

/// Trial `n`'s step, numbered `index` in the result: the search's step at `rate` per flow
/// (`--rate` datagrams/s for pps, `-b` bit/s otherwise) for the trial's time, with the
/// search's warm-up unless the step sets its own `-O`.
fn trial_step(
    step: &Step,
    fm: &crate::file::FindMaxSettings,
    (n, index): (u32, u32),
    rate: f64,
    pps: bool,
) -> Step {
    let mut t = step.clone();
    t.index = index;
    t.name = format!("{}: find-max trial {n}", step.name);
    t.flags.extend([
        if pps { "--rate" } else { "-b" }.to_string(),
        format!("{rate}"),
        "-t".into(),
        format!("{}ms", fm.trial.as_millis()),
    ]);
    if !t.flags.iter().any(|f| f == "-O") {
        t.flags
            .extend(["-O".into(), format!("{}ms", fm.warmup.as_millis())]);
    }
    t
}

/// A trial judged on its step: failed (the step's first error), sender-limited (a client's
/// senders fell short of the asked rate), and per direction the receivers' figures summed
/// with the worst receiver's loss, met if that loss is within `loss` percent.
fn judge(sr: &StepResult, mut trial: Trial, loss: f64) -> Trial {
    trial.sender_limited = sr.runs.iter().any(|r| {
        r.result.as_ref().is_some_and(|res| {
            res.totals
                .iter()
                .any(|d| d.rate_target.as_ref().is_some_and(|rt| rt.missed))
        })
    });
    trial.error = sr.errors.first().cloned();
    // Per direction, like `asked`: each direction's receivers summed, the worst receiver's
    // loss.
    let dirs: Vec<DirFigures> = [FlowDir::Up, FlowDir::Down]
        .into_iter()
        .filter_map(|dir| {
            let of: Vec<_> = sr.aggregates.iter().filter(|a| a.dir == dir).collect();
            (!of.is_empty()).then(|| DirFigures {
                sent_bps: of.iter().map(|a| a.sent_bps).sum(),
                sent_pps: of.iter().filter_map(|a| a.sent_pps).sum(),
                received_bps: of.iter().map(|a| a.received_bps).sum(),
                received_pps: of.iter().filter_map(|a| a.received_pps).sum(),
                loss_percent: of.iter().filter_map(|a| a.lost_percent).fold(0.0, f64::max),
                jitter_ms: None,
            })
        })
        .collect();
    trial.set_directions(&dirs, loss);
    trial.met = trial.error.is_none() && trial.loss_percent <= loss;
    trial
}

/// One line for the plan's live output: the search's best rate and why it ended.
pub(super) fn search_note(r: &hakaru_model::capacity::FindMaxResult) -> String {
    match r.best {
        Some(b) => format!(
            "find-max: best {b:.0} {} in total ({:.0} per flow) with at most {} % loss; {}",
            r.unit,
            r.best_per_flow.unwrap_or(0.0),
            r.loss_target_percent,
            r.outcome
        ),
        None => format!("find-max: {}", r.outcome),
    }
}
