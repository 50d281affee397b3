//! `--format markdown`: a comparison as a Markdown table, for pull-request comments.

use super::{DocKind, Document, Exporter};
use crate::View;

/// A Markdown table.
pub struct Markdown;

impl Exporter for Markdown {
    fn name(&self) -> &'static str {
        "markdown"
    }

    fn supports(&self, doc: DocKind) -> bool {
        doc == DocKind::Compare
    }

    fn help(&self, _doc: DocKind) -> &'static str {
        "A Markdown table, for pull-request comments"
    }

    fn render(&self, doc: &Document<'_>, _view: &View) -> String {
        match doc {
            Document::Compare(c) => crate::compare::markdown(c),
            _ => String::new(),
        }
    }
}
