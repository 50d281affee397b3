//! Wiring of renderers to the engine's observer and to stdout.

use std::io::Write;

use hakaru_engine::Observer;
use hakaru_model::{IntervalRecord, RunResult, TestSpec};
use hakaru_report::export::{Document, Live, LiveItem};
use hakaru_report::View;

pub use hakaru_report::export::Format;

/// Writes live output to stdout; a closed pipe is ignored.
pub fn out(s: &str) {
    // A closed pipe is not an error for a measurement tool's live output.
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

/// A format's live output as the engine's observer: each event goes to the format's live
/// writer and what it gives is printed.
struct LiveObserver(Box<dyn Live>);

impl Observer for LiveObserver {
    fn on_start(&mut self, spec: &TestSpec, server: &str, embedded: bool) {
        self.print(&LiveItem::Start {
            spec,
            server,
            embedded,
        });
    }
    fn on_interval(&mut self, rec: &IntervalRecord) {
        self.print(&LiveItem::Interval(rec));
    }
    fn on_error(&mut self, message: &str) {
        self.print(&LiveItem::Error(message));
    }
}

impl LiveObserver {
    fn print(&mut self, item: &LiveItem<'_>) {
        if let Some(s) = self.0.item(item) {
            out(&s);
        }
    }
}

/// A format's live output as a function of its items, for the commands that are not driven
/// by the engine (a capacity test's sub-intervals, a saved run replayed).
pub fn printer(format: Format, view: View) -> impl FnMut(&LiveItem<'_>) {
    let mut live = format.live(view);
    move |item| {
        if let Some(s) = live.item(item) {
            out(&s);
        }
    }
}

/// The live observer for a format; `view` shapes text output.
pub fn observer(format: Format, view: View) -> Box<dyn Observer> {
    Box::new(LiveObserver(format.live(view)))
}

/// Prints `doc` in `format` on stdout; a format without a form of it is an error
/// ([`hakaru_report::export::Unsupported`], a usage error: exit 2).
pub fn print(format: Format, view: View, doc: &Document<'_>) -> anyhow::Result<()> {
    let s = format.write(doc, &view)?;
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes())?;
    o.flush()?;
    Ok(())
}

/// Prints the final result; `view` shapes text output.
pub fn finish(format: Format, view: View, r: &RunResult) -> anyhow::Result<()> {
    print(format, view, &Document::Run(r))
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

/// How long a test's measurement runs, warm-up included, when it runs for a time (none
/// for an amount of data, or a run until the stream ends).
pub fn run_length(spec: &TestSpec) -> Option<std::time::Duration> {
    match spec.common().amount {
        hakaru_model::Amount::Time(d) if !d.0.is_zero() => Some(d.0 + spec.common().omit.0),
        _ => None,
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
    format.quiet_while_running(&view, !spec.common().interval.is_zero())
}
