//! `--format text`: human text, live lines as a command runs and a summary at the end.

use hakaru_model::TestSpec;

use super::{DocKind, Document, Exporter, Live, LiveItem};
use crate::{
    capacity_text, history, http_text, nic, plan_text, quick_text, raw_text, text, trend,
    udpst_text, View,
};

/// Human text (the default).
pub struct Text;

impl Exporter for Text {
    fn name(&self) -> &'static str {
        "text"
    }

    fn supports(&self, doc: DocKind) -> bool {
        doc != DocKind::Runs
    }

    fn help(&self, doc: DocKind) -> &'static str {
        match doc {
            DocKind::Plan => "Live lines and a summary",
            DocKind::History | DocKind::Trend | DocKind::Compare => "A table",
            _ => "Human text (default)",
        }
    }

    fn render(&self, doc: &Document<'_>, view: &View) -> String {
        match doc {
            Document::Run(r) => match &r.spec {
                TestSpec::Raw(_) => raw_text::summary(r),
                _ => text::summary(r, view),
            },
            Document::Runs(_) => String::new(),
            Document::FindMax(r) => view.fit(capacity_text::summary(r)),
            Document::Quick {
                result,
                ran_for: Some(t),
            } => view.fit(quick_text::footer(result, Some(t))),
            Document::Quick {
                result,
                ran_for: None,
            } => quick_text::screen(result, view),
            Document::Plan(p) => plan_text::summary(p),
            Document::Nic { summary, .. } => nic::average_text(summary),
            // An empty list prints nothing (the caller says so on stderr).
            Document::History([]) => String::new(),
            Document::History(runs) => history::table(runs, view.wide),
            Document::Trend(series) => trend::text(series),
            Document::Compare(c) => crate::compare::text(c),
            Document::Saved { doc, .. } => self.render(doc, view),
        }
    }

    fn live(&self, view: View) -> Box<dyn Live> {
        Box::new(TextLive {
            view,
            heading: None,
            spec: None,
        })
    }

    fn quiet_while_running(&self, view: &View, intervals: bool) -> bool {
        view.summary_only || !intervals
    }
}

/// The live text of one run: the header, the interval heading before the first interval, and
/// a line (or a block) per interval, trial, test or step.
struct TextLive {
    view: View,
    heading: Option<String>,
    spec: Option<TestSpec>,
}

impl TextLive {
    fn start(&mut self, spec: &TestSpec, server: &str, embedded: bool) -> String {
        if let TestSpec::Raw(raw) = spec {
            self.heading = Some(raw_text::interval_heading(raw));
            self.spec = Some(spec.clone());
            return raw_text::header(raw, server);
        }
        // --summary-only prints nothing until the sums.
        if self.view.summary_only {
            return String::new();
        }
        self.heading = Some(text::interval_heading(spec, &self.view));
        self.spec = Some(spec.clone());
        self.view.fit(text::header(spec, server, embedded))
    }

    fn interval(&mut self, rec: &hakaru_model::IntervalRecord) -> String {
        let Some(spec) = &self.spec else {
            return String::new();
        };
        let mut s = self.heading.take().unwrap_or_default();
        match spec {
            TestSpec::Raw(_) => s += &raw_text::interval_lines(rec),
            TestSpec::Http(_) => s += &self.view.fit(http_text::interval_lines(rec, &self.view)),
            _ => s += &self.view.fit(text::interval_lines(rec, &self.view)),
        }
        if !matches!(spec, TestSpec::Raw(_)) {
            s += &self.view.fit(text::interval_warnings(rec, spec));
        }
        s
    }
}

impl Live for TextLive {
    fn item(&mut self, item: &LiveItem<'_>) -> Option<String> {
        let v = &self.view;
        Some(match item {
            LiveItem::Start {
                spec,
                server,
                embedded,
            } => self.start(spec, server, *embedded),
            LiveItem::Interval(rec) => self.interval(rec),
            LiveItem::Error(_) | LiveItem::Ready(_) | LiveItem::PlanNote(_) => return None,
            LiveItem::Released(..) => String::new(),
            LiveItem::SearchStart {
                kind,
                server,
                flows,
                loss_percent,
                trial_s,
                warmup_s,
            } => v.fit(capacity_text::header(
                kind,
                server,
                *flows,
                *loss_percent,
                *trial_s,
                *warmup_s,
            )),
            LiveItem::Trial { trial, unit } => capacity_text::trial_line(trial, unit),
            LiveItem::QuickLine(l) => v.fit(quick_text::text_line(l)),
            LiveItem::PlanHost(h) => plan_text::host_line(h),
            LiveItem::PlanStepStart(s) => {
                plan_text::step_heading(s.index, s.of, s.name, s.senders, s.receivers, s.flags)
            }
            LiveItem::PlanRelease(r) => plan_text::release_line(r),
            LiveItem::PlanRow { row, .. } => plan_text::row_line(row),
            LiveItem::PlanStepEnd(s) => plan_text::step_summary(s),
            LiveItem::NicStart {
                interfaces,
                interval,
                count,
            } => nic::intro(interfaces, *interval, *count),
            LiveItem::NicInterval(rec) => nic::interval_text(rec),
            LiveItem::SubInterval(_) if v.summary_only => return None,
            LiveItem::SubInterval(row) => {
                self.heading.take().unwrap_or_default() + &udpst_text::sub_interval(row)
            }
        })
    }
}
