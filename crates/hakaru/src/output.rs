//! Wiring of renderers to the engine's observer and to stdout.

use std::io::Write;

use hakaru_engine::Observer;
use hakaru_model::{IntervalRecord, RunResult, TestSpec};
use hakaru_report::{csv, iperf3_json, json, jsonl, text, View};

/// Output format chosen on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human text (default).
    Text,
    /// One JSON document at the end.
    Json,
    /// JSON Lines events as the test runs.
    JsonStream,
    /// The shape of `iperf3 -J` at the end, for its parsers (docs/iperf3-json.md).
    Iperf3Json,
    /// CSV: a row per flow and per direction each interval, totals at the end (docs/csv.md).
    Csv,
    /// CSV: the header and one total row per direction, for spreadsheets of many runs.
    CsvSummary,
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
        let lines = match spec {
            TestSpec::Http(_) => hakaru_report::http_text::interval_lines(rec, &self.view),
            _ => text::interval_lines(rec, &self.view),
        };
        out(&self.view.fit(lines));
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

/// Prints nothing live and nothing on an error (stderr has it).
struct JsonObserverQuiet;

impl Observer for JsonObserverQuiet {}

impl Observer for JsonObserver {
    fn on_error(&mut self, message: &str) {
        out(&jsonl::error(message));
    }
}

/// CSV rows as each interval ends, after the header.
struct CsvObserver {
    spec: Option<TestSpec>,
}

impl Observer for CsvObserver {
    fn on_start(&mut self, spec: &TestSpec, _server: &str, _embedded: bool) {
        out(&csv::header());
        self.spec = Some(spec.clone());
    }
    fn on_interval(&mut self, rec: &IntervalRecord) {
        if let Some(spec) = &self.spec {
            out(&csv::interval_rows(spec, rec));
        }
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
        Format::Csv => Box::new(CsvObserver { spec: None }),
        Format::CsvSummary => Box::new(JsonObserverQuiet),
    }
}

/// Prints the final result; `view` shapes text output.
pub fn finish(format: Format, view: View, r: &RunResult) -> anyhow::Result<()> {
    let s = match format {
        Format::Text => text::summary(r, &view),
        Format::Json => json::render(r),
        Format::JsonStream => jsonl::end(r),
        Format::Iperf3Json => iperf3_json::render(r),
        Format::Csv => csv::total_rows(r),
        Format::CsvSummary => csv::summary(r),
    };
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes())?;
    o.flush()?;
    Ok(())
}

/// A one-line live status on stderr ("tcp: 3.2 s of 10 s", "test 3/7: pps, 1.2 s left") for
/// runs that print nothing else while they run. Drawn only when stderr is a terminal; never
/// in pipes, files or JSON. Cleared before anything is printed and when dropped.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    state: std::sync::Arc<std::sync::Mutex<Status>>,
    ticker: Option<std::thread::JoinHandle<()>>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What the status line shows: a label and, when known, how long the current step runs.
#[derive(Default)]
struct Status {
    label: String,
    started: Option<std::time::Instant>,
    length: Option<std::time::Duration>,
}

impl Status {
    fn line(&self) -> String {
        let Some(t0) = self.started else {
            return format!("{}: setting up", self.label);
        };
        let e = t0.elapsed().as_secs_f64();
        match self.length {
            Some(l) => format!(
                "{}: {:.1} s left of {:.1} s",
                self.label,
                (l.as_secs_f64() - e).max(0.0),
                l.as_secs_f64()
            ),
            None => format!("{}: {e:.1} s", self.label),
        }
    }
}

impl Progress {
    /// A status line if `wanted` and stderr is a terminal; otherwise one that draws nothing.
    pub fn new(wanted: bool) -> Progress {
        use std::io::IsTerminal;
        let state = std::sync::Arc::new(std::sync::Mutex::new(Status::default()));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        if !wanted || !std::io::stderr().is_terminal() {
            return Progress {
                bar: None,
                state,
                ticker: None,
                done,
            };
        }
        let bar = indicatif::ProgressBar::with_draw_target(
            None,
            indicatif::ProgressDrawTarget::stderr_with_hz(10),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        let (b, st, d) = (bar.clone(), state.clone(), done.clone());
        let ticker = std::thread::Builder::new()
            .name("hakaru-progress".into())
            .spawn(move || {
                while !d.load(std::sync::atomic::Ordering::Acquire) {
                    if let Ok(s) = st.lock() {
                        if !s.label.is_empty() {
                            b.set_message(s.line());
                            b.tick();
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            })
            .ok();
        Progress {
            bar: Some(bar),
            state,
            ticker,
            done,
        }
    }

    /// A new step: `label`, not started yet.
    pub fn step(&self, label: String) {
        if let Ok(mut s) = self.state.lock() {
            *s = Status {
                label,
                started: None,
                length: None,
            };
        }
    }

    /// The current step's measurement started and runs `length` (`None`: until an amount is
    /// moved, so only the elapsed time is shown).
    pub fn started(&self, length: Option<std::time::Duration>) {
        if let Ok(mut s) = self.state.lock() {
            s.started = Some(std::time::Instant::now());
            s.length = length;
        }
    }

    /// Runs `f` (which prints) with the status line cleared, then draws it again.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Clears the line for good.
    pub fn finish(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// How long a test's measurement runs, warm-up included, when it runs for a time.
pub fn run_length(spec: &TestSpec) -> Option<std::time::Duration> {
    use hakaru_model::Amount;
    match spec {
        TestSpec::Tcp(t) => match t.amount {
            Amount::Time(d) => Some(d.0 + t.omit.0),
            _ => None,
        },
        TestSpec::Udp(u) => match u.amount {
            Amount::Time(d) => Some(d.0 + u.omit.0),
            _ => None,
        },
        TestSpec::Latency(l) => Some(l.duration.0 + l.warmup.0),
        TestSpec::Connect(c) => Some(c.duration.0),
        TestSpec::Raw(r) => r.duration.map(|d| d.0),
        TestSpec::Http(h) => h.duration.map(|d| d.0),
    }
}

/// Passes every event on to `inner` and starts the status line's clock at the test's start.
pub struct WithProgress<'a> {
    pub inner: &'a mut dyn Observer,
    pub progress: &'a Progress,
}

impl Observer for WithProgress<'_> {
    fn on_start(&mut self, spec: &TestSpec, server: &str, embedded: bool) {
        self.progress.started(run_length(spec));
        self.inner.on_start(spec, server, embedded);
    }
    fn on_interval(&mut self, rec: &IntervalRecord) {
        self.inner.on_interval(rec);
    }
    fn on_end(&mut self, result: &RunResult) {
        self.inner.on_end(result);
    }
    fn on_error(&mut self, message: &str) {
        self.inner.on_error(message);
    }
}

/// Whether a run in `format` prints nothing on stdout while it runs, so a status line helps.
pub fn is_quiet(format: Format, view: View, spec: &TestSpec) -> bool {
    match format {
        Format::Json | Format::Iperf3Json | Format::CsvSummary => true,
        Format::Csv => spec.interval().is_zero(),
        Format::JsonStream => false,
        Format::Text => view.summary_only || spec.interval().is_zero(),
    }
}
