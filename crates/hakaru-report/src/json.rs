//! `--json`: the whole run (or plan, or `hakaru nic`) as one pretty-printed, versioned JSON
//! document.

use hakaru_model::plan::PlanResult;
use hakaru_model::{NicInterval, NicSummary, RunResult};

/// Renders the result as a JSON document (with a trailing newline).
pub fn render(result: &RunResult) -> String {
    let mut s = serde_json::to_string_pretty(result)
        .unwrap_or_else(|e| format!("{{\"type\":\"error\",\"data\":{{\"message\":\"{e}\"}}}}"));
    s.push('\n');
    s
}

/// The plan result as one pretty-printed JSON document.
pub fn plan(p: &PlanResult) -> String {
    let mut s = serde_json::to_string_pretty(p)
        .unwrap_or_else(|e| format!("{{\"type\":\"error\",\"data\":{{\"message\":\"{e}\"}}}}"));
    s.push('\n');
    s
}

/// `hakaru nic --json`: one document with every interval and the averages.
pub fn nic(intervals: &[NicInterval], summary: &NicSummary) -> String {
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        schema_version: u32,
        test: &'a str,
        intervals: &'a [NicInterval],
        end: &'a NicSummary,
    }
    let doc = Doc {
        schema_version: hakaru_model::SCHEMA_VERSION,
        test: "nic",
        intervals,
        end: summary,
    };
    let mut s =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
