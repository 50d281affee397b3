//! `--json`: the whole run as one pretty-printed, versioned JSON document.

use hakaru_model::RunResult;

/// Renders the result as a JSON document (with a trailing newline).
pub fn render(result: &RunResult) -> String {
    let mut s = serde_json::to_string_pretty(result)
        .unwrap_or_else(|e| format!("{{\"type\":\"error\",\"data\":{{\"message\":\"{e}\"}}}}"));
    s.push('\n');
    s
}
