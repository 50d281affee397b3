//! `hakaru plan`: many machines, one test. `plan run FILE` starts servers on the receivers and
//! clients on the senders through their launchers (ssh, netns, local, any exec prefix),
//! releases every client at once and merges what they report; `plan check FILE` validates a
//! plan without traffic. docs/plan.md describes the file and the result.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::Context;
use clap::Parser;
use hakaru_model::plan::{PlanHost, PlanResult, Release, StepResult, TimelineRow};
use hakaru_plan::{PlanObserver, Step};
use hakaru_report::export::{self, DocKind, Document, Format, LiveItem, PlanStep};

use super::common::{stop_flag, UsageError};
use crate::output::out;

/// Options of `hakaru plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: PlanCommand,
}

#[derive(Debug, clap::Subcommand)]
enum PlanCommand {
    /// Run a plan: start servers on the receivers, clients on the senders, release them
    /// together, print the merged result.
    Run(RunArgs),
    /// Check a plan without running traffic: unknown keys, hosts and steps that do not fit,
    /// options the subcommands refuse; with --probe, reach every host and ask its hakaru
    /// version.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The plan file (TOML, docs/plan.md).
    file: PathBuf,
    /// Output format.
    #[arg(long, value_parser = super::format::parser(DocKind::Plan), conflicts_with_all = ["json", "json_stream"])]
    format: Option<Format>,
    /// Same as --format json.
    #[arg(short = 'J', long, conflicts_with = "json_stream")]
    json: bool,
    /// Same as --format json-stream.
    #[arg(long)]
    json_stream: bool,
    /// Also write the result as one JSON document to this file (whatever the format).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The archive and the Pushgateway (`save = true` and `[labels]` in the plan do the same).
    #[command(flatten)]
    keep: super::keep::Keep,
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The plan file (TOML, docs/plan.md).
    file: PathBuf,
    /// Also reach every host through its launcher and ask its hakaru for its version.
    #[arg(long)]
    probe: bool,
}

/// Runs `hakaru plan ...`.
pub fn run(a: Args) -> anyhow::Result<()> {
    match a.command {
        PlanCommand::Run(r) => run_plan(r),
        PlanCommand::Check(c) => check_plan(c),
    }
}

/// Reads and checks a plan; fatal problems are usage errors (exit 2), warnings go to stderr.
fn load(file: &PathBuf) -> anyhow::Result<hakaru_plan::PlanFile> {
    // A plan file that cannot be read is a name on the command line that does not work.
    let text = std::fs::read_to_string(file)
        .map_err(|e| UsageError(format!("reading the plan {}: {e}", file.display())))?;
    let mut plan = hakaru_plan::parse(&text)
        .map_err(|e| UsageError(format!("plan {}: {e}", file.display())))?;
    let base = file.parent().unwrap_or(std::path::Path::new("."));
    hakaru_plan::fleet::apply(&mut plan, base)
        .map_err(|e| UsageError(format!("plan {}: {e}", file.display())))?;
    let problems = hakaru_plan::check(&plan);
    for p in problems.iter().filter(|p| !p.fatal) {
        eprintln!("hakaru: warning: plan {}: {}", file.display(), p.message);
    }
    let fatal: Vec<&str> = problems
        .iter()
        .filter(|p| p.fatal)
        .map(|p| p.message.as_str())
        .collect();
    if !fatal.is_empty() {
        return Err(UsageError(format!("plan {}: {}", file.display(), fatal.join("; "))).into());
    }
    Ok(plan)
}

/// Checks a client command line with the same parser the far host will use.
fn validate(argv: &[String]) -> Result<(), String> {
    let mut full = vec!["hakaru".to_string()];
    full.extend(argv.iter().cloned());
    super::Cli::try_parse_from(full).map(|_| ()).map_err(|e| {
        e.to_string()
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ")
            .to_string()
    })
}

