//! `--format csv-summary`: the CSV header and one total row per direction, for spreadsheets
//! of many runs (docs/csv.md).

use super::{as_saved, DocKind, Document, Exporter};
use crate::View;

/// One total row per direction at the end.
pub struct CsvSummary;

impl Exporter for CsvSummary {
    fn name(&self) -> &'static str {
        "csv-summary"
    }

    fn supports(&self, doc: DocKind) -> bool {
        matches!(doc, DocKind::Run(k) if k.has_csv_rows())
    }

    fn help(&self, _doc: DocKind) -> &'static str {
        "CSV: the header and one total row per direction, for spreadsheets of many runs"
    }

    fn render(&self, doc: &Document<'_>, _view: &View) -> String {
        match doc {
            Document::Run(r) => crate::csv::summary(r),
            Document::Saved { json, .. } => as_saved(json),
            _ => String::new(),
        }
    }
}
