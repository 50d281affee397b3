//! The observer trait: how measurement code reports progress without printing.

use hakaru_model::{IntervalRecord, RunResult, TestSpec};

/// What a running test tells the outside world. Every method has a no-op default.
pub trait Observer: Send {
    /// The test was accepted and is about to start.
    fn on_start(&mut self, _spec: &TestSpec, _server: &str, _embedded: bool) {}
    /// One interval, merged from both ends.
    fn on_interval(&mut self, _record: &IntervalRecord) {}
    /// The test finished with this result.
    fn on_end(&mut self, _result: &RunResult) {}
    /// The test failed.
    fn on_error(&mut self, _message: &str) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl Observer for NoopObserver {}
