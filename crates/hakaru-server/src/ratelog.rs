//! Log lines about strangers, at most one a second per kind: a flood of refused connections
//! or stray datagrams is counted in full (metrics) but cannot fill the log. The line that is
//! written says how many of its kind were left out since the last one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a kind of line may be written.
const PERIOD: Duration = Duration::from_secs(1);

/// Per-kind state: when a line was last written and how many were left out since.
#[derive(Debug, Default)]
pub(crate) struct RateLog {
    kinds: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl RateLog {
    /// The text to write for a line of `kind` now, with the count of those left out, or
    /// `None` when one of that kind was written less than a second ago.
    pub(crate) fn admit(
        &self,
        kind: &'static str,
        line: impl FnOnce() -> String,
    ) -> Option<String> {
        self.admit_at(kind, Instant::now(), line)
    }

    fn admit_at(
        &self,
        kind: &'static str,
        now: Instant,
        line: impl FnOnce() -> String,
    ) -> Option<String> {
        let mut m = self.kinds.lock().ok()?;
        let more = match m.get_mut(kind) {
            Some((last, skipped)) if now.duration_since(*last) < PERIOD => {
                *skipped += 1;
                return None;
            }
            Some((last, skipped)) => {
                *last = now;
                std::mem::take(skipped)
            }
            None => {
                m.insert(kind, (now, 0));
                0
            }
        };
        drop(m);
        let text = line();
        Some(if more > 0 {
            format!("{text} ({more} more like it in the last second, not logged)")
        } else {
            text
        })
    }

    /// [`RateLog::admit`], written at warn level.
    pub(crate) fn warn(&self, kind: &'static str, line: impl FnOnce() -> String) {
        if let Some(l) = self.admit(kind, line) {
            tracing::warn!("{l}");
        }
    }

    /// [`RateLog::admit`], written at info level.
    pub(crate) fn info(&self, kind: &'static str, line: impl FnOnce() -> String) {
        if let Some(l) = self.admit(kind, line) {
            tracing::info!("{l}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_per_kind_with_the_count_left_out() {
        let r = RateLog::default();
        let t0 = Instant::now();
        assert_eq!(r.admit_at("stray", t0, || "a".into()).as_deref(), Some("a"));
        for _ in 0..1000 {
            assert!(r
                .admit_at("stray", t0 + Duration::from_millis(500), || "b".into())
                .is_none());
        }
        // Another kind has its own second.
        assert!(r.admit_at("refused", t0, || "c".into()).is_some());
        let l = r.admit_at("stray", t0 + Duration::from_millis(1001), || "d".into());
        assert_eq!(
            l.as_deref(),
            Some("d (1000 more like it in the last second, not logged)")
        );
        assert!(r
            .admit_at("stray", t0 + Duration::from_millis(1500), || "e".into())
            .is_none());
    }
}
