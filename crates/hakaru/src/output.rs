//! Wiring of renderers to the engine's observer and to stdout.

use std::io::Write;

use hakaru_engine::Observer;
use hakaru_model::{IntervalRecord, RunResult, TestSpec};
use hakaru_report::{iperf3_json, json, jsonl, text, View};

/// Output format chosen on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human text (default).
    Text,
    /// One JSON document at the end.
    Json,
    /// JSON Lines events as the test runs.
    JsonStream,
    /// The shape of `iperf3 -J`, printed at the end (TCP and UDP results).
    Iperf3Json,
}

/// Writes live output to stdout; a closed pipe is ignored.
pub fn out(s: &str) {
    // A closed pipe is not an error for a measurement tool's live output.
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

struct TextObserver {
    view: View,
    heading: Option<String>,
    spec: Option<TestSpec>,
}

impl Observer for TextObserver {
    fn on_start(&mut self, spec: &TestSpec, server: &str, embedded: bool) {
        // --summary-only prints nothing until the sums.
        if self.view.summary_only {
            return;
        }
        out(&self.view.fit(text::header(spec, server, embedded)));
        self.heading = Some(text::interval_heading(spec, &self.view));
        self.spec = Some(spec.clone());
    }
    fn on_interval(&mut self, rec: &IntervalRecord) {
        let Some(spec) = &self.spec else { return };
        if let Some(h) = self.heading.take() {
            out(&h);
        }
        out(&self.view.fit(text::interval_lines(rec, &self.view)));
        out(&self.view.fit(text::interval_warnings(rec, spec)));
    }
}

struct StreamObserver;

impl Observer for StreamObserver {
    fn on_start(&mut self, spec: &TestSpec, server: &str, embedded: bool) {
        out(&jsonl::start(spec, server, embedded));
    }
    fn on_interval(&mut self, rec: &IntervalRecord) {
        out(&jsonl::interval(rec));
    }
    fn on_error(&mut self, message: &str) {
        out(&jsonl::error(message));
    }
}

struct JsonObserver;

impl Observer for JsonObserver {
    fn on_error(&mut self, message: &str) {
        out(&jsonl::error(message));
    }
}

/// Prints nothing live, like `iperf3 -J`; a failure becomes iperf3's error document.
struct Iperf3JsonObserver;

impl Observer for Iperf3JsonObserver {
    fn on_error(&mut self, message: &str) {
        out(&iperf3_json::error_render(message));
    }
}

/// The live observer for a format; `view` shapes text output.
pub fn observer(format: Format, view: View) -> Box<dyn Observer> {
    match format {
        Format::Text => Box::new(TextObserver {
            view,
            heading: None,
            spec: None,
        }),
        Format::Json => Box::new(JsonObserver),
        Format::JsonStream => Box::new(StreamObserver),
        Format::Iperf3Json => Box::new(Iperf3JsonObserver),
    }
}

/// Prints the final result; `view` shapes text output.
pub fn finish(format: Format, view: View, r: &RunResult) -> anyhow::Result<()> {
    let s = match format {
        Format::Text => text::summary(r, &view),
        Format::Json => json::render(r),
        Format::JsonStream => jsonl::end(r),
        Format::Iperf3Json => iperf3_json::render(r),
    };
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes())?;
    o.flush()?;
    Ok(())
}
