//! How each kind reads as human text: the [`KindText`] trait, implemented once per kind in
//! that kind's module (tcp in `text`, the others in `NAME_text`); `kinds::of` picks the kind.

use hakaru_model::{IntervalRecord, RunResult};

use crate::View;

/// How one kind reads as human text.
pub(crate) trait KindText {
    /// The line that opens a run.
    fn header(&self, server: &str, embedded: bool) -> String;
    /// Column headings for the interval lines.
    fn interval_heading(&self, view: &View) -> String;
    /// Warnings about one interval that need the spec (a paced UDP sender held back).
    fn interval_warnings(&self, _rec: &IntervalRecord) -> String {
        String::new()
    }
    /// The final summary, ending with the headline.
    fn summary(&self, r: &RunResult, view: &View) -> String;
    /// With [`View::summary_only`]: the per-direction sums and the headline.
    fn sums_and_headline(&self, r: &RunResult, view: &View) -> String;
    /// The kind's figures of a one-line summary (history, the archive, the push gateway).
    fn row(&self, r: &RunResult, s: &mut Row);
    /// The CSV `total` rows of a finished run (one of the CSV writers for its shape).
    fn csv_totals(&self, r: &RunResult) -> String;
}

/// A kind's figures in a one-line summary (`summary::Summary` adds kind, peer and start).
#[derive(Debug, Default)]
pub(crate) struct Row {
    /// up, down, bidir; empty where the kind has no direction.
    pub direction: String,
    /// Flows (connections) per direction.
    pub flows: Option<u32>,
    /// The headline figure.
    pub headline: Option<f64>,
    /// Its unit.
    pub unit: String,
    /// What the run measured against, where the kind knows better than the server's
    /// address (a URL, a raw transfer's peer).
    pub peer: Option<String>,
}
