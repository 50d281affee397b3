//! What an iperf3 client that asked for the server's output (`--get-server-output`) gets.

use hakaru_model::RunResult;
use serde_json::Value;

/// The server's output as text.
pub(crate) fn text(r: &RunResult) -> String {
    hakaru_report::text::summary(r)
}

/// The server's output as a JSON document.
pub(crate) fn json(r: &RunResult) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}
