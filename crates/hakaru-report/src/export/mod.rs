//! One exporter per output format (after hyperfine's `export/`): every document hakaru prints
//! is a [`Document`], every format is an [`Exporter`] that says which documents it can write
//! and writes them (at the end, and live as a run goes where the format has a live form), and
//! [`EXPORTERS`] lists them. `--format`'s values, their parsing and their help come from the
//! list, so a format is added here and nowhere else (docs/architecture.md has the recipe).
//!
//! The exporters only call the renderers of this crate (`text`, `json`, `jsonl`, `csv`,
//! `iperf3_json`, ...); they decide which renderer a document gets, nothing about its look.

use std::fmt;

use hakaru_model::capacity::{FindMaxResult, Trial};
use hakaru_model::plan::{PlanHost, PlanResult, Release, StepResult, TimelineRow};
use hakaru_model::{
    IntervalRecord, NicInterval, NicSummary, QuickLine, QuickResult, RunResult, TestSpec,
};

use crate::compare::Comparison;
use crate::history::HistoryRun;
use crate::trend::TrendSeries;
use crate::View;

mod csv;
mod csv_summary;
mod iperf3_json;
mod json;
mod json_stream;
mod markdown;
mod text;

/// Every output format, in the order `--format` lists them.
pub static EXPORTERS: &[&dyn Exporter] = &[
    &text::Text,
    &json::Json,
    &json_stream::JsonStream,
    &iperf3_json::Iperf3Json,
    &csv::Csv,
    &csv_summary::CsvSummary,
    &markdown::Markdown,
];

pub use crate::kinds::{run_document, RunKind};

/// What a document is, without its data: what an exporter is asked whether it supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    /// One test's result.
    Run(RunKind),
    /// Several test results as one document (`sink --keep`).
    Runs,
    /// `udp --find-max`, `pps --find-max`: the search and its trials.
    FindMax,
    /// `hakaru quick`: one screen of short tests.
    Quick,
    /// `hakaru plan run`: the merged result of many machines.
    Plan,
    /// `hakaru nic`: interface rates every interval and their averages.
    Nic,
    /// `hakaru history`: the saved runs.
    History,
    /// `hakaru history --trend`: the headline over time.
    Trend,
    /// `hakaru compare`: two results metric by metric.
    Compare,
}

impl fmt::Display for DocKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DocKind::Run(k) => return write!(f, "a {} result", k.name()),
            DocKind::Runs => "several results as one document",
            DocKind::FindMax => "--find-max",
            DocKind::Quick => "`hakaru quick`",
            DocKind::Plan => "`hakaru plan run`",
            DocKind::Nic => "`hakaru nic`",
            DocKind::History => "`hakaru history`",
            DocKind::Trend => "`hakaru history --trend`",
            DocKind::Compare => "`hakaru compare`",
        })
    }
}

