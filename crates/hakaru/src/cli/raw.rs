//! What `hakaru sink` and `hakaru source` share: output (to stderr when stdout carries the
//! data) and interval wiring; the client's `local::raw` makes the records and the result.

use std::io::Write;
use std::sync::{Arc, Mutex};

use hakaru_engine::raw::{RawOutcome, SampleFn};
use hakaru_model::{IntervalRecord, RawSpec, RunResult, TestSpec};
use hakaru_report::export::{DocKind, Document, Live, LiveItem};
use hakaru_report::View;

use crate::output::Format;

/// Where a raw run's report goes and in which format.
#[derive(Clone)]
pub struct RawOutput {
    format: Format,
    /// The format's live writer, shared with the interval callback.
    live: Arc<Mutex<Box<dyn Live>>>,
    /// True when stdout carries received data (`sink --stdout`): reports go to stderr.
    to_stderr: bool,
    /// Several transfers (`sink --keep`) in a format that writes several results as one
    /// document (`--json`: one JSON array): each result is held, and all are printed by
    /// [`RawOutput::finish_all`].
    hold: bool,
    intervals: Arc<Mutex<Vec<IntervalRecord>>>,
}

impl RawOutput {
    /// Output in `format`; `data_on_stdout` moves every report to stderr.
    pub fn new(format: Format, data_on_stdout: bool) -> RawOutput {
        RawOutput {
            format,
            live: Arc::new(Mutex::new(format.live(View::default()))),
            to_stderr: data_on_stdout,
            hold: false,
            intervals: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn emit(&self, s: &str) {
        // A closed pipe is not an error for a measurement tool's live output.
        if self.to_stderr {
            let mut o = std::io::stderr().lock();
            let _ = o.write_all(s.as_bytes());
            let _ = o.flush();
        } else {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(s.as_bytes());
            let _ = o.flush();
        }
    }

    /// Several transfers to one output (`sink --keep`): in a format that writes several
    /// results as one document (`--json`: one JSON array), hold each result and print them
    /// together at the end ([`RawOutput::finish_all`]), so that stdout is one document. Other
    /// formats print as they go.
    pub fn several(mut self) -> RawOutput {
        self.hold = self.format.supports(DocKind::Runs);
        self
    }

    /// After the last transfer: with [`RawOutput::several`] in such a format, prints every
    /// result as one document (an empty one when no transfer came).
    pub fn finish_all(&self, results: &[RunResult]) {
        if self.hold {
            if let Ok(s) = self
                .format
                .write(&Document::Runs(results), &View::default())
            {
                self.emit(&s);
            }
        }
    }

    /// Prints what the format has live for `item`.
    fn live(&self, item: &LiveItem<'_>) {
        let s = match self.live.lock() {
            Ok(mut l) => l.item(item),
            Err(_) => None,
        };
        if let Some(s) = s {
            self.emit(&s);
        }
    }

    /// The opening line (text) or start event (JSON Lines).
    pub fn start(&self, spec: &RawSpec, addr: &str) {
        self.live(&LiveItem::Start {
            spec: &TestSpec::Raw(spec.clone()),
            server: addr,
            embedded: false,
        });
    }

    /// The interval callback for the engine: samples become records, printed and kept.
    pub fn on_sample(&self, spec: &RawSpec) -> SampleFn {
        let me = self.clone();
        let spec = spec.clone();
        if let Ok(mut v) = self.intervals.lock() {
            v.clear();
        }
        Box::new(move |sample| {
            let rec = hakaru_client::local::raw::interval(&spec, &sample);
            me.live(&LiveItem::Interval(&rec));
            if let Ok(mut v) = me.intervals.lock() {
                v.push(rec);
            }
        })
    }

    /// Prints the final result and returns it.
    pub fn finish(&self, spec: &RawSpec, local: &str, o: RawOutcome) -> RunResult {
        let intervals = self
            .intervals
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        let r = hakaru_client::local::raw::result(spec, local, o, intervals);
        if !self.hold {
            if let Ok(s) = self.format.write(&Document::Run(&r), &View::default()) {
                self.emit(&s);
            }
        }
        r
    }
}
