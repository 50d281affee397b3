//! `--format json-stream` (`--json-stream`): JSON Lines events as a command runs, the result
//! in the `end` event (docs/json.md).

use super::{as_saved, pretty, DocKind, Document, Exporter, Live, LiveItem};
use crate::{jsonl, View};

/// JSON Lines events as the command runs.
pub struct JsonStream;

impl Exporter for JsonStream {
    fn name(&self) -> &'static str {
        "json-stream"
    }

    fn supports(&self, doc: DocKind) -> bool {
        !matches!(
            doc,
            DocKind::Runs | DocKind::History | DocKind::Trend | DocKind::Compare
        )
    }

    fn help(&self, doc: DocKind) -> &'static str {
        match doc {
            DocKind::Plan => "JSON Lines events as the plan runs",
            _ => "JSON Lines events as the test runs",
        }
    }

    fn render(&self, doc: &Document<'_>, _view: &View) -> String {
        match doc {
            Document::Run(r) => jsonl::end(r),
            Document::FindMax(r) => jsonl::event("end", r),
            // quick has no events: its document, as --json prints it.
            Document::Quick { result, .. } => pretty(result),
            Document::Plan(p) => jsonl::event("end", p),
            Document::Nic { summary, .. } => jsonl::event("end", summary),
            Document::Saved { json, .. } => as_saved(json),
            Document::Runs(_)
            | Document::History(_)
            | Document::Trend(_)
            | Document::Compare(_) => String::new(),
        }
    }

    fn live(&self, _view: View) -> Box<dyn Live> {
        Box::new(StreamLive)
    }

    fn quiet_while_running(&self, _view: &View, _intervals: bool) -> bool {
        false
    }
}

/// One event per item.
struct StreamLive;

impl Live for StreamLive {
    fn item(&mut self, item: &LiveItem<'_>) -> Option<String> {
        Some(match item {
            LiveItem::Start {
                spec,
                server,
                embedded,
            } => jsonl::start(spec, server, *embedded),
            LiveItem::Interval(rec) => jsonl::interval(rec),
            LiveItem::Error(message) => jsonl::error(message),
            LiveItem::Ready(at) => jsonl::ready(*at),
            LiveItem::Released(at, ahead) => jsonl::released(*at, *ahead),
            LiveItem::Trial { trial, .. } => jsonl::event("trial", trial),
            LiveItem::PlanHost(h) => jsonl::event("host", h),
            LiveItem::PlanNote(message) => {
                jsonl::event("note", &serde_json::json!({ "message": message }))
            }
            LiveItem::PlanStepStart(s) => jsonl::event(
                "step_start",
                &serde_json::json!({
                    "index": s.index, "of": s.of, "name": s.name, "kind": s.kind,
                    "senders": s.senders, "receivers": s.receivers, "flags": s.flags,
                }),
            ),
            LiveItem::PlanRelease(r) => jsonl::event("release", r),
            LiveItem::PlanRow { step, row } => {
                jsonl::event("row", &serde_json::json!({ "step": step, "row": row }))
            }
            LiveItem::PlanStepEnd(s) => jsonl::event("step_end", s),
            LiveItem::NicInterval(rec) => jsonl::event("interval", rec),
            LiveItem::SubInterval(row) => jsonl::event("sub_interval", row),
            LiveItem::SearchStart { .. } | LiveItem::QuickLine(_) | LiveItem::NicStart { .. } => {
                String::new()
            }
        })
    }
}