/// Everything hakaru prints at the end of a command.
#[derive(Debug, Clone, Copy)]
pub enum Document<'a> {
    /// One test's result.
    Run(&'a RunResult),
    /// Several test results (`sink --keep`).
    Runs(&'a [RunResult]),
    /// A `--find-max` search.
    FindMax(&'a FindMaxResult),
    /// `hakaru quick`'s result; `ran_for` is the test length when its lines were printed live
    /// as the tests ran (only the footer is left), `None` to print the whole screen.
    Quick {
        result: &'a QuickResult,
        ran_for: Option<&'a str>,
    },
    /// A plan's merged result.
    Plan(&'a PlanResult),
    /// `hakaru nic`: the intervals (kept only by formats that [`Exporter::keeps_intervals`])
    /// and the averages.
    Nic {
        intervals: &'a [NicInterval],
        summary: &'a NicSummary,
    },
    /// The saved runs, newest first.
    History(&'a [HistoryRun]),
    /// The headline over time.
    Trend(&'a [TrendSeries]),
    /// Two results compared.
    Compare(&'a Comparison),
    /// A document read back from the archive with the JSON it was saved as: text renders
    /// `doc`, every other format prints `json` as it was saved.
    Saved {
        doc: &'a Document<'a>,
        json: &'a str,
    },
}

impl Document<'_> {
    /// What the document is.
    pub fn kind(&self) -> DocKind {
        match self {
            Document::Run(r) => DocKind::Run(RunKind::of(&r.spec)),
            Document::Runs(_) => DocKind::Runs,
            Document::FindMax(_) => DocKind::FindMax,
            Document::Quick { .. } => DocKind::Quick,
            Document::Plan(_) => DocKind::Plan,
            Document::Nic { .. } => DocKind::Nic,
            Document::History(_) => DocKind::History,
            Document::Trend(_) => DocKind::Trend,
            Document::Compare(_) => DocKind::Compare,
            Document::Saved { doc, .. } => doc.kind(),
        }
    }
}

/// What happens while a command runs, for the formats that print as it goes.
#[derive(Debug, Clone, Copy)]
pub enum LiveItem<'a> {
    /// A test was accepted and starts (`server`: the peer's address).
    Start {
        spec: &'a TestSpec,
        server: &'a str,
        embedded: bool,
    },
    /// One interval of a test, merged from both ends.
    Interval(&'a IntervalRecord),
    /// The command failed with this message.
    Error(&'a str),
    /// `--sync-start`: set up, waiting for `go` (Unix seconds).
    Ready(f64),
    /// `--sync-start`: released (Unix seconds), and for `go AT` how many milliseconds before
    /// the instant the line arrived.
    Released(f64, Option<f64>),
    /// A `--find-max` search starts.
    SearchStart {
        kind: &'a str,
        server: &'a str,
        flows: u32,
        loss_percent: f64,
        trial_s: f64,
        warmup_s: f64,
    },
    /// One `--find-max` trial ended (`unit`: what its rate counts).
    Trial { trial: &'a Trial, unit: &'a str },
    /// One test of `hakaru quick` ended.
    QuickLine(&'a QuickLine),
    /// A plan host answered.
    PlanHost(&'a PlanHost),
    /// A plan's note for the user.
    PlanNote(&'a str),
    /// A plan step starts.
    PlanStepStart(&'a PlanStep<'a>),
    /// A plan step's clients were released.
    PlanRelease(&'a Release),
    /// One row of a plan step's timeline.
    PlanRow { step: u32, row: &'a TimelineRow },
    /// A plan step ended.
    PlanStepEnd(&'a StepResult),
    /// `hakaru nic` starts watching these interfaces.
    NicStart {
        interfaces: &'a [String],
        interval: hakaru_model::Dur,
        count: Option<u64>,
    },
    /// One `hakaru nic` interval.
    NicInterval(&'a NicInterval),
    /// One sub-interval of a capacity test, as its receiver counted it.
    SubInterval(&'a hakaru_model::UdpstSubInterval),
}

/// A plan step as it starts.
#[derive(Debug, Clone)]
pub struct PlanStep<'a> {
    pub index: u32,
    pub of: usize,
    pub name: &'a str,
    pub kind: &'a str,
    pub senders: &'a [String],
    pub receivers: &'a [String],
    pub flags: &'a [String],
}

/// One output format.
pub trait Exporter: Sync {
    /// The name `--format` takes.
    fn name(&self) -> &'static str;
    /// Whether this format can write `doc`.
    fn supports(&self, doc: DocKind) -> bool;
    /// What this format prints for `doc`, for `--format`'s help.
    fn help(&self, doc: DocKind) -> &'static str;
    /// `doc` in this format; called only for documents it [`supports`](Exporter::supports)
    /// (see [`write`]).
    fn render(&self, doc: &Document<'_>, view: &View) -> String;
    /// What this format prints as a command runs; one writer per run.
    fn live(&self, _view: View) -> Box<dyn Live> {
        Box::new(Silent)
    }
    /// Whether a run in this format prints nothing on stdout while it runs (so a status line
    /// on stderr helps); `intervals`: the run reports intervals.
    fn quiet_while_running(&self, _view: &View, _intervals: bool) -> bool {
        true
    }
    /// Whether the document at the end carries every interval (so they must be kept).
    fn keeps_intervals(&self) -> bool {
        false
    }
}

/// A format's live output over one run.
pub trait Live: Send {
    /// What to print on stdout for `item` (maybe nothing: `Some("")`); `None` when the
    /// format has no form of it, so the caller may say it on stderr instead.
    fn item(&mut self, item: &LiveItem<'_>) -> Option<String>;
}

/// Prints nothing live.
pub struct Silent;

impl Live for Silent {
    fn item(&mut self, item: &LiveItem<'_>) -> Option<String> {
        match item {
            LiveItem::PlanNote(_) | LiveItem::Ready(_) => None,
            _ => Some(String::new()),
        }
    }
}

/// An output format: a handle on its exporter in [`EXPORTERS`].
#[derive(Clone, Copy)]
pub struct Format(&'static dyn Exporter);

impl Format {
    /// The format `name` (as `--format` spells it).
    pub fn named(name: &str) -> Option<Format> {
        EXPORTERS
            .iter()
            .find(|e| e.name() == name)
            .map(|e| Format(*e))
    }

    /// Human text, the default.
    pub fn text() -> Format {
        Format(&text::Text)
    }

    /// One JSON document (`--json`, `-J`).
    pub fn json() -> Format {
        Format(&json::Json)
    }

    /// JSON Lines as the command runs (`--json-stream`).
    pub fn json_stream() -> Format {
        Format(&json_stream::JsonStream)
    }

    /// The exporter behind it.
    pub fn exporter(self) -> &'static dyn Exporter {
        self.0
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// Whether it can write `doc`.
    pub fn supports(self, doc: DocKind) -> bool {
        self.0.supports(doc)
    }

    /// [`Unsupported`] unless it can write `doc`.
    pub fn check(self, doc: DocKind) -> Result<(), Unsupported> {
        if self.supports(doc) {
            Ok(())
        } else {
            Err(Unsupported {
                format: self.name(),
                doc,
            })
        }
    }

    /// `doc` in this format, or [`Unsupported`].
    pub fn write(self, doc: &Document<'_>, view: &View) -> Result<String, Unsupported> {
        // A saved document prints as it was saved in a format that has no form of it.
        if let Document::Saved { json, .. } = doc {
            if !self.supports(doc.kind()) {
                return Ok(as_saved(json));
            }
        }
        self.check(doc.kind())?;
        Ok(self.0.render(doc, view))
    }

    /// The live writer of one run.
    pub fn live(self, view: View) -> Box<dyn Live> {
        self.0.live(view)
    }

    /// See [`Exporter::quiet_while_running`].
    pub fn quiet_while_running(self, view: &View, intervals: bool) -> bool {
        self.0.quiet_while_running(view, intervals)
    }

    /// See [`Exporter::keeps_intervals`].
    pub fn keeps_intervals(self) -> bool {
        self.0.keeps_intervals()
    }
}

impl PartialEq for Format {
    fn eq(&self, other: &Format) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Format {}

impl fmt::Debug for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Format({})", self.name())
    }
}

/// The formats that can write `doc`, in `--format`'s order.
pub fn formats_for(doc: DocKind) -> Vec<Format> {
    EXPORTERS
        .iter()
        .filter(|e| e.supports(doc))
        .map(|e| Format(*e))
        .collect()
}

/// Names as a sentence: `a, b or c`.
pub fn or_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// A format asked for a document it cannot write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub format: &'static str,
    pub doc: DocKind,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = formats_for(self.doc).iter().map(|f| f.name()).collect();
        write!(
            f,
            "{} prints {}, not {}",
            self.doc,
            or_list(&names),
            self.format
        )
    }
}

impl std::error::Error for Unsupported {}

/// A JSON document pretty-printed with a newline (what `--json` prints).
pub(crate) fn pretty<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")) + "\n"
}

/// A saved document's JSON as it was saved, with a final newline.
pub(crate) fn as_saved(json: &str) -> String {
    if json.ends_with('\n') {
        json.to_string()
    } else {
        format!("{json}\n")
    }
}

#[cfg(test)]
mod tests;
