//! `--format iperf3-json`: the shape of `iperf3 -J` at the end, for its parsers
//! (docs/iperf3-json.md); only for the tests iperf3 has (tcp, udp, pps).

use super::{as_saved, DocKind, Document, Exporter, Live, LiveItem};
use crate::View;

/// The shape of `iperf3 -J`.
pub struct Iperf3Json;

impl Exporter for Iperf3Json {
    fn name(&self) -> &'static str {
        "iperf3-json"
    }

    fn supports(&self, doc: DocKind) -> bool {
        matches!(doc, DocKind::Run(k) if k.has_iperf3_form())
    }

    fn help(&self, _doc: DocKind) -> &'static str {
        "The shape of `iperf3 -J` at the end, for its parsers (docs/iperf3-json.md)"
    }

    fn render(&self, doc: &Document<'_>, _view: &View) -> String {
        match doc {
            Document::Run(r) => crate::iperf3_json::render(r),
            Document::Saved { json, .. } => as_saved(json),
            _ => String::new(),
        }
    }

    fn live(&self, _view: View) -> Box<dyn Live> {
        Box::new(Iperf3Live)
    }
}

/// Nothing live, like `iperf3 -J`; a failure becomes iperf3's error document.
struct Iperf3Live;

impl Live for Iperf3Live {
    fn item(&mut self, item: &LiveItem<'_>) -> Option<String> {
        match item {
            LiveItem::Error(message) => Some(crate::iperf3_json::error_render(message)),
            LiveItem::PlanNote(_) | LiveItem::Ready(_) => None,
            _ => Some(String::new()),
        }
    }
}
