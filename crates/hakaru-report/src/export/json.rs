//! `--format json` (`-J`, `--json`): one JSON document at the end (docs/json.md).

use super::{as_saved, pretty, DocKind, Document, Exporter, Live, LiveItem};
use crate::{history, jsonl, View};

/// One JSON document at the end.
pub struct Json;

impl Exporter for Json {
    fn name(&self) -> &'static str {
        "json"
    }

    fn supports(&self, _doc: DocKind) -> bool {
        true
    }

    fn help(&self, doc: DocKind) -> &'static str {
        match doc {
            DocKind::Plan => "One JSON document at the end (docs/plan.md)",
            DocKind::History => "One JSON array of runs (without their result documents)",
            DocKind::Compare => "One JSON document (docs/compare.md)",
            _ => "One JSON document at the end",
        }
    }

    fn render(&self, doc: &Document<'_>, _view: &View) -> String {
        match doc {
            Document::Run(r) => crate::json::render(r),
            Document::Runs(runs) => pretty(runs),
            Document::FindMax(r) => pretty(r),
            Document::Quick { result, .. } => pretty(result),
            Document::Plan(p) => crate::json::plan(p),
            Document::Nic { intervals, summary } => crate::json::nic(intervals, summary),
            Document::History(runs) => {
                pretty(&runs.iter().map(history::run_json).collect::<Vec<_>>())
            }
            Document::Trend(series) => pretty(&history::trend_json(series)),
            Document::Compare(c) => crate::compare::json(c),
            Document::Saved { json, .. } => as_saved(json),
        }
    }

    fn live(&self, _view: View) -> Box<dyn Live> {
        Box::new(JsonLive)
    }

    fn keeps_intervals(&self) -> bool {
        true
    }
}

/// Nothing live but a failure, as an `error` line (the document never comes).
struct JsonLive;

impl Live for JsonLive {
    fn item(&mut self, item: &LiveItem<'_>) -> Option<String> {
        match item {
            LiveItem::Error(message) => Some(jsonl::error(message)),
            LiveItem::PlanNote(_) | LiveItem::Ready(_) => None,
            _ => Some(String::new()),
        }
    }
}
