//! `--format csv`: a row per flow and per direction each interval, totals at the end
//! (docs/csv.md); the history list and trend as CSV too.

use hakaru_model::TestSpec;

use super::{as_saved, DocKind, Document, Exporter, Live, LiveItem};
use crate::{history, View};

/// CSV rows as the test runs.
pub struct Csv;

impl Exporter for Csv {
    fn name(&self) -> &'static str {
        "csv"
    }

    fn supports(&self, doc: DocKind) -> bool {
        match doc {
            DocKind::Run(k) => k.has_csv_rows(),
            DocKind::History | DocKind::Trend => true,
            _ => false,
        }
    }

    fn help(&self, doc: DocKind) -> &'static str {
        match doc {
            DocKind::History => "CSV: a header and one row per run",
            DocKind::Trend => "CSV: a header and one row per point of each series",
            _ => "CSV: a row per flow and per direction each interval, totals at the end (docs/csv.md)",
        }
    }

    fn render(&self, doc: &Document<'_>, _view: &View) -> String {
        match doc {
            Document::Run(r) => crate::csv::total_rows(r),
            Document::History(runs) => history::runs_csv(runs),
            Document::Trend(series) => history::trend_csv(series),
            Document::Saved { json, .. } => as_saved(json),
            _ => String::new(),
        }
    }

    fn live(&self, _view: View) -> Box<dyn Live> {
        Box::new(CsvLive { spec: None })
    }

    fn quiet_while_running(&self, _view: &View, intervals: bool) -> bool {
        !intervals
    }
}

/// The header at the start, then rows as each interval ends.
struct CsvLive {
    spec: Option<TestSpec>,
}

impl Live for CsvLive {
    fn item(&mut self, item: &LiveItem<'_>) -> Option<String> {
        match item {
            LiveItem::Start { spec, .. } => {
                self.spec = Some((*spec).clone());
                Some(crate::csv::header())
            }
            LiveItem::Interval(rec) => Some(match &self.spec {
                Some(spec) => crate::csv::interval_rows(spec, rec),
                None => String::new(),
            }),
            LiveItem::PlanNote(_) | LiveItem::Ready(_) => None,
            _ => Some(String::new()),
        }
    }
}