fn check_plan(c: CheckArgs) -> anyhow::Result<()> {
    let plan = load(&c.file)?;
    let steps = hakaru_plan::expand(&plan);
    let bad = hakaru_plan::invalid_commands(&steps, &validate);
    if !bad.is_empty() {
        return Err(UsageError(format!("plan {}: {}", c.file.display(), bad.join("; "))).into());
    }
    out(&format!(
        "plan {}: {} host(s), {} step(s) after sweeps and repeats: ok\n",
        c.file.display(),
        plan.hosts.len(),
        steps.len()
    ));
    if c.probe {
        let exe = std::env::current_exe().context("finding this hakaru binary")?;
        let mut failed = 0;
        for (name, r) in hakaru_plan::probe(&plan, &exe) {
            match r {
                Ok(v) => out(&format!("  host {name}: {v}\n")),
                Err(e) => {
                    failed += 1;
                    out(&format!("  {e}\n"));
                }
            }
        }
        if failed > 0 {
            anyhow::bail!("{failed} host(s) cannot take part");
        }
    }
    Ok(())
}

/// The plan's live output in the chosen format; a note the format has no form of goes to
/// stderr.
struct Live(Box<dyn export::Live>);

impl Live {
    fn print(&mut self, item: &LiveItem<'_>) {
        if let Some(s) = self.0.item(item) {
            out(&s);
        }
    }
}

impl PlanObserver for Live {
    fn on_host(&mut self, h: &PlanHost) {
        self.print(&LiveItem::PlanHost(h));
    }
    fn on_note(&mut self, message: &str) {
        match self.0.item(&LiveItem::PlanNote(message)) {
            Some(s) => out(&s),
            None => eprintln!("hakaru: {message}"),
        }
    }
    fn on_step_start(&mut self, s: &Step, of: usize) {
        self.print(&LiveItem::PlanStepStart(&PlanStep {
            index: s.index,
            of,
            name: &s.name,
            kind: s.kind.name(),
            senders: &s.senders,
            receivers: &s.receivers,
            flags: &s.flags,
        }));
    }
    fn on_release(&mut self, _s: &Step, r: &Release) {
        self.print(&LiveItem::PlanRelease(r));
    }
    fn on_row(&mut self, s: &Step, row: &TimelineRow) {
        self.print(&LiveItem::PlanRow { step: s.index, row });
    }
    fn on_step_end(&mut self, s: &StepResult) {
        self.print(&LiveItem::PlanStepEnd(s));
    }
}

fn run_plan(r: RunArgs) -> anyhow::Result<()> {
    let plan = load(&r.file)?;
    let format = match (r.format, r.json, r.json_stream) {
        (Some(f), _, _) => f,
        (None, true, _) => Format::json(),
        (None, _, true) => Format::json_stream(),
        _ => Format::text(),
    };
    // The plan's own save and labels, checked before anything runs.
    let mut keep = r.keep.clone();
    keep.save |= plan.save.unwrap_or(false);
    for (k, v) in &plan.labels {
        let label = super::keep::parse_label(&format!("{k}={v}"))
            .map_err(|e| UsageError(format!("{}: [labels]: {e}", r.file.display())))?;
        if !keep.labels.iter().any(|(have, _)| have == k) {
            keep.labels.push(label);
        }
    }
    let stop = stop_flag()?;
    let opts = hakaru_plan::Options {
        plan_path: r.file.display().to_string(),
        self_binary: std::env::current_exe().context("finding this hakaru binary")?,
        version: format!("hakaru {}", env!("CARGO_PKG_VERSION")),
        validate: Box::new(validate),
        stop: std::sync::Arc::clone(&stop),
    };
    let view = hakaru_report::View::default();
    let result: PlanResult = hakaru_plan::run(&plan, &opts, &mut Live(format.live(view)));
    crate::output::print(format, view, &Document::Plan(&result))?;
    let json = hakaru_report::json::plan(&result);
    if let Some(path) = &r.output {
        std::fs::write(path, &json)
            .with_context(|| format!("writing the result to {}", path.display()))?;
    }
    let content = hakaru_report::html::Content::Plan(Box::new(result.clone()));
    keep.keep(super::keep::Finished {
        summary: hakaru_report::summary::of_content(&content),
        run: None,
        json,
        written_to: r.output.as_deref(),
    })?;
    if !result.errors.is_empty() {
        anyhow::bail!(
            "the plan had {} error(s); the first: {}",
            result.errors.len(),
            result.errors[0]
        );
    }
    if result.interrupted && stop.load(Ordering::Acquire) {
        eprintln!("hakaru: the plan was interrupted; the result covers what ran");
    }
    Ok(())
}
